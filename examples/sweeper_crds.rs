//! What the break-glass sweeper costs as CRDs grow (issue 40): driftguard
//! with break-glass on, on one real apiserver holding 0, 500, 1,000 and
//! 2,000 CRDs. At each count a fresh process of this build and, with
//! `DRIFTGUARD_BEFORE=<binary>`, one of an earlier build run side by side,
//! each as its own user; printed as CSV: resident memory after 60 s and
//! after 180 s, and the requests each made in its first minute and per
//! minute over the next two (from the apiserver's audit log). A benchmark,
//! never part of the tests:
//!   cargo build --release --bin driftguard --example sweeper_crds
//!   CARGO_BIN_EXE_driftguard=$CARGO_TARGET_DIR/release/driftguard \
//!   DRIFTGUARD_BEFORE=path/to/old/driftguard \
//!     $CARGO_TARGET_DIR/release/examples/sweeper_crds [COUNTS...]

use driftguard_testkit::armed::install_crds;
use driftguard_testkit::control_plane;
use driftguard_testkit::flood::rss_kib;
use driftguard_testkit::process::serve_driftguard;
use driftguard_testkit::rbac_audit;

use std::path::PathBuf;
use std::time::Duration;

use control_plane::*;

const POLICY: &str = "breakGlass:\n  allowedUsers: [sam]\n  maxDuration: 1h\n";

/// Both builds may do anything, so that RBAC shapes neither.
const ADMINS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: sweeper-crds-admins}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
  - {kind: User, name: dg-before, apiGroup: rbac.authorization.k8s.io}
  - {kind: User, name: dg-after, apiGroup: rbac.authorization.k8s.io}
"#;

fn requests(plane: &ControlPlane, user: &str, from: jiff::Timestamp, to: jiff::Timestamp) -> usize {
    let events: Vec<serde_json::Value> = plane
        .audit_events()
        .into_iter()
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| t >= from && t < to)
        })
        .collect();
    rbac_audit::requests_of(&events, user).len()
}

fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("COUNTS are numbers"))
        .collect();
    let counts = if counts.is_empty() {
        vec![0, 500, 1000, 2000]
    } else {
        counts
    };
    let before = std::env::var_os("DRIFTGUARD_BEFORE").map(PathBuf::from);
    let mut plane = ControlPlane::start_audited("sweeper-crds");
    plane.create_namespaces(&["production"]);
    for user in ["dg-before", "dg-after"] {
        plane.add_user(user, &[]);
    }
    plane.apply_admin(ADMINS);
    let policy = plane.dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let mut builds = vec![("after", Driftguard::binary())];
    builds.extend(before.map(|b| ("before", b)));
    println!("crds,build,rss_mib_60s,rss_mib_180s,requests_first_minute,requests_per_minute_after");
    let mut created = 0;
    for &count in &counts {
        if count > created {
            install_crds(&plane, created, count);
        }
        created = created.max(count);
        let started = jiff::Timestamp::now();
        let running: Vec<_> = builds
            .iter()
            .map(|(build, binary)| {
                let user = format!("dg-{build}");
                let args = Driftguard::serve_args(
                    &plane,
                    &["127.0.0.1"],
                    &[
                        &format!("--policy={}", policy.display()),
                        &format!("--kubeconfig={}", plane.kubeconfig(&user).display()),
                    ],
                );
                (build, user, serve_driftguard(binary, 0, &args))
            })
            .collect();
        std::thread::sleep(Duration::from_secs(60));
        let early: Vec<u64> = running
            .iter()
            .map(|(_, _, s)| rss_kib(s.proc.child.id()))
            .collect();
        let minute = jiff::Timestamp::now();
        std::thread::sleep(Duration::from_secs(120));
        let end = jiff::Timestamp::now();
        for ((build, user, served), early) in running.into_iter().zip(early) {
            let late = rss_kib(served.proc.child.id());
            let first = requests(&plane, &user, started, minute);
            let after = requests(&plane, &user, minute, end) as f64 / 2.0;
            println!(
                "{count},{build},{:.1},{:.1},{first},{after:.1}",
                early as f64 / 1024.0,
                late as f64 / 1024.0
            );
            let mut proc = served.proc;
            proc.stop();
        }
    }
}
