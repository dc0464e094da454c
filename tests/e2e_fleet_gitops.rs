//! End to end, a fleet with the real tools (issue 24, item 4): two real
//! kube-apiservers, each with its own etcd. The hub runs the real Argo CD
//! application-controller, repo-server and Redis, and the real Flux
//! source-controller and kustomize-controller (`scripts/build-tools.sh
//! gitops`). Argo CD manages the spoke through a cluster Secret, as `argocd
//! cluster add` sets it up (service account `kube-system:argocd-manager` in
//! the spoke, its token and the spoke's CA in the hub); Flux applies to the
//! spoke through a Kustomization's `spec.kubeConfig` Secret. driftguard runs
//! against the spoke and reads both tools' objects from the hub with
//! read-only credentials. Every scenario asserts what the real tools then do
//! in the spoke, Argo CD's sync impersonation there included. `tests/e2e_fleet.rs` is the fast variant, with the tools'
//! writes played by the test.
//!
//! The spoke also runs its own real Argo CD (a team's, in `team-argocd`,
//! `installationID: team`; the hub's is `hub`) with an Application of the
//! same name as one of the hub's, `web`, and other rules; driftguard reads it
//! with `--local-argocd-namespace` beside the hub's.

use driftguard_testkit::control_plane;
use driftguard_testkit::fleet;
use driftguard_testkit::gitops;
use driftguard_testkit::gitops_e2e;
use driftguard_testkit::shared::{Shared, on_keeper, panic_text};

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use control_plane::*;
use fleet::*;
use gitops::*;
use gitops_e2e::{denied, image, plugin, wait_break_glass_ended, wait_synced};

/// The spoke's name in the hub: its Argo CD cluster Secret's `name`.
const SPOKE: &str = "spoke-1";
/// The Secret in the hub whose kubeconfig reaches the spoke, which the hub's
/// Kustomization names in `spec.kubeConfig.secretRef` (and driftguard's
/// `--cluster-name`, for Flux).
const SPOKE_KUBECONFIG: &str = "spoke-1-kubeconfig";
/// Who the hub's kustomize-controller is in the spoke: the identity of the
/// kubeConfig Secret. kustomize-controller v1.9.6 impersonates no one unless
/// the Kustomization names `spec.serviceAccountName`
/// (fluxcd/pkg/runtime/client/impersonator.go).
/// Who the hub's Argo CD is in the spoke (`argocd cluster add`).
const ARGOCD_MANAGER: &str = "system:serviceaccount:kube-system:argocd-manager";
const FLUX_IN_SPOKE: &str = "system:serviceaccount:flux-system:hub-kustomize-controller";

/// The spoke's own Argo CD: its namespace there, and who its
/// application-controller is (it writes as its own service account).
const TEAM_ARGOCD: &str = "team-argocd";
const TEAM_CONTROLLER: &str = "system:serviceaccount:team-argocd:argocd-application-controller";
/// Which installation tracks an object: argocd-cm's `installationID`,
/// written by Argo CD on every object it applies.
const INSTALLATION_ID: &str = "argocd.argoproj.io/installation-id";

/// The namespace of each object in the spoke: web's is the destination of
/// Application web (`name: spoke-1`), shop's that of Application shop
/// (`server: <the spoke's URL>`), team's that of Application team, apps that
/// of the Kustomization's api, team-apps that of the spoke's own Application
/// web (team-web).
fn ns(name: &str) -> &'static str {
    match name {
        "web" => "production",
        "shop" => "shop",
        "team" => "team",
        "team-web" => "team-apps",
        _ => "apps",
    }
}

/// Application team's ConfigMap, owned by `owner`.
fn team_config(owner: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: team-config, namespace: team}}\ndata: {{owner: {owner}}}\n"
    )
}

/// Project fleet syncs team's namespace in the spoke as service account
/// team/deployer (Argo CD's sync impersonation): the entry names the spoke
/// by its server URL, as Argo CD matches it against the cluster Secret's.
fn fleet_project(spoke_url: &str) -> String {
    format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata: {{name: fleet, namespace: argocd}}\n\
         spec:\n  sourceRepos: ['*']\n  destinations: [{{server: '*', namespace: team}}]\n\
         \x20 destinationServiceAccounts:\n    - {{server: '{spoke_url}', namespace: team, defaultServiceAccount: deployer}}\n"
    )
}

/// In the spoke, deployer may edit ConfigMaps in team, and nothing else.
const DEPLOYER_RBAC: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: deployer, namespace: team}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: configmap-editor, namespace: team}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: deployer, namespace: team}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmap-editor}
subjects: [{kind: ServiceAccount, name: deployer, namespace: team}]
"#;
const DEPLOYER: &str = "system:serviceaccount:team:deployer";

/// Deployment `name` as Git has it: one replica, `image`.
fn deployment(name: &str, image: &str) -> String {
    let namespace = ns(name);
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n\
         \x20 template:\n    metadata: {{labels: {{app: {name}}}}}\n\
         \x20   spec: {{containers: [{{name: {name}, image: '{image}'}}]}}\n"
    )
}

