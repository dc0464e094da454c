//! Connection floods against driftguard's webhook port, for the tests that
//! check `--max-connections`: clients that complete the TLS handshake and then
//! send nothing, and clients that dribble a ClientHello a byte at a time.
//! Both reconnect when the server closes them, so the flood keeps pressing
//! for as long as it runs. It runs on a runtime of its own, so that the
//! synchronous tests (kubectl) can go on meanwhile; dropping it ends it.
//!
//! The flood connects from [`FLOOD_SOURCE`], as flooding pods would from
//! their own addresses, while the tests' reviews and the apiserver connect
//! from 127.0.0.1.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The address the flood connects from (all of 127/8 is loopback on Linux).
pub const FLOOD_SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

async fn connect_from_flood_source(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(FLOOD_SOURCE, 0))?;
    socket.connect(addr).await
}

/// What the flood saw.
#[derive(Default, Debug)]
pub struct FloodStats {
    /// Idle clients' TCP connections accepted by the kernel (driftguard may
    /// then turn them away before any TLS).
    pub idle_connects: AtomicU64,
    /// Idle clients whose handshake completed.
    pub handshakes: AtomicU64,
    /// Idle clients holding a completed connection now.
    pub held: AtomicI64,
    /// Peak of `held`.
    pub held_peak: AtomicI64,
    /// Connections (idle or slow) the server closed.
    pub closed_by_server: AtomicU64,
    /// Slow-handshake connections opened.
    pub slow_opened: AtomicU64,
    /// Connects or handshakes that failed (turned-away connections too).
    pub failures: AtomicU64,
}

impl FloodStats {
    pub fn summary(&self) -> String {
        format!(
            "idle connects {}, idle handshakes {}, held now {} (peak {}), closed by the server {}, slow handshakes opened {}, failures {}",
            self.idle_connects.load(Ordering::SeqCst),
            self.handshakes.load(Ordering::SeqCst),
            self.held.load(Ordering::SeqCst),
            self.held_peak.load(Ordering::SeqCst),
            self.closed_by_server.load(Ordering::SeqCst),
            self.slow_opened.load(Ordering::SeqCst),
            self.failures.load(Ordering::SeqCst),
        )
    }
}

pub struct Flood {
    pub stats: Arc<FloodStats>,
    stop: Arc<AtomicBool>,
    runtime: Option<tokio::runtime::Runtime>,
}

/// How the flood presses.
#[derive(Clone, Copy, Debug)]
pub struct FloodShape {
    /// Clients that complete the handshake and hold the connection silently.
    pub idle: usize,
    /// Clients that send a ClientHello one byte per `dribble`.
    pub slow: usize,
    pub dribble: Duration,
    /// Pause before a client reconnects after the server closed it.
    pub reconnect_after: Duration,
}

impl Flood {
    pub fn start(addr: SocketAddr, ca_pem: &str, shape: FloodShape) -> Flood {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let stats = Arc::new(FloodStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let config = Arc::new(client_config(ca_pem));
        let hello = client_hello(&config);
        // Many connects at once overflow the listen backlog and wait for SYN
        // retransmits; a few hundred at a time keeps the ramp quick.
        let connecting = Arc::new(tokio::sync::Semaphore::new(200));
        for i in 0..shape.idle {
            let (stats, stop, config, connecting) = (
                stats.clone(),
                stop.clone(),
                config.clone(),
                connecting.clone(),
            );
            runtime.spawn(async move {
                let connector = tokio_rustls::TlsConnector::from(config);
                while !stop.load(Ordering::SeqCst) {
                    idle_client(addr, &connector, &stats, &connecting).await;
                    tokio::time::sleep(jitter(shape.reconnect_after, i)).await;
                }
            });
        }
        for i in 0..shape.slow {
            let (stats, stop, hello) = (stats.clone(), stop.clone(), hello.clone());
            runtime.spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    slow_client(addr, &hello, shape.dribble, &stats).await;
                    tokio::time::sleep(jitter(shape.reconnect_after, i)).await;
                }
            });
        }
        Flood {
            stats,
            stop,
            runtime: Some(runtime),
        }
    }

    /// Ends the flood and closes every connection it holds.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `base` to twice `base`, spread by client number.
