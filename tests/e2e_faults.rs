//! End to end on a real kube-apiserver and etcd: faults. The apiserver
//! restarts while driftguard watches Argo CD Applications and Flux
//! Kustomizations; driftguard is
//! SIGKILLed under load with failurePolicy Fail; one of two replicas behind
//! one address (a TCP proxy, testkit/src/tcp_proxy.rs) is SIGKILLed under
//! load, over HTTP/2 and over HTTP/1.1. Every write's outcome is checked
//! against what it should be, and against the object as stored afterwards.
//! The figures each test measured are printed (`-- --nocapture`).

use driftguard_testkit::control_plane;
use driftguard_testkit::tcp_proxy;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control_plane::*;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// Shared helpers

/// The sum of every sample of a metric family on driftguard's probe port.
fn metric_sum(probe: u16, family: &str) -> f64 {
    let (_, body) = probe_get(probe, "/metrics");
    body.lines()
        .filter(|l| l.starts_with(family))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether a kubectl write was refused by driftguard itself (not by RBAC,
/// not a failed webhook call).
fn denied_by_driftguard(out: &Kubectl) -> bool {
    !out.ok && out.stderr.contains("denied the request")
}

/// Runs kubectl and fails the test unless driftguard's decision is `allowed`.
fn expect_write(plane: &ControlPlane, user: &str, args: &[&str], allowed: bool) -> Kubectl {
    let out = plane.kubectl(user, args);
    if allowed {
        assert!(
            out.ok,
            "expected allowed: kubectl {}: {out}",
            args.join(" ")
        );
    } else {
        assert!(
            denied_by_driftguard(&out),
            "expected denied by driftguard: kubectl {}: {out}",
            args.join(" ")
        );
    }
    out
}

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------
// 1. The kube-apiserver restarts while driftguard watches.

const REPLICAS: &str = "/spec/replicas";
const TEAM: &str = "/metadata/labels/team";

fn application(pointers: &[&str]) -> String {
    format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: shop, namespace: argocd}}\nspec:\n  project: default\n  source: {{repoURL: 'https://git.example.com/shop.git', path: deploy, targetRevision: main}}\n  destination: {{server: 'https://kubernetes.default.svc', namespace: shop}}\n  ignoreDifferences:\n    - group: apps\n      kind: Deployment\n      jsonPointers: [{}]\n",
        pointers.join(", ")
    )
}

/// A Flux Kustomization whose `ignore` lists `pointers` on Deployments.
fn kustomization(pointers: &[&str]) -> String {
    format!(
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: apps, namespace: tenant-a}}\nspec:\n  interval: 5m\n  prune: true\n  path: ./apps\n  sourceRef: {{kind: GitRepository, name: repo}}\n  ignore:\n    - paths: [{}]\n      target: {{kind: Deployment}}\n",
        pointers.join(", ")
    )
}

const SHOP: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  namespace: shop
  labels: {app: shop}
  annotations: {argocd.argoproj.io/tracking-id: "shop:apps/Deployment:shop/shop"}
spec:
  replicas: 1
  selector: {matchLabels: {app: shop}}
  template:
    metadata: {labels: {app: shop}}
    spec: {containers: [{name: shop, image: "nginx:1.27"}]}
"#;

/// AdmissionReviews posted straight to driftguard's https port.
struct Direct {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    url: String,
}

impl Direct {
    fn new(plane: &ControlPlane, port: u16) -> Direct {
        let ca = std::fs::read(plane.dir.join("ca.crt")).unwrap();
        let http = https_client(&ca, Duration::from_secs(10));
        Direct {
            rt: tokio_runtime(),
            http,
            url: format!("https://127.0.0.1:{port}/validate"),
        }
    }

