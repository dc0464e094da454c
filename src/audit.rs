//! The audit record: one JSON line per decided review on stdout, under the
//! tracing target `driftguard::audit`, apart from diagnostic logs (stderr).
//! The record has its own serializable shape: the decision's types stay free
//! of wire formats, and the line's fields are fixed here, in one place.

pub(crate) mod report;

use serde::Serialize;

use crate::drift::{BreakGlassUse, Decision, Request};

/// The tracing target of audit lines, which the logging layers route to stdout.
pub(crate) const TARGET: &str = "driftguard::audit";

/// Bytes of drifted paths one record lists; the count says how many there were.
pub(crate) const LISTED_PATH_BYTES: usize = 16 * 1024;
/// Bytes of rule failures one record carries.
const ERROR_BYTES: usize = 4 * 1024;

/// The leading paths that fit in [`LISTED_PATH_BYTES`], each cut as any
/// quoted input is ([`crate::text::clip`]).
fn listed(paths: &[String]) -> Vec<&str> {
    let mut bytes = 0usize;
    (paths.iter())
        .map(|p| crate::text::clip(p))
        .take_while(|p| {
            bytes += p.len() + 3;
            bytes <= LISTED_PATH_BYTES
        })
        .collect()
}

/// One decided (or failed) review, as its audit line shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditRecord<'a> {
    pub(crate) time: String,
    /// `validate` or `mutate`: which webhook asked.
    pub(crate) endpoint: &'static str,
    pub(crate) uid: &'a str,
    pub(crate) user: &'a str,
    pub(crate) groups: &'a [String],
    pub(crate) operation: &'static str,
    pub(crate) group: &'a str,
    pub(crate) version: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) resource: &'a str,
    pub(crate) sub_resource: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    pub(crate) manager: Option<String>,
    pub(crate) mode: Option<&'static str>,
    pub(crate) verdict: &'static str,
    pub(crate) reason: &'static str,
    /// The first drifted paths, at most [`LISTED_PATH_BYTES`] of them: a
    /// review with 90,000 drifted paths would otherwise queue a 1.7 MiB line.
    pub(crate) drifted_paths: Vec<&'a str>,
    /// How many paths drifted, listed or not.
    pub(crate) drifted_path_count: usize,
    pub(crate) break_glass: Option<BreakGlassRecord<'a>>,
    pub(crate) dry_run: bool,
    pub(crate) latency_micros: u64,
    /// Of `latency_micros`, reading the review's JSON: the yardstick for the
    /// rest, measured in the same process at the same moment.
    pub(crate) parse_micros: u64,
    pub(crate) error: Option<String>,
    /// Watched sources not read when deciding (a hub out of reach since
    /// start): judged by the strictest reading without them. Absent when all
    /// were read.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(crate) sources_unread: &'a [&'static str],
}

/// A change of one of driftguard's own objects (src/cluster/guard.rs): not a
/// decision, so a line of its own shape, told apart by `guarded`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GuardedChangeRecord<'a> {
    pub(crate) time: String,
    /// `created`, `changed` or `deleted`.
    pub(crate) guarded: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    /// sha256 digests of the deciding part (ConfigMap data, Deployment spec, webhooks).
    pub(crate) before: Option<&'a str>,
    pub(crate) after: Option<&'a str>,
    pub(crate) resource_version: Option<&'a str>,
    /// Client-chosen: a hint, never an identity.
    pub(crate) field_manager: Option<&'a str>,
}

impl GuardedChangeRecord<'_> {
    /// Writes the record through tracing; the audit layer prints it as one line.
    pub(crate) fn emit(&self) {
        emit(self);
    }
}

/// Writes a record through tracing; the audit layer prints it as one line.
fn emit(record: &impl Serialize) {
    let line = serde_json::to_string(record).expect("an audit record serializes");
    tracing::info!(target: TARGET, record = %line);
}

/// A break-glass use as the audit line shows it.
#[derive(Debug, Serialize)]
pub(crate) struct BreakGlassRecord<'a> {
    pub(crate) user: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) expires: &'a str,
}

impl<'a> From<&'a BreakGlassUse> for BreakGlassRecord<'a> {
    fn from(used: &'a BreakGlassUse) -> Self {
        // Each cut as any quoted input is: a reason may be 200 KiB.
        use crate::text::clip;
        Self {
            user: clip(&used.user),
            reason: clip(&used.reason),
            expires: clip(&used.expires),
        }
    }
}

impl<'a> AuditRecord<'a> {
    /// The record of a decided review.
    pub(crate) fn decided(
        endpoint: &'static str,
        uid: &'a str,
        version: &'a str,
        view: &Request<'a>,
        d: &'a Decision,
        latency_micros: u64,
    ) -> Self {
        let mut record = Self::base(endpoint, uid, version, view, latency_micros);
        record.manager = (d.manager.as_ref()).map(|m| crate::text::clip(&m.to_string()).to_owned());
        record.mode = Some(d.mode.as_str());
        record.verdict = d.verdict.as_str();
        record.reason = d.finding.code();
        record.drifted_paths = listed(&d.drifted_paths);
        record.drifted_path_count = d.drifted_paths.len();
        record.break_glass = d.break_glass.as_ref().map(BreakGlassRecord::from);
        record.sources_unread = &d.sources_unread;
        if !d.rule_failures.is_empty() {
            let failures: Vec<String> = d.rule_failures.iter().map(|f| f.describe()).collect();
            record.error = Some(crate::text::ellipsize(&failures.join("; "), ERROR_BYTES));
        }
        record
    }

