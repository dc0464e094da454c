//! The armed set, written down: one small ConfigMap per armed object in
//! driftguard's own namespace, written by the webhook before it allows the
//! write that leaves the object armed, and deleted by the sweeper once that
//! break-glass is ended. The sweeper watches these records alone, so its
//! cost follows the armed objects, never the number of types in the cluster.
//!
//! Why the order makes a crash harmless: the record is written before the
//! answer, so a write the apiserver lands armed was recorded first. A crash
//! in between leaves at most a record whose object is not armed, which the
//! sweeper drops once [`GRACE`] has passed (a write can still be on its way
//! until the webhook's timeout). Records are not decision inputs: deleting
//! one loosens nothing, it only leaves a break-glass that already grants
//! nothing to be ended by hand (threat model §5).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};

use super::pause;
use crate::drift::Request;
use crate::drift::breakglass_state::EXPIRES;
use crate::policy::Policy;

/// Where break-glass keeps its keys on an object: nothing is armed without one.
const KEYS: [(&str, &str); 4] = [
    ("annotations", crate::drift::breakglass_state::REASON),
    ("annotations", EXPIRES),
    ("annotations", crate::drift::breakglass_state::PAUSED),
    ("labels", crate::drift::breakglass_state::LABEL),
];

/// The label every record carries; the sweeper's watch selects on it.
pub(crate) const RECORD_LABEL: &str = "driftguard.io/break-glass-record";
/// The longest a write may still land after the apiserver received it, so
/// how long a record whose object is not armed is kept, and a pause no armed
/// object holds is left: kube-apiserver's `--request-timeout` (default 60 s)
/// is the deadline of the whole request, every webhook and the storage
/// write included (a client's `?timeout=` only shortens it), plus 10 s for
/// clocks. An apiserver run with a longer `--request-timeout` outlasts it
/// (docs/break-glass.md); the plugin pauses again after its arming lands.
pub(crate) const GRACE: Duration = Duration::from_secs(70);
const FIELD_MANAGER: &str = "driftguard-break-glass";

/// One armed object, as its record names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Armed {
    /// The type, as the sweeper reads and patches it.
    pub ar: ApiResource,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    pub name: String,
    /// The expiry annotation when recorded: when to look at it first.
    pub expires: Option<jiff::Timestamp>,
    /// When the webhook last recorded an arming of it.
    pub recorded: Option<jiff::Timestamp>,
    /// When the webhook last asked the sweeper to look again at it.
    pub look: Option<jiff::Timestamp>,
}

impl Armed {
    /// When the webhook last wrote the record: a write it was written for
    /// may land up to [`GRACE`] later.
    pub(crate) fn written(&self) -> Option<jiff::Timestamp> {
        self.recorded.max(self.look)
    }

    /// The object a write leaves armed, when it does: the object the
    /// sweeper would end ([`pause::not_armable`] is the sweeper's own test).
    pub(crate) fn by_write(view: &Request, policy: &Policy) -> Option<Armed> {
        Self::in_object(view, view.object?, policy)
    }

    /// The object a write finds armed and leaves unarmed (ended, deleted).
    #[cfg(test)]
    pub(crate) fn ended_by_write(view: &Request, policy: &Policy) -> Option<Armed> {
        let old = Self::in_object(view, view.old_object?, policy)?;
        Self::by_write(view, policy).is_none().then_some(old)
    }

