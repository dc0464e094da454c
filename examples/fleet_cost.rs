//! What a fleet's spoke costs (issues 24 and 39): driftguard in a spoke
//! reading a hub's Argo CD, with N Applications in the hub of which M deploy
//! to this spoke. Creates them first, then starts driftguard and reports its
//! time to ready (every Application listed), its resident memory, and under
//! Argo CD-like status churn the hub's watch events and bytes sent to it and
//! the CPU it spends. Churn runs for S seconds at the rate the machine
//! allows, round-robin over every Application; the per-minute figure is
//! scaled to Argo CD's default (every status rewritten every 3 minutes,
//! N/3 events a minute) from the bytes per event measured. Prints one CSV
//! line. Each Application is labelled with the cluster it deploys to
//! (`driftguard.io/cluster`); `FLEET_COST_SELECTOR=1` gives driftguard
//! `--argocd-application-selector` on that label. A benchmark, never part of
//! the tests:
//!   cargo run --release --example fleet_cost -- [N] [M] [S] [LABEL]   (default 20000 50 60 after)
//! `CARGO_BIN_EXE_driftguard=path` measures another driftguard binary.

use driftguard_testkit::control_plane;

use std::time::{Duration, Instant};

use control_plane::*;

const SPOKE: (&str, &str) = ("https://spoke-1.example.com:6443", "spoke-1");
const SELECTOR: &str = "--argocd-application-selector=driftguard.io/cluster=spoke-1";

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
/// small real one, labelled with its cluster; `tick` stands for the status
/// Argo CD rewrites.
fn application(i: usize, (server, cluster): (&str, &str), tick: usize) -> String {
    let resources: Vec<String> = (0..10)
        .map(|r| {
            format!(
                "{{group: apps, kind: Deployment, namespace: app-{i}, name: d{r}, status: Synced}}"
            )
        })
        .collect();
    format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: app-{i}, namespace: argocd, labels: {{driftguard.io/cluster: {cluster}}}}}\n\
         spec:\n  project: default\n  source: {{repoURL: 'https://git.example.com/app-{i}.git', path: deploy, targetRevision: main}}\n\
         \x20 destination: {{server: '{server}', namespace: app-{i}}}\n\
         \x20 ignoreDifferences:\n    - {{group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}}\n\
         \x20   - {{group: '', kind: Service, jsonPointers: [/metadata/annotations]}}\n\
         \x20   - {{group: apps, kind: Deployment, jqPathExpressions: ['.spec.template.spec.containers[] | select(.name == \"istio-proxy\")']}}\n\
         status:\n  reconciledAt: '2026-12-04T00:00:{:02}Z'\n  resources: [{}]\n",
        tick % 60,
        resources.join(", ")
    )
}

/// driftguard's CPU time so far (user and system), in milliseconds.
fn cpu_ms(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    fields.iter().sum::<u64>() * 10
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn metric(probe: u16, line_prefix: &str) -> Option<f64> {
    let (_, body) = probe_get(probe, "/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(line_prefix)?.trim().parse().ok())
}

/// The hub apiserver's Application watch events and bytes, and its
/// Application LIST response bytes, sent so far.
fn sent(hub: &ControlPlane) -> (f64, f64, f64) {
    let out = hub.kubectl("admin", &["get", "--raw", "/metrics"]);
    let mut events = 0.0;
    let mut bytes = 0.0;
    let mut listed = 0.0;
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
        } else if line.starts_with("apiserver_response_sizes_sum{")
            && line.contains("verb=\"LIST\"")
        {
            listed += value();
        }
    }
    (events, bytes, listed)
}

/// Server-side applies Applications `range` (tick `tick`) to the hub in
/// chunks, from `threads` kubectl processes at once.
fn apply_all(hub: &ControlPlane, range: std::ops::Range<usize>, m: usize, tick: usize) {
    let all: Vec<usize> = range.collect();
    let threads = 3;
    let per = all.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for part in all.chunks(per) {
            s.spawn(move || {
                for chunk in part.chunks(500) {
                    let yaml: Vec<String> = chunk
                        .iter()
                        .map(|&i| {
                            let to = if i < m { SPOKE } else { ELSEWHERE };
                            application(i, to, tick)
                        })
                        .collect();
                    let args = [
                        "apply",
                        "--server-side",
                        "--field-manager=argocd",
                        "-f",
                        "-",
                    ];
                    let out = hub.kubectl_stdin("admin", &args, Some(&yaml.join("---\n")));
                    assert!(out.ok, "{out}");
                }
            });
        }
    });
}

