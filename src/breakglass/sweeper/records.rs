//! The sweeper's view of the armed set: one watch, of the record
//! ConfigMaps in driftguard's namespace ([`record`]), whatever the number of
//! types in the cluster. Records are hints, checked before they are held: a
//! record's name must be the digest of the object it names, and its times
//! are clamped to when the apiserver showed it ([`Armed::checked`]). At most
//! [`MAX_RECORDS`] are held, shared so that records nobody armed cannot keep
//! out the ones that name an armed object ([`Records::hold`]); the rest are
//! counted and logged, and wait for a relist.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

use super::VERIFY;
use crate::breakglass::record::{self, Armed};

/// How often a recorded object is read while a write its record was
/// written for may still land (armed, or ended, at admission, before the
/// write is stored).
const RECHECK: Duration = Duration::from_secs(3);

/// How long a record whose object could not be read waits to be read
/// again, doubled at each failure in a row up to [`MAX_FAILED_WAIT`].
const FAILED_WAIT: Duration = Duration::from_secs(60);
const MAX_FAILED_WAIT: Duration = Duration::from_secs(3600);

/// The most records held: each is a few hundred bytes, and only an identity
/// allowed to break glass (or a write allowed in warn mode) makes one.
pub(crate) const MAX_RECORDS: usize = 10_000;

/// One record, and what the sweeper last read of its object.
pub(super) struct Held {
    pub armed: Armed,
    pub resource_version: String,
    /// When this version of the record was first seen: its times are no later.
    seen: jiff::Timestamp,
    /// Where its version falls in the apiserver's order of writes (etcd's
    /// revision, which resourceVersions are); one that does not read as one
    /// counts as the newest.
    written_at: u64,
    /// When its object was last read, and whether it was armed then;
    /// `None`: not read since the record was (re)written.
    read: Option<(Instant, bool)>,
    /// When reading its object last failed (403, a type not served), and
    /// how many times in a row.
    failed: Option<(Instant, u32)>,
}

/// What holding a record is worth at the bound, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Worth {
    /// Its object was read armed: a break-glass to end.
    Armed,
    /// Read not armed: an arming on its way, or a record to delete once
    /// settled. Let go, it would come back unread at the next list, and a
    /// flood of records nobody armed would never be deleted.
    NotArmed,
    /// Not read yet: it may name an armed object.
    Unread,
    /// Its object could not be read (a type not served, no RBAC): read
    /// again when listed again.
    Unreadable,
}

impl Held {
    /// Whether its object is to be read now: never read since the record
    /// changed, not read for [`VERIFY`], or for [`RECHECK`] while the write
    /// it was last written for may still land ([`Held::landing`]), its
    /// recorded expiry passed, or found not armed and now settled.
    pub fn due(&self, now: jiff::Timestamp) -> bool {
        if let Some((at, times)) = self.failed
            && at.elapsed() < failed_wait(times)
        {
            return false;
        }
        match self.read {
            None => true,
            Some((at, _)) if at.elapsed() >= VERIFY => true,
            Some((at, armed)) if self.landing(armed, now) && at.elapsed() >= RECHECK => true,
            Some((_, true)) => self.armed.expires.is_none_or(|at| at <= now),
            Some((_, false)) => self.settled(now),
        }
    }

    /// Whether it was written longer than [`record::GRACE`] ago: a write it
    /// was written for is no longer on its way.
    pub fn settled(&self, now: jiff::Timestamp) -> bool {
        let grace = jiff::SignedDuration::try_from(record::GRACE).unwrap_or_default();
        (self.armed.written()).is_none_or(|at| now.duration_since(at) >= grace)
    }

    /// Whether the last read (`armed` or not) is not yet what the write the
    /// record was last written for will make it (an arming, or an ending
    /// for a look-again), and that write may still land.
    fn landing(&self, armed: bool, now: jiff::Timestamp) -> bool {
        let arming =
            (self.armed.look).is_none_or(|look| self.armed.recorded.is_some_and(|r| r >= look));
        armed != arming && !self.settled(now)
    }

    /// When it is next due by time: a recheck while a write may land, else
    /// its expiry (armed) or its settling (not armed).
    pub fn next_look(&self, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
        let (at, armed) = self.read?;
        if self.landing(armed, now) {
            let left = RECHECK.saturating_sub(at.elapsed());
            return now
                .checked_add(jiff::SignedDuration::try_from(left).ok()?)
                .ok();
        }
        if armed { self.armed.expires } else { None }
    }

