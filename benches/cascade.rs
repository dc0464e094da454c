//! A Namespace DELETE judged against the tools' records (`Sources::planned`)
//! of 1k, 10k and 100k objects, most in other namespaces: the cascade guard
//! reads the index's keys of that namespace, never every listing. Side by side with the
//! Deployment UPDATE of benches/decision.rs, a normal review, for the ratio.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use driftguard::drift::Manager;
use driftguard::sources::Sources;
use driftguard::{Endpoint, Policy, judge_request};
use jiff::Timestamp;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn planned(objects: usize) -> Sources {
    let by = Arc::new(Manager::FluxKustomization {
        namespace: "flux-system".into(),
        name: "apps".into(),
    });
    let planned = (0..objects).map(|i| {
        let key = format!("apps/Deployment:ns-{}/web-{i}", i % 500);
        (key.into(), by.clone())
    });
    Sources {
        planned: Arc::new(planned.collect()),
        ..Default::default()
    }
}

fn namespace_delete() -> Vec<u8> {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-7"}});
    serde_json::to_vec(
        &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "ns-7", "namespace": "ns-7", "operation": "DELETE",
            "userInfo": {"username": "alice", "groups": ["developers"]},
            "oldObject": ns}}),
    )
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let now: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
    let policy = Policy::embedded();
    let update = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/deployment-update-image.json"
    ))
    .unwrap();
    let update = serde_json::to_vec(&serde_json::from_slice::<Value>(&update).unwrap()).unwrap();
    let delete = namespace_delete();
    let mut g = c.benchmark_group("cascade");
    let judge = |body: &[u8], sources: &Sources| {
        let req = driftguard::request::parse(body).unwrap();
        judge_request(
            &policy,
            &req,
            Endpoint::Validate,
            None,
            Some(sources),
            now,
            &driftguard::deadline::Deadline::none(),
        )
        .unwrap()
        .to_json()
    };
    let none = Sources::default();
    g.bench_function("deployment-update", |b| {
        b.iter(|| judge(black_box(&update), &none))
    });
    for n in [1_000, 10_000, 100_000] {
        let sources = planned(n);
        let d = driftguard::request::parse(&delete).unwrap();
        let judged = judge_request(
            &policy,
            &d,
            Endpoint::Validate,
            None,
            Some(&sources),
            now,
            &driftguard::deadline::Deadline::none(),
        )
        .unwrap();
        assert_eq!(judged.decision.verdict.as_str(), "deny");
        g.bench_function(format!("namespace-delete-{n}-listed"), |b| {
            b.iter(|| judge(black_box(&delete), &sources))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
