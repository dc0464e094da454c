//! Applications that deploy to another cluster, held as their uid alone.
//! A hub holds every spoke's Applications, and Argo CD rewrites each one's
//! status at every reconcile. Such an Application lends nothing here (no
//! rule, account, listed object or guarded namespace: principle 6), so it is
//! neither compiled nor kept: each of its events costs one read of
//! `spec.destination` and one set lookup, and allocates nothing. What is
//! kept is only what tells a relist or a delete that it existed, and a
//! destination that turns to this cluster compiles it at once.

use std::collections::HashSet;

use kube::api::DynamicObject;

use super::{Kind, SourceCache};

/// What one foreign Application is charged: its uid in the set and in the
/// ledger, with their maps' overhead (an over-estimate; a uid is 36 bytes).
pub const FOREIGN_COST: usize = 256;

/// The foreign Applications, and how many of their events were skipped.
#[derive(Default)]
pub(super) struct Foreign {
    pub(super) uids: HashSet<Box<str>>,
    /// Events of foreign Applications, each handled without parsing it.
    pub(super) events: u64,
}

impl SourceCache {
    /// Holds `object` as foreign if it is an Application of another cluster:
    /// `Some(whether the sources changed)`. `None` when it must be compiled;
    /// one that was foreign stops being so then.
    pub(super) fn apply_foreign(
        &mut self,
        kind: Kind,
        uid: &str,
        object: &DynamicObject,
    ) -> Option<bool> {
        if kind != Kind::Application {
            return None;
        }
        if !self.this_cluster.deploys_elsewhere(&object.data) {
            self.foreign.uids.remove(uid);
            return None;
        }
        self.foreign.events += 1;
        if self.foreign.uids.contains(uid) {
            // A status rewrite, or any change that keeps it elsewhere.
            return Some(false);
        }
        // New here, or moved away: what it held goes.
        let listed = self.forget_planned(uid);
        let held = self.drop_app(uid);
        self.refused.remove(uid);
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        let capped = self.capped(namespace);
        if self
            .budget
            .charge(uid, namespace, FOREIGN_COST, capped)
            .is_err()
        {
            // Held either way: it is what a relist must know to forget.
            self.budget.force(uid, namespace, FOREIGN_COST);
        }
        self.foreign.uids.insert(uid.into());
        Some(listed || held)
    }

    /// Foreign Applications held, and the events of theirs skipped so far.
    pub(crate) fn foreign(&self) -> (usize, u64) {
        (self.foreign.uids.len(), self.foreign.events)
    }
}
