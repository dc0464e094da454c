//! Changes to what decides how writes are judged: driftguard's policy
//! ConfigMap, its Deployment and its webhook configurations. The webhook
//! judges none of them (the chart excludes its own namespace, and the
//! apiserver never sends webhook configurations to webhooks), so RBAC alone
//! guards them (docs/gitops.md, "Who must not write what driftguard reads").
//! This makes every change seen: an audit line, a Warning Event
//! `GuardedObjectChanged`, and `driftguard_guarded_changes_total`, on which
//! the chart's alert fires.
//!
//! Each object is watched by name (RBAC `resourceNames` authorize the
//! list and watch). Only what decides counts: a ConfigMap's data, a
//! Deployment's spec, a webhook configuration's webhooks; a status or label
//! change is none. The first list is the baseline; a relist after a broken
//! watch compares with the last state seen, so a change made while the
//! watch was down is still reported. Every replica watches; the Event's name
//! is derived from the change, so replicas write one Event, not one each.

use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use serde_json::Value;

use super::events::{EventRecorder, Report};
use super::registration::Webhooks;
use crate::audit::GuardedChangeRecord;
use crate::metrics::{GuardKindLabels, GuardLabels, Metrics};

/// The reason of the Warning Event a change raises.
pub(crate) const REASON: &str = "GuardedObjectChanged";

/// `--guard-*`: which objects are driftguard's own.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Guarded {
    /// Namespace of driftguard's policy ConfigMap and Deployment (the release namespace).
    #[arg(long, env = "DRIFTGUARD_GUARD_NAMESPACE")]
    pub guard_namespace: Option<String>,
    /// driftguard's policy ConfigMap: a change of its data is audited and raises an Event.
    #[arg(long, env = "DRIFTGUARD_GUARD_CONFIGMAP", requires = "guard_namespace")]
    pub guard_configmap: Option<String>,
    /// driftguard's Deployment: a change of its spec is audited and raises an Event.
    #[arg(
        long,
        env = "DRIFTGUARD_GUARD_DEPLOYMENT",
        requires = "guard_namespace"
    )]
    pub guard_deployment: Option<String>,
    /// driftguard's Validating- and MutatingWebhookConfiguration (one name for
    /// both): a change of their webhooks, or their deletion, is audited and
    /// raises an Event.
    #[arg(long, env = "DRIFTGUARD_GUARD_WEBHOOK_CONFIGURATION")]
    pub guard_webhook_configuration: Option<String>,
}

impl Guarded {
    /// The objects to watch: (kind, namespace, name).
    fn targets(&self) -> Vec<Target> {
        let namespace = self.guard_namespace.clone().unwrap_or_default();
        let mut targets = Vec::new();
        if let Some(name) = &self.guard_configmap {
            targets.push(Target::namespaced::<ConfigMap>(&namespace, name));
        }
        if let Some(name) = &self.guard_deployment {
            targets.push(Target::namespaced::<Deployment>(&namespace, name));
        }
        if let Some(name) = &self.guard_webhook_configuration {
            targets.push(Target::cluster::<ValidatingWebhookConfiguration>(name));
            targets.push(Target::cluster::<MutatingWebhookConfiguration>(name));
        }
        targets
    }
}

/// One watched object.
#[derive(Clone, Debug)]
struct Target {
    resource: ApiResource,
    kind: &'static str,
    namespace: Option<String>,
    name: String,
}

impl Target {
    fn namespaced<K: kube::Resource<DynamicType = ()> + k8s_openapi::Resource>(
        namespace: &str,
        name: &str,
    ) -> Self {
        Self {
            resource: ApiResource::erase::<K>(&()),
            kind: K::KIND,
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    fn cluster<K: kube::Resource<DynamicType = ()> + k8s_openapi::Resource>(name: &str) -> Self {
        Self {
            resource: ApiResource::erase::<K>(&()),
            kind: K::KIND,
            namespace: None,
            name: name.to_owned(),
        }
    }
}

/// The part of an object that decides how writes are judged, by kind.
pub(crate) fn deciding_part(kind: &str, object: &Value) -> Value {
    let pick = |fields: &[&str]| {
        let picked: serde_json::Map<String, Value> = fields
            .iter()
            .filter_map(|f| Some(((*f).to_owned(), object.get(*f)?.clone())))
            .collect();
        Value::Object(picked)
    };
    match kind {
        "ConfigMap" => pick(&["data", "binaryData"]),
        "Deployment" => pick(&["spec"]),
        _ => pick(&["webhooks"]),
    }
}

/// A digest of the deciding part; `serde_json::Map` is ordered by key, so
/// the same content always has the same digest.
fn digest_of(kind: &str, object: &DynamicObject) -> String {
    let part = deciding_part(kind, &object.data);
    crate::policy::digest(&part.to_string())
}

/// What happened to a watched object between two states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    /// `created`, `changed` or `deleted`.
    pub(crate) what: &'static str,
    /// The deciding digest before, if the object existed.
    pub(crate) before: Option<String>,
    /// The deciding digest after, if the object exists.
    pub(crate) after: Option<String>,
}

/// Follows one object's deciding digest across watch events: `None` until
/// the first list completes; then `Some(None)` when absent.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    known: Option<Option<String>>,
    listing: Option<String>,
}

