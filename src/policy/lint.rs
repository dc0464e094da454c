//! `driftguard policy lint`: load a file the way the server would, then flag
//! jq expressions that are not path expressions (Argo CD's `del(...)` fails on
//! them at run time and ignores nothing) and print a rewrite that works.

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::Policy;
use super::identity_traps::{self, Kind, Section};
use super::ignore::RuleSet;
use super::jq::{JqInput, JqPath, RunError};
use super::path::{Path, Segment};
use crate::deadline::{Deadline, Stopped};

/// Findings for one file. `problems` make `lint` exit non-zero.
#[derive(Debug, Default)]
pub struct Report {
    /// Remarks that do not fail the lint.
    pub notes: Vec<String>,
    /// What is wrong.
    pub problems: Vec<String>,
}

/// Lints policy `text` read from `file` (the name messages use).
pub fn lint(text: &str, file: &str) -> Report {
    lint_with(text, file, &|source| probe_within(source, PROBE_LIMIT))
}

/// [`lint`] with the jq probe given: the fuzzer lints without a thread and a
/// 5 s wait per expression.
pub fn lint_with(text: &str, file: &str, probe: &dyn Fn(&str) -> Probed) -> Report {
    let mut report = Report::default();
    match Policy::from_any_yaml(text, file) {
        Ok((policy, notes)) => {
            let is_policy_file = notes.is_empty();
            report.notes.extend(notes);
            if is_policy_file {
                report.notes.push(format!(
                    "{file}: driftguard policy with {} ignore rule(s) loads",
                    policy.rules.len()
                ));
                check_rules(&policy.rules, text, file, probe, &mut report);
                check_identities(&policy, text, file, &mut report);
                check_settings(&policy, file, &mut report);
            }
            for app in &policy.applications {
                report.notes.push(format!(
                    "{file}: Application {} has {} ignore rule(s)",
                    app.name,
                    app.rules.len()
                ));
                check_rules(&app.rules, text, file, probe, &mut report);
            }
        }
        Err(e) => report.problems.push(e.to_string()),
    }
    report
}

/// Settings that load but are almost surely a mistake (the careless
/// operator's review of issue 48): each flagged with what it does.
fn check_settings(policy: &Policy, file: &str, report: &mut Report) {
    const ARGO_TRACKING: &str = "argocd.argoproj.io/tracking-id";
    if let Some(argo) = &policy.argocd
        && argo.tracking_annotation != ARGO_TRACKING
    {
        report.problems.push(format!(
            "{file}: gitops.argocd.trackingAnnotation `{}`: Argo CD writes `{ARGO_TRACKING}` and no other key, so the objects it tracks by annotation are unmanaged under this policy",
            argo.tracking_annotation
        ));
    }
    let exempt = |user: &str, groups: &[&str]| {
        let groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        [&policy.controllers, &policy.trusted]
            .iter()
            .any(|ids| ids.contains(user, &groups))
    };
    let sa = |name: &str| format!("system:serviceaccount:kube-system:{name}");
    let kube = [
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ];
    for (user, groups, what) in [
        (
            sa("horizontal-pod-autoscaler"),
            &kube[..],
            "the HorizontalPodAutoscaler's scale writes",
        ),
        (
            sa("deployment-controller"),
            &kube[..],
            "the Deployment controller's writes",
        ),
        (
            "system:node:driftguard-probe".to_owned(),
            &["system:nodes", "system:authenticated"][..],
            "the kubelets' writes",
        ),
    ] {
        if !exempt(&user, groups) {
            report.problems.push(format!(
                "{file}: `{user}` is neither a controller nor trusted: {what} to managed objects are judged as manual changes (Helm replaces a whole list: keep the defaults' `system:serviceaccount:kube-system:*` and `system:node:*` in trusted.users)"
            ));
        }
    }
    if exempt(
        "kubernetes-admin",
        &["system:masters", "system:authenticated"],
    ) {
        report.problems.push(format!(
            "{file}: `system:masters` is exempt: every cluster admin's write (kubeadm's and kind's `kubernetes-admin`) passes unjudged"
        ));
    }
}

