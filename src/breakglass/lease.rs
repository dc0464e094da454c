//! One replica at a time: a `coordination.k8s.io/v1` Lease, held the way
//! client-go's leader election holds one. The holder renews it every
//! `duration / 3`; another replica takes it over only once the record has
//! not changed for a whole `duration` by its own clock (the time it last saw
//! the record change, never the holder's `renewTime`, so clock skew between
//! nodes cannot hand it over early). Every write carries the resourceVersion
//! it was decided from, so two candidates never both win.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease as LeaseObject, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::metrics::Metrics;

/// This replica's view of one Lease, and its claim on it.
pub struct Lease {
    api: Api<LeaseObject>,
    name: String,
    identity: String,
    duration: Duration,
    /// The record last seen (resourceVersion) and when this replica saw it change.
    observed: Option<(String, Instant)>,
}

/// What one attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// This replica holds the lease until about `duration` from now.
    Me,
    /// Another replica holds it (its identity).
    Other(String),
}

impl Lease {
    /// Lease `namespace/name`, claimed as `identity` for `duration`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            duration,
            observed: None,
        }
    }

    /// How often the holder renews, and a candidate tries.
    pub fn retry_period(&self) -> Duration {
        self.duration / 3
    }

    /// Acquires, renews or observes the lease once. A lost race (409) is
    /// another replica's win, not an error.
    pub async fn try_hold(&mut self) -> Result<Holder, kube::Error> {
        let now = jiff::Timestamp::now();
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = LeaseObject {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Holder::Me),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Holder::Other(String::new())),
                Err(e) => Err(e),
            };
        };
        let version = current
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let changed_at = match &self.observed {
            Some((seen, at)) if *seen == version => *at,
            _ => Instant::now(),
        };
        self.observed = Some((version, changed_at));
        let held_by_me = holder == self.identity;
        let expired = holder.is_empty() || changed_at.elapsed() >= self.lease_duration(&spec);
        if !held_by_me && !expired {
            return Ok(Holder::Other(holder));
        }
        let (acquired, transitions) = if held_by_me {
            (
                spec.acquire_time.map_or(now, |t| t.0),
                spec.lease_transitions.unwrap_or(0),
            )
        } else {
            (now, spec.lease_transitions.unwrap_or(0).saturating_add(1))
        };
        let mut next = current;
        next.spec = Some(self.spec(acquired, now, transitions));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => {
                let version = written.metadata.resource_version.unwrap_or_default();
                self.observed = Some((version, Instant::now()));
                Ok(Holder::Me)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Holder::Other(holder)),
            Err(e) => Err(e),
        }
    }

    /// The holder's duration when it wrote one, bounded to [1 s, 10 min].
    fn lease_duration(&self, spec: &LeaseSpec) -> Duration {
        spec.lease_duration_seconds
            .map(|s| Duration::from_secs(u64::try_from(s.clamp(1, 600)).unwrap_or(1)))
            .unwrap_or(self.duration)
    }

    fn spec(
        &self,
        acquired: jiff::Timestamp,
        renewed: jiff::Timestamp,
        transitions: i32,
    ) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

/// This replica's identity for a lease: the pod's name (`POD_NAME`, the
/// chart sets it from the downward API, else `HOSTNAME`) and the process id,
/// so a restarted container is a new candidate.
pub fn identity() -> String {
    let pod = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "driftguard".to_owned());
    format!("{pod}_{}", std::process::id())
}

/// How long a sweeper's lease lasts without renewal before another replica
/// takes it over (client-go's default for controllers).
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

/// Holds the Lease in the background; the flag is true while this replica
/// holds it, and false again once a renewal is overdue by a third of the
/// lease, before any other replica may take it over.
pub fn elect(
    client: kube::Client,
    namespace: &str,
    name: &str,
    metrics: Arc<Metrics>,
) -> Arc<AtomicBool> {
    let identity = identity();
    let mut lease = Lease::new(client, namespace, name, &identity, LEASE_DURATION);
    let leading = Arc::new(AtomicBool::new(false));
    let flag = leading.clone();
    tokio::spawn(async move {
        let mut renewed: Option<Instant> = None;
        loop {
            match lease.try_hold().await {
                Ok(Holder::Me) => {
                    if renewed.is_none() {
                        tracing::info!(%identity, "break-glass sweeper: this replica holds the lease and sweeps");
                    }
                    renewed = Some(Instant::now());
                }
                Ok(Holder::Other(holder)) => {
                    if renewed.take().is_some() {
                        tracing::warn!(%identity, %holder, "break-glass sweeper: lease lost; another replica sweeps");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "break-glass sweeper: cannot read or renew the lease");
                }
            }
            if renewed.is_some_and(|at| at.elapsed() >= LEASE_DURATION * 2 / 3) {
                tracing::warn!(%identity, "break-glass sweeper: lease renewal overdue; stopped sweeping");
                renewed = None;
            }
            flag.store(renewed.is_some(), Ordering::SeqCst);
            metrics
                .break_glass_sweeper_leader
                .set(i64::from(renewed.is_some()));
            tokio::time::sleep(lease.retry_period()).await;
        }
    });
    leading
}
