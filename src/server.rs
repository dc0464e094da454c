//! `driftguard serve`: the HTTPS admission endpoint and the probe port.

pub mod app;
pub mod budget;
pub mod client_auth;
pub mod connections;
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
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::args::{DecisionTimeout, PolicySource, duration};
use crate::decider::Decider;
use crate::logging::LogFormat;
use crate::metrics::Metrics;
use crate::service::{OnError, PolicyHandle, Reviewer};
use app::App;
use connections::{Admitted, CloseReason, ConnectionMetrics, Connections, EVICTION_GRACE};
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

/// The flags of `driftguard serve`, used as they are parsed.
#[derive(Clone, Debug, clap::Args)]
pub struct Config {
    /// Address of the HTTPS webhook listener.
    #[arg(long, env = "DRIFTGUARD_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Address of the plain-HTTP probe listener (/healthz, /readyz, /metrics).
    #[arg(long, env = "DRIFTGUARD_PROBE_LISTEN", default_value = "0.0.0.0:8080")]
    pub probe_listen: SocketAddr,
    /// Serving certificate (PEM chain); reloaded when it changes.
    #[arg(
        long,
        env = "DRIFTGUARD_TLS_CERT",
        requires = "tls_key",
        required_unless_present = "self_signed"
    )]
    pub tls_cert: Option<PathBuf>,
    /// Private key of the serving certificate (PEM).
    #[arg(long, env = "DRIFTGUARD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (the apiserver's).
    #[arg(long, env = "DRIFTGUARD_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// With --client-ca: the client certificate's CN, DNS or URI SAN must be
    /// one of these (repeatable, or comma-separated in the variable).
    #[arg(
        long = "client-name",
        env = "DRIFTGUARD_CLIENT_NAMES",
        value_delimiter = ',',
        requires = "client_ca"
    )]
    pub client_names: Vec<String>,
    /// Generate a CA and a certificate for 127.0.0.1/localhost in memory, for trying driftguard out.
    #[arg(long, env = "DRIFTGUARD_SELF_SIGNED", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub self_signed: bool,
    /// Where --self-signed writes its CA certificate.
    #[arg(long, env = "DRIFTGUARD_SELF_SIGNED_CA_OUT", default_value_os_t = std::env::temp_dir().join("driftguard-ca.crt"))]
    pub self_signed_ca_out: PathBuf,
    #[command(flatten)]
    pub source: PolicySource,
    /// Diagnostic log format on stderr (audit records are always JSON lines on stdout).
    #[arg(
        long,
        env = "DRIFTGUARD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// The answer when deciding fails inside driftguard.
    #[arg(long, env = "DRIFTGUARD_ON_ERROR", value_enum, default_value = "deny")]
    pub on_error: OnError,
    #[command(flatten)]
    pub deadline: DecisionTimeout,
    /// Threads that run decisions [default: one per CPU, at least 2]; runaway jq rules take at most these.
    #[arg(long, env = "DRIFTGUARD_DECISION_THREADS", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub decision_threads: Option<u16>,
    /// Decisions that may wait for a busy thread; beyond that, reviews are answered by --on-error at once.
    #[arg(long, env = "DRIFTGUARD_DECISION_QUEUE", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub decision_queue: u32,
    /// Reviews up to this many bytes are decided on the thread that read
    /// them, saving the hand-off to a decision thread and back (two thread
    /// wake-ups); a decision that reaches a jq rule still moves to the
    /// decision threads. 0: every decision on the decision threads.
    #[arg(long, env = "DRIFTGUARD_DECIDE_HERE_MAX_BYTES", default_value_t = 64 * 1024)]
    pub decide_here_max_bytes: usize,
    /// Bytes all reviews in flight may hold together: each reserves 40 times
    /// its body before reading it and waits (up to --decision-timeout) for
    /// room, or is answered by --on-error unparsed. Fit it to the memory limit
    /// with headroom for the server's own ~25 MiB and its watched sources; a
    /// body over a fortieth of it (3.2 MiB by default) is always refused.
    #[arg(long, env = "DRIFTGUARD_MEMORY_BUDGET_BYTES", default_value_t = 128 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024 * 1024..))]
    pub memory_budget_bytes: u64,
    #[command(flatten)]
    pub limits: ConnectionLimits,
    /// Kubeconfig for reading scale parents; without it, in-cluster or $KUBECONFIG is used if present.
    #[arg(long, env = "DRIFTGUARD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Never talk to the cluster (scale writes then follow unknownScaleParent).
    #[arg(long, env = "DRIFTGUARD_NO_CLUSTER", conflicts_with = "kubeconfig")]
    pub no_cluster: bool,
    /// Read Argo CD Applications (every namespace) and argocd-cm from the cluster.
    #[arg(long, env = "DRIFTGUARD_WATCH_ARGOCD")]
    pub watch_argocd: bool,
    /// Namespace of argocd-cm.
    #[arg(long, env = "DRIFTGUARD_ARGOCD_NAMESPACE", default_value = "argocd")]
    pub argocd_namespace: String,
    /// Read Flux Kustomizations and HelmReleases from the cluster.
    #[arg(long, env = "DRIFTGUARD_WATCH_FLUX")]
    pub watch_flux: bool,
    /// Read Argo CD (Applications, AppProjects, argocd-cm) from the cluster
    /// this kubeconfig reaches, a hub whose Argo CD deploys here, instead of
    /// from this cluster. Read-only access is enough. Needs --cluster-name.
    #[arg(long, env = "DRIFTGUARD_ARGOCD_KUBECONFIG", requires_all = ["watch_argocd", "cluster_names"])]
    pub argocd_kubeconfig: Option<PathBuf>,
    /// Read Flux (Kustomizations, HelmReleases) from the cluster this
    /// kubeconfig reaches, a hub whose Flux applies here through
    /// `spec.kubeConfig`, instead of from this cluster. Needs --cluster-name.
    #[arg(long, env = "DRIFTGUARD_FLUX_KUBECONFIG", requires_all = ["watch_flux", "cluster_names"])]
    pub flux_kubeconfig: Option<PathBuf>,
    /// Flux's `--default-service-account` (kustomize-controller and
    /// helm-controller, multi-tenancy lockdown): a Kustomization or
    /// HelmRelease without `spec.serviceAccountName` is applied as this
    /// account of its own namespace, which is then trusted for its objects.
    #[arg(
        long,
        env = "DRIFTGUARD_FLUX_DEFAULT_SERVICE_ACCOUNT",
        requires = "watch_flux"
    )]
    pub flux_default_service_account: Option<String>,
    /// With --flux-kubeconfig, also read the Flux that runs in this
    /// cluster, beside the hub's. A Kustomization or HelmRelease of the same
    /// namespace and name in both cannot be told apart on the objects they
    /// apply: neither's rules apply to those (docs/fleets.md).
    #[arg(long, env = "DRIFTGUARD_LOCAL_FLUX", requires = "flux_kubeconfig")]
    pub local_flux: bool,
    /// With --argocd-kubeconfig, also read the Argo CD that runs in this
    /// cluster, in this namespace, beside the hub's. Each installation's
    /// objects are told apart by argocd-cm's `installationID`, which must
    /// differ between the two (docs/fleets.md).
    #[arg(
        long,
        env = "DRIFTGUARD_LOCAL_ARGOCD_NAMESPACE",
        requires = "argocd_kubeconfig"
    )]
    pub local_argocd_namespace: Option<String>,
    /// A name the hub knows this cluster by (repeatable, or comma-separated):
    /// an Argo CD destination `server` URL (with `://`) or `name`, and the
    /// Secret a Flux Kustomization's `spec.kubeConfig.secretRef` names.
    #[arg(
        long = "cluster-name",
        env = "DRIFTGUARD_CLUSTER_NAMES",
        value_delimiter = ','
    )]
    pub cluster_names: Vec<String>,
    /// How long the watched sources' first list may keep the server unready,
    /// so that a normal start judges with all of them. Past it, a source not
    /// listed (a hub out of reach) leaves the server ready, degraded: it
    /// judges by the strictest reading without it until it lists.
    #[arg(long, env = "DRIFTGUARD_SOURCES_WAIT", default_value = "10s", value_parser = duration)]
    pub sources_wait: Duration,
    /// How often expired break-glasses are ended: their annotations, label and
    /// the GitOps pause driftguard set removed, so the tool restores Git
    /// (needs list and patch on every type, and patch on Argo CD
    /// Applications). 0 turns it off. Never runs without cluster access.
    #[arg(long, env = "DRIFTGUARD_BREAK_GLASS_SWEEP_INTERVAL", default_value = "15s", value_parser = sweep_interval)]
    pub break_glass_sweep_interval: Duration,
    /// The Lease, as NAMESPACE/NAME, that elects the one replica whose sweeper
    /// runs (created if missing; needs get, create and update on it). Without
    /// it every replica sweeps, which is right for one replica.
    #[arg(long, env = "DRIFTGUARD_BREAK_GLASS_SWEEPER_LEASE", value_parser = lease_name)]
    pub break_glass_sweeper_lease: Option<(String, String)>,
    #[command(flatten)]
    pub guarded: crate::cluster::guard::Guarded,
    #[command(flatten)]
    pub source_limits: crate::cluster::source_cost::Limits,
    /// How often the policy and certificate files are checked for changes.
    #[arg(long, env = "DRIFTGUARD_RELOAD_INTERVAL", default_value = "2s", value_parser = duration)]
    pub reload_interval: Duration,
}

