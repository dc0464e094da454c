//! Hostile clients of driftguard's webhook port, as any pod could be: client
//! authentication is off by default, so whoever reaches the port may open
//! connections and post what it likes. Each kind of attack connects from a
//! loopback address of its own (all of 127/8 is loopback on Linux), as
//! separate pods would, and every client reconnects when the server closes
//! it, so each attack presses for as long as it runs. The attacks run on a
//! runtime of their own; dropping [`Attacks`] ends them.
//!
//! - slow bodies: a review's headers with `Content-Length: 4096`, then the
//!   body one byte a second, or never;
//! - large declared bodies: `Content-Length: 3355443` (a fortieth of the
//!   default memory budget, the largest body it admits), sent at 10 KiB/s;
//! - dribbled headers: a request's headers one byte every half second;
//! - header floods: 256 KiB of headers sent at once, half of them never
//!   ended, half ended with a small body;
//! - alias bombs: well-formed reviews of a drifting write whose stored
//!   object carries a YAML alias bomb in `argocd.argoproj.io/ignore-differences`;
//! - maximal reviews: well-formed UPDATE reviews of about 3.2 MB (judged)
//!   and of 8 MiB, past the default `--max-body-bytes` (refused by size as they arrive).
//!
//! The two kinds of review must each be answered with an AdmissionReview
//! denying the write; anything else counts as failed.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::flood;
pub use flood::{client_config, ensure_open_files};

/// The declared length of a large body: the default memory budget's
/// largest admissible body (128 MiB / 40).
pub const LARGE_BODY: usize = 3_355_443;
/// Headers per header-flood connection.
pub const HEADER_FLOOD_BYTES: usize = 256 * 1024;
/// The uid of every hostile review.
pub const UID: &str = "0badc0de-0000-4000-8000-00000000b0b0";

/// What one kind of attack did.
#[derive(Default, Debug)]
pub struct Tally {
    /// Connections whose TLS handshake completed.
    pub connections: AtomicU64,
    /// Bytes written after the handshake.
    pub bytes_sent: AtomicU64,
    /// Connections the server closed or answered.
    pub ended_by_server: AtomicU64,
    /// Connections the server answered (reviews: with an AdmissionReview
    /// denying, as expected; the others: with any bytes, an HTTP error).
    pub answered: AtomicU64,
    /// Connects, handshakes or requests that failed, or answers that were
    /// not what was expected.
    pub failed: AtomicU64,
    /// Connections open now, and their peak.
    pub held: AtomicI64,
    pub held_peak: AtomicI64,
}

impl Tally {
    fn hold(&self) {
        let held = self.held.fetch_add(1, Ordering::SeqCst) + 1;
        self.held_peak.fetch_max(held, Ordering::SeqCst);
    }

    fn release(&self) {
        self.held.fetch_sub(1, Ordering::SeqCst);
    }

    fn sent(&self, n: usize) {
        self.bytes_sent.fetch_add(n as u64, Ordering::SeqCst);
    }

    pub fn json(&self) -> Value {
        json!({
            "connections": self.connections.load(Ordering::SeqCst),
            "bytesSent": self.bytes_sent.load(Ordering::SeqCst),
            "endedByServer": self.ended_by_server.load(Ordering::SeqCst),
            "answered": self.answered.load(Ordering::SeqCst),
            "failed": self.failed.load(Ordering::SeqCst),
            "heldPeak": self.held_peak.load(Ordering::SeqCst),
        })
    }
}

/// Every attack's tally.
#[derive(Default, Debug)]
pub struct AttackStats {
    pub slow_bodies: Tally,
    pub large_bodies: Tally,
    pub dribbled_headers: Tally,
    pub header_floods: Tally,
    pub alias_bombs: Tally,
    pub maximal_reviews: Tally,
}

impl AttackStats {
    pub fn json(&self) -> Value {
        json!({
            "slowBodies": self.slow_bodies.json(),
            "largeDeclaredBodies": self.large_bodies.json(),
            "dribbledHeaders": self.dribbled_headers.json(),
            "headerFloods": self.header_floods.json(),
            "aliasBombs": self.alias_bombs.json(),
            "maximalReviews": self.maximal_reviews.json(),
        })
    }

