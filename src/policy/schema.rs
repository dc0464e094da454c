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
pub(crate) fn default_controller_users() -> Vec<String> {
    default_at("/controllers/users")
}

/// Kubernetes' own components, for a `trusted` list that names no users.
pub(crate) fn default_trusted_users() -> Vec<String> {
    default_at("/trusted/users")
}

/// The top-level keys of a policy file, as serde reads them ([`PolicyFile`]
/// is their one list): asked of its derived `Deserialize`, which names them
/// when it reads a struct.
pub(crate) fn policy_keys() -> &'static [&'static str] {
    static KEYS: LazyLock<&'static [&'static str]> = LazyLock::new(|| {
        let mut keys: &'static [&'static str] = &[];
        let _ = PolicyFile::deserialize(StructKeys(&mut keys));
        keys
    });
    &KEYS
}

/// A deserializer that only records the fields of the struct asked of it.
struct StructKeys<'a>(&'a mut &'static [&'static str]);

impl<'de> serde::Deserializer<'de> for StructKeys<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(serde::de::Error::custom("fields recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
        enum identifier ignored_any
    }
}

/// What happens to drift: recorded, warned about, or denied.
#[derive(
    Clone,
    Copy,
    Debug,
    Deserialize,
    schemars::JsonSchema,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
)]
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
    /// Its name in the policy file, metrics and audit records.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Audit => "audit",
            Mode::Warn => "warn",
            Mode::Enforce => "enforce",
        }
    }

    /// The mode named `s` (an annotation's value), if any.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "audit" => Some(Mode::Audit),
            "warn" => Some(Mode::Warn),
            "enforce" => Some(Mode::Enforce),
            _ => None,
        }
    }
}

/// A whole policy file.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct PolicyFile {
    /// The default mode.
    #[serde(default = "default_mode")]
    pub(crate) mode: Mode,
    /// Modes of their own for some namespaces.
    #[serde(default = "default_namespaces")]
    pub(crate) namespaces: Vec<NamespaceOverride>,
    /// The GitOps tools: always allowed.
    #[serde(default)]
    pub(crate) controllers: IdentityList,
    /// Other identities whose writes are never manual (the HPA, the kubelet).
    #[serde(default)]
    pub(crate) trusted: IdentityList,
    /// Who may break glass, and for how long.
    #[serde(default)]
    pub(crate) break_glass: BreakGlassFile,
    /// Which GitOps tools' ownership marks are read.
    #[serde(default)]
    pub(crate) gitops: GitopsFile,
    /// What a `…/scale` write gets when the parent object is not available.
    #[serde(default = "default_unknown_scale_parent")]
    pub(crate) unknown_scale_parent: UnknownParent,
    /// None in a file of one's own: the embedded policy's are its own rules.
    #[serde(default)]
    pub(crate) ignore_differences: Vec<IgnoreDifference>,
    /// Which changes count as drift.
    #[serde(default = "default_precision")]
    pub(crate) precision: Precision,
    /// Whether a manual CREATE of an object the GitOps tool's records list
    /// is judged (and so whether every manual CREATE reaches driftguard).
    #[serde(default = "default_planned_creates")]
    pub(crate) planned_creates: PlannedCreates,
}

/// `plannedCreates`: whether a manual CREATE of an object the GitOps tool
/// plans to create is judged.
#[derive(Clone, Copy, Debug, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PlannedCreates {
    /// Refused: the tool would adopt what the person put in it. Untracked
    /// CREATEs are sent to a webhook of their own, which fails open.
    Guard,
    /// Not judged: untracked CREATEs never reach driftguard.
    Ignore,
}

/// `precision`: which changes count as drift.
#[derive(Clone, Copy, Debug, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Precision {
    /// Every change outside the ignore rules.
    All,
    /// Only changes to fields the GitOps tool owns (its managedFields under
    /// server-side apply, its last-applied-configuration otherwise).
    OwnedFields,
}

#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
/// A `namespaces` entry: a mode for the namespaces matching `names`.
pub(crate) struct NamespaceOverride {
    /// Namespace names, globs allowed.
    pub(crate) names: Vec<String>,
    /// Their mode.
    pub(crate) mode: Mode,
}

