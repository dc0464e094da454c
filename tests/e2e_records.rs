//! End to end on a real kube-apiserver: the sweeper checks its records
//! rather than trusting them (issue 50, item 2). A forged record dated 2099
//! is settled and deleted like any other; one whose name is not its object's
//! digest is left alone and never read; 10,000 forged records do not keep a
//! real one out; and an object whose CRD stops serving the version its
//! record names is read, and its break-glass ended, through the version
//! served now, while a type served by no version is reported as such.

use driftguard_testkit::armed::*;
use driftguard_testkit::control_plane;
use driftguard_testkit::measure::status_kib;
use driftguard_testkit::process::wait_for;

use std::time::{Duration, Instant};

use control_plane::*;
use serde_json::{Value, json};

/// The sweeper may read and end ConfigMaps and the test's Widgets.
const SWEEPS: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-sweeps}
rules:
  - {apiGroups: [""], resources: [configmaps], verbs: [get, list, patch]}
  - {apiGroups: [e2e.example.com], resources: [widgets], verbs: [get, list, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-sweeps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-sweeps}
subjects: [{kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: sam-edits-widgets, namespace: production}
rules: [{apiGroups: [e2e.example.com], resources: [widgets], verbs: [get, list, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: sam-edits-widgets, namespace: production}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sam-edits-widgets}
subjects: [{kind: User, name: sam, apiGroup: rbac.authorization.k8s.io}]
"#;

/// Widgets served at v1 (`v1_served`) and v2, stored at v2.
fn widget_crd(v1_served: bool) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.e2e.example.com}}
spec:
  group: e2e.example.com
  names: {{kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}}
  scope: Namespaced
  versions:
    - name: v1
      served: {v1_served}
      storage: false
      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
    - name: v2
      served: true
      storage: true
      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"#
    )
}

/// The record driftguard would write for `group/plural` object
/// `namespace/name` (`kind`, at `api_version`), with `data` added: its name
/// is the object's digest unless `name_as` gives another.
fn record(
    api_version: &str,
    kind: &str,
    plural: &str,
    namespace: &str,
    name: &str,
    data: Value,
    name_as: Option<&str>,
) -> Value {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let id = format!("{group}/{plural}/{namespace}/{name}");
    let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let record_name = name_as.map_or(format!("driftguard-armed-{hex}"), str::to_owned);
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": record_name, "namespace": "default",
            "labels": {"driftguard.io/break-glass-record": "true"}},
        "data": {"apiVersion": api_version, "kind": kind, "resource": plural,
            "namespace": namespace, "name": name}});
    for (k, v) in data.as_object().unwrap() {
        cm["data"][k] = v.clone();
    }
    cm
}

/// Whether ConfigMap `name` exists in `default`.
fn exists(plane: &ControlPlane, name: &str) -> bool {
    let out = plane.kubectl("admin", &["-n", "default", "get", "configmap", name]);
    out.ok
}

/// driftguard serving and sweeping, once `objects` (GitOps-managed, which
/// only Flux may create once the webhook is registered) are there.
/// Waits until ConfigMap production/real carries no break-glass expiry.
fn wait_ended(plane: &ControlPlane, dg: &Driftguard, timeout: Duration) {
    wait_for("the real arming to be ended", timeout, || {
        let expiry = "jsonpath={.metadata.annotations.driftguard\\.io/break-glass-expires}";
        let out = plane.kubectl(
            "admin",
            &["-n", "production", "get", "configmap", "real", "-o", expiry],
        );
        match out.stdout.trim().is_empty() {
            true => Ok(()),
            false => Err(format!("still armed; {}", dg.proc.stderr_tail(5))),
        }
    });
}

fn start(plane: &mut ControlPlane, name: &str, objects: &[&str]) -> Driftguard {
    plane.prepare(&["production", "argocd"]);
    plane.add_user("sam", &[]);
    plane.apply_admin(SAM_EDITS_PRODUCTION);
    for yaml in objects {
        plane.apply_admin(yaml);
    }
    plane.apply_admin(SWEEPS);
    let policy = plane.dir.join(format!("{name}-policy.yaml"));
    std::fs::write(
        &policy,
        "breakGlass:\n  allowedUsers: [sam]\n  maxDuration: 1h\n",
    )
    .unwrap();
    let dg = Driftguard::start(
        plane,
        &[
            &format!("--policy={}", policy.display()),
            &plane.driftguard_kubeconfig_flag(),
            "--break-glass-sweep-interval=1s",
        ],
    );
    dg.register(plane, &policy.display().to_string());
    dg
}

