//! The parent of a `…/scale` write, read from the apiserver: a Scale carries no
//! labels or annotations, so ownership and rules come from the parent. A
//! scaler's target ([`crate::drift::deputy`]) is read the same way. Any
//! scalable resource is read through the dynamic `Api` from the request's
//! group, version and resource (no discovery needed). Each read is bounded in
//! time, and results are cached briefly so that a burst of scale writes costs
//! one read.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::bounded::BoundedMap;

/// The parent cache's budget: whole objects (up to about 1.5 MiB each in
/// etcd) are kept for seconds, so a burst of scale writes to many large
/// objects must not hold them all.
const CACHE_BYTES: usize = 16 << 20;
const CACHE_ENTRIES: usize = 10_000;

/// Why the parent could not be read; the decision then applies `unknownScaleParent`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ParentError {
    /// The apiserver did not answer within the bound.
    #[error("reading {what} took longer than {timeout:?}")]
    Timeout { what: String, timeout: Duration },
    /// The apiserver refused or failed the read (not found, forbidden, …).
    #[error("reading {what}: {source}")]
    Api { what: String, source: kube::Error },
    /// Discovery does not list the kind (a scaler's target).
    #[error("no resource of kind {kind} in group '{group}'")]
    UnknownKind { group: String, kind: String },
    /// The object read does not serialize back to JSON.
    #[error("reading {what}: {source}")]
    Json {
        what: String,
        source: serde_json::Error,
    },
}

/// Reads the parent of a `…/scale` write (a Deployment, say), with a
/// time bound and a short-lived cache.
pub struct ParentReader {
    client: kube::Client,
    timeout: Duration,
    ttl: Duration,
    cache: Mutex<BoundedMap<Value>>,
    /// `group/Kind` → (version, resource), from discovery; kinds do not move.
    resources: Mutex<HashMap<String, (String, String)>>,
}

impl ParentReader {
    /// A reader through `client`: each read bounded by `timeout`, each parent
    /// read kept for `ttl`.
    pub fn new(client: kube::Client, timeout: Duration, ttl: Duration) -> Self {
        Self {
            client,
            timeout,
            ttl,
            cache: Mutex::new(BoundedMap::new(CACHE_BYTES, CACHE_ENTRIES)),
            resources: Mutex::new(HashMap::new()),
        }
    }

    /// The object `group/version/resource` `namespace/name`, or why not.
    pub(crate) async fn read(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ParentError> {
        let what = format!("{resource}.{group}/{version} {namespace}/{name}");
        if let Some(hit) = self.cached(&what) {
            return Ok(hit);
        }
        // A scale request names the parent's resource, not its kind (the
        // request's kind is Scale); the GET needs only the plural.
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, ""), resource);
        let api = if namespace.is_empty() {
            Api::<DynamicObject>::all_with(self.client.clone(), &ar)
        } else {
            Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &ar)
        };
        let object = match tokio::time::timeout(self.timeout, api.get(name)).await {
            Err(_) => {
                return Err(ParentError::Timeout {
                    what,
                    timeout: self.timeout,
                });
            }
            Ok(Err(source)) => return Err(ParentError::Api { what, source }),
            Ok(Ok(object)) => object,
        };
        let value = match serde_json::to_value(&object) {
            Ok(value) => value,
            Err(source) => return Err(ParentError::Json { what, source }),
        };
        remember(
            &mut self.cache.lock().unwrap_or_else(|e| e.into_inner()),
            what,
            &value,
            self.ttl,
        );
        Ok(value)
    }

    /// The object of kind `group/kind` `namespace/name`: a scaler names its
    /// target by kind, so the resource comes from a table of the built-in
    /// scalable kinds, else from discovery (as the HPA controller maps it:
    /// the group's preferred version).
    pub(crate) async fn read_kind(
        &self,
        group: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ParentError> {
        let (version, resource) = match crate::drift::deputy::builtin_plural(group, kind) {
            Some(plural) => ("v1".to_owned(), plural.to_owned()),
            None => self.discover(group, kind).await?,
        };
        self.read(group, &version, &resource, namespace, name).await
    }

    async fn discover(&self, group: &str, kind: &str) -> Result<(String, String), ParentError> {
        let key = format!("{group}/{kind}");
        if let Some(hit) = self.lock_resources().get(&key) {
            return Ok(hit.clone());
        }
        let what = format!("discovery of {key}");
        let found =
            match tokio::time::timeout(self.timeout, kube::discovery::group(&self.client, group))
                .await
            {
                Err(_) => {
                    return Err(ParentError::Timeout {
                        what,
                        timeout: self.timeout,
                    });
                }
                Ok(Err(source)) => return Err(ParentError::Api { what, source }),
                Ok(Ok(api_group)) => api_group.recommended_kind(kind),
            };
        let Some((ar, _)) = found else {
            return Err(ParentError::UnknownKind {
                group: group.to_owned(),
                kind: kind.to_owned(),
            });
        };
        let found = (ar.version, ar.plural);
        let mut resources = self.lock_resources();
        if resources.len() > 1_000 {
            resources.clear();
        }
        resources.insert(key, found.clone());
        Ok(found)
    }

    fn lock_resources(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, String)>> {
        self.resources.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cached(&self, key: &str) -> Option<Value> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get_mut(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }
}

/// Caches a parent, counted at its JSON size, unless the cache is full of
/// fresher ones (the read is then simply not cached).
fn remember(cache: &mut BoundedMap<Value>, what: String, value: &Value, ttl: Duration) {
    let bytes = serde_json::to_string(value).map_or(usize::MAX, |s| s.len());
    cache.insert(what, value.clone(), bytes, ttl);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Large parents under many names: the cache stays within its budget.
    #[test]
    fn the_cache_is_bounded_in_bytes() {
        let mut cache = BoundedMap::new(CACHE_BYTES, CACHE_ENTRIES);
        let big = json!({"metadata": {"annotations": {"a": "x".repeat(1 << 20)}}});
        for i in 0..300 {
            remember(
                &mut cache,
                format!("deployments.apps/v1 default/{i}{}", "n".repeat(1 << 20)),
                &big,
                Duration::from_secs(60),
            );
            assert!(cache.bytes() <= CACHE_BYTES, "{} bytes", cache.bytes());
        }
        assert!(cache.len() >= 7, "{} cached", cache.len());
    }

    /// The parent reaches the decision as the apiserver sent it: going
    /// through `DynamicObject` loses nothing.
    #[test]
    fn a_parent_survives_dynamic_object() {
        let sent = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "u",
                "creationTimestamp": "2025-01-02T03:04:05Z",
                "labels": {"app": "web"}, "annotations": {"argocd.argoproj.io/tracking-id": "a:apps/Deployment:default/web"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "v", "controller": true}],
                "managedFields": [{"manager": "argocd-controller", "operation": "Apply", "apiVersion": "apps/v1",
                    "time": "2025-01-02T03:04:05Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
            "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}}}},
            "status": {"replicas": 3}});
        let object: DynamicObject = serde_json::from_value(sent.clone()).unwrap();
        assert_eq!(serde_json::to_value(&object).unwrap(), sent);
    }
}
