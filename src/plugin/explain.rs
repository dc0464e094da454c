//! `kubectl driftguard explain KIND/NAME`: who manages the object, the mode
//! in force and why, the ignore rules that apply to it and the paths they
//! cover now, whether the caller may break glass, and any active break-glass.
//! Everything is read with the library the webhook decides with, and scope,
//! mode and rules are worked out by the webhook's own steps.

use std::process::ExitCode;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;
use serde_json::Value;

use super::api::{Api, ArgoCdArgs, FluxArgs, Identity, Resource, answer};
use super::{Output, PluginError, PolicySource, print_structured, split_target};
use crate::drift::annotated::Annotated;
use crate::drift::breakglass_state::{EXPIRES, REASON};
use crate::drift::inputs::{ARGO_IGNORE_DIFFERENCES, Input, Inputs, MODE_ANNOTATION};
use crate::drift::ownership::{self, Manager};
use crate::drift::pipeline;
use crate::drift::steps::{ModeChoice, ModeFrom, Owner, RuleFrom};
use crate::drift::{
    ArgoCdSources, Context, DEFAULT_ARGOCD_NAMESPACE, Operation, OutOfScope, Request, Sources,
};
use crate::policy::Policy;
use crate::policy::argocd::{Application, DiffMode};
use crate::policy::flux::FluxKind;
use crate::policy::ignore::IgnoreRule;
use crate::policy::impersonation::{self, AppProject};
use crate::policy::jq::JqInput;
use crate::text::printable;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The object: KIND/NAME.
    target: String,
    /// Where Argo CD Applications live when the tracking id names none (and
    /// argocd-cm and the AppProjects).
    #[arg(long, default_value = "argocd")]
    argocd_namespace: String,
    #[command(flatten)]
    argocd: ArgoCdArgs,
    /// Where the Kustomizations and HelmReleases are (a hub).
    #[command(flatten)]
    flux: FluxArgs,
    /// Output format: text, json or yaml.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// What `explain -o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    object: ObjectRef,
    /// Where the policy was read (`ConfigMap NS/NAME` or the embedded default).
    policy: String,
    /// The GitOps object that manages it; null when none is known.
    managed_by: Option<ManagedBy>,
    scope: String,
    /// Null only when the decision steps could not run.
    mode: Option<ModeReport>,
    ignore_rules: Vec<RuleReport>,
    break_glass: BreakGlassReport,
    notes: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    api_version: String,
    kind: String,
    /// Empty for a cluster-scoped object.
    namespace: String,
    name: String,
}

/// The managing Argo CD Application or Flux object. A field that is absent
/// was not read; `Some(None)` (null) was read and is unset.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct ManagedBy {
    tool: &'static str,
    kind: &'static str,
    namespace: String,
    name: String,
    #[serde(rename = "repoURL", skip_serializing_if = "Option::is_none")]
    repo_url: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    application_set: Option<String>,
    /// Argo CD's diff: `three-way` or `server-side`.
    #[serde(skip_serializing_if = "Option::is_none")]
    diff: Option<&'static str>,
    /// Flux's source (`GitRepository NS/NAME, path P`).
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<Option<String>>,
    /// The account the tool writes the object as, which driftguard trusts.
    #[serde(skip_serializing_if = "Option::is_none")]
    service_account: Option<Option<String>>,
}

