//! The real Argo CD (v3.6.1) scenarios in each of its sync and diff modes,
//! three Applications side by side in one control plane, each in its own
//! namespace:
//!
//! - `csa`: client-side apply, the default; the legacy three-way diff reads
//!   `kubectl.kubernetes.io/last-applied-configuration`;
//! - `ssa`: sync option `ServerSideApply=true`, which since v3.6 also turns on
//!   Server-Side Diff (`controller/state.go`, `shouldUseServerSideDiff`);
//! - `ssd`: `ServerSideApply=true` plus the compare option
//!   `argocd.argoproj.io/compare-options: ServerSideDiff=true`.
//!
//! Each mode runs the same scenarios: a denied edit naming the Application;
//! `kubectl scale`, `patch` and `kubectl edit` of ignored fields (Argo CD's
//! and the object's own rules) allowed where Argo CD stays Synced and
//! self-heal leaves them; a trusted `kubectl replace` of an ignored field,
//! measured with and without `RespectIgnoreDifferences=true`; and a
//! break-glass that holds against self-heal until it expires. Under CI=true
//! (and everywhere else) a tool that cannot start fails the test.

use driftguard_testkit::control_plane;
use driftguard_testkit::gitops;
use driftguard_testkit::gitops_e2e;

use std::time::Duration;

use control_plane::*;
use gitops::*;
use gitops_e2e::*;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    ClientSide,
    ServerSideApply,
    ServerSideDiff,
}

const MODES: [Mode; 3] = [
    Mode::ClientSide,
    Mode::ServerSideApply,
    Mode::ServerSideDiff,
];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::ClientSide => "csa",
            Mode::ServerSideApply => "ssa",
            Mode::ServerSideDiff => "ssd",
        }
    }

    fn namespace(self) -> String {
        format!("argo-{}", self.name())
    }

    fn server_side(self) -> bool {
        self != Mode::ClientSide
    }

    /// The seed's Application in this mode, deploying `path` into the mode's
    /// namespace; `respect` keeps `RespectIgnoreDifferences=true`.
    fn application(self, name: &str, url: &str, path: &str, respect: bool) -> String {
        let mut options = vec![];
        if respect {
            options.push("RespectIgnoreDifferences=true");
        }
        if self.server_side() {
            options.push("ServerSideApply=true");
        }
        let mut app = application(name, "default", url, path, &self.namespace()).replace(
            "syncOptions: [RespectIgnoreDifferences=true]",
            &format!("syncOptions: [{}]", options.join(", ")),
        );
        if self == Mode::ServerSideDiff {
            app = app.replace(
                &format!("metadata: {{name: {name}, namespace: argocd}}"),
                &format!(
                    "metadata: {{name: {name}, namespace: argocd, annotations: {{argocd.argoproj.io/compare-options: ServerSideDiff=true}}}}"
                ),
            );
        }
        app
    }
}

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: NS}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: nginx:1.27
"#;

/// Argo CD v3.6's per-resource rule, from Git: `threads` is ignored for
/// this object alone.
const TUNING: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: tuning
  namespace: NS
  annotations:
    argocd.argoproj.io/ignore-differences: |
      jsonPointers:
      - /data/threads
data: {threads: "4", mode: fast}
"#;

/// A Deployment for `kubectl edit` and `replace`; `NAME` is `rep` in the
/// Application with `RespectIgnoreDifferences=true`, `norid` in the one without.
const REP: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: NAME, namespace: NS}
spec:
  replicas: 2
  selector: {matchLabels: {app: NAME}}
  template:
    metadata: {labels: {app: NAME}}
    spec:
      containers: [{name: rep, image: "nginx:1.27"}]
"#;

/// The first half of driftguard's reason for denying a replace under
/// client-side apply (src/admission.rs).
const LAST_APPLIED_DENIAL: &str =
    "rewrite the last-applied record that Argo CD's three-way diff reads";

fn deployment(plane: &ControlPlane, mode: Mode, name: &str) -> serde_json::Value {
    let ns = mode.namespace();
    get_json(
        plane,
        &["--show-managed-fields", "-n", &ns, "deployment", name],
    )
    .unwrap_or_else(|| panic!("{mode:?}: deployment {name}"))
}