const ELSEWHERE: (&str, &str) = ("https://elsewhere.example.com:6443", "elsewhere");

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (n, m, churn_secs) = (number(0, 20000), number(1, 50), number(2, 60));
    let label = args.get(3).cloned().unwrap_or_else(|| "after".into());
    let mut hub = ControlPlane::start("fleet-cost-hub");
    hub.create_namespaces(&["argocd"]);
    hub.apply_crds(&["argocd-application", "argocd-appproject"]);
    hub.add_user("spoke-1-driftguard", &[]);
    hub.apply_admin(HUB_READER_RBAC);
    let mut spoke = ControlPlane::start("fleet-cost-spoke");
    spoke.prepare(&["argocd"]);

    let started = Instant::now();
    apply_all(&hub, 0..n, m, 0);
    let create_s = started.elapsed().as_secs_f64();
    eprintln!("{n} Applications created in {create_s:.1} s");

    // Ready only once every source has listed (a long --sources-wait).
    let hub_kubeconfig = hub.kubeconfig("spoke-1-driftguard").display().to_string();
    let selected = std::env::var("FLEET_COST_SELECTOR").is_ok_and(|v| v == "1");
    let mut extra = vec![
        "--watch-argocd".to_owned(),
        spoke.driftguard_kubeconfig_flag(),
        format!("--argocd-kubeconfig={hub_kubeconfig}"),
        format!("--cluster-name={}", SPOKE.0),
        "--sources-wait=600s".to_owned(),
    ];
    if selected {
        extra.push(SELECTOR.to_owned());
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let serve_args = Driftguard::serve_args(&spoke, &["127.0.0.1"], &extra);
    let started = Instant::now();
    let dg = serve_driftguard_unready(&Driftguard::binary(), 0, &serve_args);
    wait_for(
        "driftguard ready",
        Duration::from_secs(600),
        || match probe_get(dg.probe, "/readyz") {
            (200, _) => Ok(()),
            (status, body) => Err(format!("{status} {body}")),
        },
    );
    let ready_s = started.elapsed().as_secs_f64();
    let objects = "driftguard_sources_objects{source=\"Application\"} ";
    let listed = metric(dg.probe, objects).unwrap_or(-1.0);
    let want = if selected { m.min(n) } else { n };
    assert_eq!(
        listed as usize, want,
        "every Application selected listed when ready"
    );
    let pid = dg.proc.child.id();
    std::thread::sleep(Duration::from_secs(5));
    let rss = rss_kib(pid);

    // Status churn: every Application's status rewritten, round-robin.
    let (e0, b0, l0) = sent(&hub);
    let cpu0 = cpu_ms(pid);
    let churn = Instant::now();
    let mut next = 0;
    let mut tick = 1;
    let mut peak = rss;
    let mut rewrites = 0;
    while n > 0 && churn.elapsed() < Duration::from_secs(churn_secs as u64) {
        let end = (next + 1500).min(n);
        apply_all(&hub, next..end, m, tick);
        rewrites += end - next;
        next = if end == n { 0 } else { end };
        tick += usize::from(next == 0);
        peak = peak.max(rss_kib(pid));
    }
    let minutes = churn.elapsed().as_secs_f64() / 60.0;
    let cpu = cpu_ms(pid) - cpu0;
    let (e1, b1, l1) = sent(&hub);
    // What stays once the last events are handled and freed pages returned.
    std::thread::sleep(Duration::from_secs(15));
    let settled = rss_kib(pid);
    let (events, bytes) = (e1 - e0, b1 - b0);
    // Lists (the break-glass sweeper's, a relist) come by the clock, not by rewrite.
    let list_mb_per_min = (l1 - l0) / minutes.max(1e-9) / 1e6;
    let per_event = if events > 0.0 { bytes / events } else { 0.0 };
    // Per status rewrite in the hub, whether or not it reached driftguard.
    let per_rewrite = |x: f64| x / (rewrites.max(1) as f64);
    let cpu_per_1k = per_rewrite(cpu as f64 * 1000.0);
    // Argo CD's default: every Application's status rewritten every 3 minutes.
    let per_minute = n as f64 / 3.0;
    eprintln!(
        "ready in {ready_s:.1} s; RSS {rss} KiB, at most {peak} KiB during churn, {settled} KiB 15 s after; churn: {rewrites} rewrites in {minutes:.2} min, {events:.0} events sent ({per_event:.0} bytes each), {cpu} ms CPU",
    );
    println!(
        "version,applications,here,create_s,ready_s,rss_kib,rss_churn_peak_kib,rss_settled_kib,churn_rewrites_per_min_measured,events_sent_per_rewrite,bytes_per_event,cpu_ms_per_1k_rewrites,mb_per_min_at_3min_period,cpu_s_per_min_at_3min_period,list_mb_per_min_measured"
    );
    println!(
        "{label},{n},{m},{create_s:.1},{ready_s:.1},{rss},{peak},{settled},{:.0},{:.3},{per_event:.0},{cpu_per_1k:.0},{:.2},{:.2},{list_mb_per_min:.2}",
        rewrites as f64 / minutes.max(1e-9),
        per_rewrite(events),
        per_rewrite(bytes) * per_minute / 1e6,
        cpu_per_1k * per_minute / 1e6
    );
}