#[derive(Debug, Serialize)]
struct ModeReport {
    mode: &'static str,
    why: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RuleReport {
    from: String,
    rule: String,
    json_pointers: Vec<String>,
    jq_path_expressions: Vec<String>,
    managed_fields_managers: Vec<String>,
    /// The paths it covers in the object now.
    covers_now: Vec<String>,
    errors: Vec<String>,
}

/// Whether the caller may break glass, and the object's own break-glass.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BreakGlassReport {
    you: Identity,
    you_may_break_glass: bool,
    allowed_users: Vec<String>,
    allowed_groups: Vec<String>,
    max_duration: String,
    annotations: [&'static str; 2],
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
    // In a spoke, the Application, argocd-cm and the AppProjects are in the
    // hub; with this cluster's own Argo CD too, in the one whose installation
    // id the object carries.
    let hub = args.argocd.connect(api).await?;
    let (argocd_args, hub_ns) = (&args.argocd, args.argocd_namespace.as_str());
    let it = Some(&object);
    let chosen =
        super::installation::choose(api, hub.as_ref(), argocd_args, hub_ns, it, policy).await?;
    notes.extend(chosen.unsure.clone());
    let argocd = Tool {
        api: chosen.api,
        hub: chosen.hub.is_some(),
    };
    // And the Kustomizations and HelmReleases, in Flux's hub.
    let flux_hub = args.flux.connect(api).await?;
    let flux = Tool {
        api: flux_hub.as_ref().unwrap_or(api),
        hub: flux_hub.is_some(),
    };
    let tools = Tools {
        argocd,
        flux,
        argocd_namespace: chosen.namespace,
        flux_default_account: args.flux.flux_default_service_account.as_deref(),
    };
    let (managed_by, sources) = read_manager(tools, manager.as_ref(), &mut notes).await?;
    let at = Written {
        resource: &resource,
        namespace,
        name,
        object: &object,
    };
    let judged = judged(policy, &loaded.origin, &sources, &at);
    notes.extend(judged.notes);
    let report = Report {
        object: ObjectRef {
            api_version: resource.api_version(),
            kind: resource.kind.clone(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        },
        policy: loaded.origin.clone(),
        managed_by,
        scope: judged.scope,
        mode: judged.mode,
        ignore_rules: judged.rules,
        break_glass: break_glass_report(policy, &me, &inputs),
        notes,
    };
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
    Tools {
        argocd,
        flux,
        argocd_namespace,
        flux_default_account,
    }: Tools<'_>,
    manager: Option<&Manager>,
    notes: &mut Vec<String>,
) -> Result<(Option<ManagedBy>, Sources), PluginError> {
    let mut sources = Sources::default();
    let entry = match manager {
        Some(Manager::ArgoCd {
            application,
            application_namespace,
        }) => {
            let app_ns = application_namespace.as_deref().unwrap_or(argocd_namespace);
            let at = (app_ns, application.as_str());
            let mut installation = ArgoCdSources {
                namespace: argocd_namespace.to_owned(),
                ..ArgoCdSources::default()
            };
            let entry =
                read_application(argocd, argocd_namespace, at, &mut installation, notes).await?;
            sources.argocd.push(installation);
            Some(entry)
        }
        Some(m @ (Manager::FluxKustomization { .. } | Manager::FluxHelmRelease { .. })) => {
            read_flux((flux, flux_default_account), m, &mut sources, notes).await?
        }
        None => None,
    };
    Ok((entry, sources))
}

/// Where a tool's objects are read: this cluster, or a hub
/// (`--argocd-kubeconfig`, `--flux-kubeconfig`).
#[derive(Clone, Copy)]
struct Tool<'a> {
    api: &'a Api,
    hub: bool,
}

/// Where Argo CD's and Flux's objects are read.
#[derive(Clone, Copy)]
struct Tools<'a> {
    argocd: Tool<'a>,
    flux: Tool<'a>,
    /// Argo CD's namespace there (argocd-cm, the AppProjects, and the
    /// Applications when a tracking id names none).
    argocd_namespace: &'a str,
    /// Flux's `--default-service-account`, for a source that names none.
    flux_default_account: Option<&'a str>,
}

