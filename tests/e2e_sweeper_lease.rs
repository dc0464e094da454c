//! End to end on a real kube-apiserver: exactly one replica's break-glass
//! sweeper runs, elected by the chart's Lease (issue 23, item 5). Two
//! replicas run as the chart's service account with the chart's RBAC and
//! flags; one holds the Lease and sweeps, the other waits. The holder is
//! killed with SIGKILL (no chance to hand over), and the other takes the
//! Lease over and ends a break-glass that expires after the kill. The
//! chart's `breakGlass.sweepRules` are narrowed to ConfigMaps: every other
//! type refuses the sweeper (403), and each leader asks each such type again
//! only after a wait that doubles from 15 s, not at every backoff step (read
//! from the apiserver's audit log).

use driftguard_testkit::control_plane;
use driftguard_testkit::rbac_audit;

use std::time::{Duration, Instant};

use control_plane::*;
use serde_json::Value;

const SA: &str = "system:serviceaccount:driftguard:dg-driftguard";
const LEASE: &str = "dg-driftguard-sweeper";

fn leader(dg: &Driftguard) -> Option<f64> {
    let (_, body) = probe_get(dg.probe, "/metrics");
    body.lines().find_map(|l| {
        l.strip_prefix("driftguard_break_glass_sweeper_leader ")?
            .trim()
            .parse()
            .ok()
    })
}

fn lease_holder(plane: &ControlPlane) -> String {
    let out = plane.kubectl(
        "admin",
        &["-n", "driftguard", "get", "lease", LEASE, "-o", "json"],
    );
    assert!(out.ok, "{out}");
    let lease: Value = serde_json::from_str(&out.stdout).unwrap();
    lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The Lease's resourceVersion: a new one at every renewal.
fn lease_version(plane: &ControlPlane) -> String {
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            "driftguard",
            "get",
            "lease",
            LEASE,
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    );
    assert!(out.ok, "{out}");
    out.stdout.trim().to_owned()
}

/// A Flux-managed ConfigMap as `kubectl driftguard break-glass` leaves it
/// (both annotations, the pause marker and Flux's opt-out, the label),
/// expiring at `expires`.
fn armed_configmap(name: &str, expires: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: production
  labels:
    kustomize.toolkit.fluxcd.io/name: apps
    kustomize.toolkit.fluxcd.io/namespace: flux-system
    driftguard.io/break-glass: "true"
  annotations:
    driftguard.io/break-glass: INC-7 hotfix
    driftguard.io/break-glass-expires: "{expires}"
    driftguard.io/break-glass-paused: kustomize.toolkit.fluxcd.io/reconcile
    kustomize.toolkit.fluxcd.io/reconcile: disabled
data: {{LOG_LEVEL: debug}}
"#
    )
}

fn break_glass_of(plane: &ControlPlane, name: &str) -> Value {
    let out = plane.kubectl(
        "admin",
        &["-n", "production", "get", "configmap", name, "-o", "json"],
    );
    assert!(out.ok, "{out}");
    let cm: Value = serde_json::from_str(&out.stdout).unwrap();
    cm["metadata"]["annotations"]["driftguard.io/break-glass-expires"].clone()
}

