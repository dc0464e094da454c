//! `driftguard serve`: the HTTPS admission endpoint and the probe port.
//! [`run`] starts each part in turn: policy, TLS, reloaders, the cluster's
//! tasks, the decision pool, then the listener.

pub mod app;
pub mod budget;
mod cert_expiry;
pub mod client_auth;
mod config;
pub mod connections;
pub mod errors;
mod listener;
pub mod probes;
pub mod reload;
pub mod tls;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::cluster::events::EventRecorder;
use crate::cluster::hub::ToolSources;
use crate::cluster::watch::SourcesHandle;
use crate::decider::Decider;
use crate::metrics::Metrics;
use crate::service::{PolicyHandle, Reviewer};
use app::App;
use config::TlsSource;
pub use config::{Config, ConnectionLimits};
pub use listener::serve_tls;
use probes::Health;
use tls::CertStore;

/// How long the apiserver's webhook client keeps an idle connection (Go's
/// `http.Transport` as client-go sets it up).
const APISERVER_KEEP_ALIVE: Duration = Duration::from_secs(90);

/// `driftguard serve`: the admission endpoint and the probe port, until the
/// server drains and stops.
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
    let policy = load_policy(&config, &metrics, &health)?;
    let pair = initial_pair(&tls_source)?;
    if let Some(chain) = cert_expiry::serving_chain(&pair.cert) {
        cert_expiry::serving_in_force(&chain, &metrics, &health);
    }
    let certs = Arc::new(CertStore::new(pair));
    let acceptor = tls_acceptor(&config, &certs, &metrics)?;

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

    spawn_reloaders(&config, &tls_source, &policy, &certs, &health, &metrics)?;

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
        .map(|c| EventRecorder::new(c, Duration::from_secs(60)));
    let records = recorder(&config, client.as_ref());
    let sources = start_cluster_tasks(
        &config,
        client.as_ref(),
        &policy,
        &events,
        &metrics,
        &health,
        records.clone(),
    )
    .await?;
    let reviewer = Reviewer {
        policy,
        sources,
        parents,
        events,
        records,
        metrics: metrics.clone(),
        decider: decider(&config)?,
        on_error: config.on_error,
        decision_timeout: config.deadline.decision_timeout,
        decide_here_max_bytes: config.decide_here_max_bytes,
        hub_names: match config.argocd_kubeconfig {
            Some(_) => config.cluster_names.clone(),
            None => Vec::new(),
        },
    };
    let budget = budget::MemoryBudget::new(
        usize::try_from(config.memory_budget_bytes).unwrap_or(usize::MAX),
        metrics.memory_budget_in_use.clone(),
    );
    let app = Arc::new(App {
        reviewer,
        max_body_bytes: max_body_bytes(&budget, config.limits.max_body_bytes),
        body_timeout: config.limits.body_timeout,
        budget: budget.clone(),
    });
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

/// What `serve --check-config` says: the policy and flags `run` would
/// start with, checked as it checks them, and the policy file linted (what
/// loads but does nothing, or locks out, is refused here too), with nothing
/// read but the policy.
pub fn check_config(config: &Config) -> anyhow::Result<String> {
    config.tls_source()?;
    let (policy, _) = reload::load(
        config.source.policy.as_deref(),
        &config.source.argocd_applications,
        &config.serving(),
    )?;
    if let Some(path) = &config.source.policy {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let report = crate::policy::lint::lint(&text, &path.display().to_string());
        if !report.problems.is_empty() {
            anyhow::bail!("the policy does not lint:\n{}", report.problems.join("\n"));
        }
    }
    Ok(format!(
        "ok: serve starts with policy {} ({}, mode {})",
        policy.source,
        policy.digest,
        policy.mode.as_str()
    ))
}

