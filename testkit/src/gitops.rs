//! The real GitOps tools next to a [`ControlPlane`]: kube-controller-manager,
//! Flux source- and kustomize-controller, Argo CD application-controller and
//! repo-server (with an in-memory Redis) and applicationset-controller, a Git
//! repository served over smart HTTP and `file://`, and the tools' own CRDs.
//! All are built from the Go module proxy by `scripts/build-tools.sh gitops`,
//! run as local processes with service-account token kubeconfigs, and killed
//! on drop.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::control_plane::{ControlPlane, Kubectl, ROOT};
use crate::control_plane::{Proc, unused_port};

/// The binaries and assets of `scripts/build-tools.sh gitops`.
pub struct Tools {
    pub controller_manager: PathBuf,
    pub source_controller: PathBuf,
    pub kustomize_controller: PathBuf,
    pub argocd: PathBuf,
    pub redis: PathBuf,
    pub githttp: PathBuf,
    /// `flux/*.yaml` CRDs, `argocd/*-crd.yaml` (Application, AppProject,
    /// ApplicationSet) and `argocd/git-verify-wrapper.sh`.
    pub assets: PathBuf,
}

impl Tools {
    /// Builds what is missing (minutes when cold; seconds when cached).
    pub fn build() -> Tools {
        let out = Command::new(format!("{ROOT}/scripts/build-tools.sh"))
            .arg("gitops")
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/build-tools.sh runs");
        assert!(out.status.success(), "building the GitOps tools failed");
        let lines: Vec<PathBuf> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(PathBuf::from)
            .collect();
        let find = |prefix: &str| {
            lines
                .iter()
                .find(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
                })
                .unwrap_or_else(|| panic!("build-tools.sh printed no {prefix}*: {lines:?}"))
                .clone()
        };
        Tools {
            controller_manager: find("kube-controller-manager-"),
            source_controller: find("flux-source-controller-"),
            kustomize_controller: find("flux-kustomize-controller-"),
            argocd: find("argocd-"),
            redis: find("gitops-aux-redis-"),
            githttp: find("gitops-aux-githttp-"),
            assets: find("gitops-assets-"),
        }
    }
}

