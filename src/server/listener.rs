//! The webhook listener: accepts TLS connections, at most
//! `--max-connections` at once (see [`connections`](super::connections)),
//! serves HTTP/1.1 or HTTP/2 on each, and drains them on shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::connections::{Admitted, CloseReason, ConnectionMetrics, Connections, EVICTION_GRACE};
use super::probes::Health;
use super::{ConnectionLimits, app, budget, client_auth};
use crate::metrics::Metrics;

/// HTTP/2 requests at once on one connection; each holds its own budget, and
/// their headers together fit the connection's [`budget::HEADER_BYTES`]. Go's
/// client opens another connection when a peer allows fewer streams.
const MAX_STREAMS: u32 = 4;

/// Accepts TLS connections and serves HTTP/1.1 or HTTP/2 on each (public so
/// that the load benchmark's fixed-answer baseline runs the very same stack),
/// at most `--max-connections` at once (see [`super::connections`]).
/// On SIGTERM or SIGINT: unready at once, keep accepting for the shutdown delay so that
/// endpoints update, then stop accepting and let in-flight reviews finish.
pub async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: axum::Router,
    limits: &ConnectionLimits,
    health: &Health,
    metrics: &Metrics,
    budget: Arc<budget::MemoryBudget>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The apiserver speaks HTTP/1.1 to webhooks (HTTP/2 only to loopback
    // URLs), keeps idle connections for Go's 90 s and does not retry a POST
    // whose connection the server closed under it. hyper's header read
    // timeout starts as soon as a kept-alive connection waits for its next
    // request, so it is the idle timeout: at --header-timeout, every quiet
    // spell of 10 s would close the pool and the first write after it could
    // race the close and fail ("failed calling webhook ... EOF"). The first
    // request's headers stay bounded by --header-timeout (Conn::serve). An
    // idle HTTP/2 connection stays until the client closes it or its
    // keep-alive pings go unanswered. Under pressure, idle ones are evicted.
    // What one connection may hold is capped to fit its share of the byte
    // budget (budget::PER_CONNECTION_BYTES): headers, unread HTTP/2 data.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .max_buf_size(budget::HEADER_BYTES)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(budget::HEADER_BYTES as u32 / MAX_STREAMS)
        .max_concurrent_streams(MAX_STREAMS)
        .initial_stream_window_size(budget::H2_WINDOW)
        .initial_connection_window_size(budget::H2_WINDOW)
        .max_send_buf_size(budget::HEADER_BYTES)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let builder = Arc::new(builder);
    let connections = Connections::new(
        limits.max_connections as usize,
        ConnectionMetrics {
            open: metrics.connections_open.clone(),
            evicted: metrics.connections_evicted.clone(),
            turned_away: metrics.connections_turned_away.clone(),
        },
        budget,
    );
    let signal = shutdown_signal();
    tokio::pin!(signal);
    let drain = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(drain);
    let mut signalled = false;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Waits while every connection is busy: the listener is not
                // polled meanwhile, so further connections stay in the
                // backlog. Nor is the signal: a SIGTERM is seen once a
                // request ends, within --body-timeout and --decision-timeout.
                let Some(admitted) = connections.admit(peer.ip()).await else {
                    tracing::debug!(%peer, "turned away: its address holds most connections, none of them used");
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let conn = Conn {
                    acceptor: acceptor.clone(),
                    service: TowerToHyperService::new(router.clone()),
                    builder: builder.clone(),
                    handshake_timeout: limits.handshake_timeout,
                    first_request_timeout: limits.header_timeout,
                    clients_refused: metrics.clients_refused.clone(),
                };
                tokio::spawn(conn.serve(tcp, peer, admitted));
            }
            _ = &mut signal, if !signalled => {
                signalled = true;
                health.shutting_down.store(true, Ordering::SeqCst);
                tracing::info!(delay = ?limits.shutdown_delay, "shutdown requested: unready now, still accepting during the delay");
                drain.as_mut().reset(tokio::time::Instant::now() + limits.shutdown_delay);
            }
            _ = &mut drain, if signalled => break,
        }
    }
    drop(listener);
    tracing::info!(
        connections = connections.len(),
        "no longer accepting; finishing reviews in flight"
    );
    connections.close_all();
    if tokio::time::timeout(limits.shutdown_timeout, connections.all_closed())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?limits.shutdown_timeout, "shutdown timeout reached with connections still open");
    }
}