/// `--break-glass-sweeper-lease`: NAMESPACE/NAME, both DNS labels.
fn lease_name(text: &str) -> Result<(String, String), String> {
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && !s.starts_with(['-', '.'])
            && !s.ends_with(['-', '.'])
    };
    match text.split_once('/') {
        Some((ns, name)) if label(ns) && label(name) && !ns.contains('.') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("`{text}`: expected NAMESPACE/NAME")),
    }
}

/// `--break-glass-sweep-interval`: a duration, or `0` for off.
fn sweep_interval(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    duration(text).map_err(|e| e.to_string())
}

/// What one connection may take: body size, and how long each phase and
/// the shutdown may last.
#[derive(Clone, Debug, clap::Args)]
pub struct ConnectionLimits {
    /// Largest accepted request body. The apiserver caps an object at 3 MiB and an UPDATE carries two.
    #[arg(long, env = "DRIFTGUARD_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Time allowed to send the first request's headers after the TLS handshake.
    #[arg(long, env = "DRIFTGUARD_HEADER_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub header_timeout: Duration,
    /// How long an HTTP/1.1 connection that served a request may wait for
    /// the next one, its headers included. Keep it above the apiserver's
    /// 90 s keep-alive, so that the apiserver closes an idle connection
    /// first and never sends a review into one driftguard is closing.
    #[arg(long, env = "DRIFTGUARD_IDLE_TIMEOUT", default_value = "120s", value_parser = duration)]
    pub idle_timeout: Duration,
    /// Time allowed to send the request body.
    #[arg(long, env = "DRIFTGUARD_BODY_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub body_timeout: Duration,
    /// Time allowed for the TLS handshake.
    #[arg(long, env = "DRIFTGUARD_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub handshake_timeout: Duration,
    /// After SIGTERM: unready, but still accepting, for this long (endpoints catch up).
    #[arg(long, env = "DRIFTGUARD_SHUTDOWN_DELAY", default_value = "5s", value_parser = duration)]
    pub shutdown_delay: Duration,
    /// Then at most this long to finish the reviews in flight.
    #[arg(long, env = "DRIFTGUARD_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = duration)]
    pub shutdown_timeout: Duration,
    /// Most connections open at once. When full, a new connection closes one
    /// with no request in flight (or still in its TLS handshake), from the
    /// address holding the most, or is turned away if that is its own address
    /// holding over half the slots unused; when every one is busy, new ones
    /// wait in the kernel backlog.
    #[arg(long, env = "DRIFTGUARD_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub max_connections: u32,
}