impl Tracker {
    /// A relist begins.
    pub(crate) fn init(&mut self) {
        self.listing = None;
    }

    /// The relist found the object with this digest.
    pub(crate) fn listed(&mut self, digest: String) {
        self.listing = Some(digest);
    }

    /// The relist is complete: a change since the last state seen, if any.
    pub(crate) fn listed_all(&mut self) -> Option<Change> {
        let now = self.listing.take();
        self.move_to(now)
    }

    /// The object was created or changed: its new digest.
    pub(crate) fn applied(&mut self, digest: String) -> Option<Change> {
        self.move_to(Some(digest))
    }

    /// Whether the object exists, once the first list completed.
    pub(crate) fn present(&self) -> Option<bool> {
        self.known.as_ref().map(Option::is_some)
    }

    /// The object was deleted.
    pub(crate) fn deleted(&mut self) -> Option<Change> {
        self.move_to(None)
    }

    fn move_to(&mut self, now: Option<String>) -> Option<Change> {
        let before = self.known.replace(now.clone())?;
        let what = match (&before, &now) {
            (a, b) if a == b => return None,
            (None, _) => "created",
            (_, None) => "deleted",
            _ => "changed",
        };
        Some(Change {
            what,
            before,
            after: now,
        })
    }
}

/// Starts one watch per guarded object; the webhook configurations' latest
/// states go to `webhooks` (the registration check).
pub(crate) fn spawn(
    client: kube::Client,
    guarded: &Guarded,
    events: Option<Arc<EventRecorder>>,
    metrics: Arc<Metrics>,
    webhooks: Option<tokio::sync::watch::Sender<Webhooks>>,
) {
    for target in guarded.targets() {
        let api = match &target.namespace {
            Some(ns) => Api::<DynamicObject>::namespaced_with(client.clone(), ns, &target.resource),
            None => Api::<DynamicObject>::all_with(client.clone(), &target.resource),
        };
        let config = watcher::Config::default().fields(&format!("metadata.name={}", target.name));
        let (events, metrics) = (events.clone(), metrics.clone());
        let webhooks = webhooks.clone();
        tokio::spawn(async move {
            let mut stream = watch(api, config).default_backoff().boxed();
            let mut tracker = Tracker::default();
            // The object as last seen, and as the relist in progress finds it.
            let (mut latest, mut listing) = (None, None);
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(e) => {
                        tracing::warn!(kind = target.kind, name = %target.name, error = %e,
                            "cannot watch a guarded object: its changes go unreported until the watch recovers");
                        continue;
                    }
                };
                let (change, object) = match event {
                    Event::Init => {
                        tracker.init();
                        listing = None;
                        (None, None)
                    }
                    Event::InitApply(o) => {
                        tracker.listed(digest_of(target.kind, &o));
                        listing = Some(o.clone());
                        (None, Some(o))
                    }
                    Event::InitDone => {
                        latest = listing.take();
                        (tracker.listed_all(), None)
                    }
                    Event::Apply(o) => {
                        latest = Some(o.clone());
                        (tracker.applied(digest_of(target.kind, &o)), Some(o))
                    }
                    Event::Delete(o) => {
                        latest = None;
                        (tracker.deleted(), Some(o))
                    }
                };
                if let (Some(webhooks), Some(_)) = (&webhooks, tracker.present()) {
                    webhooks.send_modify(|w| w.set(target.kind, latest.clone()));
                }
                if let Some(present) = tracker.present() {
                    metrics
                        .guarded_present
                        .get_or_create(&GuardKindLabels { kind: target.kind })
                        .set(i64::from(present));
                }
                if let Some(change) = change {
                    report(&target, &change, object.as_ref(), events.as_ref(), &metrics);
                }
            }
        });
    }
}

/// The field manager of the newest entry in managedFields. Client-chosen:
/// a hint for the reader, never an identity (the apiserver's audit log has
/// the user).
fn last_field_manager(object: Option<&DynamicObject>) -> Option<String> {
    let fields = object?.metadata.managed_fields.as_ref()?;
    fields
        .iter()
        .max_by(|a, b| {
            a.time
                .as_ref()
                .map(|t| t.0)
                .cmp(&b.time.as_ref().map(|t| t.0))
        })
        .and_then(|f| f.manager.clone())
}

