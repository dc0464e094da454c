//! `kubectl driftguard preview KIND/NAME (-p PATCH | -f FILE | --set-image
//! C=IMG | --replicas N)`: the change as a server-side dry run (`dryRun=All`) as the
//! user, so the real apiserver and the real webhooks answer.

use std::process::ExitCode;

use kube::Resource as _;
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use serde::Serialize;
use serde_json::{Value, json};

use super::api::Api;
use super::out::{Color, Out, outln};
use super::{Output, PluginError, print_structured, split_target};
use crate::response::drifted;

/// The field manager of preview's dry runs.
const FIELD_MANAGER: &str = "kubectl-driftguard-preview";

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("change").required(true).args(["patch", "set_image", "replicas", "filename"])))]
pub struct Args {
    /// The object: KIND/NAME.
    target: String,
    /// A patch (JSON or YAML), of --type.
    #[arg(short = 'p', long)]
    patch: Option<String>,
    /// The patch type of -p: merge (JSON merge patch), json (JSON patch) or strategic.
    #[arg(long = "type", default_value = "merge", value_parser = ["merge", "json", "strategic"])]
    patch_type: String,
    /// CONTAINER=IMAGE: the image of one container, found by name.
    #[arg(long)]
    set_image: Option<String>,
    /// spec.replicas.
    #[arg(long)]
    replicas: Option<u32>,
    /// The whole object (JSON or YAML, `-` for stdin), as `kubectl replace -f` would write it.
    #[arg(short = 'f', long)]
    filename: Option<std::path::PathBuf>,
    /// Output format: text, json or yaml.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// Where container lists live in the workload kinds.
const CONTAINER_LISTS: [&str; 6] = [
    "/spec/template/spec/containers",
    "/spec/template/spec/initContainers",
    "/spec/jobTemplate/spec/template/spec/containers",
    "/spec/jobTemplate/spec/template/spec/initContainers",
    "/spec/containers",
    "/spec/initContainers",
];

/// What `preview -o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    object: &'a str,
    namespace: &'a str,
    allowed: bool,
    /// `allowed` or `denied`.
    verdict: &'static str,
    /// driftguard's dry-run warning: what the real write would get.
    real_write_would: Option<String>,
    /// The denial's message, as the apiserver sent it.
    message: Option<String>,
    warnings: Vec<String>,
    /// RFC 6901 pointers, whole (`""`: the whole object), read from the
    /// denial's `details.causes` or, for an allowed write, from one
    /// `driftguard: drifted PATH` warning each ([`crate::response::drifted`]).
    drifted_paths: Vec<String>,
    /// False when the webhook named some paths only cut (a warning too
    /// long) or counted them without naming them (its bounds).
    drifted_paths_complete: bool,
    next: String,
}

pub async fn run(api: &Api, args: Args) -> Result<ExitCode, PluginError> {
    let (kind, name) = split_target(&args.target)?;
    let resource = api.resolve(kind).await?;
    let ns = resource.namespaced.then_some(api.namespace.as_str());
    let request = kube::core::Request::new(DynamicObject::url_path(&resource.api_resource(), ns));
    let post = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let patch = PatchParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let built = if let Some(file) = &args.filename {
        let object = replacement(file, &resource.kind, name)?;
        request.replace(name, &post, object.to_string().into_bytes())
    } else if let Some(text) = &args.patch {
        let body: Value = serde_saphyr::from_str(text)
            .map_err(|e| PluginError::Usage(format!("-p: not JSON or YAML: {e}")))?;
        match args.patch_type.as_str() {
            "json" => {
                let ops: json_patch::Patch = serde_json::from_value(body)
                    .map_err(|e| PluginError::Usage(format!("-p: not a JSON patch: {e}")))?;
                request.patch(name, &patch, &Patch::<()>::Json(ops))
            }
            "strategic" => request.patch(name, &patch, &Patch::Strategic(body)),
            _ => request.patch(name, &patch, &Patch::Merge(body)),
        }
    } else if let Some(n) = args.replicas {
        request.patch(
            name,
            &patch,
            &Patch::Merge(json!({"spec": {"replicas": n}})),
        )
    } else if let Some(spec) = &args.set_image {
        let (container, image) = spec
            .split_once('=')
            .filter(|(c, i)| !c.is_empty() && !i.is_empty())
            .ok_or_else(|| {
                PluginError::Usage(format!("--set-image {spec}: expected CONTAINER=IMAGE"))
            })?;
        let object = match api.get_target(&resource, name).await? {
            Ok(o) => o,
            Err(r) => return Err(PluginError::from_refusal(r)),
        };
        let ops = image_patch(&object, container, image)?;
        request.patch(name, &patch, &Patch::<()>::Json(ops))
    } else {
        return Err(PluginError::Usage(
            "give -p PATCH, -f FILE, --set-image C=IMG or --replicas N".into(),
        ));
    };
    let built = built.map_err(|e| PluginError::Usage(format!("{}: {e}", args.target)))?;
    // Sent raw: the `Warning:` headers and the webhook's Status are the answer.
    let (allowed, message, warnings, read) = match api.send(built).await? {
        Ok(reply) => {
            let read = drifted::from_warnings(&reply.warnings);
            (true, None, reply.warnings, read)
        }
        Err(refusal) if refusal.by_webhook() => {
            let read = drifted::from_details(refusal.details.as_ref());
            (false, Some(refusal.message), refusal.warnings, read)
        }
        Err(refusal) => return Err(PluginError::from_refusal(refusal)),
    };
    let verdict = warnings
        .iter()
        .find_map(|w| w.strip_prefix("driftguard: dry run: the real write would "))
        .map(str::to_owned);
    let report = Report {
        object: &args.target,
        namespace: &api.namespace,
        allowed,
        verdict: if allowed { "allowed" } else { "denied" },
        real_write_would: verdict,
        message,
        warnings,
        next: next_step(allowed, &read.paths, &args.target, &api.namespace),
        drifted_paths_complete: read.missing == 0,
        drifted_paths: read.paths,
    };
    let out = &mut Out::stdout();
    if args.output != Output::Text {
        print_structured(out, &report, args.output)?;
    } else {
        print_text(out, &report);
    }
    Ok(if allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_text(out: &mut Out, report: &Report) {
    match &report.message {
        None => out
            .text("verdict: ")
            .paint("allowed", Color::Green)
            .line(" (the real write would be allowed)"),
        Some(m) => {
            out.text("verdict: ")
                .paint("denied", Color::Red)
                .line(" (the real write would be denied)");
            outln!(out, "message: {m}");
        }
    }
    if let Some(v) = &report.real_write_would {
        outln!(out, "driftguard: the real write would {v}");
    }
    for w in &report.warnings {
        outln!(out, "Warning: {w}");
    }
    if !report.drifted_paths.is_empty() {
        outln!(out, "drifted paths:");
        for p in &report.drifted_paths {
            let p = if p.is_empty() { "(whole object)" } else { p };
            outln!(out, "  {p}");
        }
    }
    if !report.drifted_paths_complete {
        outln!(
            out,
            "  (more drifted paths than driftguard's answer names whole)"
        );
    }
    outln!(out, "next: {}", report.next);
}

/// The object of `-f FILE`, which must be KIND/NAME.
fn replacement(file: &std::path::Path, kind: &str, name: &str) -> Result<Value, PluginError> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(file)
    }
    .map_err(|e| PluginError::Usage(format!("{}: cannot read: {e}", file.display())))?;
    let object: Value = serde_saphyr::from_str(&text).map_err(|e| {
        PluginError::Usage(format!(
            "{}: not a JSON or YAML object: {e}",
            file.display()
        ))
    })?;
    let (k, n) = (
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default(),
    );
    if k != kind || n != name {
        return Err(PluginError::Usage(format!(
            "{}: holds {k}/{n}, not {kind}/{name}",
            file.display()
        )));
    }
    Ok(object)
}

