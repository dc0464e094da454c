//! Kubernetes Events (`events.k8s.io/v1`) on the object for each denial
//! (`DriftBlocked`) and each break-glass use (`BreakGlassUsed`), so they show in
//! `kubectl describe` and `kubectl get events`. Emitting is fire-and-forget and
//! bounded in time: it never changes or delays a verdict. The same reason on
//! the same object is emitted at most once per interval; the next Event says
//! how many were folded into it.
//!
//! Why not `kube::runtime::events::Recorder` (kube-runtime 5.0): it folds
//! repeats into an `EventSeries`, but still writes to the apiserver on every
//! `publish` (a create, then a merge patch per repeat), so a burst of denials
//! on one object costs one API call each; it has no rate limit, no time bound
//! (`publish` is awaited), and its cache is bounded only by a 6-minute TTL.
//! We need at most one write per object and reason per interval, a 2 s bound,
//! fire-and-forget, and a capped cache; layering that over `Recorder` would
//! leave it only the Event's construction.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::bounded::BoundedMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

/// The `reportingController` of every Event driftguard writes.
pub(crate) const REPORTING_CONTROLLER: &str = "driftguard";

/// What to report about which object.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    /// Why, such as `DriftBlocked` or `BreakGlassUsed`.
    pub(crate) reason: &'static str,
    /// What driftguard did, such as `Denied`.
    pub(crate) action: &'static str,
    /// The human-readable message.
    pub(crate) note: String,
    /// The object the Event is about.
    pub(crate) regarding: ObjectReference,
}

/// The longest name, namespace or kind that enters a de-duplication key: the
/// apiserver accepts no longer object name (253), so longer ones are forged or
/// doomed, and folding them together only writes fewer Events.
const KEY_PART_BYTES: usize = 253;
/// The de-duplication map's budget: about 2,000 keys of the longest kind, far
/// more of real ones.
const RECENT_BYTES: usize = 1 << 20;
const RECENT_ENTRIES: usize = 10_000;

/// Reports folded since the last Event, per object and reason, in a map
/// bounded in bytes and entries. When it is full of objects reported within
/// the interval, further new objects get no Event until entries age out:
/// a flood of denials (or of forged reviews) writes at most
/// [`RECENT_ENTRIES`] Events per interval, and never grows memory.
pub(crate) struct Recent {
    folded: BoundedMap<u32>,
}

impl Default for Recent {
    fn default() -> Self {
        Self {
            folded: BoundedMap::new(RECENT_BYTES, RECENT_ENTRIES),
        }
    }
}

impl Recent {
    /// `Some(reports folded since the last Event)` when an Event is due now,
    /// `None` when this report is folded into the next one (or dropped).
    pub(crate) fn admit(&mut self, report: &Report, interval: Duration) -> Option<u32> {
        let key = Self::key(report);
        match self.folded.get_mut(&key) {
            Some((at, count)) if at.elapsed() < interval => {
                *count = count.saturating_add(1);
                None
            }
            Some((at, count)) => {
                let folded = *count;
                *at = std::time::Instant::now();
                *count = 0;
                Some(folded)
            }
            None => self.folded.insert(key, 0, 4, interval).then_some(0),
        }
    }

    fn key(report: &Report) -> String {
        let r = &report.regarding;
        let part = |s: &Option<String>| {
            crate::text::prefix(s.as_deref().unwrap_or_default(), KEY_PART_BYTES).to_owned()
        };
        format!(
            "{}/{}/{}/{}",
            part(&r.namespace),
            part(&r.kind),
            part(&r.name),
            report.reason
        )
    }

    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.folded.bytes()
    }
}

/// Writes Events for the webhook: folded, rate-limited, fire-and-forget.
pub struct EventRecorder {
    client: kube::Client,
    instance: String,
    interval: Duration,
    timeout: Duration,
    recent: Mutex<Recent>,
}

impl EventRecorder {
    /// A recorder writing through `client`, at most one Event per object and
    /// reason each `interval`.
    pub(crate) fn new(client: kube::Client, interval: Duration) -> Arc<Self> {
        let instance = std::env::var("HOSTNAME").unwrap_or_else(|_| "driftguard".into());
        Arc::new(Self {
            client,
            instance,
            interval,
            timeout: Duration::from_secs(2),
            recent: Mutex::new(Recent::default()),
        })
    }

    /// Queues the Event and returns at once.
    pub(crate) fn report(self: &Arc<Self>, report: Report) {
        let folded = {
            let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            match recent.admit(&report, self.interval) {
                Some(folded) => folded,
                None => return,
            }
        };
        let suffix = format!("{:x}", jiff::Timestamp::now().as_nanosecond());
        self.send(report, folded, suffix);
    }

    /// Queues the Event, named by `suffix`, and returns at once: no folding,
    /// for rare reports that each matter. Replicas reporting the same thing
    /// with the same suffix write one Event (the others get AlreadyExists).
    pub(crate) fn report_once(self: &Arc<Self>, report: Report, suffix: &str) {
        self.send(report, 0, suffix.to_owned());
    }