/// A hub Application deploying path `name` of `url` to the spoke's
/// namespace for Deployment `name`, the spoke given as `destination`
/// (`name: spoke-1` or `server: URL`),
/// self-healing, and keeping the live values of Deployments' replicas and
/// `ignored` pointers.
fn application(name: &str, url: &str, destination: &str, ignored: &[&str]) -> String {
    let namespace = ns(name);
    let pointers: Vec<String> = ["/spec/replicas"]
        .iter()
        .chain(ignored)
        .map(|p| format!("'{p}'"))
        .collect();
    format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: argocd}}\n\
         spec:\n  project: default\n  source: {{repoURL: '{url}', targetRevision: main, path: {name}}}\n\
         \x20 destination: {{{destination}, namespace: {namespace}}}\n\
         \x20 syncPolicy:\n    automated: {{prune: true, selfHeal: true}}\n    syncOptions: [RespectIgnoreDifferences=true]\n\
         \x20 ignoreDifferences:\n    - {{group: apps, kind: Deployment, jsonPointers: [{}]}}\n",
        pointers.join(", ")
    )
}

/// The spoke's own Argo CD's Application, named `web` as the hub's is:
/// team-web from the team's repository into team-apps, self-healing. Its
/// rules differ from the hub's web: replicas are not ignored, every
/// annotation is. So an object judged by the wrong `web` shows, either way,
/// and this one is the looser of the two for annotations (what a person
/// rewriting an object's installation id would be after).
///
/// Without `RespectIgnoreDifferences`: with it, a sync applies the live
/// values of ignored fields as Argo CD's cache holds them
/// (`normalizeTargetResources`, controller/sync.go), and a self-heal right
/// after the sweeper's lift can write the break-glass annotations back
/// without the label, out of every sweep's sight. Ending the object before
/// the lift narrows that window but does not close it: Argo CD's cache of
/// the object can lag the Application's resume (seen in one of three runs
/// with the option on: docs/break-glass.md, Limits).
fn team_application(url: &str) -> String {
    format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: web, namespace: {TEAM_ARGOCD}}}\n\
         spec:\n  project: default\n  source: {{repoURL: '{url}', targetRevision: main, path: team-web}}\n\
         \x20 destination: {{server: 'https://kubernetes.default.svc', namespace: {}}}\n\
         \x20 syncPolicy:\n    automated: {{prune: true, selfHeal: true}}\n\
         \x20 ignoreDifferences:\n    - {{group: apps, kind: Deployment, jsonPointers: [/metadata/annotations]}}\n",
        ns("team-web")
    )
}

/// What driftguard reads of the spoke's own Argo CD in its namespace
/// (argocd-cm, argocd-cmd-params-cm, the AppProjects), as the chart's Role grants it there with
/// `watch.hub.localArgocdNamespace`; Applications it lists cluster-wide
/// already ([`DRIFTGUARD_RBAC`]).
const LOCAL_ARGOCD_RBAC: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: driftguard-argocd-cm, namespace: team-argocd}
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
metadata: {name: driftguard-argocd-cm, namespace: team-argocd}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: driftguard-argocd-cm}
subjects: [{kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}]
"#;

/// Break-glass with both Argo CDs. In the spoke, driftguard's sweeper lifts
/// a pause of the spoke's own Applications (`get, list, patch`, as the chart
/// grants it), and the on-call engineer reads the team's argocd-cm (its
/// `installationID`, which the plugin routes by) and pauses its
/// Applications; in the hub the engineer reads the hub's argocd-cm too.
const LOCAL_BREAK_GLASS_RBAC: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: driftguard-application-lifter}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications]
    verbs: [get, list, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: driftguard-application-lifter}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: driftguard-application-lifter}
subjects: [{kind: User, name: driftguard, apiGroup: rbac.authorization.k8s.io}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: break-glass-pause, namespace: team-argocd}
rules:
  - apiGroups: [argoproj.io]
    resources: [applications]
    verbs: [get, patch]
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [argocd-cm]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: break-glass-pause, namespace: team-argocd}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: break-glass-pause}
subjects: [{kind: Group, name: sre-oncall, apiGroup: rbac.authorization.k8s.io}]
"#;
const HUB_ONCALL_ARGOCD_CM_RBAC: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: argocd-cm-reader, namespace: argocd}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [argocd-cm]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: argocd-cm-reader, namespace: argocd}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: argocd-cm-reader}
subjects: [{kind: User, name: oncall}]
"#;

/// The annotations of Application `ns/name` in `plane`.
fn application_annotations(plane: &ControlPlane, ns: &str, name: &str) -> serde_json::Value {
    let app = get_json(plane, &["-n", ns, "application", name]).unwrap();
    app["metadata"]["annotations"].clone()
}

/// The spoke as `argocd cluster add` registers it in the hub
/// (util/db/cluster.go, `SecretToCluster`: `name`, `server` and `config`, a
/// JSON ClusterConfig whose `caData` is base64, as a `[]byte`).
fn cluster_secret(spoke: &ControlPlane, server: &str, token: &str) -> String {
    let ca = std::fs::read(spoke.dir.join("ca.crt")).unwrap();
    let config = json!({
        "bearerToken": token,
        "tlsClientConfig": {"insecure": false, "caData": k8s_openapi::ByteString(ca)},
    });
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cluster-spoke-1", "namespace": "argocd",
                     "labels": {"argocd.argoproj.io/secret-type": "cluster"}},
        "stringData": {"name": SPOKE, "server": server, "config": config.to_string()},
    })
    .to_string()
}

