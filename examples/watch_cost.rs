//! The cost of one Application event under `--watch-argocd`, before (every
//! event re-serialized every Application and recompiled every rule) and after
//! (the event's own object, only when what driftguard reads changed), side by
//! side; and the memory each holds. Run in release:
//!
//!     cargo run --release --example watch_cost -- [apps] [rules per app] [events] [jq every] [own jq]
//!
//! With `own jq` 1, every Application's jq expressions are its own text, so
//! none is shared: the memory of one compiled program per Application.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use driftguard::cluster::source_cache::{Kind, SourceCache, strip};
use driftguard::drift::ArgoCdSources;
use driftguard::sources::{self, Sources};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use driftguard_testkit::counting::{Counting, LIVE, arg};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// One ignore rule in this many is a jq expression (0: none).
static JQ_EVERY: AtomicUsize = AtomicUsize::new(5);
/// 1: each Application's jq expressions name it, so none is shared.
static OWN_JQ: AtomicUsize = AtomicUsize::new(0);

/// An Application as Argo CD keeps it: `rules` ignoreDifferences (some jq
/// expressions), and a status with a resource list.
fn application(i: usize, rules: usize, revision: usize, spec_rev: usize) -> DynamicObject {
    let jq_every = JQ_EVERY.load(Ordering::Relaxed);
    let ignore: Vec<Value> = (0..rules)
        .map(|r| {
            if jq_every > 0 && r % jq_every == jq_every - 1 {
                let name = if OWN_JQ.load(Ordering::Relaxed) == 1 {
                    format!("c{r}-app{i}")
                } else {
                    format!("c{r}")
                };
                json!({"group": "apps", "kind": "Deployment",
                       "jqPathExpressions": [format!(".spec.template.spec.containers[] | select(.name == \"{name}\") | .image")]})
            } else {
                json!({"group": "apps", "kind": format!("Kind{r}"),
                       "jsonPointers": [format!("/spec/field{r}/rev{spec_rev}")]})
            }
        })
        .collect();
    let resources: Vec<Value> = (0..20)
        .map(|r| {
            json!({"group": "apps", "version": "v1", "kind": "Deployment",
                        "namespace": format!("ns-{i}"), "name": format!("web-{r}"),
                        "status": "Synced", "health": {"status": "Healthy"}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("app-{i}"), "namespace": "argocd", "uid": format!("uid-{i}"),
                     "generation": 1 + spec_rev, "resourceVersion": revision.to_string()},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://git.example.com/apps.git", "path": format!("apps/{i}")},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("ns-{i}")},
                 "ignoreDifferences": ignore},
        "status": {"sync": {"status": "Synced", "revision": format!("{revision:040}")},
                   "health": {"status": "Healthy"}, "resources": resources,
                   "reconciledAt": format!("2026-11-30T12:00:{:02}Z", revision % 60)}
    }))
    .expect("an Application")
}

/// The old `Watches::rebuild`, for Applications: serialize every stored
/// object and compile every rule, whatever the event changed.
fn old_rebuild(store: &kube::runtime::reflector::Store<DynamicObject>) -> Sources {
    let values: Vec<Value> = store
        .state()
        .iter()
        .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
        .collect();
    let (applications, _errors) = sources::applications(&values);
    let (overrides, _) = sources::argocd_overrides(&Default::default());
    let accounts = sources::sync_accounts(&applications, &[], false, "argocd");
    Sources::of_argocd(ArgoCdSources {
        applications: applications.into_iter().map(Arc::new).collect(),
        overrides: Arc::new(overrides),
        sync_accounts: accounts.into_iter().map(Arc::new).collect(),
        namespace: "argocd".into(),
        ..ArgoCdSources::default()
    })
}

/// Mean microseconds of `f` over `n` calls: single-threaded CPU work, so
/// wall time on an idle core is its CPU time.
fn per_event(n: usize, mut f: impl FnMut(usize)) -> f64 {
    let start = Instant::now();
    for i in 0..n {
        f(i);
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() {
    let (apps, rules, events) = (arg(1, 2000), arg(2, 10), arg(3, 20));
    JQ_EVERY.store(arg(4, 5), Ordering::Relaxed);
    OWN_JQ.store(arg(5, 0), Ordering::Relaxed);
    let objects: Vec<DynamicObject> = (0..apps).map(|i| application(i, rules, 1, 0)).collect();
    println!(
        "{apps} Applications x {rules} ignore rules = {} rules (one in {} jq{}); {events} events per row before, 50x after",
        apps * rules,
        JQ_EVERY.load(Ordering::Relaxed),
        if OWN_JQ.load(Ordering::Relaxed) == 1 {
            ", each Application's own"
        } else {
            ""
        }
    );

    // Before: a reflector store of whole objects, and a full rebuild per event.
    let base = live();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "Application",
    ));
    let mut writer = Writer::<DynamicObject>::new(ar);
    for o in &objects {
        writer.apply_watcher_event(&Event::Apply(o.clone()));
    }
    let store = writer.as_reader();
    let mut published = Arc::new(old_rebuild(&store));
    let old_bytes = live() - base;
    let old_status = per_event(events, |n| {
        writer.apply_watcher_event(&Event::Apply(application(n % apps, rules, n + 2, 0)));
        published = Arc::new(old_rebuild(&store));
    });
    let old_spec = per_event(events, |n| {
        writer.apply_watcher_event(&Event::Apply(application(n % apps, rules, n + 2, n + 1)));
        published = Arc::new(old_rebuild(&store));
    });
    drop((writer, store, published));

    // After: compiled entries only, one recompiled per changed object.
    let base = live();
    let mut cache = SourceCache::new("argocd");
    let stripped: Vec<DynamicObject> = objects
        .iter()
        .cloned()
        .map(|mut o| {
            strip(&mut o);
            o
        })
        .collect();
    cache.relist(Kind::Application, &stripped);
    drop(stripped);
    let mut published = Arc::new(cache.snapshot());
    let new_bytes = live() - base;
    let charged = cache.charged();
    // Each row builds its event object as the watch delivers it, like the rows
    // above; cheap now, so more events for a steadier mean.
    let events = events * 50;
    let new_status = per_event(events, |n| {
        let mut o = application(n % apps, rules, n + 2, 0);
        strip(&mut o);
        if cache.apply(Kind::Application, &o) {
            published = Arc::new(cache.snapshot());
        }
    });
    let new_spec = per_event(events, |n| {
        let mut o = application(n % apps, rules, n + 2, n + 1);
        strip(&mut o);
        if cache.apply(Kind::Application, &o) {
            published = Arc::new(cache.snapshot());
        }
    });
    assert_eq!(published.applications().count(), apps);
    // What building an event object alone costs, included in every row.
    let floor = per_event(events, |n| {
        let mut o = application(n % apps, rules, n + 2, 0);
        strip(&mut o);
        std::hint::black_box(o);
    });

    println!("Time per Application event (µs, one thread):");
    println!("  {:<28}{:>14}{:>14}", "", "before", "after");
    println!(
        "  {:<28}{old_status:>14.1}{new_status:>14.1}",
        "status-only change"
    );
    println!("  {:<28}{old_spec:>14.1}{new_spec:>14.1}", "spec change");
    println!("  (building the event object alone: {floor:.1} µs)");
    println!("Live heap held (MiB):");
    println!(
        "  {:<28}{:>14.1}{:>14.1}",
        "store + sources",
        old_bytes as f64 / 1048576.0,
        new_bytes as f64 / 1048576.0
    );
    println!(
        "  {:<28}{:>28.1}",
        "charged (--sources-max-bytes)",
        charged as f64 / 1048576.0
    );
}
