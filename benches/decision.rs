//! The full decision, parsing included, for a denied Deployment UPDATE review
//! (~8 KB per object, managedFields included), side by side with a bare
//! `serde_json::from_slice::<Value>` of the same body.
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
        b.iter(|| driftguard::review::parse(black_box(&body)).unwrap())
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
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
