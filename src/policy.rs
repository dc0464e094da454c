//! The policy: loaded from YAML, checked, and compiled once (globs, pointers, jq).

pub(crate) mod app_namespaces;
pub(crate) mod app_project;
pub mod argocd;
pub(crate) mod detector;
mod file;
pub(crate) mod flux;
pub(crate) mod identity_traps;
pub mod ignore;
pub mod impersonation;
pub mod jq;
pub mod lint;
pub(crate) mod locate;
pub mod locator;
pub(crate) mod overlap;
pub mod path;
pub mod pattern;
pub(crate) mod planned;
pub(crate) mod reach;
pub mod schema;
pub(crate) mod serving;
pub(crate) mod yaml;

use jiff::SignedDuration;

pub use argocd::Application;
pub use ignore::{IgnoreRule, RuleFailure, RuleSet, Target};
pub use schema::{Mode, PlannedCreates, Precision, UnknownParent, json_schema};

pub(crate) use detector::ArgoDetector;
pub(crate) use file::load_sources;
use pattern::PatternSet;
use schema::PolicyFile;

/// The embedded default policy, used when `--policy` is absent.
pub const DEFAULT_POLICY_YAML: &str = include_str!("policy/default-policy.yaml");

/// A policy that could not be loaded. The text names the file, the line when
/// the YAML parser knows it, and the reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub(crate) String);

/// Users and groups, as compiled globs.
#[derive(Debug, Default)]
pub(crate) struct Identities {
    users: PatternSet,
    groups: PatternSet,
}

/// A field of the policy file that does not compile; the caller adds the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FieldError {
    /// A user, group or namespace pattern that is not a glob.
    #[error("{field}: {source}")]
    Pattern {
        /// The field, such as `trusted.users`.
        field: String,
        /// Why the pattern is not a glob.
        source: pattern::PatternError,
    },
    /// An identity pattern that trusts more than it seems to.
    #[error("{field}: {why}")]
    IdentityTrap {
        /// The field, such as `trusted.users`.
        field: String,
        /// What it would trust.
        why: String,
    },
    /// A detector's key that no object could carry.
    #[error("{field}: {why}")]
    DetectorKey {
        /// The field, such as `gitops.argocd.trackingAnnotation`.
        field: &'static str,
        /// What it would do, and what to write.
        why: String,
    },
    /// `breakGlass.maxDuration` that is not a positive duration.
    #[error("breakGlass.maxDuration: {0}")]
    MaxDuration(#[from] DurationError),
}

/// A duration such as `4h` that is not one, or not positive.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DurationError {
    /// Not a duration at all.
    #[error("`{text}` is not a duration such as 4h or 30m: {source}")]
    Syntax {
        /// The text.
        text: String,
        /// Why it does not parse.
        source: jiff::Error,
    },
    /// Zero or negative.
    #[error("`{0}` must be positive")]
    NotPositive(String),
}

impl Identities {
    /// `section`'s users and groups, refused when a pattern covers an
    /// identity the section must never cover ([`identity_traps`]).
    fn new(
        users: &[String],
        groups: &[String],
        section: identity_traps::Section,
    ) -> Result<Self, FieldError> {
        use identity_traps::Kind;
        let set = |patterns, kind| {
            PatternSet::new(patterns).map_err(|source| FieldError::Pattern {
                field: section.field(kind).to_owned(),
                source,
            })
        };
        let identities = Self {
            users: set(users, Kind::Users)?,
            groups: set(groups, Kind::Groups)?,
        };
        match identity_traps::refusal(section, &identities) {
            Some((kind, why)) => Err(FieldError::IdentityTrap {
                field: section.field(kind).to_owned(),
                why,
            }),
            None => Ok(identities),
        }
    }

    /// Whether `username`, or one of `groups`, matches.
    pub(crate) fn contains(&self, username: &str, groups: &[String]) -> bool {
        self.users.is_match(username) || groups.iter().any(|g| self.groups.is_match(g))
    }

    /// Whether no user and no group are named.
    pub(crate) fn is_empty(&self) -> bool {
        self.users.is_empty() && self.groups.is_empty()
    }

    /// The user and group patterns as written.
    pub(crate) fn patterns(&self) -> (Vec<&str>, Vec<&str>) {
        (
            self.users.sources().collect(),
            self.groups.sources().collect(),
        )
    }
}