/// A record dated 2099 naming an object that is not armed is dated when the
/// sweeper saw it: it settles after the grace (70 s) and is deleted, not
/// read every 3 s until 2099. One whose name is not its object's digest is
/// left alone, never held. And a real arming among them is ended on time.
#[test]
fn a_forged_record_dated_2099_is_settled_and_one_misnamed_is_never_held() {
    let mut plane = ControlPlane::start("records-forged");
    let dg = start(&mut plane, "forged", &[&flux_configmap("real")]);
    let far = json!({"recorded": "2099-01-01T00:00:00Z", "look": "2099-01-01T00:00:00Z",
        "expires": "2099-01-01T00:00:00Z"});
    let dated = record(
        "v1",
        "ConfigMap",
        "configmaps",
        "production",
        "ghost",
        far.clone(),
        None,
    );
    let misnamed = record(
        "v1",
        "ConfigMap",
        "configmaps",
        "production",
        "ghost",
        far,
        Some("driftguard-armed-not-a-digest"),
    );
    let dated_name = dated["metadata"]["name"].as_str().unwrap().to_owned();
    let started = Instant::now();
    for cm in [&dated, &misnamed] {
        plane.apply_admin(&cm.to_string());
    }
    arm(&plane, "real", 10, "default");
    wait_for(
        "the 2099 record to be settled and deleted",
        Duration::from_secs(120),
        || match exists(&plane, &dated_name) {
            false => Ok(()),
            true => Err(dg.proc.stderr_tail(5)),
        },
    );
    let took = started.elapsed();
    eprintln!("the 2099 record was deleted after {took:?}");
    assert!(
        took >= Duration::from_secs(65),
        "before the grace: {took:?}"
    );
    assert!(
        exists(&plane, "driftguard-armed-not-a-digest"),
        "a record driftguard did not write is left alone"
    );
    let logs = dg.proc.stderr_text();
    assert!(
        logs.contains("did not write"),
        "the misnamed record is reported: {}",
        dg.proc.stderr_tail(20)
    );
    wait_ended(&plane, &dg, Duration::from_secs(30));
}

/// Widget `production/w`, managed by Flux.
const WIDGET: &str = r#"apiVersion: e2e.example.com/v2
kind: Widget
metadata:
  name: w
  namespace: production
  labels:
    kustomize.toolkit.fluxcd.io/name: apps
    kustomize.toolkit.fluxcd.io/namespace: flux-system
"#;

/// Arms Widget `production/w` through `version` as sam, for `seconds`.
fn arm_widget(plane: &ControlPlane, version: &str, seconds: i64) {
    let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(seconds))
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    let patch = json!({"metadata": {
        "labels": {"driftguard.io/break-glass": "true"},
        "annotations": {
            "driftguard.io/break-glass": "INC-7 hotfix",
            "driftguard.io/break-glass-expires": expires,
            "driftguard.io/break-glass-paused": "kustomize.toolkit.fluxcd.io/reconcile",
            "kustomize.toolkit.fluxcd.io/reconcile": "disabled"}}});
    let resource = format!("widgets.{version}.e2e.example.com");
    wait_for("sam to arm the Widget", Duration::from_secs(30), || {
        let out = plane.kubectl(
            "sam",
            &[
                "-n",
                "production",
                "patch",
                &resource,
                "w",
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
        );
        let recorded = recorded(plane, "default");
        match (out.ok, recorded.contains(&"production/w".to_owned())) {
            (true, true) => Ok(()),
            _ => Err(format!("{out}; recorded {recorded:?}")),
        }
    });
}

