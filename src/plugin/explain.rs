//! `kubectl driftguard explain KIND/NAME`: who manages the object, the mode
//! in force and why, the ignore rules that apply to it and the paths they
//! cover now, whether the caller may break glass, and any active break-glass.
//! Everything is read with the library the webhook decides with, and scope,
//! mode and rules are worked out by the webhook's own steps.

use std::process::ExitCode;
use std::sync::Arc;

use jiff::Timestamp;
use serde_json::{Value, json};

use k8s_openapi::api::core::v1::ConfigMap;

use super::api::{Api, Identity, Resource, answer};
use super::{Output, PluginError, PolicySource, print_structured, split_target};
use crate::drift::annotated::Annotated;
use crate::drift::breakglass::{EXPIRES, REASON};
use crate::drift::inputs::{ARGO_IGNORE_DIFFERENCES, Input, Inputs, MODE_ANNOTATION};
use crate::drift::ownership::{self, Manager};
use crate::drift::pipeline;
use crate::drift::steps::{ModeChoice, ModeFrom, Owner, RuleFrom};
use crate::drift::{Context, Operation, OutOfScope, Request, Sources};
use crate::policy::Policy;
use crate::policy::argocd::{Application, DiffMode};
use crate::policy::flux::FluxKind;
use crate::policy::ignore::IgnoreRule;
use crate::policy::impersonation::{self, AppProject};
use crate::policy::jq::JqInput;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The object: KIND/NAME.
    target: String,
    /// Where Argo CD Applications live when the tracking id names none (and
    /// argocd-cm and the AppProjects).
    #[arg(long, default_value = "argocd")]
    argocd_namespace: String,
    /// Output format: text, json or yaml.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