    /// alice's UPDATE of the stored `old` Deployment into `change(old)`:
    /// (allowed, message).
    fn decide(&self, old: &Value, uid: &str, change: impl FnOnce(&mut Value)) -> (bool, String) {
        let mut new = old.clone();
        change(&mut new);
        let gvk = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        let gvr = json!({"group": "apps", "version": "v1", "resource": "deployments"});
        let review = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
                "name": old["metadata"]["name"], "namespace": old["metadata"]["namespace"],
                "operation": "UPDATE",
                "userInfo": {"username": "alice", "groups": ["developers", "system:authenticated"]},
                "object": new, "oldObject": old, "dryRun": false,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}
            }
        });
        let answer: Value = self
            .rt
            .block_on(async {
                self.http
                    .post(&self.url)
                    .json(&review)
                    .send()
                    .await?
                    .json()
                    .await
            })
            .unwrap_or_else(|e| panic!("driftguard did not answer review {uid}: {e}"));
        let response = &answer["response"];
        assert_eq!(response["uid"], uid, "{answer}");
        (
            response["allowed"] == true,
            response["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    }

    /// The three reviews whose answers the Application decides: a replicas
    /// change (ignored: allowed), an image change (drift: denied) and a
    /// label `team` (denied until the Application ignores it).
    fn check_round(&self, old: &Value, round: usize, team_ignored: bool) {
        let replicas = old["spec"]["replicas"].as_i64().unwrap();
        let (allowed, why) = self.decide(old, &format!("replicas-{round}"), |o| {
            o["spec"]["replicas"] = json!(replicas + 1)
        });
        assert!(allowed, "round {round}: replicas change denied: {why}");
        let (allowed, why) = self.decide(old, &format!("image-{round}"), |o| {
            o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:drift")
        });
        assert!(!allowed, "round {round}: image drift allowed");
        assert!(why.contains("image"), "round {round}: {why}");
        let (allowed, why) = self.decide(old, &format!("team-{round}"), |o| {
            o["metadata"]["labels"]["team"] = json!("checkout")
        });
        assert_eq!(allowed, team_ignored, "round {round}: label team: {why}");
    }
}

/// Polls driftguard's /readyz every 20 ms in a thread until stopped.
struct ReadyzWatch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(usize, Vec<String>, Duration)>,
}

impl ReadyzWatch {
    fn start(probe: u16) -> ReadyzWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let (mut polls, mut failures) = (0, Vec::new());
            while !flag.load(Ordering::SeqCst) {
                let (status, body) = probe_get(probe, "/readyz");
                polls += 1;
                if status != 200 {
                    failures.push(format!("{:?}: {status} {body:?}", started.elapsed()));
                }
                std::thread::sleep(POLL);
            }
            (polls, failures, started.elapsed())
        });
        ReadyzWatch { stop, thread }
    }

    /// (polls, non-200 answers, how long it watched).
    fn finish(self) -> (usize, Vec<String>, Duration) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

/// Retries alice's write until it passes: the sources update through watches.
fn wait_until_allowed(plane: &ControlPlane, what: &str, args: &[&str]) {
    wait_for(what, Duration::from_secs(30), || {
        let out = plane.kubectl("alice", args);
        if out.ok { Ok(()) } else { Err(out.to_string()) }
    });
}

fn get_json(plane: &ControlPlane, ns: &str, what: &str) -> Value {
    let out = plane.kubectl("admin", &["-n", ns, "get", what, "-o", "json"]);
    assert!(out.ok, "get {what}: {out}");
    serde_json::from_str(&out.stdout).unwrap()
}