/// Loads the policy and marks it in force (logs, metrics, health).
fn load_policy(
    config: &Config,
    metrics: &Metrics,
    health: &Health,
) -> anyhow::Result<PolicyHandle> {
    let (policy, notes) = reload::load(
        config.source.policy.as_deref(),
        &config.source.argocd_applications,
        &config.serving(),
    )?;
    notes.iter().for_each(|n| tracing::info!("{n}"));
    tracing::info!(digest = %policy.digest, source = %policy.source, mode = policy.mode.as_str(), "policy in force");
    metrics.policy_in_force(&policy);
    health.policy_loaded.store(true, Ordering::SeqCst);
    Ok(PolicyHandle::new(policy))
}

/// Reloads the policy file and the serving pair when they change.
fn spawn_reloaders(
    config: &Config,
    tls_source: &TlsSource,
    policy: &PolicyHandle,
    certs: &Arc<CertStore>,
    health: &Arc<Health>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<()> {
    if let Some(path) = config.source.policy.clone() {
        reload::spawn_policy_reloader(
            path,
            config.source.argocd_applications.clone(),
            config.serving(),
            policy.clone(),
            metrics.clone(),
            config.reload_interval,
        )?;
    }
    if let TlsSource::Files { cert, key } = tls_source {
        reload::spawn_certificate_reloader(
            cert.clone(),
            key.clone(),
            certs.clone(),
            health.clone(),
            metrics.clone(),
            config.reload_interval,
        )?;
    }
    Ok(())
}

/// The TLS acceptor over `certs`, asking for client certificates with
/// `--client-ca`.
fn tls_acceptor(
    config: &Config,
    certs: &Arc<CertStore>,
    metrics: &Metrics,
) -> anyhow::Result<TlsAcceptor> {
    let client_ca = match &config.client_ca {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?)
        }
        None => None,
    };
    metrics
        .client_auth_required
        .set(i64::from(client_ca.is_some()));
    if let Some(pem) = &client_ca {
        cert_expiry::client_ca_in_force(pem, metrics);
    }
    if client_ca.is_some() && config.client_names.is_empty() {
        tracing::warn!(
            "--client-ca without --client-name: every certificate the CA signed is let in, not only the apiserver's"
        );
    }
    let tls_config = tls::server_config(certs.clone(), client_ca.as_deref(), &config.client_names)
        .map_err(anyhow::Error::msg)?;
    Ok(TlsAcceptor::from(Arc::new(tls_config)))
}

