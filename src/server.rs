//! `driftguard serve`: the HTTPS admission endpoint and the probe port.

pub mod app;
pub mod errors;
pub mod probes;
pub mod reload;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::metrics::Metrics;
use crate::service::{OnError, PolicyHandle, Reviewer};
use app::App;
use probes::Health;
use tls::CertStore;

/// Where the serving pair comes from.
#[derive(Clone, Debug)]
pub enum TlsSource {
    Files {
        cert: PathBuf,
        key: PathBuf,
    },
    /// Generated in memory; the CA is written to `ca_out` for clients.
    SelfSigned {
        ca_out: PathBuf,
    },
}

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub probe_listen: SocketAddr,
    pub tls: TlsSource,
    pub client_ca: Option<PathBuf>,
    pub policy: Option<PathBuf>,
    pub argocd_applications: Vec<PathBuf>,
    pub on_error: OnError,
    /// Longest a decision may take, queueing included; below the webhooks' timeoutSeconds.
    pub decision_timeout: Duration,
    /// Threads that run decisions, and decisions that may wait for one.
    pub decision_threads: usize,
    pub decision_queue: usize,
    pub max_body_bytes: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub handshake_timeout: Duration,
    pub shutdown_delay: Duration,
    pub shutdown_timeout: Duration,
    pub reload_interval: Duration,
    /// Cluster access for reading scale parents: a kubeconfig, or `None` to
    /// infer it (in-cluster or `$KUBECONFIG`); `no_cluster` turns it off.
    pub kubeconfig: Option<PathBuf>,
    pub no_cluster: bool,
    /// Read Argo CD Applications and argocd-cm (in this namespace) from the cluster.
    pub watch_argocd: bool,
    pub argocd_namespace: String,
    /// Read Flux Kustomizations and HelmReleases from the cluster.
    pub watch_flux: bool,
}

pub async fn run(config: Config) -> anyhow::Result<()> {
    tls::install_process_default();
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());

    let (policy, notes) =
        crate::policy::load_sources(config.policy.as_deref(), &config.argocd_applications)?;
    notes.iter().for_each(|n| tracing::info!("{n}"));
    let policy = PolicyHandle::new(policy);
    health.policy_loaded.store(true, Ordering::SeqCst);

    let certs = Arc::new(CertStore::new(initial_pair(&config.tls)?));
    let client_ca = match &config.client_ca {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?)
        }
        None => None,
    };
    let tls_config =
        tls::server_config(certs.clone(), client_ca.as_deref()).map_err(anyhow::Error::msg)?;
    let acceptor = TlsAcceptor::from(Arc::new(tls_config));

    let probe_listener = TcpListener::bind(config.probe_listen)
        .await
        .with_context(|| format!("cannot bind the probe port {}", config.probe_listen))?;
    let probe_router = probes::router(health.clone(), metrics.clone());
    let probe_task = tokio::spawn(async move { axum::serve(probe_listener, probe_router).await });

    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind {}", config.listen))?;
    health.tls_bound.store(true, Ordering::SeqCst);
    tracing::info!(listen = %listener.local_addr()?, probes = %config.probe_listen, "driftguard is serving");

    if let Some(path) = config.policy.clone() {
        reload::spawn_policy_reloader(
            path,
            config.argocd_applications.clone(),
            policy.clone(),
            metrics.clone(),
            config.reload_interval,
        )?;
    }
    if let TlsSource::Files { cert, key } = &config.tls {
        reload::spawn_certificate_reloader(
            cert.clone(),
            key.clone(),
            certs.clone(),
            metrics.clone(),
            config.reload_interval,
        )?;
    }

    let client = cluster_client(&config).await;
    let parents = client.clone().map(|client| {
        Arc::new(crate::cluster::parents::ParentReader::new(
            client,
            Duration::from_secs(1),
            Duration::from_secs(2),
        ))
    });
    // One Event per object and reason per minute; the next one counts the rest.
    let events = client
        .clone()
        .map(|c| crate::cluster::events::EventRecorder::new(c, Duration::from_secs(60)));
    let sources = match (&client, config.watch_argocd || config.watch_flux) {
        (Some(client), true) => {
            let options = crate::cluster::watch::WatchOptions {
                argocd: config.watch_argocd,
                argocd_namespace: config.argocd_namespace.clone(),
                flux: config.watch_flux,
            };
            let watches = crate::cluster::watch::spawn(client.clone(), &options, metrics.clone());
            health.sources_filled.store(false, Ordering::SeqCst);
            let (health, metrics, w) = (health.clone(), metrics.clone(), watches.clone());
            tokio::spawn(async move {
                loop {
                    health.sources_filled.store(w.filled(), Ordering::SeqCst);
                    metrics.source_age.set(w.age_seconds());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            });
            Some(watches.handle.clone())
        }
        (None, true) => anyhow::bail!(
            "--watch-argocd and --watch-flux need cluster access (--kubeconfig or in-cluster)"
        ),
        _ => None,
    };
    let decider = crate::decider::Decider::new(config.decision_threads, config.decision_queue)
        .context("cannot start the decision threads")?;
    tracing::info!(threads = decider.threads(), queue = config.decision_queue, timeout = ?config.decision_timeout, "decision pool started");
    let app = Arc::new(App {
        reviewer: Reviewer {
            policy,
            sources,
            parents,
            events,
            metrics: metrics.clone(),
            decider,
            on_error: config.on_error,
            decision_timeout: config.decision_timeout,
        },
        max_body_bytes: config.max_body_bytes,
        body_timeout: config.body_timeout,
    });
    serve_tls(listener, acceptor, app::router(app), &config, &health).await;
    probe_task.abort();
    tracing::info!("driftguard stopped");
    Ok(())
}

