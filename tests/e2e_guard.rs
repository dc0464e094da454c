//! End to end on a real kube-apiserver: changes of driftguard's own policy
//! ConfigMap, Deployment and webhook configurations, none of which the
//! webhook judges, are reported (issue 21, item 4). driftguard runs as the
//! chart's service account with exactly the chart's RBAC (its guard reads by
//! `resourceNames`), against the chart's own objects. Each change of what
//! decides is an audit line, a metric and one Event, even with two replicas;
//! a label or status change is none.

use driftguard_testkit::control_plane;

use std::time::Duration;

use control_plane::*;
use serde_json::Value;

const SA: &str = "system:serviceaccount:driftguard:dg-driftguard";

/// The value of the sample `name{labels}` on driftguard's /metrics, if any.
fn sample(dg: &Driftguard, name: &str, labels: &str) -> Option<f64> {
    let (_, body) = probe_get(dg.probe, "/metrics");
    let prefix = format!("{name}{{{labels}}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

fn changes(dg: &Driftguard, kind: &str, change: &str) -> f64 {
    sample(
        dg,
        "driftguard_guarded_changes_total",
        &format!("kind=\"{kind}\",change=\"{change}\""),
    )
    .unwrap_or(0.0)
}

fn wait_changes(dg: &Driftguard, kind: &str, change: &str, want: f64) {
    wait_for(
        &format!("{want} {change} {kind} reported"),
        Duration::from_secs(20),
        || match changes(dg, kind, change) {
            n if n == want => Ok(()),
            n => Err(format!("{n}; {}", dg.proc.stderr_tail(5))),
        },
    );
}

/// GuardedObjectChanged Events on `kind/name` in `namespace` saying it was
/// `change`d, as `(name, note)`.
fn events(
    plane: &ControlPlane,
    namespace: &str,
    kind: &str,
    name: &str,
    change: &str,
) -> Vec<(String, String)> {
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            namespace,
            "get",
            "events.events.k8s.io",
            "--field-selector",
            "reason=GuardedObjectChanged",
            "-o",
            "json",
        ],
    );
    assert!(out.ok, "{out}");
    let list: Value = serde_json::from_str(&out.stdout).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["kind"] == kind && e["regarding"]["name"] == name)
        .filter(|e| {
            e["note"]
                .as_str()
                .is_some_and(|n| n.contains(&format!(" was {change} ")))
        })
        .map(|e| {
            (
                e["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["note"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn wait_events(
    plane: &ControlPlane,
    namespace: &str,
    kind: &str,
    name: &str,
    change: &str,
    want: usize,
) {
    wait_for(
        &format!("{want} GuardedObjectChanged Events on {kind} {name} ({change})"),
        Duration::from_secs(20),
        || match events(plane, namespace, kind, name, change) {
            e if e.len() == want => Ok(()),
            e => Err(format!("{e:?}")),
        },
    );
}

fn guarded_lines(dg: &Driftguard, kind: &str, change: &str) -> usize {
    dg.audit()
        .iter()
        .filter(|r| r["guarded"] == change && r["kind"] == kind)
        .count()
}

/// The rendered documents, each namespaced one without a namespace put in
/// `driftguard` (helm template leaves that to `helm install -n`).
fn in_release_namespace(yaml: &str) -> String {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).unwrap();
    docs.into_iter()
        .filter(|d| d.is_object())
        .map(|mut d| {
            let cluster_scoped = d["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("Cluster") || k.ends_with("WebhookConfiguration"));
            if !cluster_scoped && d["metadata"].get("namespace").is_none() {
                d["metadata"]["namespace"] = "driftguard".into();
            }
            format!("---\n{}", serde_saphyr::to_string(&d).unwrap())
        })
        .collect()
}

fn admin(plane: &ControlPlane, args: &[&str]) {
    let out = plane.kubectl("admin", args);
    assert!(out.ok, "kubectl {args:?}: {out}");
}

#[test]
fn changes_of_driftguards_own_objects_are_audited_and_raise_one_event() {
    // Audited: a replica's refused write of an Event is seen only there.
    let mut plane = ControlPlane::start_audited("guard");
    plane.create_namespaces(&["driftguard", "argocd", "production"]);
    plane.add_user(SA, &[]);

    // The chart's RBAC first, so the guard's first list already succeeds.
    let rbac = apply_chart_rbac(&plane);

    let policy = plane.dir.join("guard-policy.yaml");
    std::fs::write(&policy, &rbac.policy).unwrap();
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            &format!("--kubeconfig={}", plane.kubeconfig(SA).display()),
            "--break-glass-sweep-interval=0",
            "--guard-namespace=driftguard",
            "--guard-configmap=dg-driftguard-policy",
            "--guard-deployment=dg-driftguard",
            "--guard-webhook-configuration=dg-driftguard",
        ],
    );
    let kinds = [
        "ConfigMap",
        "Deployment",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ];
    // Each first list done, nothing there yet: as the chart's RBAC, the
    // named list and watch are allowed.
    for kind in kinds {
        wait_for(
            &format!("the guard's first list of {kind}"),
            Duration::from_secs(30),
            || match sample(
                &dg,
                "driftguard_guarded_present",
                &format!("kind=\"{kind}\""),
            ) {
                Some(0.0) => Ok(()),
                other => Err(format!("{other:?}; {}", dg.proc.stderr_tail(5))),
            },
        );
    }

    // The whole chart, pointing at this driftguard, in its release
    // namespace (as `helm install -n driftguard` would place it).
    let chart = render_chart(&plane, dg.port, &[]);
    let out = plane.kubectl_stdin(
        "admin",
        &["apply", "-f", "-"],
        Some(&in_release_namespace(&chart.yaml)),
    );
    assert!(out.ok, "{out}");
    for kind in kinds {
        wait_changes(&dg, kind, "created", 1.0);
        assert_eq!(
            sample(
                &dg,
                "driftguard_guarded_present",
                &format!("kind=\"{kind}\"")
            ),
            Some(1.0)
        );
    }

    // A label is not what decides; the policy's data is.
    admin(
        &plane,
        &[
            "-n",
            "driftguard",
            "label",
            "configmap/dg-driftguard-policy",
            "x=1",
        ],
    );
    let relaxed = format!("{}\nmode: audit\n", chart.policy.trim_end());
    let patch = serde_json::json!({"data": {"policy.yaml": relaxed}}).to_string();
    admin(
        &plane,
        &[
            "-n",
            "driftguard",
            "patch",
            "configmap/dg-driftguard-policy",
            "--type=merge",
            "-p",
            &patch,
        ],
    );
    wait_changes(&dg, "ConfigMap", "changed", 1.0);
    wait_events(
        &plane,
        "driftguard",
        "ConfigMap",
        "dg-driftguard-policy",
        "changed",
        1,
    );
    let (_, note) = &events(
        &plane,
        "driftguard",
        "ConfigMap",
        "dg-driftguard-policy",
        "changed",
    )[0];
    assert!(
        note.contains("only RBAC guards it") && note.contains("kubectl-patch"),
        "{note}"
    );
    assert_eq!(guarded_lines(&dg, "ConfigMap", "changed"), 1);
    let line = dg
        .audit()
        .into_iter()
        .find(|r| r["guarded"] == "changed")
        .unwrap();
    assert_ne!(line["before"], line["after"], "{line}");
    assert_eq!(line["namespace"], "driftguard");

    // A status write to the Deployment is none; a new spec is one.
    let status = r#"{"status":{"observedGeneration":1,"replicas":0}}"#;
    admin(
        &plane,
        &[
            "-n",
            "driftguard",
            "patch",
            "deployment/dg-driftguard",
            "--subresource=status",
            "--type=merge",
            "-p",
            status,
        ],
    );
    admin(
        &plane,
        &[
            "-n",
            "driftguard",
            "set",
            "env",
            "deployment/dg-driftguard",
            "DRIFTGUARD_MODE_OVERRIDE=1",
        ],
    );
    wait_changes(&dg, "Deployment", "changed", 1.0);
    wait_events(
        &plane,
        "driftguard",
        "Deployment",
        "dg-driftguard",
        "changed",
        1,
    );

    // A second replica: the next change is reported by both, as one Event.
    let replica = dg.replica();
    wait_for(
        "the replica's first list",
        Duration::from_secs(30),
        || match sample(
            &replica,
            "driftguard_guarded_present",
            "kind=\"ValidatingWebhookConfiguration\"",
        ) {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    // Excluding a namespace from the webhook: what an attacker would do.
    let exclude = r#"[{"op":"add","path":"/webhooks/0/namespaceSelector/matchExpressions/0/values/-","value":"production"}]"#;
    admin(
        &plane,
        &[
            "patch",
            "validatingwebhookconfiguration/dg-driftguard",
            "--type=json",
            "-p",
            exclude,
        ],
    );
    wait_changes(&dg, "ValidatingWebhookConfiguration", "changed", 1.0);
    wait_changes(&replica, "ValidatingWebhookConfiguration", "changed", 1.0);
    // Cluster-scoped objects' Events live in `default`.
    wait_events(
        &plane,
        "default",
        "ValidatingWebhookConfiguration",
        "dg-driftguard",
        "changed",
        1,
    );
    // The other replica's write of the same Event is refused (409): once the
    // apiserver's audit log records it, both replicas have written.
    let event = events(
        &plane,
        "default",
        "ValidatingWebhookConfiguration",
        "dg-driftguard",
        "changed",
    )[0]
    .0
    .clone();
    wait_for(
        "the second replica's write of the Event, refused",
        Duration::from_secs(20),
        || {
            let refused = plane
                .audit_events()
                .into_iter()
                .filter(|a| {
                    a["verb"] == "create"
                        && a["objectRef"]["resource"] == "events"
                        && a["objectRef"]["namespace"] == "default"
                        && a["objectRef"]["name"].as_str().is_none_or(|n| n == event)
                        && a["responseStatus"]["code"] == 409
                })
                .count();
            if refused == 1 {
                Ok(())
            } else {
                Err(format!("{refused} refused writes of Event {event}"))
            }
        },
    );
    assert_eq!(
        events(
            &plane,
            "default",
            "ValidatingWebhookConfiguration",
            "dg-driftguard",
            "changed"
        )
        .len(),
        1,
        "two replicas, one change: one Event"
    );

    // Deleting a webhook configuration switches its webhooks off.
    admin(
        &plane,
        &["delete", "mutatingwebhookconfiguration/dg-driftguard"],
    );
    wait_changes(&dg, "MutatingWebhookConfiguration", "deleted", 1.0);
    assert_eq!(
        sample(
            &dg,
            "driftguard_guarded_present",
            "kind=\"MutatingWebhookConfiguration\""
        ),
        Some(0.0)
    );
    wait_events(
        &plane,
        "default",
        "MutatingWebhookConfiguration",
        "dg-driftguard",
        "deleted",
        1,
    );
    assert_eq!(
        guarded_lines(&dg, "MutatingWebhookConfiguration", "deleted"),
        1
    );
    // Nothing else was counted: the label and the status write were none.
    assert_eq!(changes(&dg, "ConfigMap", "changed"), 1.0);
    assert_eq!(changes(&dg, "Deployment", "changed"), 1.0);
}

/// Issue 48, item 1: the server compares its webhooks with the policy in
/// force. The chart is installed; then the policy ConfigMap (here its file)
/// stops trusting kube-system's service accounts, which the webhooks still
/// skip inside the apiserver. The server says so (a metric, `/readyz`
/// degraded, a Warning Event naming the account and the fix), and so does
/// `driftguard register --check`; re-rendering the webhooks from the same
/// values clears it.
#[test]
fn webhooks_that_skip_what_the_reloaded_policy_judges_are_reported() {
    let mut plane = ControlPlane::start("registration");
    plane.create_namespaces(&["driftguard", "argocd", "production"]);
    plane.add_user(SA, &[]);
    let rbac = apply_chart_rbac(&plane);
    let policy = plane.dir.join("registration-policy.yaml");
    std::fs::write(&policy, &rbac.policy).unwrap();
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            &format!("--kubeconfig={}", plane.kubeconfig(SA).display()),
            "--break-glass-sweep-interval=0",
            "--guard-webhook-configuration=dg-driftguard",
        ],
    );
    let chart = render_chart(&plane, dg.port, &[]);
    admin_apply(&plane, &in_release_namespace(&chart.webhooks));
    let differences = |direction: &str| {
        sample(
            &dg,
            "driftguard_registration_differences",
            &format!("direction=\"{direction}\""),
        )
    };
    let wait_skips = |want: fn(f64) -> bool, what: &str| {
        wait_for(what, Duration::from_secs(30), || {
            match differences("skips") {
                Some(n) if want(n) => Ok(()),
                other => Err(format!("{other:?}; {}", dg.proc.stderr_tail(5))),
            }
        })
    };
    wait_skips(|n| n == 0.0, "the chart's webhooks checked and matching");
    assert_eq!(probe_get(dg.probe, "/readyz"), (200, "ready\n".to_owned()));

    // The ConfigMap alone stops trusting kube-system's accounts.
    let narrow_users =
        "policy.trusted.users={system:kube-controller-manager,system:kube-scheduler,system:node:*}";
    let narrow = render_chart(&plane, dg.port, &[narrow_users]);
    std::fs::write(&policy, &narrow.policy).unwrap();
    wait_skips(|n| n > 0.0, "the reloaded policy's difference reported");
    let (code, body) = probe_get(dg.probe, "/readyz");
    assert_eq!(code, 200, "still judging what it is sent: {body}");
    assert!(
        body.contains("degraded: the webhooks differ from the policy in force"),
        "{body}"
    );
    let note = wait_for(
        "the RegistrationDiffers Event",
        Duration::from_secs(20),
        || {
            let out = plane.kubectl("admin", &["-n", "default", "get", "events", "-o", "json"]);
            let events: Value = serde_json::from_str(&out.stdout).map_err(|e| e.to_string())?;
            events["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["reason"] == "RegistrationDiffers")
                .and_then(|e| {
                    e["message"]
                        .as_str()
                        .or(e["note"].as_str())
                        .map(str::to_owned)
                })
                .ok_or_else(|| format!("none yet: {}", dg.proc.stderr_tail(5)))
        },
    );
    assert!(
        note.contains("system:serviceaccount:kube-system:") && note.contains("helm upgrade"),
        "{note}"
    );

    // The pipeline's check of the cluster says the same.
    let narrow_file = plane.dir.join("narrow-policy.yaml");
    std::fs::write(&narrow_file, &narrow.policy).unwrap();
    let check = std::process::Command::new(Driftguard::binary())
        .args(["register", "--check", "--name", "dg-driftguard", "--policy"])
        .arg(&narrow_file)
        .arg("--kubeconfig")
        .arg(plane.kubeconfig("admin"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    assert_eq!(
        check.status.code(),
        Some(1),
        "{said}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(
        said.contains("skips: UPDATE by `system:serviceaccount:kube-system:"),
        "{said}"
    );

    // The webhooks rendered from the same values: agreement again.
    admin_apply(&plane, &in_release_namespace(&narrow.webhooks));
    wait_skips(|n| n == 0.0, "the re-rendered webhooks matching");
    assert_eq!(probe_get(dg.probe, "/readyz"), (200, "ready\n".to_owned()));
}

/// The chart's RBAC objects, applied; the chart as rendered for them.
fn apply_chart_rbac(plane: &ControlPlane) -> ChartInstall {
    let chart = render_chart(plane, 1, &[]);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&chart.yaml).unwrap();
    let rbac_only: String = docs
        .iter()
        .filter(|d| {
            d["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("rbac.authorization.k8s.io"))
        })
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect();
    admin_apply(plane, &rbac_only);
    chart
}

fn admin_apply(plane: &ControlPlane, yaml: &str) {
    let out = plane.kubectl_stdin("admin", &["apply", "-f", "-"], Some(yaml));
    assert!(out.ok, "{out}");
}
