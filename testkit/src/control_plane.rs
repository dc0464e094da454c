//! A real control plane for end-to-end tests and the demo: etcd and
//! kube-apiserver built from the Go module proxy (scripts/build-tools.sh),
//! client certificates for admin, alice and sam, RBAC, driftguard registered
//! through real webhook configurations, and a kubectl of the apiserver's own
//! version ([`kubectl_bin`]). The Kubernetes version is the newest supported
//! one unless `DRIFTGUARD_KUBE_VERSION` names another (build-tools.sh lists
//! them). Everything runs on 127.0.0.1 and is torn down on drop, also after a
//! panic.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use driftguard::certs::Authority;

pub use crate::process::*;

pub const ARGO: &str = "system:serviceaccount:argocd:argocd-application-controller";
pub const FLUX: &str = "system:serviceaccount:flux-system:kustomize-controller";
pub const HPA: &str = "system:serviceaccount:kube-system:horizontal-pod-autoscaler";

/// The Argo CD-managed production/myapp that
/// [`ControlPlane::wait_until_webhook_denies_drift`] probes.
pub const MYAPP_DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: myapp
  namespace: production
  labels: {app.kubernetes.io/instance: myapp}
  annotations: {argocd.argoproj.io/tracking-id: "myapp:apps/Deployment:production/myapp"}
spec:
  replicas: 2
  selector: {matchLabels: {app: myapp}}
  template:
    metadata: {labels: {app: myapp}}
    spec: {containers: [{name: app, image: "nginx:1.27"}]}
"#;

/// tenant-a/web, managed by the Flux Kustomization tenant-a/apps.
pub const TENANT_WEB_DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: tenant-a
  labels: {kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: tenant-a}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
"#;

/// What kubectl printed.
pub struct Kubectl {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Kubectl {
    fn from(o: Output) -> Self {
        Kubectl {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl std::fmt::Display for Kubectl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ok={} stdout={:?} stderr={:?}",
            self.ok, self.stdout, self.stderr
        )
    }
}

fn tool(name: &str) -> PathBuf {
    let out = Command::new(format!("{ROOT}/scripts/build-tools.sh"))
        .arg(name)
        .stderr(Stdio::inherit())
        .output()
        .expect("scripts/build-tools.sh runs");
    assert!(out.status.success(), "building {name} failed");
    PathBuf::from(
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .lines()
            .last()
            .unwrap(),
    )
}

/// kubectl built at the apiserver's version, so every test stays within
/// kubectl's version skew whichever version runs (the machine's kubectl
/// dispatches to clients up to 1.33 only). Built once per test process.
pub fn kubectl_bin() -> &'static Path {
    static KUBECTL: OnceLock<PathBuf> = OnceLock::new();
    KUBECTL.get_or_init(|| tool("kubectl"))
}

/// A [`kubectl_bin`] command that ignores the user's `~/.kube/kuberc`
/// (aliases and default flags), so a run does what the test says.
pub fn kubectl_command() -> Command {
    let mut cmd = Command::new(kubectl_bin());
    cmd.env("KUBERC", "off");
    cmd
}

pub struct ControlPlane {
    pub dir: PathBuf,
    pub ca: Authority,
    pub port: u16,
    pub echo: bool,
    kubeconfigs: BTreeMap<String, PathBuf>,
    /// etcd's client port, kept for [`ControlPlane::start_apiserver`].
    etcd_client: u16,
    /// Flags beyond the defaults, kept across restarts.
    extras: Extras,
    // Dropped last: the apiserver before etcd.
    apiserver: Proc,
    etcd: Proc,
}

/// What the kube-apiserver is started with beyond the defaults.
#[derive(Clone, Default)]
struct Extras {
    /// `--admission-control-config-file`, once
    /// [`ControlPlane::present_client_certificate`] wrote one.
    admission_config: Option<PathBuf>,
    /// `--audit-log-path`, with [`AUDIT_POLICY`] ([`ControlPlane::start_audited`]).
    audit_log: Option<PathBuf>,
}