/// What serving one connection needs.
struct Conn {
    acceptor: TlsAcceptor,
    service: TowerToHyperService<axum::Router>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    handshake_timeout: Duration,
    /// A connection that has not begun a request this long after its
    /// handshake is closed: hyper's HTTP/1 header timeout does not cover the
    /// time before the protocol is known, so a client that completes the
    /// handshake and sends nothing would hold its connection for ever.
    first_request_timeout: Duration,
    clients_refused: prometheus_client::metrics::family::Family<
        crate::metrics::ReasonLabels,
        prometheus_client::metrics::counter::Counter,
    >,
}

impl Conn {
    /// A refused client is worth a warning and a count (someone other than
    /// the apiserver tried to post reviews); other failures are noise.
    fn handshake_failed(&self, peer: SocketAddr, error: &std::io::Error) {
        match client_auth::refusal(error) {
            Some((reason, why)) => {
                self.clients_refused
                    .get_or_create(&crate::metrics::ReasonLabels { reason })
                    .inc();
                if client_auth::warn_now() {
                    tracing::warn!(%peer, reason, "refused a webhook client: {why}");
                } else {
                    tracing::debug!(%peer, reason, "refused a webhook client: {why}");
                }
            }
            None => tracing::debug!(%peer, error = %error, "TLS handshake failed"),
        }
    }

    async fn serve(self, tcp: tokio::net::TcpStream, peer: SocketAddr, admitted: Admitted) {
        let slot = admitted.slot().clone();
        let handshake = tokio::time::timeout(self.handshake_timeout, self.acceptor.accept(tcp));
        let tls = tokio::select! {
            done = handshake => match done {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return self.handshake_failed(peer, &e),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            },
            reason = slot.closed() => return tracing::debug!(%peer, ?reason, "closed during the TLS handshake"),
        };
        // Only asked for (and then required) with --client-ca.
        if tls.get_ref().1.peer_certificates().is_some() {
            slot.authenticated();
        }
        slot.handshake_done();
        // Counts the requests in flight: busy from the call until the
        // response is produced (or the request is dropped), slow while its
        // body has been arriving for long (app::Arriving, dropped once read).
        let inner = self.service;
        let counted = slot.clone();
        let service = hyper::service::service_fn(move |mut request: http::Request<_>| {
            let busy = counted.begin();
            request
                .extensions_mut()
                .insert(app::Arriving(Arc::new(counted.arriving())));
            let response = hyper::service::Service::call(&inner, request);
            async move {
                let response = response.await;
                drop(busy);
                response
            }
        });
        let conn = self
            .builder
            .serve_connection(TokioIo::new(tls), service)
            .into_owned();
        tokio::pin!(conn);
        let first_request = tokio::time::sleep(self.first_request_timeout);
        tokio::pin!(first_request);
        let grace = tokio::time::sleep(Duration::MAX / 4);
        tokio::pin!(grace);
        let (mut closing, mut deadline_passed, mut grace_running) = (false, false, false);
        loop {
            tokio::select! {
                ended = conn.as_mut() => {
                    if let Err(e) = ended {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                reason = slot.closed() => {
                    if reason == CloseReason::Cut {
                        return tracing::debug!(%peer, "cut: a slow body, or room needed");
                    }
                    if !closing {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    // Evicted: bounded by the grace. Shutdown: in-flight
                    // reviews finish, bounded by --shutdown-timeout overall.
                    grace_running = reason == CloseReason::Evicted;
                    if grace_running {
                        grace.as_mut().reset(tokio::time::Instant::now() + EVICTION_GRACE);
                    }
                }
                _ = &mut first_request, if !deadline_passed => {
                    deadline_passed = true;
                    if !slot.served() && !closing {
                        tracing::debug!(%peer, timeout = ?self.first_request_timeout, "no request after the handshake; closing");
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                        grace_running = true;
                        grace.as_mut().reset(tokio::time::Instant::now() + EVICTION_GRACE);
                    }
                }
                _ = &mut grace, if grace_running => {
                    if slot.in_flight() == 0 {
                        return tracing::debug!(%peer, "closed after the grace");
                    }
                    // A request raced in: graceful shutdown lets it finish.
                    grace_running = false;
                }
            }
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler installs");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
