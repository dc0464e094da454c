//! The flags of `driftguard serve`, parsed and checked.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::args::{DecisionTimeout, PolicySource, duration};
use crate::logging::LogFormat;
use crate::policy::serving::Serving;
use crate::service::OnError;
use crate::text::{is_dns_label, is_dns_subdomain};

/// Where the serving pair comes from.
#[derive(Clone, Debug)]
pub(crate) enum TlsSource {
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
    #[arg(help_heading = "Listening and TLS")]
    pub listen: SocketAddr,
    /// Address of the plain-HTTP probe listener (/healthz, /readyz, /metrics).
    #[arg(long, env = "DRIFTGUARD_PROBE_LISTEN", default_value = "0.0.0.0:8080")]
    #[arg(help_heading = "Listening and TLS")]
    pub probe_listen: SocketAddr,
    /// Serving certificate (PEM chain); reloaded when it changes.
    #[arg(
        long,
        env = "DRIFTGUARD_TLS_CERT",
        requires = "tls_key",
        required_unless_present = "self_signed"
    )]
    #[arg(help_heading = "Listening and TLS")]
    pub tls_cert: Option<PathBuf>,
    /// Private key of the serving certificate (PEM).
    #[arg(long, env = "DRIFTGUARD_TLS_KEY", requires = "tls_cert")]
    #[arg(help_heading = "Listening and TLS")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (the apiserver's).
    #[arg(long, env = "DRIFTGUARD_CLIENT_CA")]
    #[arg(help_heading = "Listening and TLS")]
    pub client_ca: Option<PathBuf>,
    /// With --client-ca: the client certificate's CN, DNS or URI SAN must be
    /// one of these (repeatable, or comma-separated in the variable).
    #[arg(
        long = "client-name",
        env = "DRIFTGUARD_CLIENT_NAMES",
        value_delimiter = ',',
        requires = "client_ca"
    )]
    #[arg(help_heading = "Listening and TLS")]
    pub client_names: Vec<String>,
    /// Generate a CA and a certificate for 127.0.0.1/localhost in memory, for trying driftguard out.
    #[arg(long, env = "DRIFTGUARD_SELF_SIGNED", conflicts_with_all = ["tls_cert", "tls_key"])]
    #[arg(help_heading = "Listening and TLS")]
    pub self_signed: bool,
    /// Where --self-signed writes its CA certificate.
    #[arg(long, env = "DRIFTGUARD_SELF_SIGNED_CA_OUT", default_value_os_t = std::env::temp_dir().join("driftguard-ca.crt"))]
    #[arg(help_heading = "Listening and TLS")]
    pub self_signed_ca_out: PathBuf,
    #[allow(missing_docs)] // flattened: its own flags carry the help text
    #[command(flatten, next_help_heading = "Policy and decisions")]
    pub source: PolicySource,
    /// Diagnostic log format on stderr (audit records are always JSON lines on stdout).
    #[arg(
        long,
        env = "DRIFTGUARD_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    #[arg(help_heading = "Policy and decisions")]
    pub log_format: LogFormat,
    /// The answer when deciding fails inside driftguard.
    #[arg(long, env = "DRIFTGUARD_ON_ERROR", value_enum, default_value = "deny")]
    #[arg(help_heading = "Policy and decisions")]
    pub on_error: OnError,
    #[allow(missing_docs)] // flattened: its own flags carry the help text
    #[command(flatten, next_help_heading = "Policy and decisions")]
    pub deadline: DecisionTimeout,
    /// Threads that run decisions [default: one per CPU, at least 2]; runaway jq rules take at most these.
    #[arg(long, env = "DRIFTGUARD_DECISION_THREADS", value_parser = clap::value_parser!(u16).range(1..=256))]
    #[arg(help_heading = "Policy and decisions")]
    pub decision_threads: Option<u16>,
    /// Decisions that may wait for a busy thread; beyond that, reviews are answered by --on-error at once.
    #[arg(long, env = "DRIFTGUARD_DECISION_QUEUE", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    #[arg(help_heading = "Policy and decisions")]
    pub decision_queue: u32,
    /// Reviews up to this many bytes are decided on the thread that read
    /// them, saving the hand-off to a decision thread and back (two thread
    /// wake-ups); a decision that reaches a jq rule still moves to the
    /// decision threads. 0: every decision on the decision threads.
    #[arg(long, env = "DRIFTGUARD_DECIDE_HERE_MAX_BYTES", default_value_t = 64 * 1024)]
    #[arg(help_heading = "Policy and decisions")]
    pub decide_here_max_bytes: usize,
    /// Bytes all reviews in flight may hold together: each reserves 40 times
    /// its body before reading it and waits (up to --decision-timeout) for
    /// room, or is answered by --on-error unparsed. Fit it to the memory limit
    /// with headroom for the server's own ~25 MiB and its watched sources; a
    /// body over a fortieth of it (3.2 MiB by default) is always refused.
    #[arg(long, env = "DRIFTGUARD_MEMORY_BUDGET_BYTES", default_value_t = 128 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024 * 1024..))]
    #[arg(help_heading = "Bounds and timeouts")]
    pub memory_budget_bytes: u64,
    #[allow(missing_docs)] // flattened: its own flags carry the help text
    #[command(flatten, next_help_heading = "Bounds and timeouts")]
    pub limits: ConnectionLimits,
    /// Kubeconfig for reading scale parents; without it, in-cluster or $KUBECONFIG is used if present.
    #[arg(long, env = "DRIFTGUARD_KUBECONFIG")]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub kubeconfig: Option<PathBuf>,
    /// Check that these flags and the policy would start, then exit: 0, or 1
    /// with what `serve` would refuse (the chart's pre-install and
    /// pre-upgrade hook). Neither the serving pair nor the cluster is read.
    #[arg(long)]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub check_config: bool,
    /// Never talk to the cluster (scale writes then follow unknownScaleParent).
    #[arg(long, env = "DRIFTGUARD_NO_CLUSTER", conflicts_with = "kubeconfig")]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub no_cluster: bool,
    /// Read Argo CD Applications (every namespace) and argocd-cm from the cluster.
    #[arg(long, env = "DRIFTGUARD_WATCH_ARGOCD")]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub watch_argocd: bool,
    /// Namespace of argocd-cm.
    #[arg(long, env = "DRIFTGUARD_ARGOCD_NAMESPACE", default_value = "argocd")]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub argocd_namespace: String,
    /// Read Flux Kustomizations and HelmReleases from the cluster.
    #[arg(long, env = "DRIFTGUARD_WATCH_FLUX")]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub watch_flux: bool,
    /// Read Argo CD (Applications, AppProjects, argocd-cm) from the cluster
    /// this kubeconfig reaches, a hub whose Argo CD deploys here, instead of
    /// from this cluster. Read-only access is enough. Needs --cluster-name.
    #[arg(long, env = "DRIFTGUARD_ARGOCD_KUBECONFIG", requires_all = ["watch_argocd", "cluster_names"])]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub argocd_kubeconfig: Option<PathBuf>,
    /// With --argocd-kubeconfig, list and watch only the hub's Applications
    /// this label selector matches (`driftguard.io/cluster=spoke-1`), so that
    /// the hub sends this cluster theirs alone. One it leaves out is unknown
    /// here: its ignore rules do not apply and the objects it plans are not
    /// guarded (docs/fleets.md).
    #[arg(
        long,
        env = "DRIFTGUARD_ARGOCD_APPLICATION_SELECTOR",
        requires = "argocd_kubeconfig"
    )]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub argocd_application_selector: Option<String>,
    /// Read Flux (Kustomizations, HelmReleases) from the cluster this
    /// kubeconfig reaches, a hub whose Flux applies here through
    /// `spec.kubeConfig`, instead of from this cluster. Needs --cluster-name.
    #[arg(long, env = "DRIFTGUARD_FLUX_KUBECONFIG", requires_all = ["watch_flux", "cluster_names"])]
    #[arg(help_heading = "Cluster and GitOps sources")]
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
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub flux_default_service_account: Option<String>,
    /// With --flux-kubeconfig, also read the Flux that runs in this
    /// cluster, beside the hub's. A Kustomization or HelmRelease of the same
    /// namespace and name in both cannot be told apart on the objects they
    /// apply: neither's rules apply to those (docs/fleets.md).
    #[arg(long, env = "DRIFTGUARD_LOCAL_FLUX", requires = "flux_kubeconfig")]
    #[arg(help_heading = "Cluster and GitOps sources")]
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
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub local_argocd_namespace: Option<String>,
    /// A name the hub knows this cluster by (repeatable, or comma-separated):
    /// an Argo CD destination `server` URL (with `://`) or `name`, and the
    /// Secret a Flux Kustomization's `spec.kubeConfig.secretRef` names.
    #[arg(
        long = "cluster-name",
        env = "DRIFTGUARD_CLUSTER_NAMES",
        value_delimiter = ','
    )]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub cluster_names: Vec<String>,
    /// How long the watched sources' first list may keep the server unready,
    /// so that a normal start judges with all of them. Past it, a source not
    /// listed (a hub out of reach) leaves the server ready, degraded: it
    /// judges by the strictest reading without it until it lists.
    #[arg(long, env = "DRIFTGUARD_SOURCES_WAIT", default_value = "10s", value_parser = duration)]
    #[arg(help_heading = "Cluster and GitOps sources")]
    pub sources_wait: Duration,
    /// How often expired break-glasses are ended: their annotations, label and
    /// the GitOps pause driftguard set removed, so the tool restores Git
    /// (needs list and patch on every type, and patch on Argo CD
    /// Applications). 0 turns it off. Never runs without cluster access.
    #[arg(long, env = "DRIFTGUARD_BREAK_GLASS_SWEEP_INTERVAL", default_value = "15s", value_parser = sweep_interval)]
    #[arg(help_heading = "Break-glass and driftguard's own objects")]
    pub break_glass_sweep_interval: Duration,
    /// The Lease, as NAMESPACE/NAME, that elects the one replica whose sweeper
    /// runs (created if missing; needs get, create and update on it). Without
    /// it every replica sweeps, which is right for one replica.
    #[arg(long, env = "DRIFTGUARD_BREAK_GLASS_SWEEPER_LEASE", value_parser = lease_name)]
    #[arg(help_heading = "Break-glass and driftguard's own objects")]
    pub break_glass_sweeper_lease: Option<(String, String)>,
    /// Where the armed set is recorded: one ConfigMap per armed object,
    /// written by the webhook when it allows an arming and deleted by the
    /// sweeper when it ends it (needs list, watch, create, patch and
    /// delete on ConfigMaps there). Default: the Lease's namespace, else the
    /// namespace of the in-cluster service account or the kubeconfig context.
    #[arg(long, env = "DRIFTGUARD_BREAK_GLASS_NAMESPACE", value_parser = namespace_name)]
    #[arg(help_heading = "Break-glass and driftguard's own objects")]
    pub break_glass_namespace: Option<String>,
    #[allow(missing_docs)] // flattened: its own flags carry the help text
    #[command(
        flatten,
        next_help_heading = "Break-glass and driftguard's own objects"
    )]
    pub guarded: crate::cluster::guard::Guarded,
    #[allow(missing_docs)] // flattened: its own flags carry the help text
    #[command(flatten, next_help_heading = "Cluster and GitOps sources")]
    pub source_limits: crate::cluster::source_cost::Limits,
    /// How often the policy and certificate files are checked for changes.
    #[arg(long, env = "DRIFTGUARD_RELOAD_INTERVAL", default_value = "2s", value_parser = duration)]
    #[arg(help_heading = "Policy and decisions")]
    pub reload_interval: Duration,
}