fn replicas(plane: &ControlPlane, mode: Mode, name: &str) -> Option<String> {
    field(&deployment(plane, mode, name), "/spec/replicas")
}

fn last_applied(obj: &serde_json::Value) -> Option<String> {
    field(
        obj,
        "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration",
    )
}

/// The `operation` of Argo CD's managedFields entry (`Update` for a
/// client-side apply, `Apply` for a server-side one).
fn argocd_operation(obj: &serde_json::Value) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["manager"] == "argocd-controller" && e["subresource"].is_null())
        .filter_map(|e| e["operation"].as_str().map(str::to_owned))
        .collect()
}

/// `kubectl edit deployment/NAME` as `user`, the editor setting
/// `spec.replicas` (the first `replicas:` line: spec comes before status).
fn edit_replicas(plane: &ControlPlane, user: &str, mode: Mode, name: &str, to: u32) -> Kubectl {
    let editor = format!("sed -i '0,/^  replicas: [0-9]*$/s//  replicas: {to}/'");
    kubectl_command()
        .env("KUBE_EDITOR", editor)
        .arg(format!("--kubeconfig={}", plane.kubeconfig(user).display()))
        .args([
            "-n",
            &mode.namespace(),
            "edit",
            &format!("deployment/{name}"),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("kubectl runs")
        .into()
}

/// `kubectl get -o json`, `replicas` set, `kubectl replace -f -` as `user`
/// (a service account: by impersonation).
fn replace_replicas(plane: &ControlPlane, user: &str, mode: Mode, name: &str, to: u32) -> Kubectl {
    // A controller's status write between the read and the replace is a
    // conflict, not driftguard's answer: read again, as a person would.
    let mut out = replace_once(plane, user, mode, name, to);
    for _ in 0..5 {
        if !out.stderr.contains("the object has been modified") {
            break;
        }
        out = replace_once(plane, user, mode, name, to);
    }
    out
}

fn replace_once(plane: &ControlPlane, user: &str, mode: Mode, name: &str, to: u32) -> Kubectl {
    let mut live = deployment(plane, mode, name);
    live["spec"]["replicas"] = to.into();
    // As `kubectl get -o json` prints it.
    live["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    let ns = mode.namespace();
    let args = ["-n", ns.as_str(), "replace", "-f", "-"];
    let body = live.to_string();
    if user.starts_with("system:serviceaccount:") {
        plane.kubectl_as_stdin(user, &args, Some(&body))
    } else {
        plane.kubectl_stdin(user, &args, Some(&body))
    }
}

fn alice(plane: &ControlPlane, mode: Mode, args: &[&str]) -> Kubectl {
    let ns = mode.namespace();
    let mut all = vec!["-n", ns.as_str()];
    all.extend(args);
    plane.kubectl("alice", &all)
}

/// When Argo CD last started a sync of Application `name`.
fn sync_started(plane: &ControlPlane, name: &str) -> Option<String> {
    get_json(plane, &["-n", "argocd", "application", name])
        .and_then(|a| field(&a, "/status/operationState/startedAt"))
}

fn status_after_refresh(
    plane: &ControlPlane,
    app: &str,
    mode: Mode,
    kind: &str,
    name: &str,
) -> String {
    let status = ArgoCd::hard_refresh(plane, app);
    ArgoCd::resource_status(&status, kind, &mode.namespace(), name).unwrap_or_else(|| {
        panic!(
            "{mode:?}: no status for {kind} {name}: {}",
            status["status"]["resources"]
        )
    })
}

#[test]
fn argocd_in_every_sync_and_diff_mode() {
    let namespaces: Vec<String> = MODES.iter().map(|m| m.namespace()).collect();
    let mut all: Vec<&str> = vec!["argocd"];
    all.extend(namespaces.iter().map(String::as_str));
    let (tools, plane, _kcm, repo) = start("argocd-modes", &all);
    let mut files: Vec<(String, String)> = vec![];
    for m in MODES {
        let ns = m.namespace();
        let put = |f: &mut Vec<(String, String)>, path: String, text: &str| {
            f.push((path, text.replace("NS", &ns)))
        };
        put(&mut files, format!("{}/web.yaml", m.name()), WEB);
        put(&mut files, format!("{}/tuning.yaml", m.name()), TUNING);
        put(
            &mut files,
            format!("{}/rep.yaml", m.name()),
            &REP.replace("NAME", "rep"),
        );
        put(
            &mut files,
            format!("{}-norid/norid.yaml", m.name()),
            &REP.replace("NAME", "norid"),
        );
    }
    let refs: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), Some(t.as_str())))
        .collect();
    let rev = repo.commit("three modes", &refs);
    let argo = ArgoCd::start(&plane, &tools, "");
    let dg = Driftguard::start(
        &plane,
        &[
            &format!("--policy={ROOT}/{POLICY}"),
            &plane.driftguard_kubeconfig_flag(),
            "--watch-argocd",
            "--break-glass-sweep-interval=2s",
        ],
    );
    dg.register(&plane, &format!("{ROOT}/{POLICY}"));
    let url = repo.file_url();
    for m in MODES {
        plane.apply_admin(&m.application(m.name(), &url, m.name(), true));
        let norid = format!("{}-norid", m.name());
        plane.apply_admin(&m.application(&norid, &url, &norid, false));
    }
    let mut synced_at = std::collections::BTreeMap::new();
    for m in MODES {
        wait_synced(&plane, &argo, m.name(), &rev);
        wait_synced(&plane, &argo, &format!("{}-norid", m.name()), &rev);
        synced_at.insert(m.name(), sync_started(&plane, m.name()));
    }

    // What each mode leaves on the object: a last-applied record and an
    // Update entry under client-side apply; neither under server-side apply.
    for m in MODES {
        let web = deployment(&plane, m, "web");
        let (record, operation) = (last_applied(&web).is_some(), argocd_operation(&web));
        println!("{m:?}: last-applied={record} argocd-controller operation={operation:?}");
        assert_eq!(record, !m.server_side(), "{m:?}: {web}");
        let expected = if m.server_side() { "Apply" } else { "Update" };
        assert_eq!(operation, [expected], "{m:?}: {web}");
    }

    for m in MODES {
        // A human edit is denied, naming the Application.
        let out = alice(
            &plane,
            m,
            &["set", "image", "deployment/web", "web=nginx:hotfix"],
        );
        denied(&out, &format!("Argo CD application {}", m.name())).unwrap();
        // Ignored fields: Argo CD's rule (replicas) and the object's own.
        ok(
            alice(&plane, m, &["scale", "deployment/web", "--replicas=4"]),
            "ignored replicas",
        );
        ok(
            alice(
                &plane,
                m,
                &[
                    "patch",
                    "configmap",
                    "tuning",
                    "-p",
                    r#"{"data":{"threads":"16"}}"#,
                ],
            ),
            "a field the object's annotation ignores",
        );
        denied(
            &alice(
                &plane,
                m,
                &[
                    "patch",
                    "configmap",
                    "tuning",
                    "-p",
                    r#"{"data":{"mode":"slow"}}"#,
                ],
            ),
            &format!("Argo CD application {}", m.name()),
        )
        .unwrap();
        denied(
            &alice(
                &plane,
                m,
                &[
                    "annotate",
                    "--overwrite",
                    "configmap/tuning",
                    "argocd.argoproj.io/ignore-differences=jsonPointers: [/data]",
                ],
            ),
            "argocd.argoproj.io~1ignore-differences",
        )
        .unwrap();
        // kubectl edit of an ignored field: a patch of what changed, which
        // leaves the last-applied record as it was (kubectl v1.37 writes it
        // on edit only with --save-config).
        let record = last_applied(&deployment(&plane, m, "rep"));
        ok(
            edit_replicas(&plane, "alice", m, "rep", 3),
            "kubectl edit of ignored replicas",
        );
        assert_eq!(last_applied(&deployment(&plane, m, "rep")), record, "{m:?}");
        assert_eq!(record.is_some(), !m.server_side(), "{m:?}");
        // kubectl replace rewrites the record when there is one (client-side
        // apply): driftguard denies it and names what works. Under
        // server-side apply there is no record to rewrite.
        let out = replace_replicas(&plane, "alice", m, "rep", 4);
        if m.server_side() {
            ok(out, "kubectl replace of ignored replicas");
            assert_eq!(last_applied(&deployment(&plane, m, "rep")), None, "{m:?}");
        } else {
            denied(&out, LAST_APPLIED_DENIAL).unwrap();
            denied(&out, "use kubectl edit, patch, scale or set").unwrap();
            ok(
                alice(&plane, m, &["scale", "deployment/rep", "--replicas=4"]),
                "scaling instead",
            );
        }
        for (kind, name) in [
            ("Deployment", "web"),
            ("ConfigMap", "tuning"),
            ("Deployment", "rep"),
        ] {
            assert_eq!(
                status_after_refresh(&plane, m.name(), m, kind, name),
                "Synced",
                "{m:?}: what driftguard allowed keeps {kind} {name} Synced"
            );
        }
    }
    // Self-heal leaves all of it, and no sync runs.
    holds(
        "the allowed edits under selfHeal: true",
        Duration::from_secs(15),
        || {
            for m in MODES {
                let got = (
                    replicas(&plane, m, "web"),
                    replicas(&plane, m, "rep"),
                    get_json(&plane, &["-n", &m.namespace(), "configmap", "tuning"])
                        .and_then(|c| field(&c, "/data/threads")),
                    sync_started(&plane, m.name()),
                );
                let want = (
                    Some("4".to_owned()),
                    Some("4".to_owned()),
                    Some("16".to_owned()),
                    synced_at[m.name()].clone(),
                );
                if got != want {
                    return Err(format!("{m:?}: {got:?}, want {want:?}"));
                }
            }
            Ok(())
        },
    );

    // The measurement behind the edit/replace denial: the same replace of
    // an ignored field by a trusted identity, which driftguard lets
    // through, with and without RespectIgnoreDifferences.
    let mut norid_at = std::collections::BTreeMap::new();
    for m in MODES {
        norid_at.insert(
            m.name(),
            sync_started(&plane, &format!("{}-norid", m.name())),
        );
        ok(
            replace_replicas(&plane, OPERATOR, m, "rep", 5),
            "the operator's replace",
        );
        ok(
            replace_replicas(&plane, OPERATOR, m, "norid", 5),
            "the operator's replace",
        );
    }
    for m in MODES {
        let norid = format!("{}-norid", m.name());
        if m.server_side() {
            // Server-Side Diff leaves the record out: Synced, no sync, kept.
            for (app, name) in [(m.name(), "rep"), (norid.as_str(), "norid")] {
                assert_eq!(
                    status_after_refresh(&plane, app, m, "Deployment", name),
                    "Synced",
                    "{m:?}: {name}"
                );
            }
        } else {
            // The rewritten record puts both OutOfSync and self-heal syncs:
            // with RespectIgnoreDifferences the sync keeps the live replicas
            // (and rewrites the record); without, it restores Git's.
            eventually("self-heal to sync rep", Duration::from_secs(120), || {
                let rep = deployment(&plane, m, "rep");
                let record = last_applied(&rep).unwrap_or_default();
                let synced = sync_started(&plane, m.name()) != synced_at[m.name()];
                if synced && !record.contains("resourceVersion") {
                    Ok(())
                } else {
                    Err(format!("synced={synced} record={record}"))
                }
            });
            let rep = deployment(&plane, m, "rep");
            assert_eq!(
                field(&rep, "/spec/replicas").as_deref(),
                Some("5"),
                "{m:?}: kept"
            );
            assert!(
                last_applied(&rep).is_some_and(|r| r.contains("\"replicas\":5")),
                "{m:?}: the sync wrote Git with the live replicas as the record: {rep}"
            );
            eventually(
                "self-heal to revert norid",
                Duration::from_secs(120),
                || match replicas(&plane, m, "norid") {
                    Some(r) if r == "2" => Ok(()),
                    other => Err(format!("{other:?}\n{}", argo.logs())),
                },
            );
            assert_ne!(sync_started(&plane, &norid), norid_at[m.name()], "{m:?}");
        }
    }
    holds(
        "the trusted replace under server-side apply",
        Duration::from_secs(10),
        || {
            for m in MODES.into_iter().filter(|m| m.server_side()) {
                let norid = format!("{}-norid", m.name());
                let got = (
                    replicas(&plane, m, "rep"),
                    replicas(&plane, m, "norid"),
                    sync_started(&plane, m.name()),
                    sync_started(&plane, &norid),
                );
                let want = (
                    Some("5".to_owned()),
                    Some("5".to_owned()),
                    synced_at[m.name()].clone(),
                    norid_at[m.name()].clone(),
                );
                if got != want {
                    return Err(format!("{m:?}: {got:?}, want {want:?}"));
                }
            }
            Ok(())
        },
    );

    // A last-applied record under server-side apply: someone's `kubectl
    // apply` leaves one, and `kubectl replace` rewrites it. Server-Side
    // Diff leaves the record out of the comparison, so driftguard, reading
    // the mode from the Application, allows the replace of an ignored field.
    for m in MODES.into_iter().filter(|m| m.server_side()) {
        let manifest = WEB.replace("NS", &m.namespace());
        ok(
            plane.kubectl_as_stdin(OPERATOR, &["apply", "-f", "-"], Some(&manifest)),
            "the operator's kubectl apply",
        );
        assert!(
            last_applied(&deployment(&plane, m, "web")).is_some(),
            "{m:?}"
        );
        ok(
            replace_replicas(&plane, "alice", m, "web", 6),
            "kubectl replace with a record",
        );
        let web = deployment(&plane, m, "web");
        assert!(
            last_applied(&web).is_some_and(|r| r.contains("\"replicas\":6")),
            "{m:?}: kubectl replace rewrote the record: {web}"
        );
        assert_eq!(
            status_after_refresh(&plane, m.name(), m, "Deployment", "web"),
            "Synced",
            "{m:?}"
        );
    }
    holds(
        "the replace with a record under selfHeal: true",
        Duration::from_secs(10),
        || {
            for m in MODES.into_iter().filter(|m| m.server_side()) {
                let got = (replicas(&plane, m, "web"), sync_started(&plane, m.name()));
                let want = (Some("6".to_owned()), synced_at[m.name()].clone());
                if got != want {
                    return Err(format!("{m:?}: {got:?}, want {want:?}"));
                }
            }
            Ok(())
        },
    );

    // Break-glass, all three modes at once: the hotfix holds against
    // self-heal until expiry, then the pause is lifted and Git wins.
    let bin = install_plugin(&plane);
    for m in MODES {
        let ns = m.namespace();
        let args = [
            "break-glass",
            "deployment/web",
            "-n",
            &ns,
            "--reason",
            "INC-9 checkout down",
            "--for",
            "40s",
        ];
        let out = plugin(&plane, &bin, "sam", &args);
        assert!(out.ok, "{m:?}: sam breaks glass: {out}");
        let app = get_json(&plane, &["-n", "argocd", "application", m.name()]).unwrap();
        assert_eq!(
            field(
                &app,
                "/metadata/annotations/argocd.argoproj.io~1skip-reconcile"
            )
            .as_deref(),
            Some("true"),
            "{m:?}: arming pauses the Application: {out}"
        );
        ok(
            plane.kubectl(
                "sam",
                &[
                    "-n",
                    &ns,
                    "set",
                    "image",
                    "deployment/web",
                    "web=nginx:1.27-hotfix",
                ],
            ),
            "sam's hotfix",
        );
    }
    holds(
        "the hotfixes under selfHeal: true",
        Duration::from_secs(15),
        || {
            for m in MODES {
                match image(&plane, &m.namespace(), "web") {
                    Some(i) if i == "nginx:1.27-hotfix" => {}
                    other => return Err(format!("{m:?}: {other:?}")),
                }
            }
            Ok(())
        },
    );
    for m in MODES {
        wait_break_glass_ended(&plane, &m.namespace(), "web");
        eventually(
            &format!("{m:?}: Git to win after expiry (self-heal)"),
            Duration::from_secs(120),
            || match image(&plane, &m.namespace(), "web") {
                Some(i) if i == "nginx:1.27" => Ok(()),
                other => Err(format!("{other:?}\n{}", argo.logs())),
            },
        );
    }
    let denials = dg
        .audit()
        .into_iter()
        .filter(|r| r["verdict"] == "deny")
        .count();
    println!("driftguard denials: {denials}");
}
