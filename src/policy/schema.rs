//! The policy file as written: YAML, camelCase, unknown keys rejected.
//! Every key has the default shown in the README, so a partial file is complete.

use serde::Deserialize;

#[derive(
    Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, PartialOrd, Ord, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Drift is allowed and only recorded.
    Audit,
    /// Drift is allowed with a `Warning:` and a drift annotation.
    Warn,
    /// Drift is denied.
    #[default]
    Enforce,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Audit => "audit",
            Mode::Warn => "warn",
            Mode::Enforce => "enforce",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "audit" => Some(Mode::Audit),
            "warn" => Some(Mode::Warn),
            "enforce" => Some(Mode::Enforce),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default)]
    pub mode: Mode,
    #[serde(default = "default_namespaces")]
    pub namespaces: Vec<NamespaceOverride>,
    #[serde(default)]
    pub controllers: IdentityList,
    #[serde(default)]
    pub trusted: IdentityList,
    #[serde(default)]
    pub break_glass: BreakGlassFile,
    #[serde(default)]
    pub gitops: GitopsFile,
    /// What a `…/scale` write gets when the parent object is not available.
    #[serde(default)]
    pub unknown_scale_parent: UnknownParent,
    #[serde(default)]
    pub ignore_differences: Vec<IgnoreDifference>,
    /// Which changes count as drift.
    #[serde(default)]
    pub precision: Precision,
    /// Whether a manual CREATE of an object the GitOps tool's records list
    /// is judged (and so whether every manual CREATE reaches driftguard).
    #[serde(default)]
    pub planned_creates: PlannedCreates,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PlannedCreates {
    /// Refused: the tool would adopt what the person put in it. Untracked
    /// CREATEs are sent to a webhook of their own, which fails open.
    #[default]
    Guard,
    /// Not judged: untracked CREATEs never reach driftguard.
    Ignore,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Precision {
    /// Every change outside the ignore rules.
    #[default]
    All,
    /// Only changes to fields the GitOps tool owns (its managedFields under
    /// server-side apply, its last-applied-configuration otherwise).
    OwnedFields,
}

fn default_namespaces() -> Vec<NamespaceOverride> {
    vec![NamespaceOverride {
        names: vec!["dev-*".into()],
        mode: Mode::Warn,
    }]
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceOverride {
    pub names: Vec<String>,
    pub mode: Mode,
}

/// `controllers` and `trusted`: users and groups, globs allowed. Users left
/// out take the list's own default ([`default_controller_users`],
/// [`default_trusted_users`]); groups default to none.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdentityList {
    #[serde(default)]
    pub users: Option<Vec<String>>,
    #[serde(default)]
    pub groups: Vec<String>,
}

impl IdentityList {
    /// The users as written, or `default` when the key is left out.
    pub fn users_or(&self, default: fn() -> Vec<String>) -> Vec<String> {
        self.users.clone().unwrap_or_else(default)
    }
}

/// The GitOps tools' own identities, for a `controllers` list that names no users.
pub fn default_controller_users() -> Vec<String> {
    [
        "system:serviceaccount:argocd:argocd-application-controller",
        "system:serviceaccount:flux-system:kustomize-controller",
        "system:serviceaccount:flux-system:helm-controller",
    ]
    .map(String::from)
    .into()
}

/// Kubernetes' own components, for a `trusted` list that names no users.
pub fn default_trusted_users() -> Vec<String> {
    [
        "system:serviceaccount:kube-system:*",
        "system:kube-controller-manager",
        "system:kube-scheduler",
        "system:node:*",
    ]
    .map(String::from)
    .into()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BreakGlassFile {
    #[serde(default)]
    pub allowed_groups: Vec<String>,
    #[serde(default)]
    pub allowed_users: Vec<String>,
    #[serde(default = "default_max_duration")]
    pub max_duration: String,
}

impl Default for BreakGlassFile {
    fn default() -> Self {
        Self {
            allowed_groups: Vec::new(),
            allowed_users: Vec::new(),
            max_duration: default_max_duration(),
        }
    }
}

fn default_max_duration() -> String {
    "4h".into()
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitopsFile {
    #[serde(default)]
    pub argocd: ArgoDetectorFile,
    #[serde(default)]
    pub flux: FluxDetectorFile,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArgoDetectorFile {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_tracking_annotation")]
    pub tracking_annotation: String,
    /// Empty turns the label detector off.
    #[serde(default = "default_instance_label")]
    pub instance_label: String,
    /// Argo CD's `installationID`; empty: none.
    #[serde(default, rename = "installationID")]
    pub installation_id: String,
}

impl Default for ArgoDetectorFile {
    fn default() -> Self {
        Self {
            enabled: true,
            tracking_annotation: default_tracking_annotation(),
            instance_label: default_instance_label(),
            installation_id: String::new(),
        }
    }
}

fn yes() -> bool {
    true
}

fn default_tracking_annotation() -> String {
    "argocd.argoproj.io/tracking-id".into()
}

fn default_instance_label() -> String {
    "app.kubernetes.io/instance".into()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FluxDetectorFile {
    #[serde(default = "yes")]
    pub enabled: bool,
}

impl Default for FluxDetectorFile {
    fn default() -> Self {
        Self { enabled: true }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UnknownParent {
    /// Allow with a warning that ownership could not be checked (no lock-out).
    #[default]
    Warn,
    /// Deny unless `/spec/replicas` is ignored for the parent's kind.
    Deny,
}

/// One entry of Argo CD's `ignoreDifferences`, field for field.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IgnoreDifference {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub json_pointers: Vec<String>,
    #[serde(default)]
    pub jq_path_expressions: Vec<String>,
    #[serde(default)]
    pub managed_fields_managers: Vec<String>,
}
