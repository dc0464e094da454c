//! `kubectl driftguard explain KIND/NAME`: who manages the object, the mode
//! in force and why, the ignore rules that apply to it and the paths they
//! cover now, whether the caller may break glass, and any active break-glass.
//! Everything is read with the library the webhook decides with.

use std::process::ExitCode;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::api::{Api, Identity};
use super::{Output, PluginError, PolicySource, print_structured, split_target};
use crate::drift::breakglass::{EXPIRES, REASON};
use crate::drift::inputs::{Input, Inputs, MODE_ANNOTATION};
use crate::drift::ownership::{self, Manager};
use crate::policy::argocd::{Application, DiffMode};
use crate::policy::flux::FluxKind;
use crate::policy::ignore::{IgnoreRule, Target};
use crate::policy::impersonation::{self, AppProject};
use crate::policy::jq::JqInput;
use crate::policy::{Mode, Policy};

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
    let object = match api.try_get(&resource.path(&api.namespace, name)).await? {
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

    // Who manages it.
    let child_of = ownership::controller_owner(&inputs);
    let manager = ownership::detect(&inputs);
    let opted_out = manager
        .as_ref()
        .and_then(|m| ownership::opted_out(&inputs, m));
    let mut managed_by = Value::Null;
    // Rules of the managing tool: owned here, borrowed by `rules` below.
    let mut tool_rules: Vec<(String, crate::policy::ignore::RuleSet)> = Vec::new();
    let mut flux_rules = Vec::new();
    let target = Target {
        group: &resource.group,
        kind: &resource.kind,
        name,
        namespace,
    };
    match &manager {
        Some(Manager::ArgoCd {
            application,
            application_namespace,
        }) => {
            let app_ns = application_namespace
                .as_deref()
                .unwrap_or(&args.argocd_namespace);
            let path = format!(
                "/apis/argoproj.io/v1alpha1/namespaces/{app_ns}/applications/{application}"
            );
            let mut entry = json!({"tool": "Argo CD", "kind": "Application",
                                   "namespace": app_ns, "name": application});
            let mut found = None;
            match api.try_get(&path).await? {
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
            let cm = format!(
                "/api/v1/namespaces/{}/configmaps/argocd-cm",
                args.argocd_namespace
            );
            let mut impersonation = false;
            match api.try_get(&cm).await? {
                Ok(cm) => {
                    if let Some(data) = cm["data"].as_object() {
                        let (set, errors) = crate::sources::argocd_overrides(data);
                        notes.extend(errors.iter().map(|e| format!("argocd-cm: {e}")));
                        tool_rules.push((
                            format!("ConfigMap {}/argocd-cm", args.argocd_namespace),
                            set,
                        ));
                        impersonation = impersonation::enabled(data);
                    }
                }
                Err(r) if r.code == 404 => {}
                Err(r) => notes.push(format!("cannot read argocd-cm: {}", r.message)),
            }
            if let Some(app) = found {
                if impersonation {
                    entry["serviceAccount"] =
                        json!(sync_account(api, &app, &args.argocd_namespace, &mut notes).await?);
                }
                tool_rules.push((format!("Application {app_ns}/{application}"), app.rules));
            }
            managed_by = entry;
        }
        Some(
            m @ (Manager::FluxKustomization { namespace, name }
            | Manager::FluxHelmRelease { namespace, name }),
        ) => {
            let (kind, path) = match m {
                Manager::FluxKustomization { .. } => (
                    FluxKind::Kustomization,
                    format!(
                        "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/{namespace}/kustomizations/{name}"
                    ),
                ),
                _ => (
                    FluxKind::HelmRelease,
                    format!(
                        "/apis/helm.toolkit.fluxcd.io/v2/namespaces/{namespace}/helmreleases/{name}"
                    ),
                ),
            };
            let mut entry = json!({"tool": "Flux", "kind": kind.as_str(),
                                   "namespace": namespace, "name": name});
            match api.try_get(&path).await? {
                Ok(value) => match crate::sources::flux_from_value(kind, &value) {
                    Ok(src) => {
                        entry["source"] = json!(src.source);
                        entry["serviceAccount"] = json!(src.service_account);
                        flux_rules = src.rules;
                    }
                    Err(e) => notes.push(format!("{} {namespace}/{name}: {e}", kind.as_str())),
                },
                Err(r) => notes.push(format!(
                    "cannot read {} {namespace}/{name}: {}",
                    kind.as_str(),
                    r.message
                )),
            }
            managed_by = entry;
        }
        None => {}
    }

    // The mode and why.
    let mut mode = policy.mode;
    let mut mode_why = format!("the policy's default mode ({})", loaded.origin);
    if let Some((patterns, m)) = policy.namespace_entry(namespace) {
        mode = m;
        mode_why = format!(
            "the policy's namespaces entry [{}] matching {namespace}",
            patterns.join(", ")
        );
    }
    if let Some(value) = inputs.text(Input::Mode) {
        match Mode::parse(value) {
            Some(m) => {
                mode = m;
                mode_why = format!("the object's annotation {MODE_ANNOTATION}={value}");
            }
            None => notes.push(format!(
                "{MODE_ANNOTATION}={value} is ignored: not enforce, warn or audit"
            )),
        }
    }

    // Ignore rules that apply, and what they cover now.
    let version = resource.version.as_str();
    let mut rules: Vec<(&str, &IgnoreRule)> = policy
        .rules
        .matching(&target)
        .into_iter()
        .map(|r| (loaded.origin.as_str(), r))
        .collect();
    for (origin, set) in &tool_rules {
        rules.extend(
            set.matching(&target)
                .into_iter()
                .map(|r| (origin.as_str(), r)),
        );
    }
    for r in &flux_rules {
        if r.matches(&target, version, &object) {
            rules.push(("Flux", &r.rule));
        }
    }
    // Argo CD v3.6's per-resource rules, from the object itself.
    let annotated = match &manager {
        Some(Manager::ArgoCd { .. }) => crate::drift::annotated::rule(&object),
        _ => crate::drift::annotated::Annotated::Absent,
    };
    let annotation = crate::drift::inputs::ARGO_IGNORE_DIFFERENCES;
    match &annotated {
        crate::drift::annotated::Annotated::Rule(rule, unresolved) => {
            rules.push((annotation, rule));
            if !unresolved.is_empty() {
                notes.push(format!(
                    "{annotation}: these pointers resolve nothing, for Argo CD as for driftguard: {unresolved:?}"
                ));
            }
        }
        crate::drift::annotated::Annotated::Skipped(why) => notes.push(format!(
            "{annotation}: ignores nothing; Argo CD skips it too: {why}"
        )),
        crate::drift::annotated::Annotated::Absent => {}
    }
    let rule_reports: Vec<Value> = rules
        .iter()
        .map(|(origin, rule)| rule_report(origin, rule, &object))
        .collect();

    // Break-glass.
    let bg = break_glass_report(policy, &me, &inputs);

    let scope = if let Some(owner) = &child_of {
        format!("not judged: a child of {owner} (its owner is)")
    } else if let Some(why) = &opted_out {
        format!("not judged: {why}")
    } else if manager.is_none() {
        "not judged: not GitOps-managed (no tracking metadata)".to_owned()
    } else {
        "judged: manual changes outside the ignore rules are drift".to_owned()
    };
    let report = json!({
        "object": {"apiVersion": resource.api_version(), "kind": resource.kind,
                   "namespace": namespace, "name": name},
        "policy": loaded.origin,
        "managedBy": managed_by,
        "scope": scope,
        "mode": {"mode": mode.as_str(), "why": mode_why},
        "ignoreRules": rule_reports,
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

/// The account Argo CD syncs `app` as (sync impersonation on), read from its
/// AppProject; a project that cannot be read is a note.
async fn sync_account(
    api: &Api,
    app: &Application,
    argocd_namespace: &str,
    notes: &mut Vec<String>,
) -> Result<Option<String>, PluginError> {
    let path = format!(
        "/apis/argoproj.io/v1alpha1/namespaces/{argocd_namespace}/appprojects/{}",
        app.project
    );
    let project = match api.try_get(&path).await? {
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
