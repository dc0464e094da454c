//! `--max-connections` end to end: a real kube-apiserver and etcd with
//! driftguard registered as its webhook, while this process floods
//! driftguard's port with 5,000 idle TLS connections (handshake done, nothing
//! sent) and a few hundred slow handshakes. kubectl writes must still be
//! decided by driftguard within the webhook timeout (5 s): a drifting write is
//! denied with driftguard's own message, not "failed calling webhook", and an
//! allowed write goes through. Meanwhile driftguard's descriptors stay
//! bounded and it counts its evictions. Then driftguard restarts on its port
//! with the flood still on, so the apiserver has to open a new connection
//! through it. The webhook URL is on 127.0.0.1, so the apiserver negotiates
//! HTTP/2 (to other URLs it speaks HTTP/1.1 and opens a connection per
//! concurrent review; tests/floods.rs sends each review on a new HTTP/1.1
//! connection). Under CI=true (and everywhere else) a control plane that
//! cannot start fails the test.

use driftguard_testkit::control_plane;
use driftguard_testkit::flood;

use std::net::SocketAddr;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use control_plane::*;
use flood::*;

const MAX: usize = 256;
/// Descriptors beyond the connections: listeners, epoll, the runtime's
/// wakers, the audit pipe, the kube client's connections; and the one
/// connection accepted while it waits for a slot.
const MARGIN: usize = 16;
const IDLE: usize = 5_000;
const SLOW: usize = 300;

/// Connections closed to make room, and new ones turned away.
fn pressed(dg: &Driftguard) -> (f64, f64) {
    (
        metric(dg.probe, "driftguard_connections_evicted_total"),
        metric(dg.probe, "driftguard_connections_turned_away_total"),
    )
}

fn total((evicted, turned_away): (f64, f64)) -> f64 {
    evicted + turned_away
}

/// A drifting write, denied by driftguard itself; returns how long kubectl took.
/// Five rounds of a drift that must be denied and a scale that must pass,
/// with how long each took.
fn decide_rounds(
    plane: &ControlPlane,
    flood: &Flood,
    phase: &str,
) -> (Vec<Duration>, Vec<Duration>) {
    let fail = |round: u32, e: String| -> Duration {
        panic!("{phase} (round {round}): {e}; {}", flood.stats.summary())
    };
    (0..5)
        .map(|round| {
            (
                drift_is_denied(plane).unwrap_or_else(|e| fail(round, e)),
                allowed_write_succeeds(plane, 4 + round).unwrap_or_else(|e| fail(round, e)),
            )
        })
        .unzip()
}

fn drift_is_denied(plane: &ControlPlane) -> Result<Duration, String> {
    let started = Instant::now();
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "set",
            "image",
            "deployment/myapp",
            "app=nginx:1.28",
        ],
    );
    let took = started.elapsed();
    if out.ok {
        return Err(format!("the drifting write went through: {out}"));
    }
    if out.stderr.contains("failed calling webhook") {
        return Err(format!("driftguard was not reached: {out}"));
    }
    if !out
        .stderr
        .contains("/spec/template/spec/containers/0/image")
        || !out.stderr.contains("Argo CD application myapp")
    {
        return Err(format!("not driftguard's denial: {out}"));
    }
    Ok(took)
}

/// A write the policy allows (replicas are ignored for myapp), to `replicas`.
fn allowed_write_succeeds(plane: &ControlPlane, replicas: u32) -> Result<Duration, String> {
    let started = Instant::now();
    let out = plane.kubectl(
        "alice",
        &[
            "-n",
            "production",
            "scale",
            "deployment/myapp",
            &format!("--replicas={replicas}"),
        ],
    );
    let took = started.elapsed();
    if !out.ok {
        return Err(format!("the allowed write was refused: {out}"));
    }
    Ok(took)
}