/// The hub's Flux objects: the Secret whose `value` (the key
/// kustomize-controller reads first) is a self-contained kubeconfig for the
/// spoke as `token`'s identity, the GitRepository, and Kustomization
/// flux-system/apps applying `./flux` to the spoke through it, keeping the
/// live value of Deployments' replicas (`spec.ignore`).
fn flux_objects(spoke: &ControlPlane, server: &str, token: &str, url: &str) -> String {
    let ca = std::fs::read(spoke.dir.join("ca.crt")).unwrap();
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": SPOKE, "cluster": {"server": server,
            "certificate-authority-data": k8s_openapi::ByteString(ca)}}],
        "users": [{"name": "flux", "user": {"token": token}}],
        "contexts": [{"name": SPOKE, "context": {"cluster": SPOKE, "user": "flux"}}],
        "current-context": SPOKE,
    });
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SPOKE_KUBECONFIG, "namespace": "flux-system"},
        "stringData": {"value": kubeconfig.to_string()},
    });
    format!(
        "{secret}\n---\napiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\n\
         metadata: {{name: repo, namespace: flux-system}}\nspec: {{interval: 1m, url: '{url}', ref: {{branch: main}}}}\n\
         ---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\n\
         metadata: {{name: apps, namespace: flux-system}}\n\
         spec:\n  interval: 1m\n  path: ./flux\n  prune: true\n  wait: false\n  timeout: 1m\n\
         \x20 sourceRef: {{kind: GitRepository, name: repo}}\n\
         \x20 kubeConfig: {{secretRef: {{name: {SPOKE_KUBECONFIG}}}}}\n\
         \x20 ignore:\n    - {{paths: [/spec/replicas], target: {{kind: Deployment}}}}\n"
    )
}

/// driftguard's policy in the spoke: the default one, with oncall allowed
/// to break glass and the hub's kustomize-controller among the controllers.
/// In a fleet the hub's tools write in each spoke as the identity of the
/// credential the hub holds for it, made for that and used by nothing else:
/// it is the tool itself, so it belongs in `controllers` (the webhooks'
/// matchConditions skip it, so the hub's syncs never wait on driftguard, and
/// it is audited as the controller), named exactly rather than by a glob,
/// and not in `trusted`, which is for identities that are not the GitOps
/// tool. Argo CD's `kube-system:argocd-manager` is already trusted by the
/// default policy's `system:serviceaccount:kube-system:*`.
///
/// The spoke's own Argo CD writes as its controller's service account in
/// its own namespace, which the default policy does not name (it names
/// `argocd`'s). It is trusted as argocd-manager is, the other Argo CD's
/// writer here: what it writes is Git's state, applied by the tool, never a
/// person's change (and, trusted, the matchConditions skip it, so its syncs
/// never wait on driftguard). Named exactly, not `team-argocd:*`: other
/// accounts there (argocd-server) write for people.
fn policy(spoke: &ControlPlane) -> String {
    let default =
        std::fs::read_to_string(format!("{ROOT}/src/policy/default-policy.yaml")).unwrap();
    let controllers = "\"system:serviceaccount:flux-system:helm-controller\"]";
    let trusted = "\"system:serviceaccount:kube-system:*\"";
    let policy = default
        .replacen("allowedUsers: []", "allowedUsers: [oncall]", 1)
        .replacen(
            controllers,
            &format!("\"system:serviceaccount:flux-system:helm-controller\", \"{FLUX_IN_SPOKE}\"]"),
            1,
        )
        .replacen(trusted, &format!("{trusted}, \"{TEAM_CONTROLLER}\""), 1);
    assert_eq!(
        policy.len(),
        default.len() + "oncall".len() + FLUX_IN_SPOKE.len() + 4 + TEAM_CONTROLLER.len() + 4,
        "the default policy's allowedUsers, controllers or trusted moved"
    );
    let path = spoke.dir.join("policy.yaml");
    std::fs::write(&path, policy).unwrap();
    path.display().to_string()
}

fn allowed(out: Kubectl) -> Result<(), String> {
    if out.ok { Ok(()) } else { Err(out.to_string()) }
}

fn set_image(spoke: &ControlPlane, user: &str, deploy: &str, image: &str) -> Kubectl {
    spoke.kubectl(
        user,
        &[
            "-n",
            ns(deploy),
            "set",
            "image",
            &format!("deployment/{deploy}"),
            &format!("{deploy}={image}"),
        ],
    )
}

fn scale(spoke: &ControlPlane, deploy: &str, replicas: u32) -> Kubectl {
    spoke.kubectl(
        "alice",
        &[
            "-n",
            ns(deploy),
            "scale",
            &format!("deployment/{deploy}"),
            &format!("--replicas={replicas}"),
        ],
    )
}

fn replicas(spoke: &ControlPlane, deploy: &str) -> Option<String> {
    get_json(spoke, &["-n", ns(deploy), "deployment", deploy])
        .and_then(|d| field(&d, "/spec/replicas"))
}

fn sync_status(hub: &ControlPlane, app: &str) -> Option<String> {
    get_json(hub, &["-n", "argocd", "application", app])
        .and_then(|a| field(&a, "/status/sync/status"))
}

