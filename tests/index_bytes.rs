//! The index of what sources list is charged to the byte budget: the heap a
//! cache and its published snapshot hold for Applications' listings is at
//! most what the Applications are charged for them. One test in this binary:
//! it counts every allocation.

use std::sync::atomic::Ordering;

use driftguard::cluster::source_cache::{Kind, SourceCache, strip};
use driftguard::cluster::source_cost::Limits;
use driftguard_testkit::counting::{Counting, LIVE};
use kube::api::DynamicObject;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Application `i` listing `listed` Deployments of its namespace, or, when
/// `spread`, each object in a namespace and a custom group of its own: what
/// makes the index's views by namespace and by kind cost most.
fn application(i: usize, listed: usize, spread: bool) -> DynamicObject {
    let resources: Vec<Value> = (0..listed)
        .map(|r| {
            // Short names: the charge per byte of a key is then least.
            let (group, namespace, kind) = if spread {
                (format!("g{r}.io"), format!("n{i}-{r}"), "D")
            } else {
                ("apps".to_owned(), format!("ns-{i}"), "Deployment")
            };
            json!({"group": group, "version": "v1", "kind": kind,
                   "namespace": namespace, "name": format!("web-{r}")})
        })
        .collect();
    let mut o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("app-{i}"), "namespace": "argocd", "uid": format!("uid-{i}")},
        "spec": {"project": "default",
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("ns-{i}")}},
        "status": {"resources": resources}
    }))
    .expect("an Application");
    strip(&mut o);
    o
}

/// The bytes held and charged for `apps` Applications listing `listed`
/// objects each, with a snapshot published.
fn held_and_charged(apps: usize, listed: usize, spread: bool) -> (isize, isize) {
    let objects: Vec<_> = (0..apps).map(|i| application(i, listed, spread)).collect();
    let uncapped = Limits {
        per_source: usize::MAX / 4,
        per_namespace: usize::MAX / 4,
        total: usize::MAX / 4,
    };
    let base = LIVE.load(Ordering::Relaxed);
    let mut cache = SourceCache::new("argocd").with_limits(uncapped);
    for o in &objects {
        cache.apply(Kind::Application, o);
    }
    let snapshot = cache.snapshot();
    let held = LIVE.load(Ordering::Relaxed) - base;
    let charged = cache.charged() as isize;
    drop((snapshot, cache));
    (held, charged)
}

#[test]
fn what_the_index_of_listed_objects_holds_is_charged() {
    let (apps, listed) = (200, 50);
    let (held_none, charged_none) = held_and_charged(apps, 0, false);
    for spread in [false, true] {
        let (held, charged) = held_and_charged(apps, listed, spread);
        let keys = (apps * listed) as isize;
        let (held, charged) = ((held - held_none) / keys, (charged - charged_none) / keys);
        assert!(
            held <= charged,
            "per listed object (spread: {spread}): {held} bytes held, {charged} charged"
        );
    }
}
