//! What the index of listed objects costs as Applications grow: an
//! ApplicationSet creating `apps` Applications of `rules` ignore rules that
//! list `objects` objects in all, and at 1,000 / 2,500 / 5,000 / 10,000 (of
//! `apps`) the time one Application change takes (its listing changes: the
//! index update, then the snapshot published), the bytes charged, the live
//! heap and the process RSS. Meanwhile a second thread judges writes against
//! the latest published snapshot (a managed Deployment's image change, a
//! manual CREATE of a listed object, a Namespace DELETE, in turn): the
//! decision p50 and p99 under that churn. Run in release:
//!
//!     cargo run --release --example index_cost -- [apps] [rules] [objects] [changes] [label]
//!
//! Prints CSV (`label` in its first column) to plot. The same
//! file runs on a commit before the index was incremental (docs/benchmarks.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use driftguard::cluster::source_cache::{Kind, SourceCache, strip};
use driftguard::cluster::source_cost::Limits;
use driftguard::deadline::Deadline;
use driftguard::sources::Sources;
use driftguard::{Endpoint, Policy, judge_request};
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
    decision_p50: f64,
    decision_p99: f64,
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
    published: &RwLock<Arc<Sources>>,
) -> [Vec<f64>; 3] {
    let (rules, listed) = args;
    let apps = variants.len();
    let (mut update, mut publish, mut change) = (Vec::new(), Vec::new(), Vec::new());
    for c in 0..n {
        let i = (c * 7919) % apps;
        variants[i] += 1;
        let object = application(i, rules, listed, variants[i]);
        let start = Instant::now();
        assert!(cache.apply(Kind::Application, &object), "a change");
        let applied = Instant::now();
        let snapshot = Arc::new(cache.snapshot());
        let done = Instant::now();
        // The old snapshot is dropped here, as the watch drops it.
        *published.write().expect("not poisoned") = snapshot;
        update.push(micros(applied - start));
        publish.push(micros(done - applied));
        change.push(micros(done - start));
        // 1,000 changes a second: 20 times Argo CD rewriting 10,000
        // Applications' status every 3 minutes.
        std::thread::sleep(Duration::from_millis(1));
    }
    [update, publish, change]
}

/// The review of write `w` (of three kinds, in turn) to Application `i`'s
/// objects, as the apiserver sends it.
fn review(w: usize, i: usize) -> Vec<u8> {
    let deployment = |image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web-0", "namespace": format!("ns-{i}"), "uid": "d",
                "annotations": {"argocd.argoproj.io/tracking-id": format!("app-{i}:apps/Deployment:ns-{i}/web-0")}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c0", "image": image}]}}}})
    };
    let (operation, resource, kind, name, old, new) = match w % 3 {
        0 => (
            "UPDATE",
            ("apps", "deployments"),
            ("apps", "Deployment"),
            "web-0".to_owned(),
            Some(deployment("web:1")),
            Some(deployment("web:2")),
        ),
        1 => (
            "CREATE",
            ("apps", "deployments"),
            ("apps", "Deployment"),
            "web-1".to_owned(),
            None,
            {
                let mut d = deployment("web:1");
                d["metadata"] = json!({"name": "web-1", "namespace": format!("ns-{i}")});
                Some(d)
            },
        ),
        _ => (
            "DELETE",
            ("", "namespaces"),
            ("", "Namespace"),
            format!("ns-{i}"),
            Some(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{i}")}}),
            ),
            None,
        ),
    };
    let namespace = if w % 3 == 2 {
        name.clone()
    } else {
        format!("ns-{i}")
    };
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": kind.0, "version": "v1", "kind": kind.1},
            "resource": {"group": resource.0, "version": "v1", "resource": resource.1},
            "name": name, "namespace": namespace, "operation": operation,
            "userInfo": {"username": "alice", "groups": ["developers"]},
            "object": new, "oldObject": old}}),
    )
    .expect("a review")
}

/// Judges writes to the first `apps` Applications' objects against the
/// latest snapshot until `stop`: each decision's time (parse and judge), µs.
fn decide(apps: usize, published: &RwLock<Arc<Sources>>, stop: &AtomicBool) -> Vec<f64> {
    let policy = Policy::embedded();
    let now = "2026-12-05T10:00:00Z".parse().expect("a time");
    let mut times = Vec::new();
    let mut w = 0;
    while !stop.load(Ordering::Relaxed) {
        let body = review(w, (w * 31) % apps);
        let sources = published.read().expect("not poisoned").clone();
        let start = Instant::now();
        let req = driftguard::request::parse(&body).expect("a review");
        let judged = judge_request(
            &policy,
            &req,
            Endpoint::Validate,
            None,
            Some(&sources),
            now,
            &Deadline::none(),
        )
        .expect("judged");
        times.push(micros(start.elapsed()));
        assert_eq!(
            judged.decision.verdict.as_str(),
            "deny",
            "write {w} is drift"
        );
        w += 1;
        // A write now and then, as a cluster sends them, not a busy loop.
        std::thread::sleep(Duration::from_micros(200));
    }
    times
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
        let published = RwLock::new(Arc::new(cache.snapshot()));
        let stop = AtomicBool::new(false);
        let ([mut update, mut publish, mut change], mut decisions) = std::thread::scope(|s| {
            let judge = s.spawn(|| decide(step, &published, &stop));
            let churn = changes(
                &mut cache,
                &mut variants[..step],
                (rules, listed),
                n,
                &published,
            );
            stop.store(true, Ordering::Relaxed);
            (churn, judge.join().expect("the judging thread"))
        });
        drop(published);
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
            decision_p50: quantile(&mut decisions, 0.5),
            decision_p99: quantile(&mut decisions, 0.99),
            charged: cache.charged(),
            live: LIVE.load(Ordering::Relaxed) - base,
            rss: rss(),
        });
    }
    println!(
        "{label}: {rules} rules and {listed} listed objects per Application, {n} changes per row (µs)"
    );
    println!(
        "label,apps,create_s,update_p50_us,update_p99_us,publish_p50_us,change_p50_us,change_p99_us,decision_p50_us,decision_p99_us,charged_bytes,live_bytes,rss_bytes"
    );
    for r in &rows {
        println!(
            "{label},{},{:.3},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{},{},{}",
            r.apps,
            r.create_s,
            r.update_p50,
            r.update_p99,
            r.publish_p50,
            r.change_p50,
            r.change_p99,
            r.decision_p50,
            r.decision_p99,
            r.charged,
            r.live,
            r.rss
        );
    }
}
