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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

pub const REPORTING_CONTROLLER: &str = "driftguard";

/// What to report about which object.
#[derive(Clone, Debug)]
pub struct Report {
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    pub regarding: ObjectReference,
}

pub struct EventRecorder {
    client: kube::Client,
    instance: String,
    interval: Duration,
    timeout: Duration,
    /// (last emitted, reports folded since) per object and reason.
    recent: Mutex<HashMap<String, (Instant, u32)>>,
}

impl EventRecorder {
    pub fn new(client: kube::Client, interval: Duration) -> Arc<Self> {
        let instance = std::env::var("HOSTNAME").unwrap_or_else(|_| "driftguard".into());
        Arc::new(Self {
            client,
            instance,
            interval,
            timeout: Duration::from_secs(2),
            recent: Mutex::new(HashMap::new()),
        })
    }

    /// Queues the Event and returns at once.
    pub fn report(self: &Arc<Self>, report: Report) {
        let r = &report.regarding;
        let key = format!(
            "{}/{}/{}/{}",
            r.namespace.as_deref().unwrap_or_default(),
            r.kind.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default(),
            report.reason
        );
        let folded = {
            let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() > 10_000 {
                recent.retain(|_, (at, _)| at.elapsed() < self.interval);
            }
            match recent.get_mut(&key) {
                Some((at, count)) if at.elapsed() < self.interval => {
                    *count += 1;
                    return;
                }
                Some((at, count)) => {
                    let folded = *count;
                    *at = Instant::now();
                    *count = 0;
                    folded
                }
                None => {
                    recent.insert(key, (Instant::now(), 0));
                    0
                }
            }
        };
        let this = self.clone();
        tokio::spawn(async move {
            let namespace = report
                .regarding
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let event = this.event(&report, &namespace, folded);
            let api = kube::Api::<Event>::namespaced(this.client.clone(), &namespace);
            match tokio::time::timeout(this.timeout, api.create(&Default::default(), &event)).await
            {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, reason = report.reason, "cannot write an Event")
                }
                Err(_) => tracing::warn!(reason = report.reason, "writing an Event timed out"),
            }
        });
    }

    fn event(&self, report: &Report, namespace: &str, folded: u32) -> Event {
        let name = report
            .regarding
            .name
            .clone()
            .unwrap_or_else(|| "object".into());
        let now = jiff::Timestamp::now();
        let mut note = report.note.clone();
        if folded > 0 {
            note = format!("{note} ({folded} more since the last Event)");
        }
        // The apiserver limits an Event note to 1 KiB.
        note.truncate(crate::text::prefix(&note, 1000).len());
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
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
            regarding: Some(report.regarding.clone()),
            ..Default::default()
        }
    }
}
