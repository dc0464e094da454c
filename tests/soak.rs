//! Soak: driftguard behind the real kube-apiserver under a steady mixed load
//! (allowed, denied, warn, dry-run, break-glass, scale, controller writes,
//! and bad bodies sent straight to it) while its serving certificate is
//! rotated, its policy reloaded (every third version bad) and 2,000 Argo CD
//! Applications with 10 ignore rules each have their status patched, in
//! alternating windows with and without that churn.
//!
//! `cargo test` runs it for `SOAK_SECONDS` (default 120) and asserts what
//! must hold at any length: every write decided as expected, every bad body
//! answered, every reload seen, and no growth in file descriptors, threads or
//! tokio tasks. Timing (p99 with and without churn) and memory are measured,
//! written to `summary.json` and `samples.csv`, and judged by
//! `scripts/soak.sh MINUTES`, never here: the machines are shared and noisy.

use driftguard_testkit::control_plane;
use driftguard_testkit::measure;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control_plane::*;
use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use measure::{client, metric, percentile, status_kib};
use serde_json::{Value, json};

const APPLICATIONS: usize = 2_000;
const RULES_PER_APPLICATION: usize = 10;
/// Writes per second through the apiserver, and status patches per second
/// while churning (Argo CD rewrites each Application's status every few
/// minutes, more while syncing: 2,000 of them give this order).
const WRITES_PER_SECOND: u64 = 20;
const CHURN_PER_SECOND: u64 = 20;
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

#[test]
fn soak() {
    let seconds: u64 = std::env::var("SOAK_SECONDS")
        .ok()
        .map(|s| s.parse().expect("SOAK_SECONDS is a number of seconds"))
        .unwrap_or(120);
    assert!(seconds >= 60, "SOAK_SECONDS: at least 60");
    let out = std::env::var("SOAK_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(ROOT).join("target/soak/test"));
    std::fs::create_dir_all(&out).unwrap();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(Duration::from_secs(seconds), &out));
}

/// When each background job acts, scaled down for short runs so that even
/// the CI run rotates, reloads and churns several times.
struct Schedule {
    total: Duration,
    warm_up: Duration,
    window: Duration,
    rotate_every: Duration,
    reload_every: Duration,
}

impl Schedule {
    fn new(total: Duration) -> Schedule {
        let s = total.as_secs();
        Schedule {
            total,
            warm_up: Duration::from_secs((s / 5).max(20)),
            window: Duration::from_secs(if s >= 600 { 60 } else { (s / 8).max(10) }),
            rotate_every: Duration::from_secs(120.min(s / 4)),
            reload_every: Duration::from_secs(60.min(s / 6)),
        }
    }

    fn churning(&self, elapsed: Duration) -> bool {
        (elapsed.as_secs() / self.window.as_secs()) % 2 == 1
    }
}

