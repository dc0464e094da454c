//! The schedule of the pass over pauses left behind
//! ([`super::Sweeper::lift_orphaned_pauses`]): which `PAUSED_FOR` entries a
//! pass reads, and when one that was not lifted is tried again. Pure: the
//! sweeper says what it listed and what became of each try.
//!
//! Fair by construction, so that a hub tenant's forged entries cannot starve
//! a real one (issue 50, item 4):
//! - a pass takes its entries round-robin over (cluster, namespace), then
//!   over each namespace's Applications, then over their entries, each level
//!   least recently served first: a namespace with one entry is served every
//!   pass while there are no more namespaces than the pass takes entries;
//! - an entry tried and not lifted (refused, not ours, its object armed or
//!   unreadable) waits a backoff that doubles up to [`MAX_BACKOFF`], and
//!   takes no place in a pass meanwhile;
//! - each entry is warned about at most once per [`WARN_EVERY`], and a pass
//!   warns at most [`WARNINGS_PER_PASS`] times (the rest said in one line),
//!   so that entries forged afresh at every pass cannot flood the log.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// An Application's pause entry: (in the hub, namespace, name, entry).
pub(super) type Orphan = (bool, String, String, String);
/// An Application: (in the hub, namespace, name).
pub(super) type App = (bool, String, String);
/// Where Applications are: (in the hub, namespace).
type Group = (bool, String);
/// An entry ready this pass, with the pass it was last tried in.
type Ready<'a> = (&'a Orphan, u64);

/// The longest an entry not lifted waits before it is tried again.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);
/// The least time between two warnings about the same entry.
pub(super) const WARN_EVERY: Duration = Duration::from_secs(60 * 60);
/// The most entries one pass warns about one by one.
pub(super) const WARNINGS_PER_PASS: usize = 16;

/// What is known of one entry.
#[derive(Clone, Debug)]
struct Seen {
    /// When it was first seen held by no armed object.
    since: Instant,
    /// Tries in a row that did not lift it.
    failed: u32,
    /// Not tried before this.
    not_before: Option<Instant>,
    /// The pass it was last tried in (0: never).
    tried: u64,
    /// When it was last warned about.
    warned: Option<Instant>,
}

/// The entries seen held by no armed object, and whose turn it is.
#[derive(Debug, Default)]
pub(super) struct Orphans {
    seen: BTreeMap<Orphan, Seen>,
    /// The pass each namespace, and each Application, was last served in.
    groups: BTreeMap<Group, u64>,
    apps: BTreeMap<App, u64>,
    /// The clusters whose Applications could not be listed this pass: what
    /// was seen there waits, untouched.
    unlisted: BTreeSet<bool>,
    /// When each cluster's Argo CD settings were last warned unreadable.
    settings_warned: BTreeMap<bool, Instant>,
    pass: u64,
    /// Warnings this pass: said one by one, and held back past the bound.
    said: usize,
    held_back: usize,
}

impl Orphans {
    /// Forgets everything (the lead was lost).
    pub(super) fn clear(&mut self) {
        *self = Orphans::default();
    }

    /// What a listing found at `now`: `found`, in every cluster but those in
    /// `unlisted`, whose entries are kept as they were. An entry no longer
    /// found (lifted, or held again) is forgotten, its backoff with it.
    pub(super) fn found(
        &mut self,
        now: Instant,
        found: BTreeSet<Orphan>,
        unlisted: BTreeSet<bool>,
    ) {
        let mut before = std::mem::take(&mut self.seen);
        let mut seen: BTreeMap<Orphan, Seen> = (before.iter())
            .filter(|(key, _)| unlisted.contains(&key.0))
            .map(|(key, s)| (key.clone(), s.clone()))
            .collect();
        for key in found.into_iter().filter(|k| !unlisted.contains(&k.0)) {
            let s = before.remove(&key).unwrap_or(Seen {
                since: now,
                failed: 0,
                not_before: None,
                tried: 0,
                warned: None,
            });
            seen.insert(key, s);
        }
        self.seen = seen;
        let (groups, apps): (BTreeSet<Group>, BTreeSet<App>) = (self.seen.keys())
            .map(|(h, ns, n, _)| ((*h, ns.clone()), (*h, ns.clone(), n.clone())))
            .unzip();
        self.groups.retain(|g, _| groups.contains(g));
        self.apps.retain(|a, _| apps.contains(a));
        self.unlisted = unlisted;
    }

