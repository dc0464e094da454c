//! Which maps of a built-in kind are atomic, from the kube-apiserver's own
//! OpenAPI (`atomic_maps.json`, checked against the real apiserver of every
//! supported version by `tests/e2e_schema.rs`).
//!
//! managedFields write an atomic map (a LabelSelector) and a map applied
//! empty (`updateStrategy: {}`, which Flux applies from Go's zero values) the
//! same way, as one bare leaf. The first owns everything in it; the second
//! only that the map exists, and server-side apply of it changes nothing the
//! apiserver defaulted inside. Only the schema tells them apart.

use std::collections::HashMap;
use std::sync::OnceLock;

/// `apiVersion/kind` → pointer patterns of its atomic maps (`*`: any list
/// item or map key).
type Table = HashMap<String, Vec<Vec<String>>>;

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let raw: HashMap<String, Vec<String>> =
            serde_json::from_str(include_str!("atomic_maps.json"))
                .expect("atomic_maps.json is a map of pointer lists");
        raw.into_iter()
            .map(|(kind, patterns)| {
                let split = patterns
                    .iter()
                    .map(|p| p.split('/').skip(1).map(str::to_owned).collect())
                    .collect();
                (kind, split)
            })
            .collect()
    })
}

/// Whether the map at `pointer` in an object of `api_version`/`kind` is one
/// whose keys are owned one by one (granular), so that a bare managedFields
/// leaf there owns only the map's presence. `false` where the schema is
/// unknown (a custom resource): the map is then read as owned whole, the
/// stricter reading.
pub fn is_granular(api_version: &str, kind: &str, pointer: &str) -> bool {
    AtomicMaps::of(api_version, kind).is_some_and(|maps| !maps.contains(pointer))
}

/// The atomic maps of a built-in kind's schema.
pub struct AtomicMaps(&'static [Vec<String>]);

impl AtomicMaps {
    /// `None` where the schema is unknown (a custom resource).
    pub fn of(api_version: &str, kind: &str) -> Option<Self> {
        table()
            .get(&format!("{api_version}/{kind}"))
            .map(|patterns| Self(patterns))
    }

    /// Whether the schema keeps the map at `pointer` whole.
    pub fn contains(&self, pointer: &str) -> bool {
        let segments: Vec<&str> = pointer.split('/').skip(1).collect();
        self.0.iter().any(|pattern| {
            pattern.len() == segments.len()
                && pattern
                    .iter()
                    .zip(&segments)
                    .all(|(p, s)| p == "*" || p == s)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{AtomicMaps, is_granular};

    fn is_atomic(api_version: &str, kind: &str, pointer: &str) -> bool {
        AtomicMaps::of(api_version, kind).is_some_and(|maps| maps.contains(pointer))
    }

    #[test]
    fn a_selector_is_atomic_and_an_update_strategy_is_not() {
        assert!(!is_granular("apps/v1", "StatefulSet", "/spec/selector"));
        assert!(is_granular(
            "apps/v1",
            "StatefulSet",
            "/spec/updateStrategy"
        ));
        assert!(!is_granular(
            "apps/v1",
            "Deployment",
            "/spec/template/spec/containers/3/env/0/valueFrom/secretKeyRef"
        ));
        assert!(is_granular(
            "apps/v1",
            "Deployment",
            "/spec/template/spec/containers/3/resources"
        ));
        assert!(
            !is_granular("example.com/v1", "Widget", "/spec/anything"),
            "an unknown kind's maps are owned whole"
        );
        assert!(is_atomic(
            "policy/v1",
            "PodDisruptionBudget",
            "/spec/selector"
        ));
        assert!(!is_atomic("apps/v1", "StatefulSet", "/spec/updateStrategy"));
        assert!(!is_atomic("example.com/v1", "Widget", "/spec/anything"));
    }
}
