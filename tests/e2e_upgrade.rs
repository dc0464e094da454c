//! End to end on a real kube-apiserver: an upgrade from an earlier release
//! (issue 48, item 6). The earlier release is commit f3fc83a (2026-12-04),
//! the last before break-glass records: its sweeper kept no record of what
//! it armed, so what it leaves armed is exactly what this release must find
//! without one. Its chart is `tests/data/releases/driftguard-chart-f3fc83a.tgz`
//! (`git archive f3fc83a charts/driftguard | tar -x && helm package
//! charts/driftguard`); its binary is not built (a second Rust build costs CI
//! more than the test is worth), so the state it leaves is written as its
//! plugin wrote it: a Flux object armed with Flux's opt-out, and an Argo CD
//! object armed with its Application paused for it, neither recorded.
//!
//! `helm install` of the earlier chart with that release's values, then
//! `helm upgrade` to this commit's chart with the same values, and this
//! build run as the upgraded Deployment runs it (its flags, its policy
//! ConfigMap, its ServiceAccount's RBAC, out of cluster). Checked: every
//! armed object is recorded and ended on time, its pause lifted; no setting
//! is loosened (the policy's exemptions are no wider, the live webhooks
//! agree with the policy in force, a manual edit is still denied); and
//! `helm rollback` to the earlier release works.

use driftguard_testkit::armed::*;
use driftguard_testkit::control_plane;
use driftguard_testkit::process::serve_driftguard_with_env;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use control_plane::*;
use serde_json::{Value, json};

const EARLIER: &str = "tests/data/releases/driftguard-chart-f3fc83a.tgz";
const SA: &str = "system:serviceaccount:driftguard:dg-driftguard";
/// How long the earlier release's break-glasses have left at the upgrade.
const LEFT: i64 = 100;

/// Helm on the plane; hooks skipped: the config-check hook's Job needs a
/// node, and its command is tested in tests/chart.rs.
fn helm_run(plane: &ControlPlane, args: &[&str]) -> String {
    let hooks: &[&str] = match args[0] {
        "install" | "upgrade" | "rollback" => &["--no-hooks"],
        _ => &[],
    };
    let out = Command::new(helm())
        .args(args)
        .args(hooks)
        .args([
            "--kubeconfig",
            &plane.kubeconfig("admin").display().to_string(),
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "helm {args:?}: {stderr}{stdout}");
    stdout.into_owned()
}

/// The release's manifest as Helm deployed it.
fn manifest(plane: &ControlPlane) -> Vec<Value> {
    let yaml = helm_run(plane, &["get", "manifest", "dg", "-n", "driftguard"]);
    serde_saphyr::from_multiple(&yaml).unwrap()
}

fn policy_text(docs: &[Value]) -> String {
    (docs.iter())
        .find(|d| d["kind"] == "ConfigMap" && d["data"]["policy.yaml"].is_string())
        .and_then(|d| d["data"]["policy.yaml"].as_str())
        .expect("the release holds its policy")
        .to_owned()
}

fn policy_of(docs: &[Value]) -> Value {
    serde_saphyr::from_str(&policy_text(docs)).unwrap()
}

/// Every identity a policy exempts or lets break glass, by section.
fn exempt(policy: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (section, lists) in [
        ("trusted", ["users", "groups"]),
        ("controllers", ["users", "groups"]),
        ("breakGlass", ["allowedUsers", "allowedGroups"]),
    ] {
        for list in lists {
            for item in policy[section][list].as_array().into_iter().flatten() {
                out.insert(format!(
                    "{section}.{list}: {}",
                    item.as_str().unwrap_or_default()
                ));
            }
        }
    }
    out
}

fn annotations(plane: &ControlPlane, what: &[&str]) -> Value {
    let out = plane.kubectl("admin", &[&["get"], what, &["-o", "json"]].concat());
    assert!(out.ok, "{out}");
    let object: Value = serde_json::from_str(&out.stdout).unwrap();
    object["metadata"]["annotations"].clone()
}

/// The two objects the earlier release left armed, and the Application
/// paused for one, as its plugin wrote them.
fn leave_armed(plane: &ControlPlane, expires: &str) {
    let break_glass = |pause: &str| {
        json!({"driftguard.io/break-glass": "INC-48 before the upgrade",
            "driftguard.io/break-glass-expires": expires,
            "driftguard.io/break-glass-paused": pause})
    };
    let mut flux = break_glass("kustomize.toolkit.fluxcd.io/reconcile");
    flux["kustomize.toolkit.fluxcd.io/reconcile"] = json!("disabled");
    let mut argo = break_glass("argocd.argoproj.io/skip-reconcile");
    argo["argocd.argoproj.io/tracking-id"] = json!("web:/ConfigMap:production/web-config");
    let labels = json!({"driftguard.io/break-glass": "true"});
    let mut flux_labels = labels.clone();
    flux_labels["kustomize.toolkit.fluxcd.io/name"] = json!("apps");
    flux_labels["kustomize.toolkit.fluxcd.io/namespace"] = json!("flux-system");
    let configmap = |name: &str, labels: &Value, annotations: &Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "production", "labels": labels,
                "annotations": annotations},
            "data": {"LOG_LEVEL": "debug"}})
        .to_string()
    };
    plane.apply_admin(&configmap("settings", &flux_labels, &flux));
    plane.apply_admin(&configmap("web-config", &labels, &argo));
    let application = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "web", "namespace": "argocd", "annotations": {
            "argocd.argoproj.io/skip-reconcile": "true",
            "driftguard.io/break-glass-paused-for": "/ConfigMap:production/web-config"}},
        "spec": {"project": "default",
            "source": {"repoURL": "https://git.example/web.git", "path": "web"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "production"}}});
    plane.apply_admin(&application.to_string());
    // And one managed object, not armed: a manual edit of it is the probe.
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "other", "namespace": "production",
            "annotations": {"argocd.argoproj.io/tracking-id": "web:/ConfigMap:production/other"}},
        "data": {"LOG_LEVEL": "info"}});
    plane.apply_admin(&other.to_string());
}