#[test]
fn one_replica_sweeps_and_another_takes_over_when_it_is_killed() {
    let mut plane = ControlPlane::start_audited("sweeper-lease");
    plane.create_namespaces(&["driftguard", "argocd", "production"]);
    plane.add_user(SA, &[]);

    // The chart with break-glass on: its RBAC and its Lease, applied as
    // `helm install -n driftguard` would.
    let chart = render_chart(
        &plane,
        1,
        &[
            "policy.breakGlass.allowedGroups[0]=sre-oncall",
            "breakGlass.sweepRules[0].apiGroups[0]=*",
            "breakGlass.sweepRules[0].resources[0]=configmaps",
        ],
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&chart.yaml).unwrap();
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the chart renders a Deployment");
    let flag = |name: &str| -> String {
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .find(|a| a.starts_with(&format!("--{name}=")))
            .unwrap_or_else(|| panic!("the chart sets --{name}"))
            .to_owned()
    };
    let lease_flag = flag("break-glass-sweeper-lease");
    assert_eq!(
        lease_flag,
        format!("--break-glass-sweeper-lease=driftguard/{LEASE}")
    );
    apply_chart_rbac_and_lease(&plane, &docs);

    let policy = plane.dir.join("lease-policy.yaml");
    std::fs::write(&policy, &chart.policy).unwrap();
    let args = [
        format!("--policy={}", policy.display()),
        format!("--kubeconfig={}", plane.kubeconfig(SA).display()),
        "--break-glass-sweep-interval=1s".to_owned(),
        lease_flag,
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = Driftguard::start(&plane, &args);
    let second = first.replica();
    let mut replicas = [first, second];

    // Exactly one leads, and the Lease names it.
    let started = Instant::now();
    let leading = wait_for(
        "one replica to hold the lease",
        Duration::from_secs(60),
        || match (leader(&replicas[0]), leader(&replicas[1])) {
            (Some(1.0), Some(0.0)) => Ok(0),
            (Some(0.0), Some(1.0)) => Ok(1),
            other => Err(format!(
                "{other:?}; {}\n{}",
                replicas[0].proc.stderr_tail(3),
                replicas[1].proc.stderr_tail(3)
            )),
        },
    );
    eprintln!("lease held after {:?}", started.elapsed());
    let holder = lease_holder(&plane);
    assert!(!holder.is_empty(), "the Lease names its holder");
    // It stays with one replica over several renewals: the holder renews
    // every 5 s (a third of its 15 s duration), each renewal a new
    // resourceVersion; watched until two have happened, the holder the same
    // at every look.
    let first_version = lease_version(&plane);
    let mut renewals = std::collections::BTreeSet::new();
    wait_for(
        "two renewals of the Lease by its holder",
        Duration::from_secs(60),
        || {
            assert_eq!(lease_holder(&plane), holder, "renewed, not handed over");
            let version = lease_version(&plane);
            if version != first_version {
                renewals.insert(version);
            }
            match renewals.len() {
                n if n >= 2 => Ok(()),
                n => {
                    // A look (two kubectl runs) every half second, not every poll.
                    std::thread::sleep(Duration::from_millis(500));
                    Err(format!("{n} renewals since {first_version}"))
                }
            }
        },
    );
    assert_eq!(leader(&replicas[leading]), Some(1.0));
    assert_eq!(leader(&replicas[1 - leading]), Some(0.0));
    assert_eq!(lease_holder(&plane), holder, "renewed, not handed over");

    // The leader sweeps: an expired break-glass is ended.
    let past = (jiff::Timestamp::now() - jiff::SignedDuration::from_mins(1))
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    plane.apply_admin(&armed_configmap("before-kill", &past));
    wait_for(
        "the leader to end the expired break-glass",
        Duration::from_secs(30),
        || match break_glass_of(&plane, "before-kill") {
            Value::Null => Ok(()),
            other => Err(format!("{other}")),
        },
    );

    // SIGKILL the leader; a break-glass expiring after that is the
    // survivor's to end, once it has taken the Lease over.
    let soon = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(5))
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    plane.apply_admin(&armed_configmap("after-kill", &soon));
    let killed = Instant::now();
    let _ = replicas[leading].proc.child.kill();
    let _ = replicas[leading].proc.child.wait();
    let survivor = &replicas[1 - leading];
    wait_for(
        "the survivor to take the lease over",
        Duration::from_secs(60),
        || match leader(survivor) {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}; {}", survivor.proc.stderr_tail(3))),
        },
    );
    eprintln!("lease taken over {:?} after the SIGKILL", killed.elapsed());
    assert_ne!(lease_holder(&plane), holder, "the Lease names the survivor");
    wait_for(
        "the survivor to end the break-glass",
        Duration::from_secs(60),
        || match break_glass_of(&plane, "after-kill") {
            Value::Null => Ok(()),
            other => Err(format!("{other}; {}", survivor.proc.stderr_tail(3))),
        },
    );
    eprintln!("break-glass ended {:?} after the SIGKILL", killed.elapsed());
    assert!(
        killed.elapsed() >= Duration::from_secs(5),
        "ended only after it expired"
    );

    // Every type but ConfigMaps refused the sweeper: asked again after 15 s,
    // then 30 s, ... by each of the two leaders, at most four times in all
    // in this test's half minute (a retry per backoff step asked 11 or 12).
    let refused = rbac_audit::requests_of(&plane.audit_events(), SA)
        .into_iter()
        .filter(|r| r.code == 403);
    let mut by_type: std::collections::BTreeMap<String, usize> = Default::default();
    for r in refused {
        *by_type.entry(r.key()).or_default() += 1;
    }
    assert!(
        by_type.len() > 10,
        "the other types were refused: {by_type:?}"
    );
    let asked_again: Vec<_> = by_type.iter().filter(|(_, n)| **n > 4).collect();
    assert!(
        asked_again.is_empty(),
        "types asked again after a refusal: {asked_again:?}"
    );
}