async fn run(total: Duration, out: &Path) {
    let schedule = Schedule::new(total);
    let mut plane = ControlPlane::start("soak");
    plane.prepare(&["argocd", "soak", "soak-warn"]);
    plane.apply_crds(&["argocd-application", "argocd-appproject"]);
    let policy = plane.dir.join("policy.yaml");
    write_atomic(&policy, &policy_version(0));

    let admin = client(&plane, "admin", None).await;
    let argo = client(&plane, "admin", Some(ARGO)).await;
    let applications = Api::<DynamicObject>::namespaced_with(
        admin.clone(),
        "argocd",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
            "applications",
        ),
    );
    // Started first: the Applications then arrive one watch event at a
    // time, the incremental path a live installation takes.
    let mut dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={}", policy.display()),
            "--watch-argocd",
            &plane.driftguard_kubeconfig_flag(),
            // The policy allows break-glass, which needs the sweeper: one
            // that never comes due, its records in `default` (left out below).
            "--break-glass-sweep-interval=1h",
            "--reload-interval=1s",
        ],
    );
    // The Argo CD namespace left out: the churn is Argo CD's own status
    // writes, which the real chart never sends either.
    Driftguard::register_with(
        &plane,
        &policy.display().to_string(),
        &format!("https://127.0.0.1:{}", dg.port),
        &["--exclude-namespace=argocd", "--exclude-namespace=default"],
    );
    let started = Instant::now();
    let created = futures_util::stream::iter(0..APPLICATIONS)
        .map(|i| {
            let applications = applications.clone();
            async move {
                let app: DynamicObject = serde_json::from_value(application(i)).unwrap();
                applications.create(&PostParams::default(), &app).await
            }
        })
        .buffer_unordered(8)
        .filter(|r| std::future::ready(r.is_err()))
        .collect::<Vec<_>>()
        .await;
    assert!(
        created.is_empty(),
        "creating Applications: {:?}",
        created[0]
    );
    println!(
        "soak: {APPLICATIONS} Applications × {RULES_PER_APPLICATION} rules created in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    for target in TARGETS {
        let deployments = Api::<Deployment>::namespaced(argo.clone(), target.namespace);
        let object = serde_json::from_value(deployment(target)).unwrap();
        deployments
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", target.name));
    }

    let pid = dg.proc.child.id();
    let ca_pem = plane.ca.cert_pem.clone();
    let direct = https_client(ca_pem.as_bytes(), Duration::from_secs(15));
    let probe = format!("http://127.0.0.1:{}/metrics", dg.probe);

    let load = Load {
        alice: client(&plane, "alice", None).await,
        sam: client(&plane, "sam", None).await,
        argo: argo.clone(),
        direct,
        review_url: format!("https://127.0.0.1:{}/validate", dg.port),
        outcomes: Mutex::new(BTreeMap::new()),
        failures: Mutex::new(Vec::new()),
        sequence: AtomicU64::new(0),
    };
    wait_until_decided(&load).await;
    let cached = "driftguard_sources_objects{source=\"Application\"}";
    let deadline = Instant::now() + Duration::from_secs(300);
    while metric(
        &reqwest::get(&probe).await.unwrap().text().await.unwrap(),
        cached,
    ) < APPLICATIONS as f64
    {
        assert!(
            Instant::now() < deadline,
            "driftguard never cached the {APPLICATIONS} Applications"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let load_seconds = started.elapsed().as_secs_f64();
    println!(
        "soak: driftguard read the {APPLICATIONS} Applications {load_seconds:.1}s after the first was created"
    );
    load.arm_break_glass().await;
    println!(
        "soak: driftguard ready (pid {pid}); running {}s",
        total.as_secs()
    );

    let load = Arc::new(load);
    let stop = Arc::new(AtomicBool::new(false));
    let churning = Arc::new(AtomicBool::new(false));
    let begin = Instant::now();
    let jobs = vec![
        tokio::spawn(write_load(load.clone(), stop.clone())),
        tokio::spawn(bad_bodies(load.clone(), stop.clone())),
        tokio::spawn(churn(applications.clone(), churning.clone(), stop.clone())),
    ];
    let (cert, key) = (
        plane.dir.join("driftguard.crt"),
        plane.dir.join("driftguard.key"),
    );
    let (mut rotated, mut reloaded, mut policy_versions) = (Instant::now(), Instant::now(), 0);

    let audit = dg.proc.stdout.clone();
    let mut audit_cursor = 0;
    let mut samples = Vec::new();
    let mut latencies: Vec<(bool, u64)> = Vec::new();
    let mut cpu_before = cpu_ticks(pid);
    let mut at = Instant::now();
    while begin.elapsed() < schedule.total {
        let elapsed = begin.elapsed();
        churning.store(schedule.churning(elapsed), Ordering::SeqCst);
        tokio::time::sleep(SAMPLE_EVERY).await;
        let was_churning = churning.load(Ordering::SeqCst);
        if rotated.elapsed() >= schedule.rotate_every {
            rotated = Instant::now();
            rotate_certificate(&plane.ca, &cert, &key);
        }
        if reloaded.elapsed() >= schedule.reload_every {
            reloaded = Instant::now();
            policy_versions += 1;
            write_atomic(&policy, &policy_version(policy_versions));
        }
        let window: Vec<u64> = {
            let lines = audit.lock().unwrap();
            let fresh = lines[audit_cursor..]
                .iter()
                .filter_map(|l| load_latency(l))
                .collect();
            audit_cursor = lines.len();
            fresh
        };
        let cpu = cpu_ticks(pid);
        let seconds = at.elapsed().as_secs_f64();
        at = Instant::now();
        let metrics = reqwest::get(&probe)
            .await
            .expect("the probe port answers")
            .text()
            .await
            .unwrap();
        let sample = Sample {
            at: begin.elapsed().as_secs_f64(),
            churn: was_churning,
            rss_kib: status_kib(pid, "VmRSS"),
            cpu_percent: (cpu - cpu_before) as f64 / seconds,
            fds: count_dir(&format!("/proc/{pid}/fd")),
            threads: count_dir(&format!("/proc/{pid}/task")),
            tasks: metric(&metrics, "driftguard_runtime_tasks") as u64,
            reviews: window.len(),
            p99_micros: percentile(&window, 0.99),
        };
        cpu_before = cpu;
        if begin.elapsed() > schedule.warm_up {
            latencies.extend(window.iter().map(|&l| (was_churning, l)));
        }
        println!("soak: {}", sample.csv());
        samples.push(sample);
        assert!(
            dg.proc.child.try_wait().is_ok_and(|s| s.is_none()),
            "driftguard exited: {}",
            dg.proc.stderr_tail(20)
        );
    }
    stop.store(true, Ordering::SeqCst);
    for job in jobs {
        job.await.unwrap();
    }

    let metrics = reqwest::get(&probe).await.unwrap().text().await.unwrap();
    let mut summary = summarize(
        &schedule,
        &samples,
        &latencies,
        &load,
        &metrics,
        &dg.audit(),
    );
    summary["applicationsReadSeconds"] = json!(load_seconds);
    std::fs::write(
        out.join("samples.csv"),
        std::iter::once(Sample::HEADER.to_owned())
            .chain(samples.iter().map(Sample::csv))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n",
    )
    .unwrap();
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap() + "\n",
    )
    .unwrap();
    println!("soak: {}", serde_json::to_string_pretty(&summary).unwrap());
    check(&schedule, &summary, &load);
}

