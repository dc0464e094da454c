//! `driftguard check`: one review judged offline, by the server's code path,
//! from an AdmissionReview or from the object's old and new manifests.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde_json::Value;

use super::{Failure, read_input, read_text};
use crate::Endpoint;
use crate::args::{DecisionTimeout, PolicySource};
use crate::decider::{Decider, DeciderError};

#[derive(Debug, clap::Args)]
pub(super) struct CheckArgs {
    #[command(flatten)]
    source: PolicySource,
    /// The parent object (JSON or YAML) of a `…/scale` review, or the target of a
    /// scaler (HPA, ScaledObject) review, as the server would fetch it.
    #[arg(long)]
    parent: Option<PathBuf>,
    /// Answer as the mutating webhook (/mutate) instead of the validating one.
    #[arg(long)]
    mutate: bool,
    /// Judge as of this RFC 3339 time instead of now (break-glass expiry, drift annotation).
    #[arg(long, hide = true)]
    now: Option<Timestamp>,
    #[command(flatten)]
    deadline: DecisionTimeout,
    /// json: the AdmissionReview response, as the webhook sends it; yaml: the same as YAML;
    /// text: allowed or denied, with the message and warnings.
    #[arg(short = 'o', long, value_enum, default_value_t = CheckOutput::Json)]
    output: CheckOutput,
    #[command(flatten)]
    built: BuiltReview,
    /// AdmissionReview JSON file, or `-` for standard input. Or give --old and/or --new.
    #[arg(required_unless_present_any = ["old", "new"], conflicts_with_all = ["old", "new"])]
    review: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum CheckOutput {
    Json,
    Yaml,
    Text,
}

/// A review built from manifests: UPDATE with both, CREATE with --new only,
/// DELETE with --old only.
#[derive(Debug, clap::Args)]
struct BuiltReview {
    /// The object as stored (JSON or YAML): what `kubectl get -o yaml` prints.
    #[arg(long)]
    old: Option<PathBuf>,
    /// The object as written.
    #[arg(long)]
    new: Option<PathBuf>,
    /// Who writes, as the apiserver names them (default: kind's and kubeadm's admin).
    #[arg(long, default_value = "kubernetes-admin", conflicts_with = "review")]
    user: String,
    /// A group of the writer (repeatable; default: system:masters and system:authenticated).
    #[arg(long = "group", conflicts_with = "review")]
    groups: Vec<String>,
    /// As `kubectl --dry-run=server` sends it: answered with what the real write would get.
    #[arg(long, conflicts_with = "review")]
    dry_run: bool,
}

impl BuiltReview {
    fn given(&self) -> bool {
        self.old.is_some() || self.new.is_some()
    }

