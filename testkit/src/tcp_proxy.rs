//! A TCP proxy in front of driftguard replicas, as a Service's virtual IP is:
//! one address, each accepted connection sent to the next backend in turn
//! (a backend whose connect fails is skipped), bytes copied both ways. TLS
//! passes through untouched, so the apiserver verifies the replicas' own
//! certificate. When a backend goes away mid-connection, the client side is
//! closed the way the backend's side was: a FIN for an end of stream, a RST
//! for a reset ([`Close::Mirror`]), or always one of them.
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// How the client side is closed when its backend's side ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// FIN after the backend's FIN, RST after the backend's RST.
    Mirror,
    /// Always a FIN (shutdown of the write half).
    Fin,
    /// Always a RST (SO_LINGER 0, then close).
    Reset,
}

#[derive(Debug)]
pub struct Stats {
    /// Client connections accepted.
    pub accepted: AtomicU64,
    /// Per backend: connections opened to it.
    pub connected: Vec<AtomicU64>,
    /// Per backend: connects that failed (it was skipped).
    pub connect_failed: Vec<AtomicU64>,
    /// Client connections closed with a FIN because their backend's side ended.
    pub closed_fin: AtomicU64,
    /// Client connections closed with a RST because their backend's side ended.
    pub closed_rst: AtomicU64,
    /// Connections the client closed first (passed on as a half close).
    pub client_closed: AtomicU64,
    /// Client connections closed at once: no backend could be reached.
    pub no_backend: AtomicU64,
    /// When each client connection was closed because its backend's side ended.
    pub backend_ended_at: Mutex<Vec<Instant>>,
}

impl Stats {
    pub fn summary(&self) -> String {
        let list = |v: &[AtomicU64]| {
            v.iter()
                .map(|c| c.load(Ordering::SeqCst).to_string())
                .collect::<Vec<_>>()
                .join("/")
        };
        format!(
            "accepted {}, per backend connected {} connect-failed {}, closed by the client {}, client closed after the backend: {} FIN {} RST, no backend {}",
            self.accepted.load(Ordering::SeqCst),
            list(&self.connected),
            list(&self.connect_failed),
            self.client_closed.load(Ordering::SeqCst),
            self.closed_fin.load(Ordering::SeqCst),
            self.closed_rst.load(Ordering::SeqCst),
            self.no_backend.load(Ordering::SeqCst),
        )
    }
}

pub struct TcpProxy {
    pub ip: std::net::IpAddr,
    pub port: u16,
    pub stats: Arc<Stats>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TcpProxy {
    /// Listens on 127.0.0.1, a port of its own, for `backends` (ports on 127.0.0.1).
    pub fn start(backends: &[u16], close: Close) -> TcpProxy {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into(), backends, close)
    }

    /// [`TcpProxy::start`] listening on `ip`.
    pub fn start_on(ip: std::net::IpAddr, backends: &[u16], close: Close) -> TcpProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime.block_on(TcpListener::bind((ip, 0))).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stats = Arc::new(Stats {
            accepted: AtomicU64::new(0),
            connected: backends.iter().map(|_| AtomicU64::new(0)).collect(),
            connect_failed: backends.iter().map(|_| AtomicU64::new(0)).collect(),
            client_closed: AtomicU64::new(0),
            closed_fin: AtomicU64::new(0),
            closed_rst: AtomicU64::new(0),
            no_backend: AtomicU64::new(0),
            backend_ended_at: Mutex::new(Vec::new()),
        });
        runtime.spawn(accept_loop(
            listener,
            Arc::new(backends.to_vec()),
            stats.clone(),
            close,
        ));
        TcpProxy {
            ip,
            port,
            stats,
            runtime: Some(runtime),
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    backends: Arc<Vec<u16>>,
    stats: Arc<Stats>,
    close: Close,
) {
    let next = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        stats.accepted.fetch_add(1, Ordering::SeqCst);
        let (backends, stats, next) = (backends.clone(), stats.clone(), next.clone());
        tokio::spawn(async move {
            let first = next.fetch_add(1, Ordering::SeqCst);
            let mut server = None;
            for i in 0..backends.len() {
                let b = (first + i) % backends.len();
                match TcpStream::connect(("127.0.0.1", backends[b])).await {
                    Ok(s) => {
                        stats.connected[b].fetch_add(1, Ordering::SeqCst);
                        server = Some(s);
                        break;
                    }
                    Err(_) => {
                        stats.connect_failed[b].fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
            match server {
                Some(server) => relay(client, server, &stats, close).await,
                // Dropping the client closes it.
                None => {
                    stats.no_backend.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
}

/// Copies both ways. The client's end of stream is passed on as a half
/// close; the backend's end (EOF or error) closes the client side.
async fn relay(client: TcpStream, server: TcpStream, stats: &Stats, close: Close) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (backend_end, client_first) = {
        // Ok: the client sent its end of stream (passed on as a half
        // close); Err: a read from the client or a write to the backend failed.
        let up = async {
            let copied = tokio::io::copy(&mut cr, &mut sw).await;
            if copied.is_ok() {
                let _ = sw.shutdown().await;
            }
            copied
        };
        let down = tokio::io::copy(&mut sr, &mut cw);
        tokio::pin!(up, down);
        tokio::select! {
            r = &mut down => (r, false),
            r = &mut up => match r {
                Ok(_) => (down.await, true),
                Err(e) => (Err(e), false),
            },
        }
    };
    if client_first {
        stats.client_closed.fetch_add(1, Ordering::SeqCst);
        return;
    }
    // Ok: the backend sent a FIN; Err: it reset (or the client went away).
    let reset = match close {
        Close::Mirror => backend_end.is_err(),
        Close::Fin => false,
        Close::Reset => true,
    };
    let client = cr.reunite(cw).expect("halves of one stream");
    stats.backend_ended_at.lock().unwrap().push(Instant::now());
    if reset {
        stats.closed_rst.fetch_add(1, Ordering::SeqCst);
        let _ = client.set_zero_linger();
        drop(client);
    } else {
        stats.closed_fin.fetch_add(1, Ordering::SeqCst);
        let mut client = client;
        let _ = client.shutdown().await;
    }
}

/// An IPv4 address of this machine that is not a loopback one (the source
/// address of its default route; connecting a UDP socket sends nothing).
pub fn non_loopback_ipv4() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}