/// Polls `probe` every half second (each probe runs kubectl) until it holds.
pub fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("waited {timeout:?} for {what}; last observed: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Checks that `probe` holds at every look for `period`.
pub fn holds(what: &str, period: Duration, mut probe: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + period;
    while Instant::now() < deadline {
        if let Err(e) = probe() {
            panic!("{what} stopped holding: {e}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `kubectl get -o json` as admin, or `None` when it is not there.
pub fn get_json(plane: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get", "-o", "json"];
    all.extend_from_slice(args);
    let out = plane.kubectl("admin", &all);
    if !out.ok {
        assert!(
            out.stderr.contains("NotFound") || out.stderr.contains("not found"),
            "kubectl get {args:?}: {out}"
        );
        return None;
    }
    Some(serde_json::from_str(&out.stdout).expect("kubectl printed JSON"))
}

/// `value` at an RFC 6901 pointer, as text (strings unquoted).
pub fn field(obj: &Value, pointer: &str) -> Option<String> {
    obj.pointer(pointer).map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// A service account with cluster-admin and a kubeconfig holding its token,
/// as the tools run in a real cluster. `namespace` is the kubeconfig's default.
pub fn service_account_kubeconfig(plane: &ControlPlane, namespace: &str, name: &str) -> PathBuf {
    let token = service_account_token(plane, namespace, name);
    let path = plane.dir.join(format!("sa-{namespace}-{name}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: {name}\n  context: {{cluster: e2e, user: {name}, namespace: {namespace}}}\ncurrent-context: {name}\n",
            plane.port,
            plane.dir.join("ca.crt").display(),
        ),
    )
    .unwrap();
    path
}

/// A service account `namespace/name` bound to cluster-admin, and a token
/// for it from the TokenRequest API (`kubectl create token`, 24 h), as
/// `argocd cluster add` and a Flux kubeConfig Secret set one up.
pub fn service_account_token(plane: &ControlPlane, namespace: &str, name: &str) -> String {
    let sa = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {name}, namespace: {namespace}}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {namespace}-{name}-admin}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{kind: ServiceAccount, name: {name}, namespace: {namespace}}}]\n"
    );
    plane.apply_admin(&sa);
    let token = plane.kubectl(
        "admin",
        &["create", "token", name, "-n", namespace, "--duration=24h"],
    );
    assert!(token.ok, "token for {namespace}/{name}: {token}");
    token.stdout.trim().to_owned()
}

/// Starts a long-running tool and fails the test at once if it exits within
/// the first seconds (a bad flag), with its log.
fn spawn(name: &str, cmd: &mut Command) -> Proc {
    try_spawn(name, cmd).unwrap_or_else(|log| panic!("{name} exited: {log}"))
}

/// [`spawn`], or the log of a tool that exited.
fn try_spawn(name: &str, cmd: &mut Command) -> Result<Proc, String> {
    let mut proc = Proc::spawn(name, cmd);
    std::thread::sleep(Duration::from_millis(300));
    if proc.alive() {
        Ok(proc)
    } else {
        Err(proc.stderr_tail(40))
    }
}

/// kube-controller-manager with each controller writing as its own service
/// account (`--use-service-account-credentials`), as in a real cluster: the
/// garbage collector is `system:serviceaccount:kube-system:generic-garbage-collector`.
pub fn start_controller_manager(plane: &ControlPlane, tools: &Tools) -> Proc {
    let p = |f: &str| plane.dir.join(f).display().to_string();
    spawn(
        "kube-controller-manager",
        Command::new(&tools.controller_manager)
            .arg(format!(
                "--kubeconfig={}",
                plane.kubeconfig("admin").display()
            ))
            .args(["--leader-elect=false", "--secure-port=0"])
            .arg(format!(
                "--service-account-private-key-file={}",
                p("sa.key")
            ))
            .arg(format!("--root-ca-file={}", p("ca.crt")))
            .arg("--use-service-account-credentials=true")
            .arg("--concurrent-gc-syncs=5")
            .arg("--v=0"),
    )
}

/// A Git repository (branch `main`) served over smart HTTP for Flux and
/// readable as `file://` for Argo CD.
pub struct GitRepo {
    pub work: PathBuf,
    pub bare: PathBuf,
    pub http_url: String,
    /// The HTTP server, killed when the repository is dropped.
    _server: Proc,
}

impl GitRepo {
    pub fn new(plane: &ControlPlane, tools: &Tools) -> GitRepo {
        let root = plane.dir.join("git");
        let bare = root.join("repo.git");
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(
            &root,
            &["init", "--bare", "--initial-branch=main", "repo.git"],
        );
        git(&work, &["init", "--initial-branch=main"]);
        git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
        let port = unused_port();
        let server = spawn(
            "githttp",
            Command::new(&tools.githttp)
                .arg(format!("127.0.0.1:{port}"))
                .arg(&root),
        );
        GitRepo {
            http_url: format!("http://127.0.0.1:{port}/repo.git"),
            work,
            bare,
            _server: server,
        }
    }

    pub fn file_url(&self) -> String {
        format!("file://{}", self.bare.display())
    }

    /// Writes `files` (path relative to the repo, content; `None` deletes),
    /// commits and pushes. Returns the commit id.
    pub fn commit(&self, message: &str, files: &[(&str, Option<&str>)]) -> String {
        for (path, content) in files {
            let full = self.work.join(path);
            match content {
                Some(text) => {
                    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                    std::fs::write(&full, text).unwrap();
                }
                None => {
                    let _ = std::fs::remove_file(&full);
                }
            }
        }
        git(&self.work, &["add", "-A"]);
        git(
            &self.work,
            &["commit", "-q", "--allow-empty", "-m", message],
        );
        git(&self.work, &["push", "-q", "origin", "main"]);
        git(&self.work, &["rev-parse", "HEAD"]).trim().to_owned()
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "e2e")
        .env("GIT_AUTHOR_EMAIL", "e2e@example.com")
        .env("GIT_COMMITTER_NAME", "e2e")
        .env("GIT_COMMITTER_EMAIL", "e2e@example.com")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Applies every YAML file in `dir` server-side as admin (Argo CD's CRDs are
/// too large for the last-applied annotation) and waits until Established.
pub fn install_crds(plane: &ControlPlane, dir: &Path) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in &files {
        let out = plane.kubectl(
            "admin",
            &["apply", "--server-side", "-f", file.to_str().unwrap()],
        );
        assert!(out.ok, "CRD {}: {out}", file.display());
    }
    // A CRD created a moment ago may have no conditions yet, and `kubectl
    // wait` then fails at once (".status.conditions accessor error") instead
    // of waiting: ask again.
    eventually(
        "the CRDs to be Established",
        Duration::from_secs(90),
        || {
            let out = plane.kubectl(
                "admin",
                &[
                    "wait",
                    "--for=condition=Established",
                    "crd",
                    "--all",
                    "--timeout=30s",
                ],
            );
            if out.ok { Ok(()) } else { Err(out.to_string()) }
        },
    );
}

/// Flux source-controller and kustomize-controller, writing as their own
/// service accounts in flux-system.
pub struct Flux {
    pub source: Proc,
    pub kustomize: Proc,
}

impl Flux {
    /// Installs the CRDs and starts both controllers.
    pub fn start(plane: &ControlPlane, tools: &Tools) -> Flux {
        Self::start_with(plane, tools, &[])
    }

    /// [`Flux::start`], kustomize-controller with `kustomize_args` too.
    pub fn start_with(plane: &ControlPlane, tools: &Tools, kustomize_args: &[&str]) -> Flux {
        install_crds(plane, &tools.assets.join("flux"));
        let storage = plane.dir.join("flux-storage");
        std::fs::create_dir_all(&storage).unwrap();
        let storage_port = unused_port();
        let source_kubeconfig =
            service_account_kubeconfig(plane, "flux-system", "source-controller");
        let source = spawn(
            "source-controller",
            Command::new(&tools.source_controller)
                .env("KUBECONFIG", &source_kubeconfig)
                .env("RUNTIME_NAMESPACE", "flux-system")
                .arg(format!("--metrics-addr=127.0.0.1:{}", unused_port()))
                .arg(format!("--health-addr=127.0.0.1:{}", unused_port()))
                .arg(format!("--storage-path={}", storage.display()))
                .arg(format!("--storage-addr=127.0.0.1:{storage_port}"))
                .arg(format!("--storage-adv-addr=127.0.0.1:{storage_port}"))
                .arg("--log-level=info"),
        );
        let kustomize_kubeconfig =
            service_account_kubeconfig(plane, "flux-system", "kustomize-controller");
        let kustomize = spawn(
            "kustomize-controller",
            Command::new(&tools.kustomize_controller)
                .env("KUBECONFIG", &kustomize_kubeconfig)
                .env("RUNTIME_NAMESPACE", "flux-system")
                .arg(format!("--metrics-addr=127.0.0.1:{}", unused_port()))
                .arg(format!("--health-addr=127.0.0.1:{}", unused_port()))
                .arg("--no-remote-bases=true")
                .arg("--log-level=info")
                .args(kustomize_args),
        );
        Flux { source, kustomize }
    }

    /// Asks for a reconcile of Kustomization `namespace/name` now (as `flux
    /// reconcile` does) and waits until the controller handled it and the
    /// Kustomization is Ready at the repository's `revision` (or any, if None).
    pub fn reconcile(plane: &ControlPlane, namespace: &str, name: &str, revision: Option<&str>) {
        let token = format!(
            "{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        // Every Kustomization here reads GitRepository flux-system/repo.
        for (ns, object) in [
            ("flux-system", "gitrepository/repo".to_owned()),
            (namespace, format!("kustomization/{name}")),
        ] {
            let out = plane.kubectl(
                "admin",
                &[
                    "-n",
                    ns,
                    "annotate",
                    "--overwrite",
                    &object,
                    &format!("reconcile.fluxcd.io/requestedAt={token}"),
                ],
            );
            assert!(out.ok, "request reconcile of {object}: {out}");
        }
        eventually(
            &format!("Kustomization {namespace}/{name} to handle reconcile {token}"),
            Duration::from_secs(90),
            || {
                let k = get_json(plane, &["-n", namespace, "kustomization", name])
                    .ok_or("no Kustomization")?;
                let handled = field(&k, "/status/lastHandledReconcileAt");
                let ready = k["status"]["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                    .cloned()
                    .unwrap_or_default();
                let applied = field(&k, "/status/lastAppliedRevision").unwrap_or_default();
                let at_revision = revision.is_none_or(|r| applied.ends_with(r));
                if handled.as_deref() == Some(&token) && ready["status"] == "True" && at_revision {
                    Ok(())
                } else {
                    Err(format!(
                        "handled={handled:?} applied={applied} ready={ready}"
                    ))
                }
            },
        );
    }

    pub fn logs(&self) -> String {
        format!(
            "source-controller:\n{}\nkustomize-controller:\n{}",
            self.source.stderr_tail(30),
            self.kustomize.stderr_tail(30)
        )
    }
}

/// Argo CD's application-controller and repo-server with an in-memory Redis,
/// as upstream's Procfile runs them; the controller writes as
/// `system:serviceaccount:<namespace>:argocd-application-controller`.
pub struct ArgoCd {
    /// Where its Applications, AppProjects and argocd-cm are (`argocd`
    /// unless started with [`ArgoCd::start_in`]).
    pub namespace: String,
    pub controller: Proc,
    pub repo_server: Proc,
    pub redis: Proc,
    /// `127.0.0.1:<port>` of the plaintext repo-server.
    pub repo_server_addr: String,
    /// What [`ArgoCd::restart_controller`] starts the controller with.
    controller_setup: ControllerSetup,
}

struct ControllerSetup {
    argocd: PathBuf,
    namespace: String,
    kubeconfig: PathBuf,
    redis_addr: String,
    repo_port: u16,
}

impl ControllerSetup {
    /// The metrics port is free when picked, not always when the controller
    /// binds it: a parallel test's process can take it in between (seen
    /// once in CI). The controller then exits at once, and another port is
    /// tried.
    fn spawn(&self) -> Proc {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.try_spawn() {
                Ok(proc) => return proc,
                Err(log) if tries < 3 && log.contains("address already in use") => {}
                Err(log) => panic!("argocd-application-controller exited: {log}"),
            }
        }
    }

    fn try_spawn(&self) -> Result<Proc, String> {
        try_spawn(
            "argocd-application-controller",
            Command::new(&self.argocd)
                .env("ARGOCD_BINARY_NAME", "argocd-application-controller")
                .env("ARGOCD_FAKE_IN_CLUSTER", "true")
                .env("KUBECONFIG", &self.kubeconfig)
                .arg(format!("--redis={}", self.redis_addr))
                .arg(format!("--repo-server=127.0.0.1:{}", self.repo_port))
                .args(["--repo-server-plaintext", "--hydrator-enabled=false"])
                .arg(format!("--metrics-port={}", unused_port()))
                .arg(format!("--namespace={}", self.namespace))
                .args(["--app-resync=10", "--self-heal-timeout-seconds=1"])
                .arg("--loglevel=info"),
        )
    }
}

/// argocd-cm, argocd-secret and the `default` AppProject, which only
/// argocd-server would otherwise create.
pub fn argocd_settings(extra_cm: &str) -> String {
    argocd_settings_in("argocd", extra_cm)
}

/// [`argocd_settings`] for an Argo CD whose namespace is `ns`.
pub fn argocd_settings_in(ns: &str, extra_cm: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: argocd-cm, namespace: {ns}, labels: {{app.kubernetes.io/part-of: argocd}}}}
data:
  timeout.reconciliation: 10s
{extra_cm}---
apiVersion: v1
kind: Secret
metadata: {{name: argocd-secret, namespace: {ns}, labels: {{app.kubernetes.io/part-of: argocd}}}}
stringData: {{server.secretkey: e2e-{}}}
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {{name: default, namespace: {ns}}}
spec:
  sourceRepos: ['*']
  destinations: [{{server: '*', namespace: '*'}}]
  clusterResourceWhitelist: [{{group: '*', kind: '*'}}]
"#,
        std::process::id()
    )
}