    /// Whether its object may hold a pause: armed when last read, or not read yet.
    pub fn may_be_armed(&self) -> bool {
        self.read.is_none_or(|(_, armed)| armed)
    }

    fn worth(&self) -> Worth {
        match self.read {
            _ if self.failed.is_some() => Worth::Unreadable,
            None => Worth::Unread,
            Some((_, true)) => Worth::Armed,
            Some((_, false)) => Worth::NotArmed,
        }
    }
}

/// How long a read that failed `times` in a row waits.
fn failed_wait(times: u32) -> Duration {
    (FAILED_WAIT.saturating_mul(1 << times.saturating_sub(1).min(6))).min(MAX_FAILED_WAIT)
}

/// One watch event (or error).
pub(super) type Update = Result<watcher::Event<ConfigMap>, watcher::Error>;

/// The records, by ConfigMap name.
pub(super) struct Records {
    pub held: BTreeMap<String, Held>,
    relist: Option<BTreeMap<String, Held>>,
    /// Whether the first list is complete: until then no pause is lifted.
    pub synced: bool,
    /// The most held: [`MAX_RECORDS`].
    max: usize,
    /// Records left out over the bound since the last list.
    pub over: usize,
    /// ConfigMaps with the record label that driftguard did not write (a
    /// name that is not their object's digest), since the last list.
    pub forged: usize,
    /// Records whose break-glass this sweeper ended, with the arming's
    /// `recorded` then: the ending write's own look-again rewrote them, and
    /// they are dropped at once unless a new arming recorded them again.
    ended: BTreeMap<String, Option<jiff::Timestamp>>,
    /// Records deleted by someone else while their object may be armed:
    /// read again, and written again if it is.
    deleted: Vec<Armed>,
    /// Counts every change to what is held (or being listed) that could
    /// change [`Crowd`]: `held` is changed through these methods only.
    generation: u64,
    /// The last scan at the bound, while still true.
    crowd: Option<Crowd>,
    /// When the last list completed.
    listed: Option<Instant>,
}

/// What a scan of a full map found ([`Records::hold`]), kept while nothing
/// in it changes: a flood of records turned away costs one scan, not one
/// each (10,000 held took 23 ms a scan in a debug build).
struct Crowd {
    generation: u64,
    listing: bool,
    /// Unread records held, by the namespace of the object they name.
    per_namespace: HashMap<String, usize>,
    /// The record worth least: (name, worth, its namespace's unread, written at).
    worst: Option<(String, Worth, usize, u64)>,
}

impl Crowd {
    fn of(held: &BTreeMap<String, Held>, generation: u64, listing: bool) -> Crowd {
        let mut per_namespace: HashMap<String, usize> = HashMap::new();
        for h in held.values().filter(|h| h.worth() == Worth::Unread) {
            *per_namespace.entry(h.armed.namespace.clone()).or_default() += 1;
        }
        let count = |h: &Held| per_namespace.get(&h.armed.namespace).map_or(0, |n| *n);
        // Among unread: the namespace holding the most, and in it the newest.
        let worst = (held.iter())
            .filter(|(_, h)| h.worth() > Worth::NotArmed)
            .map(|(name, h)| (name, h.worth(), count(h), h.written_at))
            .max_by_key(|(_, worth, count, at)| (*worth, *count, *at))
            .map(|(name, worth, count, at)| (name.clone(), worth, count, at));
        Crowd {
            generation,
            listing,
            per_namespace,
            worst,
        }
    }

    /// The record `new` takes the place of: see [`Records::hold`].
    fn victim(&self, new: &Held) -> Option<String> {
        let (name, worth, count, at) = self.worst.as_ref()?;
        let fairer = match (*worth, new.worth()) {
            (Worth::Unread, Worth::Unread) => {
                let theirs = self.per_namespace.get(&new.armed.namespace);
                (*count, *at) > (theirs.map_or(0, |n| *n) + 1, new.written_at)
            }
            (out, new) => out > new,
        };
        fairer.then(|| name.clone())
    }
}