fn jitter(base: Duration, i: usize) -> Duration {
    base + base.mul_f64((i * 7919 % 1000) as f64 / 1000.0)
}

async fn idle_client(
    addr: SocketAddr,
    connector: &tokio_rustls::TlsConnector,
    stats: &FloodStats,
    connecting: &tokio::sync::Semaphore,
) {
    let permit = connecting.acquire().await.unwrap();
    let name = ServerName::IpAddress(addr.ip().into());
    let connected = tokio::time::timeout(Duration::from_secs(30), async {
        let tcp = connect_from_flood_source(addr).await?;
        stats.idle_connects.fetch_add(1, Ordering::SeqCst);
        connector.connect(name, tcp).await
    })
    .await;
    drop(permit);
    let mut tls = match connected {
        Ok(Ok(tls)) => tls,
        _ => {
            stats.failures.fetch_add(1, Ordering::SeqCst);
            return;
        }
    };
    stats.handshakes.fetch_add(1, Ordering::SeqCst);
    let held = stats.held.fetch_add(1, Ordering::SeqCst) + 1;
    stats.held_peak.fetch_max(held, Ordering::SeqCst);
    // Sends nothing; reads (session tickets, then the end) until the server closes.
    let mut buf = [0u8; 512];
    while let Ok(n) = tls.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
    stats.held.fetch_sub(1, Ordering::SeqCst);
    stats.closed_by_server.fetch_add(1, Ordering::SeqCst);
}

async fn slow_client(addr: SocketAddr, hello: &[u8], dribble: Duration, stats: &FloodStats) {
    let Ok(Ok(mut tcp)) =
        tokio::time::timeout(Duration::from_secs(30), connect_from_flood_source(addr)).await
    else {
        stats.failures.fetch_add(1, Ordering::SeqCst);
        return;
    };
    stats.slow_opened.fetch_add(1, Ordering::SeqCst);
    let mut buf = [0u8; 512];
    for byte in hello.iter().cycle() {
        tokio::select! {
            // The server answers nothing before the whole hello: a read that
            // ends is the server closing.
            _ = tcp.read(&mut buf) => break,
            _ = tokio::time::sleep(dribble) => {
                if tcp.write_all(&[*byte]).await.is_err() {
                    break;
                }
            }
        }
    }
    stats.closed_by_server.fetch_add(1, Ordering::SeqCst);
}

/// A rustls client trusting `ca_pem`, offering no ALPN: the server learns
/// nothing about the protocol until the client speaks, which it never does.
pub fn client_config(ca_pem: &str) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// The bytes of a real ClientHello record for 127.0.0.1.
fn client_hello(config: &Arc<rustls::ClientConfig>) -> Vec<u8> {
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let mut conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).unwrap();
    }
    hello
}

/// The kernel's count of connections dropped because a listener's accept
/// queue was full (`ListenOverflows` in /proc/net/netstat, machine-wide).
pub fn listen_overflows() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap_or_default();
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "ListenOverflows")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

