//! `kubectl driftguard explain KIND/NAME`: who manages the object, the mode
//! in force and why, the ignore rules that apply to it and the paths they
//! cover now, whether the caller may break glass, and any active break-glass.
//! Everything is read with the library the webhook decides with, and scope,
//! mode and rules are worked out by the webhook's own steps. `manager` reads who manages
//! the object, `report` works out the rest, `render` prints it.

mod manager;
mod render;
mod report;

use std::process::ExitCode;

use super::api::{Api, ArgoCdArgs, FluxArgs};
use super::out::Out;
use super::{Output, PluginError, PolicySource, print_structured, split_target};
use crate::drift::inputs::Inputs;
use crate::drift::ownership;
use manager::{Tool, Tools, read_manager};
pub(crate) use report::break_glass_report;
use report::{ObjectRef, Report, Written, judged};

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
        crate::plugin::installation::choose(api, hub.as_ref(), argocd_args, hub_ns, it, policy)
            .await?;
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
    let out = &mut Out::stdout();
    if args.output != Output::Text {
        print_structured(out, &report, args.output)?;
    } else {
        render::print_text(out, &report);
    }
    Ok(ExitCode::SUCCESS)
}
