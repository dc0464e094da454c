//! The heap one Application costs in the source cache, by what it carries:
//! the figures behind `src/cluster/source_cost.rs`'s estimate.
//!
//!     cargo run --example source_cost -- [rules] [listed]
//!
//! Prints the live bytes each shape of rule costs per rule (every rule its
//! own text, so nothing is shared), and what one tenant's Application with
//! `rules` glob rules and `listed` status.resources holds, without caps (as
//! before the caps) and refused under the default ones.

use std::sync::atomic::Ordering;

use driftguard::cluster::source_cache::{Kind, SourceCache, strip};
use driftguard::cluster::source_cost::{self, Limits};
use kube::api::DynamicObject;
use serde_json::{Value, json};

use driftguard_testkit::counting::{Counting, LIVE, arg};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn application(ns: &str, rules: Vec<Value>, listed: usize) -> DynamicObject {
    let resources: Vec<Value> = (0..listed)
        .map(|r| {
            json!({"group": "apps", "version": "v1", "kind": "Deployment",
                        "namespace": ns, "name": format!("web-{r:06}"), "status": "Synced"})
        })
        .collect();
    let mut o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "big", "namespace": ns, "uid": format!("uid-{ns}")},
        "spec": {"project": "default",
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": ns},
                 "ignoreDifferences": rules},
        "status": {"resources": resources}
    }))
    .expect("an Application");
    strip(&mut o);
    o
}

/// Live bytes the cache and one published snapshot hold for `object`.
fn held(object: &DynamicObject) -> isize {
    held_with(object, UNCAPPED)
}

const UNCAPPED: Limits = Limits {
    per_source: usize::MAX / 4,
    per_namespace: usize::MAX / 4,
    total: usize::MAX / 4,
};

fn held_with(object: &DynamicObject, limits: Limits) -> isize {
    let base = LIVE.load(Ordering::Relaxed);
    let mut cache = SourceCache::new("argocd").with_limits(limits);
    cache.apply(Kind::Application, object);
    let snapshot = cache.snapshot();
    let bytes = LIVE.load(Ordering::Relaxed) - base;
    drop((snapshot, cache));
    bytes
}

fn main() {
    let (rules, listed) = (arg(1, 6000), arg(2, 0));
    let n = 500;
    let empty = held(&application("t", vec![], 0));
    let estimate = |o: &DynamicObject| source_cost::entry(false, &o.data, true) as f64;
    let per = |make: &dyn Fn(usize) -> Value| {
        let object = application("t", (0..n).map(make).collect(), 0);
        let base = application("t", vec![], 0);
        let charged = (estimate(&object) - estimate(&base)) / n as f64;
        ((held(&object) - empty) as f64 / n as f64, charged)
    };
    println!("bytes per rule (mean of {n}, each its own text): held, charged");
    let long = |r: usize| {
        (0..40)
            .map(|i| format!("k{r}x{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let shapes: [(&str, &dyn Fn(usize) -> Value); 9] = [
        (
            "literal group/kind, 1 pointer",
            &|r| json!({"group": "apps", "kind": format!("K{r}"), "jsonPointers": [format!("/spec/f{r}")]}),
        ),
        (
            "glob kind, 1 pointer",
            &|r| json!({"group": "apps", "kind": format!("K{r}*"), "jsonPointers": [format!("/spec/f{r}")]}),
        ),
        (
            "glob group and kind",
            &|r| json!({"group": format!("g{r}*"), "kind": format!("K{r}*"), "jsonPointers": [format!("/spec/f{r}")]}),
        ),
        (
            "1 jq expression",
            &|r| json!({"kind": "Deployment", "jqPathExpressions": [format!(".spec.template.spec.containers[] | select(.name == \"c{r}\") | .image")]}),
        ),
        (
            "glob kind of ~300 bytes",
            &|r| json!({"kind": format!("{{{}}}", long(r)), "jsonPointers": ["/spec"]}),
        ),
        (
            "jq of ~600 bytes",
            &|r| json!({"kind": "D", "jqPathExpressions": [(0..40).map(|i| format!(".a{r}x{i}")).collect::<Vec<_>>().join(", ")]}),
        ),
        (
            "jq of 60 short paths",
            &|r| json!({"kind": "D", "jqPathExpressions": [format!(".a{r},{}", (0..60).map(|i| format!(".x{i}")).collect::<Vec<_>>().join(","))]}),
        ),
        (
            "glob of 100 one-letter choices",
            &|r| json!({"kind": format!("K{r}{{{}}}", ["a"; 100].join(",")), "jsonPointers": ["/spec"]}),
        ),
        (
            "1 managedFieldsManager",
            &|r| json!({"kind": "Deployment", "managedFieldsManagers": [format!("manager-{r}")]}),
        ),
    ];
    for (what, make) in shapes {
        let (held, charged) = per(make);
        println!("  {what:<32}{held:>10.0}{charged:>10.0}");
    }
    let listing = application("argocd", vec![], 1000);
    println!(
        "bytes per status.resources entry: {:.0}",
        (held(&listing) - held(&application("argocd", vec![], 0))) as f64 / 1000.0
    );
    let big: Vec<Value> = (0..rules)
        .map(|r| json!({"group": "*", "kind": format!("Kind{r}*"), "jsonPointers": [format!("/spec/f{r}")]}))
        .collect();
    let object = application("tenant", big, listed);
    let mib = |limits| held_with(&object, limits) as f64 / 1048576.0;
    println!(
        "one Application, {rules} glob rules, {listed} listed: {:.1} MiB held uncapped, {:.3} MiB refused by the default caps",
        mib(UNCAPPED),
        mib(Limits::default())
    );
}