impl ArgoCd {
    /// Installs the CRDs and settings (`extra_cm`: more argocd-cm data lines,
    /// indented two spaces) and starts the three processes.
    pub fn start(plane: &ControlPlane, tools: &Tools, extra_cm: &str) -> ArgoCd {
        Self::start_in(plane, tools, "argocd", extra_cm)
    }

    /// [`ArgoCd::start`] for an installation in namespace `ns` of `plane`
    /// (its Applications, argocd-cm and the controller's service account
    /// there; the namespace exists). Its in-cluster destination,
    /// `https://kubernetes.default.svc`, is `plane`.
    pub fn start_in(plane: &ControlPlane, tools: &Tools, ns: &str, extra_cm: &str) -> ArgoCd {
        install_crds(plane, &tools.assets.join("argocd"));
        plane.apply_admin(&argocd_settings_in(ns, extra_cm));
        let redis_addr = format!("127.0.0.1:{}", unused_port());
        let redis = spawn("redis", Command::new(&tools.redis).arg(&redis_addr));
        let repo_port = unused_port();
        let data = plane.dir.join(ns);
        for sub in ["tls", "ssh", "tmp"] {
            std::fs::create_dir_all(data.join(sub)).unwrap();
        }
        // repo-server runs git-verify-wrapper.sh on every manifest generation.
        let path = format!(
            "{}:{}",
            tools.assets.join("argocd").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let repo_server = spawn(
            "argocd-repo-server",
            Command::new(&tools.argocd)
                .env("ARGOCD_BINARY_NAME", "argocd-repo-server")
                .env("ARGOCD_GPG_ENABLED", "false")
                .env("ARGOCD_TLS_DATA_PATH", data.join("tls"))
                .env("ARGOCD_SSH_DATA_PATH", data.join("ssh"))
                .env("TMPDIR", data.join("tmp"))
                .env("PATH", path)
                .args(["--disable-tls", "--client-ca-path="])
                .arg(format!("--port={repo_port}"))
                .args(["--address=127.0.0.1", "--metrics-address=127.0.0.1"])
                .arg(format!("--metrics-port={}", unused_port()))
                .arg(format!("--redis={redis_addr}"))
                .arg("--loglevel=info"),
        );
        let controller_setup = ControllerSetup {
            argocd: tools.argocd.clone(),
            namespace: ns.to_owned(),
            kubeconfig: service_account_kubeconfig(plane, ns, "argocd-application-controller"),
            redis_addr: redis_addr.clone(),
            repo_port,
        };
        ArgoCd {
            namespace: ns.to_owned(),
            controller: controller_setup.spawn(),
            repo_server,
            redis,
            repo_server_addr: format!("127.0.0.1:{repo_port}"),
            controller_setup,
        }
    }

    /// Stops the application-controller (its caches go with it), for a
    /// phase in which Argo CD is not asked anything: it no longer compares
    /// every Application on each write meanwhile.
    pub fn stop_controller(&mut self) {
        let _ = self.controller.child.kill();
        let _ = self.controller.child.wait();
    }

    /// Starts the application-controller again; it lists the cluster anew
    /// before it compares.
    pub fn restart_controller(&mut self) {
        self.stop_controller();
        self.controller = self.controller_setup.spawn();
    }

    /// The applicationset-controller (the same binary), for ApplicationSets in
    /// `argocd` (its kubeconfig's namespace), writing as
    /// `system:serviceaccount:argocd:argocd-applicationset-controller`. The
    /// ApplicationSet CRD is among the assets [`ArgoCd::start`] installs.
    pub fn start_applicationset_controller(&self, plane: &ControlPlane, tools: &Tools) -> Proc {
        let kubeconfig =
            service_account_kubeconfig(plane, "argocd", "argocd-applicationset-controller");
        spawn(
            "argocd-applicationset-controller",
            Command::new(&tools.argocd)
                .env("ARGOCD_BINARY_NAME", "argocd-applicationset-controller")
                .env("ARGOCD_FAKE_IN_CLUSTER", "true")
                .env("KUBECONFIG", &kubeconfig)
                .arg(format!("--argocd-repo-server={}", self.repo_server_addr))
                .arg("--repo-server-plaintext")
                .arg(format!("--metrics-addr=127.0.0.1:{}", unused_port()))
                .arg(format!("--probe-addr=127.0.0.1:{}", unused_port()))
                .arg(format!("--webhook-addr=127.0.0.1:{}", unused_port()))
                .args(["--enable-scm-providers=false", "--logformat=text"])
                .arg("--loglevel=info"),
        )
    }

    /// Asks the applicationset-controller to reconcile ApplicationSet
    /// `argocd/name` now (`argocd.argoproj.io/application-set-refresh`) and
    /// waits until it has: the controller removes the annotation at the end
    /// of the reconcile, after writing the Applications.
    pub fn refresh_application_set(plane: &ControlPlane, name: &str) {
        const REFRESH: &str = "argocd.argoproj.io/application-set-refresh";
        let out = plane.kubectl(
            "admin",
            &[
                "-n",
                "argocd",
                "annotate",
                "--overwrite",
                &format!("applicationset/{name}"),
                &format!("{REFRESH}=true"),
            ],
        );
        assert!(out.ok, "refresh ApplicationSet {name}: {out}");
        eventually(
            &format!("ApplicationSet {name} to be reconciled"),
            Duration::from_secs(90),
            || {
                let set = get_json(plane, &["-n", "argocd", "applicationset", name])
                    .ok_or("no ApplicationSet")?;
                match set["metadata"]["annotations"].get(REFRESH) {
                    None => Ok(()),
                    Some(_) => Err(format!("{REFRESH} still set")),
                }
            },
        );
    }

    /// Hard-refreshes Application `argocd/name` and waits until the
    /// controller has compared again (the refresh annotation is gone and
    /// `status.reconciledAt` moved).
    pub fn hard_refresh(plane: &ControlPlane, name: &str) -> Value {
        Self::hard_refresh_in(plane, "argocd", name)
    }

    /// [`ArgoCd::hard_refresh`] of Application `ns/name`.
    pub fn hard_refresh_in(plane: &ControlPlane, ns: &str, name: &str) -> Value {
        let before = get_json(plane, &["-n", ns, "application", name])
            .and_then(|a| field(&a, "/status/reconciledAt"));
        // reconciledAt has a resolution of one second.
        std::thread::sleep(Duration::from_millis(1100));
        let out = plane.kubectl(
            "admin",
            &[
                "-n",
                ns,
                "annotate",
                "--overwrite",
                &format!("application/{name}"),
                "argocd.argoproj.io/refresh=hard",
            ],
        );
        assert!(out.ok, "refresh {name}: {out}");
        eventually(
            &format!("Application {ns}/{name} to be refreshed"),
            Duration::from_secs(90),
            || {
                let app =
                    get_json(plane, &["-n", ns, "application", name]).ok_or("no Application")?;
                let pending = app["metadata"]["annotations"]
                    .get("argocd.argoproj.io/refresh")
                    .is_some();
                let at = field(&app, "/status/reconciledAt");
                if !pending && at.is_some() && at != before {
                    Ok(app)
                } else {
                    Err(format!("pending={pending} reconciledAt={at:?}"))
                }
            },
        )
    }

    /// The sync status Argo CD reports for one resource of the Application.
    pub fn resource_status(app: &Value, kind: &str, namespace: &str, name: &str) -> Option<String> {
        app["status"]["resources"].as_array()?.iter().find_map(|r| {
            (r["kind"] == kind
                && r["name"] == name
                && r["namespace"].as_str().unwrap_or("") == namespace)
                .then(|| r["status"].as_str().unwrap_or("").to_owned())
        })
    }

    pub fn logs(&self) -> String {
        format!(
            "application-controller:\n{}\nrepo-server:\n{}",
            self.controller.stderr_tail(40),
            self.repo_server.stderr_tail(20)
        )
    }
}

/// What kubectl printed, checked to have succeeded.
pub fn ok(out: Kubectl, what: &str) -> Kubectl {
    assert!(out.ok, "{what}: {out}");
    out
}