/// Open file descriptors of process `pid` (each connection holds one).
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Resident memory of process `pid` in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Samples `fd_count(pid)` (and the resident memory) every 50 ms on a thread
/// of its own and keeps the peaks, until dropped.
pub struct FdPeak {
    peak: Arc<AtomicU64>,
    rss_peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FdPeak {
    pub fn watch(pid: u32) -> FdPeak {
        let peak = Arc::new(AtomicU64::new(fd_count(pid) as u64));
        let rss_peak = Arc::new(AtomicU64::new(rss_kib(pid)));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (peak, rss_peak, stop) = (peak.clone(), rss_peak.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::SeqCst) {
                    peak.fetch_max(fd_count(pid) as u64, Ordering::SeqCst);
                    rss_peak.fetch_max(rss_kib(pid), Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        FdPeak {
            peak,
            rss_peak,
            stop,
            thread: Some(thread),
        }
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst) as usize
    }

    /// Peak resident memory in MiB.
    pub fn rss_peak_mib(&self) -> u64 {
        self.rss_peak.load(Ordering::SeqCst) / 1024
    }
}

impl Drop for FdPeak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One value from driftguard's /metrics on its probe port, 0 when absent.
pub fn metric(probe: u16, name: &str) -> f64 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", probe)) else {
        return 0.0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").is_err() {
        return 0.0;
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// POSTs `body` to `path` over HTTP/1.1 on a new TLS connection to `addr`,
/// `think` after the handshake completes, and returns (status, body), or why
/// it failed. Synchronous: it runs on a runtime of its own.
pub fn post_fresh(
    addr: SocketAddr,
    ca_pem: &str,
    path: &str,
    body: &[u8],
    think: Duration,
    within: Duration,
) -> Result<(u16, String), String> {
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    exchange_fresh(addr, ca_pem, &request, think, within)
}

/// Sends `request` (raw HTTP/1.1, `Connection: close`) on a new TLS
/// connection, `think` after the handshake, and returns (status, body).
pub fn exchange_fresh(
    addr: SocketAddr,
    ca_pem: &str,
    request: &[u8],
    think: Duration,
    within: Duration,
) -> Result<(u16, String), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca_pem)));
    runtime.block_on(async {
        let exchange = async {
            let tcp = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let name = ServerName::IpAddress(addr.ip().into());
            let mut tls = connector
                .connect(name, tcp)
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            tokio::time::sleep(think).await;
            tls.write_all(request)
                .await
                .map_err(|e| format!("write: {e}"))?;
            // rustls may still hold the last records of a large body.
            tls.flush().await.map_err(|e| format!("flush: {e}"))?;
            let mut response = Vec::new();
            // The server closes after answering (Connection: close); a reset
            // after the whole answer is no failure.
            let read = tls.read_to_end(&mut response).await;
            let text = String::from_utf8_lossy(&response).into_owned();
            let status = text
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("no status in {text:?} ({read:?})"))?;
            Ok((
                status,
                text.split_once("\r\n\r\n")
                    .map(|(_, b)| b.to_owned())
                    .unwrap_or_default(),
            ))
        };
        tokio::time::timeout(within, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {within:?}")))
    })
}

/// Makes sure this process may open `needed` descriptors: raises the soft
/// limit to the hard one when that is enough (with util-linux `prlimit`),
/// and fails with the reason otherwise, rather than with a flood that never
/// connects.
pub fn ensure_open_files(needed: u64) {
    let limits = |text: &str| -> Option<(u64, u64)> {
        let line = text.lines().find(|l| l.starts_with("Max open files"))?;
        let mut fields = line["Max open files".len()..].split_whitespace();
        let soft = fields.next()?.parse().unwrap_or(u64::MAX);
        let hard = fields.next()?.parse().unwrap_or(u64::MAX);
        Some((soft, hard))
    };
    let read = || {
        limits(&std::fs::read_to_string("/proc/self/limits").unwrap_or_default()).unwrap_or((0, 0))
    };
    let (soft, hard) = read();
    if soft >= needed {
        return;
    }
    assert!(
        hard >= needed,
        "the flood needs {needed} open files; `ulimit -n` allows {soft} (hard limit {hard})"
    );
    let raised = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={hard}:{hard}"))
        .status()
        .is_ok_and(|s| s.success());
    let (soft, _) = read();
    assert!(
        raised && soft >= needed,
        "the flood needs {needed} open files; `ulimit -n` allows {soft} and prlimit could not raise it to {hard}"
    );
}