/// Who may break glass and for how long (the decision's result is
/// [`crate::drift::breakglass_state::BreakGlass`]).
#[derive(Debug)]
pub(crate) struct BreakGlassPolicy {
    /// Who may.
    pub(crate) allowed: Identities,
    /// The longest break-glass.
    pub(crate) max_duration: SignedDuration,
}

/// A policy, checked and compiled: what every decision reads.
#[derive(Debug)]
pub struct Policy {
    /// The default mode.
    pub(crate) mode: Mode,
    namespaces: Vec<(PatternSet, Mode)>,
    /// The GitOps tools: always allowed.
    pub(crate) controllers: Identities,
    /// Other identities whose writes are never manual.
    pub(crate) trusted: Identities,
    /// Who may break glass, and for how long.
    pub(crate) break_glass: BreakGlassPolicy,
    /// Argo CD's detector; `None`: Argo CD's marks are not read.
    pub(crate) argocd: Option<ArgoDetector>,
    /// Whether Flux's ownership labels are read.
    pub(crate) flux: bool,
    /// The verdict on a `…/scale` write whose parent cannot be read.
    pub(crate) unknown_scale_parent: UnknownParent,
    /// Which changes count as drift.
    pub(crate) precision: Precision,
    /// Whether manual CREATEs of planned objects are judged.
    pub(crate) planned_creates: PlannedCreates,
    /// The policy file's own ignore rules.
    pub(crate) rules: RuleSet,
    /// The Applications of `--argocd-application` files.
    pub(crate) applications: Vec<Application>,
    /// Which policy this is: `sha256:` of the policy file's text, and the
    /// file it came from (`/metrics` and `kubectl driftguard status` show
    /// both, so anyone can tell which policy is in force).
    pub(crate) digest: String,
    /// The file it came from, or `<embedded default policy>`.
    pub(crate) source: String,
}

