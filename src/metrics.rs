//! Prometheus metrics: recorded by the review service, the reloaders and the
//! cluster watches; served as text on the probe port.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub endpoint: &'static str,
    pub operation: &'static str,
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Which policy is in force.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub digest: String,
    pub source: String,
    pub mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub rejected: Family<ReasonLabels, Counter>,
    pub decision_seconds: Histogram,
    pub break_glass: Counter,
    pub break_glass_expired: Counter,
    pub break_glass_lift_failures: Counter,
    /// 1 on the replica whose expiry sweeper runs (it holds the Lease).
    pub break_glass_sweeper_leader: Gauge,
    pub internal_errors: Counter,
    pub decision_timeouts: Counter,
    pub decision_queue_full: Counter,
    pub memory_budget_in_use: Gauge,
    pub memory_budget_refused: Counter,
    pub policy_reloads: Family<ResultLabels, Counter>,
    pub certificate_reloads: Family<ResultLabels, Counter>,
    pub watch_errors: Family<SourceLabels, Counter>,
    pub source_age: Gauge<f64, AtomicU64>,
    pub runtime_tasks: Gauge,
    pub sources_objects: Family<SourceLabels, Gauge>,
    pub sources_refused: Family<RefusedLabels, Gauge>,
    pub sources_version_mismatch: Family<SourceLabels, Gauge>,
    pub sources_failing: Family<SourceLabels, Gauge<f64, AtomicU64>>,
    /// 1 while a watch has never listed: decisions judge without it.
    pub sources_unread: Family<SourceLabels, Gauge>,
    pub decisions_without_sources: Counter,
    pub policy_info: Family<PolicyLabels, Gauge>,
    pub connections_open: Gauge,
    pub connections_evicted: Counter,
    pub connections_turned_away: Counter,
    pub clients_refused: Family<ReasonLabels, Counter>,
    /// 1 when webhook clients must present a certificate (`--client-ca`).
    pub client_auth_required: Gauge,
    pub guarded_changes: Family<GuardLabels, Counter>,
    pub guarded_present: Family<GuardKindLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GuardKindLabels {
    pub kind: &'static str,
}

/// A change of one of driftguard's own objects (src/cluster/guard.rs).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GuardLabels {
    pub kind: &'static str,
    pub change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: &'static str,
}

