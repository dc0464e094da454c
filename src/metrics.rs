//! Prometheus metrics: recorded by the review service, the reloaders and the
//! cluster watches; served as text on the probe port.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// A decided review.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `validate` or `mutate`.
    pub endpoint: &'static str,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'static str,
    /// `allow`, `warn`, `audit` or `deny`.
    pub verdict: &'static str,
}

/// Why a request or client was refused.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// A short code, such as `too-large` or `no_certificate`.
    pub reason: &'static str,
}

/// Which policy is in force.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// The policy's sha256 digest.
    pub digest: String,
    /// The file it came from (or the embedded default).
    pub source: String,
    /// Its default mode.
    pub mode: &'static str,
}

/// A reload's outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `success` or `failure`.
    pub result: &'static str,
}

/// Which certificate: `serving` (the webhook's chain) or `client-ca`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabels {
    /// `serving` or `client-ca`.
    pub certificate: &'static str,
}

/// Declares [`Metrics`] from its table: each field, its type (made by
/// `Default` unless `= INIT` follows), and its name under the `driftguard_`
/// prefix and help text (also the field's doc), registered in this order.
macro_rules! metrics {
    ($($(#[$attr:meta])* $field:ident: $ty:ty $(= $init:expr)? => $name:literal, $help:literal;)*) => {
        /// Every metric driftguard exports, in one registry; cheap to update
        /// from any thread.
        pub struct Metrics {
            registry: Registry,
            $($(#[$attr])* #[doc = $help] pub $field: $ty,)*
        }

        impl Metrics {
            /// Every metric registered here, by its exported name (a labelled
            /// family with no sample yet is absent from [`Metrics::encode`]).
            pub const NAMES: &[&str] = &[$(concat!("driftguard_", $name)),*];
        }

        impl Default for Metrics {
            fn default() -> Self {
                let mut registry = Registry::with_prefix("driftguard");
                $(
                    let $field = metrics!(@init $ty $(, $init)?);
                    registry.register($name, $help, $field.clone());
                )*
                register_statics(&mut registry);
                Self { registry, $($field,)* }
            }
        }
    };
    (@init $ty:ty) => { <$ty>::default() };
    (@init $ty:ty, $init:expr) => { $init };
}

metrics! {
    requests: Family<RequestLabels, Counter> => "requests",
        "Reviews decided, by endpoint, operation and verdict";
    rejected: Family<ReasonLabels, Counter> => "rejected_requests",
        "Requests refused before a decision (bad body, size, timeout)";
    // 25µs .. ~0.4s
    decision_seconds: Histogram = Histogram::new(exponential_buckets(0.000_025, 2.0, 15)) => "decision_seconds",
        "Time from a complete body to the response";
    break_glass: Counter => "break_glass_uses",
        "Writes allowed by break-glass";
    break_glass_expired: Counter => "break_glass_expired",
        "Expired break-glasses the sweeper ended, handing the object back to Git";
    break_glass_lift_failures: Counter => "break_glass_lift_failures",
        "Times the expiry sweeper could not lift an Argo CD Application's pause (in the hub with --argocd-kubeconfig); retried at the next sweep";
    break_glass_sweeper_leader: Gauge => "break_glass_sweeper_leader",
        "1 on the replica whose expiry sweeper runs (it holds the sweeper's Lease)";
    internal_errors: Counter => "internal_errors",
        "Reviews answered by --on-error after an internal failure";
    // Both are also internal errors; these say which kind.
    decision_timeouts: Counter => "decision_timeouts",
        "Reviews answered by --on-error because the decision exceeded --decision-timeout";
    decision_queue_full: Counter => "decision_queue_full",
        "Reviews answered by --on-error at once: every decision thread busy, the queue full";
    memory_budget_in_use: Gauge => "memory_budget_in_use_bytes",
        "Bytes of --memory-budget-bytes reserved by the reviews in flight";
    memory_budget_refused: Counter => "memory_budget_refused",
        "Reviews answered by --on-error unparsed: the memory budget stayed spent until their deadline";
    policy_reloads: Family<ResultLabels, Counter> => "policy_reloads",
        "Policy reloads, by result";
    policy_file_refused: Gauge => "policy_file_refused",
        "1 while the policy file on disk is refused (the last good policy serves; the next restart would not start), 0 once one loads";
    certificate_reloads: Family<ResultLabels, Counter> => "certificate_reloads",
        "Serving certificate reloads, by result";
    certificate_expiry: Family<CertificateLabels, Gauge> => "certificate_expiry_timestamp_seconds",
        "notAfter of the certificate in force, as Unix seconds: the serving chain's earliest, and the earliest of the --client-ca bundle (set at start and at each serving reload)";
    watch_errors: Family<SourceLabels, Counter> => "watch_errors",
        "Failed Argo CD / Flux watches, by source";
    source_age: Gauge<f64, AtomicU64> => "sources_age_seconds",
        "Seconds since the Argo CD / Flux sources last changed";
    sources_objects: Family<SourceLabels, Gauge> => "sources_objects",
        "Argo CD / Flux objects read from the cluster, by kind";
    sources_refused: Family<RefusedLabels, Gauge> => "sources_refused",
        "Argo CD / Flux objects over a cost cap, by kind and cap: their ignore rules do not apply, and what they list guards whole namespaces";
    sources_foreign: Family<SourceLabels, Gauge> => "sources_foreign",
        "Applications that deploy to another cluster, held as their uid alone (part of sources_objects)";
    sources_foreign_events: Family<SourceLabels, Counter> => "sources_foreign_events",
        "Watch events of Applications that deploy to another cluster, each skipped without parsing or compiling it";
    sources_version_mismatch: Family<SourceLabels, Gauge> => "sources_version_mismatch",
        "1 while a watched Argo CD / Flux kind is served at another API version only (driftguard stays unready; see /readyz)";
    sources_failing: Family<SourceLabels, Gauge<f64, AtomicU64>> => "sources_failing_seconds",
        "Seconds a watched Argo CD / Flux source has been failing (a hub out of reach), 0 while it works; the last good rules serve meanwhile";
    sources_unread: Family<SourceLabels, Gauge> => "sources_unread",
        "1 while a watched Argo CD / Flux source has never been listed (a hub out of reach since start): decisions take the strictest reading without it and /readyz says degraded";
    decisions_without_sources: Counter => "decisions_without_sources",
        "Decisions taken while a watched Argo CD / Flux source was unread, by the object's own claims and the policy alone";
    policy_info: Family<PolicyLabels, Gauge> => "policy_info",
        "1 for the policy in force: its sha256 digest, the file it came from and its default mode";
    runtime_tasks: Gauge => "runtime_tasks",
        "Tokio tasks alive when scraped (connections, watches, reloaders): flat over time, or something leaks";
    connections_open: Gauge => "connections_open",
        "Webhook connections open, in their TLS handshake or after it";
    connections_evicted: Counter => "connections_evicted",
        "Connections with no request in flight closed to make room under --max-connections";
    connections_turned_away: Counter => "connections_turned_away",
        "New connections closed at once under --max-connections: their address held most slots, with connections that never sent a request";
    clients_refused: Family<ReasonLabels, Counter> => "clients_refused",
        "Webhook clients refused in the TLS handshake under --client-ca: no certificate, an untrusted one, or one naming no --client-name";
    client_auth_required: Gauge => "client_auth_required",
        "1 when webhook clients must present a certificate from --client-ca; 0: any client that reaches the port can post reviews (close it with a NetworkPolicy, docs/install.md)";
    guarded_changes: Family<GuardLabels, Counter> => "guarded_changes",
        "Changes of driftguard's own policy ConfigMap, Deployment and webhook configurations (--guard-*), by kind and change";
    guarded_present: Family<GuardKindLabels, Gauge> => "guarded_present",
        "1 while a guarded object (--guard-*) exists, 0 once it is gone; absent until its first list";
    registration_differences: Family<DirectionLabels, Gauge> => "registration_differences",
        "Differences between the webhooks and what the policy in force needs: `skips` writes it judges (never checked), `sends` writes it never judges, `fails` (a condition that cannot evaluate), `edited` (not the rendering of the policy, though no probed write differs)";
}

/// The counters kept in statics, counted where no [`Metrics`] is at hand
/// (the audit writer runs before any exists).
fn register_statics(registry: &mut Registry) {
    let statics: [(&str, &str, &Counter); 5] = [
        (
            "decisions_stopped",
            "Decisions stopped at a checkpoint after their deadline, freeing their thread",
            &crate::deadline::STOPPED,
        ),
        (
            "decisions_tried_here",
            "Decisions tried on the thread that read the review (--decide-here-max-bytes)",
            &crate::decider::TRIED_HERE,
        ),
        (
            "decisions_moved_to_pool",
            "Decisions tried here that reached a jq rule and ran again on a decision thread",
            &crate::decider::MOVED_TO_POOL,
        ),
        (
            "decisions_skipped",
            "Decisions dropped unrun: their deadline passed while they waited in the queue",
            &crate::decider::SKIPPED,
        ),
        (
            "audit_dropped",
            "Audit records dropped because stdout was not read fast enough (the queue was full)",
            crate::logging::audit_writer::dropped(),
        ),
    ];
    for (name, help, counter) in statics {
        registry.register(name, help, counter.clone());
    }
}

/// A kind of driftguard's own objects (`--guard-*`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GuardKindLabels {
    /// The guarded object's kind.
    pub kind: &'static str,
}

/// A change of one of driftguard's own objects (src/cluster/guard.rs).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GuardLabels {
    /// The guarded object's kind.
    pub kind: &'static str,
    /// `created`, `changed` or `deleted`.
    pub change: &'static str,
}

/// Which way the webhooks differ from the policy (src/registration.rs).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    /// `skips`, `sends` or `fails`.
    pub direction: &'static str,
}

/// A watched Argo CD / Flux source.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// The watched kind, such as `Application` or `Kustomization`.
    pub source: &'static str,
}