pub async fn run(api: &Api, source: &PolicySource, args: Args) -> Result<ExitCode, PluginError> {
    let (kind, name) = split_target(&args.target)?;
    let resource = api.resolve(kind).await?;
    let object = match api.get_target(&resource, name).await? {
        Ok(o) => o,
        Err(r) => return Err(PluginError::from_refusal(r)),
    };
    let loaded = source.load(api).await?;
    let policy = &loaded.policy;
    let me = api.whoami().await?;
    let namespace = if resource.namespaced {
        api.namespace.as_str()
    } else {
        ""
    };
    let inputs = Inputs::read(&object, policy);
    let mut notes: Vec<String> = Vec::new();
    let manager = ownership::detect(&inputs);
    let (managed_by, sources) = read_manager(api, &args, manager.as_ref(), &mut notes).await?;
    let at = Written {
        resource: &resource,
        namespace,
        name,
        object: &object,
    };
    let judged = judged(policy, &loaded.origin, &sources, &at);
    notes.extend(judged.notes);
    let bg = break_glass_report(policy, &me, &inputs);
    let report = json!({
        "object": {"apiVersion": resource.api_version(), "kind": resource.kind,
                   "namespace": namespace, "name": name},
        "policy": loaded.origin,
        "managedBy": managed_by,
        "scope": judged.scope,
        "mode": judged.mode,
        "ignoreRules": judged.rules,
        "breakGlass": bg,
        "notes": notes,
    });
    if args.output != Output::Text {
        print_structured(&report, args.output)?;
    } else {
        print_text(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// What the managing tool knows of the object, read as the webhook's
/// watches read it: the report's `managedBy`, and the same [`Sources`] the
/// webhook decides with. What cannot be read is a note.
async fn read_manager(
    api: &Api,
    args: &Args,
    manager: Option<&Manager>,
    notes: &mut Vec<String>,
) -> Result<(Value, Sources), PluginError> {
    let mut sources = Sources {
        argocd_namespace: args.argocd_namespace.clone(),
        ..Sources::default()
    };
    let entry = match manager {
        Some(Manager::ArgoCd {
            application,
            application_namespace,
        }) => {
            let app_ns = application_namespace
                .as_deref()
                .unwrap_or(&args.argocd_namespace);
            read_application(api, args, (app_ns, application), &mut sources, notes).await?
        }
        Some(m @ (Manager::FluxKustomization { .. } | Manager::FluxHelmRelease { .. })) => {
            read_flux(api, m, &mut sources, notes).await?
        }
        None => Value::Null,
    };
    Ok((entry, sources))
}

/// The Application, argocd-cm's rules and the account Argo CD syncs as.
async fn read_application(
    api: &Api,
    args: &Args,
    (app_ns, application): (&str, &str),
    sources: &mut Sources,
    notes: &mut Vec<String>,
) -> Result<Value, PluginError> {
    let ar = crate::pause::application_resource();
    let mut entry = json!({"tool": "Argo CD", "kind": "Application",
                           "namespace": app_ns, "name": application});
    let mut found = None;
    match api.get_object(&ar, Some(app_ns), application).await? {
        Ok(app) => match crate::policy::argocd::from_value(&app) {
            Ok(app) => {
                entry["repoURL"] = json!(app.repo_url);
                entry["path"] = json!(app.path);
                if let Some(set) = &app.application_set {
                    entry["applicationSet"] = json!(set);
                }
                entry["diff"] = json!(match app.diff {
                    DiffMode::Legacy => "three-way",
                    DiffMode::ServerSide => "server-side",
                });
                found = Some(app);
            }
            Err(e) => notes.push(format!("Application {app_ns}/{application}: {e}")),
        },
        Err(r) => notes.push(format!(
            "cannot read Application {app_ns}/{application}: {}",
            r.message
        )),
    }
    let mut impersonation = false;
    let got = api
        .namespaced::<ConfigMap>(&args.argocd_namespace)
        .get("argocd-cm")
        .await;
    match answer(got, "get configmap argocd-cm")? {
        Ok(cm) => {
            if let Some(data) = cm.data {
                let data = data
                    .into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                let (set, errors) = crate::sources::argocd_overrides(&data);
                notes.extend(errors.iter().map(|e| format!("argocd-cm: {e}")));
                sources.argocd_overrides = Arc::new(set);
                impersonation = impersonation::enabled(&data);
            }
        }
        Err(r) if r.code == 404 => {}
        Err(r) => notes.push(format!("cannot read argocd-cm: {}", r.message)),
    }
    if let Some(app) = found {
        if impersonation {
            entry["serviceAccount"] =
                json!(sync_account(api, &app, &args.argocd_namespace, notes).await?);
        }
        sources.applications.push(Arc::new(app));
    }
    Ok(entry)
}

/// The Kustomization or HelmRelease: its source, account and ignore rules.
async fn read_flux(
    api: &Api,
    manager: &Manager,
    sources: &mut Sources,
    notes: &mut Vec<String>,
) -> Result<Value, PluginError> {
    let (kind, namespace, name) = match manager {
        Manager::FluxKustomization { namespace, name } => {
            (FluxKind::Kustomization, namespace, name)
        }
        Manager::FluxHelmRelease { namespace, name } => (FluxKind::HelmRelease, namespace, name),
        Manager::ArgoCd { .. } => return Ok(Value::Null),
    };
    let mut entry = json!({"tool": "Flux", "kind": kind.as_str(),
                           "namespace": namespace, "name": name});
    match api
        .get_object(&super::reach::flux_resource(kind), Some(namespace), name)
        .await?
    {
        Ok(value) => match crate::sources::flux_from_value(kind, &value) {
            Ok(src) => {
                entry["source"] = json!(src.source);
                entry["serviceAccount"] = json!(src.service_account);
                sources.flux.push(Arc::new(src));
            }
            Err(e) => notes.push(format!("{} {namespace}/{name}: {e}", kind.as_str())),
        },
        Err(r) => notes.push(format!(
            "cannot read {} {namespace}/{name}: {}",
            kind.as_str(),
            r.message
        )),
    }
    Ok(entry)
}

/// The object explained, as a write of it names it.
struct Written<'a> {
    resource: &'a Resource,
    /// Empty for a cluster-scoped object.
    namespace: &'a str,
    name: &'a str,
    object: &'a Value,
}

/// The report's scope, mode and ignore rules, and notes on them.
struct Judged {
    scope: String,
    mode: Value,
    rules: Vec<Value>,
    notes: Vec<String>,
}

/// Scope, mode and ignore rules of an UPDATE of the object, worked out by
/// the webhook's own steps ([`pipeline::outline`]) from what the webhook
/// would know (`sources`); `origin` names the policy.
fn judged(policy: &Policy, origin: &str, sources: &Sources, at: &Written) -> Judged {
    let ctx = Context {
        now: Timestamp::now(),
        parent: None,
        sources: Some(sources),
        other_installation: false,
    };
    let req = Request {
        operation: Operation::Update,
        group: &at.resource.group,
        kind: &at.resource.kind,
        resource_group: &at.resource.group,
        resource: &at.resource.plural,
        sub_resource: "",
        name: at.name,
        namespace: at.namespace,
        username: "",
        groups: &[],
        object: Some(at.object),
        old_object: Some(at.object),
        dry_run: true,
    };
    let outline = match pipeline::outline(policy, &ctx, &req) {
        Ok(outline) => outline,
        // Not reached: the request carries both objects.
        Err(e) => {
            return Judged {
                scope: format!("unknown: {e}"),
                mode: Value::Null,
                rules: Vec::new(),
                notes: Vec::new(),
            };
        }
    };
    let mut notes = outline.notes;
    let mode = mode_report(&outline.mode, origin, at.namespace, &mut notes);
    let rules = outline
        .rules
        .iter()
        .map(|(from, rule)| rule_report(&rule_origin(from, origin, sources), rule, at.object))
        .collect();
    annotation_notes(&outline.rules.annotated, &mut notes);
    Judged {
        scope: scope_text(&outline.scope),
        mode,
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
) -> Value {
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
    json!({"mode": choice.mode.as_str(), "why": why})
}

/// Where a rule comes from, as the report names it.
fn rule_origin(from: RuleFrom, policy_origin: &str, sources: &Sources) -> String {
    match from {
        RuleFrom::Policy => policy_origin.to_owned(),
        RuleFrom::ArgoCdOverrides => format!("ConfigMap {}/argocd-cm", sources.argocd_namespace()),
        RuleFrom::Application(app) => format!(
            "Application {}/{}",
            app.namespace
                .as_deref()
                .unwrap_or(sources.argocd_namespace()),
            app.name
        ),
        RuleFrom::Flux(_) => "Flux".to_owned(),
        RuleFrom::Annotation => ARGO_IGNORE_DIFFERENCES.to_owned(),
    }
}

/// Why Argo CD's per-resource annotation ignores nothing, or less than it says.
fn annotation_notes(annotated: &Annotated, notes: &mut Vec<String>) {
    let annotation = ARGO_IGNORE_DIFFERENCES;
    match annotated {
        Annotated::Rule(_, unresolved) if !unresolved.is_empty() => notes.push(format!(
            "{annotation}: these pointers resolve nothing, for Argo CD as for driftguard: {unresolved:?}"
        )),
        Annotated::Skipped(why) => notes.push(format!(
            "{annotation}: ignores nothing; Argo CD skips it too: {why}"
        )),
        _ => {}
    }
}

/// The account Argo CD syncs `app` as (sync impersonation on), read from its
/// AppProject; a project that cannot be read is a note.
async fn sync_account(
    api: &Api,
    app: &Application,
    argocd_namespace: &str,
    notes: &mut Vec<String>,
) -> Result<Option<String>, PluginError> {
    let project = match api
        .get_object(
            &super::reach::app_project_resource(),
            Some(argocd_namespace),
            &app.project,
        )
        .await?
    {
        Ok(value) => AppProject::from_value(&value),
        Err(r) => {
            notes.push(format!(
                "cannot read AppProject {argocd_namespace}/{}: {}",
                app.project, r.message
            ));
            return Ok(None);
        }
    };
    match project {
        Ok(project) => Ok(impersonation::sync_account(&project, app, argocd_namespace)),
        Err(e) => {
            notes.push(format!(
                "AppProject {argocd_namespace}/{}: {e}",
                app.project
            ));
            Ok(None)
        }
    }
}

fn rule_report(origin: &str, rule: &IgnoreRule, object: &Value) -> Value {
    let input = JqInput::new(object);
    let mut covers: Vec<String> = rule
        .pointers
        .iter()
        .map(|p| p.to_pointer())
        .filter(|p| object.pointer(p).is_some())
        .collect();
    let mut errors = Vec::new();
    for jq in &rule.jq {
        match jq.paths(&input) {
            Ok(paths) => covers.extend(paths.iter().map(|p| p.to_pointer())),
            Err(e) => errors.push(format!("{}: {e}", jq.source())),
        }
    }
    json!({
        "from": origin,
        "rule": rule.origin,
        "jsonPointers": rule.pointers.iter().map(|p| p.to_pointer()).collect::<Vec<_>>(),
        "jqPathExpressions": rule.jq.iter().map(|j| j.source()).collect::<Vec<_>>(),
        "managedFieldsManagers": rule.managers,
        "coversNow": covers,
        "errors": errors,
    })
}

/// The object's break-glass as `explain` reports it: null when it has none.
pub(crate) fn on_object(state: &crate::drift::breakglass::State, inputs: &Inputs) -> Value {
    if *state == crate::drift::breakglass::State::None {
        return Value::Null;
    }
    json!({"reason": inputs.text(Input::BreakGlassReason),
           "expires": inputs.text(Input::BreakGlassExpires),
           "state": state.name(), "why": state.why_not()})
}

pub(crate) fn break_glass_report(policy: &Policy, me: &Identity, inputs: &Inputs) -> Value {
    let bg = &policy.break_glass;
    let allowed = bg.allowed.contains(&me.username, &me.groups);
    let (users, groups) = bg.allowed.patterns();
    let state = crate::drift::breakglass::state(inputs, policy, Timestamp::now());
    let active = on_object(&state, inputs);
    json!({
        "you": me,
        "youMayBreakGlass": allowed,
        "allowedUsers": users,
        "allowedGroups": groups,
        "maxDuration": format!("{:#}", bg.max_duration),
        "annotations": [REASON, EXPIRES],
        "onObject": active,
    })
}

fn print_text(r: &Value) {
    let s = super::shown;
    let o = &r["object"];
    let ns = s(&o["namespace"]);
    println!(
        "Object:      {} {}{}",
        s(&o["kind"]),
        if ns.is_empty() {
            String::new()
        } else {
            format!("{ns}/")
        },
        s(&o["name"])
    );
    println!("Policy:      {}", s(&r["policy"]));
    let m = &r["managedBy"];
    if m.is_null() {
        println!("Managed by:  nothing driftguard knows of");
    } else {
        let mut line = format!(
            "{} {} {}/{}",
            s(&m["tool"]),
            s(&m["kind"]),
            s(&m["namespace"]),
            s(&m["name"])
        );
        for (key, label) in [
            ("applicationSet", "generated by ApplicationSet"),
            ("repoURL", "repo"),
            ("path", "path"),
            ("source", "source"),
            ("diff", "diff"),
        ] {
            if m[key].is_string() {
                line.push_str(&format!(", {label} {}", s(&m[key])));
            }
        }
        println!("Managed by:  {line}");
        // The account the tool writes this object as, which driftguard trusts here.
        if m["serviceAccount"].is_string() {
            let sa = s(&m["serviceAccount"]);
            let how = if s(&m["tool"]) == "Argo CD" {
                "Argo CD sync"
            } else {
                "Flux reconcile"
            };
            println!(
                "Identities:  allowed: {how} as {sa}, impersonated for {} {}/{}",
                s(&m["kind"]),
                s(&m["namespace"]),
                s(&m["name"])
            );
        }
    }
    println!("Scope:       {}", s(&r["scope"]));
    println!(
        "Mode:        {} (from {})",
        s(&r["mode"]["mode"]),
        s(&r["mode"]["why"])
    );
    let rules = r["ignoreRules"].as_array().cloned().unwrap_or_default();
    if rules.is_empty() {
        println!("Ignore rules: none; every field is compared");
    } else {
        println!("Ignore rules:");
        for rule in &rules {
            let mut what: Vec<String> = Vec::new();
            for key in ["jsonPointers", "jqPathExpressions", "managedFieldsManagers"] {
                for v in rule[key].as_array().into_iter().flatten() {
                    what.push(format!("{key}: {}", s(v)));
                }
            }
            println!(
                "  {} ({}): {}",
                s(&rule["rule"]),
                s(&rule["from"]),
                what.join("; ")
            );
            let covers: Vec<String> = rule["coversNow"]
                .as_array()
                .into_iter()
                .flatten()
                .map(s)
                .collect();
            if covers.is_empty() {
                println!("    covers now: nothing present in the object");
            } else {
                println!("    covers now: {}", covers.join(", "));
            }
        }
    }
    let bg = &r["breakGlass"];
    let you = &bg["you"];
    let groups: Vec<String> = you["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .map(s)
        .collect();
    println!(
        "Break-glass: you are {} (groups: {}); you {} break glass (allowed users [{}], groups [{}], at most {})",
        s(&you["username"]),
        groups.join(", "),
        if bg["youMayBreakGlass"] == true {
            "may"
        } else {
            "may not"
        },
        bg["allowedUsers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect::<Vec<_>>()
            .join(", "),
        bg["allowedGroups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(s)
            .collect::<Vec<_>>()
            .join(", "),
        s(&bg["maxDuration"]),
    );
    let on = &bg["onObject"];
    if on.is_null() {
        println!("             none on this object");
    } else {
        println!(
            "             on this object: {} (reason {:?}, expires {})",
            s(&on["state"]),
            s(&on["reason"]),
            s(&on["expires"])
        );
        if !on["why"].is_null() {
            println!("             grants nothing: {}", s(&on["why"]));
        }
    }
    for n in r["notes"].as_array().into_iter().flatten() {
        println!("Note:        {}", s(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::{Finding, decide};
    use crate::policy::path::is_under;

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
            applications: vec![Arc::new(crate::policy::argocd::from_value(&app).unwrap())],
            argocd_overrides: Arc::new(crate::sources::argocd_overrides(cm.as_object().unwrap()).0),
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
            operation: Operation::Update,
            group: &at.resource.group,
            kind: &at.resource.kind,
            resource_group: &at.resource.group,
            resource: &at.resource.plural,
            sub_resource: "",
            name: at.name,
            namespace: at.namespace,
            username: "alice",
            groups: &[],
            object: Some(&new),
            old_object: Some(at.object),
            dry_run: false,
        };
        let ctx = Context {
            now: Timestamp::now(),
            parent: None,
            sources: Some(sources),
            other_installation: false,
        };
        decide(policy, &req, &ctx).unwrap()
    }

    /// Whether explain says a rule covers `probe` in the object now.
    fn covered(judged: &Judged, probe: &str) -> bool {
        judged.rules.iter().any(|rule| {
            rule["coversNow"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| is_under(probe, p.as_str().unwrap()))
        })
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
                            "{probe} of {object}: explain {} {} {:?}; webhook {d:?}",
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
                        assert_eq!(explained.mode["mode"], d.mode.as_str(), "{case}");
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
