//! The generative differential oracle against the real Argo CD and Flux.
//!
//! One control plane, four runs, each in a namespace of its own: Flux (a
//! Kustomization) and Argo CD with client-side apply, with
//! `ServerSideApply=true`, and with `ServerSideApply=true` plus
//! `ServerSideDiff=true`. Git declares objects of every kind the tools apply
//! (`testkit/src/generate.rs`); once synced, each object gets one edit by
//! alice generated from its own live tree and written the way a person does.
//! The namespaces are in audit mode, so every edit lands and driftguard's
//! verdict is read from its audit records; the tool's is Argo CD's
//! per-resource sync status after a hard refresh, or whether Flux's next
//! reconcile reverted what the edit changed. `testkit/src/agreement.rs`
//! judges the pair. Seeded by `ORACLE_SEED` (printed); `ORACLE_OBJECTS`
//! changes the objects per run (760; four thirds of it under client-side
//! apply) and `ORACLE_MIN_JUDGED` the judged
//! edits each run must reach (500).

use driftguard_testkit::agreement;
use driftguard_testkit::control_plane;
use driftguard_testkit::generate;
use driftguard_testkit::gitops;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use agreement::{Outcome, Written};
use control_plane::*;
use generate::Rng;
use gitops::*;

const POLICY: &str = "tests/data/gitops-policy.yaml";

/// driftguard reads AppProjects with `--watch-argocd`, as the chart grants.
const DRIFTGUARD_ARGOCD_RBAC: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-gitops}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications, appprojects]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-gitops}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-gitops}
subjects: [{kind: User, name: driftguard}]
"#;

/// Which tool answers a run, and how Argo CD syncs and diffs.
#[derive(Clone, Copy)]
enum Tool {
    Flux,
    ArgoCd {
        app: &'static str,
        server_side_apply: bool,
        server_side_diff: bool,
    },
}

struct Run {
    label: &'static str,
    namespace: &'static str,
    tool: Tool,
    /// Objects, in thirds of `ORACLE_OBJECTS`: under client-side apply
    /// driftguard refuses more writes in every mode (kubectl `replace` and
    /// `apply` rewrite the last-applied record), and those are not judged.
    thirds: usize,
}

impl Run {
    fn objects(&self, objects: usize) -> usize {
        objects * self.thirds / 3
    }
}

const RUNS: [Run; 4] = [
    Run {
        label: "Flux v1.9.6 (Kustomization)",
        namespace: "oracle-flux",
        tool: Tool::Flux,
        thirds: 3,
    },
    Run {
        label: "Argo CD v3.6.1, client-side apply",
        namespace: "oracle-argo-csa",
        tool: Tool::ArgoCd {
            app: "oracle-csa",
            server_side_apply: false,
            server_side_diff: false,
        },
        thirds: 4,
    },
    Run {
        label: "Argo CD v3.6.1, ServerSideApply=true",
        namespace: "oracle-argo-ssa",
        tool: Tool::ArgoCd {
            app: "oracle-ssa",
            server_side_apply: true,
            server_side_diff: false,
        },
        thirds: 3,
    },
    Run {
        label: "Argo CD v3.6.1, ServerSideApply=true + ServerSideDiff=true",
        namespace: "oracle-argo-ssd",
        tool: Tool::ArgoCd {
            app: "oracle-ssd",
            server_side_apply: true,
            server_side_diff: true,
        },
        thirds: 3,
    },
];

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// alice may write anything in the oracle's namespaces (RBAC must not be
/// what refuses an edit; escalation checks included).
fn alice_rbac(namespace: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: alice-admin, namespace: {namespace}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}}]\n"
    )
}

