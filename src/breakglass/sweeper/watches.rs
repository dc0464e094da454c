//! The sweeper's view of the armed objects: one metadata watch per type it
//! may list and patch, selected by the break-glass label (each type costs
//! the apiserver a watch, not a list every interval), kept as discovery
//! finds types come and go; a type that refuses the watch is asked again
//! later, with a growing wait.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::discovery::{Discovery, verbs};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::cluster::rules::{EXCLUDED_GROUPS, EXCLUDED_RESOURCES};
use crate::drift::breakglass_state::LABEL;

/// Types are discovered again this often (a new CRD is swept within it).
pub(super) const REDISCOVER: Duration = Duration::from_secs(300);
/// How long a type that refused the sweeper's watch waits before it is
/// asked again, the first time; every refusal doubles it, up to [`REDISCOVER`].
const REFUSED_FIRST_WAIT: Duration = Duration::from_secs(15);

/// One type's watch and what it has seen.
pub(super) struct Watched {
    pub ar: ApiResource,
    pub task: tokio::task::AbortHandle,
    /// Labelled objects by (namespace, name), metadata only.
    pub objects: BTreeMap<(String, String), Value>,
    /// A re-list in progress; replaces `objects` when done.
    relist: Option<BTreeMap<(String, String), Value>>,
    /// Whether its first list is complete.
    pub synced: bool,
    /// Refused (403) or gone (404): stopped, and asked again at this time,
    /// each refusal doubling the wait from 15 s up to 5 minutes, so that a
    /// type driftguard may not list costs a request every few minutes, not
    /// one per backoff step, and a grant that comes late is still found.
    retry: Option<(Instant, Duration)>,
}

/// One watch event (or error), with its type's `group/Kind`.
pub(super) type Update = (
    String,
    Result<watcher::Event<PartialObjectMeta<DynamicObject>>, watcher::Error>,
);

/// Every type's watch, by `group/Kind`.
pub(super) struct Watches {
    client: kube::Client,
    pub watched: BTreeMap<String, Watched>,
    /// Types whose watch fails (logged when the set changes).
    unlistable: BTreeSet<String>,
}

impl Watches {
    pub(super) fn new(client: kube::Client) -> Self {
        Watches {
            client,
            watched: BTreeMap::new(),
            unlistable: BTreeSet::new(),
        }
    }

    /// Watches every type driftguard may list and patch, now: new types get
    /// a watch, types gone lose theirs. A failed discovery keeps the watches.
    pub(super) async fn rediscover(&mut self, tx: &tokio::sync::mpsc::Sender<Update>) {
        let types = match discover(&self.client).await {
            Ok(types) => types,
            Err(e) => {
                tracing::warn!(error = %e, "break-glass sweeper: discovery failed");
                return;
            }
        };
        let keys: BTreeSet<String> = types.iter().map(type_key).collect();
        self.watched.retain(|key, w| {
            let keep = keys.contains(key);
            if !keep {
                w.task.abort();
            }
            keep
        });
        for ar in types {
            let key = type_key(&ar);
            if self.watched.contains_key(&key) {
                continue;
            }
            let task = self.watch(&ar, &key, tx);
            self.watched.insert(
                key,
                Watched {
                    ar,
                    task,
                    objects: BTreeMap::new(),
                    relist: None,
                    synced: false,
                    retry: None,
                },
            );
        }
    }

    /// Starts the label-selected metadata watch of one type.
    fn watch(
        &self,
        ar: &ApiResource,
        key: &str,
        tx: &tokio::sync::mpsc::Sender<Update>,
    ) -> tokio::task::AbortHandle {
        let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(self.client.clone(), ar);
        let stream =
            watcher::watcher(api, watcher::Config::default().labels(LABEL)).default_backoff();
        let (tx, key) = (tx.clone(), key.to_owned());
        tokio::spawn(async move {
            futures_util::pin_mut!(stream);
            while let Some(update) = stream.next().await {
                if tx.send((key.clone(), update)).await.is_err() {
                    return;
                }
            }
        })
        .abort_handle()
    }

