//! End to end on a real kube-apiserver: exactly one replica's break-glass
//! sweeper runs, elected by the chart's Lease (issue 23, item 5). Two
//! replicas run as the chart's service account with the chart's RBAC and
//! flags; one holds the Lease and sweeps, the other waits. The holder is
//! killed with SIGKILL (no chance to hand over), and the other takes the
//! Lease over and ends a break-glass that expires after the kill. The
//! chart's `breakGlass.sweepRules` are narrowed to ConfigMaps, and no request
//! of the sweeper is refused: it reads the recorded objects, never every
//! type (read from the apiserver's audit log). And a SIGKILL at any moment
//! of an arming never leaves an armed object without its record.

use driftguard_testkit::armed::*;
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
    // Break-glass goes through the webhook, which records each armed
    // object; sam may break glass (group sre-oncall) and edit production.
    plane.add_user("sam", &["sre-oncall"]);
    plane.apply_admin(SAM_EDITS_PRODUCTION);
    for name in ["before-kill", "after-kill"] {
        plane.apply_admin(&flux_configmap(name));
    }
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

    // The webhook is the replica that survives; the leader sweeps: a
    // break-glass armed for 2 s is ended.
    replicas[1 - leading].register(&plane, &policy.display().to_string());
    arm(&plane, "before-kill", 2, "driftguard");
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
    arm(&plane, "after-kill", 5, "driftguard");
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

    // The sweeper asked no type it may not read: it reads the recorded
    // objects only (a watch per type asked every other type, refused).
    let refused: Vec<String> = rbac_audit::requests_of(&plane.audit_events(), SA)
        .into_iter()
        .filter(|r| r.code == 403)
        .map(|r| r.key())
        .collect();
    assert!(refused.is_empty(), "refused requests: {refused:?}");
}

/// A Flux-managed ConfigMap armed, or ended: whether it carries an expiry.
fn armed(plane: &ControlPlane, name: &str) -> bool {
    !break_glass_of(plane, name).is_null()
}

/// driftguard is killed (SIGKILL) at spread moments of an arming write:
/// before the record, between the record and the answer, after. Whatever
/// the moment, an object the apiserver left armed was recorded first, and
/// the sweeper (restarted) ends it at expiry.
#[test]
fn a_kill_at_any_moment_of_an_arming_leaves_nothing_armed_unswept() {
    const WRITES: usize = 11;
    let mut plane = ControlPlane::start("sweeper-crash");
    plane.prepare(&["production", "argocd"]);
    plane.add_user("sam", &[]);
    plane.apply_admin(SAM_EDITS_PRODUCTION);
    plane.apply_admin(SWEEPS_CONFIGMAPS);
    let policy = plane.dir.join("crash-policy.yaml");
    std::fs::write(
        &policy,
        "breakGlass:\n  allowedUsers: [sam]\n  maxDuration: 1h\n",
    )
    .unwrap();
    let names: Vec<String> = (0..WRITES).map(|i| format!("crash-{i}")).collect();
    for name in &names {
        plane.apply_admin(&flux_configmap(name));
    }
    let mut dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            &plane.driftguard_kubeconfig_flag(),
            "--break-glass-sweep-interval=1s",
        ],
    );
    dg.register(&plane, &policy.display().to_string());
    arm(&plane, "crash-0", 8, "default");
    for (i, name) in names.iter().enumerate().skip(1) {
        let (plane_ref, name) = (&plane, name.clone());
        std::thread::scope(|s| {
            let writer = s.spawn(move || {
                let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(8))
                    .round(jiff::Unit::Second)
                    .unwrap()
                    .to_string();
                let patch = serde_json::json!({"metadata": {"annotations": {
                    "driftguard.io/break-glass": "INC-9", "driftguard.io/break-glass-expires": expires}}});
                plane_ref.kubectl(
                    "sam",
                    &["-n", "production", "patch", "configmap", &name, "--type=merge", "-p", &patch.to_string()],
                )
            });
            // Spread over a write's few milliseconds through the webhook.
            // kubectl takes some 50 to 150 ms to start and send its request:
            // the kills fall before it is sent, while driftguard holds it, and after.
            std::thread::sleep(Duration::from_millis(i as u64 * 25));
            let _ = dg.proc.child.kill();
            let _ = dg.proc.child.wait();
            let out = writer.join().unwrap();
            eprintln!(
                "{}: killed after {} ms; landed {}",
                names[i],
                i * 25,
                out.ok
            );
        });
        dg.restart(None);
        // The invariant at every step: armed implies recorded.
        let records = recorded(&plane, "default");
        for name in &names {
            assert!(
                !armed(&plane, name) || records.contains(&format!("production/{name}")),
                "{name} is armed without a record: {records:?}"
            );
        }
    }
    wait_for(
        "every armed ConfigMap to be ended at expiry",
        Duration::from_secs(60),
        || {
            let left: Vec<&String> = names.iter().filter(|n| armed(&plane, n)).collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still armed: {left:?}; {}", dg.proc.stderr_tail(5)))
            }
        },
    );
}

