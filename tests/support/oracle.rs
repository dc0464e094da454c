//! The differential oracle: random single-field edits to GitOps-managed
//! objects of the seed's kinds, each judged by driftguard (in audit mode) and
//! by the real GitOps tool (does Argo CD call the object OutOfSync, does
//! Flux's next reconcile revert it), and the table of where they agree.
//!
//! Each edit gets its own object, so one reconcile answers for all of them.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

/// How many edits each tool is asked about.
pub const EDITS: usize = 200;

/// One kind of single-field edit a person makes by hand.
#[derive(Clone, Copy, Debug)]
pub struct EditKind {
    pub kind: &'static str,
    pub what: &'static str,
    /// The field the edit touches, for the tool's answer.
    pub pointer: &'static str,
    /// A field Git does not declare (added, or defaulted by the apiserver):
    /// neither tool reverts it; driftguard's default precision (`all`) calls
    /// it drift on purpose (see the README's agreement table).
    pub undeclared: bool,
}

/// A planned edit: the object, its kind of edit and the patch that makes it.
#[derive(Clone, Debug)]
pub struct Edit {
    pub object: String,
    pub edit: EditKind,
    /// `kubectl patch --type` and body.
    pub patch_type: &'static str,
    pub patch: Value,
    /// The edited field's value after the edit; `None` when the edit removes it.
    pub edited: Option<Value>,
    /// `kubectl patch --field-manager`, or kubectl's own (`kubectl-patch`):
    /// Flux removes what `kubectl*` managers write, not what others do.
    pub field_manager: Option<&'static str>,
}

impl Edit {
    pub fn resource(&self) -> &'static str {
        match self.edit.kind {
            "Deployment" => "deployment",
            "Service" => "service",
            "ConfigMap" => "configmap",
            _ => "cronjob",
        }
    }

    /// Whether the live object no longer carries the edit.
    pub fn reverted(&self, live: &Value) -> bool {
        live.pointer(self.edit.pointer) != self.edited.as_ref()
    }
}

const fn kind(
    kind: &'static str,
    what: &'static str,
    pointer: &'static str,
    undeclared: bool,
) -> EditKind {
    EditKind {
        kind,
        what,
        pointer,
        undeclared,
    }
}

/// The catalog, by object kind.
pub const CATALOG: [&[EditKind]; 4] = [
    &[
        kind(
            "Deployment",
            "image",
            "/spec/template/spec/containers/0/image",
            false,
        ),
        kind("Deployment", "replicas (ignored)", "/spec/replicas", false),
        kind(
            "Deployment",
            "env value",
            "/spec/template/spec/containers/0/env/0/value",
            false,
        ),
        kind(
            "Deployment",
            "env var removed",
            "/spec/template/spec/containers/0/env/0/name",
            false,
        ),
        kind(
            "Deployment",
            "label added",
            "/metadata/labels/example.com~1by-hand",
            true,
        ),
        kind(
            "Deployment",
            "pod template annotation added",
            "/spec/template/metadata/annotations/example.com~1restartedAt",
            true,
        ),
    ],
    &[
        kind(
            "Service",
            "annotation added (ignored)",
            "/metadata/annotations/example.com~1note",
            false,
        ),
        kind(
            "Service",
            "Git's annotation changed (ignored)",
            "/metadata/annotations/example.com~1owner",
            false,
        ),
        // Not the port itself: it keys the list, and a changed key makes
        // server-side apply add a second entry, which Flux cannot apply.
        kind("Service", "targetPort", "/spec/ports/0/targetPort", false),
        kind("Service", "selector", "/spec/selector/app", false),
        kind(
            "Service",
            "label added",
            "/metadata/labels/example.com~1by-hand",
            true,
        ),
    ],
    &[
        kind("ConfigMap", "value", "/data/LOG_LEVEL", false),
        kind("ConfigMap", "key removed", "/data/LOG_LEVEL", false),
        kind("ConfigMap", "key added", "/data/EXTRA", true),
        kind(
            "ConfigMap",
            "label added",
            "/metadata/labels/example.com~1by-hand",
            true,
        ),
    ],
    &[
        kind("CronJob", "schedule (ignored)", "/spec/schedule", false),
        kind(
            "CronJob",
            "image",
            "/spec/jobTemplate/spec/template/spec/containers/0/image",
            false,
        ),
        kind("CronJob", "suspend (defaulted)", "/spec/suspend", true),
        kind(
            "CronJob",
            "label added",
            "/metadata/labels/example.com~1by-hand",
            true,
        ),
    ],
];