    /// Each attack with the connections it made, for "every attack ran".
    pub fn connections(&self) -> [(&'static str, u64); 6] {
        let n = |t: &Tally| t.connections.load(Ordering::SeqCst);
        [
            ("slow bodies", n(&self.slow_bodies)),
            ("large declared bodies", n(&self.large_bodies)),
            ("dribbled headers", n(&self.dribbled_headers)),
            ("header floods", n(&self.header_floods)),
            ("alias bombs", n(&self.alias_bombs)),
            ("maximal reviews", n(&self.maximal_reviews)),
        ]
    }
}

/// How many clients of each kind press at once.
#[derive(Clone, Copy, Debug)]
pub struct AttackShape {
    pub slow_bodies: usize,
    pub large_bodies: usize,
    pub dribbled_headers: usize,
    pub header_floods: usize,
    pub alias_bombs: usize,
    pub maximal_reviews: usize,
}

/// The reviews the hostile clients post: a drifting UPDATE of `name` in
/// `namespace` (an Argo CD-tracked Deployment), as its object and stored
/// object would be.
#[derive(Clone, Debug)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    pub tracking_id: String,
}

pub struct Attacks {
    pub stats: Arc<AttackStats>,
    stop: Arc<AtomicBool>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Attacks {
    pub fn start(addr: SocketAddr, ca_pem: &str, shape: AttackShape, target: &Target) -> Attacks {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let stats = Arc::new(AttackStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let connector = TlsConnector::from(Arc::new(client_config(ca_pem)));
        let bombs: Arc<Vec<Vec<u8>>> = Arc::new(vec![
            review(target, &laughs(9)),
            review(target, &wide_bomb(256 * 1024)),
        ]);
        let maximal: Arc<Vec<Vec<u8>>> = Arc::new(vec![
            maximal_review(target, 3_200_000),
            maximal_review(target, 8 * 1024 * 1024 - 64 * 1024),
        ]);
        let spawn = |count: usize, source: u8, kind: Kind| {
            for i in 0..count {
                let (stats, stop, connector) = (stats.clone(), stop.clone(), connector.clone());
                let (bombs, maximal) = (bombs.clone(), maximal.clone());
                runtime.spawn(async move {
                    let from = IpAddr::V4(Ipv4Addr::new(127, 0, 0, source));
                    let mut n = i;
                    while !stop.load(Ordering::SeqCst) {
                        let c = Client {
                            from,
                            addr,
                            connector: &connector,
                        };
                        match kind {
                            Kind::SlowBody => c.slow_body(n, &stats.slow_bodies).await,
                            Kind::LargeBody => c.large_body(&stats.large_bodies).await,
                            Kind::DribbledHeaders => {
                                c.dribbled_headers(n, &stats.dribbled_headers).await
                            }
                            Kind::HeaderFlood => c.header_flood(n, &stats.header_floods).await,
                            Kind::AliasBomb => {
                                c.review(&bombs[n % bombs.len()], &stats.alias_bombs).await
                            }
                            Kind::Maximal => {
                                c.review(&maximal[n % maximal.len()], &stats.maximal_reviews)
                                    .await
                            }
                        }
                        n += 1;
                        // A reconnecting client does not spin on a refusing server.
                        tokio::time::sleep(Duration::from_millis(100 + (i as u64 * 37) % 200))
                            .await;
                    }
                });
            }
        };
        spawn(shape.slow_bodies, 2, Kind::SlowBody);
        spawn(shape.large_bodies, 3, Kind::LargeBody);
        spawn(shape.dribbled_headers, 4, Kind::DribbledHeaders);
        spawn(shape.header_floods, 5, Kind::HeaderFlood);
        spawn(shape.alias_bombs, 6, Kind::AliasBomb);
        spawn(shape.maximal_reviews, 7, Kind::Maximal);
        Attacks {
            stats,
            stop,
            runtime: Some(runtime),
        }
    }

    /// Ends every attack and closes every connection they hold (their
    /// tasks are dropped on the attack runtime's threads, without waiting,
    /// so that this may be called from another runtime).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Attacks {
    fn drop(&mut self) {
        self.stop();
    }
}

#[derive(Clone, Copy)]
enum Kind {
    SlowBody,
    LargeBody,
    DribbledHeaders,
    HeaderFlood,
    AliasBomb,
    Maximal,
}

struct Client<'a> {
    from: IpAddr,
    addr: SocketAddr,
    connector: &'a TlsConnector,
}

/// How a held connection ended.
enum Ended {
    /// The server answered or closed.
    ByServer,
    /// This client stopped (its plan is done or a write failed).
    Here,
}

impl Client<'_> {
    async fn connect(&self, tally: &Tally) -> Option<TlsStream<TcpStream>> {
        let connected = tokio::time::timeout(Duration::from_secs(30), async {
            let socket = TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(self.from, 0))?;
            let tcp = socket.connect(self.addr).await?;
            self.connector
                .connect(ServerName::IpAddress(self.addr.ip().into()), tcp)
                .await
        })
        .await;
        match connected {
            Ok(Ok(tls)) => {
                tally.connections.fetch_add(1, Ordering::SeqCst);
                Some(tls)
            }
            _ => {
                tally.failed.fetch_add(1, Ordering::SeqCst);
                None
            }
        }
    }

    /// Writes `chunks` one every `every`, until the server answers or
    /// closes, then holds the connection (reading) until it does.
    async fn press(
        &self,
        tally: &Tally,
        first: Vec<u8>,
        mut next: impl FnMut() -> Option<Vec<u8>>,
        every: Duration,
    ) {
        let Some(mut tls) = self.connect(tally).await else {
            return;
        };
        tally.hold();
        let ended = async {
            if tls.write_all(&first).await.is_err() || tls.flush().await.is_err() {
                return Ended::Here;
            }
            tally.sent(first.len());
            let mut buf = [0u8; 4096];
            loop {
                tokio::select! {
                    read = tls.read(&mut buf) => {
                        // An answer (a 4xx or 5xx) or the end: the server
                        // is done with this connection either way.
                        if matches!(read, Ok(n) if n > 0) {
                            tally.answered.fetch_add(1, Ordering::SeqCst);
                        }
                        return Ended::ByServer;
                    }
                    _ = tokio::time::sleep(every) => {
                        let Some(chunk) = next() else { continue };
                        if tls.write_all(&chunk).await.is_err() || tls.flush().await.is_err() {
                            return Ended::ByServer;
                        }
                        tally.sent(chunk.len());
                    }
                }
            }
        }
        .await;
        tally.release();
        if let Ended::ByServer = ended {
            tally.ended_by_server.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A review's headers, then its 4,096-byte body one byte a second (odd
    /// clients) or never (even ones).
    async fn slow_body(&self, n: usize, tally: &Tally) {
        let trickle = n % 2 == 1;
        self.press(
            tally,
            request_head(4096, ""),
            || trickle.then(|| b" ".to_vec()),
            Duration::from_secs(1),
        )
        .await
    }

    /// Headers declaring [`LARGE_BODY`] bytes, then 1 KiB every 100 ms.
    async fn large_body(&self, tally: &Tally) {
        let mut left = LARGE_BODY;
        self.press(
            tally,
            request_head(LARGE_BODY, ""),
            || {
                let n = left.min(1024);
                left -= n;
                (n > 0).then(|| vec![b' '; n])
            },
            Duration::from_millis(100),
        )
        .await
    }

    /// A request line and headers one byte every 500 ms, never ended.
    async fn dribbled_headers(&self, n: usize, tally: &Tally) {
        let line = format!("X-Dribble-{n}: slowly\r\n").into_bytes();
        let mut at = 0;
        self.press(
            tally,
            b"POST /validate HTTP/1.1\r\nHost: driftguard\r\n".to_vec(),
            || {
                let byte = line[at % line.len()];
                at += 1;
                Some(vec![byte])
            },
            Duration::from_millis(500),
        )
        .await
    }

    /// [`HEADER_FLOOD_BYTES`] of headers at once; odd clients end them
    /// with a small body (and get an answer), even ones never do.
    async fn header_flood(&self, n: usize, tally: &Tally) {
        let mut head = b"POST /validate HTTP/1.1\r\nHost: driftguard\r\n".to_vec();
        let value = "f".repeat(8 * 1024 - 32);
        let mut i = 0;
        while head.len() < HEADER_FLOOD_BYTES {
            head.extend_from_slice(format!("X-Flood-{i}: {value}\r\n").as_bytes());
            i += 1;
        }
        if n % 2 == 1 {
            head.extend_from_slice(
                b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
            );
        }
        self.press(tally, head, || None, Duration::from_secs(1))
            .await
    }

    /// Posts `body` on a new connection and checks the answer: an
    /// AdmissionReview with [`UID`] that denies.
    async fn review(&self, body: &[u8], tally: &Tally) {
        let Some(mut tls) = self.connect(tally).await else {
            return;
        };
        tally.hold();
        let exchange = async {
            let mut request = request_head(body.len(), "Connection: close\r\n");
            request.extend_from_slice(body);
            tls.write_all(&request)
                .await
                .map_err(|e| format!("write: {e}"))?;
            tls.flush().await.map_err(|e| format!("flush: {e}"))?;
            tally.sent(request.len());
            let mut response = Vec::new();
            let _ = tls.read_to_end(&mut response).await;
            let text = String::from_utf8_lossy(&response);
            let denied = text.starts_with("HTTP/1.1 200")
                && text.contains(UID)
                && text.contains("\"allowed\":false");
            if denied {
                Ok(())
            } else {
                Err(text.chars().take(300).collect::<String>())
            }
        };
        let answered = tokio::time::timeout(Duration::from_secs(60), exchange).await;
        tally.release();
        match answered {
            Ok(Ok(())) => {
                tally.answered.fetch_add(1, Ordering::SeqCst);
                tally.ended_by_server.fetch_add(1, Ordering::SeqCst);
            }
            _ => {
                tally.failed.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// `POST /validate` headers for a JSON body of `length` bytes, with `extra`
/// header lines.
fn request_head(length: usize, extra: &str) -> Vec<u8> {
    format!(
        "POST /validate HTTP/1.1\r\nHost: driftguard\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n"
    )
    .into_bytes()
}

/// A billion laughs: each line repeats the last eight times.
pub fn laughs(levels: usize) -> String {
    let mut text = String::from("a0: &a0 [\"lol lol lol lol lol lol lol lol\"]\n");
    for i in 1..=levels {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    text.push_str(&format!("jsonPointers: *a{levels}\n"));
    text
}

/// About `bytes` of YAML that is mostly aliases of one 64-item anchor: the
/// most expansion per byte the bounded parser meets before its budget.
pub fn wide_bomb(bytes: usize) -> String {
    let items = vec!["/spec/replicas"; 64].join(", ");
    let mut text = format!("a: &a [{items}]\n");
    let aliases = vec!["*a"; 64].join(", ");
    let mut i = 0;
    while text.len() < bytes {
        text.push_str(&format!("l{i}: [{aliases}]\n"));
        i += 1;
    }
    text.push_str("jsonPointers: *a\n");
    text
}

/// The target Deployment with `annotation` as its ignore-differences and
/// `env` environment variables (none: an ordinary size).
fn deployment(target: &Target, image: &str, annotation: Option<&str>, env: usize) -> Value {
    let mut annotations = json!({"argocd.argoproj.io/tracking-id": target.tracking_id});
    if let Some(text) = annotation {
        annotations["argocd.argoproj.io/ignore-differences"] = json!(text);
    }
    let env: Vec<Value> = (0..env)
        .map(|i| json!({"name": format!("VARIABLE_{i:06}"), "value": format!("value-{i:06}")}))
        .collect();
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": target.name, "namespace": target.namespace, "annotations": annotations},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": target.name}}, "template": {
            "metadata": {"labels": {"app": target.name}},
            "spec": {"containers": [{"name": "app", "image": image, "env": env}]}}},
    })
}

/// An UPDATE of the target by alice that changes its image: drift, denied
/// whatever the annotation says (it names `/spec/replicas` at most).
fn update_review(target: &Target, old: Value, new: Value) -> Vec<u8> {
    let gvk = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let gvr = json!({"group": "apps", "version": "v1", "resource": "deployments"});
    let request = json!({
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": target.name, "namespace": target.namespace, "operation": "UPDATE",
        "userInfo": {"username": "alice", "groups": ["developers", "system:authenticated"]},
        "dryRun": false, "object": new, "oldObject": old,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
    });
    // As the apiserver writes it: `uid` first in the request.
    let rest = serde_json::to_string(&request).unwrap();
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"{UID}",{}}}"#,
        &rest[1..]
    )
    .into_bytes()
}

/// A drifting review whose stored and new object carry `annotation`.
pub fn review(target: &Target, annotation: &str) -> Vec<u8> {
    update_review(
        target,
        deployment(target, "nginx:1.27", Some(annotation), 0),
        deployment(target, "nginx:1.28", Some(annotation), 0),
    )
}

/// A drifting review of about `bytes` bytes (old and new each carry half in
/// environment variables).
pub fn maximal_review(target: &Target, bytes: usize) -> Vec<u8> {
    let at = |env: usize| {
        update_review(
            target,
            deployment(target, "nginx:1.27", None, env),
            deployment(target, "nginx:1.28", None, env),
        )
    };
    let (small, large) = (at(1_000).len(), at(2_000).len());
    let per = (large - small) / 1_000;
    let mut env = 1_000 + bytes.saturating_sub(small) / per;
    let mut body = at(env);
    while body.len() > bytes {
        env -= (body.len() - bytes).div_ceil(per).max(1);
        body = at(env);
    }
    body
}