    /// Writes the Event named `<object>.<suffix>` in the background, within
    /// the time bound; an Event of that name already there is this one.
    fn send(self: &Arc<Self>, report: Report, folded: u32, suffix: String) {
        let this = self.clone();
        tokio::spawn(async move {
            let namespace = report
                .regarding
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let event = this.event(&report, &namespace, folded, &suffix);
            let api = kube::Api::<Event>::namespaced(this.client.clone(), &namespace);
            match tokio::time::timeout(this.timeout, api.create(&Default::default(), &event)).await
            {
                Ok(Ok(_)) => {}
                Ok(Err(kube::Error::Api(e))) if e.code == 409 => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, reason = report.reason, "cannot write an Event")
                }
                Err(_) => tracing::warn!(reason = report.reason, "writing an Event timed out"),
            }
        });
    }

    fn event(&self, report: &Report, namespace: &str, folded: u32, suffix: &str) -> Event {
        // Event names are object names: at most 253 bytes with the suffix.
        let name = report.regarding.name.as_deref().unwrap_or("object");
        let name = crate::text::prefix(name, 200);
        let now = jiff::Timestamp::now();
        let mut note = report.note.clone();
        if folded > 0 {
            note = format!("{note} ({folded} more since the last Event)");
        }
        // The apiserver limits an Event note to 1 KiB.
        note.truncate(crate::text::prefix(&note, 1000).len());
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{suffix}")),
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            action: Some(report.action.into()),
            reason: Some(report.reason.into()),
            type_: Some("Warning".into()),
            note: Some(note),
            regarding: Some(bounded_reference(&report.regarding)),
            ..Default::default()
        }
    }
}

/// The reference with its name and namespace cut at [`KEY_PART_BYTES`]: no
/// real object has a longer one, and a forged review must not make the
/// apiserver store a megabyte name in every Event.
fn bounded_reference(regarding: &ObjectReference) -> ObjectReference {
    let cut = |s: &Option<String>| {
        s.as_deref()
            .map(|s| crate::text::prefix(s, KEY_PART_BYTES).to_owned())
    };
    ObjectReference {
        name: cut(&regarding.name),
        namespace: cut(&regarding.namespace),
        kind: cut(&regarding.kind),
        ..regarding.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(namespace: &str, name: &str, reason: &'static str) -> Report {
        Report {
            reason,
            action: "Denied",
            note: String::new(),
            regarding: ObjectReference {
                namespace: Some(namespace.into()),
                kind: Some("Deployment".into()),
                name: Some(name.into()),
                ..Default::default()
            },
        }
    }

    #[test]
    fn an_event_names_at_most_253_bytes() {
        let long = "n".repeat(1 << 20);
        let r = bounded_reference(&report(&long, &long, "DriftBlocked").regarding);
        assert_eq!(r.name.as_deref().map(str::len), Some(KEY_PART_BYTES));
        assert_eq!(r.namespace.as_deref().map(str::len), Some(KEY_PART_BYTES));
        let short = report("prod", "web", "DriftBlocked").regarding;
        assert_eq!(bounded_reference(&short), short);
    }

    #[test]
    fn repeats_within_the_interval_are_folded_into_the_next_event() {
        let mut recent = Recent::default();
        let r = report("prod", "web", "DriftBlocked");
        assert_eq!(recent.admit(&r, Duration::from_secs(60)), Some(0));
        assert_eq!(recent.admit(&r, Duration::from_secs(60)), None);
        assert_eq!(recent.admit(&r, Duration::from_secs(60)), None);
        assert_eq!(recent.admit(&r, Duration::ZERO), Some(2));
        let other = report("prod", "web", "BreakGlassUsed");
        assert_eq!(recent.admit(&other, Duration::from_secs(60)), Some(0));
    }

    /// Forged reviews with megabyte names: a few hundred of them keep the
    /// map within its byte budget (before, each kept its whole name).
    #[test]
    fn megabyte_names_keep_the_map_within_its_budget() {
        let mut recent = Recent::default();
        let megabyte = "n".repeat(1 << 20);
        let mut emitted = 0;
        for i in 0..300 {
            let name = format!("{i}{megabyte}");
            let namespace = format!("{i}{megabyte}");
            if recent
                .admit(
                    &report(&namespace, &name, "DriftBlocked"),
                    Duration::from_secs(60),
                )
                .is_some()
            {
                emitted += 1;
            }
            assert!(recent.bytes() <= RECENT_BYTES, "{} bytes", recent.bytes());
        }
        // Capped keys: each object still gets its Event.
        assert_eq!(emitted, 300);
        assert!(recent.bytes() < 300 * 1_000, "{} bytes", recent.bytes());
        // Names differing only past the cap fold together.
        let folded = (0..300)
            .filter(|i| {
                let name = format!("{megabyte}{i}");
                recent
                    .admit(
                        &report("prod", &name, "DriftBlocked"),
                        Duration::from_secs(60),
                    )
                    .is_some()
            })
            .count();
        assert_eq!(folded, 1);
        // Many distinct short names: the map stops growing at its bounds.
        for i in 0..(RECENT_ENTRIES + 500) {
            recent.admit(
                &report("prod", &format!("{i}-{}", "x".repeat(200)), "DriftBlocked"),
                Duration::from_secs(60),
            );
        }
        assert!(recent.bytes() <= RECENT_BYTES, "{} bytes", recent.bytes());
        assert!(recent.folded.len() <= RECENT_ENTRIES);
    }
}
