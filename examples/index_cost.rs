//! What the index of listed objects costs as Applications grow: an
//! ApplicationSet creating `apps` Applications of `rules` ignore rules that
//! list `objects` objects in all, and at 1,000 / 2,500 / 5,000 / 10,000 (of
//! `apps`) the time one Application change takes (its listing changes: the
//! index update, then the snapshot published), the bytes charged, the live
//! heap and the process RSS. Run in release:
//!
//!     cargo run --release --example index_cost -- [apps] [rules] [objects] [changes] [label]
//!
//! Prints a table, then CSV (`label` in its first column) to plot. The same
//! file runs on a commit before the index was incremental (docs/benchmarks.md).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use driftguard::cluster::source_cache::{Kind, SourceCache, strip};
use driftguard::cluster::source_cost::Limits;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use driftguard_testkit::counting::{Counting, LIVE, arg};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Application `i` with `rules` ignore rules (one in five a jq expression)
/// listing `listed` Deployments of its namespace; `variant` renames the
/// last, so that the listing changes.
fn application(i: usize, rules: usize, listed: usize, variant: usize) -> DynamicObject {
    let ignore: Vec<Value> = (0..rules)
        .map(|r| {
            if r % 5 == 4 {
                json!({"group": "apps", "kind": "Deployment",
                       "jqPathExpressions": [format!(".spec.template.spec.containers[] | select(.name == \"c{r}\") | .image")]})
            } else {
                json!({"group": "apps", "kind": format!("Kind{r}"), "jsonPointers": [format!("/spec/field{r}")]})
            }
        })
        .collect();
    let resources: Vec<Value> = (0..listed)
        .map(|r| {
            let name = if r + 1 == listed && variant % 2 == 1 {
                format!("web-{r}-b")
            } else {
                format!("web-{r}")
            };
            json!({"group": "apps", "version": "v1", "kind": "Deployment", "namespace": format!("ns-{i}"),
                   "name": name, "status": "Synced", "health": {"status": "Healthy"}})
        })
        .collect();
    let mut o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": format!("app-{i}"), "namespace": "argocd", "uid": format!("uid-{i:06}")},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://git.example.com/apps.git", "path": format!("apps/{i}")},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("ns-{i}")},
                 "ignoreDifferences": ignore},
        "status": {"sync": {"status": "Synced"}, "resources": resources}
    }))
    .expect("an Application");
    strip(&mut o);
    o
}

fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Row {
    apps: usize,
    create_s: f64,
    update_p50: f64,
    update_p99: f64,
    publish_p50: f64,
    change_p50: f64,
    change_p99: f64,
    charged: usize,
    live: isize,
    rss: usize,
}

/// `changes` Application changes spread over the first `apps`, each applied
/// and then published as the watch does (the old snapshot dropped).
fn changes(
    cache: &mut SourceCache,
    variants: &mut [usize],
    args: (usize, usize),
    n: usize,
) -> [Vec<f64>; 3] {
    let (rules, listed) = args;
    let apps = variants.len();
    let mut published = cache.snapshot();
    let (mut update, mut publish, mut change) = (Vec::new(), Vec::new(), Vec::new());
    for c in 0..n {
        let i = (c * 7919) % apps;
        variants[i] += 1;
        let object = application(i, rules, listed, variants[i]);
        let start = Instant::now();
        assert!(cache.apply(Kind::Application, &object), "a change");
        let applied = Instant::now();
        published = cache.snapshot();
        let done = Instant::now();
        update.push(micros(applied - start));
        publish.push(micros(done - applied));
        change.push(micros(done - start));
    }
    drop(published);
    [update, publish, change]
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let (apps, rules, objects, n) = (arg(1, 10_000), arg(2, 10), arg(3, 100_000), arg(4, 200));
    let label = std::env::args()
        .nth(5)
        .unwrap_or_else(|| "after".to_owned());
    let listed = objects / apps;
    let steps: Vec<usize> = [1_000, 2_500, 5_000, 10_000]
        .into_iter()
        .filter(|s| *s < apps)
        .chain([apps])
        .collect();
    let base = LIVE.load(Ordering::Relaxed);
    // No source refused: the total cap (128 MiB) admits about 2,000 of
    // these, whose jq rules are charged per rule though compiled once.
    let mut cache = SourceCache::new("argocd").with_limits(Limits {
        total: usize::MAX / 4,
        ..Limits::default()
    });
    let mut rows = Vec::new();
    let mut made = 0;
    let mut variants = vec![0; apps];
    let mut create = Duration::ZERO;
    for &step in &steps {
        let start = Instant::now();
        for i in made..step {
            cache.apply(Kind::Application, &application(i, rules, listed, 0));
        }
        create += start.elapsed();
        made = step;
        let [mut update, mut publish, mut change] =
            changes(&mut cache, &mut variants[..step], (rules, listed), n);
        let snapshot = cache.snapshot();
        assert_eq!(
            snapshot.planned.len(),
            step * listed,
            "every object indexed"
        );
        rows.push(Row {
            apps: step,
            create_s: create.as_secs_f64(),
            update_p50: quantile(&mut update, 0.5),
            update_p99: quantile(&mut update, 0.99),
            publish_p50: quantile(&mut publish, 0.5),
            change_p50: quantile(&mut change, 0.5),
            change_p99: quantile(&mut change, 0.99),
            charged: cache.charged(),
            live: LIVE.load(Ordering::Relaxed) - base,
            rss: rss(),
        });
    }
    println!(
        "{label}: {rules} rules and {listed} listed objects per Application, {n} changes per row (µs)"
    );
    println!(
        "label,apps,create_s,update_p50_us,update_p99_us,publish_p50_us,change_p50_us,change_p99_us,charged_bytes,live_bytes,rss_bytes"
    );
    for r in &rows {
        println!(
            "{label},{},{:.3},{:.1},{:.1},{:.1},{:.1},{:.1},{},{},{}",
            r.apps,
            r.create_s,
            r.update_p50,
            r.update_p99,
            r.publish_p50,
            r.change_p50,
            r.change_p99,
            r.charged,
            r.live,
            r.rss
        );
    }
}