/// Starts the watch of the records in `namespace`; its events go to `tx`.
pub(super) fn watch(
    client: kube::Client,
    namespace: &str,
    tx: tokio::sync::mpsc::Sender<Update>,
) -> tokio::task::AbortHandle {
    let api = Api::<ConfigMap>::namespaced(client, namespace);
    // Pages of 50: a ConfigMap may be 1 MiB, and a page is held whole.
    let config = watcher::Config::default()
        .labels(record::RECORD_LABEL)
        .page_size(50);
    let stream = watcher::watcher(api, config).default_backoff();
    tokio::spawn(async move {
        futures_util::pin_mut!(stream);
        while let Some(update) = stream.next().await {
            if tx.send(update).await.is_err() {
                return;
            }
        }
    })
    .abort_handle()
}

impl Default for Records {
    fn default() -> Self {
        Records::with_bound(MAX_RECORDS)
    }
}

impl Records {
    /// Holding at most `max` records.
    fn with_bound(max: usize) -> Self {
        Records {
            held: BTreeMap::new(),
            relist: None,
            synced: false,
            max,
            over: 0,
            forged: 0,
            ended: BTreeMap::new(),
            deleted: Vec::new(),
            generation: 0,
            crowd: None,
            listed: None,
        }
    }

    /// Notes that record `name`'s object is read as `ar` (its type, at the
    /// version served now): its record's own version and kind are hints.
    pub(super) fn served_as(&mut self, name: &str, ar: kube::api::ApiResource) {
        if let Some(held) = self.held.get_mut(name) {
            held.armed.ar = ar;
        }
    }

    /// Notes what reading record `name`'s object found: armed or not, and
    /// the expiry it carries.
    pub(super) fn read(&mut self, name: &str, armed: bool, expires: Option<jiff::Timestamp>) {
        self.generation += 1;
        if let Some(held) = self.held.get_mut(name) {
            held.read = Some((Instant::now(), armed));
            held.failed = None;
            if armed {
                held.armed.expires = expires;
            }
        }
    }

    /// Notes that this sweeper ended record `name`'s break-glass.
    pub(super) fn ended(&mut self, name: &str) {
        if let Some(held) = self.held.get(name) {
            self.ended.insert(name.to_owned(), held.armed.recorded);
        }
    }

    /// Whether record `name` may be dropped though not settled: this
    /// sweeper ended the very arming it records.
    pub(super) fn ended_here(&self, name: &str) -> bool {
        let held = self.held.get(name).map(|h| h.armed.recorded);
        held.is_some() && self.ended.get(name) == held.as_ref()
    }

    /// Forgets record `name`, deleted.
    pub(super) fn remove(&mut self, name: &str) {
        self.generation += 1;
        self.held.remove(name);
        self.ended.remove(name);
    }

    /// Notes that record `name`'s object could not be read: asked again
    /// after [`FAILED_WAIT`], doubled at each failure in a row; returns how
    /// many in a row (a warning at the first, and then less often).
    pub(super) fn failed(&mut self, name: &str) -> u32 {
        let Some(held) = self.held.get_mut(name) else {
            return 0;
        };
        let times = held.failed.map_or(1, |(_, n)| n.saturating_add(1));
        held.failed = Some((Instant::now(), times));
        self.generation += 1;
        times
    }

    /// The records deleted by someone else while their object may be armed.
    pub(super) fn take_deleted(&mut self) -> Vec<Armed> {
        std::mem::take(&mut self.deleted)
    }

    /// Whether records were left out at the bound and some room is free,
    /// or held by one that cannot be read, which a record left out would
    /// take the place of: then at most once per [`FAILED_WAIT`], since
    /// records of a type nothing serves are never deleted, and each list
    /// reads them all again.
    pub(super) fn room_for_more(&self) -> bool {
        let unreadable = || {
            self.listed.is_none_or(|at| at.elapsed() >= FAILED_WAIT)
                && self.held.values().any(|h| h.worth() == Worth::Unreadable)
        };
        self.over > 0 && (self.held.len() < self.max || unreadable())
    }

    /// Makes record `name` due again.
    pub(super) fn unread(&mut self, name: &str) {
        self.generation += 1;
        if let Some(held) = self.held.get_mut(name) {
            held.read = None;
        }
    }

