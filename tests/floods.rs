//! `--max-connections` against floods, on the real server binary over real
//! TLS without a control plane: idle TLS connections and slow handshakes
//! take every slot, and a review on a fresh connection is still answered
//! while the server's open file descriptors stay bounded.

use driftguard_testkit::flood;
use driftguard_testkit::process;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use driftguard::certs::Authority;
use flood::*;
use process::*;

const REVIEW: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/deployment-update-image.json"
);
/// The uid in `REVIEW`.
const UID: &str = "5b1a7f2e-9f7c-4d8e-8a51-2f4c1d9e0a11";
const MAX: usize = 64;
/// Descriptors beyond the connections: listeners, epoll, the runtime's
/// wakers, the audit pipe; and the one connection accepted while it waits
/// for a slot.
const MARGIN: usize = 8;

fn start(dir: &Path, ca: &Authority, max: usize, extra: &[&str]) -> Served {
    let (cert, key) = ca.leaf("server", &["127.0.0.1".into()], &[]).unwrap();
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    std::fs::write(dir.join("tls.key"), key).unwrap();
    let args: Vec<String> = vec![
        format!("--tls-cert={}", dir.join("tls.crt").display()),
        format!("--tls-key={}", dir.join("tls.key").display()),
        "--shutdown-delay=0s".into(),
        "--no-cluster".into(),
        format!("--max-connections={max}"),
    ];
    let args: Vec<String> = args
        .into_iter()
        .chain(extra.iter().map(|a| a.to_string()))
        .collect();
    serve_driftguard(Path::new(env!("CARGO_BIN_EXE_driftguard")), 0, &args)
}

/// How long the reviews during a flood wait between their handshake and
/// their request, as a loaded apiserver may: hundreds of flood connections
/// arrive meanwhile, enough to evict it many times over if eviction were
/// oldest-first regardless of peer.
const THINK: Duration = Duration::from_millis(500);

