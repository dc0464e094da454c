//! A map of recent entries keyed by request data, bounded in entries and in
//! bytes (keys plus what each value is said to cost), so that requests with
//! huge names cannot grow it without limit. When it is full of entries
//! younger than the caller's horizon, a new entry is refused rather than an
//! old one dropped: the callers then skip the work the entry would have
//! deduplicated (an Event) or just do not cache (a parent read).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What an entry costs besides its key and value: the map's own bookkeeping.
const ENTRY_OVERHEAD: usize = 64;

pub(crate) struct BoundedMap<V> {
    entries: HashMap<String, Entry<V>>,
    bytes: usize,
    max_bytes: usize,
    max_entries: usize,
}

struct Entry<V> {
    at: Instant,
    value: V,
    cost: usize,
}

impl<V> BoundedMap<V> {
    pub(crate) fn new(max_bytes: usize, max_entries: usize) -> Self {
        Self {
            entries: HashMap::new(),
            bytes: 0,
            max_bytes,
            max_entries,
        }
    }

    /// The bytes held, as counted against the budget.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry and when it was stored (or last touched).
    pub(crate) fn get_mut(&mut self, key: &str) -> Option<(&mut Instant, &mut V)> {
        self.entries.get_mut(key).map(|e| (&mut e.at, &mut e.value))
    }

    /// Stores `value` under `key` (replacing any entry), counting
    /// `value_bytes` for the value. If that would pass a bound, entries older
    /// than `horizon` are dropped first; if it still would, nothing is stored
    /// and `false` is returned.
    pub(crate) fn insert(
        &mut self,
        key: String,
        value: V,
        value_bytes: usize,
        horizon: Duration,
    ) -> bool {
        self.remove(&key);
        let cost = key
            .len()
            .saturating_add(value_bytes)
            .saturating_add(ENTRY_OVERHEAD);
        if !self.fits(cost) {
            self.entries.retain(|_, e| e.at.elapsed() < horizon);
            self.bytes = self.entries.values().map(|e| e.cost).sum();
        }
        if !self.fits(cost) {
            return false;
        }
        self.bytes += cost;
        self.entries.insert(
            key,
            Entry {
                at: Instant::now(),
                value,
                cost,
            },
        );
        true
    }

    pub(crate) fn remove(&mut self, key: &str) {
        if let Some(old) = self.entries.remove(key) {
            self.bytes -= old.cost;
        }
    }

    fn fits(&self, cost: usize) -> bool {
        self.entries.len() < self.max_entries && self.bytes.saturating_add(cost) <= self.max_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_entries_are_kept_and_new_ones_refused_at_the_byte_budget() {
        let mut map = BoundedMap::new(10_000, 1_000);
        let stored = (0..100)
            .filter(|i| map.insert(format!("{i}{}", "x".repeat(1_000)), (), 0, Duration::MAX))
            .count();
        assert!(stored > 0 && stored < 100, "{stored}");
        assert!(map.bytes() <= 10_000);
        // Replacing an entry does not count it twice.
        let key = format!("0{}", "x".repeat(1_000));
        assert!(map.get_mut(&key).is_some());
        let before = map.bytes();
        assert!(map.insert(key, (), 0, Duration::MAX));
        assert_eq!(map.bytes(), before);
    }

    #[test]
    fn old_entries_make_room() {
        let mut map = BoundedMap::new(1_000_000, 3);
        for i in 0..3 {
            assert!(map.insert(i.to_string(), 0u8, 1, Duration::MAX));
        }
        assert!(
            !map.insert("3".into(), 0, 1, Duration::MAX),
            "full of fresh entries"
        );
        assert!(
            map.insert("3".into(), 0, 1, Duration::ZERO),
            "everything is old"
        );
        assert_eq!(map.len(), 1);
        assert_eq!(map.bytes(), 1 + 1 + ENTRY_OVERHEAD);
    }

    #[test]
    fn an_entry_larger_than_the_budget_is_never_stored() {
        let mut map = BoundedMap::new(1_000, 10);
        assert!(!map.insert("k".into(), (), 2_000, Duration::ZERO));
        assert!(map.is_empty());
        assert_eq!(map.bytes(), 0);
    }
}
