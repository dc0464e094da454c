//! The break-glass search: every object in the cluster that carries
//! driftguard's break-glass annotations, and what each grants.

use kube::api::ObjectMeta;
use serde::Serialize;
use serde_json::json;

use super::Listing;
use crate::drift::breakglass_state;
use crate::plugin::PluginError;
use crate::plugin::api::{Api, Resource};

/// An object carrying driftguard's break-glass annotations.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BreakGlassEntry {
    /// `KIND NAMESPACE/NAME`.
    pub object: String,
    pub api_version: String,
    pub kind: String,
    /// Null for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
    pub reason: Option<String>,
    pub expires: Option<String>,
    pub state: &'static str,
    /// Why it grants nothing; null when active.
    pub why: Option<String>,
    /// What `kubectl driftguard break-glass` paused for it, if anything.
    pub paused: Option<String>,
}

/// How far the break-glass search got.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Scan {
    pub(super) types_listed: usize,
    /// The fields below are absent when discovery itself failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) types_not_readable: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) not_readable: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) failed: Option<Vec<String>>,
}

/// Every object in the cluster that carries driftguard's break-glass
/// annotations, found by listing each listable resource type (metadata only)
/// in every namespace, not through `BreakGlassUsed` Events (they expire long
/// before a break-glass may): `activeBreakGlass` (expiry in the future),
/// `expiredBreakGlass` (expired or unreadable expiry, annotations left) and
/// `breakGlassScan` (types listed, types not readable). When discovery itself
/// fails, `activeBreakGlass` is why (a string).
pub(super) async fn break_glass_scan(
    api: &Api,
    policy: &crate::policy::Policy,
) -> Result<(Listing<BreakGlassEntry>, Vec<BreakGlassEntry>, Scan), PluginError> {
    use futures_util::stream::{self, StreamExt};
    let types = match api.listable().await {
        Ok(types) => types,
        Err(PluginError::Access(why)) => {
            return Ok((Listing::NotReadable(why), Vec::new(), Scan::default()));
        }
        Err(e) => return Err(e),
    };
    let lists: Vec<_> = stream::iter(types)
        .map(|r| async move {
            let list = api.list_metadata(&r).await;
            (r, list)
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let now = jiff::Timestamp::now();
    let (mut active, mut expired, mut forbidden, mut failed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut listed = 0;
    for (resource, list) in lists {
        let name = resource.qualified();
        let items = match list? {
            Ok(items) => items,
            Err(r) if r.code == 403 => {
                forbidden.push(name);
                continue;
            }
            Err(r) => {
                failed.push(format!("{name}: {}", r.message));
                continue;
            }
        };
        listed += 1;
        for item in &items {
            if let Some((state, entry)) = break_glass_entry(&resource, item, policy, now) {
                if state.grants() {
                    active.push(entry);
                } else {
                    expired.push(entry);
                }
            }
        }
    }
    let key = |e: &BreakGlassEntry| e.object.clone();
    active.sort_by_key(key);
    expired.sort_by_key(key);
    forbidden.sort();
    let scan = Scan {
        types_listed: listed,
        types_not_readable: Some(forbidden.len()),
        not_readable: Some(forbidden),
        failed: Some(failed),
    };
    Ok((Listing::Found(active), expired, scan))
}

/// One listed object's break-glass state and its entry, unless it has none.
pub(crate) fn break_glass_entry(
    resource: &Resource,
    meta: &ObjectMeta,
    policy: &crate::policy::Policy,
    now: jiff::Timestamp,
) -> Option<(breakglass_state::State, BreakGlassEntry)> {
    use crate::drift::breakglass_state::{EXPIRES, PAUSED, REASON};
    let object = json!({"kind": resource.kind, "metadata": meta});
    let state = breakglass_state::state(
        &crate::drift::inputs::Inputs::read(&object, policy),
        policy,
        now,
    );
    if state == breakglass_state::State::None {
        return None;
    }
    let name = meta.name.clone().unwrap_or_default();
    let ns = meta.namespace.clone().filter(|ns| !ns.is_empty());
    let shown_ns = ns.as_deref().map(|ns| format!("{ns}/")).unwrap_or_default();
    let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key)).cloned();
    let entry = BreakGlassEntry {
        object: format!("{} {shown_ns}{name}", resource.kind),
        api_version: resource.api_version(),
        kind: resource.kind.clone(),
        namespace: ns,
        name,
        reason: annotation(REASON),
        expires: annotation(EXPIRES),
        state: state.name(),
        why: state.why_not(),
        paused: annotation(PAUSED),
    };
    Some((state, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_objects_break_glass_is_active_expired_invalid_or_none() {
        let cm = Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
        };
        let now: jiff::Timestamp = "2030-01-01T12:00:00Z".parse().unwrap();
        let policy = crate::policy::Policy::embedded();
        let item = |expires: &str| {
            json!({"metadata": {"name": "settings", "namespace": "production",
                "annotations": {"driftguard.io/break-glass": "INC-1",
                                "driftguard.io/break-glass-expires": expires}}})
        };
        let meta = |v: serde_json::Value| -> ObjectMeta {
            serde_json::from_value(v["metadata"].clone()).unwrap()
        };
        let (state, e) =
            break_glass_entry(&cm, &meta(item("2030-01-01T15:59:00Z")), &policy, now).unwrap();
        assert_eq!(state.name(), "active");
        assert_eq!(e.object, "ConfigMap production/settings");
        assert_eq!(e.api_version, "v1");
        assert_eq!(e.reason.as_deref(), Some("INC-1"));
        assert_eq!(e.expires.as_deref(), Some("2030-01-01T15:59:00Z"));
        assert_eq!(e.paused, None);
        let v = serde_json::to_value(&e).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "apiVersion",
                "expires",
                "kind",
                "name",
                "namespace",
                "object",
                "paused",
                "reason",
                "state",
                "why"
            ]
        );
        let mut paused = item("2030-01-01T15:59:00Z");
        paused["metadata"]["annotations"]["driftguard.io/break-glass-paused"] =
            json!("kustomize.toolkit.fluxcd.io/reconcile");
        let (_, e) = break_glass_entry(&cm, &meta(paused), &policy, now).unwrap();
        assert_eq!(
            e.paused.as_deref(),
            Some("kustomize.toolkit.fluxcd.io/reconcile")
        );
        let (state, _) =
            break_glass_entry(&cm, &meta(item("2030-01-01T11:00:00Z")), &policy, now).unwrap();
        assert_eq!(state.name(), "expired");
        let (state, _) = break_glass_entry(&cm, &meta(item("tomorrow")), &policy, now).unwrap();
        assert_eq!(state.name(), "invalid");
        let plain = json!({"metadata": {"name": "x", "namespace": "production"}});
        assert!(break_glass_entry(&cm, &meta(plain), &policy, now).is_none());

        let ns = Resource {
            group: String::new(),
            version: "v1".into(),
            kind: "Namespace".into(),
            plural: "namespaces".into(),
            namespaced: false,
        };
        let item = json!({"metadata": {"name": "production",
            "annotations": {"driftguard.io/break-glass-expires": "2030-01-01T13:00:00Z"}}});
        let (_, e) = break_glass_entry(&ns, &meta(item), &policy, now).unwrap();
        assert_eq!(e.object, "Namespace production");
        assert_eq!(serde_json::to_value(&e).unwrap()["namespace"], json!(null));
        assert_eq!(ns.qualified(), "namespaces");
    }
}