/// The Kustomization, and the GitRepository it reads.
fn flux_objects(url: &str, path: &str) -> String {
    format!(
        r#"apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {{name: repo, namespace: flux-system}}
spec:
  interval: 1h
  url: {url}
  ref: {{branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {{name: oracle, namespace: flux-system}}
spec:
  interval: 1h
  path: ./{path}
  prune: true
  wait: false
  timeout: 10m
  sourceRef: {{kind: GitRepository, name: repo}}
"#
    )
}

/// The ignore rules of tests/data/gitops-policy.yaml (and so of the
/// Applications), by kind: JSON pointers.
const IGNORED: &[(&str, &str)] = &[
    ("Deployment", "/spec/replicas"),
    ("Service", "/metadata/annotations"),
    ("CronJob", "/spec/schedule"),
];

fn ignored(kind: &str) -> Vec<&'static str> {
    IGNORED
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, p)| *p)
        .collect()
}

/// An Application of the run's mode with the policy's ignoreDifferences,
/// automated without self-heal: Argo CD is asked, not left to revert.
fn application(tool: Tool, url: &str, path: &str, namespace: &str) -> String {
    let Tool::ArgoCd {
        app,
        server_side_apply,
        server_side_diff,
    } = tool
    else {
        unreachable!("an Argo CD run")
    };
    let annotations = if server_side_diff {
        "\n  annotations: {argocd.argoproj.io/compare-options: ServerSideDiff=true}"
    } else {
        ""
    };
    let ssa = if server_side_apply {
        ", ServerSideApply=true"
    } else {
        ""
    };
    format!(
        r#"apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: {app}
  namespace: argocd{annotations}
spec:
  project: default
  source: {{repoURL: '{url}', targetRevision: main, path: {path}}}
  destination: {{server: https://kubernetes.default.svc, namespace: {namespace}}}
  syncPolicy:
    automated: {{prune: true, selfHeal: false}}
    syncOptions: [RespectIgnoreDifferences=true{ssa}]
  ignoreDifferences:
    - group: apps
      kind: Deployment
      jsonPointers: [/spec/replicas]
    - group: ""
      kind: Pod
      jqPathExpressions: ['.spec.containers[] | select(.name == "istio-proxy")']
    - group: ""
      kind: Service
      jsonPointers: [/metadata/annotations]
    - group: batch
      kind: CronJob
      jsonPointers: [/spec/schedule]
"#
    )
}

/// Asks kustomize-controller to reconcile `flux-system/oracle` now and
/// waits (up to `timeout`) until it handled that request and is Ready at
/// `revision`.
fn flux_reconcile(plane: &ControlPlane, revision: &str, timeout: Duration) {
    let token = format!("{}", jiff::Timestamp::now().as_nanosecond());
    for object in ["gitrepository/repo", "kustomization/oracle"] {
        ok(
            plane.kubectl(
                "admin",
                &[
                    "-n",
                    "flux-system",
                    "annotate",
                    "--overwrite",
                    object,
                    &format!("reconcile.fluxcd.io/requestedAt={token}"),
                ],
            ),
            "request a Flux reconcile",
        );
    }
    eventually("Flux to reconcile the oracle", timeout, || {
        let k = get_json(plane, &["-n", "flux-system", "kustomization", "oracle"])
            .ok_or("no Kustomization")?;
        let handled = field(&k, "/status/lastHandledReconcileAt");
        let ready = k["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            .cloned()
            .unwrap_or_default();
        let applied = field(&k, "/status/lastAppliedRevision").unwrap_or_default();
        if handled.as_deref() == Some(&token)
            && ready["status"] == "True"
            && applied.ends_with(revision)
        {
            Ok(())
        } else {
            Err(format!(
                "handled={handled:?} applied={applied} ready={ready}"
            ))
        }
    });
}

/// Waits until Application `name` synced `revision` and every resource is Synced.
fn argo_synced(plane: &ControlPlane, argo: &ArgoCd, name: &str, revision: &str, timeout: Duration) {
    eventually(&format!("Application {name} synced"), timeout, || {
        let app =
            get_json(plane, &["-n", "argocd", "application", name]).ok_or("no Application")?;
        let sync = field(&app, "/status/sync/status").unwrap_or_default();
        let at = field(&app, "/status/sync/revision").unwrap_or_default();
        let op = field(&app, "/status/operationState/phase").unwrap_or_default();
        if sync == "Synced" && at == revision && op == "Succeeded" {
            Ok(())
        } else {
            Err(format!(
                "sync={sync} revision={at} operation={op} message={:?}\n{}",
                field(&app, "/status/operationState/message"),
                argo.logs()
            ))
        }
    });
}

/// Hard-refreshes Application `name` and returns it once compared again.
fn argo_hard_refresh(plane: &ControlPlane, name: &str, timeout: Duration) -> Value {
    let before = get_json(plane, &["-n", "argocd", "application", name])
        .and_then(|a| field(&a, "/status/reconciledAt"));
    // reconciledAt has a resolution of one second.
    std::thread::sleep(Duration::from_millis(1100));
    ok(
        plane.kubectl(
            "admin",
            &[
                "-n",
                "argocd",
                "annotate",
                "--overwrite",
                &format!("application/{name}"),
                "argocd.argoproj.io/refresh=hard",
            ],
        ),
        "hard refresh",
    );
    eventually(&format!("Application {name} refreshed"), timeout, || {
        let app =
            get_json(plane, &["-n", "argocd", "application", name]).ok_or("no Application")?;
        let pending = app["metadata"]["annotations"]
            .get("argocd.argoproj.io/refresh")
            .is_some();
        let at = field(&app, "/status/reconciledAt");
        if !pending && at.is_some() && at != before {
            Ok(app)
        } else {
            Err(format!("pending={pending} reconciledAt={at:?}"))
        }
    })
}

/// Both tools' CRDs, applied and Established before either tool starts
/// (each tool's own install waits on every CRD at once).
fn preinstall_crds(plane: &ControlPlane, tools: &Tools) {
    for dir in ["flux", "argocd"] {
        install_crds(plane, &tools.assets.join(dir));
    }
}

/// The run's objects as they are now, by name.
fn live(plane: &ControlPlane, namespace: &str) -> BTreeMap<String, Value> {
    let list = get_json(
        plane,
        &[
            "-n",
            namespace,
            &generate::all_resources(),
            "--show-managed-fields",
        ],
    )
    .expect("the oracle's objects");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_owned(),
                o.clone(),
            )
        })
        // Not the namespace's own (alice's RoleBinding, a default account).
        .filter(|(name, _)| {
            name.strip_prefix('o')
                .is_some_and(|n| n.parse::<usize>().is_ok())
        })
        .collect()
}