    /// The AdmissionReview the apiserver would send for this write; the
    /// resource's plural is guessed from the kind as kube-rs does.
    fn to_review(&self) -> Result<Vec<u8>, Failure> {
        fn read(path: Option<&Path>) -> Result<Option<(DynamicObject, &Path)>, Failure> {
            let Some(path) = path else { return Ok(None) };
            let object = serde_json::from_value(read_yaml(path)?).map_err(|e| {
                Failure(format!("{}: not a Kubernetes object: {e}", path.display()))
            })?;
            Ok(Some((object, path)))
        }
        let old = read(self.old.as_deref())?;
        let new = read(self.new.as_deref())?;
        let (object, path) = new.as_ref().or(old.as_ref()).expect("clap requires one");
        let path = path.to_path_buf();
        let types = object
            .types
            .clone()
            .ok_or_else(|| Failure(format!("{}: no apiVersion and kind", path.display())))?;
        if let (Some((o, _)), Some((n, _))) = (&old, &new)
            && (o.types != n.types || o.metadata.name != n.metadata.name)
        {
            return Err(Failure(format!(
                "{}: not the same object as {} (apiVersion, kind and name must match)",
                path.display(),
                old.as_ref().map_or(Path::new(""), |(_, p)| p).display()
            )));
        }
        let groups = if self.groups.is_empty() {
            vec!["system:masters".into(), "system:authenticated".into()]
        } else {
            self.groups.clone()
        };
        let who = UserInfo {
            username: Some(self.user.clone()),
            groups: Some(groups),
            ..UserInfo::default()
        };
        let old = old.map(|(o, _)| o);
        let new = new.map(|(o, _)| o);
        let review = review_of(&types, old, new, who, self.dry_run)
            .map_err(|e| Failure(format!("{}: {e}", path.display())))?;
        serde_json::to_vec(&review).map_err(|e| Failure(format!("cannot build the review: {e}")))
    }
}

/// The AdmissionReview the apiserver sends for a write of `new` over `old`
/// (UPDATE with both, CREATE or DELETE with one); the resource's plural is
/// guessed from the kind as kube-rs does.
pub(super) fn review_of(
    types: &TypeMeta,
    old: Option<DynamicObject>,
    new: Option<DynamicObject>,
    who: UserInfo,
    dry_run: bool,
) -> Result<AdmissionReview<DynamicObject>, String> {
    let gvk = GroupVersionKind::try_from(types).map_err(|e| e.to_string())?;
    let resource = ApiResource::from_gvk(&gvk);
    let object = new.as_ref().or(old.as_ref()).ok_or("no object")?;
    let request = AdmissionRequest {
        types: TypeMeta::default(),
        uid: "driftguard-check".into(),
        resource: GroupVersionResource::gvr(&gvk.group, &gvk.version, &resource.plural),
        kind: gvk,
        sub_resource: None,
        request_kind: None,
        request_resource: None,
        request_sub_resource: None,
        name: object.metadata.name.clone().unwrap_or_default(),
        namespace: object.metadata.namespace.clone(),
        operation: match (&old, &new) {
            (Some(_), Some(_)) => Operation::Update,
            (None, _) => Operation::Create,
            (_, None) => Operation::Delete,
        },
        user_info: who,
        object: new,
        old_object: old,
        dry_run,
        options: None,
    };
    Ok(AdmissionReview {
        types: TypeMeta {
            api_version: "admission.k8s.io/v1".into(),
            kind: "AdmissionReview".into(),
        },
        request: Some(request),
        response: None,
    })
}

pub(super) fn check(args: CheckArgs) -> Result<ExitCode, Failure> {
    let policy = args.source.load()?;
    let (body, named) = match &args.review {
        Some(path) => {
            let body = read_input(path)?;
            not_a_bare_object(path, &body)?;
            (body, path.display().to_string())
        }
        None if args.built.given() => (args.built.to_review()?, "the built review".into()),
        None => return Err(Failure("give a review file, or --old and/or --new".into())),
    };
    let parent = args.parent.as_deref().map(read_yaml).transpose()?;
    let endpoint = if args.mutate {
        Endpoint::Mutate
    } else {
        Endpoint::Validate
    };
    let now = args.now.unwrap_or_else(Timestamp::now);
    // The server's deadline, on a thread of its own: a runaway jq rule cannot
    // be interrupted, but `check` returns (and the process exits) regardless.
    let deadline = args.deadline.decision_timeout;
    let decider = Decider::new(1, 1)
        .map_err(|e| Failure(format!("cannot start the decision thread: {e}")))?;
    let judged = decider
        .run_blocking(deadline, move |deadline: &crate::deadline::Deadline| {
            // As the server does: the body is dropped once parsed.
            let req = match crate::request::parse(&body) {
                Ok(req) => req,
                Err(e) => return Ok(Err(e)),
            };
            drop(body);
            let judged = crate::judge_request(
                &policy,
                &req,
                endpoint,
                parent.as_ref(),
                None,
                now,
                deadline,
            );
            Ok(crate::drift::DecideError::split(judged)?.map_err(crate::ReviewError::from))
        })
        .map_err(|e| match e {
            DeciderError::TimedOut(_) => Failure(format!(
                "{named}: {e} (--decision-timeout); a jq ignore rule is probably too slow"
            )),
            _ => Failure(format!("{named}: {e}")),
        })?
        .map_err(|e| Failure(format!("{named}: {e}")))?;
    print(&judged, args.output)
}

/// stdout is the response (json, yaml) for pipes, or the verdict (text); a
/// person reads the verdict on stderr otherwise, and the exit status.
fn print(judged: &crate::Judged, output: CheckOutput) -> Result<ExitCode, Failure> {
    let answer = judged.response.response.as_ref();
    let mut verdict = String::new();
    for warning in answer.iter().flat_map(|r| r.warnings.iter().flatten()) {
        verdict.push_str(&format!("Warning: {warning}\n"));
    }
    let denied = answer.filter(|r| !r.allowed);
    match denied {
        Some(r) => {
            let why = r.result.message.strip_prefix("driftguard: ");
            verdict.push_str(&format!(
                "driftguard: denied: {}\n",
                why.unwrap_or(&r.result.message)
            ));
        }
        None => verdict.push_str(&format!(
            "driftguard: allowed ({})\n",
            judged.decision.verdict.as_str()
        )),
    }
    let out = match output {
        CheckOutput::Json => {
            let mut json = judged.to_json();
            json.push(b'\n');
            json
        }
        CheckOutput::Yaml => {
            let value: Value = serde_json::from_slice(&judged.to_json())
                .map_err(|e| Failure(format!("cannot write YAML: {e}")))?;
            serde_saphyr::to_string(&value)
                .map_err(|e| Failure(format!("cannot write YAML: {e}")))?
                .into_bytes()
        }
        CheckOutput::Text => std::mem::take(&mut verdict).into_bytes(),
    };
    std::io::Write::write_all(&mut std::io::stdout().lock(), &out)
        .map_err(|e| Failure(format!("stdout: cannot write: {e}")))?;
    eprint!("{verdict}");
    Ok(if denied.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A JSON or YAML file, whole.
fn read_yaml(path: &Path) -> Result<Value, Failure> {
    serde_saphyr::from_str(&read_text(path)?).map_err(|e| {
        Failure(format!(
            "{}: not a JSON or YAML object: {e}",
            path.display()
        ))
    })
}

/// A manifest given where a review is expected: say what `check` reads
/// instead of the parser's complaint about `apiVersion`.
fn not_a_bare_object(path: &Path, body: &[u8]) -> Result<(), Failure> {
    #[derive(serde::Deserialize)]
    struct Head {
        kind: Option<String>,
    }
    let head = serde_json::from_slice::<Head>(body).ok().or_else(|| {
        let text = std::str::from_utf8(body).ok()?;
        serde_saphyr::from_str::<Head>(text).ok()
    });
    match head {
        Some(Head { kind: Some(kind) }) if kind != "AdmissionReview" => Err(Failure(format!(
            "{}: a {kind}, not an AdmissionReview. `check` judges what the apiserver sends \
             a webhook (examples: tests/data/*.json), or builds it from manifests: \
             driftguard check --old live.yaml --new {}. To see what a change would get in a \
             cluster: kubectl driftguard preview",
            path.display(),
            path.display()
        ))),
        _ => Ok(()),
    }
}
