//! The plain-HTTP probe port: `/healthz` (alive), `/readyz` (policy loaded,
//! TLS listener bound, serving certificate within its dates, not shutting
//! down) and `/metrics`.
//!
//! Ready means able to judge: a watched source that cannot be listed (a hub
//! out of reach) delays readiness only for `--sources-wait`, then the server
//! is ready, degraded, and judges by the strictest reading without it
//! ([`crate::drift::Sources::unread`]). An unready replica judges nothing:
//! human writes fail closed on its webhook and creates fail open.
//!
//! An expired (or not yet valid) serving certificate makes the replica
//! unready, not degraded: the apiserver refuses the handshake, so every call
//! routed here fails. Unready takes it out of the Service, so the apiserver
//! calls replicas that still serve a valid pair; with none, the calls fail as
//! they would have anyway. `/healthz` stays alive: a restart does not renew a
//! certificate, and the reloader takes a renewed one without it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::certs::expiry::{self, Validity};
use crate::metrics::Metrics;

/// What `/readyz` reports, set by the server as it starts and stops.
#[derive(Debug)]
pub struct Health {
    /// A policy has been loaded.
    pub policy_loaded: AtomicBool,
    /// The webhook's TLS listener is bound.
    pub tls_bound: AtomicBool,
    /// SIGTERM arrived: unready, so the Service stops routing here.
    pub(crate) shutting_down: AtomicBool,
    /// Watched GitOps sources never listed yet, by name.
    pub(crate) sources_unread: Mutex<Vec<&'static str>>,
    /// Set once `--sources-wait` has passed since the watches started: from
    /// then on, unread sources leave the server ready, degraded.
    pub(crate) sources_wait_over: AtomicBool,
    /// Watched kinds the apiserver serves at another version only: each
    /// named, since "not listed yet" would hide that it never will be.
    pub(crate) sources_mismatched: Mutex<Vec<String>>,
    /// How the webhooks differ from the policy in force, when they do
    /// (`cluster::registration`).
    pub(crate) registration: Mutex<Option<String>>,
    /// The serving chain's validity, checked against the clock at each probe
    /// (a certificate expires while the server runs); `None`: not known.
    serving_validity: Mutex<Option<Validity>>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            policy_loaded: AtomicBool::new(false),
            tls_bound: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            sources_unread: Mutex::new(Vec::new()),
            sources_wait_over: AtomicBool::new(false),
            sources_mismatched: Mutex::new(Vec::new()),
            registration: Mutex::new(None),
            serving_validity: Mutex::new(None),
        }
    }
}

impl Health {
    /// Why the server is not ready, if it is not.
    pub(crate) fn not_ready(&self) -> Option<String> {
        let mismatched = self
            .sources_mismatched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("; ");
        if self.shutting_down.load(Ordering::SeqCst) {
            Some("shutting down".into())
        } else if !self.policy_loaded.load(Ordering::SeqCst) {
            Some("policy not loaded".into())
        } else if !self.tls_bound.load(Ordering::SeqCst) {
            Some("TLS listener not bound".into())
        } else if let Some(why) = self.serving_unusable(expiry::now()) {
            Some(why)
        } else if !mismatched.is_empty() {
            Some(format!("served at another API version: {mismatched}"))
        } else if !self.sources_wait_over.load(Ordering::SeqCst) && !self.unread().is_empty() {
            Some("Argo CD / Flux sources not listed yet".into())
        } else {
            None
        }
    }

    /// Why a ready server judges by less than it was told to read, if it does.
    pub(crate) fn degraded(&self) -> Option<String> {
        let unread = self.unread();
        let sources = (!unread.is_empty()).then(|| {
            format!(
                "Argo CD / Flux sources not listed: {}; judging by the strictest reading without them",
                unread.join(", ")
            )
        });
        let registration = self
            .registration
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let all: Vec<String> = sources.into_iter().chain(registration).collect();
        (!all.is_empty()).then(|| all.join("; "))
    }

    /// The serving chain now in force (see [`super::cert_expiry`]).
    pub(crate) fn set_serving_validity(&self, validity: Option<Validity>) {
        *self
            .serving_validity
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = validity;
    }