impl Config {
    /// Where the serving pair comes from; clap already requires one of the two.
    fn tls_source(&self) -> anyhow::Result<TlsSource> {
        match (self.self_signed, &self.tls_cert, &self.tls_key) {
            (true, _, _) => Ok(TlsSource::SelfSigned {
                ca_out: self.self_signed_ca_out.clone(),
            }),
            (false, Some(cert), Some(key)) => Ok(TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => anyhow::bail!("give --tls-cert and --tls-key, or --self-signed"),
        }
    }
}

/// HTTP/2 requests at once on one connection; each holds its own budget, and
/// their headers together fit the connection's [`budget::HEADER_BYTES`]. Go's
/// client opens another connection when a peer allows fewer streams.
const MAX_STREAMS: u32 = 4;

/// How long the apiserver's webhook client keeps an idle connection (Go's
/// `http.Transport` as client-go sets it up).
const APISERVER_KEEP_ALIVE: Duration = Duration::from_secs(90);

pub async fn run(config: Config) -> anyhow::Result<()> {
    let tls_source = config.tls_source()?;
    if config.limits.idle_timeout <= APISERVER_KEEP_ALIVE {
        tracing::warn!(
            idle_timeout = ?config.limits.idle_timeout,
            "--idle-timeout is not above the apiserver's 90 s keep-alive: a review sent as driftguard closes an idle connection fails its webhook call"
        );
    }
    tls::install_process_default();
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());

    let (policy, notes) = crate::policy::load_sources(
        config.source.policy.as_deref(),
        &config.source.argocd_applications,
    )?;
    notes.iter().for_each(|n| tracing::info!("{n}"));
    tracing::info!(digest = %policy.digest, source = %policy.source, mode = policy.mode.as_str(), "policy in force");
    metrics.policy_in_force(&policy);
    let policy = PolicyHandle::new(policy);
    health.policy_loaded.store(true, Ordering::SeqCst);

