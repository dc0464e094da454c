//! The chart's pre-install and pre-upgrade hook (templates/config-check.yaml,
//! issue 48 item 3): for generated values that pass the chart's schema but
//! that `serve` would refuse at start (a policy whose controllers miss the
//! Argo CD namespace, a trusted glob over argocd-server, a jq expression
//! that is not a path, a bad duration), the hook's own command, run as its
//! Job runs it (its args, its ConfigMap's policy), exits non-zero, and the
//! same values without the fault exit 0. So `helm install` and `helm upgrade`
//! fail before anything changes. The Job needs a node, which the test
//! control planes lack; its command and inputs are what is tested here.

use driftguard_testkit::control_plane::{Driftguard, ROOT, helm};
use proptest::prelude::*;
use serde_json::Value;

/// A fault, as `--set` values, that the schema accepts and serve refuses.
#[derive(Clone, Debug)]
enum Fault {
    /// Controllers that cover no account of the Argo CD namespace.
    ControllersMissArgoCd(String),
    /// A trusted glob over every account of the Argo CD namespace.
    TrustedArgoCdServer,
    /// An ignore rule whose jq is not a path expression.
    JqNotAPath(String),
    /// A break-glass duration that does not read.
    BadDuration(String),
}

impl Fault {
    fn sets(&self) -> Vec<String> {
        match self {
            Fault::ControllersMissArgoCd(ns) => vec![
                format!(
                    "policy.controllers.users={{system:serviceaccount:{ns}:kustomize-controller}}"
                ),
                "policy.controllers.groups=null".into(),
            ],
            Fault::TrustedArgoCdServer => {
                vec!["policy.trusted.users={system:serviceaccount:argocd:*}".into()]
            }
            Fault::JqNotAPath(jq) => vec![
                "policy.ignoreDifferences[0].group=apps".into(),
                "policy.ignoreDifferences[0].kind=Deployment".into(),
                format!("policy.ignoreDifferences[0].jqPathExpressions[0]={jq}"),
            ],
            Fault::BadDuration(d) => vec![
                "policy.breakGlass.allowedGroups={sre-oncall}".into(),
                format!("policy.breakGlass.maxDuration={d}"),
            ],
        }
    }
}

fn faults() -> impl Strategy<Value = Fault> {
    prop_oneof![
        "(flux-system|team-[a-z]{3})".prop_map(Fault::ControllersMissArgoCd),
        Just(Fault::TrustedArgoCdServer),
        prop::sample::select(vec![".spec | length", "[.a, .b]", ".x + 1", "keys"])
            .prop_map(|s| Fault::JqNotAPath(s.to_owned())),
        "(soon|forever|[0-9]{1,2} fortnights)".prop_map(Fault::BadDuration),
    ]
}

/// Renders the chart with `sets`; `Err(stderr)` when `helm template` refuses.
fn render(sets: &[String]) -> Result<Vec<Value>, String> {
    let mut cmd = std::process::Command::new(helm());
    cmd.args(["template", "dg", &format!("{ROOT}/charts/driftguard")])
        .args(["--namespace", "driftguard"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    match out.status.success() {
        true => Ok(serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).unwrap()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// Runs the hook Job's command on its ConfigMap's policy: (exit 0, output).
fn run_hook(docs: &[Value], dir: &std::path::Path) -> (bool, String) {
    let hooked = |kind: &str| {
        (docs.iter())
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == "dg-driftguard-config-check")
            .unwrap_or_else(|| panic!("the chart renders the hook's {kind}"))
    };
    let (job, config) = (hooked("Job"), hooked("ConfigMap"));
    for doc in [job, config] {
        let hooks = doc["metadata"]["annotations"]["helm.sh/hook"].as_str();
        assert_eq!(hooks, Some("pre-install,pre-upgrade"), "{doc}");
    }
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, config["data"]["policy.yaml"].as_str().unwrap()).unwrap();
    let args: Vec<String> = job["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .map(|a| match a.as_str() {
            "--policy=/policy/policy.yaml" => format!("--policy={}", policy.display()),
            _ => a,
        })
        .collect();
    assert_eq!(args.last().map(String::as_str), Some("--check-config"));
    let out = std::process::Command::new(Driftguard::binary())
        .args(&args)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn values_serve_would_refuse_fail_the_hook_and_the_same_values_without_the_fault_pass(
        fault in faults(),
        break_glass in any::<bool>(),
    ) {
        let dir = std::path::PathBuf::from(ROOT).join("target/config-check");
        std::fs::create_dir_all(&dir).unwrap();
        let base: Vec<String> = match break_glass {
            true => vec!["policy.breakGlass.allowedUsers={sam}".into()],
            false => vec![],
        };
        let good = render(&base).expect("the base values render");
        let (ok, said) = run_hook(&good, &dir);
        prop_assert!(ok, "the base values: {said}");
        prop_assert!(said.starts_with("ok: serve starts"), "{said}");

        let bad: Vec<String> = base.iter().cloned().chain(fault.sets()).collect();
        match render(&bad) {
            // Refused by the template or schema: before anything changes too.
            Err(stderr) => prop_assert!(!stderr.is_empty()),
            Ok(docs) => {
                let (ok, said) = run_hook(&docs, &dir);
                prop_assert!(!ok, "{fault:?}: the hook passed: {said}");
                prop_assert!(said.contains("policy"), "{fault:?}: {said}");
            }
        }
    }
}

/// `helm upgrade --reuse-values` from the release before the hook (its
/// values have no `configCheck`) renders, with the hook on.
#[test]
fn values_from_the_release_before_the_hook_render_with_the_hook_on() {
    let earlier = format!("{ROOT}/tests/data/releases/driftguard-chart-f3fc83a.tgz");
    let out = std::process::Command::new(helm())
        .args(["show", "values", &earlier])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = std::path::PathBuf::from(ROOT).join("target/config-check");
    std::fs::create_dir_all(&dir).unwrap();
    let values = dir.join("earlier-values.yaml");
    std::fs::write(&values, &out.stdout).unwrap();
    let out = std::process::Command::new(helm())
        .args(["template", "dg", &format!("{ROOT}/charts/driftguard")])
        .args(["--namespace", "driftguard", "-f"])
        .arg(&values)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    let (ok, said) = run_hook(&docs, &dir);
    assert!(ok, "{said}");
}