    pub(crate) fn serving_validity(&self) -> Option<Validity> {
        *self
            .serving_validity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Why the serving certificate is refused at `now`, if it is.
    fn serving_unusable(&self, now: i64) -> Option<String> {
        let validity = self.serving_validity()?;
        let standing = validity.standing(now);
        (!standing.usable()).then(|| {
            format!(
                "the serving certificate {} (valid {} to {}): the apiserver refuses it",
                standing.text(),
                validity.not_before_text(),
                validity.not_after_text()
            )
        })
    }

    fn unread(&self) -> Vec<&'static str> {
        self.sources_unread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Probe connections served at once; more are closed at accept. The kubelet
/// and Prometheus need a few.
const MAX_CONNECTIONS: usize = 32;
/// A probe request's headers must arrive within this, and fit in hyper's
/// smallest buffer; a connection lasts [`CONNECTION_LIFETIME`] at most.
const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
const HEADER_BYTES: usize = 8192;
const CONNECTION_LIFETIME: std::time::Duration = std::time::Duration::from_secs(30);

/// The probe port, served on a thread and runtime of its own: no decision,
/// parse or flood that occupies the webhook's workers can make `/readyz` miss
/// its one-second probe (the chart's `failureThreshold` is 1). HTTP/1 only,
/// with bounded connections, headers and lifetimes, since any pod may reach
/// it. Serves until the returned sender is dropped.
pub(crate) fn serve_apart(
    listener: std::net::TcpListener,
    router: Router,
) -> std::io::Result<tokio::sync::oneshot::Sender<()>> {
    listener.set_nonblocking(true)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("driftguard-probes".into())
        .spawn(move || runtime.block_on(serve(listener, router, stopped)))?;
    Ok(stop)
}

async fn serve(
    listener: std::net::TcpListener,
    router: Router,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => return tracing::error!(error = %e, "the probe port failed"),
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(HEADER_BYTES)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
        });
    }
}