#[test]
fn an_upgrade_from_the_release_before_records_ends_what_it_left_armed_and_rolls_back() {
    let mut plane = ControlPlane::start("upgrade");
    plane.create_namespaces(&["driftguard", "argocd", "production", "flux-system"]);
    plane.apply_crds(&["argocd-application"]);
    plane.add_user(SA, &[]);
    plane.add_user("sam", &[]);
    plane.apply_admin(SAM_EDITS_PRODUCTION);
    let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(LEFT))
        .round(jiff::Unit::Second)
        .unwrap();
    leave_armed(&plane, &expires.to_string());

    // The earlier release's values: break-glass on, out of cluster.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let ca = std::fs::read_to_string(plane.dir.join("ca.crt")).unwrap();
    let values = plane.dir.join("values.yaml");
    let text = json!({
        "webhook": {"url": format!("https://127.0.0.1:{port}")},
        "certificates": {"provided": {"ca": ca, "cert": "unused-out-of-cluster", "key": "unused-out-of-cluster"}},
        "policy": {"breakGlass": {"allowedGroups": ["sre-oncall"], "maxDuration": "1h"}}});
    std::fs::write(&values, text.to_string()).unwrap();
    let values = values.display().to_string();
    let earlier = format!("{ROOT}/{EARLIER}");
    let install = ["-n", "driftguard", "-f", &values];
    helm_run(
        &plane,
        &[&["install", "dg", &earlier], &install[..]].concat(),
    );
    let before = manifest(&plane);
    // The earlier release serves while Helm upgrades it (its pods roll one
    // by one), so its webhooks judge the upgrade's own writes (its
    // registration sends those to objects carrying the chart's instance
    // label): stood in for by this build with the earlier policy.
    let earlier_policy = plane.dir.join("earlier-policy.yaml");
    std::fs::write(&earlier_policy, policy_text(&before)).unwrap();
    let serving = |policy: &std::path::Path, args: &[String]| {
        let mut flags = vec![
            format!("--policy={}", policy.display()),
            format!("--kubeconfig={}", plane.kubeconfig(SA).display()),
        ];
        flags.extend(args.iter().cloned());
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let serve = Driftguard::serve_args(&plane, &["127.0.0.1"], &flags);
        let env = [("POD_NAME".to_owned(), "dg-driftguard-0".to_owned())];
        serve_driftguard_with_env(&Driftguard::binary(), port, &serve, &env)
    };
    // It sweeps nothing: it cannot hold a Lease (the chart's RBAC names one).
    let no_sweep = ["--break-glass-sweeper-lease=driftguard/stand-in".to_owned()];
    let mut stand_in = serving(&earlier_policy, &no_sweep);
    let current = format!("{ROOT}/charts/driftguard");
    helm_run(
        &plane,
        &[&["upgrade", "dg", &current], &install[..]].concat(),
    );
    stand_in.proc.stop();
    let after = manifest(&plane);
    assert_eq!(recorded(&plane, "driftguard"), Vec::<String>::new());

    // No setting loosened: what the policy exempts is no wider.
    let (was, is) = (exempt(&policy_of(&before)), exempt(&policy_of(&after)));
    let wider: Vec<&String> = is.difference(&was).collect();
    assert!(wider.is_empty(), "the upgrade exempts more: {wider:?}");
    assert_eq!(policy_of(&before)["mode"], policy_of(&after)["mode"]);

    // This build, as the upgraded Deployment runs it.
    let deployment = (after.iter())
        .find(|d| d["kind"] == "Deployment")
        .expect("the chart renders a Deployment");
    let args: Vec<String> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .skip_while(|a| !a.starts_with("--argocd-namespace"))
        .map(str::to_owned)
        .collect();
    assert!(
        args.iter()
            .any(|a| a.starts_with("--break-glass-sweeper-lease")),
        "{args:?}"
    );
    let policy = plane.dir.join("policy.yaml");
    std::fs::write(&policy, policy_text(&after)).unwrap();
    let dg = serving(&policy, &args);

    wait_for(
        "both armed objects recorded",
        Duration::from_secs(60),
        || {
            let records = recorded(&plane, "driftguard");
            let want = ["production/settings", "production/web-config"];
            match want.iter().all(|w| records.contains(&(*w).to_owned())) {
                true => Ok(()),
                false => Err(format!("{records:?}; {}", dg.proc.stderr_tail(5))),
            }
        },
    );
    // Still in force: a manual edit by someone who may not break glass is denied.
    let edit = plane.kubectl(
        "sam",
        &[
            "-n",
            "production",
            "patch",
            "configmap",
            "other",
            "--type=merge",
            "-p",
            r#"{"data":{"LOG_LEVEL":"trace"}}"#,
        ],
    );
    assert!(
        !edit.ok && edit.stderr.contains("denied the request"),
        "{edit}"
    );
    // The live webhooks agree with the policy in force.
    let check = Command::new(Driftguard::binary())
        .args(["register", "--check", "--name", "dg-driftguard", "--policy"])
        .arg(&policy)
        .arg("--kubeconfig")
        .arg(plane.kubeconfig("admin"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let left =
        Duration::try_from(expires.duration_since(jiff::Timestamp::now())).unwrap_or_default();
    wait_for(
        "both ended at expiry, the pause lifted",
        left + Duration::from_secs(45),
        || {
            let (flux, argo) = (
                annotations(&plane, &["-n", "production", "configmap/settings"]),
                annotations(&plane, &["-n", "production", "configmap/web-config"]),
            );
            let app = annotations(&plane, &["-n", "argocd", "application/web"]);
            let armed = [&flux, &argo]
                .iter()
                .any(|a| a.get("driftguard.io/break-glass-expires").is_some());
            let paused = app.get("argocd.argoproj.io/skip-reconcile").is_some();
            let opted_out = flux.get("kustomize.toolkit.fluxcd.io/reconcile").is_some();
            match (armed, paused, opted_out) {
                (false, false, false) => Ok(()),
                state => Err(format!("armed, paused, Flux opted out: {state:?}")),
            }
        },
    );
    assert!(
        jiff::Timestamp::now() >= expires,
        "ended before its expiry ({expires})"
    );

    // Rolled back: the earlier release's objects again, as it rendered them.
    helm_run(&plane, &["rollback", "dg", "1", "-n", "driftguard"]);
    let back = manifest(&plane);
    let kinds = |docs: &[Value]| -> BTreeSet<String> {
        (docs.iter())
            .map(|d| {
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap_or_default(),
                    d["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
            .collect()
    };
    assert_eq!(kinds(&back), kinds(&before));
    let hooks = plane.kubectl(
        "admin",
        &[
            "get",
            "validatingwebhookconfiguration",
            "dg-driftguard",
            "-o",
            "json",
        ],
    );
    let live: Value = serde_json::from_str(&hooks.stdout).unwrap();
    let rendered = (before.iter())
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .unwrap();
    for (live, rendered) in live["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .zip(rendered["webhooks"].as_array().unwrap())
    {
        assert_eq!(
            live["matchConditions"], rendered["matchConditions"],
            "rolled back"
        );
        assert_eq!(live["rules"], rendered["rules"], "rolled back");
    }
}