/// What must hold at any length of run (timing and memory are judged by
/// scripts/soak.sh on long runs).
fn check(schedule: &Schedule, summary: &Value, load: &Load) {
    let failures = load.failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} writes or bad bodies were not answered as expected; first ones: {:#?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert_eq!(summary["auditInternalErrors"], 0, "{summary:#}");
    let rotations = schedule.total.as_secs() / schedule.rotate_every.as_secs();
    assert!(
        summary["certificateReloads"]["success"].as_f64().unwrap() >= (rotations - 1) as f64,
        "certificate rotations not all picked up: {summary:#}"
    );
    assert!(
        summary["policyReloads"]["success"].as_f64().unwrap() >= 1.0
            && summary["policyReloads"]["failure"].as_f64().unwrap() >= 1.0,
        "good and bad policies were not both seen: {summary:#}"
    );
    let outcomes = load.outcomes.lock().unwrap();
    for op in Op::ALL {
        assert!(
            outcomes.get(op.name()).copied().unwrap_or(0) > 0,
            "{} never ran: {outcomes:?}",
            op.name()
        );
    }
    let growth = &summary["growthAfterWarmUp"];
    assert!(
        growth["fds"].as_i64().unwrap() <= 16,
        "fds grew: {summary:#}"
    );
    assert!(
        growth["threads"].as_i64().unwrap() <= 2,
        "threads grew: {summary:#}"
    );
    assert!(
        growth["tasks"].as_i64().unwrap() <= 32,
        "tokio tasks grew: {summary:#}"
    );
}

