//! What the break-glass sweeper costs the apiserver (issue 23, item 5): the
//! chart's two replicas, as its ServiceAccount with its RBAC, Lease and
//! flags, on an apiserver with 200 CRDs installed and one break-glass armed.
//! The requests driftguard's ServiceAccount makes in one minute are read from
//! the apiserver's own audit log and printed by verb and resource; the test
//! fails when the sweeper lists types on a timer (every type, every interval,
//! on every replica: over a thousand requests a minute here) instead of
//! watching its records of the armed objects on one replica.
//! `examples/sweeper_crds.rs` measures how the cost grows with CRDs.

use driftguard_testkit::armed::*;
use driftguard_testkit::control_plane;
use driftguard_testkit::flood::metric;
use driftguard_testkit::rbac_audit;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use control_plane::*;
use serde_json::Value;

const SA: &str = "system:serviceaccount:driftguard:dg-driftguard";
const CRDS: usize = 200;
/// The sweeper's own requests a minute (the Lease's renewals and the scan
/// aside) that the test allows: discovery and the Applications' list once
/// per interval at most, and the watches' occasional re-lists.
const SWEEPER_PER_MINUTE: usize = 30;
/// The scan for armed objects without a record (src/breakglass/sweeper/scan.rs):
/// one label-selected list a second at most, whatever the number of CRDs.
const SCAN_PER_MINUTE: usize = 60;

/// Whether an audit event is one of the scan's lists.
fn scan(e: &Value) -> bool {
    e["verb"] == "list"
        && (e["requestURI"].as_str())
            .is_some_and(|u| u.contains("labelSelector=driftguard.io%2Fbreak-glass"))
}

fn received(e: &Value) -> Option<jiff::Timestamp> {
    e["requestReceivedTimestamp"].as_str()?.parse().ok()
}

#[test]
fn the_sweeper_watches_instead_of_listing_every_type() {
    let mut plane = ControlPlane::start_audited("sweeper-load");
    plane.create_namespaces(&["driftguard", "argocd", "production"]);
    plane.add_user(SA, &[]);
    install_crds(&plane, 0, CRDS);

    let chart = render_chart(
        &plane,
        1,
        &["policy.breakGlass.allowedGroups[0]=sre-oncall"],
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&chart.yaml).unwrap();
    let args: Vec<String> =
        docs.iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("the chart renders a Deployment")["spec"]["template"]["spec"]["containers"][0]
            ["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|a| a.starts_with("--break-glass-sweep") || a.starts_with("--argocd-namespace"))
            .map(str::to_owned)
            .collect();
    assert_eq!(
        args.len(),
        3,
        "interval, lease and Argo CD namespace: {args:?}"
    );
    apply_chart_rbac_and_lease(&plane, &docs);
    // One break-glass armed through the webhook (below), an hour to go.
    plane.add_user("sam", &["sre-oncall"]);
    plane.apply_admin(SAM_EDITS_PRODUCTION);
    plane.apply_admin(&flux_configmap("settings"));

    let policy = plane.dir.join("load-policy.yaml");
    std::fs::write(&policy, &chart.policy).unwrap();
    let mut flags = vec![
        format!("--policy={}", policy.display()),
        format!("--kubeconfig={}", plane.kubeconfig(SA).display()),
    ];
    flags.extend(args);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let first = Driftguard::start(&plane, &flags);
    let second = first.replica();
    first.register(&plane, &policy.display().to_string());
    arm(&plane, "settings", 3600, "driftguard");

    // Settled: one replica leads, and driftguard's account has sent nothing
    // but Lease renewals and watches for 3 s. The first discovery, lists and
    // watches come as one burst; the next periodic request (the
    // Applications' list) is an interval (15 s) away.
    let quiet = jiff::SignedDuration::from_secs(3);
    wait_for("both replicas to settle", Duration::from_secs(90), || {
        let leaders = [&first, &second]
            .iter()
            .filter(|dg| metric(dg.probe, "driftguard_break_glass_sweeper_leader") == 1.0)
            .count();
        let last = plane
            .audit_events()
            .iter()
            .filter(|e| {
                e["user"]["username"] == SA
                    && e["verb"] != "watch"
                    && e["objectRef"]["resource"] != "leases"
                    && !scan(e)
            })
            .filter_map(received)
            .max();
        let now = jiff::Timestamp::now();
        match last {
            Some(last) if leaders == 1 && now.duration_since(last) >= quiet => Ok(()),
            last => Err(format!(
                "{leaders} leaders; last request at {last:?}, now {now}"
            )),
        }
    });
    // The measurement window: a minute of steady state, whatever it holds.
    let from = jiff::Timestamp::now();
    std::thread::sleep(Duration::from_secs(60));
    let to = jiff::Timestamp::now();
    let events: Vec<Value> = plane
        .audit_events()
        .into_iter()
        .filter(|e| received(e).is_some_and(|t| t >= from && t < to))
        .collect();
    let scans = (events.iter())
        .filter(|e| e["user"]["username"] == SA && scan(e))
        .map(|e| e["auditID"].as_str().unwrap_or_default())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let requests = rbac_audit::requests_of(&events, SA);
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    for r in &requests {
        *by_key.entry(r.key()).or_default() += 1;
    }
    let lease: usize = by_key
        .iter()
        .filter(|(k, _)| k.contains("coordination.k8s.io/leases"))
        .map(|(_, n)| n)
        .sum();
    let sweeper = requests.len() - lease - scans;
    let mut table = format!(
        "driftguard's requests in one minute, two replicas, {CRDS} CRDs, one break-glass armed: {} ({} Lease, {scans} scan, {sweeper} other)\n",
        requests.len(),
        lease
    );
    for (key, n) in &by_key {
        let _ = writeln!(table, "  {n:>5}  {key}");
    }
    eprintln!("{table}");
    assert!(
        sweeper <= SWEEPER_PER_MINUTE,
        "the sweeper made {sweeper} requests in a minute (at most {SWEEPER_PER_MINUTE}):\n{table}"
    );
    assert!(
        (1..=SCAN_PER_MINUTE + 1).contains(&scans),
        "the scan made {scans} lists in a minute (at most {SCAN_PER_MINUTE}, and it runs):\n{table}"
    );
    assert!(
        lease > 0,
        "the replicas never touched their Lease:\n{table}"
    );
}
