//! What `explain` reports: scope, mode and ignore rules worked out by the
//! webhook's own steps, and the caller's and the object's break-glass.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use crate::deadline::Deadline;
use crate::drift::annotated::Annotated;
use crate::drift::breakglass_state::{EXPIRES, REASON};
use crate::drift::inputs::{ARGO_IGNORE_DIFFERENCES, Input, Inputs, MODE_ANNOTATION};
use crate::drift::pipeline;
use crate::drift::steps::{ModeChoice, ModeFrom, Owner, RuleFrom};
use crate::drift::{
    ArgoCdSources, Context, DEFAULT_ARGOCD_NAMESPACE, Operation, OutOfScope, Request, Sources,
};
use crate::plugin::api::{Identity, Resource};
use crate::policy::Policy;
use crate::policy::ignore::IgnoreRule;
use crate::policy::jq::JqInput;

/// What `explain -o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Report {
    pub(super) object: ObjectRef,
    /// Where the policy was read (`ConfigMap NS/NAME` or the embedded default).
    pub(super) policy: String,
    /// The GitOps object that manages it; null when none is known.
    pub(super) managed_by: Option<ManagedBy>,
    pub(super) scope: String,
    /// Null only when the decision steps could not run.
    pub(super) mode: Option<ModeReport>,
    pub(super) ignore_rules: Vec<RuleReport>,
    pub(super) break_glass: BreakGlassReport,
    pub(super) notes: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ObjectRef {
    pub(super) api_version: String,
    pub(super) kind: String,
    /// Empty for a cluster-scoped object.
    pub(super) namespace: String,
    pub(super) name: String,
}

/// The managing Argo CD Application or Flux object. A field that is absent
/// was not read; `Some(None)` (null) was read and is unset.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ManagedBy {
    pub(super) tool: &'static str,
    pub(super) kind: &'static str,
    pub(super) namespace: String,
    pub(super) name: String,
    #[serde(rename = "repoURL", skip_serializing_if = "Option::is_none")]
    pub(super) repo_url: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) path: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) application_set: Option<String>,
    /// Argo CD's diff: `three-way` or `server-side`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) diff: Option<&'static str>,
    /// Flux's source (`GitRepository NS/NAME, path P`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) source: Option<Option<String>>,
    /// The account the tool writes the object as, which driftguard trusts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) service_account: Option<Option<String>>,
}

#[derive(Debug, Serialize)]
pub(super) struct ModeReport {
    pub(super) mode: &'static str,
    pub(super) why: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RuleReport {
    pub(super) from: String,
    pub(super) rule: String,
    pub(super) json_pointers: Vec<String>,
    pub(super) jq_path_expressions: Vec<String>,
    pub(super) managed_fields_managers: Vec<String>,
    /// The paths it covers in the object now.
    pub(super) covers_now: Vec<String>,
    pub(super) errors: Vec<String>,
}

/// Whether the caller may break glass, and the object's own break-glass.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BreakGlassReport {
    pub(super) you: Identity,
    pub(super) you_may_break_glass: bool,
    pub(super) allowed_users: Vec<String>,
    pub(super) allowed_groups: Vec<String>,
    pub(super) max_duration: String,
    pub(super) annotations: [&'static str; 2],
    /// Null when the object has none.
    pub on_object: Option<OnObject>,
}

/// A break-glass on the object, in any state but none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct OnObject {
    pub reason: Option<String>,
    pub expires: Option<String>,
    pub state: &'static str,
    /// Why it grants nothing; null when it is active.
    pub why: Option<String>,
}

/// The object explained, as a write of it names it.
pub(super) struct Written<'a> {
    pub(super) resource: &'a Resource,
    /// Empty for a cluster-scoped object.
    pub(super) namespace: &'a str,
    pub(super) name: &'a str,
    pub(super) object: &'a Value,
}