/// `--break-glass-sweeper-lease`: NAMESPACE/NAME, a DNS label and a DNS
/// subdomain of at most 63 bytes.
fn lease_name(text: &str) -> Result<(String, String), String> {
    match text.split_once('/') {
        Some((ns, name)) if is_dns_label(ns) && name.len() <= 63 && is_dns_subdomain(name) => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("`{text}`: expected NAMESPACE/NAME")),
    }
}

/// `--break-glass-namespace`: a namespace name.
fn namespace_name(text: &str) -> Result<String, String> {
    if is_dns_label(text) {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}`: not a namespace name"))
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
    /// Largest accepted request body [default: the largest --memory-budget-bytes fits, 3.2 MiB
    /// by default]. The apiserver caps an object at 1.5 MiB in etcd, and an UPDATE carries two.
    #[arg(long, env = "DRIFTGUARD_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
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
    /// What these flags provide that a policy relies on
    /// ([`crate::policy::serving`]): where Argo CD runs in this cluster (not
    /// a hub's: that one writes here as the credential the hub holds), and
    /// whether the break-glass expiry sweeper runs.
    pub(crate) fn serving(&self) -> Serving {
        let mut argocd_namespaces = Vec::new();
        if self.argocd_kubeconfig.is_none() {
            argocd_namespaces.push((self.argocd_namespace.clone(), "--argocd-namespace"));
        }
        if let Some(local) = &self.local_argocd_namespace {
            argocd_namespaces.push((local.clone(), "--local-argocd-namespace"));
        }
        let no_sweeper = if self.no_cluster {
            Some("--no-cluster")
        } else if self.break_glass_sweep_interval.is_zero() {
            Some("--break-glass-sweep-interval=0")
        } else {
            None
        };
        Serving {
            argocd_namespaces,
            no_sweeper,
        }
    }

    /// Where the serving pair comes from; clap already requires one of the two.
    pub(super) fn tls_source(&self) -> anyhow::Result<TlsSource> {
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