/// Argo CD's entry for one resource of the Application.
fn argo_resource<'a>(app: &'a Value, namespace: &str, name: &str) -> Option<&'a Value> {
    app["status"]["resources"]
        .as_array()?
        .iter()
        .find(|res| res["namespace"] == namespace && res["name"] == name)
}

/// Runs every command as alice, `threads` at a time.
fn write_all(
    plane: &ControlPlane,
    commands: &[(Vec<String>, Option<String>)],
    threads: usize,
) -> Vec<Kubectl> {
    let next = AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Kubectl>>> = commands
        .iter()
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((args, stdin)) = commands.get(i) else {
                        break;
                    };
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let out = plane.kubectl_stdin("alice", &args, stdin.as_deref());
                    *results[i].lock().unwrap() = Some(out);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|r| r.into_inner().unwrap().expect("every command ran"))
        .collect()
}

/// driftguard's verdict on what landed of alice's write of
/// `namespace/name`: drift when any request that landed was recorded as
/// drift (audit mode). A refused request did not land: `kubectl apply
/// --server-side` rewrites an existing last-applied record in a request of
/// its own, which driftguard refuses in every mode as a decision input, and
/// kubectl still reports the apply itself done.
fn verdicts(dg: &Driftguard) -> BTreeMap<(String, String), bool> {
    let mut out = BTreeMap::new();
    for r in dg.audit() {
        if r["user"] == "alice"
            && r["operation"] == "UPDATE"
            && let (Some(ns), Some(name), Some(verdict)) = (
                r["namespace"].as_str(),
                r["name"].as_str(),
                r["verdict"].as_str(),
            )
        {
            *out.entry((ns.to_owned(), name.to_owned())).or_default() |= verdict == "audit";
        }
    }
    out
}