    /// The record of a review answered by `--on-error` after an internal failure.
    pub(crate) fn failed(
        endpoint: &'static str,
        uid: &'a str,
        version: &'a str,
        view: &Request<'a>,
        verdict: &'static str,
        error: String,
        latency_micros: u64,
    ) -> Self {
        let mut record = Self::base(endpoint, uid, version, view, latency_micros);
        record.verdict = verdict;
        record.reason = "internal-error";
        record.error = Some(error);
        record
    }

    /// The record of a review whose request could not be read, answered by
    /// `--on-error`: only its uid is known.
    pub(crate) fn unreadable(
        endpoint: &'static str,
        uid: &'a str,
        verdict: &'static str,
        error: String,
        latency_micros: u64,
    ) -> Self {
        let mut record = Self::empty(endpoint, uid, "", latency_micros);
        record.verdict = verdict;
        record.reason = "internal-error";
        record.error = Some(error);
        record
    }

    fn base(
        endpoint: &'static str,
        uid: &'a str,
        version: &'a str,
        view: &Request<'a>,
        latency_micros: u64,
    ) -> Self {
        use crate::text::clip;
        Self {
            user: clip(view.username),
            groups: view.groups,
            operation: view.operation.as_str(),
            group: clip(view.group),
            kind: clip(view.kind),
            resource: clip(view.resource),
            sub_resource: clip(view.sub_resource),
            namespace: clip(view.namespace),
            name: clip(view.name),
            dry_run: view.dry_run,
            ..Self::empty(endpoint, uid, version, latency_micros)
        }
    }

    fn empty(endpoint: &'static str, uid: &'a str, version: &'a str, latency_micros: u64) -> Self {
        Self {
            time: jiff::Timestamp::now().to_string(),
            endpoint,
            uid,
            user: "",
            groups: &[],
            operation: "",
            group: "",
            version,
            kind: "",
            resource: "",
            sub_resource: "",
            namespace: "",
            name: "",
            manager: None,
            mode: None,
            verdict: "allow",
            reason: "",
            drifted_paths: Vec::new(),
            drifted_path_count: 0,
            break_glass: None,
            dry_run: false,
            latency_micros,
            parse_micros: 0,
            error: None,
            sources_unread: &[],
        }
    }

    /// Writes the record through tracing; the audit layer prints it as one line.
    pub(crate) fn emit(&self) {
        emit(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::{Finding, Manager, Operation, Verdict};
    use crate::policy::Mode;

    /// The line's shape is a contract with whoever reads the audit log.
    #[test]
    fn a_break_glass_decision_has_a_stable_line() {
        let groups = vec!["sre".to_owned()];
        let view = Request {
            operation: Operation::Update,
            group: "apps",
            kind: "Deployment",
            resource_group: "apps",
            resource: "deployments",
            sub_resource: "",
            name: "web",
            namespace: "shop",
            username: "alice",
            groups: &groups,
            object: None,
            old_object: None,
            dry_run: false,
        };
        let d = Decision {
            verdict: Verdict::Allow,
            finding: Finding::BreakGlass,
            mode: Mode::Enforce,
            manager: Some(Manager::ArgoCd {
                application: "shop".into(),
                application_namespace: None,
            }),
            source: None,
            drifted_paths: vec!["/spec/replicas".into()],
            break_glass: Some(BreakGlassUse {
                user: "alice".into(),
                reason: "incident 42".into(),
                expires: "2030-01-01T00:00:00Z".into(),
            }),
            rule_failures: vec![],
            notes: vec![],
            reapplied: vec![],
            cleaned_up: vec![],
            kubectl_written: vec![],
            inputs_changed: vec![],
            sources_unread: vec![],
            dry_run: false,
            break_glass_max: None,
        };
        let record = AuditRecord::decided("validate", "u-1", "v1", &view, &d, 7);
        let line = serde_json::to_string(&record).unwrap();
        let (time, rest) = line.split_once(r#"Z","#).unwrap();
        assert!(time.starts_with(r#"{"time":""#), "{line}");
        assert_eq!(
            rest,
            r#""endpoint":"validate","uid":"u-1","user":"alice","groups":["sre"],"operation":"UPDATE","group":"apps","version":"v1","kind":"Deployment","resource":"deployments","subResource":"","namespace":"shop","name":"web","manager":"Argo CD application shop","mode":"enforce","verdict":"allow","reason":"break-glass","driftedPaths":["/spec/replicas"],"driftedPathCount":1,"breakGlass":{"user":"alice","reason":"incident 42","expires":"2030-01-01T00:00:00Z"},"dryRun":false,"latencyMicros":7,"parseMicros":0,"error":null}"#
        );
    }

    #[test]
    fn a_record_lists_the_paths_that_fit_and_counts_them_all() {
        let paths: Vec<String> = (0..90_000).map(|i| format!("/data/key-{i}")).collect();
        let shown = listed(&paths);
        assert!(!shown.is_empty() && shown.len() < paths.len());
        let bytes: usize = shown.iter().map(|p| p.len() + 3).sum();
        assert!(bytes <= LISTED_PATH_BYTES, "{bytes}");
        assert_eq!(shown, &paths[..shown.len()]);
        let few = &paths[..3];
        assert_eq!(listed(few), few);
    }
}
