//! The generative oracle's judgement: both answers for each edit, the rule
//! that explains where driftguard is stricter (computed from the objects),
//! and the agreement tables.
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::generate::{Edit, declared};

/// What became of the write itself.
#[derive(Clone, Debug, PartialEq)]
pub enum Written {
    /// kubectl failed: the apiserver refused it (validation, immutable
    /// field, conflict). Not a judged edit.
    Rejected(String),
    /// driftguard refused it although the namespace is in audit mode: it
    /// changes a decision input (the last-applied record, the tool's field
    /// ownership), refused in every mode. Nothing landed for the tool to
    /// answer; not a judged edit, and never the harmful direction.
    Refused(String),
    /// Accepted, and the object is what it was (kubectl's "no change", or a
    /// server-side apply that left the tool's fields as they were).
    NoChange,
    /// The object changed at these paths.
    Changed(Vec<String>),
}

/// Both answers for one edit.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub edit: Edit,
    pub written: Written,
    /// driftguard's verdict from its audit record (default precision).
    pub driftguard_drift: bool,
    /// The tool's answer; `None` when it gave none for the object.
    pub tool_drift: Option<bool>,
    /// driftguard's verdict on the same two objects under `precision:
    /// ownedFields`, judged by `driftguard::judge`.
    pub owned_fields_drift: bool,
    /// Every changed path that no ignore rule covers is one Git's manifest
    /// does not declare.
    pub outside_git: bool,
    /// The write took fields from the tool's field manager without changing
    /// their values (managedFields before and after).
    pub ownership_moved: bool,
}

impl Outcome {
    pub fn judged(&self) -> bool {
        matches!(self.written, Written::Changed(_))
    }

    fn tool(&self) -> bool {
        self.tool_drift.unwrap_or(false)
    }

    pub fn agrees(&self) -> bool {
        self.tool_drift == Some(self.driftguard_drift)
    }

    /// Allowed by driftguard, reverted or OutOfSync by the tool.
    pub fn harmful(&self) -> bool {
        !self.driftguard_drift && self.tool()
    }

    /// driftguard stricter where Git declares none of what changed.
    pub fn by_design(&self) -> bool {
        self.driftguard_drift && self.tool_drift == Some(false) && self.outside_git
    }

    /// driftguard stricter on something Git declares, or no tool answer.
    pub fn unexplained(&self) -> bool {
        self.tool_drift.is_none()
            || (self.driftguard_drift && self.tool_drift == Some(false) && !self.outside_git)
    }

    pub fn owned_fields_agrees(&self) -> bool {
        self.tool_drift == Some(self.owned_fields_drift)
    }

    /// ownedFields stricter because the write takes the tool's ownership
    /// without changing the value: ownership is what later writes are judged
    /// by under ownedFields, so driftguard refuses that move by design.
    pub fn owned_fields_by_design(&self) -> bool {
        self.owned_fields_drift && self.tool_drift == Some(false) && self.ownership_moved
    }

    /// Whether the run's pass criteria hold for this edit.
    pub fn passes(&self) -> bool {
        !self.judged()
            || (!self.harmful()
                && !self.unexplained()
                && (self.owned_fields_agrees() || self.owned_fields_by_design()))
    }
}

/// Whether every changed path that `ignored` does not cover is undeclared
/// in Git's `manifest`.
pub fn outside_git(manifest: &Value, paths: &[String], ignored: &[&str]) -> bool {
    paths
        .iter()
        .filter(|p| {
            !ignored
                .iter()
                .any(|i| *p == i || p.starts_with(&format!("{i}/")))
        })
        .all(|p| !declared(manifest, p))
}

/// The fieldsV1 leaves of the GitOps tools' managers (Argo CD's and Flux's
/// writes), as text.
fn tool_fields(object: &Value) -> std::collections::BTreeSet<String> {
    fn walk(v: &Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
        match v.as_object() {
            Some(map) if !map.is_empty() => {
                for (k, child) in map {
                    if k != "." {
                        walk(child, &format!("{prefix}/{k}"), out);
                    }
                }
            }
            _ => {
                out.insert(prefix.to_owned());
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    for entry in object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let manager = entry["manager"].as_str().unwrap_or_default();
        if manager.starts_with("argocd") || manager == "kustomize-controller" {
            walk(&entry["fieldsV1"], "", &mut out);
        }
    }
    out
}

/// Whether the write took fields from the tools' managers.
pub fn ownership_moved(before: &Value, after: &Value) -> bool {
    let after = tool_fields(after);
    tool_fields(before).iter().any(|f| !after.contains(f))
}

/// The test's policy with `precision: ownedFields`.
pub fn owned_fields_policy(policy_yaml: &str) -> driftguard::Policy {
    let text = format!("{policy_yaml}\nprecision: ownedFields\n");
    driftguard::Policy::from_yaml(&text, "gitops-policy.yaml + ownedFields")
        .expect("the policy loads")
}

/// Whether alice's UPDATE from `old` to `new` is drift under `policy`.
pub fn judged_drift(policy: &driftguard::Policy, old: &Value, new: &Value) -> bool {
    let api_version = new["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = new["kind"].as_str().unwrap_or_default();
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "00000000-0000-4000-8000-000000000003",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": crate::generate::resource(kind).split('.').next()},
        "name": new["metadata"]["name"], "namespace": new["metadata"]["namespace"], "operation": "UPDATE",
        "userInfo": {"username": "alice", "groups": ["developers", "system:authenticated"]},
        "object": new, "oldObject": old, "dryRun": false}});
    let body = serde_json::to_vec(&review).unwrap();
    let judged = driftguard::judge(
        policy,
        &body,
        driftguard::Endpoint::Validate,
        None,
        jiff::Timestamp::now(),
    )
    .expect("the review is judged");
    // Audit, or Deny for a write that changes a decision input (the
    // last-applied record, ownership), which is refused in every mode.
    judged.decision.verdict != driftguard::drift::Verdict::Allow
}