fn summarize(
    schedule: &Schedule,
    samples: &[Sample],
    latencies: &[(bool, u64)],
    load: &Load,
    metrics: &str,
    audit: &[Value],
) -> Value {
    let after_warm_up: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at <= schedule.warm_up.as_secs_f64() + SAMPLE_EVERY.as_secs_f64())
        .rev()
        .take(3)
        .collect();
    let at_end: Vec<&Sample> = samples.iter().rev().take(3).collect();
    let median = |of: &[&Sample], f: fn(&Sample) -> f64| {
        let mut v: Vec<f64> = of.iter().map(|s| f(s)).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let growth = |f: fn(&Sample) -> f64| (median(&at_end, f) - median(&after_warm_up, f)) as i64;
    let quiet: Vec<u64> = latencies.iter().filter(|l| !l.0).map(|l| l.1).collect();
    let churn: Vec<u64> = latencies.iter().filter(|l| l.0).map(|l| l.1).collect();
    let (p99_quiet, p99_churn) = (percentile(&quiet, 0.99), percentile(&churn, 0.99));
    let reloads = |name: &str| {
        json!({
            "success": metric(metrics, &format!("driftguard_{name}_total{{result=\"success\"}}")),
            "failure": metric(metrics, &format!("driftguard_{name}_total{{result=\"failure\"}}")),
        })
    };
    json!({
        "seconds": schedule.total.as_secs(),
        "warmUpSeconds": schedule.warm_up.as_secs(),
        "windowSeconds": schedule.window.as_secs(),
        "applications": APPLICATIONS,
        "rules": APPLICATIONS * RULES_PER_APPLICATION,
        "outcomes": *load.outcomes.lock().unwrap(),
        "failures": load.failures.lock().unwrap().len(),
        "auditInternalErrors": audit.iter().filter(|r| r["verdict"] == "internal-error" || !r["error"].is_null()).count(),
        "reviewsAudited": audit.len(),
        "certificateReloads": reloads("certificate_reloads"),
        "policyReloads": reloads("policy_reloads"),
        "rssKiB": {"afterWarmUp": median(&after_warm_up, |s| s.rss_kib as f64), "end": median(&at_end, |s| s.rss_kib as f64)},
        "growthAfterWarmUp": {
            "rssKiB": growth(|s| s.rss_kib as f64),
            "fds": growth(|s| s.fds as f64),
            "threads": growth(|s| s.threads as f64),
            "tasks": growth(|s| s.tasks as f64),
        },
        "decisionMicros": {
            "quiet": {"reviews": quiet.len(), "p50": percentile(&quiet, 0.5), "p99": p99_quiet},
            "churn": {"reviews": churn.len(), "p50": percentile(&churn, 0.5), "p99": p99_churn},
            "p99ChurnOverQuiet": p99_churn as f64 / p99_quiet.max(1) as f64,
        },
        "firstFailures": load.failures.lock().unwrap().iter().take(10).collect::<Vec<_>>(),
    })
}

struct Sample {
    at: f64,
    churn: bool,
    rss_kib: u64,
    cpu_percent: f64,
    fds: usize,
    threads: usize,
    tasks: u64,
    reviews: usize,
    p99_micros: u64,
}

impl Sample {
    const HEADER: &str = "seconds,churn,rss_kib,cpu_percent,fds,threads,tasks,reviews,p99_micros";

    fn csv(&self) -> String {
        format!(
            "{:.1},{},{},{:.1},{},{},{},{},{}",
            self.at,
            u8::from(self.churn),
            self.rss_kib,
            self.cpu_percent,
            self.fds,
            self.threads,
            self.tasks,
            self.reviews,
            self.p99_micros
        )
    }
}

/// The managed Deployments the load writes to: each tracked by one of the
/// 2,000 Applications, whose rules decide.
struct Target {
    name: &'static str,
    namespace: &'static str,
    app: usize,
}

const ALLOW: Target = Target {
    name: "allow",
    namespace: "soak",
    app: 0,
};
const DENY: Target = Target {
    name: "deny",
    namespace: "soak",
    app: 1,
};
const WARN: Target = Target {
    name: "warn",
    namespace: "soak-warn",
    app: 2,
};
const GLASS: Target = Target {
    name: "glass",
    namespace: "soak",
    app: 3,
};
const TARGETS: [&Target; 4] = [&ALLOW, &DENY, &WARN, &GLASS];

fn app_name(i: usize) -> String {
    format!("app-{i:04}")
}