/// A Widget armed through v1, recorded at v1; then the CRD stops serving
/// v1. The sweeper reads it through v2 (what discovery prefers now) and
/// ends it at expiry. A record of a type served by no version is reported
/// as not served, never as missing RBAC.
#[test]
fn an_object_whose_version_stops_being_served_is_ended_through_the_served_one() {
    let mut plane = ControlPlane::start("records-unserved");
    plane.apply_admin(&widget_crd(true));
    let wait = [
        "wait",
        "--for=condition=established",
        "crd/widgets.e2e.example.com",
    ];
    assert!(plane.kubectl("admin", &wait).ok);
    let dg = start(&mut plane, "unserved", &[WIDGET]);
    arm_widget(&plane, "v1", 20);
    let out = plane.kubectl(
        "admin",
        &[
            "-n",
            "default",
            "get",
            "configmaps",
            "-l",
            "driftguard.io/break-glass-record",
            "-o",
            "jsonpath={.items[*].data.apiVersion}",
        ],
    );
    assert!(
        out.stdout.contains("e2e.example.com/v1"),
        "recorded at v1: {out}"
    );
    // v1 no longer served: a read at v1 would be a plain-text 404.
    plane.apply_admin(&widget_crd(false));
    // A record whose type no version serves.
    plane.apply_admin(
        &record(
            "gone.example.com/v1",
            "Gadget",
            "gadgets",
            "production",
            "g",
            json!({}),
            None,
        )
        .to_string(),
    );
    wait_for(
        "the Widget's break-glass to be ended through v2",
        Duration::from_secs(60),
        || {
            let out = plane.kubectl(
                "admin",
                &[
                    "-n",
                    "production",
                    "get",
                    "widgets.v2.e2e.example.com",
                    "w",
                    "-o",
                    "json",
                ],
            );
            let w: Value = serde_json::from_str(&out.stdout).unwrap_or_default();
            match w["metadata"]["annotations"]["driftguard.io/break-glass-expires"].is_null() {
                true => Ok(()),
                false => Err(format!("still armed; {}", dg.proc.stderr_tail(5))),
            }
        },
    );
    wait_for(
        "the unserved type to be reported",
        Duration::from_secs(20),
        || match dg.proc.stderr_line("served by no version") {
            Some(line) if line.contains("gone.example.com/gadgets") => Ok(()),
            _ => Err(dg.proc.stderr_tail(5)),
        },
    );
    let logs = dg.proc.stderr_text();
    let rbac = logs
        .lines()
        .filter(|l| l.contains("gone.example.com") && l.contains("it needs get and patch"))
        .count();
    assert_eq!(rbac, 0, "reported as RBAC: {logs}");
}

/// 10,000 records nobody armed, dated 2099, fill the sweeper's bound before
/// a real arming is recorded. They are read, found not armed, settle (their
/// dates clamped to when they were seen) and are deleted; the real record
/// then takes its place and its break-glass is ended. Unclamped, they never
/// settle, and the real one is never held.
#[test]
fn ten_thousand_forged_records_do_not_keep_a_real_one_out() {
    const FORGED: usize = 10_000;
    let mut plane = ControlPlane::start("records-flood");
    let far = json!({"recorded": "2099-01-01T00:00:00Z", "expires": "2099-01-01T00:00:00Z"});
    let items: Vec<Value> = (0..FORGED)
        .map(|i| {
            let ns = format!("tenant-{i}");
            record("v1", "ConfigMap", "configmaps", &ns, "x", far.clone(), None)
        })
        .collect();
    // Created before the webhook is registered, 4 kubectl at a time.
    let lists: Vec<String> = items
        .chunks(FORGED / 4)
        .map(|c| json!({"apiVersion": "v1", "kind": "List", "items": c}).to_string())
        .collect();
    let created = Instant::now();
    std::thread::scope(|s| {
        let plane = &plane;
        let runs: Vec<_> = (lists.iter())
            .map(|l| s.spawn(move || plane.kubectl_stdin("admin", &["create", "-f", "-"], Some(l))))
            .collect();
        for run in runs {
            let out = run.join().unwrap();
            assert!(out.ok, "{}", &out.stderr[..out.stderr.len().min(2000)]);
        }
    });
    eprintln!("{FORGED} forged records created in {:?}", created.elapsed());
    let dg = start(&mut plane, "flood", &[&flux_configmap("real")]);
    let armed_at = Instant::now();
    arm(&plane, "real", 20, "default");
    wait_ended(&plane, &dg, Duration::from_secs(400));
    let pid = dg.proc.child.id();
    eprintln!(
        "the real break-glass was ended {:?} after it was armed (20 s break-glass); driftguard's RSS {} MiB, peak {} MiB",
        armed_at.elapsed(),
        status_kib(pid, "VmRSS") / 1024,
        status_kib(pid, "VmHWM") / 1024
    );
}