/// What an earlier release (or an outage with the webhook failing open)
/// left armed has no record: the sweeper's scan finds it on start, records
/// it and ends it at expiry (issue 50, item 1). A record deleted while its
/// object is armed is written again.
#[test]
fn an_arming_no_record_names_is_found_and_ended_and_a_deleted_record_comes_back() {
    let mut plane = ControlPlane::start("sweeper-scan");
    plane.prepare(&["production", "argocd"]);
    plane.add_user("sam", &[]);
    plane.apply_admin(SAM_EDITS_PRODUCTION);
    plane.apply_admin(SWEEPS_CONFIGMAPS);
    plane.apply_admin(&flux_configmap("kept"));
    // Armed as `kubectl driftguard break-glass` arms, written by an admin
    // before driftguard runs: no webhook saw it, so no record names it.
    let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120))
        .round(jiff::Unit::Second)
        .unwrap();
    let left = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "left", "namespace": "production",
            "labels": {"kustomize.toolkit.fluxcd.io/name": "apps",
                "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
                "driftguard.io/break-glass": "true"},
            "annotations": {"driftguard.io/break-glass": "INC-3 before the upgrade",
                "driftguard.io/break-glass-expires": expires.to_string(),
                "driftguard.io/break-glass-paused": "kustomize.toolkit.fluxcd.io/reconcile",
                "kustomize.toolkit.fluxcd.io/reconcile": "disabled"}},
        "data": {"LOG_LEVEL": "debug"}})
    .to_string();
    plane.apply_admin(&left);
    assert!(armed(&plane, "left") && recorded(&plane, "default").is_empty());
    // Decoys: a tenant's unmanaged ConfigMaps carrying the label, more than
    // one listing reads, in a namespace that lists first.
    plane.create_namespaces(&["aaa-decoys"]);
    let decoys: Vec<Value> = (0..250)
        .map(|i| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("decoy-{i}"), "namespace": "aaa-decoys",
                    "labels": {"driftguard.io/break-glass": "true"}}})
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": decoys});
    plane.apply_admin(&list.to_string());

    let policy = plane.dir.join("scan-policy.yaml");
    std::fs::write(
        &policy,
        "breakGlass:\n  allowedUsers: [sam]\n  maxDuration: 1h\n",
    )
    .unwrap();
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            &plane.driftguard_kubeconfig_flag(),
            "--break-glass-sweep-interval=1s",
        ],
    );
    dg.register(&plane, &policy.display().to_string());
    wait_for(
        "the scan to record what no webhook saw armed, past the decoys",
        Duration::from_secs(150),
        || {
            let records = recorded(&plane, "default");
            match records.contains(&"production/left".to_owned()) {
                true => Ok(()),
                false => Err(format!("{records:?}; {}", dg.proc.stderr_tail(12))),
            }
        },
    );

    arm(&plane, "kept", 3600, "default");
    // The sweeper's watch takes a moment to bring it the new record: one
    // deleted before that is found by the next scan round instead (10 min).
    std::thread::sleep(Duration::from_secs(5));
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            "default",
            "delete",
            "configmaps",
            "-l",
            "driftguard.io/break-glass-record",
        ],
    );
    assert!(out.ok, "{out}");
    wait_for(
        "both records to be written again",
        Duration::from_secs(30),
        || {
            let records = recorded(&plane, "default");
            match ["production/kept", "production/left"].map(|r| records.contains(&r.to_owned())) {
                [true, true] => Ok(()),
                _ => Err(format!("{records:?}")),
            }
        },
    );

    let left_at =
        Duration::try_from(expires.duration_since(jiff::Timestamp::now())).unwrap_or_default();
    wait_for(
        "the unseen arming to end at its expiry",
        left_at + Duration::from_secs(30),
        || match armed(&plane, "left") {
            false => Ok(()),
            true => Err(format!("still armed, expiry {expires}")),
        },
    );
    let ended = plane.kubectl(
        "admin",
        &["-n", "production", "get", "configmap", "left", "-o", "json"],
    );
    let ended: Value = serde_json::from_str(&ended.stdout).unwrap();
    assert!(
        ended["metadata"]["annotations"]["kustomize.toolkit.fluxcd.io/reconcile"].is_null(),
        "Flux's opt-out is removed with the break-glass: {ended}"
    );
    assert!(armed(&plane, "kept"), "an hour to go");
}