    let certs = Arc::new(CertStore::new(initial_pair(&tls_source)?));
    let client_ca = match &config.client_ca {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?)
        }
        None => None,
    };
    metrics
        .client_auth_required
        .set(i64::from(client_ca.is_some()));
    if client_ca.is_some() && config.client_names.is_empty() {
        tracing::warn!(
            "--client-ca without --client-name: every certificate the CA signed is let in, not only the apiserver's"
        );
    }
    let tls_config = tls::server_config(certs.clone(), client_ca.as_deref(), &config.client_names)
        .map_err(anyhow::Error::msg)?;
    let acceptor = TlsAcceptor::from(Arc::new(tls_config));

    let probe_listener = std::net::TcpListener::bind(config.probe_listen)
        .with_context(|| format!("cannot bind the probe port {}", config.probe_listen))?;
    let probe_router = probes::router(
        health.clone(),
        metrics.clone(),
        tokio::runtime::Handle::current(),
    );
    let probes_stop = probes::serve_apart(probe_listener, probe_router)
        .context("cannot start the probe port's thread")?;

    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot bind {}", config.listen))?;
    tracing::info!(listen = %listener.local_addr()?, probes = %config.probe_listen, "driftguard is serving");

    if let Some(path) = config.source.policy.clone() {
        reload::spawn_policy_reloader(
            path,
            config.source.argocd_applications.clone(),
            policy.clone(),
            metrics.clone(),
            config.reload_interval,
        )?;
    }
    if let TlsSource::Files { cert, key } = &tls_source {
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
    let hub = |path: &Option<PathBuf>, what: &'static str| {
        let path = path.clone();
        async move {
            match path {
                Some(path) => crate::cluster::client(Some(&path))
                    .await
                    .map(Some)
                    .with_context(|| format!("{what}: {}", path.display())),
                None => Ok(None),
            }
        }
    };
    // One client for the hub's Argo CD: its watches read it, and the
    // sweeper lifts break-glass pauses there.
    let argocd_hub = match &client {
        Some(_) => hub(&config.argocd_kubeconfig, "--argocd-kubeconfig").await?,
        None => None,
    };
    let sources = match (&client, config.watch_argocd || config.watch_flux) {
        (Some(client), true) => {
            let options = crate::cluster::watch::WatchOptions {
                argocd: config.watch_argocd,
                argocd_namespace: config.argocd_namespace.clone(),
                local_argocd_namespace: config.local_argocd_namespace.clone(),
                flux: config.watch_flux,
                argocd_hub: argocd_hub.clone(),
                flux_hub: hub(&config.flux_kubeconfig, "--flux-kubeconfig").await?,
                cluster_names: config.cluster_names.clone(),
                flux_default_service_account: config.flux_default_service_account.clone(),
                local_flux: config.local_flux,
                limits: config.source_limits,
            };
            let watches = crate::cluster::watch::spawn(client.clone(), &options, metrics.clone());
            report_watches(&watches, &health, &metrics, config.sources_wait);
            Some(watches.handle.clone())
        }
        (None, true) => anyhow::bail!(
            "--watch-argocd and --watch-flux need cluster access (--kubeconfig or in-cluster)"
        ),
        _ => None,
    };
    if let Some(client) = &client
        && !config.break_glass_sweep_interval.is_zero()
    {
        crate::breakglass::sweeper::spawn(
            client.clone(),
            policy.clone(),
            metrics.clone(),
            crate::breakglass::sweeper::Options {
                interval: config.break_glass_sweep_interval,
                argocd_namespace: config.argocd_namespace.clone(),
                lease: config.break_glass_sweeper_lease.clone(),
                argocd_hub: argocd_hub.clone(),
                cluster_names: config.cluster_names.clone(),
                local_argocd_namespace: config.local_argocd_namespace.clone(),
            },
        );
    }
    match &client {
        Some(client) => crate::cluster::guard::spawn(
            client.clone(),
            &config.guarded,
            events.clone(),
            metrics.clone(),
        ),
        None if config.guarded.guard_namespace.is_some()
            || config.guarded.guard_webhook_configuration.is_some() =>
        {
            anyhow::bail!("--guard-* needs cluster access (--kubeconfig or in-cluster)")
        }
        None => {}
    }
    let threads = config
        .decision_threads
        .map_or_else(Decider::default_threads, usize::from);
    let decision_timeout = config.deadline.decision_timeout;
    let budget = budget::MemoryBudget::new(
        usize::try_from(config.memory_budget_bytes).unwrap_or(usize::MAX),
        metrics.memory_budget_in_use.clone(),
    );
    let decider = Decider::new(threads, config.decision_queue as usize)
        .context("cannot start the decision threads")?;
    tracing::info!(threads = decider.threads(), queue = config.decision_queue, timeout = ?decision_timeout, "decision pool started");
    let app = Arc::new(App {
        reviewer: Reviewer {
            policy,
            sources,
            parents,
            events,
            metrics: metrics.clone(),
            decider,
            on_error: config.on_error,
            decision_timeout,
            decide_here_max_bytes: config.decide_here_max_bytes,
        },
        max_body_bytes: config.limits.max_body_bytes,
        body_timeout: config.limits.body_timeout,
        budget: budget.clone(),
    });
    let largest = app
        .budget
        .capacity()
        .saturating_sub(budget::PER_REVIEW_BYTES)
        / budget::BYTES_PER_BODY_BYTE;
    if largest < config.limits.max_body_bytes {
        tracing::warn!(
            largest,
            max_body_bytes = config.limits.max_body_bytes,
            "--memory-budget-bytes fits no body over {largest} bytes: larger reviews are answered by --on-error"
        );
    }
    // Ready only now: the watches are registered, so /readyz never says
    // ready before it knows which sources are still unread.
    health.tls_bound.store(true, Ordering::SeqCst);
    serve_tls(
        listener,
        acceptor,
        app::router(app).layer(axum::middleware::from_fn_with_state(
            health.clone(),
            app::close_when_draining,
        )),
        &config.limits,
        &health,
        &metrics,
        budget,
    )
    .await;
    drop(probes_stop);
    tracing::info!("driftguard stopped");
    Ok(())
}

