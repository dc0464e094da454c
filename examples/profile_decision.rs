//! Runs the benchmark's decision in a loop, for profilers (callgrind, perf):
//! `profile_decision [N] [parse]`; `perf stat -e instructions:u` of both
//! gives the decision's instructions per review against a bare parse's,
//! a count the machine's load does not change.
#[path = "../benches/support/policy.rs"]
mod policy;

use driftguard::{Endpoint, Policy, judge};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use serde_json::Value;

fn main() {
    // PROFILE_BODY / PROFILE_POLICY: another review and policy (the
    // apiserver benchmark's are in benches/data).
    let body = std::fs::read(std::env::var("PROFILE_BODY").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/deployment-update-image.json"
        )
        .to_owned()
    }))
    .unwrap();
    let body = serde_json::to_vec(&serde_json::from_slice::<Value>(&body).unwrap()).unwrap();
    let yaml = match std::env::var("PROFILE_POLICY") {
        Ok(path) => std::fs::read_to_string(path).unwrap(),
        Err(_) => policy::twenty_rules(),
    };
    let policy = Policy::from_yaml(&yaml, "profile").unwrap();
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let now = "2026-11-29T10:00:00Z".parse().unwrap();
    let bare = std::env::args().nth(2).as_deref() == Some("parse");
    let mut total = 0;
    for _ in 0..n {
        total += if bare {
            // The benchmark's baseline, for instruction-count ratios (callgrind).
            serde_json::from_slice::<serde_json::Value>(&body)
                .unwrap()
                .as_object()
                .map_or(0, |m| m.len())
        } else {
            judge(&policy, &body, Endpoint::Validate, None, now)
                .unwrap()
                .to_json()
                .len()
        };
    }
    println!("{total}");
}