/// xorshift64*: reproducible from the printed seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// `ORACLE_SEED`, or one from the clock (printed, to replay a run).
pub fn seed() -> u64 {
    std::env::var("ORACLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        })
}

/// The object `i` of the oracle (kind `i % 4`), as Git declares it.
fn manifest(namespace: &str, i: usize) -> String {
    match i % 4 {
        0 => format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: o{i}, namespace: {namespace}}}\nspec:\n  replicas: 2\n  paused: true\n  selector: {{matchLabels: {{app: o{i}}}}}\n  template:\n    metadata: {{labels: {{app: o{i}}}}}\n    spec:\n      containers:\n        - name: app\n          image: nginx:1.27\n          env: [{{name: MODE, value: live}}]\n"
        ),
        1 => format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: o{i}\n  namespace: {namespace}\n  annotations: {{example.com/owner: shop}}\nspec:\n  selector: {{app: o{i}}}\n  ports: [{{name: http, port: 80, targetPort: 8080}}]\n"
        ),
        2 => format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: o{i}, namespace: {namespace}}}\ndata: {{LOG_LEVEL: info}}\n"
        ),
        _ => format!(
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: o{i}, namespace: {namespace}}}\nspec:\n  schedule: \"0 3 * * *\"\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers: [{{name: job, image: \"busybox:1.36\"}}]\n"
        ),
    }
}

/// All [`EDITS`] objects as one multi-document file for Git.
pub fn manifests(namespace: &str) -> String {
    (0..EDITS)
        .map(|i| manifest(namespace, i))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// One random edit per object.
pub fn plan(rng: &mut Rng) -> Vec<Edit> {
    (0..EDITS)
        .map(|i| {
            let choices = CATALOG[i % 4];
            let edit = choices[rng.below(choices.len())];
            let n = rng.below(1000);
            let (patch_type, patch, edited) = patch_for(&edit, n);
            let field_manager = [None, Some("ops-script")][rng.below(2)];
            Edit {
                object: format!("o{i}"),
                edit,
                patch_type,
                patch,
                edited,
                field_manager,
            }
        })
        .collect()
}

fn replace(pointer: &str, value: Value) -> (&'static str, Value, Option<Value>) {
    (
        "json",
        json!([{"op": "replace", "path": pointer, "value": value}]),
        Some(value),
    )
}

fn merge(body: Value, edited: Value) -> (&'static str, Value, Option<Value>) {
    ("merge", body, Some(edited))
}

fn patch_for(edit: &EditKind, n: usize) -> (&'static str, Value, Option<Value>) {
    let tag = format!("edit-{n}");
    let label = json!({"metadata": {"labels": {"example.com/by-hand": tag}}});
    match (edit.kind, edit.what) {
        (_, "label added") => merge(label, json!(tag)),
        ("Deployment", "image") | ("CronJob", "image") => {
            replace(edit.pointer, json!(format!("nginx:{tag}")))
        }
        ("Deployment", "replicas (ignored)") => replace(edit.pointer, json!(3 + n % 5)),
        ("Deployment", "env value") => replace(edit.pointer, json!(tag)),
        ("Deployment", "env var removed") => (
            "json",
            json!([{"op": "remove", "path": "/spec/template/spec/containers/0/env/0"}]),
            None,
        ),
        ("Deployment", _) => merge(
            json!({"spec": {"template": {"metadata": {"annotations": {"example.com/restartedAt": tag}}}}}),
            json!(tag),
        ),
        ("Service", "annotation added (ignored)") => merge(
            json!({"metadata": {"annotations": {"example.com/note": tag}}}),
            json!(tag),
        ),
        ("Service", "Git's annotation changed (ignored)") => merge(
            json!({"metadata": {"annotations": {"example.com/owner": tag}}}),
            json!(tag),
        ),
        ("Service", "targetPort") => replace(edit.pointer, json!(9000 + n)),
        ("Service", _) => merge(json!({"spec": {"selector": {"app": tag}}}), json!(tag)),
        ("ConfigMap", "value") => replace(edit.pointer, json!(tag)),
        ("ConfigMap", "key removed") => (
            "json",
            json!([{"op": "remove", "path": "/data/LOG_LEVEL"}]),
            None,
        ),
        ("ConfigMap", _) => merge(json!({"data": {"EXTRA": tag}}), json!(tag)),
        ("CronJob", "schedule (ignored)") => {
            replace(edit.pointer, json!(format!("{} 4 * * *", n % 60)))
        }
        _ => replace(edit.pointer, json!(true)),
    }
}

/// Both answers for one edit.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub edit: Edit,
    pub driftguard_drift: bool,
    pub tool_drift: bool,
    /// driftguard's verdict on the same two objects under `precision:
    /// ownedFields`, judged offline by `driftguard::judge`.
    pub owned_fields_drift: bool,
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
        "resource": {"group": group, "version": version, "resource": format!("{}s", kind.to_lowercase())},
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
    judged.decision.verdict == driftguard::drift::Verdict::Audit
}

