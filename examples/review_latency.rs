//! Where a review's time goes inside driftguard, without HTTP: for one body,
//! side by side and interleaved, the bare parse (`serde_json::Value`), the
//! decision run inline (parse + `judge_request` + answer bytes), and the
//! server's own path (`Reviewer::answer`: parse, the decision pool's hand-off
//! and back, metrics, the audit record). Writes are spaced as a single
//! `kubectl` writer spaces them, so the decision threads are asleep when a
//! review arrives, as they are in a cluster. The server's logging is on, its
//! audit lines written to a sink. The server's path runs twice:
//! as configured (decided on the thread that read the review) and with
//! `--decide-here-max-bytes 0` (every decision handed to the pool).
//!
//! Usage: cargo run --release --example review_latency -- [N] [GAP_MICROS] [jq]
//! [--body REVIEW.json] [--policy POLICY.yaml] (default 400 reviews, 2000 µs
//! apart, tests/data/deployment-update-image.json, 17 JSON-pointer rules; `jq`
//! adds the decision benchmark's 3 jq rules). Prints p50/p90/max of each, and
//! each p50 as a ratio to the bare parse. scripts/bench-apiserver.sh runs it
//! on a review the apiserver sent, with its policy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use driftguard::decider::Decider;
use driftguard::metrics::Metrics;
use driftguard::service::{OnError, PolicyHandle, Reviewer};
use driftguard::{Endpoint, Policy, judge_request};
use serde_json::Value;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/support/policy.rs"]
mod policy;

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(name: &str, mut micros: Vec<u64>, base_p50: Option<u64>) -> u64 {
    micros.sort_unstable();
    let p50 = percentile(&micros, 0.5);
    let ratio = base_p50.map_or(String::new(), |b| {
        format!("  = {:.2}x bare parse", p50 as f64 / b.max(1) as f64)
    });
    println!(
        "{name:<28} p50 {p50:>6} µs  p90 {:>6} µs  max {:>6} µs{ratio}",
        percentile(&micros, 0.9),
        micros[micros.len() - 1]
    );
    p50
}

/// What to time: `[N] [GAP_MICROS] [jq] [--body REVIEW.json] [--policy POLICY.yaml]`.
struct Options {
    n: usize,
    gap: Duration,
    with_jq: bool,
    body: Option<String>,
    policy: Option<String>,
}

fn options() -> Options {
    let mut o = Options {
        n: 400,
        gap: Duration::from_micros(2000),
        with_jq: false,
        body: None,
        policy: None,
    };
    let mut args = std::env::args().skip(1);
    let mut numbers = 0;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "jq" => o.with_jq = true,
            "--body" => o.body = args.next(),
            "--policy" => o.policy = args.next(),
            number => {
                let value: u64 = number.parse().expect("N and GAP_MICROS are numbers");
                match numbers {
                    0 => o.n = value as usize,
                    _ => o.gap = Duration::from_micros(value),
                }
                numbers += 1;
            }
        }
    }
    o
}

#[tokio::main]
async fn main() {
    let Options {
        n,
        gap,
        with_jq,
        body,
        policy: policy_file,
    } = options();
    let body = std::fs::read(body.as_deref().unwrap_or(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/deployment-update-image.json"
    )))
    .expect("the review body reads");
    // The apiserver sends compact JSON.
    let body = serde_json::to_vec(&serde_json::from_slice::<Value>(&body).unwrap()).unwrap();
    // `jq`: the decision benchmark's 20 rules, 3 of them jq (every decision
    // moves to the pool); otherwise its 17 JSON-pointer rules alone.
    let yaml = match (&policy_file, with_jq) {
        (Some(file), _) => std::fs::read_to_string(file).expect("the policy reads"),
        (None, true) => policy::twenty_rules(),
        (None, false) => policy::pointer_rules(),
    };
    let policy = Policy::from_yaml(&yaml, "latency").unwrap();
    // As the server logs: its span, diagnostics on stderr (RUST_LOG), and the
    // audit record through its queue and writer thread (to a sink here).
    driftguard::logging::init_to(driftguard::logging::LogFormat::Json, std::io::sink());
    let reviewer = |decide_here_max_bytes| Reviewer {
        policy: PolicyHandle::new(Policy::from_yaml(&yaml, "latency").unwrap()),
        sources: None,
        parents: None,
        events: None,
        records: None,
        metrics: Arc::new(Metrics::default()),
        decider: Decider::new(Decider::default_threads(), 64).unwrap(),
        on_error: OnError::Allow,
        decision_timeout: Duration::from_secs(10),
        decide_here_max_bytes,
        hub_names: Vec::new(),
    };
    // The server as configured (small reviews decided here first), and with
    // every decision handed to the pool (`--decide-here-max-bytes 0`).
    let (here, pooled) = (reviewer(64 * 1024), reviewer(0));
    let (mut bare, mut typed, mut inline, mut server, mut pool) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n + 20 {
        let warm = i >= 20;
        // A different order each turn, so no path always runs first.
        for step in 0..5 {
            tokio::time::sleep(gap).await;
            let started = Instant::now();
            match (i + step) % 5 {
                0 => {
                    let v: Value = serde_json::from_slice(&body).unwrap();
                    std::hint::black_box(v);
                    if warm {
                        bare.push(started.elapsed().as_micros() as u64);
                    }
                }
                1 => {
                    let req = driftguard::request::parse(&body).unwrap();
                    std::hint::black_box(req);
                    if warm {
                        typed.push(started.elapsed().as_micros() as u64);
                    }
                }
                2 => {
                    let req = driftguard::request::parse(&body).unwrap();
                    let judged = judge_request(
                        &policy,
                        &req,
                        Endpoint::Validate,
                        None,
                        None,
                        jiff::Timestamp::now(),
                        &driftguard::deadline::Deadline::none(),
                    )
                    .unwrap();
                    std::hint::black_box(judged.to_json());
                    if warm {
                        inline.push(started.elapsed().as_micros() as u64);
                    }
                }
                3 => {
                    let answer = here
                        .answer(Endpoint::Validate, &body, Box::new(()), deadline())
                        .await
                        .unwrap();
                    std::hint::black_box(answer);
                    if warm {
                        server.push(started.elapsed().as_micros() as u64);
                    }
                }
                _ => {
                    let answer = pooled
                        .answer(Endpoint::Validate, &body, Box::new(()), deadline())
                        .await
                        .unwrap();
                    std::hint::black_box(answer);
                    if warm {
                        pool.push(started.elapsed().as_micros() as u64);
                    }
                }
            }
        }
    }
    println!(
        "{n} reviews of {} bytes each, {} µs apart, {}",
        body.len(),
        gap.as_micros(),
        match (&policy_file, with_jq) {
            (Some(file), _) => file.as_str(),
            (None, true) => "20 rules (3 jq)",
            (None, false) => "17 JSON-pointer rules",
        }
    );
    let base = summary("bare parse", bare, None);
    summary("typed parse (the review)", typed, Some(base));
    summary("inline: parse+decide+answer", inline, Some(base));
    summary("server, decided here", server, Some(base));
    summary("server, decided on the pool", pool, Some(base));
}

/// The deadline the server gives a review arriving now.
fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}