    /// The entries this pass tries, at most `budget`: orphaned for `grace`,
    /// past their backoff, in a listed cluster; taken fairly (the module's
    /// doc), and counted as tried.
    pub(super) fn due(&mut self, now: Instant, grace: Duration, budget: usize) -> Vec<Orphan> {
        self.pass += 1;
        (self.said, self.held_back) = (0, 0);
        let mut by_group: BTreeMap<Group, BTreeMap<App, Vec<Ready>>> = BTreeMap::new();
        let ready = (self.seen.iter())
            .filter(|(k, _)| !self.unlisted.contains(&k.0))
            .filter(|(_, s)| now.saturating_duration_since(s.since) >= grace)
            .filter(|(_, s)| s.not_before.is_none_or(|t| t <= now));
        for (key, s) in ready {
            let (hub, ns, name, _) = key;
            (by_group.entry((*hub, ns.clone())).or_default())
                .entry((*hub, ns.clone(), name.clone()))
                .or_default()
                .push((key, s.tried));
        }
        // Each namespace's queue: its Applications in turn, least recently
        // served first, each giving its least recently tried entry.
        let mut queues: Vec<(u64, Group, Vec<&Orphan>)> = Vec::new();
        for (group, apps) in by_group {
            let mut apps: Vec<(u64, App, Vec<Ready>)> = (apps.into_iter())
                .map(|(app, mut entries)| {
                    entries.sort_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)));
                    (self.apps.get(&app).copied().unwrap_or(0), app, entries)
                })
                .collect();
            apps.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
            let lists: Vec<Vec<&Orphan>> = (apps.into_iter())
                .map(|(_, _, e)| e.into_iter().map(|(k, _)| k).collect())
                .collect();
            let served = self.groups.get(&group).copied().unwrap_or(0);
            queues.push((served, group, round_robin(lists)));
        }
        queues.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let taken: Vec<Orphan> = round_robin(queues.into_iter().map(|(_, _, q)| q).collect())
            .into_iter()
            .take(budget)
            .cloned()
            .collect();
        for key in &taken {
            let (hub, ns, name, _) = key;
            self.groups.insert((*hub, ns.clone()), self.pass);
            self.apps
                .insert((*hub, ns.clone(), name.clone()), self.pass);
            if let Some(s) = self.seen.get_mut(key) {
                s.tried = self.pass;
            }
        }
        taken
    }

    /// `key` was lifted, or has nothing left to lift.
    pub(super) fn settled(&mut self, key: &Orphan) {
        self.seen.remove(key);
    }

    /// `key` was tried at `now` and not lifted: it waits `base` doubled for
    /// each try in a row that failed, at most [`MAX_BACKOFF`]. Whether to
    /// warn about it now: at most once per [`WARN_EVERY`], and while this
    /// pass has warned fewer than [`WARNINGS_PER_PASS`] times (one held
    /// back is counted, [`Self::held_back`], and warned about at a later try).
    pub(super) fn wait(&mut self, key: &Orphan, now: Instant, base: Duration) -> bool {
        let Some(s) = self.seen.get_mut(key) else {
            return false;
        };
        s.not_before = Some(now + backoff(base, s.failed));
        s.failed = s.failed.saturating_add(1);
        let due = (s.warned).is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY);
        if !due {
            return false;
        }
        if self.said >= WARNINGS_PER_PASS {
            self.held_back += 1;
            return false;
        }
        self.said += 1;
        s.warned = Some(now);
        true
    }

    /// How many warnings this pass held back past [`WARNINGS_PER_PASS`].
    pub(super) fn held_back(&self) -> usize {
        self.held_back
    }

    /// Every entry of Application `app` waits, as [`Self::wait`] (it holds
    /// no pause of ours: it deploys elsewhere, or Argo CD does not
    /// reconcile it). Whether to warn: never, as that is no fault.
    pub(super) fn wait_app(&mut self, app: &App, now: Instant, base: Duration) {
        // Its entries are adjacent in the map's order: only they are visited.
        let from = (app.0, app.1.clone(), app.2.clone(), String::new());
        let of_app = self.seen.range_mut(from..);
        for (_, s) in of_app.take_while(|((h, ns, n, _), _)| (*h, ns, n) == (app.0, &app.1, &app.2))
        {
            s.not_before = Some(now + backoff(base, s.failed));
            s.failed = s.failed.saturating_add(1);
        }
    }

    /// Whether to warn now that cluster `hub`'s Argo CD settings cannot be
    /// read: at most once per [`WARN_EVERY`].
    pub(super) fn warn_settings(&mut self, hub: bool, now: Instant) -> bool {
        let last = self.settings_warned.get(&hub);
        let warn = last.is_none_or(|at| now.saturating_duration_since(*at) >= WARN_EVERY);
        if warn {
            self.settings_warned.insert(hub, now);
        }
        warn
    }

    /// How many entries are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.seen.len()
    }

    /// Every entry seen as if first seen `by` earlier (tests: past the grace).
    #[cfg(test)]
    pub(super) fn age(&mut self, by: Duration) {
        for s in self.seen.values_mut() {
            s.since -= by;
        }
    }
}

/// `base` doubled `failed` times, at most [`MAX_BACKOFF`].
fn backoff(base: Duration, failed: u32) -> Duration {
    let factor = 1u32.checked_shl(failed.min(16)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).min(MAX_BACKOFF)
}

/// The lists' items in turns: each list's first, then each one's second, ...
fn round_robin<T>(lists: Vec<Vec<T>>) -> Vec<T> {
    let mut iters: Vec<_> = lists.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    loop {
        let before = out.len();
        out.extend(iters.iter_mut().filter_map(Iterator::next));
        if out.len() == before {
            return out;
        }
    }
}

#[cfg(test)]
mod tests;