/// Identity patterns whose glob spans `:`-separated parts (those that cover
/// an identity their section must never cover do not even load).
fn check_identities(policy: &Policy, text: &str, file: &str, report: &mut Report) {
    for (section, identities) in [
        (Section::Controllers, &policy.controllers),
        (Section::Trusted, &policy.trusted),
        (Section::BreakGlass, &policy.break_glass.allowed),
    ] {
        let (users, groups) = identities.patterns();
        for (patterns, kind) in [(users, Kind::Users), (groups, Kind::Groups)] {
            for p in patterns {
                if let Some(why) = identity_traps::warning(p) {
                    let line = line_of(text, p)
                        .map(|l| format!(":{l}"))
                        .unwrap_or_default();
                    let field = section.field(kind);
                    report
                        .problems
                        .push(format!("{file}{line}: {field}: {why}"));
                }
            }
        }
    }
}

fn check_rules(
    rules: &RuleSet,
    text: &str,
    file: &str,
    probe: &dyn Fn(&str) -> Probed,
    report: &mut Report,
) {
    for rule in rules.iter() {
        for pointer in &rule.pointers {
            if let Some(problem) = field_selector(pointer) {
                let written = pointer.to_pointer();
                let line = line_of(text, &written).map(|l| format!(":{l}"));
                report.problems.push(format!(
                    "{file}{}: {} pointer `{written}`: {problem}",
                    line.unwrap_or_default(),
                    rule.origin,
                ));
            }
        }
        for jq in &rule.jq {
            let problem = match probe(jq.source()) {
                Probed::Finished(problem) => problem,
                Probed::Everything(why) => {
                    report.problems.push(format!(
                        "{file}{}: {} jq `{}` {why}",
                        line_of(text, jq.source())
                            .map(|l| format!(":{l}"))
                            .unwrap_or_default(),
                        rule.origin,
                        jq.source(),
                    ));
                    continue;
                }
                Probed::TooSlow => {
                    report.problems.push(format!(
                        "{file}{}: {} jq `{}` did not finish on a probe object within {}s: it ends, but is too slow to run in an admission decision",
                        line_of(text, jq.source()).map(|l| format!(":{l}")).unwrap_or_default(),
                        rule.origin,
                        jq.source(),
                        PROBE_LIMIT.as_secs()
                    ));
                    continue;
                }
            };
            if let Some(problem) = problem {
                let line = line_of(text, jq.source())
                    .map(|l| format!(":{l}"))
                    .unwrap_or_default();
                let mut msg = format!(
                    "{file}{line}: {} jq `{}` failed on a probe object: {problem}; Argo CD's del() fails on it and ignores nothing",
                    rule.origin,
                    jq.source()
                );
                if let Some(fix) = rewrite(jq.source()) {
                    msg.push_str(&format!("; use: {fix}"));
                }
                report.problems.push(msg);
            }
        }
    }
}

/// How long lint waits for one expression on its probe object.
const PROBE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What probing one jq expression found.
pub enum Probed {
    /// It ended: the problem, if it is not a path expression.
    Finished(Option<String>),
    /// It selects the whole object: why.
    Everything(String),
    /// It did not end within the probe's limit.
    TooSlow,
}

/// Compiles and probes `source` on this thread, however long that takes.
pub fn probe_now(source: &str) -> Probed {
    probe_until(source, &Deadline::none()).unwrap_or(Probed::TooSlow)
}

/// [`probe_now`], stopped at `deadline`.
fn probe_until(source: &str, deadline: &Deadline) -> Result<Probed, Stopped> {
    let jq = match JqPath::compile(source) {
        Ok(jq) => jq,
        Err(e) => return Ok(Probed::Finished(Some(e.to_string()))),
    };
    if let Some(why) = selects_everything(&jq, deadline)? {
        return Ok(Probed::Everything(why));
    }
    Ok(Probed::Finished(check_expression(&jq, deadline)?))
}

/// Top-level keys of [`everything_probe`] that no rule names.
const UNNAMED: &str = "driftguard-unnamed-";

/// An object with the usual top-level fields and, beside them, one field of
/// every JSON type under a name no expression uses.
fn everything_probe() -> Value {
    let mut probe =
        json!({"apiVersion": "v1", "kind": "Probe", "metadata": {"name": "p"}, "spec": {}});
    for (kind, value) in [
        ("object", json!({})),
        ("array", json!([])),
        ("string", json!("")),
        ("number", json!(0)),
        ("bool", json!(false)),
        ("null", Value::Null),
    ] {
        probe[format!("{UNNAMED}{kind}")] = value;
    }
    probe
}

