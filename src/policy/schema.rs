//! The policy file as written: YAML, camelCase, unknown keys rejected.
//! A key left out takes its value in the embedded default policy
//! (`default-policy.yaml`), the one place defaults are written.

use std::sync::LazyLock;

use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The value at `pointer` in the embedded default policy. Every key a file
/// may leave out is there; `policy::tests` loads `{}` to prove it.
fn default_at<T: DeserializeOwned>(pointer: &str) -> T {
    static DEFAULTS: LazyLock<serde_json::Value> = LazyLock::new(|| {
        serde_saphyr::from_str(super::DEFAULT_POLICY_YAML).expect("the embedded policy is YAML")
    });
    let value = DEFAULTS.pointer(pointer).cloned();
    let value = value.unwrap_or_else(|| panic!("default-policy.yaml sets no {pointer}"));
    serde_json::from_value(value).unwrap_or_else(|e| panic!("default-policy.yaml {pointer}: {e}"))
}

macro_rules! defaults {
    ($($name:ident: $type:ty = $pointer:literal;)*) => {
        $(fn $name() -> $type { default_at($pointer) })*
    };
}

defaults! {
    default_mode: Mode = "/mode";
    default_namespaces: Vec<NamespaceOverride> = "/namespaces";
    default_groups: Vec<String> = "/controllers/groups";
    default_allowed: Vec<String> = "/breakGlass/allowedUsers";
    default_max_duration: String = "/breakGlass/maxDuration";
    default_argocd_enabled: bool = "/gitops/argocd/enabled";
    default_tracking_annotation: String = "/gitops/argocd/trackingAnnotation";
    default_instance_label: String = "/gitops/argocd/instanceLabel";
    default_installation_id: String = "/gitops/argocd/installationID";
    default_flux_enabled: bool = "/gitops/flux/enabled";
    default_unknown_scale_parent: UnknownParent = "/unknownScaleParent";
    default_precision: Precision = "/precision";
    default_planned_creates: PlannedCreates = "/plannedCreates";
}

/// The GitOps tools' own identities, for a `controllers` list that names no users.
pub fn default_controller_users() -> Vec<String> {
    default_at("/controllers/users")
}

/// Kubernetes' own components, for a `trusted` list that names no users.
pub fn default_trusted_users() -> Vec<String> {
    default_at("/trusted/users")
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Drift is allowed and only recorded.
    Audit,
    /// Drift is allowed with a `Warning:` and a drift annotation.
    Warn,
    /// Drift is denied.
    Enforce,
}

impl Default for Mode {
    fn default() -> Self {
        default_mode()
    }
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
    #[serde(default = "default_mode")]
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
    #[serde(default = "default_unknown_scale_parent")]
    pub unknown_scale_parent: UnknownParent,
    /// None in a file of one's own: the embedded policy's are its own rules.
    #[serde(default)]
    pub ignore_differences: Vec<IgnoreDifference>,
    /// Which changes count as drift.
    #[serde(default = "default_precision")]
    pub precision: Precision,
    /// Whether a manual CREATE of an object the GitOps tool's records list
    /// is judged (and so whether every manual CREATE reaches driftguard).
    #[serde(default = "default_planned_creates")]
    pub planned_creates: PlannedCreates,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PlannedCreates {
    /// Refused: the tool would adopt what the person put in it. Untracked
    /// CREATEs are sent to a webhook of their own, which fails open.
    Guard,
    /// Not judged: untracked CREATEs never reach driftguard.
    Ignore,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Precision {
    /// Every change outside the ignore rules.
    All,
    /// Only changes to fields the GitOps tool owns (its managedFields under
    /// server-side apply, its last-applied-configuration otherwise).
    OwnedFields,
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
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IdentityList {
    #[serde(default)]
    pub users: Option<Vec<String>>,
    #[serde(default = "default_groups")]
    pub groups: Vec<String>,
}

impl Default for IdentityList {
    fn default() -> Self {
        Self {
            users: None,
            groups: default_groups(),
        }
    }
}

impl IdentityList {
    /// The users as written, or `default` when the key is left out.
    pub fn users_or(&self, default: fn() -> Vec<String>) -> Vec<String> {
        self.users.clone().unwrap_or_else(default)
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BreakGlassFile {
    #[serde(default = "default_allowed")]
    pub allowed_groups: Vec<String>,
    #[serde(default = "default_allowed")]
    pub allowed_users: Vec<String>,
    #[serde(default = "default_max_duration")]
    pub max_duration: String,
}

impl Default for BreakGlassFile {
    fn default() -> Self {
        Self {
            allowed_groups: default_allowed(),
            allowed_users: default_allowed(),
            max_duration: default_max_duration(),
        }
    }
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
    #[serde(default = "default_argocd_enabled")]
    pub enabled: bool,
    #[serde(default = "default_tracking_annotation")]
    pub tracking_annotation: String,
    /// Empty turns the label detector off.
    #[serde(default = "default_instance_label")]
    pub instance_label: String,
    /// Argo CD's `installationID`; empty: none.
    #[serde(default = "default_installation_id", rename = "installationID")]
    pub installation_id: String,
}

impl Default for ArgoDetectorFile {
    fn default() -> Self {
        Self {
            enabled: default_argocd_enabled(),
            tracking_annotation: default_tracking_annotation(),
            instance_label: default_instance_label(),
            installation_id: default_installation_id(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FluxDetectorFile {
    #[serde(default = "default_flux_enabled")]
    pub enabled: bool,
}

impl Default for FluxDetectorFile {
    fn default() -> Self {
        Self {
            enabled: default_flux_enabled(),
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UnknownParent {
    /// Allow with a warning that ownership could not be checked (no lock-out).
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