/// The tasks that talk to the cluster: the GitOps sources' watches (their
/// handle is returned), the break-glass sweeper and the guard. Without
/// cluster access, flags that need it are an error.
async fn start_cluster_tasks(
    config: &Config,
    client: Option<&kube::Client>,
    policy: &PolicyHandle,
    events: &Option<Arc<EventRecorder>>,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
    records: Option<crate::breakglass::record::Recorder>,
) -> anyhow::Result<Option<SourcesHandle>> {
    // One client for the hub's Argo CD: its watches read it, and the
    // sweeper lifts break-glass pauses there.
    let argocd = match client {
        Some(_) => {
            let kubeconfig = config.argocd_kubeconfig.as_deref();
            let local = config.local_argocd_namespace.clone();
            ToolSources::connect(
                kubeconfig,
                "--argocd-kubeconfig",
                local,
                &config.cluster_names,
            )
            .await?
        }
        None => ToolSources::default(),
    };
    if let (Some(client), Some(selector)) = (client, &config.argocd_application_selector) {
        let hub = argocd.client(client);
        crate::cluster::watch::check_application_selector(hub, selector, config.sources_wait)
            .await?;
    }
    let sources = match (client, config.watch_argocd || config.watch_flux) {
        (Some(client), true) => {
            let kubeconfig = config.flux_kubeconfig.as_deref();
            let local = config.local_flux.then_some(());
            let options = crate::cluster::watch::WatchOptions {
                argocd: config.watch_argocd,
                argocd_namespace: config.argocd_namespace.clone(),
                argocd_sources: argocd.clone(),
                argocd_application_selector: config.argocd_application_selector.clone(),
                flux: config.watch_flux,
                flux_sources: ToolSources::connect(
                    kubeconfig,
                    "--flux-kubeconfig",
                    local,
                    &config.cluster_names,
                )
                .await?,
                flux_default_service_account: config.flux_default_service_account.clone(),
                limits: config.source_limits,
            };
            let watches = crate::cluster::watch::spawn(client.clone(), &options, metrics.clone());
            report_watches(&watches, health, metrics, config.sources_wait);
            Some(watches.handle.clone())
        }
        (None, true) => anyhow::bail!(
            "--watch-argocd and --watch-flux need cluster access (--kubeconfig or in-cluster)"
        ),
        _ => None,
    };
    if let (Some(client), Some(records)) = (client, records) {
        crate::breakglass::sweeper::spawn(
            client.clone(),
            policy.clone(),
            metrics.clone(),
            crate::breakglass::sweeper::Options {
                interval: config.break_glass_sweep_interval,
                argocd_namespace: config.argocd_namespace.clone(),
                lease: config.break_glass_sweeper_lease.clone(),
                argocd,
                application_selector: config.argocd_application_selector.clone(),
                records,
            },
        );
    }
    match client {
        Some(client) => {
            let webhooks = config
                .guarded
                .guard_webhook_configuration
                .as_ref()
                .map(|_| {
                    let (send, receive) = tokio::sync::watch::channel(Default::default());
                    crate::cluster::registration::Checker {
                        policy: policy.clone(),
                        sources: sources.clone(),
                        webhooks: receive,
                        health: health.clone(),
                        metrics: metrics.clone(),
                        events: events.clone(),
                    }
                    .spawn();
                    send
                });
            crate::cluster::guard::spawn(
                client.clone(),
                &config.guarded,
                events.clone(),
                metrics.clone(),
                webhooks,
            );
        }
        None if config.guarded.guard_namespace.is_some()
            || config.guarded.guard_webhook_configuration.is_some() =>
        {
            anyhow::bail!("--guard-* needs cluster access (--kubeconfig or in-cluster)")
        }
        None => {}
    }
    Ok(sources)
}

/// Where armed break-glasses are recorded, when the sweeper ends them:
/// `--break-glass-namespace`, else the Lease's, else the client's namespace.
fn recorder(
    config: &Config,
    client: Option<&kube::Client>,
) -> Option<crate::breakglass::record::Recorder> {
    let client = client.filter(|_| !config.break_glass_sweep_interval.is_zero())?;
    let namespace = (config.break_glass_namespace.as_deref())
        .or(config
            .break_glass_sweeper_lease
            .as_ref()
            .map(|(ns, _)| ns.as_str()))
        .unwrap_or(client.default_namespace());
    Some(crate::breakglass::record::Recorder::new(
        client.clone(),
        namespace,
    ))
}

/// The decision pool, `--decision-threads` wide.
fn decider(config: &Config) -> anyhow::Result<Decider> {
    let threads = config
        .decision_threads
        .map_or_else(Decider::default_threads, usize::from);
    let decider = Decider::new(threads, config.decision_queue as usize)
        .context("cannot start the decision threads")?;
    tracing::info!(threads = decider.threads(), queue = config.decision_queue, timeout = ?config.deadline.decision_timeout, "decision pool started");
    Ok(decider)
}

/// `--max-body-bytes`, or the largest body the byte budget fits: the two
/// defaults never contradict each other. A larger one given is kept, with a
/// warning that the budget refuses what it allows.
fn max_body_bytes(budget: &budget::MemoryBudget, given: Option<usize>) -> usize {
    let largest =
        budget.capacity().saturating_sub(budget::PER_REVIEW_BYTES) / budget::BYTES_PER_BODY_BYTE;
    match given {
        Some(given) if given > largest => {
            tracing::warn!(
                largest,
                max_body_bytes = given,
                "--memory-budget-bytes fits no body over {largest} bytes: larger reviews are answered by --on-error"
            );
            given
        }
        Some(given) => given,
        None => largest,
    }
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