/// Why `jq` selects the whole object, if it does: the root (`.`, `..`,
/// `getpath([])`, `X // .`) or top-level fields it does not name (`.[]`,
/// `.[] | select(type == "object")`). Like the empty JSON pointer, such a
/// rule would ignore every field. Tried on an empty object (where `X // .`
/// falls back to `.`) and on `everything_probe`.
pub fn selects_everything(jq: &JqPath, deadline: &Deadline) -> Result<Option<String>, Stopped> {
    for input in [json!({}), everything_probe()] {
        match jq.paths(&JqInput::new(&input), deadline)? {
            Err(e @ RunError::WholeObject(_)) => return Ok(Some(e.to_string())),
            Ok(paths)
                if paths.iter().any(
                    |p| matches!(p.0.as_slice(), [Segment::Key(k)] if k.starts_with(UNNAMED)),
                ) =>
            {
                return Ok(Some(
                    "selects top-level fields it does not name, so it would ignore every field (like the empty JSON pointer): name the fields to ignore".into(),
                ));
            }
            _ => {}
        }
    }
    Ok(None)
}

/// [`selects_everything`] for `source`, under a deadline of `limit` (an
/// expression can be slow even on a small object; its checkpoints stop it
/// there, and `lint` reports it). `None` when it compiles not, ends not in
/// time, or selects less than everything.
pub fn selects_everything_within(source: &str, limit: std::time::Duration) -> Option<String> {
    let jq = JqPath::compile(source).ok()?;
    selects_everything(&jq, &Deadline::at(Instant::now() + limit)).ok()?
}

/// [`check_expression`] under a deadline of `limit`: an expression in the
/// terminating subset always ends, but `(.,.)|(.,.)|...` doubles its work at
/// every stage, and lint must not hang on it. Its checkpoints stop it.
fn probe_within(source: &str, limit: std::time::Duration) -> Probed {
    probe_until(source, &Deadline::at(Instant::now() + limit)).unwrap_or(Probed::TooSlow)
}

/// Runs the expression on a probe object that has every key the expression
/// names at every level, so that most branches are reached. A path expression
/// yields paths (or nothing); anything else fails.
pub fn check_expression(jq: &JqPath, deadline: &Deadline) -> Result<Option<String>, Stopped> {
    let probe = probe(jq.source());
    Ok(jq
        .paths(&JqInput::new(&probe), deadline)?
        .err()
        .map(|e| e.to_string()))
}

fn probe(expr: &str) -> Value {
    let keys = names_in(expr);
    // Bound the probe's size: keys^depth nodes.
    let mut depth = 6;
    while depth > 2 && (keys.len().max(1) as f64).powi(depth) > 20_000.0 {
        depth -= 1;
    }
    build(&keys, depth)
}

fn build(keys: &[String], depth: i32) -> Value {
    if depth == 0 {
        return Value::String("probe".into());
    }
    let child = build(keys, depth - 1);
    Value::Object(
        keys.iter()
            .map(|k| (k.clone(), child.clone()))
            .collect::<Map<_, _>>(),
    )
}