/// Ten ignore rules of every kind Argo CD has; even Applications ignore
/// Deployment replicas (so scaling `allow` is allowed and `deny` is not).
fn application(i: usize) -> Value {
    let replicas = if i.is_multiple_of(2) {
        "Deployment"
    } else {
        "StatefulSet"
    };
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": app_name(i), "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://git.example.com/soak.git", "path": format!("apps/{i}"), "targetRevision": "main"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "soak"},
            "ignoreDifferences": [
                {"group": "apps", "kind": replicas, "jsonPointers": ["/spec/replicas"]},
                {"group": "apps", "kind": "Deployment", "jqPathExpressions": [".metadata.annotations[\"soak/allowed\"]"]},
                {"group": "apps", "kind": "Deployment", "managedFieldsManagers": [format!("soak-operator-{i}")]},
                {"kind": "ConfigMap", "jsonPointers": [format!("/data/k{i}")]},
                {"kind": "Service", "jsonPointers": ["/metadata/annotations/soak~1svc"]},
                {"group": "batch", "kind": "CronJob", "jsonPointers": ["/spec/schedule"]},
                {"kind": "ConfigMap", "jqPathExpressions": [format!(".data[\"extra-{i}\"]")]},
                {"group": "apps", "kind": "StatefulSet", "jqPathExpressions": [".spec.template.metadata.annotations"]},
                {"kind": "Secret", "jsonPointers": ["/data/token"]},
                {"group": "networking.k8s.io", "kind": "Ingress", "jsonPointers": ["/metadata/annotations"]},
            ],
        },
    })
}

fn deployment(target: &Target) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": target.name,
            "namespace": target.namespace,
            "annotations": {"argocd.argoproj.io/tracking-id": format!("{}:apps/Deployment:{}/{}", app_name(target.app), target.namespace, target.name)},
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": target.name}},
            "template": {
                "metadata": {"labels": {"app": target.name}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
            },
        },
    })
}

/// The policy: break-glass for the on-call group, warn mode for one
/// namespace. Every version decides the same; every third one is invalid
/// (an unknown mode) and must be refused with the last good one kept. Were
/// it taken, `soak-warn` would stop warning and the load would see it.
fn policy_version(n: u64) -> String {
    let mode = if n % 3 == 2 { "sideways" } else { "warn" };
    format!(
        "# soak policy version {n}\nbreakGlass:\n  allowedGroups: [sre-oncall]\n  maxDuration: 4h\nnamespaces:\n  - names: [soak-warn]\n    mode: {mode}\n"
    )
}

#[derive(Clone, Copy)]
enum Op {
    Allowed,
    Denied,
    Warn,
    DryRunDenied,
    DryRunAllowed,
    BreakGlass,
    BreakGlassOthersDenied,
    ScaleAllowed,
    ScaleDenied,
    Controller,
}

impl Op {
    const ALL: [Op; 10] = [
        Op::Allowed,
        Op::Denied,
        Op::Warn,
        Op::DryRunDenied,
        Op::DryRunAllowed,
        Op::BreakGlass,
        Op::BreakGlassOthersDenied,
        Op::ScaleAllowed,
        Op::ScaleDenied,
        Op::Controller,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::Allowed => "allowed",
            Op::Denied => "denied",
            Op::Warn => "warn",
            Op::DryRunDenied => "dry-run-denied",
            Op::DryRunAllowed => "dry-run-allowed",
            Op::BreakGlass => "break-glass",
            Op::BreakGlassOthersDenied => "break-glass-others-denied",
            Op::ScaleAllowed => "scale-allowed",
            Op::ScaleDenied => "scale-denied",
            Op::Controller => "controller",
        }
    }
}

struct Load {
    alice: kube::Client,
    sam: kube::Client,
    argo: kube::Client,
    direct: reqwest::Client,
    review_url: String,
    outcomes: Mutex<BTreeMap<&'static str, u64>>,
    failures: Mutex<Vec<String>>,
    sequence: AtomicU64,
}

impl Load {
    fn record(&self, what: &'static str, failure: Option<String>) {
        *self.outcomes.lock().unwrap().entry(what).or_default() += 1;
        if let Some(f) = failure {
            self.failures.lock().unwrap().push(format!("{what}: {f}"));
        }
    }