/// `sha256:<hex>` of a policy file's text, as `sha256sum` prints it.
pub fn digest(text: &str) -> String {
    let hash = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

impl Policy {
    /// The embedded default policy ([`DEFAULT_POLICY_YAML`]).
    pub fn embedded() -> Self {
        Self::from_yaml(DEFAULT_POLICY_YAML, "<embedded default policy>")
            .expect("the embedded policy is valid")
    }

    /// The policy file at `path`.
    #[cfg(test)]
    pub(crate) fn load(path: &std::path::Path) -> Result<Self, PolicyError> {
        Self::from_yaml(&file::read_policy_file(path)?, &path.display().to_string())
    }

    /// A policy file's text; `file` names it in errors.
    pub fn from_yaml(text: &str, file: &str) -> Result<Self, PolicyError> {
        let parsed: PolicyFile = if text.trim().is_empty() {
            serde_saphyr::from_str("{}")
        } else {
            serde_saphyr::from_str(text)
        }
        .map_err(|e| PolicyError(yaml_error(file, &e)))?;
        let rules = compile_rules(&parsed.ignore_differences, "ignoreDifferences", &[]).map_err(
            |refused| {
                let (e, before) = *refused;
                PolicyError(locate::describe(file, text, &before, &e))
            },
        )?;
        refuse_whole_object_rules(&parsed.ignore_differences, text, file)?;
        let mut policy =
            Self::compile(&parsed, rules).map_err(|e| PolicyError(format!("{file}: {e}")))?;
        policy.digest = digest(text);
        policy.source = file.to_owned();
        Ok(policy)
    }

    fn compile(file: &PolicyFile, rules: RuleSet) -> Result<Self, FieldError> {
        let namespaces = file
            .namespaces
            .iter()
            .enumerate()
            .map(|(i, o)| {
                PatternSet::new(&o.names)
                    .map(|p| (p, o.mode))
                    .map_err(|source| FieldError::Pattern {
                        field: format!("namespaces[{i}].names"),
                        source,
                    })
            })
            .collect::<Result<_, _>>()?;
        let max_duration = parse_duration(&file.break_glass.max_duration)?;
        let argo = &file.gitops.argocd;
        Ok(Self {
            mode: file.mode,
            namespaces,
            controllers: Identities::new(
                &file.controllers.users_or(schema::default_controller_users),
                &file.controllers.groups,
                identity_traps::Section::Controllers,
            )?,
            trusted: Identities::new(
                &file.trusted.users_or(schema::default_trusted_users),
                &file.trusted.groups,
                identity_traps::Section::Trusted,
            )?,
            break_glass: BreakGlassPolicy {
                allowed: Identities::new(
                    &file.break_glass.allowed_users,
                    &file.break_glass.allowed_groups,
                    identity_traps::Section::BreakGlass,
                )?,
                max_duration,
            },
            argocd: ArgoDetector::compile(argo)?,
            flux: file.gitops.flux.enabled,
            unknown_scale_parent: file.unknown_scale_parent,
            precision: file.precision,
            planned_creates: file.planned_creates,
            rules,
            applications: Vec::new(),
            digest: String::new(),
            source: String::new(),
        })
    }

    /// Adds the Applications read from `--argocd-application` files.
    pub fn with_applications(mut self, apps: Vec<Application>) -> Self {
        self.applications.extend(apps);
        self
    }

    /// The glob patterns of the `namespaces` entries whose mode is `mode`, as
    /// written (for the webhooks' matchConditions).
    pub(crate) fn namespace_patterns(&self, mode: Mode) -> Vec<&str> {
        self.namespaces
            .iter()
            .filter(|(_, m)| *m == mode)
            .flat_map(|(names, _)| names.sources())
            .collect()
    }

    /// The first `namespaces` entry matching `namespace`: its patterns and
    /// its mode (what [`Policy::mode_for_namespace`] uses).
    pub(crate) fn namespace_entry(&self, namespace: &str) -> Option<(&PatternSet, Mode)> {
        self.namespaces
            .iter()
            .find(|(names, _)| names.is_match(namespace))
            .map(|(names, mode)| (names, *mode))
    }

    /// The global mode, overridden by the first matching `namespaces` entry.
    pub(crate) fn mode_for_namespace(&self, namespace: &str) -> Mode {
        self.namespace_entry(namespace)
            .map_or(self.mode, |(_, mode)| mode)
    }
}

/// Compiles `defs`, named `{what}[i]`. On failure, also returns every jq
/// expression written before the refused one (after `earlier`, those of
/// previous documents), for [`locate::describe`].
/// A rule of the policy file whose jq selects the whole object is refused
/// at load, like the empty JSON pointer, at its `file:line:column`. (Rules
/// read from the cluster are not refused at load: each decision reports such
/// a rule as failed, and it ignores nothing.)
fn refuse_whole_object_rules(
    defs: &[schema::IgnoreDifference],
    text: &str,
    file: &str,
) -> Result<(), PolicyError> {
    const PROBE_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);
    let mut before: Vec<&str> = Vec::new();
    for (i, def) in defs.iter().enumerate() {
        for (j, expr) in def.jq_path_expressions.iter().enumerate() {
            if let Some(why) = lint::selects_everything_within(expr, PROBE_LIMIT) {
                let err = ignore::RuleError {
                    item: format!("ignoreDifferences[{i}].jqPathExpressions[{j}]"),
                    reason: why,
                    jq: Some(ignore::JqSpot {
                        index: j,
                        expression: expr.clone(),
                        offset: 0,
                    }),
                    pointer: None,
                };
                return Err(PolicyError(locate::describe(file, text, &before, &err)));
            }
            before.push(expr);
        }
    }
    Ok(())
}

pub(crate) fn compile_rules<'a>(
    defs: &'a [schema::IgnoreDifference],
    what: &str,
    earlier: &[&'a str],
) -> Result<RuleSet, Box<(ignore::RuleError, Vec<&'a str>)>> {
    let mut rules = Vec::with_capacity(defs.len());
    for (i, def) in defs.iter().enumerate() {
        match IgnoreRule::compile(def, format!("{what}[{i}]")) {
            Ok(rule) => rules.push(rule),
            Err(e) => {
                let refused = e.jq.as_ref().map_or(0, |spot| spot.index);
                let before = earlier
                    .iter()
                    .copied()
                    .chain(
                        defs[..i]
                            .iter()
                            .flat_map(|d| d.jq_path_expressions.iter().map(String::as_str)),
                    )
                    .chain(
                        def.jq_path_expressions[..refused.min(def.jq_path_expressions.len())]
                            .iter()
                            .map(String::as_str),
                    )
                    .collect();
                return Err(Box::new((e, before)));
            }
        }
    }
    Ok(RuleSet::new(rules))
}