/// A review on a new connection, `think` after its handshake, is decided:
/// driftguard's own answer.
fn review(addr: SocketAddr, ca: &Authority, think: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let body = std::fs::read(REVIEW).unwrap();
    let (status, text) = post_fresh(
        addr,
        &ca.cert_pem,
        "/validate",
        &body,
        think,
        Duration::from_secs(30),
    )?;
    if status != 200 || !text.contains(UID) || !text.contains("\"allowed\":false") {
        return Err(format!("{status} {text}"));
    }
    Ok(started.elapsed())
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("floods-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// hyper's header timeout does not run before the protocol is known: without
/// driftguard's own deadline, a client that completes the handshake and says
/// nothing would keep its connection while there is room.
#[test]
fn a_connection_that_sends_no_request_is_closed_after_the_header_timeout() {
    use std::io::Read;
    let dir = scratch("silent");
    let ca = Authority::new("test CA").unwrap();
    let server = start(&dir, &ca, MAX, &["--header-timeout=1s"]);
    let config = std::sync::Arc::new(client_config(&ca.cert_pem));
    let name = rustls::pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let mut tls = rustls::StreamOwned::new(
        rustls::ClientConnection::new(config, name).unwrap(),
        std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap(),
    );
    tls.sock
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 256];
    // Session tickets first, then the end (an EOF or a reset).
    loop {
        match tls.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(20),
        "the connection stayed open {waited:?}"
    );
    assert!(
        waited >= Duration::from_millis(900),
        "closed before the timeout: {waited:?}"
    );
    assert_eq!(
        metric(server.probe, "driftguard_connections_evicted_total"),
        0.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_review_gets_through_idle_connections_and_slow_handshakes() {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("floods-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ca = Authority::new("test CA").unwrap();
    let server = start(&dir, &ca, MAX, &[]);
    let addr: SocketAddr = ([127, 0, 0, 1], server.port).into();
    let pid = server.proc.child.id();
    review(addr, &ca, Duration::ZERO).expect("a review before the flood");
    let baseline = fd_count(pid);
    let fds = FdPeak::watch(pid);

    let flood = Flood::start(
        addr,
        &ca.cert_pem,
        FloodShape {
            idle: 500,
            slow: 200,
            dribble: Duration::from_secs(1),
            reconnect_after: Duration::from_millis(200),
        },
    );
    // Every flood client connected at least once (500 idle and 200 slow
    // against 64 slots), and every slot is taken.
    wait_for("the flood to press", Duration::from_secs(120), || {
        let s = &flood.stats;
        let (idle, slow) = (s.idle_connects.load(SeqCst), s.slow_opened.load(SeqCst));
        let open = metric(server.probe, "driftguard_connections_open");
        if idle >= 500 && slow >= 200 && open >= MAX as f64 {
            Ok(())
        } else {
            Err(format!("{open} open; {}", s.summary()))
        }
    });
    let mut took = Vec::new();
    for _ in 0..5 {
        took.push(review(addr, &ca, THINK).unwrap_or_else(|e| {
            panic!("a review during the flood: {e}; {}", flood.stats.summary())
        }));
    }
    let slowest = took.iter().max().unwrap();
    assert!(
        *slowest < Duration::from_secs(10),
        "reviews during the flood took {took:?}"
    );
    let peak = fds.peak();
    let evicted = metric(server.probe, "driftguard_connections_evicted_total");
    let turned_away = metric(server.probe, "driftguard_connections_turned_away_total");
    println!(
        "reviews during the flood took {took:?}; fds: {baseline} before, peak {peak}; {evicted} evicted, {turned_away} turned away; {}",
        flood.stats.summary()
    );
    assert!(
        peak <= baseline + MAX + MARGIN,
        "driftguard held {peak} descriptors (baseline {baseline}, --max-connections {MAX})"
    );
    // The flood holds most slots: its new connections are turned away.
    assert!(
        turned_away >= 100.0,
        "{turned_away} connections turned away"
    );
    drop(flood);
    drop(fds);
    review(addr, &ca, Duration::ZERO).expect("a review after the flood");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Clients that open a request and never finish its body, each declaring a
/// body as large as the whole budget can take: they neither hold the slots
/// (a body arriving for over a second is cut when room is needed) nor the
/// budget (bytes are charged as they arrive), so a review on a new
/// connection is decided at once, by driftguard, not by `--on-error`.
#[test]
fn bodies_that_never_arrive_hold_neither_slots_nor_budget() {
    use std::io::Write;
    let dir = scratch("slow-bodies");
    let ca = Authority::new("test CA").unwrap();
    let server = start(&dir, &ca, MAX, &[]);
    let addr: SocketAddr = ([127, 0, 0, 1], server.port).into();
    let config = std::sync::Arc::new(client_config(&ca.cert_pem));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let holders: Vec<_> = (0..MAX)
        .map(|_| {
            let (config, stop, opened) = (config.clone(), stop.clone(), opened.clone());
            std::thread::spawn(move || {
                let name = rustls::pki_types::ServerName::IpAddress(
                    std::net::Ipv4Addr::LOCALHOST.into(),
                );
                let Ok(tcp) = std::net::TcpStream::connect(addr) else {
                    return;
                };
                let mut tls =
                    rustls::StreamOwned::new(rustls::ClientConnection::new(config, name).unwrap(), tcp);
                let head = "POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 3355443\r\n\r\n{";
                if tls.write_all(head.as_bytes()).and_then(|()| tls.flush()).is_err() {
                    return;
                }
                opened.fetch_add(1, SeqCst);
                // A byte now and then: slow, never idle.
                while !stop.load(SeqCst) && tls.write_all(b" ").and_then(|()| tls.flush()).is_ok() {
                    std::thread::sleep(Duration::from_millis(300));
                }
            })
        })
        .collect();
    wait_for(
        "every slot to hold a slow body",
        Duration::from_secs(30),
        || {
            let open = metric(server.probe, "driftguard_connections_open");
            let n = opened.load(SeqCst);
            if n >= MAX && open >= MAX as f64 {
                Ok(())
            } else {
                Err(format!("{n} sending, {open} open"))
            }
        },
    );
    // Not a wait for a state: the bodies must have been arriving for over a
    // second before one may be cut to make room (the load's shape).
    std::thread::sleep(Duration::from_millis(1500));
    let took = review(addr, &ca, Duration::ZERO).expect("a review past slow bodies");
    assert!(took < Duration::from_secs(5), "the review took {took:?}");
    assert!(metric(server.probe, "driftguard_connections_evicted_total") >= 1.0);
    assert_eq!(
        metric(server.probe, "driftguard_memory_budget_refused_total"),
        0.0
    );
    stop.store(true, SeqCst);
    holders.into_iter().for_each(|h| {
        let _ = h.join();
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Headers are capped (`budget::HEADER_BYTES`, 16 KiB) so that what a
/// connection holds fits its share of the byte budget.
#[test]
fn headers_over_16_kib_are_refused() {
    let dir = scratch("headers");
    let ca = Authority::new("test CA").unwrap();
    let server = start(&dir, &ca, MAX, &[]);
    let addr: SocketAddr = ([127, 0, 0, 1], server.port).into();
    let body = std::fs::read(REVIEW).unwrap();
    let request = |padding: usize| {
        let mut r = format!(
            "POST /validate HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            "p".repeat(padding),
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(&body);
        r
    };
    let send = |r: &[u8]| {
        exchange_fresh(
            addr,
            &ca.cert_pem,
            r,
            Duration::ZERO,
            Duration::from_secs(30),
        )
    };
    let (status, text) = send(&request(4 * 1024)).unwrap();
    assert!(status == 200 && text.contains(UID), "{status} {text}");
    match send(&request(64 * 1024)) {
        Ok((status, _)) => assert_eq!(status, 431),
        // Refused while the client still writes: the answer may be lost.
        Err(e) => assert!(e.contains("write") || e.contains("no status"), "{e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