/// A watched kind's objects refused by a cost cap.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// The watched kind.
    pub source: &'static str,
    /// The cap exceeded: `source`, `namespace` or `total`.
    pub cap: &'static str,
}

impl Metrics {
    /// Shows `policy` as the one in force, and no other.
    pub(crate) fn policy_in_force(&self, policy: &crate::policy::Policy) {
        self.policy_info.clear();
        self.policy_info
            .get_or_create(&PolicyLabels {
                digest: policy.digest.clone(),
                source: policy.source.clone(),
                mode: policy.mode.as_str(),
            })
            .set(1);
    }

    /// Counts a reload (policy or certificate) in `family`, by outcome.
    pub(crate) fn reloaded(family: &Family<ResultLabels, Counter>, ok: bool) {
        family
            .get_or_create(&ResultLabels {
                result: if ok { "success" } else { "failure" },
            })
            .inc();
    }

    /// Counts a failed watch of `source`.
    pub(crate) fn reject_watch(&self, source: &'static str) {
        self.watch_errors
            .get_or_create(&SourceLabels { source })
            .inc();
    }

    /// Counts a request refused before a decision, for `reason`.
    pub(crate) fn reject(&self, reason: &'static str) {
        self.rejected.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// The Prometheus text exposition of every metric, as served on `/metrics`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