#[test]
fn apiserver_restart_while_driftguard_watches() {
    let test_started = Instant::now();
    let mut plane = ControlPlane::start("faults-apiserver");
    plane.prepare(&["argocd", "shop", "tenant-a"]);
    plane.apply_crds(&["argocd-application", "flux-kustomization"]);
    plane.apply_admin(&application(&[REPLICAS]));
    plane.apply_admin(&kustomization(&[REPLICAS]));
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(SHOP));
    assert!(out.ok, "{out}");
    plane.apply_admin(TENANT_WEB_DEPLOYMENT);
    let dg = Driftguard::start(
        &plane,
        &[
            "--watch-argocd",
            "--watch-flux",
            &plane.driftguard_kubeconfig_flag(),
        ],
    );
    dg.register(&plane, &format!("{ROOT}/src/policy/default-policy.yaml"));

    let ns = ["-n", "shop"];
    let patch_replicas = |n: u32| format!("{{\"spec\":{{\"replicas\":{n}}}}}");
    fn write<'a>(ns: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [ns, extra].concat()
    }
    // Before: the Application's and the Kustomization's rules apply
    // through the apiserver.
    wait_until_allowed(
        &plane,
        "the Application's ignore rule to apply",
        &write(
            &ns,
            &[
                "patch",
                "deployment/shop",
                "--type=merge",
                "-p",
                &patch_replicas(2),
            ],
        ),
    );
    let tenant = ["-n", "tenant-a"];
    wait_until_allowed(
        &plane,
        "the Kustomization's ignore rule to apply",
        &write(&tenant, &["scale", "deployment/web", "--replicas=2"]),
    );
    expect_write(
        &plane,
        "alice",
        &write(
            &tenant,
            &["set", "image", "deployment/web", "web=nginx:1.28"],
        ),
        false,
    );
    expect_write(
        &plane,
        "alice",
        &write(&ns, &["set", "image", "deployment/shop", "shop=nginx:1.28"]),
        false,
    );
    expect_write(
        &plane,
        "alice",
        &write(
            &ns,
            &[
                "label",
                "deployment/shop",
                "team=checkout",
                "--dry-run=server",
            ],
        ),
        false,
    );

    // The same decisions straight from driftguard.
    let direct = Direct::new(&plane, dg.port);
    let stored = get_json(&plane, "shop", "deployment/shop");
    let stored_web = get_json(&plane, "tenant-a", "deployment/web");
    direct.check_round(&stored, 0, false);
    direct.check_round(&stored_web, 0, false);

    let readyz = ReadyzWatch::start(dg.probe);
    let errors_before = metric_sum(dg.probe, "driftguard_watch_errors");
    plane.stop_apiserver();
    let down_at = Instant::now();
    let out = plane.kubectl("admin", &["get", "--raw", "/readyz"]);
    assert!(!out.ok, "the apiserver still answers: {out}");
    // driftguard has noticed: its watches fail (several reconnects).
    wait_for(
        "driftguard's watches to fail against the stopped apiserver",
        Duration::from_secs(60),
        || {
            let errors = metric_sum(dg.probe, "driftguard_watch_errors");
            if errors >= errors_before + 6.0 {
                Ok(())
            } else {
                Err(format!("{errors_before} -> {errors}"))
            }
        },
    );
    // Decided from the last good sources, again and again while it is down.
    let mut rounds = 0;
    while rounds < 20 || down_at.elapsed() < Duration::from_secs(5) {
        rounds += 1;
        direct.check_round(&stored, rounds, false);
        direct.check_round(&stored_web, rounds, false);
        std::thread::sleep(Duration::from_millis(50));
    }
    let watch_errors_down = metric_sum(dg.probe, "driftguard_watch_errors") - errors_before;
    plane.start_apiserver();
    let up_at = Instant::now();
    let downtime = up_at - down_at;

    // Through the apiserver again: the same decisions.
    expect_write(
        &plane,
        "alice",
        &write(&ns, &["set", "image", "deployment/shop", "shop=nginx:1.29"]),
        false,
    );
    expect_write(
        &plane,
        "alice",
        &write(
            &ns,
            &[
                "patch",
                "deployment/shop",
                "--type=merge",
                "-p",
                &patch_replicas(3),
            ],
        ),
        true,
    );
    expect_write(
        &plane,
        "alice",
        &write(
            &tenant,
            &["set", "image", "deployment/web", "web=nginx:1.29"],
        ),
        false,
    );
    expect_write(
        &plane,
        "alice",
        &write(&tenant, &["scale", "deployment/web", "--replicas=3"]),
        true,
    );
    // The watches recover: a rule added now is followed without a restart.
    plane.apply_admin(&application(&[REPLICAS, TEAM]));
    plane.apply_admin(&kustomization(&[REPLICAS, TEAM]));
    let changed_at = Instant::now();
    let mut denied_while_catching_up = 0;
    for (what, ns, deployment) in [
        ("the Application", &ns, "deployment/shop"),
        ("the Kustomization", &tenant, "deployment/web"),
    ] {
        wait_for(
            &format!("driftguard to follow {what} changed after the restart"),
            Duration::from_secs(120),
            || {
                let out = plane.kubectl(
                    "alice",
                    &write(
                        ns,
                        &["label", deployment, "team=checkout", "--dry-run=server"],
                    ),
                );
                if out.ok {
                    Ok(())
                } else if denied_by_driftguard(&out) {
                    denied_while_catching_up += 1;
                    Err(out.to_string())
                } else {
                    panic!("neither allowed nor denied by driftguard: {out}")
                }
            },
        );
    }
    let followed_after = changed_at.elapsed();
    let recovered_after = up_at.elapsed();
    let (polls, not_ready, watched) = readyz.finish();

    expect_write(
        &plane,
        "alice",
        &write(&ns, &["label", "deployment/shop", "team=checkout"]),
        true,
    );
    let stored = get_json(&plane, "shop", "deployment/shop");
    assert_eq!(stored["metadata"]["labels"]["team"], "checkout");
    assert_eq!(stored["spec"]["replicas"], 3);
    assert_eq!(
        stored["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27",
        "a denied image change was stored"
    );
    expect_write(
        &plane,
        "alice",
        &write(&ns, &["set", "image", "deployment/shop", "shop=nginx:1.30"]),
        false,
    );
    direct.check_round(&stored, rounds + 1, true);
    expect_write(
        &plane,
        "alice",
        &write(&tenant, &["label", "deployment/web", "team=checkout"]),
        true,
    );
    let stored_web = get_json(&plane, "tenant-a", "deployment/web");
    assert_eq!(stored_web["spec"]["replicas"], 3);
    assert_eq!(
        stored_web["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27",
        "a denied image change was stored"
    );
    direct.check_round(&stored_web, rounds + 1, true);
    let logged = dg
        .proc
        .stderr_line("serving the last good sources")
        .unwrap_or_default();

    assert!(
        not_ready.is_empty(),
        "/readyz was not 200 in {} of {polls} polls, first: {:?}",
        not_ready.len(),
        &not_ready[..not_ready.len().min(5)]
    );
    eprintln!(
        "apiserver restart: down {downtime:?}; {rounds} rounds of 6 direct reviews (Application and Kustomization) while down, all decided from the last good sources; \
         {watch_errors_down} watch errors while down; /readyz 200 in all {polls} polls over {watched:?}; \
         after the apiserver was ready again: Application and Kustomization changes both followed {followed_after:?} after they were applied \
         ({denied_while_catching_up} dry-run labels still denied meanwhile), {recovered_after:?} after the apiserver was ready; \
         test took {:?}\nlog: {logged}",
        test_started.elapsed()
    );
}

// ---------------------------------------------------------------------------
// Load: human and controller writes through a real kube client, each checked.

const LOAD_NS: &str = "load";

/// ignoreDifferences of the load scenarios (everything else: the embedded
/// defaults, whose controllers the matchConditions skip).
const LOAD_POLICY: &str = "ignoreDifferences:\n  - group: apps\n    kind: Deployment\n    jsonPointers: [/spec/replicas]\n";

fn load_objects(names: &[String]) -> String {
    names
        .iter()
        .map(|name| {
            format!(
                "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {LOAD_NS}\n  annotations: {{argocd.argoproj.io/tracking-id: \"load:apps/Deployment:{LOAD_NS}/{name}\"}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: app, image: \"nginx:1.27\"}}]}}\n"
            )
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    /// alice changes an ignored field (replicas): allowed.
    HumanIgnored,
    /// alice changes the image: drift, denied.
    HumanDrift,
    /// The Argo CD controller changes the image: never sent to driftguard.
    Controller,
}

impl Kind {
    fn human(self) -> bool {
        self != Kind::Controller
    }

    /// What driftguard decides when it is up.
    fn correct(self) -> Got {
        match self {
            Kind::HumanIgnored | Kind::Controller => Got::Applied,
            Kind::HumanDrift => Got::Denied,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Got {
    Applied,
    /// Denied by driftguard.
    Denied,
    /// The apiserver could not call the webhook and refused the write
    /// (failurePolicy Fail).
    FailedClosed,
    Other,
}

#[derive(Clone, Debug)]
struct Outcome {
    kind: Kind,
    object: String,
    started: Instant,
    ended: Instant,
    got: Got,
    detail: String,
    /// The stored object afterwards agrees with `got`.
    state: Result<(), String>,
}

fn classify<T>(result: Result<T, kube::Error>) -> (Got, String) {
    match result {
        Ok(_) => (Got::Applied, String::new()),
        Err(kube::Error::Api(s)) if s.message.contains("denied the request") => {
            (Got::Denied, s.message.clone())
        }
        Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook") => {
            (Got::FailedClosed, s.message.clone())
        }
        Err(e) => (Got::Other, e.to_string()),
    }
}

async fn client(kubeconfig: &std::path::Path, service_account: Option<&str>) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .unwrap();
    if let Some(sa) = service_account {
        let ns = sa.split(':').nth(2).unwrap_or_default();
        config.auth_info.impersonate = Some(sa.to_owned());
        config.auth_info.impersonate_groups = Some(vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
        ]);
    }
    kube::Client::try_from(config).unwrap()
}

/// A field of a Deployment as text (through JSON: the same for every
/// Kubernetes version k8s-openapi is built for).
fn field(d: &Deployment, pointer: &str) -> String {
    let value = serde_json::to_value(d).unwrap();
    match value.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

fn replicas(d: &Deployment) -> String {
    field(d, "/spec/replicas")
}

fn image(d: &Deployment) -> String {
    field(d, "/spec/template/spec/containers/0/image")
}

/// One writer: alice alternating an ignored change and a drift on `name`,
/// or the Argo CD controller changing the image of `name`. After each
/// write the object is read back (as admin) and compared with the outcome.
async fn writer(
    writes: Api<Deployment>,
    reads: Api<Deployment>,
    name: String,
    human: bool,
    stop: Arc<AtomicBool>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
) {
    let mut before = reads.get(&name).await.unwrap();
    let mut k = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let (kind, patch, field, want): (Kind, Value, fn(&Deployment) -> String, String) = if !human
        {
            let want = format!("nginx:1.27-c{k}");
            (
                Kind::Controller,
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": want}]}}}}),
                image,
                want,
            )
        } else if k.is_multiple_of(2) {
            let n = replicas(&before).parse::<i32>().unwrap() % 5 + 1;
            (
                Kind::HumanIgnored,
                json!({"spec": {"replicas": n}}),
                replicas,
                n.to_string(),
            )
        } else {
            let want = format!("nginx:drift-{k}");
            (
                Kind::HumanDrift,
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": want}]}}}}),
                image,
                want,
            )
        };
        let started = Instant::now();
        let result = writes
            .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await;
        let ended = Instant::now();
        let (got, detail) = classify(result);
        let after = match reads.get(&name).await {
            Ok(d) => d,
            Err(e) => panic!("reading {name} back: {e}"),
        };
        let (old, observed) = (field(&before), field(&after));
        let expected_state = if got == Got::Applied { &want } else { &old };
        let state = if &observed == expected_state {
            Ok(())
        } else {
            Err(format!(
                "{got:?} but stored {observed:?} (before {old:?}, written {want:?})"
            ))
        };
        outcomes.lock().unwrap().push(Outcome {
            kind,
            object: name.clone(),
            started,
            ended,
            got,
            detail,
            state,
        });
        before = after;
        k += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

struct Load {
    rt: tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// `humans` writers as alice and `controllers` as the Argo CD
    /// controller, each on its own object (h-N, c-N).
    fn start(plane: &ControlPlane, humans: usize, controllers: usize) -> Load {
        let rt = tokio_runtime();
        let stop = Arc::new(AtomicBool::new(false));
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let (alice, admin, argo) = rt.block_on(async {
            (
                client(plane.kubeconfig("alice"), None).await,
                client(plane.kubeconfig("admin"), None).await,
                client(plane.kubeconfig("admin"), Some(ARGO)).await,
            )
        });
        let mut tasks = Vec::new();
        let writers = (0..humans)
            .map(|i| (format!("h-{i}"), alice.clone(), true))
            .chain((0..controllers).map(|i| (format!("c-{i}"), argo.clone(), false)));
        for (name, who, human) in writers {
            tasks.push(rt.spawn(writer(
                Api::namespaced(who, LOAD_NS),
                Api::namespaced(admin.clone(), LOAD_NS),
                name,
                human,
                stop.clone(),
                outcomes.clone(),
            )));
        }
        Load {
            rt,
            stop,
            outcomes,
            tasks,
        }
    }

    /// Waits until every kind has at least `n` writes started after `after`.
    fn wait(&self, after: Instant, n: usize, what: &str) {
        wait_for(what, Duration::from_secs(180), || {
            let outcomes = self.outcomes.lock().unwrap();
            let count = |kind| {
                outcomes
                    .iter()
                    .filter(|o| o.kind == kind && o.started > after)
                    .count()
            };
            let counts = [
                count(Kind::HumanIgnored),
                count(Kind::HumanDrift),
                count(Kind::Controller),
            ];
            if counts.iter().all(|&c| c >= n) {
                Ok(())
            } else {
                Err(format!("{counts:?} of {n}"))
            }
        });
        for t in &self.tasks {
            assert!(!t.is_finished(), "a writer stopped early (panicked?)");
        }
    }

    fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::SeqCst);
        let tasks = self.tasks;
        self.rt.block_on(async {
            for t in tasks {
                t.await.expect("a writer panicked");
            }
        });
        self.outcomes.lock().unwrap().clone()
    }
}

/// Objects, driftguard with the load policy, webhook registered: returns
/// the policy file.
fn load_setup(plane: &mut ControlPlane, humans: usize, controllers: usize) -> String {
    plane.prepare(&[LOAD_NS, "argocd"]);
    let policy = plane.dir.join("load-policy.yaml");
    std::fs::write(&policy, LOAD_POLICY).unwrap();
    let names: Vec<String> = (0..humans)
        .map(|i| format!("h-{i}"))
        .chain((0..controllers).map(|i| format!("c-{i}")))
        .collect();
    let out = plane.kubectl_as_stdin(ARGO, &["apply", "-f", "-"], Some(&load_objects(&names)));
    assert!(out.ok, "objects as the Argo CD controller: {out}");
    policy.display().to_string()
}

fn wait_until_denies(plane: &ControlPlane) {
    wait_for(
        "the webhook to deny alice's dry-run drift",
        Duration::from_secs(30),
        || {
            let out = plane.kubectl(
                "alice",
                &[
                    "-n",
                    LOAD_NS,
                    "set",
                    "image",
                    "deployment/h-0",
                    "app=nginx:probe",
                    "--dry-run=server",
                ],
            );
            if denied_by_driftguard(&out) {
                Ok(())
            } else {
                Err(out.to_string())
            }
        },
    );
}

fn failure_policies(plane: &ControlPlane) -> String {
    [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ]
    .iter()
    .map(|kind| {
        let out = plane.kubectl(
            "admin",
            &[
                "get",
                kind,
                "driftguard",
                "-o",
                "jsonpath={.webhooks[*].failurePolicy}",
            ],
        );
        assert!(out.ok, "{out}");
        out.stdout
    })
    .collect::<Vec<_>>()
    .join(" ")
}

/// What the apiserver counted of its webhook calls (for the report).
fn apiserver_webhook_metrics(plane: &ControlPlane) -> String {
    let out = plane.kubectl("admin", &["get", "--raw", "/metrics"]);
    out.stdout
        .lines()
        .filter(|l| {
            (l.starts_with("apiserver_admission_webhook_request_total")
                || l.starts_with("apiserver_admission_webhook_rejection_count"))
                && l.contains("driftguard")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

type Tally = BTreeMap<(String, Kind, Got), usize>;

fn tally_text(tally: &Tally) -> String {
    tally
        .iter()
        .map(|((phase, kind, got), n)| format!("  {phase:<10} {kind:?} -> {got:?}: {n}"))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------
// 2. SIGKILL of driftguard under load, failurePolicy Fail.

#[test]
fn sigkill_under_load_fails_closed_for_people_only() {
    let test_started = Instant::now();
    let (humans, controllers) = (3, 2);
    let mut plane = ControlPlane::start("faults-sigkill");
    let policy = load_setup(&mut plane, humans, controllers);
    let mut dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={policy}"),
            &plane.driftguard_kubeconfig_flag(),
        ],
    );
    dg.register(&plane, &policy);
    // Validating (main, Namespaces, untracked creates), then mutating (main,
    // Namespaces): only the creates webhook fails open.
    assert_eq!(
        failure_policies(&plane),
        "Fail Fail Ignore Fail Fail",
        "register's default"
    );
    wait_until_denies(&plane);

    let load = Load::start(&plane, humans, controllers);
    load.wait(test_started, 20, "writes while driftguard is up");
    let kill_at = Instant::now();
    dg.proc.child.kill().unwrap(); // SIGKILL
    let status = dg.proc.wait_exit(Duration::from_secs(10));
    let killed = Instant::now();
    load.wait(killed, 30, "writes while driftguard is dead");
    let restart_at = Instant::now();
    dg.restart(None);
    let ready_at = Instant::now();
    load.wait(ready_at, 20, "writes after the restart");
    let outcomes = load.finish();

    let mut tally = Tally::new();
    let mut wrong = Vec::new();
    for o in &outcomes {
        let phase = if o.ended < kill_at {
            "up"
        } else if o.started > killed && o.ended < restart_at {
            "dead"
        } else if o.started > ready_at {
            "restarted"
        } else {
            "transition"
        };
        *tally.entry((phase.into(), o.kind, o.got)).or_default() += 1;
        let ok = match (phase, o.kind.human()) {
            ("dead", true) => o.got == Got::FailedClosed,
            ("transition", true) => o.got == o.kind.correct() || o.got == Got::FailedClosed,
            _ => o.got == o.kind.correct(),
        };
        if !ok || o.state.is_err() {
            wrong.push(format!(
                "{phase} {:?} {}: {:?} {:?} {}",
                o.kind, o.object, o.got, o.state, o.detail
            ));
        }
    }
    // One answer of each shape the apiserver gave for a failed call.
    let mut samples = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.got == Got::FailedClosed) {
        let shape = o.detail.rsplit(": ").next().unwrap_or_default().to_owned();
        samples.entry(shape).or_insert_with(|| o.detail.clone());
    }
    let sample = samples.into_values().collect::<Vec<_>>().join("\n");
    let audited = dg.audit().len();
    eprintln!(
        "SIGKILL under load: {} writes; driftguard exited {status} and was dead {:?}, restart to ready {:?}; \
         the restarted driftguard audited {audited} reviews; test took {:?}\n{}\nfail-closed answers:\n{sample}\napiserver:\n{}",
        outcomes.len(),
        restart_at - killed,
        ready_at - restart_at,
        test_started.elapsed(),
        tally_text(&tally),
        apiserver_webhook_metrics(&plane),
    );
    assert!(
        wrong.is_empty(),
        "{} writes not as expected:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(audited > 0, "the restarted driftguard decided nothing");
}

// ---------------------------------------------------------------------------
// 3. Two replicas behind one address; one is SIGKILLed under load.

/// alice's validate decisions in a replica's audit.
fn decided_for_alice(dg: &Driftguard) -> usize {
    dg.audit()
        .iter()
        .filter(|r| r["user"] == "alice" && r["endpoint"] == "validate")
        .count()
}

/// The apiserver calls a URL webhook on a loopback address over HTTP/2
/// (one connection, so one replica carries every call); any other host
/// over HTTP/1.1 with a pool of connections, as it calls a Service
/// (k8s.io/apiserver util/webhook/client.go, kubernetes#75791).
#[test]
fn two_replicas_behind_one_address_one_sigkilled() {
    two_replicas("faults-replicas", "127.0.0.1");
}

/// The same at this machine's non-loopback address: HTTP/1.1 as in a
/// cluster, and both replicas take calls.
#[test]
fn two_replicas_over_http1_one_sigkilled() {
    let ip = tcp_proxy::non_loopback_ipv4()
        .expect("this test needs an IPv4 address that is not loopback (a default route)");
    two_replicas("faults-replicas-h1", &ip.to_string());
}

fn two_replicas(name: &str, host: &str) {
    let test_started = Instant::now();
    let http1 = host != "127.0.0.1";
    let (humans, controllers) = (4, 2);
    let mut plane = ControlPlane::start(name);
    let policy = load_setup(&mut plane, humans, controllers);
    // DRIFTGUARD_FAULTS_SHUTDOWN_DELAY=3s: with DRIFTGUARD_FAULTS_STOP=term,
    // the stopping replica drains as behind a Service.
    let delay = std::env::var("DRIFTGUARD_FAULTS_SHUTDOWN_DELAY")
        .map(|d| format!("--shutdown-delay={d}"))
        .unwrap_or_else(|_| "--shutdown-delay=0s".into());
    let a = Driftguard::start_with_names(
        &plane,
        &["127.0.0.1", host],
        &[
            &format!("--policy={policy}"),
            &plane.driftguard_kubeconfig_flag(),
            &delay,
        ],
    );
    let b = a.replica();
    let close = match std::env::var("DRIFTGUARD_PROXY_CLOSE").as_deref() {
        Ok("fin") => tcp_proxy::Close::Fin,
        Ok("rst") => tcp_proxy::Close::Reset,
        _ => tcp_proxy::Close::Mirror,
    };
    let proxy = tcp_proxy::TcpProxy::start_on(host.parse().unwrap(), &[a.port, b.port], close);
    std::net::TcpStream::connect((proxy.ip, proxy.port))
        .unwrap_or_else(|e| panic!("the proxy on {}:{}: {e}", proxy.ip, proxy.port));
    eprintln!(
        "proxy on {}:{} for {} and {}",
        proxy.ip, proxy.port, a.port, b.port
    );
    Driftguard::register_url(&plane, &policy, &format!("https://{host}:{}", proxy.port));
    wait_until_denies(&plane);

    let load = Load::start(&plane, humans, controllers);
    load.wait(test_started, 20, "writes with both replicas up");
    // Kill the replica that carries the most traffic.
    let mut replicas = [a, b];
    let counts = [
        decided_for_alice(&replicas[0]),
        decided_for_alice(&replicas[1]),
    ];
    let victim = if counts[0] >= counts[1] { 0 } else { 1 };
    let survivor = 1 - victim;
    let survivor_before = counts[survivor];
    let proxy_before = proxy.stats.summary();
    let kill_at = Instant::now();
    // DRIFTGUARD_FAULTS_STOP=term: a graceful stop instead, for comparison.
    if std::env::var("DRIFTGUARD_FAULTS_STOP").as_deref() == Ok("term") {
        replicas[victim].proc.terminate();
    } else {
        replicas[victim].proc.child.kill().unwrap(); // SIGKILL
    }
    let exit = replicas[victim].proc.wait_exit(Duration::from_secs(30));
    let killed = Instant::now();
    load.wait(killed, 30, "writes after one replica died");
    let outcomes = load.finish();
    let survivor_after = decided_for_alice(&replicas[survivor]);
    let victim_total = decided_for_alice(&replicas[victim]);
    // The proxy closed the apiserver's connections to the dead replica by then.
    let last_close = proxy
        .stats
        .backend_ended_at
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|&t| t >= kill_at)
        .max();

    let mut tally = Tally::new();
    let mut wrong = Vec::new();
    let mut failed = Vec::new();
    let mut decided_after_kill = 0;
    let relative = |t: Instant| {
        if t >= kill_at {
            format!("+{:?}", t - kill_at)
        } else {
            format!("-{:?}", kill_at - t)
        }
    };
    for o in &outcomes {
        let phase = if o.ended < kill_at {
            "both up"
        } else if o.started > killed {
            "one left"
        } else {
            "at the kill"
        };
        *tally.entry((phase.into(), o.kind, o.got)).or_default() += 1;
        if o.started > killed && o.kind.human() && o.got != Got::FailedClosed {
            decided_after_kill += 1;
        }
        // A call in flight on (or written into) a connection to the replica
        // that died: from at most the webhook timeout (5 s) before the kill
        // to shortly (1 s, generous) after the proxy closed that connection.
        let around_the_kill = o.started + Duration::from_secs(10) > kill_at
            && last_close.is_some_and(|c| o.started < c + Duration::from_secs(1));
        if o.got == Got::FailedClosed && o.kind.human() && around_the_kill {
            failed.push(format!(
                "{:?} {} started {} from the kill: {}",
                o.kind,
                o.object,
                relative(o.started),
                o.detail
            ));
        } else if o.got != o.kind.correct() {
            wrong.push(format!(
                "{phase} {:?} {} started {}: {:?} {}",
                o.kind,
                o.object,
                relative(o.started),
                o.got,
                o.detail
            ));
        }
        if let Err(e) = &o.state {
            wrong.push(format!("{phase} {:?} {}: state: {e}", o.kind, o.object));
        }
    }
    eprintln!(
        "two replicas ({}): {} writes; replica {victim} exited {exit} {:?} after the signal (it had decided {} of alice's writes, {victim_total} in all), \
         the survivor decided {survivor_before} before and {} after the kill; the proxy closed the last dead connection {}; \
         {} human writes failed closed (bound: {}, two per writer):\n{}\n{}\nproxy at the kill: {proxy_before}\nproxy at the end: {}\napiserver:\n{}\ntest took {:?}",
        if http1 { "HTTP/1.1" } else { "HTTP/2" },
        outcomes.len(),
        killed - kill_at,
        counts[victim],
        survivor_after - survivor_before,
        last_close.map(relative).unwrap_or_else(|| "never".into()),
        failed.len(),
        2 * humans,
        failed.join("\n"),
        tally_text(&tally),
        proxy.stats.summary(),
        apiserver_webhook_metrics(&plane),
        test_started.elapsed(),
    );
    assert!(
        wrong.is_empty(),
        "{} writes not as expected:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // Every connection after the kill reached the survivor (a dead replica
    // was skipped, never handed to the apiserver as a closed connection).
    assert_eq!(
        proxy
            .stats
            .no_backend
            .load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the proxy turned a connection away while a replica was up"
    );
    // One in flight at the kill, one more written into the dying connection
    // before the apiserver saw it close.
    assert!(
        failed.len() <= 2 * humans,
        "more human writes failed than could have met the dying connection"
    );
    assert!(
        survivor_after - survivor_before >= decided_after_kill,
        "the survivor decided {} of alice's writes after the kill, {decided_after_kill} were decided",
        survivor_after - survivor_before
    );
    if http1 {
        assert!(
            counts.iter().all(|&c| c > 0),
            "over HTTP/1.1 both replicas take calls before the kill: {counts:?}"
        );
    }
}