/// The probe routes; `/metrics` reports the task count of `webhook`, the
/// runtime that serves reviews.
pub fn router(
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    webhook: tokio::runtime::Handle,
) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(health): State<Arc<Health>>| async move {
                match health.not_ready() {
                    None => match health.degraded() {
                        None => (StatusCode::OK, "ready\n".to_owned()),
                        Some(why) => (StatusCode::OK, format!("ready (degraded: {why})\n")),
                    },
                    Some(why) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not ready: {why}\n"),
                    ),
                }
            }),
        )
        .with_state(health)
        .route(
            "/metrics",
            get(|State(metrics): State<Arc<Metrics>>| async move {
                let alive = webhook.metrics().num_alive_tasks();
                metrics.runtime_tasks.set(alive as i64);
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
                    .into_response()
            })
            .with_state(metrics),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt as _;

    async fn readyz(health: &Arc<Health>) -> (StatusCode, String) {
        let webhook = tokio::runtime::Handle::current();
        let probes = router(health.clone(), Arc::new(Metrics::default()), webhook);
        let request = Request::get("/readyz").body(Body::empty()).unwrap();
        let response = probes.oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await;
        (status, String::from_utf8(body.unwrap().to_vec()).unwrap())
    }

    /// A source that cannot be listed (a hub out of reach) holds readiness
    /// back for `--sources-wait` only: then ready, saying it is degraded, so
    /// that every replica restarted in a hub outage still judges writes.
    #[tokio::test]
    async fn unread_sources_leave_the_server_ready_degraded_after_the_wait() {
        let health = Arc::new(Health::default());
        health.policy_loaded.store(true, Ordering::SeqCst);
        health.tls_bound.store(true, Ordering::SeqCst);
        *health.sources_unread.lock().unwrap() = vec!["Application", "AppProject"];
        let (status, body) = readyz(&health).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body, "not ready: Argo CD / Flux sources not listed yet\n");

        health.sources_wait_over.store(true, Ordering::SeqCst);
        let (status, body) = readyz(&health).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(
            body.starts_with(
                "ready (degraded: Argo CD / Flux sources not listed: Application, AppProject;"
            ),
            "{body}"
        );

        health.sources_unread.lock().unwrap().clear();
        assert_eq!(readyz(&health).await, (StatusCode::OK, "ready\n".into()));
    }

    /// A serving certificate past its dates makes the replica unready, saying
    /// why; a valid one does not, nor does one expiring soon.
    #[tokio::test]
    async fn an_expired_serving_certificate_makes_the_server_unready() {
        let health = Arc::new(Health::default());
        health.policy_loaded.store(true, Ordering::SeqCst);
        health.tls_bound.store(true, Ordering::SeqCst);
        let now = expiry::now();
        let day = 86_400;
        let window = |not_before, not_after| {
            Some(Validity {
                not_before,
                not_after,
            })
        };
        health.set_serving_validity(window(0, now + 3 * day));
        assert_eq!(readyz(&health).await, (StatusCode::OK, "ready\n".into()));

        health.set_serving_validity(window(0, now - 1500 * day));
        let (status, body) = readyz(&health).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(
            body.starts_with("not ready: the serving certificate expired 1500 days ago (valid 1970-01-01T00:00:00Z to "),
            "{body}"
        );
        assert!(body.ends_with("): the apiserver refuses it\n"), "{body}");

        health.set_serving_validity(window(now + 2 * day + 600, now + 90 * day));
        let (status, body) = readyz(&health).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains("becomes valid in 2 days"), "{body}");
    }

    /// Every webhook worker blocked (a long parse, a stuck decision): the
    /// probes still answer at once, from their own thread.
    #[test]
    fn probes_answer_while_every_webhook_worker_is_blocked() {
        use std::io::{Read, Write};
        let webhook = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let health = Arc::new(Health::default());
        let probes = router(
            health,
            Arc::new(Metrics::default()),
            webhook.handle().clone(),
        );
        let _stop = webhook
            .block_on(async { serve_apart(listener, probes) })
            .unwrap();
        let (blocked, unblock) = std::sync::mpsc::channel::<()>();
        webhook.spawn(async move { _ = unblock.recv_timeout(std::time::Duration::from_secs(10)) });
        std::thread::sleep(std::time::Duration::from_millis(100));

        let started = std::time::Instant::now();
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let read = stream.read_to_string(&mut answer);
        drop(blocked);
        assert!(
            read.is_ok() && answer.ends_with("ok\n"),
            "{read:?} {answer:?}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    /// Connections holding headers that never end cannot take the port:
    /// past its connection cap they are closed at accept, and each is cut
    /// after the header timeout, so a probe gets through.
    #[test]
    fn header_floods_on_the_probe_port_are_bounded() {
        use std::io::{Read, Write};
        let webhook = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let probes = router(Arc::default(), Arc::default(), webhook.handle().clone());
        let _stop = webhook
            .block_on(async { serve_apart(listener, probes) })
            .unwrap();
        let mut flood = Vec::new();
        for _ in 0..2 * MAX_CONNECTIONS {
            let mut s = std::net::TcpStream::connect(address).unwrap();
            let _ = s.write_all(b"GET /readyz HTTP/1.1\r\nX-A: a\r\n");
            flood.push(s);
        }
        // Over the buffer: refused at once.
        let mut big = std::net::TcpStream::connect(address).unwrap();
        big.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let _ = big.write_all(&[b'a'; 3 * HEADER_BYTES]);
        let mut answer = Vec::new();
        let _ = big.read_to_end(&mut answer);
        assert!(!String::from_utf8_lossy(&answer).contains("200 OK"));

        let started = std::time::Instant::now();
        let answered = loop {
            let mut s = std::net::TcpStream::connect(address).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(1)))
                .unwrap();
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            if s.read_to_string(&mut answer).is_ok() && answer.ends_with("ok\n") {
                break true;
            }
            if started.elapsed() > 3 * HEADER_TIMEOUT {
                break false;
            }
        };
        assert!(
            answered,
            "no probe answered within {:?}",
            3 * HEADER_TIMEOUT
        );
    }
}
