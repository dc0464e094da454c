//! The sweeper's view of the armed set: one watch, of the record
//! ConfigMaps in driftguard's namespace ([`record`]), whatever the number of
//! types in the cluster. At most [`MAX_RECORDS`] are held; more are counted
//! and logged, and wait for a relist once some are gone.

use std::collections::BTreeMap;
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

/// How long a record whose object could not be read waits to be read again.
const FAILED_WAIT: Duration = Duration::from_secs(60);

/// The most records held: each is a few hundred bytes, and only an identity
/// allowed to break glass (or a write allowed in warn mode) makes one.
pub(crate) const MAX_RECORDS: usize = 10_000;

/// One record, and what the sweeper last read of its object.
pub(super) struct Held {
    pub armed: Armed,
    pub resource_version: String,
    /// When its object was last read, and whether it was armed then;
    /// `None`: not read since the record was (re)written.
    read: Option<(Instant, bool)>,
    /// When reading its object last failed (403, a type not served).
    failed: Option<Instant>,
}

impl Held {
    /// Whether its object is to be read now: never read since the record
    /// changed, not read for [`VERIFY`], or for [`RECHECK`] while the write
    /// it was last written for may still land ([`Held::landing`]), its
    /// recorded expiry passed, or found not armed and now settled.
    pub fn due(&self, now: jiff::Timestamp) -> bool {
        if self.failed.is_some_and(|at| at.elapsed() < FAILED_WAIT) {
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
}

/// One watch event (or error).
pub(super) type Update = Result<watcher::Event<ConfigMap>, watcher::Error>;

/// The records, by ConfigMap name.
#[derive(Default)]
pub(super) struct Records {
    pub held: BTreeMap<String, Held>,
    relist: Option<BTreeMap<String, Held>>,
    /// Whether the first list is complete: until then no pause is lifted.
    pub synced: bool,
    /// Records left out over [`MAX_RECORDS`] since the last list.
    pub over: usize,
    /// Records whose break-glass this sweeper ended, with the arming's
    /// `recorded` then: the ending write's own look-again rewrote them, and
    /// they are dropped at once unless a new arming recorded them again.
    ended: BTreeMap<String, Option<jiff::Timestamp>>,
    /// Records deleted by someone else while their object may be armed:
    /// read again, and written again if it is.
    deleted: Vec<Armed>,
}

/// Starts the watch of the records in `namespace`; its events go to `tx`.
pub(super) fn watch(
    client: kube::Client,
    namespace: &str,
    tx: tokio::sync::mpsc::Sender<Update>,
) -> tokio::task::AbortHandle {
    let api = Api::<ConfigMap>::namespaced(client, namespace);
    let config = watcher::Config::default().labels(record::RECORD_LABEL);
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

impl Records {
    /// Notes what reading record `name`'s object found: armed or not, and
    /// the expiry it carries.
    pub(super) fn read(&mut self, name: &str, armed: bool, expires: Option<jiff::Timestamp>) {
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
        self.held.remove(name);
        self.ended.remove(name);
    }

    /// Notes that record `name`'s object could not be read: asked again
    /// after [`FAILED_WAIT`], not at every check.
    pub(super) fn failed(&mut self, name: &str) {
        if let Some(held) = self.held.get_mut(name) {
            held.failed = Some(Instant::now());
        }
    }

    /// The records deleted by someone else while their object may be armed.
    pub(super) fn take_deleted(&mut self) -> Vec<Armed> {
        std::mem::take(&mut self.deleted)
    }

    /// Whether records were left out at the bound and some room is free.
    pub(super) fn room_for_more(&self) -> bool {
        self.over > 0 && self.held.len() < MAX_RECORDS
    }

    /// Makes record `name` due again.
    pub(super) fn unread(&mut self, name: &str) {
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
        match event {
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
                self.over = 0;
            }
            watcher::Event::InitApply(cm) => {
                let into = self.relist.get_or_insert_default();
                Self::hold(into, &mut self.over, cm);
                return false;
            }
            watcher::Event::InitDone => {
                self.held = self.relist.take().unwrap_or_default();
                self.ended.retain(|name, _| self.held.contains_key(name));
                self.synced = true;
                if self.over > 0 {
                    tracing::warn!(
                        over = self.over,
                        max = MAX_RECORDS,
                        "break-glass sweeper: more armed objects than it holds; the rest wait until some end"
                    );
                }
            }
            watcher::Event::Apply(cm) => Self::hold(&mut self.held, &mut self.over, cm),
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

    /// Holds `cm` if it is a record and there is room (counted before it is held).
    fn hold(into: &mut BTreeMap<String, Held>, over: &mut usize, cm: ConfigMap) {
        let (Some(name), Some(rv)) = (
            cm.metadata.name.clone(),
            cm.metadata.resource_version.clone(),
        ) else {
            return;
        };
        let Some(armed) = Armed::from_config_map(&cm) else {
            tracing::debug!(record = %name, "break-glass sweeper: not a record it can read; left alone");
            return;
        };
        if !into.contains_key(&name) && into.len() >= MAX_RECORDS {
            *over += 1;
            return;
        }
        let held = Held {
            armed,
            resource_version: rv,
            read: None,
            failed: None,
        };
        into.insert(name, held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(i: usize) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": format!("r{i}"), "resourceVersion": "1"},
            "data": {"apiVersion": "apps/v1", "kind": "Deployment", "resource": "deployments",
                "namespace": "prod", "name": format!("web{i}")}}))
        .unwrap()
    }

    /// A record found not armed is dropped only once settled, and lends
    /// no pause meanwhile; one found armed is read again at its expiry.
    #[test]
    fn a_record_is_read_when_due_and_dropped_only_once_settled() {
        let now = jiff::Timestamp::now();
        let mut cm = record(1);
        let data = cm.data.as_mut().unwrap();
        data.insert("recorded".into(), now.to_string());
        data.insert(
            "expires".into(),
            (now + jiff::SignedDuration::from_mins(5)).to_string(),
        );
        let mut records = Records::default();
        records.update(Ok(watcher::Event::Apply(cm)));
        let held = |r: &Records| r.held.values().next().unwrap().clone_state();
        assert_eq!(
            held(&records),
            (true, false, true),
            "unread: due, not settled, may be armed"
        );
        records.read("r1", true, Some(now + jiff::SignedDuration::from_mins(5)));
        assert_eq!(held(&records), (false, false, true));
        let h = records.held.values().next().unwrap();
        let settled = now + jiff::SignedDuration::from_secs(71);
        assert!(!h.due(settled), "armed and settled: read at its expiry");
        assert!(
            h.due(now + jiff::SignedDuration::from_mins(6)),
            "due at its expiry"
        );
        records.read("r1", false, None);
        assert_eq!(
            held(&records),
            (false, false, false),
            "not armed: no pause, kept"
        );
        let h = records.held.values().next().unwrap();
        let later = now + jiff::SignedDuration::from_secs(71);
        assert!(h.settled(later) && h.due(later), "settled after the grace");
        // Recorded as armed but read unarmed: read again soon, the arming may land yet.
        let recheck = h.next_look(now).unwrap();
        assert!(
            recheck <= now + jiff::SignedDuration::from_secs(3),
            "{recheck}"
        );
        assert_eq!(
            h.next_look(later),
            None,
            "settled and not armed: dropped, not waited on"
        );
    }

    /// After a look-again (a write that ends the break-glass), an object
    /// still read armed is read again soon; read unarmed, it lends no pause.
    #[test]
    fn a_look_again_is_followed_until_the_ending_lands() {
        let now = jiff::Timestamp::now();
        let mut cm = record(2);
        let data = cm.data.as_mut().unwrap();
        data.insert(
            "recorded".into(),
            (now - jiff::SignedDuration::from_mins(10)).to_string(),
        );
        data.insert("look".into(), now.to_string());
        let mut records = Records::default();
        records.update(Ok(watcher::Event::Apply(cm)));
        records.read("r2", true, Some(now + jiff::SignedDuration::from_mins(30)));
        let h = records.held.values().next().unwrap();
        assert!(h.next_look(now).unwrap() <= now + jiff::SignedDuration::from_secs(3));
        records.read("r2", false, None);
        let h = records.held.values().next().unwrap();
        assert_eq!(h.next_look(now), None);
        assert!(!h.may_be_armed() && !h.due(now));
        assert!(
            h.due(now + jiff::SignedDuration::from_secs(71)),
            "dropped once settled"
        );
    }

    /// A record deleted by someone else while its object may be armed is
    /// handed back to be read and written again; one found unarmed is not.
    #[test]
    fn a_record_deleted_while_its_object_may_be_armed_is_handed_back() {
        let mut records = Records::default();
        for i in 0..3 {
            records.update(Ok(watcher::Event::Apply(record(i))));
        }
        records.read("r0", true, None);
        records.read("r1", false, None);
        // r2: not read yet, so it may be armed.
        for i in 0..3 {
            records.update(Ok(watcher::Event::Delete(record(i))));
        }
        let back: Vec<String> = (records.take_deleted().iter())
            .map(|a| a.name.clone())
            .collect();
        assert_eq!(back, ["web0", "web2"]);
        assert!(records.held.is_empty() && records.take_deleted().is_empty());
        // This sweeper's own delete leaves `held` first: nothing comes back.
        records.update(Ok(watcher::Event::Apply(record(4))));
        records.remove("r4");
        records.update(Ok(watcher::Event::Delete(record(4))));
        assert!(records.take_deleted().is_empty());
    }

    impl Held {
        /// (due now, settled now, may be armed).
        fn clone_state(&self) -> (bool, bool, bool) {
            let now = jiff::Timestamp::now();
            (self.due(now), self.settled(now), self.may_be_armed())
        }
    }

    #[test]
    fn records_past_the_bound_are_counted_not_held() {
        let mut records = Records::default();
        records.update(Ok(watcher::Event::Init));
        for i in 0..MAX_RECORDS + 3 {
            records.update(Ok(watcher::Event::InitApply(record(i))));
        }
        records.update(Ok(watcher::Event::InitDone));
        assert_eq!((records.held.len(), records.over), (MAX_RECORDS, 3));
        // A record already held is updated in place, even at the bound.
        records.update(Ok(watcher::Event::Apply(record(0))));
        assert_eq!(records.held.len(), MAX_RECORDS);
        records.update(Ok(watcher::Event::Delete(record(0))));
        records.update(Ok(watcher::Event::Apply(record(MAX_RECORDS))));
        assert!(records.held.contains_key(&format!("r{MAX_RECORDS}")));
        // A ConfigMap that names no object is not held.
        let mut other = record(1);
        other.data = None;
        other.metadata.name = Some("other".into());
        records.update(Ok(watcher::Event::Apply(other)));
        assert!(!records.held.contains_key("other"));
    }
}