    /// Starts again the watches of refused types whose wait is over.
    pub(super) fn retry_refused(&mut self, tx: &tokio::sync::mpsc::Sender<Update>) {
        let now = Instant::now();
        let due: Vec<String> = self
            .watched
            .iter()
            .filter(|(_, w)| w.retry.is_some_and(|(at, _)| at <= now) && w.task.is_finished())
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let ar = self.watched[&key].ar.clone();
            let task = self.watch(&ar, &key, tx);
            if let Some(w) = self.watched.get_mut(&key) {
                w.task = task;
            }
        }
    }

    /// Takes one watch update in; true when an armed object may have changed.
    pub(super) fn update(
        &mut self,
        key: &str,
        update: Result<watcher::Event<PartialObjectMeta<DynamicObject>>, watcher::Error>,
    ) -> bool {
        let Some(w) = self.watched.get_mut(key) else {
            return false;
        };
        let event = match update {
            Ok(event) => event,
            Err(e) => {
                if refused(&e) {
                    w.task.abort();
                    let wait = w
                        .retry
                        .map_or(REFUSED_FIRST_WAIT, |(_, wait)| (wait * 2).min(REDISCOVER));
                    w.retry = Some((Instant::now() + wait, wait));
                }
                if self.unlistable.insert(key.to_owned()) {
                    tracing::warn!(r#type = %type_name(&w.ar), error = %e, "break-glass sweeper cannot watch this type (it needs list, watch and patch on it): its expired break-glasses are not removed");
                }
                return false;
            }
        };
        let entry = |meta: PartialObjectMeta<DynamicObject>, kind: &str| {
            let id = (
                meta.metadata.namespace.clone().unwrap_or_default(),
                meta.metadata.name.clone().unwrap_or_default(),
            );
            (id, json!({"kind": kind, "metadata": meta.metadata}))
        };
        match event {
            watcher::Event::Init => w.relist = Some(BTreeMap::new()),
            watcher::Event::InitApply(meta) => {
                let (id, object) = entry(meta, &w.ar.kind);
                w.relist.get_or_insert_default().insert(id, object);
                return false;
            }
            watcher::Event::InitDone => {
                w.objects = w.relist.take().unwrap_or_default();
                w.synced = true;
                w.retry = None;
                self.unlistable.remove(key);
            }
            watcher::Event::Apply(meta) => {
                let (id, object) = entry(meta, &w.ar.kind);
                w.objects.insert(id, object);
            }
            watcher::Event::Delete(meta) => {
                let (id, _) = entry(meta, &w.ar.kind);
                w.objects.remove(&id);
            }
        }
        true
    }
}

/// Every type the sweeper may need: listable and patchable, in the preferred
/// version, without the kinds driftguard never judges. Aggregated discovery
/// (2 requests) where the apiserver has it, else one request per group.
async fn discover(client: &kube::Client) -> Result<Vec<ApiResource>, kube::Error> {
    let discovery = match Discovery::new(client.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(_) => Discovery::new(client.clone()).run().await?,
    };
    let mut out = Vec::new();
    for group in discovery.groups() {
        if EXCLUDED_GROUPS.contains(&group.name()) {
            continue;
        }
        for (ar, caps) in group.recommended_resources() {
            let excluded = format!("{}/{}", ar.group, ar.plural);
            if caps.supports_operation(verbs::LIST)
                && caps.supports_operation(verbs::PATCH)
                && !EXCLUDED_RESOURCES.contains(&excluded.as_str())
            {
                out.push(ar);
            }
        }
    }
    Ok(out)
}

/// A watch error that retrying will not mend before the next discovery:
/// the type may not be listed or watched (403), or is gone (404).
fn refused(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => matches!(status.code, 403 | 404),
        _ => false,
    }
}

/// `group/Kind`, as `pause::entry` names a type.
pub(super) fn type_key(ar: &ApiResource) -> String {
    format!("{}/{}", ar.group, ar.kind)
}

fn type_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}