/// Counts for one row of a table.
#[derive(Default, Clone, Copy)]
pub struct Counts {
    pub edits: usize,
    pub rejected: usize,
    pub refused: usize,
    pub no_change: usize,
    pub judged: usize,
    pub tool_drift: usize,
    pub driftguard_drift: usize,
    pub agree: usize,
    pub by_design: usize,
    pub harmful: usize,
    pub unexplained: usize,
    pub owned_agree: usize,
    pub owned_by_design: usize,
}

impl Counts {
    fn add(&mut self, o: &Outcome) {
        self.edits += 1;
        match &o.written {
            Written::Rejected(_) => self.rejected += 1,
            Written::Refused(_) => self.refused += 1,
            Written::NoChange => self.no_change += 1,
            Written::Changed(_) => {
                self.judged += 1;
                self.tool_drift += usize::from(o.tool());
                self.driftguard_drift += usize::from(o.driftguard_drift);
                self.agree += usize::from(o.agrees());
                self.by_design += usize::from(o.by_design());
                self.harmful += usize::from(o.harmful());
                self.unexplained += usize::from(o.unexplained());
                self.owned_agree += usize::from(o.owned_fields_agrees());
                self.owned_by_design += usize::from(o.owned_fields_by_design());
            }
        }
    }

    pub fn of(outcomes: &[Outcome]) -> Counts {
        let mut c = Counts::default();
        outcomes.iter().for_each(|o| c.add(o));
        c
    }

    fn row(&self, label: &str) -> String {
        format!(
            "| {label} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.edits,
            self.rejected,
            self.refused,
            self.no_change,
            self.judged,
            self.tool_drift,
            self.driftguard_drift,
            self.agree,
            self.by_design,
            self.harmful,
            self.unexplained,
            self.owned_agree,
            self.owned_by_design
        )
    }
}

const HEADER: &str = "edits | rejected by the apiserver | refused by driftguard in every mode | no change | judged | tool: drift | driftguard: drift | agree | stricter, outside Git (by design) | allowed, then reverted (harmful) | unexplained | ownedFields agrees | ownedFields stricter: ownership taken (by design) |";
const ALIGN: &str = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

fn grouped(title: &str, outcomes: &[Outcome], key: impl Fn(&Outcome) -> String, out: &mut String) {
    let mut rows: BTreeMap<String, Counts> = BTreeMap::new();
    for o in outcomes {
        rows.entry(key(o)).or_default().add(o);
    }
    let _ = writeln!(out, "\n| {title} | {HEADER}\n{ALIGN}");
    for (label, c) in &rows {
        let _ = writeln!(out, "{}", c.row(label));
    }
    let _ = writeln!(out, "{}", Counts::of(outcomes).row("**all**"));
}

/// The run's tables (by kind, by write method and manager, by shape) as Markdown.
pub fn tables(run: &str, seed: u64, outcomes: &[Outcome]) -> String {
    let mut out = format!("### {run} (ORACLE_SEED={seed})\n");
    grouped("kind", outcomes, |o| o.edit.kind.clone(), &mut out);
    grouped(
        "write (field manager)",
        outcomes,
        |o| format!("{} ({})", o.edit.method.name(), o.edit.manager_name()),
        &mut out,
    );
    grouped(
        "edit",
        outcomes,
        |o| o.edit.shape.name().to_owned(),
        &mut out,
    );
    out
}

/// One line per run for the summary table.
pub fn summary_row(run: &str, outcomes: &[Outcome]) -> String {
    Counts::of(outcomes).row(run)
}

pub fn summary_header() -> String {
    format!("| tool and mode | {HEADER}\n{ALIGN}")
}

/// The edits that break the pass criteria, one line each, to replay.
pub fn failures(run: &str, outcomes: &[Outcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter(|o| !o.passes())
        .map(|o| {
            format!(
                "{run}: {} {}/{} by {} ({}), {}: ops {:?}; changed {:?}; driftguard drift={} ownedFields drift={} tool drift={:?} outside Git={}",
                o.edit.kind,
                o.edit.namespace,
                o.edit.name,
                o.edit.method.name(),
                o.edit.manager_name(),
                o.edit.shape.name(),
                o.edit.ops,
                o.written,
                o.driftguard_drift,
                o.owned_fields_drift,
                o.tool_drift,
                o.outside_git
            )
        })
        .collect()
}