/// A watched kind's objects refused by a cost cap (`source`, `namespace`, `total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    pub source: &'static str,
    pub cap: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("driftguard");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Reviews decided, by endpoint, operation and verdict",
            requests.clone(),
        );
        let rejected = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "rejected_requests",
            "Requests refused before a decision (bad body, size, timeout)",
            rejected.clone(),
        );
        // 25µs .. ~0.4s
        let decision_seconds = Histogram::new(exponential_buckets(0.000_025, 2.0, 15));
        registry.register(
            "decision_seconds",
            "Time from a complete body to the response",
            decision_seconds.clone(),
        );
        let break_glass = Counter::default();
        registry.register(
            "break_glass_uses",
            "Writes allowed by break-glass",
            break_glass.clone(),
        );
        let break_glass_expired = Counter::default();
        registry.register(
            "break_glass_expired",
            "Expired break-glasses the sweeper ended, handing the object back to Git",
            break_glass_expired.clone(),
        );
        let break_glass_lift_failures = Counter::default();
        registry.register(
            "break_glass_lift_failures",
            "Times the expiry sweeper could not lift an Argo CD Application's pause (in the hub with --argocd-kubeconfig); retried at the next sweep",
            break_glass_lift_failures.clone(),
        );
        let break_glass_sweeper_leader = Gauge::default();
        registry.register(
            "break_glass_sweeper_leader",
            "1 on the replica whose expiry sweeper runs (it holds the sweeper's Lease)",
            break_glass_sweeper_leader.clone(),
        );
        let internal_errors = Counter::default();
        registry.register(
            "internal_errors",
            "Reviews answered by --on-error after an internal failure",
            internal_errors.clone(),
        );
        // Both are also internal errors; these say which kind.
        let decision_timeouts = Counter::default();
        registry.register(
            "decision_timeouts",
            "Reviews answered by --on-error because the decision exceeded --decision-timeout",
            decision_timeouts.clone(),
        );
        registry.register(
            "decisions_stopped",
            "Decisions stopped at a checkpoint after their deadline, freeing their thread",
            crate::deadline::STOPPED.clone(),
        );
        registry.register(
            "decisions_tried_here",
            "Decisions tried on the thread that read the review (--decide-here-max-bytes)",
            crate::decider::TRIED_HERE.clone(),
        );
        registry.register(
            "decisions_moved_to_pool",
            "Decisions tried here that reached a jq rule and ran again on a decision thread",
            crate::decider::MOVED_TO_POOL.clone(),
        );
        registry.register(
            "decisions_skipped",
            "Decisions dropped unrun: their deadline passed while they waited in the queue",
            crate::decider::SKIPPED.clone(),
        );
        let decision_queue_full = Counter::default();
        registry.register(
            "decision_queue_full",
            "Reviews answered by --on-error at once: every decision thread busy, the queue full",
            decision_queue_full.clone(),
        );
        let memory_budget_in_use = Gauge::default();
        registry.register(
            "memory_budget_in_use_bytes",
            "Bytes of --memory-budget-bytes reserved by the reviews in flight",
            memory_budget_in_use.clone(),
        );
        let memory_budget_refused = Counter::default();
        registry.register(
            "memory_budget_refused",
            "Reviews answered by --on-error unparsed: the memory budget stayed spent until their deadline",
            memory_budget_refused.clone(),
        );
        let policy_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "policy_reloads",
            "Policy reloads, by result",
            policy_reloads.clone(),
        );
        let certificate_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "certificate_reloads",
            "Serving certificate reloads, by result",
            certificate_reloads.clone(),
        );
        let watch_errors = Family::<SourceLabels, Counter>::default();
        registry.register(
            "watch_errors",
            "Failed Argo CD / Flux watches, by source",
            watch_errors.clone(),
        );
        let source_age = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "sources_age_seconds",
            "Seconds since the Argo CD / Flux sources last changed",
            source_age.clone(),
        );
        let sources_objects = Family::<SourceLabels, Gauge>::default();
        registry.register(
            "sources_objects",
            "Argo CD / Flux objects read from the cluster, by kind",
            sources_objects.clone(),
        );
        let sources_refused = Family::<RefusedLabels, Gauge>::default();
        registry.register(
            "sources_refused",
            "Argo CD / Flux objects over a cost cap, by kind and cap: their ignore rules do not apply, and what they list guards whole namespaces",
            sources_refused.clone(),
        );
        let sources_version_mismatch = Family::<SourceLabels, Gauge>::default();
        registry.register(
            "sources_version_mismatch",
            "1 while a watched Argo CD / Flux kind is served at another API version only (driftguard stays unready; see /readyz)",
            sources_version_mismatch.clone(),
        );
        let sources_failing = Family::<SourceLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "sources_failing_seconds",
            "Seconds a watched Argo CD / Flux source has been failing (a hub out of reach), 0 while it works; the last good rules serve meanwhile",
            sources_failing.clone(),
        );
        let sources_unread = Family::<SourceLabels, Gauge>::default();
        registry.register(
            "sources_unread",
            "1 while a watched Argo CD / Flux source has never been listed (a hub out of reach since start): decisions take the strictest reading without it and /readyz says degraded",
            sources_unread.clone(),
        );
        let decisions_without_sources = Counter::default();
        registry.register(
            "decisions_without_sources",
            "Decisions taken while a watched Argo CD / Flux source was unread, by the object's own claims and the policy alone",
            decisions_without_sources.clone(),
        );
        let policy_info = Family::<PolicyLabels, Gauge>::default();
        registry.register(
            "policy_info",
            "1 for the policy in force: its sha256 digest, the file it came from and its default mode",
            policy_info.clone(),
        );
        let runtime_tasks = Gauge::default();
        registry.register(
            "runtime_tasks",
            "Tokio tasks alive when scraped (connections, watches, reloaders): flat over time, or something leaks",
            runtime_tasks.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "connections_open",
            "Webhook connections open, in their TLS handshake or after it",
            connections_open.clone(),
        );
        let connections_evicted = Counter::default();
        registry.register(
            "connections_evicted",
            "Connections with no request in flight closed to make room under --max-connections",
            connections_evicted.clone(),
        );
        let connections_turned_away = Counter::default();
        registry.register(
            "connections_turned_away",
            "New connections closed at once under --max-connections: their address held most slots, with connections that never sent a request",
            connections_turned_away.clone(),
        );
        let clients_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "clients_refused",
            "Webhook clients refused in the TLS handshake under --client-ca: no certificate, an untrusted one, or one naming no --client-name",
            clients_refused.clone(),
        );
        let client_auth_required = Gauge::default();
        registry.register(
            "client_auth_required",
            "1 when webhook clients must present a certificate from --client-ca; 0: any client that reaches the port can post reviews (close it with a NetworkPolicy, docs/install.md)",
            client_auth_required.clone(),
        );
        let guarded_changes = Family::<GuardLabels, Counter>::default();
        registry.register(
            "guarded_changes",
            "Changes of driftguard's own policy ConfigMap, Deployment and webhook configurations (--guard-*), by kind and change",
            guarded_changes.clone(),
        );
        let guarded_present = Family::<GuardKindLabels, Gauge>::default();
        registry.register(
            "guarded_present",
            "1 while a guarded object (--guard-*) exists, 0 once it is gone; absent until its first list",
            guarded_present.clone(),
        );
        // Counted by the audit writer, which runs before any Metrics exists.
        registry.register(
            "audit_dropped",
            "Audit records dropped because stdout was not read fast enough (the queue was full)",
            crate::logging::audit_writer::dropped().clone(),
        );
        Self {
            registry,
            watch_errors,
            source_age,
            runtime_tasks,
            sources_objects,
            sources_refused,
            sources_version_mismatch,
            sources_failing,
            sources_unread,
            decisions_without_sources,
            policy_info,
            requests,
            rejected,
            decision_seconds,
            break_glass,
            break_glass_expired,
            break_glass_lift_failures,
            break_glass_sweeper_leader,
            internal_errors,
            decision_timeouts,
            decision_queue_full,
            memory_budget_in_use,
            memory_budget_refused,
            policy_reloads,
            certificate_reloads,
            connections_open,
            connections_evicted,
            connections_turned_away,
            clients_refused,
            client_auth_required,
            guarded_changes,
            guarded_present,
        }
    }
}

impl Metrics {
    /// Shows `policy` as the one in force, and no other.
    pub fn policy_in_force(&self, policy: &crate::policy::Policy) {
        self.policy_info.clear();
        self.policy_info
            .get_or_create(&PolicyLabels {
                digest: policy.digest.clone(),
                source: policy.source.clone(),
                mode: policy.mode.as_str(),
            })
            .set(1);
    }

    pub fn reloaded(family: &Family<ResultLabels, Counter>, ok: bool) {
        family
            .get_or_create(&ResultLabels {
                result: if ok { "success" } else { "failure" },
            })
            .inc();
    }

    pub fn reject_watch(&self, source: &'static str) {
        self.watch_errors
            .get_or_create(&SourceLabels { source })
            .inc();
    }

    pub fn reject(&self, reason: &'static str) {
        self.rejected.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