/// `.name` identifiers and quoted strings: the keys an expression can reach.
fn names_in(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            '.' => {
                let start = i + 1;
                let mut j = start;
                while j < bytes.len() && (bytes[j].is_alphanumeric() || bytes[j] == '_') {
                    j += 1;
                }
                if j > start {
                    names.push(bytes[start..j].iter().collect());
                }
                i = j.max(i + 1);
            }
            '"' => {
                let mut j = i + 1;
                let mut s = String::new();
                while j < bytes.len() && bytes[j] != '"' {
                    if bytes[j] == '\\' && j + 1 < bytes.len() {
                        j += 1;
                    }
                    s.push(bytes[j]);
                    j += 1;
                }
                names.push(s);
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Rewrites the common `X | to_entries[] | select(COND)` form into a path expression.
pub fn rewrite(expr: &str) -> Option<String> {
    let marker = "to_entries[] | select(";
    let at = expr.find(marker)?;
    let prefix = expr[..at].trim_end().trim_end_matches('|').trim_end();
    let cond = expr[at + marker.len()..].trim_end().strip_suffix(')')?;
    if cond.contains(".value") {
        return Some(format!(
            "{prefix} | (to_entries[] | select({cond}) | .key) as $k | .[$k]"
        ));
    }
    let cond = cond.replace(".key | ", "").replace(".key", ".");
    Some(format!("{prefix} | .[keys[] | select({cond})]"))
}

/// A pointer segment written as a field selector (`name=app`), which JSON
/// pointers (and Argo CD's) do not have: it matches only a key of that name.
fn field_selector(pointer: &Path) -> Option<String> {
    let (at, key, value) = pointer.0.iter().enumerate().find_map(|(i, s)| match s {
        Segment::Key(k) => k
            .split_once('=')
            .filter(|(f, v)| !f.is_empty() && !v.is_empty())
            .map(|(f, v)| (i, f, v)),
        Segment::Index(_) => None,
    })?;
    let list = Path(pointer.0[..at].to_vec())
        .to_pointer()
        .replace('/', ".");
    let rest = Path(pointer.0[at + 1..].to_vec())
        .to_pointer()
        .replace('/', ".");
    let rest = if rest.is_empty() {
        rest
    } else {
        format!(" | {rest}")
    };
    Some(format!(
        "JSON pointers index a list by position (`{}/0`) and have no field selectors, so \
         `{key}={value}` matches only a key of that name; to select by a field use \
         jqPathExpressions: ['{list}[] | select(.{key}? == \"{value}\"){rest}']",
        Path(pointer.0[..at].to_vec()).to_pointer()
    ))
}

fn line_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_LABELS: &str = r#".metadata.labels | select(. != null) | to_entries[] | select(.key | startswith("service.istio.io"))"#;

    /// The careless operator's review of issue 48: each loads, each is
    /// flagged with what it does; the defaults are not.
    #[test]
    fn settings_that_load_but_lock_out_or_open_are_flagged() {
        let problems = |yaml: &str| lint(yaml, "p.yaml").problems;
        assert_eq!(problems("{}"), Vec::<String>::new());
        for (yaml, says) in [
            (
                "gitops: {argocd: {trackingAnnotation: argocd.argoproj.io/tracking_id}}\n",
                "Argo CD writes `argocd.argoproj.io/tracking-id` and no other key",
            ),
            (
                "trusted: {users: [alice]}\n",
                "horizontal-pod-autoscaler` is neither a controller nor trusted",
            ),
            (
                "trusted: {users: ['system:serviceaccount:kube-system:*'], groups: [system:masters]}\n",
                "`system:masters` is exempt",
            ),
        ] {
            let found = problems(yaml);
            assert!(found.iter().any(|p| p.contains(says)), "{yaml}: {found:?}");
        }
    }

    #[test]
    fn expressions_that_select_the_whole_object_are_found() {
        for expr in [
            ".",
            "..",
            ".[]",
            "getpath([])",
            ".spec.nothing // .",
            ".[] | select(type == \"object\")",
            ".[] | select(type == \"string\")",
            "(.metadata, .)",
            "recurse",
        ] {
            let jq = JqPath::compile(expr).unwrap();
            assert!(
                selects_everything(&jq, &Deadline::none())
                    .unwrap()
                    .is_some(),
                "{expr}"
            );
            assert!(
                selects_everything_within(expr, std::time::Duration::from_secs(5)).is_some(),
                "{expr}"
            );
        }
        for expr in [
            ".spec.replicas",
            ".metadata.labels[]",
            ".spec.template.spec.containers[] | select(.name == \"app\") | .image",
            ".metadata.annotations | select(. != null) | .[keys[] | select(startswith(\"x\"))]",
            ".spec",
            ".metadata",
            SEED_LABELS,
        ] {
            let jq = JqPath::compile(expr).unwrap();
            assert_eq!(
                selects_everything(&jq, &Deadline::none()).unwrap(),
                None,
                "{expr}"
            );
        }
    }

    #[test]
    fn the_policy_file_refuses_them_at_their_line_and_lint_reports_it() {
        let text = "ignoreDifferences:\n  - kind: Deployment\n    jqPathExpressions:\n      - .spec.replicas\n      - .[]\n";
        let err = Policy::from_yaml(text, "p.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with("p.yaml:5:9: ignoreDifferences[0].jqPathExpressions[1]")
                && err.contains("every field"),
            "{err}"
        );
        let report = lint(text, "p.yaml");
        assert!(
            report.problems.iter().any(|p| p.starts_with("p.yaml:5:9:")),
            "{report:?}"
        );
    }

    #[test]
    fn identity_traps_are_refused_or_reported() {
        let refused =
            "trusted:\n  users: ['system:serviceaccount:*:argocd-application-controller']\n";
        let err = Policy::from_yaml(refused, "p.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("trusted.users") && err.contains("{argocd,argocd-apps}"),
            "{err}"
        );
        let report = lint(refused, "p.yaml");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.contains("a namespace it does not name")),
            "{report:?}"
        );

        let warned = "breakGlass:\n  allowedUsers: ['oidc:*:admin']\n";
        let report = lint(warned, "p.yaml");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.starts_with("p.yaml:2: breakGlass.allowedUsers: `oidc:*:admin`")),
            "{report:?}"
        );
        assert!(
            lint("{}", "p.yaml").problems.is_empty(),
            "the default policy has no trap"
        );
    }

    #[test]
    fn rewrites_the_seed_expression_as_the_issue_asks() {
        assert_eq!(
            rewrite(SEED_LABELS).unwrap(),
            r#".metadata.labels | select(. != null) | .[keys[] | select(startswith("service.istio.io"))]"#
        );
    }

    #[test]
    fn flags_non_path_and_accepts_rewrites() {
        let seeds = [
            SEED_LABELS,
            r#".metadata.annotations | select(. != null) | to_entries[] | select(.key == "cert-manager.io/issuer")"#,
            r#".metadata.labels | to_entries[] | select(.value == "x")"#,
        ];
        for expr in seeds {
            let jq = JqPath::compile(expr).unwrap();
            assert!(
                check_expression(&jq, &Deadline::none()).unwrap().is_some(),
                "should flag {expr}"
            );
            let fixed = rewrite(expr).unwrap();
            let jq = JqPath::compile(&fixed).unwrap();
            assert_eq!(
                check_expression(&jq, &Deadline::none()).unwrap(),
                None,
                "rewrite {fixed} should be a path expression"
            );
        }
    }

    #[test]
    fn a_slow_expression_is_reported_not_waited_for() {
        let slow = format!("{}|select(false)", vec!["(.,.)"; 30].join("|"));
        let started = std::time::Instant::now();
        assert!(matches!(
            probe_within(&slow, std::time::Duration::from_millis(200)),
            Probed::TooSlow
        ));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // Stopped on this thread: nothing left running behind.
        let started = std::time::Instant::now();
        assert_eq!(
            selects_everything_within(&slow, std::time::Duration::from_millis(200)),
            None
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert!(matches!(
            probe_within(".spec.replicas", std::time::Duration::from_secs(5)),
            Probed::Finished(None)
        ));
    }

    #[test]
    fn a_field_selector_in_a_pointer_is_reported_with_its_jq() {
        let text = "ignoreDifferences:\n  - kind: Deployment\n    jsonPointers:\n      - /spec/template/spec/containers/name=app/image\n      - /metadata/labels/a=b\n";
        let report = lint(text, "p.yaml");
        assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
        assert!(
            report.problems[0].starts_with("p.yaml:4: "),
            "{}",
            report.problems[0]
        );
        assert!(
            report.problems[0].contains(
                r#"'.spec.template.spec.containers[] | select(.name? == "app") | .image'"#
            ),
            "{}",
            report.problems[0]
        );
        let clean = "ignoreDifferences:\n  - kind: Deployment\n    jsonPointers: [/spec/template/spec/containers/0/image]\n";
        assert!(lint(clean, "p.yaml").problems.is_empty());
    }

    #[test]
    fn a_pointer_without_its_slash_is_refused_where_it_is_written() {
        let text = "mode: warn\nignoreDifferences:\n  - kind: Deployment\n    jsonPointers:\n      - spec/replicas\n";
        let err = Policy::from_yaml(text, "p.yaml").unwrap_err().to_string();
        assert!(err.starts_with("p.yaml:5:9: "), "{err}");
        assert!(err.contains("did you mean `/spec/replicas`?"), "{err}");
    }

    #[test]
    fn path_expressions_pass() {
        for expr in [
            r#".spec.containers[] | select(.name == "istio-proxy")"#,
            ".spec.replicas",
            r#".metadata.annotations."cert-manager.io/issuer""#,
            ".webhooks[]?.clientConfig.caBundle",
        ] {
            let jq = JqPath::compile(expr).unwrap();
            assert_eq!(
                check_expression(&jq, &Deadline::none()).unwrap(),
                None,
                "{expr}"
            );
        }
    }
}