/// Every request at Metadata level (who, verb, resource, name, response
/// code; no bodies), logged once it is answered or, for a watch, started.
pub const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
";

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits for /readyz.
    pub fn start(name: &str) -> ControlPlane {
        Self::start_with(name, Extras::default())
    }

    /// [`ControlPlane::start`] with the apiserver's audit log on
    /// ([`AUDIT_POLICY`]); read it with [`ControlPlane::audit_events`].
    pub fn start_audited(name: &str) -> ControlPlane {
        Self::start_with(
            name,
            Extras {
                audit_log: Some(PathBuf::new()),
                ..Extras::default()
            },
        )
    }

    fn start_with(name: &str, mut extras: Extras) -> ControlPlane {
        let etcd_bin = tool("etcd");
        let apiserver_bin = tool("kube-apiserver");
        // Built before the apiserver starts, not inside the /readyz poll.
        kubectl_bin();
        let dir = PathBuf::from(ROOT)
            .join("target")
            .join("e2e")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca = Authority::new("driftguard e2e CA").unwrap();
        std::fs::write(dir.join("ca.crt"), &ca.cert_pem).unwrap();
        let (cert, key) = ca
            .leaf(
                "kube-apiserver",
                &["127.0.0.1".into(), "localhost".into()],
                &[],
            )
            .unwrap();
        std::fs::write(dir.join("apiserver.crt"), cert).unwrap();
        driftguard::certs::write_private(&dir.join("apiserver.key"), &key).unwrap();
        let sa = rcgen::KeyPair::generate().unwrap();
        driftguard::certs::write_private(&dir.join("sa.key"), &sa.serialize_pem()).unwrap();
        std::fs::write(dir.join("sa.pub"), sa.public_key_pem()).unwrap();

        if extras.audit_log.is_some() {
            std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY).unwrap();
            extras.audit_log = Some(dir.join("audit.log"));
        }

        let (etcd, client) = start_etcd(&etcd_bin, &dir.join("etcd"));
        let port = unused_port();
        let apiserver = spawn_apiserver(&apiserver_bin, &dir, client, port, &extras);
        let mut plane = ControlPlane {
            dir,
            ca,
            port,
            echo: false,
            kubeconfigs: BTreeMap::new(),
            etcd_client: client,
            extras,
            apiserver,
            etcd,
        };
        for (user, groups) in [
            ("admin", vec!["system:masters"]),
            ("alice", vec!["developers"]),
            ("sam", vec!["sre-oncall"]),
        ] {
            plane.add_user(user, &groups);
        }
        let mut attempts = 1;
        while let Err(PortTaken(why)) = plane.wait_ready() {
            assert!(
                attempts < 5,
                "kube-apiserver: a port was taken on every attempt: {why}"
            );
            attempts += 1;
            plane.port = unused_port();
            plane.apiserver = spawn_apiserver(
                &apiserver_bin,
                &plane.dir,
                client,
                plane.port,
                &plane.extras,
            );
            let users: Vec<String> = plane.kubeconfigs.keys().cloned().collect();
            users.iter().for_each(|u| plane.write_kubeconfig(u));
        }
        plane
    }

    /// Stops the kube-apiserver (SIGTERM, as a rolling restart does); etcd
    /// and every kubeconfig stay.
    pub fn stop_apiserver(&mut self) {
        self.apiserver.stop();
    }

    /// Starts the kube-apiserver again on the same port with the same flags
    /// and the same etcd, and waits for /readyz.
    pub fn start_apiserver(&mut self) {
        self.apiserver = spawn_apiserver(
            &tool("kube-apiserver"),
            &self.dir,
            self.etcd_client,
            self.port,
            &self.extras,
        );
        if let Err(PortTaken(why)) = self.wait_ready() {
            panic!(
                "kube-apiserver: port {} was taken while it was down: {why}",
                self.port
            );
        }
    }

    /// [`ControlPlane::stop_apiserver`], then [`ControlPlane::start_apiserver`].
    pub fn restart_apiserver(&mut self) {
        self.stop_apiserver();
        self.start_apiserver();
    }

    /// Restarts the apiserver so that it presents a client certificate named
    /// `common_name`, signed by the plane's CA, to the webhook at `host_port`
    /// (`127.0.0.1:PORT`): an AdmissionConfiguration whose webhook plugins
    /// read a kubeconfig with a user of that name. The apiserver matches a
    /// webhook URL's `host:port` exactly first, then `*.`-prefixed parents,
    /// then `*` (k8s.io/apiserver/pkg/util/webhook/authentication.go); only
    /// the exact name is written, so a wrong name means no certificate.
    pub fn present_client_certificate(&mut self, host_port: &str, common_name: &str) {
        let (cert, key) = self.ca.leaf(common_name, &[], &[]).unwrap();
        let p = |f: &str| self.dir.join(f);
        std::fs::write(p("webhook-client.crt"), cert).unwrap();
        driftguard::certs::write_private(&p("webhook-client.key"), &key).unwrap();
        std::fs::write(
            p("webhook-kubeconfig.yaml"),
            format!(
                "apiVersion: v1\nkind: Config\nusers:\n- name: \"{host_port}\"\n  user:\n    client-certificate: {}\n    client-key: {}\n",
                p("webhook-client.crt").display(),
                p("webhook-client.key").display(),
            ),
        )
        .unwrap();
        let plugin = |name: &str| {
            format!(
                "- name: {name}\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: {}\n",
                p("webhook-kubeconfig.yaml").display()
            )
        };
        std::fs::write(
            p("admission.yaml"),
            format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n{}{}",
                plugin("ValidatingAdmissionWebhook"),
                plugin("MutatingAdmissionWebhook")
            ),
        )
        .unwrap();
        self.extras.admission_config = Some(p("admission.yaml"));
        self.restart_apiserver();
    }

    /// The apiserver's audit events so far, one JSON object per request
    /// ([`AUDIT_POLICY`]); empty unless started with
    /// [`ControlPlane::start_audited`].
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        let Some(path) = &self.extras.audit_log else {
            return Vec::new();
        };
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// A client-certificate user: `user` is the username (the certificate's
    /// CN, e.g. `system:serviceaccount:NS:NAME`, which RBAC binds through a
    /// ServiceAccount subject) and the kubeconfig's key.
    pub fn add_user(&mut self, user: &str, groups: &[&str]) {
        let (cert, key) = self.ca.leaf(user, &[], groups).unwrap();
        std::fs::write(self.dir.join(format!("{user}.crt")), cert).unwrap();
        driftguard::certs::write_private(&self.dir.join(format!("{user}.key")), &key).unwrap();
        self.write_kubeconfig(user);
    }

    /// `user`'s kubeconfig for the apiserver's current port.
    fn write_kubeconfig(&mut self, user: &str) {
        let kubeconfig = self.dir.join(format!("{user}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: https://127.0.0.1:{}\n    certificate-authority: {}\nusers:\n- name: \"{user}\"\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: \"{user}\"\n  context: {{cluster: e2e, user: \"{user}\"}}\ncurrent-context: \"{user}\"\n",
                self.port,
                self.dir.join("ca.crt").display(),
                self.dir.join(format!("{user}.crt")).display(),
                self.dir.join(format!("{user}.key")).display(),
            ),
        )
        .unwrap();
        self.kubeconfigs.insert(user.to_owned(), kubeconfig);
    }

    /// Waits for /readyz; `PortTaken` when the apiserver could not bind its port.
    /// The readiness check cannot be answered by another test's apiserver on
    /// the same port: kubectl trusts only this plane's CA.
    fn wait_ready(&mut self) -> Result<(), PortTaken> {
        let ready = poll("kube-apiserver /readyz", Duration::from_secs(120), || {
            let out = self.kubectl("admin", &["get", "--raw", "/readyz"]);
            if out.ok && out.stdout.trim() == "ok" {
                return Ok(true);
            }
            assert!(
                self.etcd.alive(),
                "etcd exited: {}",
                self.etcd.stderr_tail(20)
            );
            if !self.apiserver.alive() {
                return Ok(false);
            }
            Err(format!("{out}; {}", self.apiserver.stderr_tail(30)))
        })
        .unwrap_or_else(|e| panic!("{e}"));
        if ready {
            return Ok(());
        }
        let stderr = self.apiserver.stderr_tail(30);
        if says_address_in_use(&stderr) {
            return Err(PortTaken(stderr));
        }
        panic!("kube-apiserver exited: {stderr}");
    }

    pub fn kubeconfig(&self, user: &str) -> &Path {
        &self.kubeconfigs[user]
    }

    /// Runs [`kubectl_bin`] as `user` (admin, alice or sam).
    pub fn kubectl(&self, user: &str, args: &[&str]) -> Kubectl {
        self.kubectl_stdin(user, args, None)
    }

    pub fn kubectl_stdin(&self, user: &str, args: &[&str], stdin: Option<&str>) -> Kubectl {
        if self.echo {
            println!(
                "\n$ kubectl {}{}",
                if user == "admin" {
                    String::new()
                } else {
                    format!("--user={user} ")
                },
                args.join(" ")
            );
        }
        let mut cmd = kubectl_command();
        cmd.arg(format!("--kubeconfig={}", self.kubeconfigs[user].display()))
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out: Kubectl = child.wait_with_output().unwrap().into();
        if self.echo {
            print!("{}{}", out.stdout, out.stderr);
        }
        out
    }

    /// kubectl as a service account (the GitOps controllers, the HPA), by
    /// impersonation from admin.
    pub fn kubectl_as(&self, service_account: &str, args: &[&str]) -> Kubectl {
        self.kubectl_as_stdin(service_account, args, None)
    }

    pub fn kubectl_as_stdin(
        &self,
        service_account: &str,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Kubectl {
        let ns = service_account.split(':').nth(2).unwrap_or_default();
        let mut all = vec![
            format!("--as={service_account}"),
            "--as-group=system:serviceaccounts".to_owned(),
            format!("--as-group=system:serviceaccounts:{ns}"),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        self.kubectl_stdin("admin", &refs, stdin)
    }

    pub fn apply_admin(&self, yaml: &str) {
        let out = self.kubectl_stdin("admin", &["apply", "-f", "-"], Some(yaml));
        assert!(out.ok, "apply as admin: {out}");
    }

    pub fn create_namespaces(&self, names: &[&str]) {
        for ns in names {
            let out = self.kubectl("admin", &["create", "namespace", ns]);
            assert!(out.ok, "create namespace {ns}: {out}");
        }
    }

    /// Applies tests/data/crds/`name`.yaml for each name and waits until every
    /// CRD is Established.
    /// Waits until the registered webhook answers: alice's dry-run label on
    /// the Argo CD-managed production/myapp is denied by driftguard.
    pub fn wait_until_webhook_denies_drift(&self) {
        wait_for(
            "the webhook to deny a dry-run drift",
            Duration::from_secs(30),
            || {
                let out = self.kubectl(
                    "alice",
                    &[
                        "-n",
                        "production",
                        "label",
                        "deployment/myapp",
                        "probe=1",
                        "--dry-run=server",
                    ],
                );
                if !out.ok && out.stderr.contains("driftguard") {
                    Ok(())
                } else {
                    Err(out.to_string())
                }
            },
        );
    }

    pub fn apply_crds(&self, names: &[&str]) {
        for name in names {
            let file = format!("{ROOT}/tests/data/crds/{name}.yaml");
            let out = self.kubectl("admin", &["apply", "-f", &file]);
            assert!(out.ok, "{name}: {out}");
        }
        let out = self.kubectl(
            "admin",
            &[
                "wait",
                "--for=condition=Established",
                "crd",
                "--all",
                "--timeout=30s",
            ],
        );
        assert!(out.ok, "{out}");
    }

    /// What every scenario with driftguard needs: `namespaces`, people who edit
    /// workloads ([`RBAC`]), the controllers ([`CONTROLLER_RBAC`]) and user
    /// `driftguard` with its own minimum ([`DRIFTGUARD_RBAC`]).
    pub fn prepare(&mut self, namespaces: &[&str]) {
        self.add_user("driftguard", &[]);
        self.create_namespaces(namespaces);
        self.apply_admin(RBAC);
        self.apply_admin(CONTROLLER_RBAC);
        self.apply_admin(DRIFTGUARD_RBAC);
    }

    /// `--kubeconfig=` for driftguard's own user.
    pub fn driftguard_kubeconfig_flag(&self) -> String {
        format!("--kubeconfig={}", self.kubeconfig("driftguard").display())
    }
}

/// A passing test leaves nothing behind (a failing one keeps its directory,
/// logs and etcd data, under target/e2e, to look at).
impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.apiserver.stop();
        self.etcd.stop();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// etcd on two ports picked here, retried when another process took one.
/// Ready is its own log line, not a probe of the port: another test's etcd
/// could answer there.
fn start_etcd(bin: &Path, data: &Path) -> (Proc, u16) {
    retry_bind("etcd", || {
        let (client, peer) = (unused_port(), unused_port());
        let _ = std::fs::remove_dir_all(data);
        let mut etcd = Proc::spawn(
            "etcd",
            Command::new(bin)
                .arg(format!("--data-dir={}", data.display()))
                .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                ))
                .arg(format!("--initial-cluster=default=http://127.0.0.1:{peer}"))
                .arg("--unsafe-no-fsync")
                .arg("--log-level=info"),
        );
        let ready = poll("etcd to serve clients", Duration::from_secs(60), || {
            if etcd.stderr_line("ready to serve client requests").is_some() {
                Ok(true)
            } else if etcd.alive() {
                Err(etcd.stderr_tail(5))
            } else {
                Ok(false)
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        if ready {
            return Ok((etcd, client));
        }
        let stderr = etcd.stderr_tail(20);
        if says_address_in_use(&stderr) {
            return Err(PortTaken(stderr));
        }
        panic!("etcd exited: {stderr}");
    })
}

fn spawn_apiserver(bin: &Path, dir: &Path, etcd: u16, port: u16, extras: &Extras) -> Proc {
    let p = |f: &str| dir.join(f).display().to_string();
    let mut cmd = Command::new(bin);
    if let Some(config) = &extras.admission_config {
        cmd.arg(format!(
            "--admission-control-config-file={}",
            config.display()
        ));
    }
    if let Some(log) = &extras.audit_log {
        cmd.arg(format!("--audit-policy-file={}", p("audit-policy.yaml")))
            .arg(format!("--audit-log-path={}", log.display()));
    }
    Proc::spawn(
        "kube-apiserver",
        cmd.arg(format!("--etcd-servers=http://127.0.0.1:{etcd}"))
            .arg(format!("--secure-port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            // v1.37 refuses a loopback address for the `kubernetes` Service's
            // endpoints (pkg/controlplane/instance.go, `ValidateIP`); nothing
            // here reaches the apiserver through that Service. Upstream's own
            // test server does the same (cmd/kube-apiserver/app/testing).
            .arg("--endpoint-reconciler-type=none")
            .arg(format!("--tls-cert-file={}", p("apiserver.crt")))
            .arg(format!("--tls-private-key-file={}", p("apiserver.key")))
            .arg(format!("--client-ca-file={}", p("ca.crt")))
            .arg(format!("--service-account-key-file={}", p("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                p("sa.key")
            ))
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--authorization-mode=RBAC")
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg("--profiling=false")
            .arg("--v=0"),
    )
}

/// driftguard itself, serving on 127.0.0.1 with a certificate from the plane's CA.
pub struct Driftguard {
    pub proc: Proc,
    pub port: u16,
    pub probe: u16,
    args: Vec<String>,
    /// Environment variables beyond the test's own, kept across restarts.
    env: Vec<(String, String)>,
}

impl Driftguard {
    /// Starts on a port the server picks itself (`--listen=127.0.0.1:0`).
    pub fn start(plane: &ControlPlane, extra: &[&str]) -> Driftguard {
        Self::start_with_names(plane, &["127.0.0.1"], extra)
    }

    /// [`Driftguard::start`] with a certificate for `names` (IP addresses
    /// and DNS names).
    pub fn start_with_names(plane: &ControlPlane, names: &[&str], extra: &[&str]) -> Driftguard {
        Self::start_with_env(plane, names, extra, &[])
    }

    /// [`Driftguard::start_with_names`] with environment variables
    /// (`RUST_LOG` for a module's debug lines, say).
    pub fn start_with_env(
        plane: &ControlPlane,
        names: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Driftguard {
        let args = Self::serve_args(plane, names, extra);
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let Served { proc, port, probe } =
            serve_driftguard_with_env(&Self::binary(), 0, &args, &env);
        Driftguard {
            proc,
            port,
            probe,
            args,
            env,
        }
    }

    /// `serve`'s flags: a certificate for `names`, then `extra`.
    pub fn serve_args(plane: &ControlPlane, names: &[&str], extra: &[&str]) -> Vec<String> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let (cert, key) = plane.ca.leaf("driftguard", &names, &[]).unwrap();
        std::fs::write(plane.dir.join("driftguard.crt"), cert).unwrap();
        driftguard::certs::write_private(&plane.dir.join("driftguard.key"), &key).unwrap();
        let mut args: Vec<String> = vec![
            format!("--tls-cert={}", plane.dir.join("driftguard.crt").display()),
            format!("--tls-key={}", plane.dir.join("driftguard.key").display()),
        ];
        if !extra.iter().any(|a| a.starts_with("--shutdown-delay")) {
            args.push("--shutdown-delay=0s".into());
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }

    pub fn stop(&mut self) {
        self.proc.stop();
    }

    /// Starts again on the same port with the same flags, or with the policy
    /// flags replaced by `replace_policy_args`.
    pub fn restart(&mut self, replace_policy_args: Option<&[&str]>) {
        match replace_policy_args {
            None => self.restart_with(&[], &[]),
            Some(extra) => self.restart_with(&["--policy", "--argocd-application"], extra),
        }
    }

    /// Restarts driftguard on the same port without the flags that start
    /// with any of `drop`, and with `add`.
    pub fn restart_with(&mut self, drop: &[&str], add: &[&str]) {
        self.proc.stop();
        let mut args: Vec<String> = self
            .args
            .iter()
            .filter(|a| !drop.iter().any(|d| a.starts_with(d)))
            .cloned()
            .collect();
        args.extend(add.iter().map(|a| a.to_string()));
        let served = serve_driftguard_with_env(&Self::binary(), self.port, &args, &self.env);
        assert_eq!(served.port, self.port, "restarted on another port");
        (self.proc, self.probe) = (served.proc, served.probe);
        self.args = args;
    }

    /// Audit records written so far.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        self.proc
            .stdout
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Another replica with the same flags, the same certificate and key
    /// files, on a port of its own.
    pub fn replica(&self) -> Driftguard {
        let Served { proc, port, probe } =
            serve_driftguard_with_env(&Self::binary(), 0, &self.args, &self.env);
        Driftguard {
            proc,
            port,
            probe,
            args: self.args.clone(),
            env: self.env.clone(),
        }
    }

    /// Registers both webhooks with `driftguard register` (server-side apply as admin).
    pub fn register(&self, plane: &ControlPlane, policy: &str) {
        Self::register_url(plane, policy, &format!("https://127.0.0.1:{}", self.port));
    }

    /// Registers both webhooks at `url` (a proxy in front of replicas, say).
    pub fn register_url(plane: &ControlPlane, policy: &str, url: &str) {
        Self::register_with(plane, policy, url, &[]);
    }

    /// `driftguard register` with `extra` flags (`--exclude-namespace=…`).
    pub fn register_with(plane: &ControlPlane, policy: &str, url: &str, extra: &[&str]) {
        let out = Command::new(Self::binary())
            .args(["register", &format!("--url={url}")])
            .args(extra)
            .arg(format!(
                "--ca-bundle={}",
                plane.dir.join("ca.crt").display()
            ))
            .arg(format!("--policy={policy}"))
            .arg(format!(
                "--kubeconfig={}",
                plane.kubeconfig("admin").display()
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "driftguard register: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The arguments it was started with (after any restart).
    pub fn args(&self) -> &[String] {
        &self.args
    }

    pub fn binary() -> PathBuf {
        cargo_bin("driftguard")
            .unwrap_or_else(|| PathBuf::from(ROOT).join("target/release/driftguard"))
    }
}

/// RBAC: developers and sre-oncall edit workloads everywhere (the aggregated
/// `edit` role is empty without kube-controller-manager, so the rules are spelled out).
pub const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: workload-editor}
rules:
  - apiGroups: ["", apps, batch, networking.k8s.io]
    resources: [deployments, deployments/scale, statefulsets, statefulsets/scale, daemonsets, replicasets, services, configmaps, cronjobs, jobs, ingresses, pods]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: workload-editors}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: workload-editor}
subjects:
  - {kind: Group, name: developers, apiGroup: rbac.authorization.k8s.io}
  - {kind: Group, name: sre-oncall, apiGroup: rbac.authorization.k8s.io}
"#;

/// The GitOps controllers and the HPA may do anything (bound to cluster-admin).
pub const CONTROLLER_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gitops-controllers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
  - {kind: ServiceAccount, name: argocd-application-controller, namespace: argocd}
  - {kind: ServiceAccount, name: kustomize-controller, namespace: flux-system}
  - {kind: ServiceAccount, name: horizontal-pod-autoscaler, namespace: kube-system}
"#;

/// driftguard's own RBAC, the minimum it needs: read scale parents, write
/// Events, list and watch the GitOps sources (tests/e2e_rbac.rs checks the
/// chart's against the audit log).
pub const DRIFTGUARD_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard}
rules:
  - apiGroups: [apps]
    resources: [deployments, statefulsets, replicasets]
    verbs: [get]
  - apiGroups: [events.k8s.io]
    resources: [events]
    verbs: [create]
  - apiGroups: [argoproj.io]
    resources: [applications]
    verbs: [list, watch]
  - apiGroups: [kustomize.toolkit.fluxcd.io]
    resources: [kustomizations]
    verbs: [list, watch]
  - apiGroups: [helm.toolkit.fluxcd.io]
    resources: [helmreleases]
    verbs: [list, watch]
---
# argocd-cm, argocd-cmd-params-cm and the AppProjects: a Role in the Argo CD
# namespace only, not every ConfigMap.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: driftguard-argocd-cm, namespace: argocd}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [argocd-cm, argocd-cmd-params-cm]
    verbs: [list, watch]
  - apiGroups: [argoproj.io]
    resources: [appprojects]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: driftguard-argocd-cm, namespace: argocd}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: driftguard-argocd-cm}
subjects:
  - {kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}
---
# The armed break-glasses' records, in its kubeconfig's namespace (default).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: driftguard-break-glass-records, namespace: default}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch, create, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: driftguard-break-glass-records, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: driftguard-break-glass-records}
subjects:
  - {kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard}
subjects:
  - {kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}
"#;

/// helm v3.22.0, built from the Go module proxy and cached.
pub fn helm() -> PathBuf {
    tool("helm")
}

/// What the chart renders for an out-of-cluster driftguard on 127.0.0.1:`port`
/// with a certificate from the plane's CA.
pub struct ChartInstall {
    pub policy: String,
    pub webhooks: String,
    pub yaml: String,
}

/// Applies, as admin, what a rendered chart grants driftguard (its RBAC) and
/// the sweeper's Lease, as `helm install -n driftguard` would.
pub fn apply_chart_rbac_and_lease(plane: &ControlPlane, docs: &[serde_json::Value]) {
    let needed: String = docs
        .iter()
        .filter(|d| {
            d["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("rbac.authorization.k8s.io"))
                || d["kind"] == "Lease"
        })
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect();
    let out = plane.kubectl_stdin("admin", &["apply", "-f", "-"], Some(&needed));
    assert!(out.ok, "{out}");
}

pub fn render_chart(plane: &ControlPlane, port: u16, sets: &[&str]) -> ChartInstall {
    render_release(plane, "dg", port, sets)
}

/// [`render_chart`] as Helm release `release` in namespace driftguard.
pub fn render_release(
    plane: &ControlPlane,
    release: &str,
    port: u16,
    sets: &[&str],
) -> ChartInstall {
    let ca = std::fs::read_to_string(plane.dir.join("ca.crt")).unwrap();
    let mut cmd = Command::new(helm());
    cmd.args([
        "template",
        release,
        &format!("{ROOT}/charts/driftguard"),
        "--namespace",
        "driftguard",
    ])
    .args(["--set", &format!("webhook.url=https://127.0.0.1:{port}")])
    .args(["--set-string", &format!("certificates.provided.ca={ca}")])
    .args([
        "--set-string",
        "certificates.provided.cert=unused-out-of-cluster",
    ])
    .args([
        "--set-string",
        "certificates.provided.key=unused-out-of-cluster",
    ]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let policy = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .and_then(|d| d["data"]["policy.yaml"].as_str())
        .expect("the chart renders the policy")
        .to_owned();
    let webhooks = docs
        .iter()
        .filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.ends_with("WebhookConfiguration"))
        })
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect();
    ChartInstall {
        policy,
        webhooks,
        yaml,
    }
}
