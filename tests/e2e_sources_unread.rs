//! End to end, ready means able to judge (issue 36): a spoke's driftguard
//! started while its hub is out of reach (two real kube-apiservers, the
//! hub's stopped). It becomes ready after `--sources-wait`, says on /readyz
//! and in its metrics that it is degraded, and judges every write by the
//! strictest reading: the hub Application's ignore rule, which it has not
//! read, loosens nothing, and each such decision says so in its denial and
//! its audit record. Once the hub answers, decisions return to normal
//! without a restart.

use driftguard_testkit::control_plane;
use driftguard_testkit::fleet;

use std::time::Duration;

use control_plane::*;
use fleet::*;

/// What the hub's Application calls the spoke.
const SPOKE: &str = "https://spoke-1.example.com:6443";
const NOTE: &str =
    "Argo CD / Flux sources not read: judged by the object's own claims and the policy alone";

/// The hub's Application `web`, deploying to the spoke, ignoring replicas.
const APPLICATION: &str = "
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: web, namespace: argocd}
spec:
  project: default
  source: {repoURL: 'https://git.example.com/web.git', path: deploy, targetRevision: main}
  destination: {server: 'https://spoke-1.example.com:6443', namespace: production}
  ignoreDifferences:
    - {group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}
";

/// deployment/web in the spoke, as the hub's Argo CD applied it.
const DEPLOYMENT: &str = "
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: production
  annotations: {argocd.argoproj.io/tracking-id: 'web:apps/Deployment:production/web'}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: 'nginx:1.27'}]}
";

fn metric(dg: &Driftguard, line_prefix: &str) -> Option<f64> {
    let (_, body) = probe_get(dg.probe, "/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(line_prefix)?.trim().parse().ok())
}

fn scale(spoke: &ControlPlane, replicas: u32) -> Kubectl {
    spoke.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "scale",
            "deployment/web",
            &format!("--replicas={replicas}"),
        ],
    )
}

#[test]
fn a_replica_started_in_a_hub_outage_is_ready_and_judges_by_the_strictest_reading() {
    let mut hub = ControlPlane::start("hub");
    hub.create_namespaces(&["argocd"]);
    hub.apply_crds(&["argocd-application", "argocd-appproject"]);
    hub.add_user("spoke-1-driftguard", &[]);
    hub.apply_admin(HUB_READER_RBAC);
    hub.apply_admin(APPLICATION);

    let mut spoke = ControlPlane::start("spoke");
    spoke.prepare(&["production", "argocd"]);
    spoke.apply_admin(DEPLOYMENT);

    let policy = spoke.dir.join("policy.yaml");
    std::fs::copy(format!("{ROOT}/src/policy/default-policy.yaml"), &policy).unwrap();
    let policy = policy.display().to_string();
    let hub_kubeconfig = hub.kubeconfig("spoke-1-driftguard").display().to_string();

    // The hub goes down; driftguard starts (a rollout during the outage).
    hub.stop_apiserver();
    let dg = Driftguard::start(
        &spoke,
        &[
            &format!("--policy={policy}"),
            "--break-glass-sweep-interval=0",
            "--watch-argocd",
            &spoke.driftguard_kubeconfig_flag(),
            &format!("--argocd-kubeconfig={hub_kubeconfig}"),
            &format!("--cluster-name={SPOKE}"),
            "--sources-wait=2s",
        ],
    );
    let (status, body) = probe_get(dg.probe, "/readyz");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with(
            "ready (degraded: Argo CD / Flux sources not listed: Application, AppProject, argocd-cm"
        ),
        "{body}"
    );
    let unread = "driftguard_sources_unread{source=\"Application\"} ";
    assert_eq!(metric(&dg, unread), Some(1.0));

    dg.register(&spoke, &policy);
    // The Application's ignore rule is not read: scaling is drift, denied,
    // and the denial says why it was judged so.
    let out = scale(&spoke, 3);
    assert!(!out.ok, "{out}");
    assert!(
        out.stderr.contains("drifts from Git at /spec/replicas"),
        "{out}"
    );
    assert!(out.stderr.contains(NOTE), "{out}");
    let record = dg
        .audit()
        .into_iter()
        .rfind(|r| r["name"] == "web" && r["verdict"] == "deny")
        .expect("an audit record of the denial");
    assert_eq!(
        record["sourcesUnread"],
        serde_json::json!([
            "Application",
            "AppProject",
            "argocd-cm",
            "argocd-cmd-params-cm"
        ]),
        "{record}"
    );
    let counted = metric(&dg, "driftguard_decisions_without_sources_total ");
    assert!(counted.is_some_and(|n| n >= 1.0), "{counted:?}");

    // The hub answers again: its Application's rule applies, no restart.
    hub.start_apiserver();
    wait_for(
        "the hub's rule to allow scaling",
        Duration::from_secs(90),
        || {
            let out = scale(&spoke, 3);
            if out.ok { Ok(()) } else { Err(out.to_string()) }
        },
    );
    wait_for(
        "/readyz to say ready",
        Duration::from_secs(5),
        || match probe_get(dg.probe, "/readyz") {
            (200, body) if body == "ready\n" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(metric(&dg, unread), Some(0.0));
    let last = dg
        .audit()
        .into_iter()
        .rfind(|r| r["name"] == "web")
        .unwrap();
    assert!(last.get("sourcesUnread").is_none(), "{last}");
}
