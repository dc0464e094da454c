//! What a fleet's spoke costs (issue 24): driftguard in a spoke reading a
//! hub's Argo CD, with N Applications in the hub of which M deploy to this
//! spoke. Prints driftguard's resident memory before and after the hub's
//! Applications are listed, and the hub apiserver's watch events and bytes
//! sent for Applications while one Application changes a second. A
//! benchmark, never part of the tests:
//!   cargo run --release --example fleet_cost -- [N] [M]    (default 2000 20)

use driftguard_testkit::control_plane;

use std::time::{Duration, Instant};

use control_plane::*;

const SPOKE: &str = "https://spoke-1.example.com:6443";

const HUB_READER_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-hub-reader}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications, appprojects]
    verbs: [get, list, watch]
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-hub-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-hub-reader}
subjects: [{kind: User, name: spoke-1-driftguard}]
"#;

/// Application `i`: three ignore rules and ten listed objects, like a
/// small real one.
fn application(i: usize, server: &str) -> String {
    let resources: Vec<String> = (0..10)
        .map(|r| {
            format!(
                "{{group: apps, kind: Deployment, namespace: app-{i}, name: d{r}, status: Synced}}"
            )
        })
        .collect();
    format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: app-{i}, namespace: argocd}}\n\
         spec:\n  project: default\n  source: {{repoURL: 'https://git.example.com/app-{i}.git', path: deploy, targetRevision: main}}\n\
         \x20 destination: {{server: '{server}', namespace: app-{i}}}\n\
         \x20 ignoreDifferences:\n    - {{group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}}\n\
         \x20   - {{group: '', kind: Service, jsonPointers: [/metadata/annotations]}}\n\
         \x20   - {{group: apps, kind: Deployment, jqPathExpressions: ['.spec.template.spec.containers[] | select(.name == \"istio-proxy\")']}}\n\
         status:\n  resources: [{}]\n",
        resources.join(", ")
    )
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn metric(dg: &Driftguard, line_prefix: &str) -> Option<f64> {
    let (_, body) = probe_get(dg.probe, "/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(line_prefix)?.trim().parse().ok())
}

/// The hub apiserver's Application watch events and bytes sent so far.
fn watch_sent(hub: &ControlPlane) -> (f64, f64) {
    let out = hub.kubectl("admin", &["get", "--raw", "/metrics"]);
    let mut events = 0.0;
    let mut bytes = 0.0;
    for line in out.stdout.lines() {
        let value = || {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        if !line.contains("group=\"argoproj.io\"")
            || !(line.contains("Application\"") || line.contains("applications\""))
        {
            continue;
        }
        if line.starts_with("apiserver_watch_events_total{") {
            events += value();
        } else if line.starts_with("apiserver_watch_events_sizes_sum{") {
            bytes += value();
        }
    }
    (events, bytes)
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (n, m) = (
        args.first().copied().unwrap_or(2000),
        args.get(1).copied().unwrap_or(20),
    );
    let mut hub = ControlPlane::start("fleet-cost-hub");
    hub.create_namespaces(&["argocd"]);
    hub.apply_crds(&["argocd-application", "argocd-appproject"]);
    hub.add_user("spoke-1-driftguard", &[]);
    hub.apply_admin(HUB_READER_RBAC);
    let mut spoke = ControlPlane::start("fleet-cost-spoke");
    spoke.prepare(&["argocd"]);
    let hub_kubeconfig = hub.kubeconfig("spoke-1-driftguard").display().to_string();
    let dg = Driftguard::start(
        &spoke,
        &[
            "--watch-argocd",
            &spoke.driftguard_kubeconfig_flag(),
            &format!("--argocd-kubeconfig={hub_kubeconfig}"),
            &format!("--cluster-name={SPOKE}"),
        ],
    );
    let pid = dg.proc.child.id();
    std::thread::sleep(Duration::from_secs(3));
    let before = rss_kib(pid);

    let started = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
        let yaml: Vec<String> = chunk
            .iter()
            .map(|&i| {
                let server = if i < m {
                    SPOKE
                } else {
                    "https://elsewhere.example.com:6443"
                };
                application(i, server)
            })
            .collect();
        let out = hub.kubectl_stdin("admin", &["apply", "-f", "-"], Some(&yaml.join("---\n")));
        assert!(out.ok, "{out}");
    }
    let objects = "driftguard_sources_objects{source=\"Application\"} ";
    wait_for(
        "every Application listed",
        Duration::from_secs(600),
        || match metric(&dg, objects) {
            Some(v) if v as usize == n => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    println!(
        "{n} Applications created and listed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(5));
    let after = rss_kib(pid);

    // One Application of another cluster changes a second, for 30 s.
    let (e0, b0) = watch_sent(&hub);
    for i in 0..30 {
        let app = format!("application/app-{}", m + i);
        let out = hub.kubectl(
            "admin",
            &[
                "-n",
                "argocd",
                "annotate",
                "--overwrite",
                &app,
                &format!("example.com/tick={i}"),
            ],
        );
        assert!(out.ok, "{out}");
        std::thread::sleep(Duration::from_secs(1));
    }
    let (e1, b1) = watch_sent(&hub);
    println!(
        "driftguard RSS: {before} KiB with no Application, {after} KiB with {n} ({m} deploying here): {:.1} KiB per Application",
        (after as f64 - before as f64) / n as f64
    );
    println!(
        "hub watch traffic for Applications while one changed a second for 30 s: {:.0} events, {:.0} bytes ({:.0} bytes per event)",
        e1 - e0,
        b1 - b0,
        if e1 > e0 { (b1 - b0) / (e1 - e0) } else { 0.0 }
    );
}
