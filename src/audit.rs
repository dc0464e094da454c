//! The audit record: one JSON line per decided review on stdout, under the
//! tracing target `driftguard::audit`, apart from diagnostic logs (stderr).

use serde::Serialize;

use crate::drift::{BreakGlassUse, Decision, Request};

pub const TARGET: &str = "driftguard::audit";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord<'a> {
    pub time: String,
    /// `validate` or `mutate`: which webhook asked.
    pub endpoint: &'static str,
    pub uid: &'a str,
    pub user: &'a str,
    pub groups: &'a [String],
    pub operation: &'static str,
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub resource: &'a str,
    pub sub_resource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub manager: Option<String>,
    pub mode: Option<&'static str>,
    pub verdict: &'static str,
    pub reason: &'static str,
    pub drifted_paths: &'a [String],
    pub break_glass: Option<&'a BreakGlassUse>,
    pub dry_run: bool,
    pub latency_micros: u64,
    pub error: Option<String>,
}

impl<'a> AuditRecord<'a> {
    /// The record of a decided review.
    pub fn decided(
        endpoint: &'static str,
        uid: &'a str,
        version: &'a str,
        view: &Request<'a>,
        d: &'a Decision,
        latency_micros: u64,
    ) -> Self {
        let mut record = Self::base(endpoint, uid, version, view, latency_micros);
        record.manager = d.manager.as_ref().map(ToString::to_string);
        record.mode = Some(d.mode.as_str());
        record.verdict = d.verdict.as_str();
        record.reason = d.finding.code();
        record.drifted_paths = &d.drifted_paths;
        record.break_glass = d.break_glass.as_ref();
        if !d.rule_failures.is_empty() {
            let failures: Vec<String> = d.rule_failures.iter().map(|f| f.describe()).collect();
            record.error = Some(failures.join("; "));
        }
        record
    }

    /// The record of a review answered by `--on-error` after an internal failure.
    pub fn failed(
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
    pub fn unreadable(
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
        Self {
            user: view.username,
            groups: view.groups,
            operation: view.operation.as_str(),
            group: view.group,
            kind: view.kind,
            resource: view.resource,
            sub_resource: view.sub_resource,
            namespace: view.namespace,
            name: view.name,
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
            drifted_paths: &[],
            break_glass: None,
            dry_run: false,
            latency_micros,
            error: None,
        }
    }

    /// Writes the record through tracing; the audit layer prints it as one line.
    pub fn emit(&self) {
        let line = serde_json::to_string(self).expect("an audit record serializes");
        tracing::info!(target: TARGET, record = %line);
    }
}