    /// `object`, of `view`'s type, when the sweeper would end it.
    fn in_object(view: &Request, object: &Value, policy: &Policy) -> Option<Armed> {
        // A status write carries the object's metadata, break-glass keys included.
        let whole = view.sub_resource.is_empty() || crate::drift::change::carries_the_object(view);
        if !whole || pause::not_armable(object, view.group, policy).is_some() {
            return None;
        }
        let name = object["metadata"]["name"].as_str().unwrap_or(view.name);
        let annotations = &object["metadata"]["annotations"];
        Some(Armed {
            ar: ApiResource {
                group: view.resource_group.to_owned(),
                version: object["apiVersion"]
                    .as_str()
                    .and_then(|v| v.rsplit('/').next())
                    .unwrap_or_default()
                    .to_owned(),
                api_version: object["apiVersion"].as_str().unwrap_or_default().to_owned(),
                kind: view.kind.to_owned(),
                plural: view.resource.to_owned(),
            },
            namespace: view.namespace.to_owned(),
            name: name.to_owned(),
            expires: annotations[EXPIRES].as_str().and_then(|e| e.parse().ok()),
            recorded: None,
            look: None,
        })
        .filter(|a| !a.name.is_empty() && !a.ar.version.is_empty())
    }

    /// An object found armed without a record (by the sweeper's scan).
    pub(crate) fn found(ar: ApiResource, namespace: String, name: String) -> Armed {
        Armed {
            ar,
            namespace,
            name,
            expires: None,
            recorded: None,
            look: None,
        }
    }

    /// The record's name: one per object, the same from every replica.
    pub(crate) fn record_name(&self) -> String {
        let id = format!(
            "{}/{}/{}/{}",
            self.ar.group, self.ar.plural, self.namespace, self.name
        );
        let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
        // The whole digest: a record names one object, with no collision to craft.
        let hex: String = (digest.as_ref().iter())
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("driftguard-armed-{hex}")
    }

    /// The record as a ConfigMap in `namespace`, written at `now`.
    fn to_config_map(&self, namespace: &str, now: jiff::Timestamp) -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.record_name(), "namespace": namespace,
                "labels": {RECORD_LABEL: "true"}},
            "data": {
                "apiVersion": self.ar.api_version, "kind": self.ar.kind,
                "resource": self.ar.plural, "namespace": self.namespace, "name": self.name,
                "expires": self.expires.map(|e| e.to_string()).unwrap_or_default(),
                "recorded": now.to_string(),
            }
        })
    }

    /// Reads a record back, checked against what the apiserver says of it:
    /// `None` for a ConfigMap that is not one, or whose name is not the
    /// digest of the object it names (driftguard never wrote it). Its times
    /// are anyone's to write: they are clamped to after its creation and
    /// `since` (when an earlier version of it was seen), and to no later
    /// than `seen` (when this version was first seen), so that a record
    /// dated 2099 settles like any other.
    pub(crate) fn checked(
        cm: &ConfigMap,
        since: Option<jiff::Timestamp>,
        seen: jiff::Timestamp,
    ) -> Option<Armed> {
        let mut armed = Self::from_config_map(cm).filter(Armed::fits)?;
        if cm.metadata.name.as_deref() != Some(armed.record_name().as_str()) {
            return None;
        }
        let created = cm.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let floor = created.max(since).map(|f| f.min(seen));
        let clamp =
            |t: Option<jiff::Timestamp>| t.map(|t| floor.map_or(t.min(seen), |f| t.clamp(f, seen)));
        (armed.recorded, armed.look) = (clamp(armed.recorded), clamp(armed.look));
        Some(armed)
    }

    /// Whether what it names is shaped as Kubernetes names are (a group and
    /// an object name are at most 253 bytes, a namespace, a resource, a
    /// version and a kind at most 63), so that a record of 1 MiB is never
    /// held, and a name no object can have is never read.
    fn fits(&self) -> bool {
        use crate::text::{is_dns_label, is_dns_subdomain};
        let name = &self.name;
        (self.ar.group.is_empty() || is_dns_subdomain(&self.ar.group))
            && is_dns_label(&self.ar.version)
            && is_dns_label(&self.ar.plural)
            && (self.ar.kind.len() <= 63 && self.ar.kind.chars().all(|c| c.is_ascii_alphanumeric()))
            && (self.namespace.is_empty() || is_dns_label(&self.namespace))
            // Names are path segments: some types allow more than DNS names.
            && (!name.is_empty() && name.len() <= 253 && !name.contains('/') && name != "." && name != "..")
    }

    /// Reads a record back as written; `None` for a ConfigMap that is not one.
    fn from_config_map(cm: &ConfigMap) -> Option<Armed> {
        let data = cm.data.as_ref()?;
        let get = |k: &str| data.get(k).map(String::as_str).unwrap_or_default();
        let (api_version, kind, plural, name) =
            (get("apiVersion"), get("kind"), get("resource"), get("name"));
        if api_version.is_empty() || kind.is_empty() || plural.is_empty() || name.is_empty() {
            return None;
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Some(Armed {
            ar: ApiResource {
                group: group.to_owned(),
                version: version.to_owned(),
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                plural: plural.to_owned(),
            },
            namespace: get("namespace").to_owned(),
            name: name.to_owned(),
            expires: get("expires").parse().ok(),
            recorded: get("recorded").parse().ok(),
            look: get("look").parse().ok(),
        })
    }

    /// Whether `view` changes a break-glass key (arms, re-arms, changes
    /// the expiry): a write under a break-glass that leaves them as they
    /// were is not refused for a record that already exists.
    pub(crate) fn changes_keys(view: &Request) -> bool {
        fn key<'a>(o: Option<&'a Value>, section: &str, k: &str) -> Option<&'a Value> {
            o.map(|o| &o["metadata"][section][k])
        }
        (KEYS.into_iter())
            .any(|(section, k)| key(view.object, section, k) != key(view.old_object, section, k))
    }

    /// `group/Kind:namespace/name`, as a pause entry names the object.
    pub(crate) fn entry(&self) -> String {
        pause::entry(&self.ar.group, &self.ar.kind, &self.namespace, &self.name)
    }
}