/// Keeps /readyz and the source metrics current with the watches: unread
/// sources hold readiness back for `wait` at most (see [`probes`]).
fn report_watches(
    watches: &Arc<crate::cluster::watch::Watches>,
    health: &Arc<Health>,
    metrics: &Arc<Metrics>,
    wait: Duration,
) {
    let unread = |health: &Health, w: &crate::cluster::watch::Watches| {
        *health
            .sources_unread
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = w.unread();
    };
    unread(health, watches);
    let waited = health.clone();
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        waited.sources_wait_over.store(true, Ordering::SeqCst);
        if let Some(why) = waited.degraded() {
            tracing::warn!("ready, degraded: {why}");
        }
    });
    let (health, metrics, w) = (health.clone(), metrics.clone(), watches.clone());
    tokio::spawn(async move {
        loop {
            unread(&health, &w);
            *health
                .sources_mismatched
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = w.mismatched();
            metrics.source_age.set(w.age_seconds());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
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
/// that the load benchmark's fixed-answer baseline runs the very same stack),
/// at most `--max-connections` at once (see [`connections`]).
/// On SIGTERM
/// or SIGINT: unready at once, keep accepting for the shutdown delay so that
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

#[cfg(test)]
mod tests {
    use super::{ConnectionLimits, sweep_interval};
    use clap::Parser as _;
    use std::time::Duration;

    #[derive(clap::Parser)]
    struct Limits {
        #[command(flatten)]
        limits: ConnectionLimits,
    }

    #[test]
    fn max_connections_defaults_to_1024_and_is_range_checked() {
        let parse = |args: &[&str]| {
            Limits::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
                .map(|l| l.limits.max_connections)
        };
        assert_eq!(parse(&[]).unwrap(), 1024);
        assert_eq!(parse(&["--max-connections=64"]).unwrap(), 64);
        assert!(parse(&["--max-connections=0"]).is_err());
        assert!(parse(&["--max-connections=2000000"]).is_err());
    }

    #[test]
    fn the_sweeper_lease_is_namespace_slash_name() {
        assert_eq!(
            super::lease_name("driftguard/driftguard-sweeper"),
            Ok(("driftguard".into(), "driftguard-sweeper".into()))
        );
        for bad in ["driftguard", "/x", "x/", "a/b/c", "Driftguard/x", "ns/-x"] {
            assert!(super::lease_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_sweep_interval_is_a_duration_or_zero() {
        assert_eq!(sweep_interval("0"), Ok(Duration::ZERO));
        assert_eq!(sweep_interval("0s"), Ok(Duration::ZERO));
        assert_eq!(sweep_interval("15s"), Ok(Duration::from_secs(15)));
        assert!(sweep_interval("soon").is_err());
        assert!(sweep_interval("-5s").is_err());
    }
}