/// A positive duration as the policy writes `maxDuration` (`4h`, `30m`, `1h30m`).
pub(crate) fn parse_duration(text: &str) -> Result<SignedDuration, DurationError> {
    let d: SignedDuration = text.parse().map_err(|source| DurationError::Syntax {
        text: text.to_owned(),
        source,
    })?;
    if d.is_negative() || d.is_zero() {
        return Err(DurationError::NotPositive(text.to_owned()));
    }
    Ok(d)
}

/// `file:line:column: reason` from the YAML parser's multi-line report.
pub(crate) fn yaml_error(file: &str, err: &serde_saphyr::Error) -> String {
    let text = err.to_string();
    let first = text.lines().next().unwrap_or_default().trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let located = first.strip_prefix("line ").and_then(|rest| {
        let (line, rest) = rest.split_once(" column ")?;
        let (column, reason) = rest.split_once(": ")?;
        Some(format!("{file}:{line}:{column}: {reason}"))
    });
    located.unwrap_or_else(|| format!("{file}: {first}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_policy_loads_with_the_documented_defaults() {
        let p = Policy::embedded();
        assert_eq!(p.mode, Mode::Enforce);
        assert_eq!(p.mode_for_namespace("dev-team"), Mode::Warn);
        assert_eq!(p.mode_for_namespace("production"), Mode::Enforce);
        assert!(p.controllers.contains(
            "system:serviceaccount:argocd:argocd-application-controller",
            &[]
        ));
        assert!(p.trusted.contains(
            "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
            &[]
        ));
        assert!(p.trusted.contains("system:node:worker-1", &[]));
        assert!(p.break_glass.allowed.is_empty());
        assert_eq!(p.break_glass.max_duration, SignedDuration::from_hours(4));
        assert_eq!(p.rules.len(), 3);
    }

    #[test]
    fn left_out_keys_take_their_defaults() {
        let p = Policy::from_yaml("mode: audit\n", "p.yaml").unwrap();
        assert_eq!(p.mode, Mode::Audit);
        assert_eq!(p.mode_for_namespace("dev-team"), Mode::Warn);
        let none = Policy::from_yaml("namespaces: []\n", "p.yaml").unwrap();
        assert_eq!(none.mode_for_namespace("dev-team"), Mode::Enforce);
        assert!(
            p.controllers
                .contains("system:serviceaccount:flux-system:helm-controller", &[])
        );
        assert!(p.argocd.as_ref().unwrap().instance_label.is_some());
        assert!(p.rules.is_empty());
        let p = Policy::from_yaml("controllers: {groups: [gitops]}\n", "p.yaml").unwrap();
        assert!(p.controllers.contains(
            "system:serviceaccount:argocd:argocd-application-controller",
            &[]
        ));
        assert!(
            !p.controllers
                .contains("system:serviceaccount:argocd:argocd-server", &[]),
            "argocd-server writes for UI and API users"
        );
        assert!(p.controllers.contains("bot", &["gitops".into()]));
    }

    #[test]
    fn unknown_keys_are_rejected_with_file_line_and_key() {
        let err = Policy::from_yaml(
            "mode: enforce\nbreakGlass:\n  allowedGroup: [sre]\n",
            "p.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("p.yaml:3:3: unknown field `allowedGroup`"),
            "{err}"
        );
    }

    const RANGE_REFUSED: &str = "`range` is not allowed: it can run without bound \
        (allowed: field access, [], |, ',', select(...), comparisons, keys, has, test, ...)";

    #[test]
    fn refused_jq_is_placed_at_file_line_column() {
        let text = "mode: enforce
ignoreDifferences:
  - kind: Service
    jqPathExpressions:
      - .spec.clusterIP
      - last(range(1e12)) as $x | .spec
";
        let err = Policy::from_yaml(text, "p.yaml").unwrap_err().to_string();
        assert_eq!(
            err,
            format!("p.yaml:6:14: ignoreDifferences[0].jqPathExpressions[1]: {RANGE_REFUSED}")
        );
    }

    #[test]
    fn real_world_jq_expressions_load() {
        let exprs = jq::terminating::REAL_WORLD;
        let text = format!(
            "ignoreDifferences:\n  - kind: X\n    jqPathExpressions: {}\n",
            serde_json::to_string(&exprs).unwrap()
        );
        let p = Policy::from_yaml(&text, "p.yaml").unwrap();
        assert_eq!(p.rules.iter().next().unwrap().jq.len(), exprs.len());
    }

    #[test]
    fn every_refused_jq_construct_fails_the_load_naming_it() {
        let cases = [
            ("def f: .; f", "def"),
            ("reduce .[] as $x (0; .)", "reduce"),
            ("foreach .[] as $x (0; .)", "foreach"),
            ("label $f | .a", "label"),
            ("range(3)", "range"),
            ("repeat(.)", "repeat"),
            ("while(true; .)", "while"),
            ("until(true; .)", "until"),
            ("recurse(.[])", "recurse(f)"),
            ("recurse(.[]; true)", "recurse(f; cond)"),
            ("limit(1; .[])", "limit"),
            ("input", "input"),
            ("inputs", "inputs"),
            ("$__loc__", "$__loc__"),
            (".a * 2", "*"),
            (".a / 2", "/"),
            (".a % 2", "%"),
            (".a = 1", "="),
            (".a |= 1", "|="),
            (".a += 1", "+="),
            ("@base64", "@base64"),
            (".[$x]", "$x"),
            ("walk(.)", "walk"),
        ];
        for (jq, construct) in cases {
            let text =
                format!("ignoreDifferences:\n  - kind: X\n    jqPathExpressions: ['{jq}']\n");
            let err = Policy::from_yaml(&text, "p.yaml").unwrap_err().to_string();
            assert!(
                err.starts_with("p.yaml:3:")
                    && err.contains(&format!(
                        "ignoreDifferences[0].jqPathExpressions[0]: `{construct}` is not allowed: "
                    )),
                "{jq}: {err}"
            );
        }
    }

    #[test]
    fn refused_jq_in_a_repeated_or_block_expression_is_placed() {
        let text = "ignoreDifferences:
  - kind: A
    jqPathExpressions: ['.a | range(1)']
  - kind: B
    jqPathExpressions:
      - |
        .b
        | .a | range(1)
";
        // The first rule's text appears first: it is the one refused.
        let err = Policy::from_yaml(text, "p.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with("p.yaml:3:31: ignoreDifferences[0].jqPathExpressions[0]: `range`"),
            "{err}"
        );
        let text = text.replace("'.a | range(1)'", "'.a'");
        let err = Policy::from_yaml(&text, "p.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with("p.yaml:8:16: ignoreDifferences[1].jqPathExpressions[0]: `range`"),
            "{err}"
        );
    }

    #[test]
    fn refused_jq_not_found_in_the_text_names_the_entry_and_column() {
        let text = "ignoreDifferences:\n  - kind: A\n    jqPathExpressions: [\".a | test(\\\"x\\\") | range(1)\"]\n";
        let err = Policy::from_yaml(text, "p.yaml").unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "p.yaml: ignoreDifferences[0].jqPathExpressions[0]: at column 18 of the expression: {RANGE_REFUSED}"
            )
        );
    }

    #[test]
    fn refused_jq_in_an_application_file_is_placed() {
        let app = |name: &str, jq: &str| {
            format!(
                "apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {{name: {name}}}
spec:
  ignoreDifferences:
    - kind: Deployment
      jqPathExpressions:
        - {jq}
"
            )
        };
        let text = format!(
            "{}---\n{}",
            app("ok", ".spec.replicas"),
            app("bad", ".spec.replicas | until(false; .)")
        );
        let err = Policy::from_any_yaml(&text, "apps.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "apps.yaml:17:28: Application bad ignoreDifferences[0].jqPathExpressions[0]: `until` is not allowed"
            ),
            "{err}"
        );
    }

    #[test]
    fn bad_values_are_named() {
        let err = Policy::from_yaml("mode: strict\n", "p.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("strict"), "{err}");
        let err = Policy::from_yaml("breakGlass: {maxDuration: soon}\n", "p.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("breakGlass.maxDuration"), "{err}");
        let err = Policy::from_yaml(
            "ignoreDifferences: [{kind: X, jqPathExpressions: ['.a[']}]\n",
            "p.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("ignoreDifferences[0].jqPathExpressions[0]"),
            "{err}"
        );
    }
}