/// Writes records: every replica's webhook, and the sweeper for an armed
/// object it finds unrecorded.
#[derive(Clone)]
pub struct Recorder {
    api: Api<ConfigMap>,
    namespace: String,
}

impl Recorder {
    /// Records in `namespace` (`--break-glass-namespace`).
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Recorder {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
        }
    }

    /// The namespace records are written in.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Writes (or refreshes) the record of `armed`, within `timeout`.
    pub(crate) async fn record(&self, armed: &Armed, timeout: Duration) -> Result<(), String> {
        let (name, params) = (
            armed.record_name(),
            PatchParams::apply(FIELD_MANAGER).force(),
        );
        let body = Patch::Apply(armed.to_config_map(&self.namespace, jiff::Timestamp::now()));
        let write = self.api.patch(&name, &params, &body);
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!(
                "cannot write its record ConfigMap {}/{name}: {e}",
                self.namespace
            )),
            Err(_) => Err(format!(
                "writing its record ConfigMap {}/{name} took longer than {timeout:?}",
                self.namespace
            )),
        }
    }

    /// Deletes record `name` if it is still at `resource_version`: a record
    /// the webhook wrote again since it was read (a new arming) is kept.
    pub(crate) async fn forget(
        &self,
        name: &str,
        resource_version: &str,
    ) -> Result<bool, kube::Error> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version.to_owned()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Keeps the armed set true for one allowed write: records the object
    /// a `break_glass` write (its decision's finding) leaves armed, or asks
    /// the sweeper to look again at one any write leaves unarmed. `Err((object, why))` when an armed object could not be
    /// recorded; a look-again that fails is only logged (the sweeper reads
    /// every recorded object within [`super::sweeper`]'s verify period).
    pub(crate) async fn keep(
        &self,
        view: &Request<'_>,
        policy: &Policy,
        break_glass: bool,
        timeout: Duration,
    ) -> Result<(), (String, String)> {
        // Nothing is armed without one of the keys: most writes stop here,
        // before any input is read again.
        let keyed = |o: &Value| {
            (KEYS.into_iter()).any(|(section, k)| o["metadata"][section].get(k).is_some())
        };
        if ![view.object, view.old_object]
            .into_iter()
            .flatten()
            .any(keyed)
        {
            return Ok(());
        }
        // Only a write break-glass allowed records: a tool's own account
        // applying objects that carry the keys makes no record to hold.
        let armed_now = Armed::by_write(view, policy);
        if let Some(armed) = armed_now.as_ref().filter(|_| break_glass) {
            let object = format!("{} {}", armed.ar.kind, armed.entry());
            return self
                .record(armed, timeout)
                .await
                .map_err(|why| (object, why));
        }
        // Armed before, unarmed now ([`Armed::ended_by_write`]).
        let ended = (view.old_object.filter(|_| armed_now.is_none()))
            .and_then(|old| Armed::in_object(view, old, policy));
        if let Some(armed) = ended
            && let Err(why) = self.look_again(&armed, timeout).await
        {
            tracing::warn!(object = %armed.entry(), error = %why, "cannot ask the sweeper to look at an ended break-glass's record");
        }
        Ok(())
    }

    /// Asks the sweeper to read `armed`'s object now: a write that leaves
    /// it unarmed (ended by hand, deleted) was allowed. Only a key of its
    /// own changes, so the record still names the object if that write
    /// never lands; no record, nothing to do.
    async fn look_again(&self, armed: &Armed, timeout: Duration) -> Result<(), String> {
        let patch = Patch::Merge(json!({"data": {"look": jiff::Timestamp::now().to_string()}}));
        let (name, params) = (armed.record_name(), PatchParams::default());
        let write = self.api.patch(&name, &params, &patch);
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("took longer than {timeout:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::Operation;

    fn armed_deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod",
                "annotations": {"argocd.argoproj.io/tracking-id": "web:apps/Deployment:prod/web",
                    crate::drift::breakglass_state::REASON: "INC-7", EXPIRES: "2030-01-01T00:00:00Z"}}})
    }

    fn write(object: &Value) -> Request<'_> {
        Request {
            operation: Operation::Update,
            group: "apps",
            kind: "Deployment",
            resource_group: "apps",
            resource: "deployments",
            sub_resource: "",
            name: "web",
            namespace: "prod",
            username: "sam",
            groups: &[],
            object: Some(object),
            old_object: None,
            dry_run: false,
        }
    }

    #[test]
    fn a_record_reads_back_as_the_object_it_names() {
        let policy = Policy::embedded();
        let object = armed_deployment();
        let armed = Armed::by_write(&write(&object), &policy).expect("armed");
        let cm: ConfigMap =
            serde_json::from_value(armed.to_config_map("driftguard", jiff::Timestamp::now()))
                .unwrap();
        let back = Armed::from_config_map(&cm).expect("a record");
        assert_eq!(armed.entry(), "apps/Deployment:prod/web");
        assert_eq!(
            (back.ar, back.namespace, back.name, back.expires),
            (armed.ar, armed.namespace, armed.name, armed.expires)
        );
        assert!(cm.metadata.name.unwrap().len() <= 253, "a ConfigMap name");
    }

    #[test]
    fn only_a_write_the_sweeper_would_end_is_recorded() {
        let policy = Policy::embedded();
        let mut object = armed_deployment();
        assert!(Armed::by_write(&write(&object), &policy).is_some());
        // Unmanaged, or without both annotations: nothing for the sweeper.
        let mut unmanaged = object.clone();
        unmanaged["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("argocd.argoproj.io/tracking-id");
        assert_eq!(Armed::by_write(&write(&unmanaged), &policy), None);
        object["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(EXPIRES);
        assert_eq!(Armed::by_write(&write(&object), &policy), None);
    }

    #[test]
    fn a_write_that_leaves_an_armed_object_unarmed_asks_for_a_look() {
        let policy = Policy::embedded();
        let armed = armed_deployment();
        let mut ended = armed.clone();
        ended["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(EXPIRES);
        let update = |old: &'static Value, new: Option<&'static Value>| Request {
            old_object: Some(old),
            object: new,
            ..write(old)
        };
        let (armed, ended): (&'static Value, &'static Value) =
            (Box::leak(Box::new(armed)), Box::leak(Box::new(ended)));
        assert!(Armed::ended_by_write(&update(armed, Some(ended)), &policy).is_some());
        assert!(Armed::ended_by_write(&update(armed, None), &policy).is_some());
        assert_eq!(
            Armed::ended_by_write(&update(armed, Some(armed)), &policy),
            None
        );
        assert_eq!(
            Armed::ended_by_write(&update(ended, Some(ended)), &policy),
            None
        );
    }

    /// A status write carries the object's metadata: arming through it is
    /// recorded like any other (attacker review, issue 40, finding 2).
    #[test]
    fn an_arming_through_the_status_subresource_is_recorded() {
        let policy = Policy::embedded();
        let object = armed_deployment();
        let status = Request {
            sub_resource: "status",
            old_object: Some(&object),
            ..write(&object)
        };
        assert!(Armed::by_write(&status, &policy).is_some());
        let scale =
            json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "web"}});
        let scaled = Request {
            sub_resource: "scale",
            object: Some(&scale),
            old_object: Some(&scale),
            ..write(&object)
        };
        assert_eq!(
            Armed::by_write(&scaled, &policy),
            None,
            "a Scale is not the object"
        );
    }

    #[test]
    fn records_of_different_objects_have_different_names() {
        let policy = Policy::embedded();
        let object = armed_deployment();
        let a = Armed::by_write(&write(&object), &policy).unwrap();
        let mut b = a.clone();
        b.namespace = "prod2".into();
        let mut c = a.clone();
        c.ar.plural = "statefulsets".into();
        assert_ne!(a.record_name(), b.record_name());
        assert_ne!(a.record_name(), c.record_name());
    }

    /// A record is held only as written for the object it names: any other
    /// name, or a field changed under the same name, is not driftguard's;
    /// and its times are never later than when it was seen, nor earlier
    /// than its creation.
    #[test]
    fn a_record_is_checked_against_its_name_and_its_times_clamped() {
        let policy = Policy::embedded();
        let object = armed_deployment();
        let armed = Armed::by_write(&write(&object), &policy).unwrap();
        let created: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let seen = created + jiff::SignedDuration::from_mins(5);
        let at = |recorded: &str| {
            let mut v = armed.to_config_map("driftguard", created);
            v["metadata"]["creationTimestamp"] = json!(created.to_string());
            v["data"]["recorded"] = json!(recorded);
            serde_json::from_value::<ConfigMap>(v).unwrap()
        };
        let far = Armed::checked(&at("2099-01-01T00:00:00Z"), None, seen).unwrap();
        assert_eq!(far.recorded, Some(seen), "no later than seen");
        let early = Armed::checked(&at("1970-01-01T00:00:00Z"), None, seen).unwrap();
        assert_eq!(early.recorded, Some(created), "no earlier than created");
        let since = created + jiff::SignedDuration::from_mins(1);
        let rewritten = Armed::checked(&at("1970-01-01T00:00:00Z"), Some(since), seen).unwrap();
        assert_eq!(
            rewritten.recorded,
            Some(since),
            "no earlier than a version seen before"
        );
        for (field, value) in [
            ("name", json!("api")),
            ("namespace", json!("prod2")),
            ("resource", json!("statefulsets")),
            ("apiVersion", json!("batch/v1")),
        ] {
            let mut v = armed.to_config_map("driftguard", created);
            v["data"][field] = value;
            let cm = serde_json::from_value::<ConfigMap>(v).unwrap();
            assert_eq!(Armed::checked(&cm, None, seen), None, "{field} changed");
        }
        let mut long = armed.clone();
        long.name = "w".repeat(300);
        let cm = serde_json::from_value::<ConfigMap>(long.to_config_map("driftguard", created));
        assert_eq!(
            Armed::checked(&cm.unwrap(), None, seen),
            None,
            "no such name"
        );
    }
}