/// The Application, argocd-cm's rules and the account Argo CD syncs as.
async fn read_application(
    Tool { api, hub }: Tool<'_>,
    argocd_namespace: &str,
    (app_ns, application): (&str, &str),
    sources: &mut ArgoCdSources,
    notes: &mut Vec<String>,
) -> Result<ManagedBy, PluginError> {
    let ar = crate::breakglass::application::application_resource();
    let mut entry = ManagedBy {
        tool: "Argo CD",
        kind: "Application",
        namespace: app_ns.to_owned(),
        name: application.to_owned(),
        ..ManagedBy::default()
    };
    let mut found = None;
    match api.get_object(&ar, Some(app_ns), application).await? {
        Ok(app) => match crate::policy::argocd::from_value(&app) {
            Ok(app) => {
                entry.repo_url = Some(app.repo_url.clone());
                entry.path = Some(app.path.clone());
                entry.application_set = app.application_set.clone();
                entry.diff = Some(match app.diff {
                    DiffMode::Legacy => "three-way",
                    DiffMode::ServerSide => "server-side",
                });
                found = Some(app);
            }
            Err(e) => notes.push(format!("Application {app_ns}/{application}: {e}")),
        },
        Err(r) => {
            // No Applications here: in a fleet, Argo CD and its Applications are in a hub.
            let served = hub
                || !matches!(
                    api.resolve("applications.argoproj.io").await,
                    Err(PluginError::Usage(_))
                );
            let hint = if !served {
                " (if Argo CD runs in a hub that deploys here, give --argocd-kubeconfig or --argocd-context to read it there)"
            } else {
                ""
            };
            notes.push(format!(
                "cannot read Application {app_ns}/{application}: {}{hint}",
                r.message
            ));
        }
    }
    let mut impersonation = false;
    let got = api
        .namespaced::<ConfigMap>(argocd_namespace)
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
                sources.overrides = Arc::new(set);
                sources.installation_id = data
                    .get(ownership::ARGOCD_CM_INSTALLATION_ID)
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned);
                impersonation = impersonation::enabled(&data);
            }
        }
        Err(r) if r.code == 404 => {}
        Err(r) => notes.push(format!("cannot read argocd-cm: {}", r.message)),
    }
    if let Some(app) = found {
        if impersonation {
            entry.service_account = Some(sync_account(api, &app, argocd_namespace, notes).await?);
        }
        sources.applications.push(Arc::new(app));
    }
    Ok(entry)
}