    /// Runs one write and says how it differed from what was expected.
    async fn run(&self, op: Op) -> Option<String> {
        let n = self.sequence.fetch_add(1, Ordering::SeqCst);
        let image = |name: &str| json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": format!("nginx:1.{}", 100 + n % 50)}]}}}, "metadata": {"labels": {"soak-last": name}}});
        let api = |client: &kube::Client, t: &Target| {
            Api::<Deployment>::namespaced(client.clone(), t.namespace)
        };
        let dry = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        let plain = PatchParams::default();
        let annotate = json!({"metadata": {"annotations": {"soak/allowed": n.to_string()}}});
        match op {
            Op::Allowed => allowed(
                api(&self.alice, &ALLOW)
                    .patch(ALLOW.name, &plain, &Patch::Merge(annotate))
                    .await,
            ),
            Op::Denied => denied(
                api(&self.alice, &DENY)
                    .patch(DENY.name, &plain, &Patch::Merge(image("denied")))
                    .await,
            ),
            Op::Warn => match api(&self.alice, &WARN)
                .patch(WARN.name, &plain, &Patch::Merge(image("warn")))
                .await
            {
                Ok(d)
                    if d.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("driftguard.io/drift")) =>
                {
                    None
                }
                Ok(_) => Some("allowed without driftguard's drift annotation".into()),
                Err(e) => Some(format!("refused: {e}")),
            },
            Op::DryRunDenied => denied(
                api(&self.alice, &DENY)
                    .patch(DENY.name, &dry, &Patch::Merge(image("dry-run")))
                    .await,
            ),
            Op::DryRunAllowed => allowed(
                api(&self.alice, &ALLOW)
                    .patch(ALLOW.name, &dry, &Patch::Merge(annotate))
                    .await,
            ),
            Op::BreakGlass => allowed(
                api(&self.sam, &GLASS)
                    .patch(GLASS.name, &plain, &Patch::Merge(image("glass")))
                    .await,
            ),
            Op::BreakGlassOthersDenied => denied(
                api(&self.alice, &GLASS)
                    .patch(GLASS.name, &plain, &Patch::Merge(image("alice")))
                    .await,
            ),
            Op::ScaleAllowed => allowed(
                api(&self.alice, &ALLOW)
                    .patch_scale(
                        ALLOW.name,
                        &plain,
                        &Patch::Merge(json!({"spec": {"replicas": 2 + (n / 10) % 2}})),
                    )
                    .await,
            ),
            Op::ScaleDenied => denied(
                api(&self.alice, &DENY)
                    .patch_scale(
                        DENY.name,
                        &plain,
                        &Patch::Merge(json!({"spec": {"replicas": 7}})),
                    )
                    .await,
            ),
            Op::Controller => allowed(
                api(&self.argo, &ALLOW)
                    .patch(ALLOW.name, &plain, &Patch::Merge(image("argo")))
                    .await,
            ),
        }
    }

    /// sam, on call, arms break-glass on `glass` (the plugin's write).
    async fn arm_break_glass(&self) {
        let expires = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(3);
        let arm = json!({"metadata": {
            "labels": {"driftguard.io/break-glass": "true"},
            "annotations": {
                "driftguard.io/break-glass": "soak: INC-1",
                "driftguard.io/break-glass-expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            },
        }});
        Api::<Deployment>::namespaced(self.sam.clone(), GLASS.namespace)
            .patch(GLASS.name, &PatchParams::default(), &Patch::Merge(arm))
            .await
            .expect("sam arms break-glass");
    }

    /// A body nobody valid sends, straight to driftguard: it must answer
    /// with a clear 4xx (or an AdmissionReview refusing), never fail.
    async fn bad_body(&self, n: u64) -> Option<String> {
        let body: Vec<u8> = match n % 6 {
            0 => b"{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"AdmissionRev".to_vec(),
            1 => br#"{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"x"}}"#.to_vec(),
            2 => br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            3 => [b"{\"a\":".repeat(100_000), b"1".to_vec(), b"}".repeat(100_000)].concat(),
            4 => vec![0xff, 0xfe, 0x00, 0x01],
            _ => [
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"big","x":""#.as_slice(),
                &vec![b'x'; 9 * 1024 * 1024],
                b"\"}}",
            ]
            .concat(),
        };
        match self
            .direct
            .post(&self.review_url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
        {
            Ok(r) if r.status().is_client_error() => None,
            Ok(r) if r.status().is_success() => {
                let v: Value = r.json().await.unwrap_or_default();
                if v["response"]["allowed"] == false
                    && v["response"]["status"]["message"].is_string()
                {
                    None
                } else {
                    Some(format!("bad body {} answered 200: {v}", n % 6))
                }
            }
            Ok(r) => Some(format!("bad body {} answered {}", n % 6, r.status())),
            Err(e) => Some(format!("bad body {}: {e}", n % 6)),
        }
    }
}

fn allowed<T>(result: kube::Result<T>) -> Option<String> {
    result.err().map(|e| format!("refused: {e}"))
}

/// Refused by driftguard's own judgement: not a webhook failure, timeout or
/// anything else that would also refuse.
fn denied<T>(result: kube::Result<T>) -> Option<String> {
    match result {
        Ok(_) => Some("allowed".into()),
        Err(kube::Error::Api(e))
            if e.message.contains("driftguard")
                && !e.message.contains("failed calling webhook") =>
        {
            None
        }
        Err(e) => Some(format!("refused, but not by driftguard's judgement: {e}")),
    }
}

async fn wait_until_decided(load: &Load) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let denied = load.run(Op::Denied).await;
        let scaled = load.run(Op::ScaleAllowed).await;
        if denied.is_none() && scaled.is_none() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "driftguard never decided from the 2,000 Applications: {denied:?} {scaled:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn write_load(load: Arc<Load>, stop: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / WRITES_PER_SECOND));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(8));
    let mut n = 0usize;
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let op = Op::ALL[n % Op::ALL.len()];
        n += 1;
        let permit = in_flight.clone().acquire_owned().await.unwrap();
        let load = load.clone();
        tokio::spawn(async move {
            let failure = load.run(op).await;
            load.record(op.name(), failure);
            drop(permit);
        });
    }
    let _ = in_flight.acquire_many(8).await;
}

