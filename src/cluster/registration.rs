//! The running server compares its webhooks with what the policy in force
//! needs ([`crate::registration::check`]), whenever either changes: a
//! reloaded ConfigMap, an argocd-cm whose instance label appears, an edited
//! or re-rendered webhook configuration. The webhooks come from the guard's
//! watch of them by name (`--guard-webhook-configuration`; the chart sets it).
//!
//! A difference is loud and names the fix: a WARN line per difference, a
//! Warning Event `RegistrationDiffers` on the ValidatingWebhookConfiguration,
//! `driftguard_registration_differences{direction}` (the chart's alert), and
//! `/readyz` "ready (degraded: …)". Ready, not unready: the server still
//! judges every write it is sent, and an unready driftguard would refuse
//! them all.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use tokio::sync::watch;

use super::events::{EventRecorder, Report};
use super::watch::SourcesHandle;
use crate::metrics::{DirectionLabels, Metrics};
use crate::registration::{self, Difference};
use crate::server::probes::Health;
use crate::service::PolicyHandle;

/// The reason of the Warning Event a difference raises.
pub(crate) const REASON: &str = "RegistrationDiffers";
/// How often the policy and sources are looked at; a webhook change wakes
/// the check at once.
const INTERVAL: Duration = Duration::from_secs(5);

/// The webhook configurations as the guard's watch last saw them: the outer
/// `None` until its first list, the inner one while absent.
#[derive(Clone, Debug, Default)]
pub(crate) struct Webhooks {
    pub(crate) validating: Option<Option<DynamicObject>>,
    pub(crate) mutating: Option<Option<DynamicObject>>,
}

impl Webhooks {
    /// Records what a watch of `kind` saw.
    pub(crate) fn set(&mut self, kind: &str, object: Option<DynamicObject>) {
        match kind {
            "ValidatingWebhookConfiguration" => self.validating = Some(object),
            "MutatingWebhookConfiguration" => self.mutating = Some(object),
            _ => {}
        }
    }
}

/// What the check ran on last: rerun when it changes.
#[derive(PartialEq, Eq)]
struct Inputs {
    policy: String,
    validating: Option<String>,
    mutating: Option<String>,
    instance_labels: Vec<String>,
}

/// Everything the check reads and reports to.
pub(crate) struct Checker {
    pub(crate) policy: PolicyHandle,
    pub(crate) sources: Option<SourcesHandle>,
    pub(crate) webhooks: watch::Receiver<Webhooks>,
    pub(crate) health: Arc<Health>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) events: Option<Arc<EventRecorder>>,
}

impl Checker {
    /// Runs the check whenever its inputs change, for the process's life.
    pub(crate) fn spawn(mut self) {
        tokio::spawn(async move {
            let mut last: Option<Inputs> = None;
            loop {
                // Woken by a webhook change, else every INTERVAL; a closed
                // channel (the guard's watches gone) must not spin.
                if let Ok(Err(_)) = tokio::time::timeout(INTERVAL, self.webhooks.changed()).await {
                    tokio::time::sleep(INTERVAL).await;
                }
                let webhooks = self.webhooks.borrow_and_update().clone();
                let (Some(validating), Some(mutating)) = (webhooks.validating, webhooks.mutating)
                else {
                    continue;
                };
                let policy = self.policy.current();
                let sources = self.sources.as_ref().map(SourcesHandle::current);
                let inputs = Inputs {
                    policy: policy.digest.clone(),
                    validating: version(validating.as_ref()),
                    mutating: version(mutating.as_ref()),
                    instance_labels: sources
                        .iter()
                        .flat_map(|s| &s.argocd)
                        .filter_map(|a| a.instance_label.clone())
                        .collect(),
                };
                if last.as_ref() == Some(&inputs) {
                    continue;
                }
                let validating = validating
                    .as_ref()
                    .and_then(typed::<ValidatingWebhookConfiguration>);
                let mutating = mutating
                    .as_ref()
                    .and_then(typed::<MutatingWebhookConfiguration>);
                let uid = validating.as_ref().and_then(|v| v.metadata.uid.clone());
                let checked = tokio::task::spawn_blocking(move || {
                    registration::check(
                        &policy,
                        sources.as_deref(),
                        validating.as_ref(),
                        mutating.as_ref(),
                    )
                })
                .await;
                match checked {
                    Ok(differences) => {
                        self.report(&differences, uid);
                        last = Some(inputs);
                    }
                    // Tried again at the next look, and degraded meanwhile.
                    Err(e) => {
                        tracing::error!(error = %e, "the registration check failed");
                        *self
                            .health
                            .registration
                            .lock()
                            .unwrap_or_else(|e| e.into_inner()) =
                            Some(format!("the registration check failed ({e})"));
                    }
                }
            }
        });
    }