/// A JSON patch replacing the image of `container`, guarded by a `test` of
/// the current value so that a concurrent change fails instead of landing.
fn image_patch(
    object: &Value,
    container: &str,
    image: &str,
) -> Result<json_patch::Patch, PluginError> {
    for list in CONTAINER_LISTS {
        let Some(items) = object.pointer(list).and_then(Value::as_array) else {
            continue;
        };
        if let Some(i) = items
            .iter()
            .position(|c| c.get("name").and_then(Value::as_str) == Some(container))
        {
            let at = format!("{list}/{i}/image");
            let current = items[i].get("image").cloned().unwrap_or(Value::Null);
            let ops = json!([
                {"op": "test", "path": at, "value": current},
                {"op": "replace", "path": at, "value": image},
            ]);
            return serde_json::from_value(ops)
                .map_err(|e| PluginError::Usage(format!("--set-image: {e}")));
        }
    }
    Err(PluginError::Usage(format!(
        "no container named {container} in the object"
    )))
}

fn next_step(allowed: bool, paths: &[String], target: &str, namespace: &str) -> String {
    match (allowed, paths.is_empty()) {
        (true, true) => "make the change; driftguard has nothing against it".into(),
        (true, false) => {
            "the change would be allowed but is drift: the GitOps tool may revert it; put it in Git too".into()
        }
        (false, _) => format!(
            "change it in Git and let the GitOps tool sync it; in an emergency, if you may break glass: kubectl driftguard break-glass {target} -n {namespace} --reason TEXT --for DURATION, then repeat the change"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_keeps_its_json_field_names() {
        let report = Report {
            object: "cm/settings",
            namespace: "production",
            allowed: false,
            verdict: "denied",
            real_write_would: None,
            message: Some("denied".into()),
            warnings: vec!["w".into()],
            drifted_paths: vec!["/data/A".into(), String::new()],
            drifted_paths_complete: true,
            next: "n".into(),
        };
        let json = serde_json::to_value(&report).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        let mut want = [
            "object",
            "namespace",
            "allowed",
            "verdict",
            "realWriteWould",
            "message",
            "warnings",
            "driftedPaths",
            "driftedPathsComplete",
            "next",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        assert_eq!(json["realWriteWould"], Value::Null);
        assert_eq!(json["driftedPaths"], json!(["/data/A", ""]));
    }

    #[test]
    fn set_image_finds_the_container_by_name() {
        let d = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "x:1"}, {"name": "b", "image": "y:1"}]}}}});
        let p = serde_json::to_value(image_patch(&d, "b", "y:2").unwrap()).unwrap();
        assert_eq!(p[1]["path"], "/spec/template/spec/containers/1/image");
        assert_eq!(p[0]["value"], "y:1");
        assert!(image_patch(&d, "c", "z").is_err());
    }
}