/// Who wrote `resource` `name` in the spoke so far (the apiserver's audit
/// log: creates, patches and updates that succeeded, dry runs included), as
/// admission sees them: the impersonated user where there is one.
fn writers(spoke: &ControlPlane, resource: &str, name: &str) -> std::collections::BTreeSet<String> {
    spoke
        .audit_events()
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == resource
                && e["objectRef"]["name"] == name
                && e["objectRef"]["subresource"].is_null()
                && ["create", "patch", "update"].contains(&e["verb"].as_str().unwrap_or(""))
                && e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| c < 300)
        })
        // As admission sees it: the impersonated user, if any.
        .filter_map(|e| {
            let user = &e["impersonatedUser"]["username"];
            user.as_str()
                .or(e["user"]["username"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

/// `deploy`'s image is `want` in the spoke, or what it is.
fn image_is(spoke: &ControlPlane, deploy: &str, want: &str) -> Result<(), String> {
    match image(spoke, ns(deploy), deploy) {
        Some(i) if i == want => Ok(()),
        other => Err(format!("{deploy}: {other:?}, not {want}")),
    }
}

/// A named step of the story, on the fleet as the steps before left it.
/// A step's name (its test's) and what it does.
type Step = (&'static str, fn(&mut Fleet));

/// The steps, in order: each builds on the ones before (one hub, one spoke,
/// one Git history).
const STEPS: [Step; 11] = [
    ("first_syncs", |f| f.first_syncs()),
    ("denials", |f| f.denials()),
    ("each_installations_rules", |f| f.each_installations_rules()),
    ("installation_id_kept", |f| f.installation_id_kept()),
    ("explain_in_the_spoke", |f| f.explain_in_the_spoke()),
    ("guarded_namespaces", |f| f.guarded_namespaces()),
    ("ignored_fields_kept", |f| f.ignored_fields_kept()),
    ("a_new_hub_rule", |f| f.a_new_hub_rule()),
    ("sync_impersonation", |f| f.sync_impersonation()),
    ("break_glass", |f| f.break_glass()),
    // Last: the hub's apiserver is stopped and started again.
    ("hub_outage", Fleet::hub_outage),
];

/// The fleet every test here runs in, and how each step ended so far.
struct Env {
    fleet: Fleet,
    done: Vec<Result<(), String>>,
}

static ENV: Shared<Env> = Shared::new();

fn setup() -> Env {
    Env {
        fleet: Fleet::start(),
        done: Vec::new(),
    }
}

/// Each step is its own test, which reports that step's result: the steps
/// before it that have not run yet run first, in order (whichever test runs
/// them), and a step after a failed one is not run. On the keeper thread,
/// as the hub's apiserver is started again there (`hub_outage`).
fn step(name: &'static str) {
    on_keeper(move || {
        ENV.with(setup, |env| {
            let i = STEPS.iter().position(|(n, _)| *n == name).unwrap();
            while env.done.len() <= i {
                let (next, run) = STEPS[env.done.len()];
                let result = match env.done.iter().position(Result::is_err) {
                    Some(failed) => Err(format!("not run: step {} failed", STEPS[failed].0)),
                    None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        run(&mut env.fleet)
                    }))
                    .map_err(|panic| format!("step {next}: {}", panic_text(&*panic))),
                };
                env.done.push(result);
            }
            if let Err(why) = &env.done[i] {
                panic!("{why}");
            }
        })
    })
}

#[test]
fn first_syncs() {
    step("first_syncs");
}

#[test]
fn denials() {
    step("denials");
}

#[test]
fn each_installations_rules() {
    step("each_installations_rules");
}

#[test]
fn installation_id_kept() {
    step("installation_id_kept");
}

#[test]
fn explain_in_the_spoke() {
    step("explain_in_the_spoke");
}

#[test]
fn guarded_namespaces() {
    step("guarded_namespaces");
}

#[test]
fn ignored_fields_kept() {
    step("ignored_fields_kept");
}

#[test]
fn a_new_hub_rule() {
    step("a_new_hub_rule");
}

#[test]
fn sync_impersonation() {
    step("sync_impersonation");
}

#[test]
fn break_glass() {
    step("break_glass");
}

#[test]
fn hub_outage() {
    step("hub_outage");
}

/// The two clusters, the hub's tools, and driftguard in the spoke (fields
/// drop in this order: driftguard and the tools before the clusters).
struct Fleet {
    dg: Driftguard,
    flux: Flux,
    argo: ArgoCd,
    /// The spoke's own Argo CD, and its team's repository (held for its
    /// server's lifetime; Argo CD reads it as `file://`).
    team_argo: ArgoCd,
    _team_repo: GitRepo,
    repo: GitRepo,
    hub: ControlPlane,
    spoke: ControlPlane,
    /// The repository as Argo CD reads it.
    url: String,
    /// The team's repository as the spoke's Argo CD reads it.
    team_url: String,
    spoke_url: String,
    /// Where `kubectl driftguard` is found.
    bin: PathBuf,
    /// The first commit: every tool's first sync.
    first: String,
    /// The team repository's first commit.
    team_first: String,
}

impl Fleet {
    /// The spoke as `argocd cluster add` leaves it (argocd-manager with
    /// cluster-admin and a token) with the identity the hub's Flux uses; the
    /// hub with Argo CD, Flux and Git; driftguard serving the spoke with the
    /// hub reader's kubeconfig; then the cluster Secret, the Applications
    /// and the Flux objects.
    fn start() -> Fleet {
        let tools = Tools::build();
        // Audited: who wrote the tools' objects.
        let mut spoke = ControlPlane::start_audited("fleet-real-spoke");
        // (The harness's RBAC for driftguard names the argocd namespace.)
        spoke.prepare(&[
            "production",
            "shop",
            "apps",
            "team",
            "argocd",
            "flux-system",
            TEAM_ARGOCD,
            ns("team-web"),
        ]);
        spoke.apply_admin(DEPLOYER_RBAC);
        spoke.apply_admin(LOCAL_ARGOCD_RBAC);
        spoke.apply_admin(LOCAL_BREAK_GLASS_RBAC);
        spoke.apply_admin(SWEEPER_RBAC);
        spoke.add_user("oncall", &["sre-oncall"]);
        let argocd_manager = service_account_token(&spoke, "kube-system", "argocd-manager");
        let flux_in_spoke = service_account_token(
            &spoke,
            "flux-system",
            FLUX_IN_SPOKE.rsplit(':').next().unwrap(),
        );
        let spoke_url = format!("https://127.0.0.1:{}", spoke.port);
        let bin = spoke.dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_kubectl-driftguard"),
            bin.join("kubectl-driftguard"),
        )
        .unwrap();

        let mut hub = ControlPlane::start("fleet-real-hub");
        hub.create_namespaces(&["argocd", "flux-system"]);
        let repo = GitRepo::new(&hub, &tools);
        let url = repo.file_url();
        let first = repo.commit(
            "web, shop, api and team",
            &[
                ("web/web.yaml", Some(&deployment("web", "nginx:1.27"))),
                ("shop/shop.yaml", Some(&deployment("shop", "nginx:1.27"))),
                ("flux/api.yaml", Some(&deployment("api", "nginx:1.27"))),
                ("team/config.yaml", Some(&team_config("team"))),
            ],
        );
        // Sync impersonation on, for project fleet; other projects'
        // Applications sync with the cluster Secret's credential (not enforced).
        let argo = ArgoCd::start(
            &hub,
            &tools,
            "  application.sync.impersonation.enabled: \"true\"\n  application.sync.impersonation.enforced: \"false\"\n  installationID: hub\n",
        );
        // The spoke's own Argo CD and its team's repository, started before
        // driftguard, which lists its Applications at start.
        let team_repo = GitRepo::new(&spoke, &tools);
        let team_url = team_repo.file_url();
        let team_first = team_repo.commit(
            "team-web",
            &[(
                "team-web/team-web.yaml",
                Some(&deployment("team-web", "nginx:1.27")),
            )],
        );
        let team_argo = ArgoCd::start_in(&spoke, &tools, TEAM_ARGOCD, "  installationID: team\n");
        let flux = Flux::start(&hub, &tools);
        // driftguard's --watch-flux also lists HelmReleases (no helm-controller runs).
        hub.apply_crds(&["flux-helmrelease"]);
        hub.add_user("spoke-1-driftguard", &[]);
        hub.apply_admin(HUB_READER_RBAC);
        hub.apply_admin(HUB_LIFTER_RBAC);
        hub.add_user("oncall", &[]);
        hub.apply_admin(HUB_ONCALL_RBAC);
        hub.apply_admin(HUB_ONCALL_ARGOCD_CM_RBAC);

        let hub_reader = hub.kubeconfig("spoke-1-driftguard").display().to_string();
        let policy = policy(&spoke);
        let dg = Driftguard::start(
            &spoke,
            &[
                &format!("--policy={policy}"),
                "--break-glass-sweep-interval=2s",
                "--watch-argocd",
                &format!("--local-argocd-namespace={TEAM_ARGOCD}"),
                "--watch-flux",
                &spoke.driftguard_kubeconfig_flag(),
                &format!("--argocd-kubeconfig={hub_reader}"),
                &format!("--flux-kubeconfig={hub_reader}"),
                // Both spellings of the spoke in Argo CD, and the Flux Secret.
                &format!("--cluster-name={SPOKE},{spoke_url},{SPOKE_KUBECONFIG}"),
            ],
        );
        dg.register(&spoke, &policy);

        hub.apply_admin(&cluster_secret(&spoke, &spoke_url, &argocd_manager));
        hub.apply_admin(&application("web", &url, &format!("name: {SPOKE}"), &[]));
        hub.apply_admin(&application(
            "shop",
            &url,
            &format!("server: '{spoke_url}'"),
            &[],
        ));
        hub.apply_admin(&flux_objects(
            &spoke,
            &spoke_url,
            &flux_in_spoke,
            &repo.http_url,
        ));
        spoke.apply_admin(&team_application(&team_url));
        Fleet {
            dg,
            flux,
            argo,
            team_argo,
            _team_repo: team_repo,
            repo,
            hub,
            spoke,
            url,
            team_url,
            spoke_url,
            bin,
            first,
            team_first,
        }
    }

    /// (1) The tools' first syncs land in the spoke, through driftguard, as
    /// the spoke's identities in the hub's Secrets, and the spoke's own Argo
    /// CD's as its controller; each Argo CD marks its objects with its
    /// installation id (both Applications are `web`: the tracking ids alone
    /// do not tell them apart).
    fn first_syncs(&self) {
        let (hub, spoke, first) = (&self.hub, &self.spoke, &self.first);
        wait_synced(hub, &self.argo, "web", first);
        wait_synced(hub, &self.argo, "shop", first);
        wait_synced(spoke, &self.team_argo, "web", &self.team_first);
        Flux::reconcile(hub, "flux-system", "apps", Some(first));
        for deploy in ["web", "shop", "api", "team-web"] {
            image_is(spoke, deploy, "nginx:1.27").unwrap();
        }
        for (deploy, installation) in [("web", "hub"), ("shop", "hub"), ("team-web", "team")] {
            let d = get_json(spoke, &["-n", ns(deploy), "deployment", deploy]).unwrap();
            let annotation = |key: &str| {
                field(
                    &d,
                    &format!("/metadata/annotations/{}", key.replace('/', "~1")),
                )
            };
            assert_eq!(
                (
                    annotation("argocd.argoproj.io/tracking-id"),
                    annotation(INSTALLATION_ID)
                ),
                (
                    Some(format!(
                        "{}:apps/Deployment:{}/{deploy}",
                        if deploy == "shop" { "shop" } else { "web" },
                        ns(deploy)
                    )),
                    Some(installation.to_owned())
                ),
                "{d}"
            );
        }
        let api = get_json(spoke, &["-n", "apps", "deployment", "api"]).unwrap();
        assert_eq!(
            field(&api, "/metadata/labels/kustomize.toolkit.fluxcd.io~1name").as_deref(),
            Some("apps"),
            "{api}"
        );
        for (deploy, user) in [
            ("web", ARGOCD_MANAGER),
            ("shop", ARGOCD_MANAGER),
            ("api", FLUX_IN_SPOKE),
            ("team-web", TEAM_CONTROLLER),
        ] {
            let writers = writers(spoke, "deployments", deploy);
            assert!(
                writers.len() == 1 && writers.contains(user),
                "{deploy} written by {writers:?}, not {user}"
            );
        }
    }

    /// (2) A person's edit is denied, naming the hub's Application (either
    /// spelling of the destination) or Kustomization, and the source (once
    /// driftguard's watch of the hub has delivered them).
    fn denials(&self) {
        let url = &self.url;
        for (deploy, manager, source) in [
            ("web", "Argo CD application web", format!("{url}, path web")),
            (
                "shop",
                "Argo CD application shop",
                format!("{url}, path shop"),
            ),
            (
                "api",
                "Flux Kustomization flux-system/apps",
                "GitRepository flux-system/repo, path ./flux".to_owned(),
            ),
        ] {
            wait_for(
                &format!("{deploy}'s denial to name {source}"),
                Duration::from_secs(30),
                || {
                    let out = set_image(&self.spoke, "alice", deploy, "nginx:1.28");
                    denied(&out, manager)?;
                    denied(&out, &source)
                },
            );
        }
    }

    /// (2) Each Argo CD's objects are judged by its own Application `web`:
    /// a scale of the hub's web is allowed (the hub's web ignores replicas)
    /// and made; one of the team's is denied, naming the team's Application
    /// and repository, not the hub's, and is not made. Judged by the other
    /// `web`, either would go the other way.
    fn each_installations_rules(&self) {
        let spoke = &self.spoke;
        allowed(scale(spoke, "web", 2)).unwrap();
        assert_eq!(replicas(spoke, "web").as_deref(), Some("2"));
        let team_source = format!("{}, path team-web", self.team_url);
        wait_for(
            "team-web's denial to name the team's Application",
            Duration::from_secs(30),
            || {
                let out = scale(spoke, "team-web", 2);
                denied(&out, "Argo CD application web")?;
                denied(&out, &team_source)?;
                if out.stderr.contains(&self.url) {
                    return Err(format!("names the hub's repository: {out}"));
                }
                Ok(())
            },
        );
        assert_eq!(replicas(spoke, "team-web").as_deref(), Some("1"));
    }

    /// (3) An attacker test: a person rewrites the hub's web's installation
    /// id to the team's (whose `web` ignores every annotation, so the object
    /// would pass as the team's), or removes it (then neither Argo CD would
    /// claim it, and nothing would guard it). Both are denied as drift of the
    /// hub's web, and the object keeps `hub`.
    fn installation_id_kept(&self) {
        let spoke = &self.spoke;
        for change in [
            format!("{INSTALLATION_ID}=team"),
            format!("{INSTALLATION_ID}-"),
        ] {
            let out = spoke.kubectl(
                "alice",
                &[
                    "-n",
                    "production",
                    "annotate",
                    "--overwrite",
                    "deployment/web",
                    &change,
                ],
            );
            denied(&out, "Argo CD application web").unwrap();
            denied(&out, &self.url).unwrap();
        }
        let web = get_json(spoke, &["-n", "production", "deployment", "web"]).unwrap();
        assert_eq!(
            field(
                &web,
                &format!(
                    "/metadata/annotations/{}",
                    INSTALLATION_ID.replace('/', "~1")
                )
            )
            .as_deref(),
            Some("hub"),
            "{web}"
        );
    }

    /// explain reads the Kustomization in the hub when told where it is
    /// (oncall's own hub credentials), or says how to.
    fn explain_in_the_spoke(&self) {
        let oncall_hub = self.hub.kubeconfig("oncall").display().to_string();
        let r = self.explain_api(&["--flux-kubeconfig", &oncall_hub]);
        assert_eq!(
            r["managedBy"]["source"], "GitRepository flux-system/repo, path ./flux",
            "{r}"
        );
        assert!(
            r["ignoreRules"].to_string().contains("/spec/replicas"),
            "{r}"
        );
        let r = self.explain_api(&[]);
        assert!(r["managedBy"]["source"].is_null(), "{r}");
        assert!(r["notes"].to_string().contains("--flux-kubeconfig"), "{r}");
    }

    /// `kubectl driftguard explain deployment/api -o json` as oncall in the
    /// spoke, with `extra` flags.
    fn explain_api(&self, extra: &[&str]) -> serde_json::Value {
        let mut args = vec!["explain", "deployment/api", "-n", "apps", "-o", "json"];
        args.extend_from_slice(extra);
        let out = plugin(&self.spoke, &self.bin, "oncall", &args);
        assert!(out.ok, "{out}");
        serde_json::from_str(&out.stdout).unwrap()
    }

    /// (4) The namespaces the hub's tools deploy to here are guarded, found
    /// by each of the three --cluster-name values, and the one the spoke's
    /// own Argo CD deploys to; none of them is deleted.
    fn guarded_namespaces(&self) {
        for (namespace, tool) in [
            ("production", "Argo CD application web"),
            ("shop", "Argo CD application shop"),
            ("apps", "Flux Kustomization flux-system/apps"),
            (ns("team-web"), "Argo CD application web"),
        ] {
            let out = self
                .spoke
                .kubectl("admin", &["delete", "namespace", namespace, "--wait=false"]);
            denied(&out, tool).unwrap();
            let left = get_json(&self.spoke, &["namespace", namespace]).unwrap();
            assert_eq!(
                field(&left, "/status/phase").as_deref(),
                Some("Active"),
                "{left}"
            );
        }
    }

    /// (3) The hub's ignore rules allow a scale, and the real tools keep it
    /// through reconciles (Argo CD's --app-resync is 10 s).
    fn ignored_fields_kept(&self) {
        let (hub, spoke) = (&self.hub, &self.spoke);
        for deploy in ["web", "shop", "api"] {
            allowed(scale(spoke, deploy, 3)).unwrap();
        }
        ArgoCd::hard_refresh(hub, "web");
        Flux::reconcile(hub, "flux-system", "apps", None);
        holds(
            "the scaled replicas, Synced",
            Duration::from_secs(25),
            || {
                let now = (
                    replicas(spoke, "web"),
                    replicas(spoke, "api"),
                    sync_status(hub, "web"),
                );
                match &now {
                    (Some(w), Some(a), Some(s)) if w == "3" && a == "3" && s == "Synced" => Ok(()),
                    _ => Err(format!("web, api replicas and web's sync: {now:?}")),
                }
            },
        );
        Flux::reconcile(hub, "flux-system", "apps", None);
        assert_eq!(replicas(spoke, "api").as_deref(), Some("3"));
    }

    /// (4) A rule added to the hub's Application is followed without a restart.
    fn a_new_hub_rule(&self) {
        denied(&annotate_web(&self.spoke, "a"), "Argo CD application web").unwrap();
        self.hub.apply_admin(&application(
            "web",
            &self.url,
            &format!("name: {SPOKE}"),
            &["/metadata/annotations/example.com~1note"],
        ));
        wait_for(
            "an annotation allowed by the hub's new rule",
            Duration::from_secs(30),
            || allowed(annotate_web(&self.spoke, "b")),
        );
    }

    /// Sync impersonation in the spoke: Argo CD writes team's objects as
    /// team/deployer there (the Application names the spoke by name; the
    /// project's entry by server URL), and driftguard trusts deployer for
    /// them, as Argo CD derives it.
    fn sync_impersonation(&self) {
        let (hub, spoke) = (&self.hub, &self.spoke);
        hub.apply_admin(&fleet_project(&self.spoke_url));
        hub.apply_admin(
            &application("team", &self.url, &format!("name: {SPOKE}"), &[])
                .replace("project: default", "project: fleet"),
        );
        wait_synced(hub, &self.argo, "team", &self.first);
        let owner = self.repo.commit(
            "team owns it",
            &[("team/config.yaml", Some(&team_config("team-c")))],
        );
        ArgoCd::hard_refresh(hub, "team");
        wait_synced(hub, &self.argo, "team", &owner);
        let cm = get_json(spoke, &["-n", "team", "configmap", "team-config"]).unwrap();
        assert_eq!(field(&cm, "/data/owner").as_deref(), Some("team-c"), "{cm}");
        let writers = writers(spoke, "configmaps", "team-config");
        assert!(
            writers.len() == 1 && writers.contains(DEPLOYER),
            "team-config written by {writers:?}"
        );
        let updates: Vec<_> = self
            .dg
            .audit()
            .into_iter()
            .filter(|r| r["user"] == DEPLOYER && r["operation"] == "UPDATE")
            .collect();
        assert!(
            !updates.is_empty() && updates.iter().all(|r| r["verdict"] == "allow"),
            "deployer's updates reach driftguard and are allowed: {updates:?}"
        );
        let out = spoke.kubectl(
            "alice",
            &[
                "-n",
                "team",
                "patch",
                "configmap",
                "team-config",
                "-p",
                r#"{"data":{"owner":"me"}}"#,
            ],
        );
        denied(&out, "Argo CD application team").unwrap();
    }

    /// (5) Break-glass in the spoke on web (Argo CD, paused in the hub with
    /// oncall's hub kubeconfig), team-web (the spoke's own Argo CD, whose
    /// Application of the same name is paused in the spoke) and api (Flux,
    /// paused on the object) at once: the hotfixes hold against self-heal
    /// and forced reconciles, end at expiry, and then Git wins again.
    fn break_glass(&self) {
        let (hub, spoke) = (&self.hub, &self.spoke);
        let oncall_hub = hub.kubeconfig("oncall").display().to_string();
        let arm = |deploy: &str, extra: &[&str]| {
            let target = format!("deployment/{deploy}");
            let mut args = vec![
                "break-glass",
                &target,
                "-n",
                ns(deploy),
                "--reason",
                "INC-24 hotfix",
                "--for",
                "50s",
            ];
            args.extend_from_slice(extra);
            let out = plugin(spoke, &self.bin, "oncall", &args);
            assert!(out.ok, "break-glass {deploy}: {out}");
            out
        };
        // Both Argo CDs given, for both objects: each is paused in the
        // installation whose id it carries, the team's `web` in the spoke and
        // the hub's `web` in the hub, each holding only its own object.
        let both = [
            "--argocd-kubeconfig",
            &oncall_hub,
            "--cluster-name",
            SPOKE,
            "--local-argocd-namespace",
            TEAM_ARGOCD,
        ];
        for (deploy, app) in [("web", "argocd/web"), ("team-web", "team-argocd/web")] {
            let out = arm(deploy, &both);
            assert!(
                out.stdout
                    .contains(&format!("Argo CD Application {app} is paused")),
                "{out}"
            );
        }
        let app = hub_application(hub, "web");
        assert_eq!(app[SKIP], "true", "{app}");
        assert_eq!(app[PAUSED_FOR], "apps/Deployment:production/web", "{app}");
        let app = application_annotations(spoke, TEAM_ARGOCD, "web");
        assert_eq!(app[SKIP], "true", "{app}");
        assert_eq!(
            app[PAUSED_FOR], "apps/Deployment:team-apps/team-web",
            "{app}"
        );
        // Flux needs nothing in the hub: its pause is on the object here.
        let out = arm("api", &[]);
        assert!(
            format!("{}{}", out.stdout, out.stderr)
                .contains("Flux will not reconcile deployment/api"),
            "{out}"
        );
        let api = get_json(spoke, &["-n", "apps", "deployment", "api"]).unwrap();
        assert_eq!(
            field(
                &api,
                "/metadata/annotations/kustomize.toolkit.fluxcd.io~1reconcile"
            )
            .as_deref(),
            Some("disabled"),
            "{api}"
        );

        for deploy in ["web", "api", "team-web"] {
            allowed(set_image(spoke, "oncall", deploy, "nginx:hotfix")).unwrap();
        }
        denied(
            &set_image(spoke, "alice", "web", "nginx:alice"),
            "Argo CD application web",
        )
        .unwrap();
        denied(
            &set_image(spoke, "alice", "team-web", "nginx:alice"),
            &format!("{}, path team-web", self.team_url),
        )
        .unwrap();
        // Self-heal reverts a change within seconds of a reconcile; the
        // hotfixes hold for over two of each Argo CD's reconcile periods,
        // and a forced Flux reconcile before and after.
        Flux::reconcile(hub, "flux-system", "apps", None);
        holds("the hotfixes", Duration::from_secs(25), || {
            image_is(spoke, "web", "nginx:hotfix")?;
            image_is(spoke, "team-web", "nginx:hotfix")?;
            image_is(spoke, "api", "nginx:hotfix")
        });
        Flux::reconcile(hub, "flux-system", "apps", None);
        image_is(spoke, "api", "nginx:hotfix").unwrap();

        // At expiry the sweeper lifts the hub's pause and the team's (in the
        // spoke) and ends all three; the real tools then put Git's image back.
        wait_break_glass_ended(spoke, "production", "web");
        wait_break_glass_ended(spoke, "apps", "api");
        wait_break_glass_ended(spoke, ns("team-web"), "team-web");
        for app in [
            hub_application(hub, "web"),
            application_annotations(spoke, TEAM_ARGOCD, "web"),
        ] {
            assert!(
                app.get(SKIP).is_none() && app.get(PAUSED_FOR).is_none(),
                "{app}"
            );
        }
        for (deploy, argo) in [("web", &self.argo), ("team-web", &self.team_argo)] {
            wait_for(
                &format!("Argo CD's self-heal to revert {deploy}'s hotfix"),
                Duration::from_secs(60),
                || {
                    image_is(spoke, deploy, "nginx:1.27")
                        .map_err(|e| format!("{e}\n{}", argo.logs()))
                },
            );
        }
        Flux::reconcile(hub, "flux-system", "apps", None);
        image_is(spoke, "api", "nginx:1.27")
            .map_err(|e| format!("{e}\n{}", self.flux.logs()))
            .unwrap();
        // team-web's Application ignores /metadata/annotations: its
        // self-heal, just done, wrote back none of the break-glass annotations.
        let team_web = get_json(spoke, &["-n", ns("team-web"), "deployment", "team-web"]).unwrap();
        let annotations = &team_web["metadata"]["annotations"];
        for key in [
            "driftguard.io/break-glass",
            "driftguard.io/break-glass-expires",
            "driftguard.io/break-glass-paused",
        ] {
            assert!(
                annotations.get(key).is_none(),
                "{key} came back: {team_web}"
            );
        }
    }

    /// (6) The hub goes away: decisions go on from the last good rules, and
    /// /metrics says for how long; then it comes back, and the tools, which
    /// outlived the outage, still deploy to the spoke.
    fn hub_outage(&mut self) {
        self.hub.stop_apiserver();
        let (dg, spoke, url) = (&self.dg, &self.spoke, &self.url);
        for source in ["Application", "Kustomization"] {
            wait_failing(dg, source, "the hub's watch to fail", |s| s > 0.0);
        }
        allowed(scale(spoke, "web", 2)).unwrap();
        allowed(scale(spoke, "api", 2)).unwrap();
        allowed(annotate_web(spoke, "c")).unwrap();
        let out = set_image(spoke, "alice", "web", "nginx:1.28");
        denied(&out, "Argo CD application web").unwrap();
        denied(&out, url).unwrap();
        denied(
            &set_image(spoke, "alice", "api", "nginx:1.28"),
            "Flux Kustomization flux-system/apps",
        )
        .unwrap();
        self.hub.start_apiserver();
        for source in ["Application", "Kustomization"] {
            wait_failing(&self.dg, source, "the hub's watch to work again", |s| {
                s == 0.0
            });
        }
        let second = self.repo.commit(
            "nginx 1.29",
            &[
                ("web/web.yaml", Some(&deployment("web", "nginx:1.29"))),
                ("flux/api.yaml", Some(&deployment("api", "nginx:1.29"))),
            ],
        );
        ArgoCd::hard_refresh(&self.hub, "web");
        wait_synced(&self.hub, &self.argo, "web", &second);
        Flux::reconcile(&self.hub, "flux-system", "apps", Some(&second));
        image_is(&self.spoke, "web", "nginx:1.29").unwrap();
        image_is(&self.spoke, "api", "nginx:1.29").unwrap();
        assert_eq!(replicas(&self.spoke, "web").as_deref(), Some("2"));
    }
}