/// A kube client, or `None` (logged) when there is no cluster to talk to: the
/// webhook still serves, and scale writes fall back to `unknownScaleParent`.
async fn cluster_client(config: &Config) -> Option<kube::Client> {
    if config.no_cluster {
        return None;
    }
    match crate::cluster::client(config.kubeconfig.as_deref()).await {
        Ok(client) => Some(client),
        Err(e) => {
            tracing::warn!(error = %e, "no cluster access: scale parents cannot be read, unknownScaleParent applies");
            None
        }
    }
}

fn initial_pair(source: &TlsSource) -> anyhow::Result<rustls::sign::CertifiedKey> {
    match source {
        TlsSource::Files { cert, key } => {
            let c =
                std::fs::read(cert).with_context(|| format!("{}: cannot read", cert.display()))?;
            let k =
                std::fs::read(key).with_context(|| format!("{}: cannot read", key.display()))?;
            tls::certified_key(&c, &k)
                .map_err(|e| anyhow::anyhow!("{} / {}: {e}", cert.display(), key.display()))
        }
        TlsSource::SelfSigned { ca_out } => {
            let names = vec![
                "127.0.0.1".to_owned(),
                "localhost".to_owned(),
                "::1".to_owned(),
            ];
            let generated = crate::certs::generate("driftguard", &names)?;
            std::fs::write(ca_out, &generated.ca_cert_pem)
                .with_context(|| format!("{}: cannot write", ca_out.display()))?;
            tracing::info!(ca = %ca_out.display(), "self-signed: generated a CA and a certificate for 127.0.0.1 and localhost; clients trust the CA at this path");
            tls::certified_key(generated.cert_pem.as_bytes(), generated.key_pem.as_bytes())
                .map_err(anyhow::Error::msg)
        }
    }
}

/// Accepts TLS connections and serves HTTP/1.1 or HTTP/2 on each (public so
/// that the load benchmark's fixed-answer baseline runs the very same stack).
/// On SIGTERM
/// or SIGINT: unready at once, keep accepting for the shutdown delay so that
/// endpoints update, then stop accepting and let in-flight reviews finish.
pub async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: axum::Router,
    config: &Config,
    health: &Health,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
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
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                let service = TowerToHyperService::new(router.clone());
                let builder = builder.clone();
                let watcher = graceful.watcher();
                let handshake_timeout = config.handshake_timeout;
                tokio::spawn(async move {
                    let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
                    };
                    let conn = builder.serve_connection(TokioIo::new(tls), service).into_owned();
                    if let Err(e) = watcher.watch(conn).await {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
            _ = &mut signal, if !signalled => {
                signalled = true;
                health.shutting_down.store(true, Ordering::SeqCst);
                tracing::info!(delay = ?config.shutdown_delay, "shutdown requested: unready now, still accepting during the delay");
                drain.as_mut().reset(tokio::time::Instant::now() + config.shutdown_delay);
            }
            _ = &mut drain, if signalled => break,
        }
    }
    drop(listener);
    tracing::info!(
        connections = graceful.count(),
        "no longer accepting; finishing reviews in flight"
    );
    if tokio::time::timeout(config.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?config.shutdown_timeout, "shutdown timeout reached with connections still open");
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