impl Outcome {
    pub fn agrees(&self) -> bool {
        self.driftguard_drift == self.tool_drift
    }

    /// driftguard stricter on a field Git does not declare: by design.
    pub fn deliberate(&self) -> bool {
        self.edit.edit.undeclared && self.driftguard_drift && !self.tool_drift
    }
}

/// The agreement table, one row per kind of edit, as Markdown.
pub fn table(tool: &str, seed: u64, outcomes: &[Outcome]) -> String {
    let mut rows: BTreeMap<(&str, &str, &str), [usize; 7]> = BTreeMap::new();
    for o in outcomes {
        let manager = o.edit.field_manager.unwrap_or("kubectl-patch");
        let row = rows
            .entry((o.edit.edit.kind, o.edit.edit.what, manager))
            .or_default();
        row[0] += 1;
        row[1] += usize::from(o.driftguard_drift);
        row[2] += usize::from(o.tool_drift);
        row[3] += usize::from(o.agrees());
        row[4] += usize::from(o.deliberate());
        row[5] += usize::from(o.owned_fields_drift);
        row[6] += usize::from(o.owned_fields_drift == o.tool_drift);
    }
    let mut out = format!(
        "{tool}: {} edits (ORACLE_SEED={seed})\n\n| kind | edit | field manager | edits | {tool}: drift | driftguard: drift | agree | by design | ownedFields: drift | ownedFields: agree |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
        outcomes.len()
    );
    for ((kind, what, manager), [n, dg, tool_n, agree, by_design, owned, owned_agree]) in &rows {
        let _ = writeln!(
            out,
            "| {kind} | {what} | {manager} | {n} | {tool_n} | {dg} | {agree} | {by_design} | {owned} | {owned_agree} |"
        );
    }
    let agree = outcomes.iter().filter(|o| o.agrees()).count();
    let by_design = outcomes.iter().filter(|o| o.deliberate()).count();
    let _ = writeln!(
        out,
        "\nagree: {agree}/{}; differ by design: {by_design}; unexplained: {}; precision ownedFields agrees: {}/{}",
        outcomes.len(),
        outcomes.len() - agree - by_design,
        outcomes
            .iter()
            .filter(|o| o.owned_fields_drift == o.tool_drift)
            .count(),
        outcomes.len()
    );
    out
}