impl<'a> Written<'a> {
    /// A dry-run UPDATE of the object to `new`, by no one in particular.
    pub(super) fn update(&self, new: &'a Value) -> Request<'a> {
        Request {
            operation: Operation::Update,
            group: &self.resource.group,
            kind: &self.resource.kind,
            resource_group: &self.resource.group,
            resource: &self.resource.plural,
            sub_resource: "",
            name: self.name,
            namespace: self.namespace,
            username: "",
            groups: &[],
            object: Some(new),
            old_object: Some(self.object),
            dry_run: true,
        }
    }
}

/// What the webhook would know now: `sources`, no scale parent. The plugin
/// runs on the user's machine: `deadline` is [`Deadline::none`].
fn context<'a>(sources: &'a Sources, deadline: &'a Deadline) -> Context<'a> {
    Context {
        now: Timestamp::now(),
        parent: None,
        sources: Some(sources),
        installation: Default::default(),
        deadline,
    }
}

/// The report's scope, mode and ignore rules, and notes on them.
pub(super) struct Judged {
    pub(super) scope: String,
    pub(super) mode: Option<ModeReport>,
    pub(super) rules: Vec<RuleReport>,
    pub(super) notes: Vec<String>,
}

/// How long explaining may run a tenant's rules: a jq rule slower than this
/// would be answered by `--on-error` in the webhook anyway.
const LIMIT: Duration = Duration::from_secs(5);

/// Scope, mode and ignore rules of an UPDATE of the object, worked out by
/// the webhook's own steps ([`pipeline::outline`]) from what the webhook
/// would know (`sources`); `origin` names the policy.
pub(super) fn judged(policy: &Policy, origin: &str, sources: &Sources, at: &Written) -> Judged {
    let deadline = Deadline::at(Instant::now() + LIMIT);
    let outline =
        match pipeline::outline(policy, &context(sources, &deadline), &at.update(at.object)) {
            Ok(outline) => outline,
            // Not reached: the request carries both objects.
            Err(e) => {
                return Judged {
                    scope: format!("unknown: {e}"),
                    mode: None,
                    rules: Vec::new(),
                    notes: Vec::new(),
                };
            }
        };
    let mut notes = outline.notes;
    if outline.claims.len() > 1 {
        let claims: Vec<String> = outline
            .claims
            .iter()
            .map(|c| format!("{} ({})", c.manager, c.by.as_str()))
            .collect();
        notes.push(format!(
            "claimed by {}: each judges a write, the strictest decision stands; the rules shown are the first's",
            claims.join(", ")
        ));
    }
    let mode = mode_report(&outline.mode, origin, at.namespace, &mut notes);
    let rules = outline
        .rules
        .iter()
        .map(|(from, rule)| rule_report(&rule_origin(from, origin, sources), rule, at.object))
        .collect();
    annotation_notes(&outline.rules.annotated, &mut notes);
    Judged {
        scope: scope_text(&outline.scope),
        mode: Some(mode),
        rules,
        notes,
    }
}

fn scope_text(scope: &Result<Owner, OutOfScope>) -> String {
    match scope {
        Ok(_) => "judged: manual changes outside the ignore rules are drift".to_owned(),
        Err(OutOfScope::ChildOf(owner)) => format!("not judged: a child of {owner} (its owner is)"),
        Err(OutOfScope::NotManaged) => {
            "not judged: not GitOps-managed (no tracking metadata)".to_owned()
        }
        Err(why) => format!("not judged: {why}"),
    }
}

/// The mode and why, as the report shows them.
fn mode_report(
    choice: &ModeChoice,
    origin: &str,
    namespace: &str,
    notes: &mut Vec<String>,
) -> ModeReport {
    let why = match &choice.from {
        ModeFrom::Policy => format!("the policy's default mode ({origin})"),
        ModeFrom::Namespace(patterns) => format!(
            "the policy's namespaces entry [{}] matching {namespace}",
            patterns.sources().collect::<Vec<_>>().join(", ")
        ),
        ModeFrom::Annotation(value) => format!("the object's annotation {MODE_ANNOTATION}={value}"),
    };
    if let Some(value) = choice.ignored {
        notes.push(format!(
            "{MODE_ANNOTATION}={value} is ignored: not enforce, warn or audit"
        ));
    }
    ModeReport {
        mode: choice.mode.as_str(),
        why,
    }
}

/// Where a rule comes from, as the report names it.
fn rule_origin(from: RuleFrom, policy_origin: &str, sources: &Sources) -> String {
    let control_plane = sources
        .argocd
        .first()
        .map_or(DEFAULT_ARGOCD_NAMESPACE, ArgoCdSources::namespace);
    match from {
        RuleFrom::Policy => policy_origin.to_owned(),
        RuleFrom::ArgoCdOverrides => format!("ConfigMap {control_plane}/argocd-cm"),
        RuleFrom::Application(app) => format!(
            "Application {}/{}",
            app.namespace.as_deref().unwrap_or(control_plane),
            app.name
        ),
        RuleFrom::Flux(_) => "Flux".to_owned(),
        RuleFrom::Annotation => ARGO_IGNORE_DIFFERENCES.to_owned(),
    }
}

/// Why Argo CD's per-resource annotation ignores nothing, or less than it says.
fn annotation_notes(annotated: &Annotated, notes: &mut Vec<String>) {
    notes.extend(annotated.note());
}

fn rule_report(origin: &str, rule: &IgnoreRule, object: &Value) -> RuleReport {
    let input = JqInput::new(object);
    let mut covers: Vec<String> = rule
        .pointers
        .iter()
        .map(|p| p.to_pointer())
        .filter(|p| object.pointer(p).is_some())
        .collect();
    let mut errors = Vec::new();
    let deadline = Deadline::at(Instant::now() + LIMIT);
    for jq in &rule.jq {
        match jq.paths(&input, &deadline) {
            Ok(Ok(paths)) => covers.extend(paths.iter().map(|p| p.to_pointer())),
            Ok(Err(e)) => errors.push(format!("{}: {e}", jq.source())),
            Err(stopped) => errors.push(format!("{}: {stopped}", jq.source())),
        }
    }
    RuleReport {
        from: origin.to_owned(),
        rule: rule.origin.clone(),
        json_pointers: rule.pointers.iter().map(|p| p.to_pointer()).collect(),
        jq_path_expressions: rule.jq.iter().map(|j| j.source().to_owned()).collect(),
        managed_fields_managers: rule.managers.clone(),
        covers_now: covers,
        errors,
    }
}

/// The object's break-glass as `explain` reports it: null when it has none.
pub(crate) fn on_object(
    state: &crate::drift::breakglass_state::State,
    inputs: &Inputs,
) -> Option<OnObject> {
    if *state == crate::drift::breakglass_state::State::None {
        return None;
    }
    Some(OnObject {
        reason: inputs.text(Input::BreakGlassReason).map(str::to_owned),
        expires: inputs.text(Input::BreakGlassExpires).map(str::to_owned),
        state: state.name(),
        why: state.why_not(),
    })
}

pub(crate) fn break_glass_report(
    policy: &Policy,
    me: &Identity,
    inputs: &Inputs,
) -> BreakGlassReport {
    let bg = &policy.break_glass;
    let allowed = bg.allowed.contains(&me.username, &me.groups);
    let (users, groups) = bg.allowed.patterns();
    let state = crate::drift::breakglass_state::state(inputs, policy, Timestamp::now());
    BreakGlassReport {
        you: me.clone(),
        you_may_break_glass: allowed,
        allowed_users: users.into_iter().map(str::to_owned).collect(),
        allowed_groups: groups.into_iter().map(str::to_owned).collect(),
        max_duration: format!("{:#}", bg.max_duration),
        annotations: [REASON, EXPIRES],
        on_object: on_object(&state, inputs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::{Finding, decide};
    use crate::policy::flux::FluxKind;
    use crate::policy::path::is_under;
    use serde_json::json;
    use std::sync::Arc;

    const IMAGE: &str = "/spec/template/spec/containers/0/image";
    /// Fields a write changes, one at a time: some ignored by a rule of the
    /// policy, the Application, argocd-cm, Flux or the object's annotation.
    const PROBES: [&str; 9] = [
        "/spec/replicas",
        "/spec/paused",
        IMAGE,
        "/metadata/labels/team",
        "/metadata/annotations/note",
        "/data/LOG_LEVEL",
        "/data/color",
        "/data/size",
        "/message",
    ];

    fn policies() -> Vec<Policy> {
        let base = r#"
mode: enforce
namespaces:
  - names: [staging]
    mode: warn
ignoreDifferences:
  - group: apps
    kind: Deployment
    jsonPointers: [/spec/replicas]
  - kind: ConfigMap
    jqPathExpressions: [.data.color]
"#;
        let mine = format!("{base}gitops:\n  argocd: {{installationID: mine}}\n  flux: {{}}\n");
        [base.to_owned(), mine]
            .iter()
            .map(|yaml| Policy::from_yaml(yaml, "policy.yaml").unwrap())
            .collect()
    }

    /// What the webhook's watches would know: nothing, or an Application
    /// with its rules, argocd-cm's rules and a Kustomization with its own.
    fn sources() -> [Sources; 2] {
        let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "myapp", "namespace": "argocd"},
            "spec": {"ignoreDifferences": [{"group": "apps", "kind": "Deployment", "jsonPointers": [IMAGE]}]}});
        let cm = json!({"resource.customizations.ignoreDifferences.apps_Deployment": "jsonPointers:\n- /spec/paused\n"});
        let kustomization = json!({"metadata": {"name": "apps", "namespace": "flux-system"},
            "spec": {"ignore": [{"paths": ["/data/LOG_LEVEL"], "target": {"kind": "ConfigMap"}}]}});
        let known = Sources {
            argocd: vec![ArgoCdSources {
                applications: vec![Arc::new(crate::policy::argocd::from_value(&app).unwrap())]
                    .into(),
                overrides: Arc::new(crate::sources::argocd_overrides(cm.as_object().unwrap()).0),
                ..ArgoCdSources::default()
            }],
            flux: vec![Arc::new(
                crate::sources::flux_from_value(FluxKind::Kustomization, &kustomization).unwrap(),
            )],
            ..Sources::default()
        };
        [Sources::default(), known]
    }