/// `controllers` and `trusted`: users and groups, globs allowed. Users left
/// out take the list's own default ([`default_controller_users`],
/// [`default_trusted_users`]); groups default to none.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct IdentityList {
    /// Usernames; `None` when the key is left out.
    #[serde(default)]
    pub(crate) users: Option<Vec<String>>,
    /// Group names.
    #[serde(default = "default_groups")]
    pub(crate) groups: Vec<String>,
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
    pub(crate) fn users_or(&self, default: fn() -> Vec<String>) -> Vec<String> {
        self.users.clone().unwrap_or_else(default)
    }
}

/// `breakGlass`: who may break glass, and for how long at most.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct BreakGlassFile {
    /// Groups allowed, globs allowed.
    #[serde(default = "default_allowed")]
    pub(crate) allowed_groups: Vec<String>,
    /// Users allowed, globs allowed.
    #[serde(default = "default_allowed")]
    pub(crate) allowed_users: Vec<String>,
    /// The longest break-glass, such as `4h`.
    #[serde(default = "default_max_duration")]
    pub(crate) max_duration: String,
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

/// `gitops`: the ownership detectors.
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GitopsFile {
    /// Argo CD's.
    #[serde(default)]
    pub(crate) argocd: ArgoDetectorFile,
    /// Flux's.
    #[serde(default)]
    pub(crate) flux: FluxDetectorFile,
}

/// `gitops.argocd`: how Argo CD marks what it manages.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ArgoDetectorFile {
    /// Whether Argo CD's marks are read.
    #[serde(default = "default_argocd_enabled")]
    pub(crate) enabled: bool,
    /// The tracking annotation Argo CD writes.
    #[serde(default = "default_tracking_annotation")]
    pub(crate) tracking_annotation: String,
    /// Empty turns the label detector off.
    #[serde(default = "default_instance_label")]
    pub(crate) instance_label: String,
    /// Argo CD's `installationID`; empty: none.
    #[serde(default = "default_installation_id", rename = "installationID")]
    pub(crate) installation_id: String,
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

/// `gitops.flux`.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FluxDetectorFile {
    /// Whether Flux's ownership labels are read.
    #[serde(default = "default_flux_enabled")]
    pub(crate) enabled: bool,
}

impl Default for FluxDetectorFile {
    fn default() -> Self {
        Self {
            enabled: default_flux_enabled(),
        }
    }
}

/// `unknownScaleParent`: the verdict on a `…/scale` write whose parent
/// cannot be read.
#[derive(Clone, Copy, Debug, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UnknownParent {
    /// Allow with a warning that ownership could not be checked (no lock-out).
    Warn,
    /// Deny unless `/spec/replicas` is ignored for the parent's kind.
    Deny,
}

/// One entry of Argo CD's `ignoreDifferences`, field for field.
#[derive(Clone, Debug, Default, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IgnoreDifference {
    /// The API group; empty: the core group.
    #[serde(default)]
    pub group: String,
    /// The kind.
    pub kind: String,
    /// The object's name; empty: any.
    #[serde(default)]
    pub name: String,
    /// The object's namespace; empty: any.
    #[serde(default)]
    pub namespace: String,
    /// RFC 6901 pointers to ignore.
    #[serde(default)]
    pub json_pointers: Vec<String>,
    /// jq path expressions of the fields to ignore.
    #[serde(default)]
    pub jq_path_expressions: Vec<String>,
    /// Field managers whose fields are ignored.
    #[serde(default)]
    pub managed_fields_managers: Vec<String>,
}

/// The JSON Schema of a policy file: draft-07 (Helm's), every subschema
/// inline (a `$ref` would resolve against values.schema.json's root), unknown
/// keys refused at every level as the parser refuses them. The chart's
/// `values.schema.json` holds it as `properties.policy` (tests/one_source.rs),
/// so `helm install` refuses what `serve` would not parse.
pub fn json_schema() -> serde_json::Value {
    let mut settings = schemars::generate::SchemaSettings::draft07();
    settings.inline_subschemas = true;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<PolicyFile>()
        .to_value();
    if let Some(root) = schema.as_object_mut() {
        root.remove("$schema");
        root.remove("title");
    }
    schema
}
