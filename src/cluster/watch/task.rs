//! One watch's life: its events applied, its failures retried while the
//! last good sources serve, and a kind not installed or served at another
//! version told apart.

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use kube::api::ApiResource;
use kube::runtime::watcher::{self, Event};

use super::{Source, Watches, lock};
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{Metrics, SourceLabels};

/// What a 404 for a watched kind means: its group not served at all (the
/// CRD is not installed), or served at other versions only (a Flux or Argo
/// CD older or newer than driftguard reads), which must never pass for
/// "not installed": the sources would stay empty without a word.
pub(super) struct Served {
    client: kube::Client,
    group: String,
    version: String,
    kind: String,
}

impl Served {
    pub(super) fn new(client: &kube::Client, ar: &ApiResource) -> Self {
        Self {
            client: client.clone(),
            group: ar.group.clone(),
            version: ar.version.clone(),
            kind: ar.kind.clone(),
        }
    }

    /// `None` when the kind is not served at any version of its group (its
    /// CRD is not installed); else the versions that serve it. Those include
    /// ours only in a race with the CRD's creation: the watch retries then.
    async fn other_versions(&self) -> Result<Option<Vec<String>>, kube::Error> {
        let groups = self.client.list_api_groups().await?;
        let Some(group) = groups.groups.into_iter().find(|g| g.name == self.group) else {
            return Ok(None);
        };
        let mut serving = Vec::new();
        for version in group.versions {
            let resources = self
                .client
                .list_api_group_resources(&version.group_version)
                .await?;
            if resources
                .resources
                .iter()
                .any(|r| r.kind == self.kind && !r.name.contains('/'))
            {
                serving.push(version.version);
            }
        }
        Ok((!serving.is_empty()).then_some(serving))
    }

    fn describe(&self, what: &str, versions: &[String]) -> String {
        format!(
            "{what}: driftguard reads {}/{}, the apiserver serves {} at {} only",
            self.group,
            self.version,
            self.group,
            versions.join(", ")
        )
    }
}

/// Runs a watch over `stream`: each event goes to `on_event`; its metrics,
/// and the watches' unread and mismatched state, follow how it fares.
pub(super) fn run<K, S>(
    watches: &Arc<Watches>,
    stream: S,
    served: Option<Served>,
    source: Source,
    metrics: Arc<Metrics>,
    mut on_event: impl FnMut(&Watches, Event<K>) + Send + 'static,
) where
    K: Send + 'static,
    S: futures_util::Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
{
    let labels = SourceLabels {
        source: source.label,
    };
    let unread = metrics.sources_unread.get_or_create(&labels).clone();
    unread.set(1);
    lock(&watches.unread).push(source);
    let mismatch = metrics
        .sources_version_mismatch
        .get_or_create(&labels)
        .clone();
    let mut task = Task {
        watches: watches.clone(),
        source,
        served,
        filled: false,
        unread,
        mismatch,
        metrics,
    };
    tokio::spawn(async move {
        let failing = task.metrics.sources_failing.get_or_create(&labels).clone();
        let mut failing_since: Option<Instant> = None;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if event.is_ok() {
                failing_since = None;
                failing.set(0.0);
            } else {
                let since = *failing_since.get_or_insert_with(Instant::now);
                failing.set(since.elapsed().as_secs_f64());
            }
            match event {
                Ok(event) => task.event(event, &mut on_event),
                Err(e) => task.failed(&e).await,
            }
        }
    });
}

/// A running watch's state.
struct Task {
    watches: Arc<Watches>,
    source: Source,
    served: Option<Served>,
    /// Whether it has listed (or its kind is not installed).
    filled: bool,
    unread: Gauge,
    mismatch: Gauge,
    metrics: Arc<Metrics>,
}

impl Task {
    fn event<K>(&mut self, event: Event<K>, on_event: &mut impl FnMut(&Watches, Event<K>)) {
        let done = matches!(event, Event::InitDone);
        on_event(&self.watches, event);
        if !done {
            return;
        }
        self.watches.set_mismatch(self.source.label, None);
        self.mismatch.set(0);
        if !self.filled {
            self.fill();
            tracing::info!(source = self.source.label, "watch filled");
        }
    }

    /// Listed, or known to have nothing to list: no longer unread.
    fn fill(&mut self) {
        self.filled = true;
        self.unread.set(0);
        self.watches.filled_now(self.source);
    }

    /// A failure: retried by the stream's backoff. Before the first list, a
    /// 404 is told apart: the kind not installed (nothing to wait for), or
    /// served at other versions only (a mismatch, named until it ends).
    async fn failed(&mut self, e: &watcher::Error) {
        let what = self.source.label;
        self.metrics.reject_watch(what);
        if self.filled || !not_installed(e) {
            return tracing::warn!(source = what, error = %e, "watch failed; serving the last good sources");
        }
        let versions = match &self.served {
            None => None,
            Some(served) => match served.other_versions().await {
                Ok(versions) => versions,
                Err(d) => {
                    return tracing::warn!(source = what, error = %d, "a watched kind is not served, and discovery failed: retrying");
                }
            },
        };
        let (Some(versions), Some(served)) = (versions, &self.served) else {
            // The CRD is not installed: nothing to learn, nothing to wait for.
            self.fill();
            return tracing::warn!(
                source = what,
                "not installed in this cluster; watching nothing"
            );
        };
        if versions.contains(&served.version) {
            return tracing::warn!(
                source = what,
                "not served a moment ago, served now: retrying"
            );
        }
        let why = served.describe(what, &versions);
        if self.mismatch.get() == 0 {
            tracing::error!(
                source = what,
                "{why}: not ready until it is served at that version (upgrade or downgrade driftguard or the tool, or turn its detector off in the policy)"
            );
        }
        self.watches.set_mismatch(what, Some(why));
        self.mismatch.set(1);
    }
}

/// The apiserver does not serve the resource (404): its CRD is not installed.
/// kube turns a 404 without a JSON `Status` body into `Error::Api` too.
fn not_installed(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn only_a_404_means_not_installed() {
        let api = |code| kube::Error::Api(Status::failure("x", "y").with_code(code).boxed());
        assert!(not_installed(&watcher::Error::InitialListFailed(api(404))));
        assert!(not_installed(&watcher::Error::WatchError(
            Status::failure("x", "y").with_code(404).boxed()
        )));
        assert!(!not_installed(&watcher::Error::InitialListFailed(api(403))));
        // A message that merely mentions 404 is not a 404.
        let text = kube::Error::Api(
            Status::failure("pod web-404 not ready", "y")
                .with_code(500)
                .boxed(),
        );
        assert!(!not_installed(&watcher::Error::WatchFailed(text)));
    }
}
