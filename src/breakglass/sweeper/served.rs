//! Where a recorded object is read: by its group and resource, at the
//! version discovery prefers now. A record keeps the version its arming was
//! written with, and a CRD may stop serving it; read there, every request is
//! a plain-text 404 that says nothing of why. Answers are kept for [`TTL`],
//! and only for the groups records name: never a discovery of every type.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::api::ApiResource;

/// How long one discovery answer is used.
const TTL: Duration = Duration::from_secs(30);

/// Where (group, resource) is served now.
#[derive(Debug)]
pub(super) enum Found {
    /// At this version (the preferred one that serves it).
    At(ApiResource),
    /// By no version: the group or the resource is not served (a CRD
    /// removed, or its versions no longer served).
    Unserved,
    /// Discovery failed: nothing known.
    Failed(kube::Error),
}

/// A served group's versions, the preferred first.
type Versions = Vec<String>;
/// A served version's resources: (plural, kind).
type Resources = Vec<(String, String)>;

/// Discovery answers, each with when it was read.
#[derive(Default)]
struct Cache {
    groups: Option<(Instant, BTreeMap<String, Versions>)>,
    resources: BTreeMap<String, (Instant, Resources)>,
}

/// The discovery the sweeper reads records' types through.
pub(super) struct Served {
    client: kube::Client,
    cache: Mutex<Cache>,
}

impl Served {
    pub fn new(client: kube::Client) -> Self {
        Served {
            client,
            cache: Mutex::default(),
        }
    }

    /// Where `group`'s resource `plural` is served now.
    pub async fn resource(&self, group: &str, plural: &str) -> Found {
        let versions = match self.versions(group).await {
            Ok(Some(versions)) => versions,
            Ok(None) => return Found::Unserved,
            Err(e) => return Found::Failed(e),
        };
        for version in versions {
            let api_version = match group {
                "" => version.clone(),
                g => format!("{g}/{version}"),
            };
            let resources = match self.resources(&api_version).await {
                Ok(resources) => resources,
                Err(e) => return Found::Failed(e),
            };
            if let Some(ar) = pick(group, &version, &resources, plural) {
                return Found::At(ar);
            }
        }
        Found::Unserved
    }

    /// Forgets what was read of `api_version` (and the group list): a read
    /// there found it not served after all.
    pub fn forget(&self, api_version: &str) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.resources.remove(api_version);
        cache.groups = None;
    }

    /// `group`'s served versions, the preferred first; `None`: not served.
    async fn versions(&self, group: &str) -> Result<Option<Versions>, kube::Error> {
        if group.is_empty() {
            // The core group has one version, served by every apiserver.
            return Ok(Some(vec!["v1".to_owned()]));
        }
        let fresh = |at: &Instant| at.elapsed() < TTL;
        if let Some((_, groups)) = self.lock().groups.as_ref().filter(|(at, _)| fresh(at)) {
            return Ok(groups.get(group).cloned());
        }
        let list = self.client.list_api_groups().await?;
        let groups: BTreeMap<String, Versions> = (list.groups.into_iter())
            .map(|g| {
                let preferred = g.preferred_version.map(|p| p.version);
                let rest = g.versions.into_iter().map(|v| v.version);
                let mut versions: Versions = preferred.into_iter().collect();
                for v in rest {
                    if !versions.contains(&v) {
                        versions.push(v);
                    }
                }
                (g.name, versions)
            })
            .collect();
        let found = groups.get(group).cloned();
        self.lock().groups = Some((Instant::now(), groups));
        Ok(found)
    }

    /// The resources served at `api_version`.
    async fn resources(&self, api_version: &str) -> Result<Resources, kube::Error> {
        {
            let mut cache = self.lock();
            cache.resources.retain(|_, (at, _)| at.elapsed() < TTL);
            if let Some((_, resources)) = cache.resources.get(api_version) {
                return Ok(resources.clone());
            }
        }
        let list = match api_version.split_once('/') {
            None => self.client.list_core_api_resources(api_version).await,
            Some(_) => self.client.list_api_group_resources(api_version).await,
        };
        let resources = match list {
            Ok(list) => resources_of(list),
            // Listed in the group a moment ago, not served now.
            Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut cache = self.lock();
        cache
            .resources
            .insert(api_version.to_owned(), (Instant::now(), resources.clone()));
        Ok(resources)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The top-level resources (no subresources) of one version, as (plural, kind).
fn resources_of(list: APIResourceList) -> Resources {
    (list.resources.into_iter())
        .filter(|r| !r.name.contains('/'))
        .map(|r| (r.name, r.kind))
        .collect()
}

/// `plural` of `group` at `version`, if `resources` (that version's) has it.
fn pick(group: &str, version: &str, resources: &Resources, plural: &str) -> Option<ApiResource> {
    let (plural, kind) = resources.iter().find(|(p, _)| p == plural)?;
    Some(ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: match group {
            "" => version.to_owned(),
            g => format!("{g}/{version}"),
        },
        kind: kind.clone(),
        plural: plural.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_is_picked_only_where_its_version_serves_it() {
        let v2: Resources = vec![("widgets".into(), "Widget".into())];
        let ar = pick("example.com", "v2", &v2, "widgets").expect("served at v2");
        assert_eq!(
            (ar.api_version.as_str(), ar.kind.as_str()),
            ("example.com/v2", "Widget")
        );
        assert!(pick("example.com", "v2", &v2, "gadgets").is_none());
        let core = pick(
            "",
            "v1",
            &vec![("configmaps".into(), "ConfigMap".into())],
            "configmaps",
        );
        assert_eq!(core.unwrap().api_version, "v1");
    }
}