    /// Takes one watch update in; true when the armed set may have changed.
    pub(super) fn update(&mut self, update: Update) -> bool {
        let event = match update {
            Ok(event) => event,
            Err(e) => {
                tracing::warn!(error = %e, "break-glass sweeper: cannot watch its records (it needs list and watch on ConfigMaps in its namespace); retrying");
                return false;
            }
        };
        // What is held may change: a scan at the bound is redone ([`Crowd`]),
        // but for a record turned away ([`Records::hold`]).
        if !matches!(
            event,
            watcher::Event::Apply(_) | watcher::Event::InitApply(_)
        ) {
            self.generation += 1;
        }
        match event {
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
                (self.over, self.forged) = (0, 0);
            }
            watcher::Event::InitApply(cm) => {
                self.hold(cm, true);
                return false;
            }
            watcher::Event::InitDone => {
                self.listed = Some(Instant::now());
                self.held = self.relist.take().unwrap_or_default();
                self.ended.retain(|name, _| self.held.contains_key(name));
                self.synced = true;
                if self.over > 0 {
                    tracing::warn!(
                        over = self.over,
                        max = self.max,
                        "break-glass sweeper: more armed objects than it holds; the rest wait until some end"
                    );
                }
                if self.forged > 0 {
                    tracing::warn!(
                        forged = self.forged,
                        "break-glass sweeper: ConfigMaps labelled as records that driftguard did not write (a name that is not the digest of the object named); left alone"
                    );
                }
            }
            watcher::Event::Apply(cm) => self.hold(cm, false),
            watcher::Event::Delete(cm) => {
                let name = cm.metadata.name.as_deref().unwrap_or_default();
                // This sweeper's own deletes are out of `held` before their
                // event comes ([`Records::remove`]).
                if let Some(held) = self.held.remove(name).filter(Held::may_be_armed) {
                    self.deleted.push(held.armed);
                }
            }
        }
        true
    }

    /// Holds `cm` (into the list being read, when `listing`) if it is a
    /// record driftguard wrote ([`Armed::checked`]) and there is room,
    /// counted before it is held. At the bound it takes the place of one
    /// worth less ([`Worth`]: found armed, found not armed, unread, not
    /// readable), or,
    /// unread, of an unread one from the namespace holding the most unread
    /// when that holds more than `cm`'s would, the newest first at a tie:
    /// never of one found armed or not armed. A flood of records nobody
    /// armed is read, found not armed, and deleted once settled, and a real
    /// record, older than those written after it, is held once the older
    /// ones are read.
    /// A version seen before keeps what was read of it.
    fn hold(&mut self, cm: ConfigMap, listing: bool) {
        let (Some(name), Some(rv)) = (
            cm.metadata.name.clone(),
            cm.metadata.resource_version.clone(),
        ) else {
            return;
        };
        let prior = self.held.get(&name);
        let same = prior.filter(|p| p.resource_version == rv);
        let seen = same.map_or_else(jiff::Timestamp::now, |p| p.seen);
        let since = prior.filter(|_| same.is_none()).map(|p| p.seen);
        let Some(mut armed) = Armed::checked(&cm, since, seen) else {
            self.forged += 1;
            // Once between two lists, and counted at the next one.
            if self.forged == 1 && !listing {
                tracing::warn!(record = %crate::text::quote(&name), "break-glass sweeper: a ConfigMap labelled as a record that driftguard did not write (its name is not the digest of the object it names); left alone");
            }
            return;
        };
        if let Some(p) = same {
            armed.ar = p.armed.ar.clone();
        }
        let held = Held {
            armed,
            written_at: rv.parse().unwrap_or(u64::MAX),
            resource_version: rv,
            seen,
            read: same.and_then(|p| p.read),
            failed: same.and_then(|p| p.failed),
        };
        let into = match listing {
            true => self.relist.get_or_insert_default(),
            false => &mut self.held,
        };
        if !into.contains_key(&name) && into.len() >= self.max {
            self.over += 1;
            let fresh = |c: &&Crowd| c.generation == self.generation && c.listing == listing;
            if self.crowd.as_ref().filter(fresh).is_none() {
                self.crowd = Some(Crowd::of(into, self.generation, listing));
            }
            match self.crowd.as_ref().and_then(|c| c.victim(&held)) {
                Some(out) => into.remove(&out),
                None => return,
            };
        }
        self.generation += 1;
        into.insert(name, held);
    }
}

#[cfg(test)]
mod tests;