    fn report(&self, differences: &[Difference], uid: Option<String>) {
        for direction in registration::DIRECTIONS {
            let count = registration::count(differences, direction);
            self.metrics
                .registration_differences
                .get_or_create(&DirectionLabels {
                    direction: direction.as_str(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        let degraded = summary(differences);
        let was = std::mem::replace(
            &mut *self
                .health
                .registration
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
            degraded.clone(),
        );
        let Some(summary) = degraded else {
            if was.is_some() {
                tracing::info!("the webhooks now send driftguard what the policy in force judges");
            }
            return;
        };
        let lines = registration::lines(differences);
        for line in &lines {
            tracing::warn!(difference = %line, fix = registration::FIX, "the webhooks differ from the policy in force");
        }
        let Some(events) = &self.events else { return };
        // An Event's note is cut at 1 kB: the fix, then a write it concerns
        // (what a reader acts on), before the webhook-level lines.
        let (writes, fields): (Vec<&String>, Vec<&String>) =
            lines.iter().partition(|l| !l.contains(": the webhook `"));
        let first: Vec<&String> = writes.into_iter().chain(fields).collect();
        let note = format!(
            "{summary}. Fix: {}. {}",
            registration::FIX,
            first
                .iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        );
        let suffix = &crate::policy::digest(&note)["sha256:".len()..][..16];
        events.report_once(
            Report {
                reason: REASON,
                action: "Compared",
                note,
                regarding: ObjectReference {
                    api_version: Some("admissionregistration.k8s.io/v1".into()),
                    kind: Some("ValidatingWebhookConfiguration".into()),
                    name: self.name(),
                    uid,
                    ..Default::default()
                },
            },
            suffix,
        );
    }

    fn name(&self) -> Option<String> {
        let webhooks = self.webhooks.borrow();
        let object = webhooks.validating.as_ref()?.as_ref()?;
        object.metadata.name.clone()
    }
}

/// The readiness detail: how many go which way, `None` when they agree.
fn summary(differences: &[Difference]) -> Option<String> {
    if differences.is_empty() {
        return None;
    }
    let parts: Vec<String> = registration::DIRECTIONS
        .into_iter()
        .filter_map(|d| {
            let n = registration::count(differences, d);
            (n > 0).then(|| format!("{n} {}", d.as_str()))
        })
        .collect();
    Some(format!(
        "the webhooks differ from the policy in force ({}); `kubectl driftguard status` or `driftguard register --check` names them",
        parts.join(", ")
    ))
}

fn version(object: Option<&DynamicObject>) -> Option<String> {
    object.map(|o| o.metadata.resource_version.clone().unwrap_or_default())
}

fn typed<T: serde::de::DeserializeOwned>(object: &DynamicObject) -> Option<T> {
    let value = serde_json::to_value(object).ok()?;
    match serde_json::from_value(value) {
        Ok(typed) => Some(typed),
        Err(e) => {
            tracing::warn!(error = %e, "a webhook configuration does not parse");
            None
        }
    }
}