    fn resource(group: &str, kind: &str, plural: &str) -> Resource {
        Resource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced: true,
        }
    }

    /// An Argo CD-tracked Deployment in `namespace`, with these annotations too.
    fn deployment(namespace: &str, annotations: Value) -> (Resource, Value) {
        let mut object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": namespace, "labels": {"team": "a"},
                "annotations": {"note": "n",
                    "argocd.argoproj.io/tracking-id": format!("myapp:apps/Deployment:{namespace}/web")}},
            "spec": {"replicas": 3, "paused": false,
                "template": {"spec": {"containers": [{"name": "web", "image": "web:1"}]}}}});
        for (k, v) in annotations.as_object().unwrap() {
            object["metadata"]["annotations"][k] = v.clone();
        }
        (resource("apps", "Deployment", "deployments"), object)
    }

    fn configmap(metadata: Value) -> (Resource, Value) {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "production"},
            "data": {"LOG_LEVEL": "info", "color": "red", "size": "1"}});
        for (k, v) in metadata.as_object().unwrap() {
            object["metadata"][k] = v.clone();
        }
        (resource("", "ConfigMap", "configmaps"), object)
    }

    fn objects() -> Vec<(Resource, Value)> {
        let flux = json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                          "kustomize.toolkit.fluxcd.io/namespace": "flux-system"});
        let mut opted_out = flux.clone();
        opted_out["kustomize.toolkit.fluxcd.io/reconcile"] = json!("disabled");
        let tracked =
            json!({"argocd.argoproj.io/tracking-id": "myapp:/ConfigMap:production/settings"});
        let event = json!({"apiVersion": "v1", "kind": "Event", "message": "m",
            "metadata": {"name": "e", "namespace": "production", "annotations": tracked}});
        vec![
            deployment("production", json!({})),
            deployment("staging", json!({})),
            deployment("production", json!({"driftguard.io/mode": "warn"})),
            deployment("staging", json!({"driftguard.io/mode": "enforce"})),
            deployment("production", json!({"driftguard.io/mode": "bogus"})),
            deployment(
                "production",
                json!({"argocd.argoproj.io/ignore-differences": "jsonPointers: [/metadata/labels/team]"}),
            ),
            deployment(
                "production",
                json!({"argocd.argoproj.io/installation-id": "theirs"}),
            ),
            deployment(
                "production",
                json!({"argocd.argoproj.io/installation-id": "mine"}),
            ),
            configmap(json!({"labels": flux})),
            configmap(json!({"labels": opted_out})),
            configmap(json!({})),
            configmap(json!({"annotations": tracked, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u", "controller": true}]})),
            (resource("", "Event", "events"), event),
        ]
    }

    /// What the webhook decides for alice's UPDATE of `probe` in `object`.
    fn webhook(policy: &Policy, sources: &Sources, at: &Written, probe: &str) -> crate::Decision {
        let mut new = at.object.clone();
        *new.pointer_mut(probe).unwrap() = json!("changed");
        let req = Request {
            username: "alice",
            dry_run: false,
            ..at.update(&new)
        };
        decide(policy, &req, &context(sources, &Deadline::none())).unwrap()
    }

    /// Whether explain says a rule covers `probe` in the object now.
    fn covered(judged: &Judged, probe: &str) -> bool {
        judged
            .rules
            .iter()
            .any(|rule| rule.covers_now.iter().any(|p| is_under(probe, p)))
    }

    /// The keys of a JSON object, sorted.
    fn keys(v: &Value) -> Vec<&str> {
        let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn the_report_keeps_its_json_field_names() {
        let policy = Policy::embedded();
        let me = Identity {
            username: "alice".into(),
            groups: vec!["dev".into()],
        };
        let object = json!({"kind": "ConfigMap", "metadata": {"name": "x", "annotations": {
            REASON: "INC-1", EXPIRES: "2000-01-01T00:00:00Z"}}});
        let report = Report {
            object: ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: String::new(),
                name: "x".into(),
            },
            policy: "embedded default".into(),
            managed_by: Some(ManagedBy {
                tool: "Argo CD",
                kind: "Application",
                namespace: "argocd".into(),
                name: "myapp".into(),
                repo_url: Some(Some("https://git".into())),
                path: Some(None),
                diff: Some("three-way"),
                ..ManagedBy::default()
            }),
            scope: "judged".into(),
            mode: Some(ModeReport {
                mode: "enforce",
                why: "policy".into(),
            }),
            ignore_rules: vec![rule_report(
                "policy.yaml",
                policies()[0].rules.iter().next().unwrap(),
                &object,
            )],
            break_glass: break_glass_report(&policy, &me, &Inputs::read(&object, &policy)),
            notes: vec![],
        };
        let v = serde_json::to_value(&report).unwrap();
        let mut want = [
            "object",
            "policy",
            "managedBy",
            "scope",
            "mode",
            "ignoreRules",
            "breakGlass",
            "notes",
        ];
        want.sort_unstable();
        assert_eq!(keys(&v), want);
        assert_eq!(
            keys(&v["object"]),
            ["apiVersion", "kind", "name", "namespace"]
        );
        // Read and unset is null; not read is absent.
        assert_eq!(
            keys(&v["managedBy"]),
            [
                "diff",
                "kind",
                "name",
                "namespace",
                "path",
                "repoURL",
                "tool"
            ]
        );
        assert!(v["managedBy"]["path"].is_null());
        assert_eq!(keys(&v["mode"]), ["mode", "why"]);
        assert_eq!(
            keys(&v["ignoreRules"][0]),
            [
                "coversNow",
                "errors",
                "from",
                "jqPathExpressions",
                "jsonPointers",
                "managedFieldsManagers",
                "rule"
            ]
        );
        assert_eq!(
            keys(&v["breakGlass"]),
            [
                "allowedGroups",
                "allowedUsers",
                "annotations",
                "maxDuration",
                "onObject",
                "you",
                "youMayBreakGlass"
            ]
        );
        assert_eq!(keys(&v["breakGlass"]["you"]), ["groups", "username"]);
        assert_eq!(
            keys(&v["breakGlass"]["onObject"]),
            ["expires", "reason", "state", "why"]
        );
        assert_eq!(v["breakGlass"]["onObject"]["reason"], "INC-1");
    }

    #[test]
    fn explain_and_the_webhook_agree_on_scope_mode_and_rules() {
        let (mut judged_writes, mut ignored, mut drifted, mut skipped) = (0, 0, 0, 0);
        let mut modes = std::collections::BTreeSet::new();
        for policy in &policies() {
            for sources in &sources() {
                for (resource, object) in &objects() {
                    let at = Written {
                        resource,
                        namespace: object["metadata"]["namespace"].as_str().unwrap(),
                        name: object["metadata"]["name"].as_str().unwrap(),
                        object,
                    };
                    let explained = judged(policy, "policy.yaml", sources, &at);
                    for probe in PROBES.iter().filter(|p| object.pointer(p).is_some()) {
                        let d = webhook(policy, sources, &at, probe);
                        let case = format!(
                            "{probe} of {object}: explain {} {:?} {:?}; webhook {d:?}",
                            explained.scope, explained.mode, explained.rules
                        );
                        if let Finding::OutOfScope(why) = &d.finding {
                            assert!(
                                explained.scope.starts_with("not judged: ")
                                    && explained.scope.contains(why.as_str()),
                                "{case}"
                            );
                            skipped += 1;
                            continue;
                        }
                        assert!(explained.scope.starts_with("judged: "), "{case}");
                        let mode = explained.mode.as_ref().map(|m| m.mode);
                        assert_eq!(mode, Some(d.mode.as_str()), "{case}");
                        modes.insert(d.mode.as_str());
                        let webhook_ignores = !d.drifted_paths.iter().any(|p| p == probe);
                        assert_eq!(covered(&explained, probe), webhook_ignores, "{case}");
                        judged_writes += 1;
                        if webhook_ignores {
                            ignored += 1
                        } else {
                            drifted += 1
                        }
                    }
                }
            }
        }
        // Every kind of answer was met, so the comparisons above compared something.
        assert!(
            judged_writes > 40 && ignored > 10 && drifted > 10 && skipped > 10,
            "{judged_writes} judged, {ignored} ignored, {drifted} drifted, {skipped} out of scope"
        );
        assert_eq!(modes.len(), 2, "{modes:?}");
    }
}