fn report(
    target: &Target,
    change: &Change,
    object: Option<&DynamicObject>,
    events: Option<&Arc<EventRecorder>>,
    metrics: &Metrics,
) {
    metrics
        .guarded_changes
        .get_or_create(&GuardLabels {
            kind: target.kind,
            change: change.what,
        })
        .inc();
    let manager = last_field_manager(object);
    let resource_version = object.and_then(|o| o.metadata.resource_version.clone());
    GuardedChangeRecord {
        time: jiff::Timestamp::now().to_string(),
        guarded: change.what,
        kind: target.kind,
        namespace: target.namespace.as_deref().unwrap_or_default(),
        name: &target.name,
        before: change.before.as_deref(),
        after: change.after.as_deref(),
        resource_version: resource_version.as_deref(),
        field_manager: manager.as_deref(),
    }
    .emit();
    tracing::warn!(kind = target.kind, namespace = ?target.namespace, name = %target.name,
        change = change.what, "a guarded object changed");
    let Some(events) = events else { return };
    let part = match target.kind {
        "ConfigMap" => "its data",
        "Deployment" => "its spec",
        _ => "its webhooks",
    };
    let by = manager.map_or_else(String::new, |m| {
        format!(" Last field manager: {m:?} (chosen by the client; the apiserver's audit log names the user).")
    });
    let note = format!(
        "driftguard's own {} {} was {} ({part}): this decides how writes are judged, and only RBAC guards it.{by}",
        target.kind, target.name, change.what
    );
    // The same change seen by every replica gets one name: one Event.
    let key = format!(
        "{}/{}/{:?}/{:?}/{}",
        target.kind,
        target.name,
        change.before,
        change.after,
        resource_version.unwrap_or_default()
    );
    let suffix = &crate::policy::digest(&key)["sha256:".len()..][..16];
    events.report_once(
        Report {
            reason: REASON,
            action: "Changed",
            note,
            regarding: ObjectReference {
                api_version: Some(target.resource.api_version.clone()),
                kind: Some(target.kind.to_owned()),
                namespace: target.namespace.clone(),
                name: Some(target.name.clone()),
                uid: object.and_then(|o| o.metadata.uid.clone()),
                ..Default::default()
            },
        },
        suffix,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(s: &str) -> String {
        s.to_owned()
    }

    #[test]
    fn the_first_list_is_the_baseline_and_reports_nothing() {
        let mut t = Tracker::default();
        t.init();
        t.listed(d("a"));
        assert_eq!(t.listed_all(), None);
        let mut absent = Tracker::default();
        absent.init();
        assert_eq!(absent.listed_all(), None);
        assert_eq!(
            absent.applied(d("a")).map(|c| c.what),
            Some("created"),
            "created after a baseline that had none"
        );
    }

    #[test]
    fn only_a_different_deciding_digest_is_a_change() {
        let mut t = Tracker::default();
        t.init();
        t.listed(d("a"));
        t.listed_all();
        assert_eq!(t.applied(d("a")), None, "a status or label change");
        assert_eq!(
            t.applied(d("b")),
            Some(Change {
                what: "changed",
                before: Some(d("a")),
                after: Some(d("b"))
            })
        );
        assert_eq!(t.deleted().map(|c| c.what), Some("deleted"));
        assert_eq!(t.deleted(), None);
    }

    /// A change made while the watch was down shows at the relist.
    #[test]
    fn a_relist_compares_with_the_last_state_seen() {
        let mut t = Tracker::default();
        t.init();
        t.listed(d("a"));
        t.listed_all();
        t.init();
        t.listed(d("b"));
        assert_eq!(t.listed_all().map(|c| c.what), Some("changed"));
        t.init();
        assert_eq!(t.listed_all().map(|c| c.what), Some("deleted"));
    }

    #[test]
    fn only_the_deciding_part_counts() {
        let cm =
            json!({"metadata": {"labels": {"a": "b"}}, "data": {"policy.yaml": "mode: audit"}});
        assert_eq!(
            deciding_part("ConfigMap", &cm),
            json!({"data": {"policy.yaml": "mode: audit"}})
        );
        let deploy = json!({"spec": {"replicas": 2}, "status": {"replicas": 1}});
        assert_eq!(
            deciding_part("Deployment", &deploy),
            json!({"spec": {"replicas": 2}})
        );
        let hooks = json!({"metadata": {"annotations": {}}, "webhooks": [{"name": "x"}]});
        assert_eq!(
            deciding_part("ValidatingWebhookConfiguration", &hooks),
            json!({"webhooks": [{"name": "x"}]})
        );
    }
}