/// The Applications as driftguard's `--watch-argocd` reads them.
fn applications(plane: &ControlPlane) -> Vec<driftguard::policy::Application> {
    let out = ok(
        plane.kubectl(
            "admin",
            &["-n", "argocd", "get", "applications", "-o", "json"],
        ),
        "the Applications",
    );
    let list: Value = serde_json::from_str(&out.stdout).expect("a list of Applications");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .flat_map(|app| {
            driftguard::policy::argocd::parse(&app.to_string(), "live Application")
                .expect("a live Application parses")
                .applications
        })
        .collect()
}

struct Phases(Instant, Vec<(String, Duration)>);

impl Phases {
    fn done(&mut self, what: &str) {
        let now = Instant::now();
        let took = now - self.0;
        eprintln!("oracle phase: {what}: {:.1} s", took.as_secs_f64());
        self.1.push((what.to_owned(), took));
        self.0 = now;
    }
}

#[test]
fn generated_edits_agree_with_argo_cd_in_every_mode_and_with_flux() {
    let objects = env_number("ORACLE_OBJECTS", 760);
    let min_judged = env_number("ORACLE_MIN_JUDGED", 500);
    let threads = env_number("ORACLE_THREADS", 4);
    let seed = generate::seed();
    eprintln!("ORACLE_SEED={seed} ORACLE_OBJECTS={objects}");
    let started = Instant::now();
    let mut phases = Phases(Instant::now(), Vec::new());

    let tools = Tools::build();
    let mut plane = ControlPlane::start("oracle");
    let namespaces: Vec<&str> = RUNS.iter().map(|r| r.namespace).collect();
    plane.prepare(&["argocd", "flux-system"]);
    plane.create_namespaces(&namespaces);
    plane.apply_admin(DRIFTGUARD_ARGOCD_RBAC);
    for ns in &namespaces {
        plane.apply_admin(&alice_rbac(ns));
    }
    plane.apply_admin(generate::WIDGET_CRD);
    ok(
        plane.kubectl(
            "admin",
            &[
                "wait",
                "--for=condition=Established",
                "crd/widgets.oracle.example.com",
                "--timeout=60s",
            ],
        ),
        "the Widget CRD",
    );
    let repo = GitRepo::new(&plane, &tools);
    preinstall_crds(&plane, &tools);
    let flux = Flux::start(&plane, &tools);
    let mut argo = ArgoCd::start(&plane, &tools, "");
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={ROOT}/{POLICY}"),
            &plane.driftguard_kubeconfig_flag(),
            "--watch-argocd",
            "--watch-flux",
        ],
    );
    dg.register(&plane, &format!("{ROOT}/{POLICY}"));
    phases.done("control plane, Flux, Argo CD, driftguard");

    // Git declares `objects` objects per run; the tools apply them.
    let manifests: Vec<(String, String)> = RUNS
        .iter()
        .map(|r| {
            (
                format!("{}/objects.yaml", r.namespace),
                generate::manifests(r.namespace, r.objects(objects)),
            )
        })
        .collect();
    let files: Vec<(&str, Option<&str>)> = manifests
        .iter()
        .map(|(p, c)| (p.as_str(), Some(c.as_str())))
        .collect();
    let rev = repo.commit("oracle objects", &files);
    let url = repo.file_url();
    for run in &RUNS {
        match run.tool {
            Tool::Flux => plane.apply_admin(&flux_objects(&repo.http_url, run.namespace)),
            tool => plane.apply_admin(&application(tool, &url, run.namespace, run.namespace)),
        }
    }
    let sync_timeout = Duration::from_secs(900);
    flux_reconcile(&plane, &rev, sync_timeout);
    for run in &RUNS {
        if let Tool::ArgoCd { app, .. } = run.tool {
            argo_synced(&plane, &argo, app, &rev, sync_timeout);
        }
    }
    let before: Vec<BTreeMap<String, Value>> =
        RUNS.iter().map(|r| live(&plane, r.namespace)).collect();
    for (run, objs) in RUNS.iter().zip(&before) {
        assert_eq!(
            objs.len(),
            run.objects(objects),
            "{} applied every object",
            run.label
        );
    }
    phases.done("sync");

    // One generated edit per object, written as alice.
    let mut edits = Vec::new();
    for (r, run) in RUNS.iter().enumerate() {
        let mut rng = Rng::new(seed.wrapping_add(r as u64 * 0x9E37_79B9));
        for i in 0..run.objects(objects) {
            let manifest = generate::manifest(run.namespace, i);
            let name = format!("o{i}");
            let method = generate::METHODS[rng.below(generate::METHODS.len())];
            let mut edit = generate::generate(&mut rng, &manifest, &before[r][&name], method);
            if rng.below(2) == 1 {
                edit.manager = Some(generate::SCRIPT_MANAGER);
            }
            edits.push((r, manifest, edit));
        }
    }
    let commands: Vec<_> = edits
        .iter()
        .map(|(r, _, e)| e.command(&before[*r][&e.name]))
        .collect();
    // Argo CD is asked only after every edit, by a hard refresh: stopped
    // meanwhile, it does not compare three large Applications on each write
    // (a third of the machine on the 2-core runs); it lists anew on restart.
    argo.stop_controller();
    let written = write_all(&plane, &commands, threads);
    argo.restart_controller();
    let edited: Vec<BTreeMap<String, Value>> =
        RUNS.iter().map(|r| live(&plane, r.namespace)).collect();
    let recorded = verdicts(&dg);
    phases.done("edits written");

    // The tools' answers: Flux's objects after its next reconcile, Argo CD's
    // Application after a hard refresh.
    let answer_timeout = Duration::from_secs(600);
    let answers: Vec<Value> = RUNS
        .iter()
        .map(|run| match run.tool {
            Tool::Flux => {
                flux_reconcile(&plane, &rev, answer_timeout);
                Value::Object(live(&plane, run.namespace).into_iter().collect())
            }
            Tool::ArgoCd { app, .. } => argo_hard_refresh(&plane, app, answer_timeout),
        })
        .collect();
    let tool_drift = |r: usize, name: &str| -> Option<bool> {
        match RUNS[r].tool {
            Tool::Flux => {
                let (b, e) = (&before[r][name], &edited[r][name]);
                let after = answers[r].get(name)?;
                let changed = generate::edited_paths(b, e);
                Some(changed.iter().any(|p| after.pointer(p) != e.pointer(p)))
            }
            Tool::ArgoCd { .. } => argo_resource(&answers[r], RUNS[r].namespace, name)
                .and_then(|res| res["status"].as_str())
                .map(|s| s == "OutOfSync"),
        }
    };
    phases.done("tool answers");

    let policy_text = std::fs::read_to_string(format!("{ROOT}/{POLICY}")).unwrap();
    // Judged as the live driftguard judges, with the Applications it
    // watches (their ignore rules, and the sync and diff mode each names).
    let owned_fields =
        agreement::owned_fields_policy(&policy_text).with_applications(applications(&plane));
    let mut outcomes: Vec<Vec<Outcome>> = RUNS.iter().map(|_| Vec::new()).collect();
    let mut unrecorded = Vec::new();
    for ((r, manifest, edit), out) in edits.into_iter().zip(written) {
        let (b, e) = (&before[r][&edit.name], &edited[r][&edit.name]);
        let paths = generate::edited_paths(b, e);
        let why = out.stderr.lines().last().unwrap_or_default().to_owned();
        let written = if !out.ok && out.stderr.contains("driftguard") {
            Written::Refused(why)
        } else if !out.ok {
            Written::Rejected(why)
        } else if paths.is_empty() {
            Written::NoChange
        } else {
            Written::Changed(paths.clone())
        };
        let verdict = recorded.get(&(edit.namespace.clone(), edit.name.clone()));
        if matches!(written, Written::Changed(_)) && verdict.is_none() {
            unrecorded.push(format!("{}/{}", edit.namespace, edit.name));
        }
        outcomes[r].push(Outcome {
            driftguard_drift: verdict.copied().unwrap_or(false),
            tool_drift: tool_drift(r, &edit.name),
            owned_fields_drift: agreement::judged_drift(&owned_fields, b, e),
            outside_git: agreement::outside_git(
                &manifest,
                &generate::edited_paths_by_key(b, e),
                &ignored(&edit.kind),
            ),
            ownership_moved: agreement::ownership_moved(b, e),
            written,
            edit,
        });
    }
    phases.done("judged");

    let mut report = format!(
        "## Generative oracle: ORACLE_SEED={seed}, ORACLE_OBJECTS={objects}, {:.0} s\n\n{}\n",
        started.elapsed().as_secs_f64(),
        agreement::summary_header()
    );
    for (run, o) in RUNS.iter().zip(&outcomes) {
        report.push_str(&agreement::summary_row(run.label, o));
        report.push('\n');
    }
    for (run, answer) in RUNS.iter().zip(&answers) {
        if let Some(conditions) = answer.pointer("/status/conditions") {
            report.push_str(&format!("\n{} conditions: {conditions}\n", run.label));
        }
    }
    report.push_str("\nPhases: ");
    report.push_str(
        &phases
            .1
            .iter()
            .map(|(w, d)| format!("{w} {:.0} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join("; "),
    );
    report.push('\n');
    for (run, o) in RUNS.iter().zip(&outcomes) {
        report.push('\n');
        report.push_str(&agreement::tables(run.label, seed, o));
    }
    let mut rejected = String::from(
        "\n### Rejected by the apiserver or refused by driftguard (first per kind and write)\n\n",
    );
    let mut seen = std::collections::BTreeSet::new();
    for o in outcomes.iter().flatten() {
        if let Written::Rejected(why) | Written::Refused(why) = &o.written
            && seen.insert((o.edit.kind.clone(), o.edit.method))
        {
            rejected.push_str(&format!(
                "- {} by {}: {}\n",
                o.edit.kind,
                o.edit.method.name(),
                why
            ));
        }
    }
    report.push_str(&rejected);
    eprintln!("{report}");
    let dir = std::path::Path::new(ROOT).join("target/e2e");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("oracle-generative.md"), &report);

    // What a failing edit needs to be understood: the objects, the tool's
    // answer and driftguard's records, one JSON line each.
    let audit = dg.audit();
    let mut debug = String::new();
    for (r, o) in outcomes.iter().enumerate() {
        for o in o.iter().filter(|o| !o.passes()) {
            let name = o.edit.name.as_str();
            let line = serde_json::json!({
                "run": RUNS[r].label,
                "edit": format!("{:?}", o.edit),
                "before": before[r][name],
                "edited": edited[r][name],
                "tool": match RUNS[r].tool {
                    Tool::Flux => answers[r][name].clone(),
                    Tool::ArgoCd { .. } => argo_resource(&answers[r], RUNS[r].namespace, name).cloned().unwrap_or_default(),
                },
                "audit": audit.iter().filter(|a| a["namespace"] == RUNS[r].namespace && a["name"] == name).collect::<Vec<_>>(),
            });
            debug.push_str(&line.to_string());
            debug.push('\n');
        }
    }
    let _ = std::fs::write(dir.join("oracle-generative-failures.jsonl"), &debug);

    let mut failures: Vec<String> = RUNS
        .iter()
        .zip(&outcomes)
        .flat_map(|(run, o)| agreement::failures(run.label, o))
        .collect();
    failures.extend(
        unrecorded
            .iter()
            .map(|u| format!("no audit record for a changed object: {u}")),
    );
    for (run, o) in RUNS.iter().zip(&outcomes) {
        let judged = o.iter().filter(|o| o.judged()).count();
        if judged < min_judged {
            failures.push(format!(
                "{}: {judged} judged edits, fewer than {min_judged}",
                run.label
            ));
        }
    }
    drop((flux, argo));
    assert!(
        failures.is_empty(),
        "{} failures (seed {seed}):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