async fn bad_bodies(load: Arc<Load>, stop: Arc<AtomicBool>) {
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        let failure = load.bad_body(n).await;
        load.record("bad-body", failure);
        n += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Argo CD's status writes: what a real installation does all the time.
async fn churn(applications: Api<DynamicObject>, on: Arc<AtomicBool>, stop: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / CHURN_PER_SECOND));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        if !on.load(Ordering::SeqCst) {
            continue;
        }
        n += 1;
        let i = (n * 7919) as usize % APPLICATIONS;
        let status = json!({"status": {
            "reconciledAt": jiff::Timestamp::now().to_string(),
            "sync": {"status": "Synced", "revision": format!("{n:040x}")},
            "health": {"status": "Healthy"},
        }});
        if let Err(e) = applications
            .patch(&app_name(i), &PatchParams::default(), &Patch::Merge(status))
            .await
        {
            panic!("status patch of {}: {e}", app_name(i));
        }
    }
}

/// A new serving pair from the plane's CA, which the apiserver trusts.
fn rotate_certificate(ca: &driftguard::certs::Authority, cert: &Path, key: &Path) {
    let (c, k) = ca.leaf("driftguard", &["127.0.0.1".into()], &[]).unwrap();
    // The key first: a new certificate with the old key is refused and
    // retried; the old pair keeps serving either way.
    let tmp = key.with_extension("key.new");
    driftguard::certs::write_private(&tmp, &k).unwrap();
    std::fs::rename(&tmp, key).unwrap();
    write_atomic(cert, &c);
}

fn write_atomic(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The decision latency of an audit record of the load (not of the bad
/// bodies, which are never decided).
fn load_latency(line: &str) -> Option<u64> {
    let record: Value = serde_json::from_str(line).ok()?;
    let ns = record["namespace"].as_str()?;
    if ns != "soak" && ns != "soak-warn" {
        return None;
    }
    record["latencyMicros"].as_u64()
}

/// utime + stime in clock ticks (100 per second on Linux).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, s)| s).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
}

fn count_dir(path: &str) -> usize {
    std::fs::read_dir(path).map(|d| d.count()).unwrap_or(0)
}