/// The Kustomization or HelmRelease: its source, account and ignore rules.
async fn read_flux(
    (Tool { api, hub }, default_account): (Tool<'_>, Option<&str>),
    manager: &Manager,
    sources: &mut Sources,
    notes: &mut Vec<String>,
) -> Result<Option<ManagedBy>, PluginError> {
    let (kind, namespace, name) = match manager {
        Manager::FluxKustomization { namespace, name } => {
            (FluxKind::Kustomization, namespace, name)
        }
        Manager::FluxHelmRelease { namespace, name } => (FluxKind::HelmRelease, namespace, name),
        Manager::ArgoCd { .. } => return Ok(None),
    };
    let mut entry = ManagedBy {
        tool: "Flux",
        kind: kind.as_str(),
        namespace: namespace.clone(),
        name: name.clone(),
        ..ManagedBy::default()
    };
    match api
        .get_object(&super::reach::flux_resource(kind), Some(namespace), name)
        .await?
    {
        Ok(value) => match crate::sources::flux_from_value(kind, &value) {
            Ok(src) => {
                let src = src.with_default_account(default_account);
                entry.source = Some(src.source.clone());
                entry.service_account = Some(src.service_account.clone());
                sources.flux.push(Arc::new(src));
            }
            Err(e) => notes.push(format!("{} {namespace}/{name}: {e}", kind.as_str())),
        },
        Err(r) => {
            // None here: in a fleet, Flux and its Kustomizations are in a hub.
            let resource = super::reach::flux_resource(kind);
            let served = hub
                || !matches!(
                    api.resolve(&format!("{}.{}", resource.plural, resource.group))
                        .await,
                    Err(PluginError::Usage(_))
                );
            notes.push(flux_unread(kind, namespace, name, &r.message, served));
        }
    }
    Ok(Some(entry))
}

/// The note for a Kustomization or HelmRelease that could not be read;
/// when this cluster does not serve the kind (`served` false), where to
/// read it instead.
fn flux_unread(kind: FluxKind, namespace: &str, name: &str, why: &str, served: bool) -> String {
    let hint = if served {
        ""
    } else {
        " (if Flux runs in a hub that applies here, give --flux-kubeconfig or --flux-context to read it there)"
    };
    format!(
        "cannot read {} {namespace}/{name}: {why}{hint}",
        kind.as_str()
    )
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
    mode: Option<ModeReport>,
    rules: Vec<RuleReport>,
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
        installation: Default::default(),
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

fn rule_report(origin: &str, rule: &IgnoreRule, object: &Value) -> RuleReport {
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

fn print_text(r: &Report) {
    let s = |text: &str| printable(text).into_owned();
    let o = &r.object;
    let ns = if o.namespace.is_empty() {
        String::new()
    } else {
        format!("{}/", s(&o.namespace))
    };
    println!("Object:      {} {ns}{}", s(&o.kind), s(&o.name));
    println!("Policy:      {}", s(&r.policy));
    match &r.managed_by {
        None => println!("Managed by:  nothing driftguard knows of"),
        Some(m) => {
            let mut line = format!("{} {} {}/{}", m.tool, m.kind, s(&m.namespace), s(&m.name));
            for (value, label) in [
                (m.application_set.as_deref(), "generated by ApplicationSet"),
                (m.repo_url.as_ref().and_then(Option::as_deref), "repo"),
                (m.path.as_ref().and_then(Option::as_deref), "path"),
                (m.source.as_ref().and_then(Option::as_deref), "source"),
                (m.diff, "diff"),
            ] {
                if let Some(value) = value {
                    line.push_str(&format!(", {label} {}", s(value)));
                }
            }
            println!("Managed by:  {line}");
            // The account the tool writes this object as, which driftguard trusts here.
            if let Some(Some(sa)) = &m.service_account {
                let how = if m.tool == "Argo CD" {
                    "Argo CD sync"
                } else {
                    "Flux reconcile"
                };
                println!(
                    "Identities:  allowed: {how} as {}, impersonated for {} {}/{}",
                    s(sa),
                    m.kind,
                    s(&m.namespace),
                    s(&m.name)
                );
            }
        }
    }
    println!("Scope:       {}", s(&r.scope));
    if let Some(mode) = &r.mode {
        println!("Mode:        {} (from {})", mode.mode, s(&mode.why));
    }
    if r.ignore_rules.is_empty() {
        println!("Ignore rules: none; every field is compared");
    } else {
        println!("Ignore rules:");
        for rule in &r.ignore_rules {
            let mut what: Vec<String> = Vec::new();
            for (key, values) in [
                ("jsonPointers", &rule.json_pointers),
                ("jqPathExpressions", &rule.jq_path_expressions),
                ("managedFieldsManagers", &rule.managed_fields_managers),
            ] {
                what.extend(values.iter().map(|v| format!("{key}: {}", s(v))));
            }
            println!(
                "  {} ({}): {}",
                s(&rule.rule),
                s(&rule.from),
                what.join("; ")
            );
            if rule.covers_now.is_empty() {
                println!("    covers now: nothing present in the object");
            } else {
                let covers: Vec<String> = rule.covers_now.iter().map(|p| s(p)).collect();
                println!("    covers now: {}", covers.join(", "));
            }
        }
    }
    let bg = &r.break_glass;
    let list = |items: &[String]| items.iter().map(|i| s(i)).collect::<Vec<_>>().join(", ");
    println!(
        "Break-glass: you are {} (groups: {}); you {} break glass (allowed users [{}], groups [{}], at most {})",
        s(&bg.you.username),
        list(&bg.you.groups),
        if bg.you_may_break_glass {
            "may"
        } else {
            "may not"
        },
        list(&bg.allowed_users),
        list(&bg.allowed_groups),
        s(&bg.max_duration),
    );
    match &bg.on_object {
        None => println!("             none on this object"),
        Some(on) => {
            println!(
                "             on this object: {} (reason {:?}, expires {})",
                on.state,
                s(on.reason.as_deref().unwrap_or_default()),
                s(on.expires.as_deref().unwrap_or_default())
            );
            if let Some(why) = &on.why {
                println!("             grants nothing: {}", s(why));
            }
        }
    }
    for n in &r.notes {
        println!("Note:        {}", s(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::{Finding, decide};
    use crate::policy::path::is_under;
    use serde_json::json;

    /// Under Flux's lockdown (`--flux-default-service-account`), a
    /// Kustomization naming no account is applied as the default one in its
    /// own namespace: explain shows that account, as the server trusts it.
    #[tokio::test]
    async fn a_kustomization_without_an_account_is_applied_as_the_default_one() {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            let kustomization = json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1",
                "kind": "Kustomization", "metadata": {"name": "apps", "namespace": "tenants"},
                "spec": {"sourceRef": {"kind": "GitRepository", "name": "fleet"}}});
            let reply = http::Response::builder()
                .status(200)
                .body(kube::client::Body::from(
                    kustomization.to_string().into_bytes(),
                ))
                .unwrap();
            Ok::<_, std::convert::Infallible>(reply)
        });
        let api = Api::with_client(kube::Client::new(service, "p"), "p");
        let flux = Tool {
            api: &api,
            hub: false,
        };
        let manager = Manager::FluxKustomization {
            namespace: "tenants".into(),
            name: "apps".into(),
        };
        let mut accounts = Vec::new();
        for default in [None, Some("flux-applier")] {
            let mut sources = Sources::default();
            let entry = read_flux((flux, default), &manager, &mut sources, &mut Vec::new())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                sources.flux[0].service_account,
                entry.service_account.flatten()
            );
            accounts.push(sources.flux[0].service_account.clone());
        }
        assert_eq!(
            accounts,
            [
                None,
                Some("system:serviceaccount:tenants:flux-applier".into())
            ]
        );
    }

    /// With this cluster's own Argo CD chosen beside a hub's
    /// (`--local-argocd-namespace gitops`), the Application of a tracking id
    /// naming no namespace, and argocd-cm, are read in that namespace.
    #[tokio::test]
    async fn argo_cd_is_read_in_the_chosen_installations_namespace() {
        use std::sync::Mutex;
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = log.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let path = request.uri().path().to_owned();
                seen.lock()
                    .unwrap()
                    .push(format!("{} {path}", request.method()));
                let status = json!({"kind": "Status", "code": 404, "message": "not found"});
                let reply = http::Response::builder()
                    .status(404)
                    .body(kube::client::Body::from(status.to_string().into_bytes()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(reply)
            }
        });
        let api = Api::with_client(kube::Client::new(service, "p"), "p");
        let here = Tool {
            api: &api,
            hub: false,
        };
        let tools = Tools {
            argocd: here,
            flux: here,
            argocd_namespace: "gitops",
            flux_default_account: None,
        };
        let manager = Manager::ArgoCd {
            application: "myapp".into(),
            application_namespace: None,
        };
        let mut notes = Vec::new();
        let (managed, sources) = read_manager(tools, Some(&manager), &mut notes)
            .await
            .unwrap();
        assert_eq!(managed.map(|m| m.namespace).as_deref(), Some("gitops"));
        let namespaces: Vec<&str> = sources
            .argocd
            .iter()
            .map(ArgoCdSources::namespace)
            .collect();
        assert_eq!(namespaces, ["gitops"]);
        let log = log.lock().unwrap();
        for read in [
            "GET /apis/argoproj.io/v1alpha1/namespaces/gitops/applications/myapp",
            "GET /api/v1/namespaces/gitops/configmaps/argocd-cm",
        ] {
            assert!(log.iter().any(|r| r == read), "{read} not in {log:?}");
        }
    }

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

    /// A Kustomization this cluster does not serve is in a hub: the note
    /// says how to read it there, and only then.
    #[test]
    fn an_unread_kustomization_points_to_the_hub_only_where_none_is_served() {
        let here = flux_unread(
            FluxKind::Kustomization,
            "flux-system",
            "apps",
            "NotFound",
            false,
        );
        assert_eq!(
            here,
            "cannot read Kustomization flux-system/apps: NotFound (if Flux runs in a hub that applies here, give --flux-kubeconfig or --flux-context to read it there)"
        );
        let served = flux_unread(FluxKind::HelmRelease, "web", "web", "forbidden", true);
        assert_eq!(served, "cannot read HelmRelease web/web: forbidden");
    }

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
                applications: vec![Arc::new(crate::policy::argocd::from_value(&app).unwrap())],
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
            installation: Default::default(),
        };
        decide(policy, &req, &ctx).unwrap()
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