#[test]
fn kubectl_writes_are_decided_through_a_connection_flood() {
    let test_started = Instant::now();
    // The flood's sockets, kubectl's and the control plane's own.
    ensure_open_files((IDLE + SLOW + 1_000) as u64);
    let mut plane = ControlPlane::start("floods");
    plane.prepare(&["production", "argocd"]);
    let policy = format!("{ROOT}/tests/data/e2e-policy.yaml");
    let mut dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={policy}"),
            &format!("--argocd-application={ROOT}/tests/data/seed/argocd-application.yaml"),
            &plane.driftguard_kubeconfig_flag(),
            &format!("--max-connections={MAX}"),
        ],
    );
    dg.register(&plane, &policy);
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(MYAPP_DEPLOYMENT));
    assert!(out.ok, "objects as the Argo CD controller: {out}");
    plane.wait_until_webhook_denies_drift();
    let quiet = (
        drift_is_denied(&plane).unwrap(),
        allowed_write_succeeds(&plane, 3).unwrap(),
    );

    let pid = dg.proc.child.id();
    let baseline = fd_count(pid);
    let rss_before = rss_kib(pid) / 1024;
    let fds = FdPeak::watch(pid);
    let addr: SocketAddr = ([127, 0, 0, 1], dg.port).into();
    let flood_started = Instant::now();
    let mut flood = Flood::start(
        addr,
        &plane.ca.cert_pem,
        FloodShape {
            idle: IDLE,
            slow: SLOW,
            dribble: Duration::from_secs(1),
            reconnect_after: Duration::from_millis(500),
        },
    );
    // Every flood client connected at least once, and every slot is taken.
    wait_for("the flood to press", Duration::from_secs(300), || {
        let s = &flood.stats;
        let open = metric(dg.probe, "driftguard_connections_open");
        if s.idle_connects.load(SeqCst) >= IDLE as u64
            && s.slow_opened.load(SeqCst) >= SLOW as u64
            && open >= MAX as f64
        {
            Ok(())
        } else {
            Err(format!("{open} open; {}", s.summary()))
        }
    });
    let ramp = flood_started.elapsed();
    let evicted_before = pressed(&dg);

    let (denials, allowed) = decide_rounds(&plane, &flood, "during the flood");
    let summary = flood.stats.summary();
    let evicted_during = pressed(&dg);
    let (peak, rss) = (fds.peak(), fds.rss_peak_mib());
    drop(fds);
    println!(
        "driftguard resident memory: {rss_before} MiB before the flood, peak {rss} MiB during it"
    );
    println!(
        "kubectl before the flood: denied drift {:?}, allowed scale {:?}; flood ramp {ramp:?}; kubectl during the flood: denied drift {denials:?}, allowed scale {allowed:?}; \
         driftguard fds {baseline} before, peak {peak}; (evicted, turned away) {evicted_before:?} after the ramp, {evicted_during:?} at the end; {summary}",
        quiet.0, quiet.1
    );
    assert!(
        peak <= baseline + MAX + MARGIN,
        "driftguard held {peak} descriptors (baseline {baseline}, --max-connections {MAX})"
    );
    assert!(
        total(evicted_during) >= IDLE as f64 / 2.0,
        "only {evicted_during:?} connections evicted or turned away"
    );

    // Driftguard restarts on the same port while the flood goes on: the
    // apiserver's kept-alive connection is gone, and its new one has to get
    // through the backlog and the eviction churn like any other.
    let overflows_before = listen_overflows();
    dg.restart(None);
    let fds = FdPeak::watch(dg.proc.child.id());
    wait_for(
        "the flood to press on the restarted driftguard",
        Duration::from_secs(120),
        || match pressed(&dg) {
            p if total(p) >= IDLE as f64 / 2.0 => Ok(()),
            p => Err(format!(
                "(evicted, turned away) {p:?}; {}",
                flood.stats.summary()
            )),
        },
    );
    let (denials, allowed) = decide_rounds(&plane, &flood, "after the restart during the flood");
    let overflows = listen_overflows() - overflows_before;
    let evicted_during = pressed(&dg);
    let summary = flood.stats.summary();
    flood.stop();
    let peak = fds.peak();
    drop(fds);
    println!(
        "restarted during the flood: denied drift {denials:?}, allowed scale {allowed:?}; \
         driftguard fds peak {peak}; (evicted, turned away) {evicted_during:?}; accept queue overflows (machine-wide) {overflows}; {summary}"
    );
    assert!(
        peak <= baseline + MAX + MARGIN,
        "the restarted driftguard held {peak} descriptors (baseline {baseline}, --max-connections {MAX})"
    );

    // After the flood: the slots come back, and writes are still decided.
    wait_for(
        "the flood's connections to close",
        Duration::from_secs(60),
        || match metric(dg.probe, "driftguard_connections_open") {
            open if open <= 8.0 => Ok(()),
            open => Err(format!("{open} open")),
        },
    );
    drift_is_denied(&plane).expect("after the flood");
    allowed_write_succeeds(&plane, 2).expect("after the flood");
    println!("test took {:?}", test_started.elapsed());
}
