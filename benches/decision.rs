//! The full decision, parsing included, for a denied Deployment UPDATE review
//! (~8 KB per object, managedFields included), side by side with a bare
//! `serde_json::from_slice::<Value>` of the same body.
//!
//! Then the per-path curve: `kubectl patch` adding 1k, 10k and 100k
//! ConfigMap keys on a Flux- and an Argo CD-managed object (each key a
//! drifted path); the time per path should stay flat. And what the
//! cooperative deadline's checkpoints and the server's memory budget add to
//! an ordinary review.
//!
//! `scripts/bench-decision.sh` runs this and prints the ratios.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use driftguard::{Endpoint, Policy, judge};
use jiff::Timestamp;
use serde_json::Value;

// The allocator the driftguard binary ships with (src/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/policy.rs"]
mod policy;

use driftguard_testkit::big_reviews as big;
use policy::{thousand_other_kinds, twenty_rules};

fn bench(c: &mut Criterion) {
    let body = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/deployment-update-image.json"
    ))
    .unwrap();
    // The apiserver sends compact JSON.
    let body = serde_json::to_vec(&serde_json::from_slice::<Value>(&body).unwrap()).unwrap();
    let now: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
    let rules20 = Policy::from_yaml(&twenty_rules(), "bench").unwrap();
    let rules1020 =
        Policy::from_yaml(&(twenty_rules() + &thousand_other_kinds()), "bench").unwrap();
    let verdict = judge(&rules20, &body, Endpoint::Validate, None, now).unwrap();
    assert!(
        !verdict.decision.drifted_paths.is_empty(),
        "the review must be a denial"
    );

    let no_rules = Policy::from_yaml("{}", "bench").unwrap();
    let mut g = c.benchmark_group("deployment-update");
    // Breakdown: the typed review parse alone, and the decision without rules.
    g.bench_function("parse-review", |b| {
        b.iter(|| driftguard::request::parse(black_box(&body)).unwrap())
    });
    g.bench_function("decide-no-rules", |b| {
        b.iter(|| {
            judge(&no_rules, black_box(&body), Endpoint::Validate, None, now)
                .unwrap()
                .to_json()
        })
    });
    g.bench_function("bare-parse", |b| {
        b.iter(|| serde_json::from_slice::<Value>(black_box(&body)).unwrap())
    });
    g.bench_function("decide-20-rules", |b| {
        b.iter(|| {
            judge(&rules20, black_box(&body), Endpoint::Validate, None, now)
                .unwrap()
                .to_json()
        })
    });
    g.bench_function("decide-1020-rules", |b| {
        b.iter(|| {
            judge(&rules1020, black_box(&body), Endpoint::Validate, None, now)
                .unwrap()
                .to_json()
        })
    });
    // The deadline's checkpoints as the server runs them (a deadline made
    // per decision and passed down), and the memory budget's reservation,
    // taken and given back.
    g.bench_function("decide-20-rules-deadline-set", |b| {
        let far = std::time::Instant::now() + std::time::Duration::from_secs(3600);
        b.iter(|| {
            let deadline = driftguard::deadline::Deadline::at(far);
            let req = driftguard::request::parse(black_box(&body)).unwrap();
            let validate = Endpoint::Validate;
            driftguard::judge_request(&rules20, &req, validate, None, None, now, &deadline)
                .unwrap()
                .to_json()
        })
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let budget = driftguard::server::budget::MemoryBudget::new(
        80 << 20,
        prometheus_client::metrics::gauge::Gauge::default(),
    );
    g.bench_function("budget-reserve-release", |b| {
        let far = std::time::Instant::now() + std::time::Duration::from_secs(3600);
        b.iter(|| {
            runtime.block_on(async {
                let mut r = budget.reservation();
                r.grow_to(black_box(body.len() * 40), far).await.unwrap();
                r
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("drifted-paths");
    g.sample_size(10);
    for (tool, flux) in [("flux", true), ("argocd", false)] {
        for n in [1_000, 10_000, 100_000] {
            let review = big::configmap_patch(n, flux);
            let judged = judge(&no_rules, &review, Endpoint::Validate, None, now).unwrap();
            assert!(judged.decision.drifted_paths.len() >= n, "{tool} {n}");
            g.throughput(criterion::Throughput::Elements(n as u64));
            g.bench_function(format!("{tool}-{n}"), |b| {
                b.iter(|| {
                    judge(&no_rules, black_box(&review), Endpoint::Validate, None, now)
                        .unwrap()
                        .to_json()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
