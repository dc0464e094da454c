//! A decision becomes an `AdmissionResponse`: status message, warnings, audit
//! annotations, and on the mutating path a JSON patch recording the drift.

use jiff::Timestamp;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::response::StatusSummary;
use serde_json::{Value, json};

use crate::drift::breakglass_state::{EXPIRES, REASON};
use crate::drift::normalize::DRIFT_ANNOTATION;
use crate::drift::{Decision, Finding, Operation, Request, Verdict};
use crate::request::RawObject;
use crate::text::{clip, ellipsize, quote};

pub(crate) mod drifted;

#[cfg(test)]
mod bounded;

/// Which webhook is answering. The validating webhook decides; the mutating one
/// never denies and only records drift in warn mode, so `kubectl` shows each
/// denial and warning once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /validate`: decides, and denies in enforce mode.
    Validate,
    /// `POST /mutate`: never denies; records drift on the object.
    Mutate,
}

impl Endpoint {
    /// Its name in metrics and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Validate => "validate",
            Endpoint::Mutate => "mutate",
        }
    }
}

/// Paths named in a denial's message before "and N more" (all of them, up
/// to a bound, are in its `details.causes`: [`drifted`]).
const MAX_PATHS_SHOWN: usize = 5;
const MAX_WARNING_CHARS: usize = 120;
/// All warnings together stay under this many bytes.
const MAX_WARNING_BYTES: usize = 4000;
/// The last warning when the others would pass [`MAX_WARNING_BYTES`].
const OMITTED_WARNINGS: &str = "driftguard: more warnings omitted";
/// What a decision taken without some watched sources says
/// ([`crate::drift::Sources::unread`]); the audit record names them.
const SOURCES_UNREAD: &str =
    "Argo CD / Flux sources not read: judged by the object's own claims and the policy alone";
/// How a drifted path of `""` is named in text.
const WHOLE_OBJECT: &str = "(whole object)";

/// The response to `req` for decision `d`, as `endpoint` answers it.
pub(crate) fn respond(
    req: &AdmissionRequest<RawObject>,
    view: &Request,
    d: &Decision,
    endpoint: Endpoint,
    now: Timestamp,
) -> AdmissionResponse {
    let mut resp = AdmissionResponse::from(req);
    resp.audit_annotations = audit_annotations(d).into_iter().collect();
    if endpoint == Endpoint::Mutate {
        // A scaler's drift is its target's ([`crate::drift::deputy`]): no record on the scaler.
        let on_this_object =
            !matches!(d.finding, Finding::ScalerTarget(_) | Finding::UnknownParent);
        if (d.verdict == Verdict::Warn || d.finding == Finding::UnownedChange)
            && on_this_object
            && let Some(patch) = drift_patch(view, d, now)
        {
            resp = resp.with_patch(patch).expect("a JSON patch serializes");
        }
        return resp;
    }
    let warnings = warnings(view, d);
    if !warnings.is_empty() {
        resp.warnings = Some(warnings);
    }
    if d.verdict == Verdict::Deny {
        resp = resp.deny(denial(view, d));
        resp.result.code = 403;
        resp.result.reason = "Forbidden".into();
        resp.result.status = Some(StatusSummary::Failure);
        resp.result.details = Some(drifted::details(
            view.resource_group,
            view.resource,
            view.name,
            &d.drifted_paths,
        ));
    }
    resp
}

/// The reply as sent on the wire. kube keeps `auditAnnotations` in a
/// `HashMap`; going through `Value` sorts every map, so the same review always
/// yields the same bytes (`check` and the server agree byte for byte).
pub(crate) fn to_bytes(review: &AdmissionReview<DynamicObject>) -> Vec<u8> {
    let value = serde_json::to_value(review).expect("a review serializes");
    serde_json::to_vec(&value).expect("a value serializes")
}

fn describe_object(view: &Request) -> String {
    let kind = if view.sub_resource == "scale" {
        format!("{}/scale", view.resource)
    } else {
        view.kind.to_owned()
    };
    match (view.namespace, view.name) {
        ("", name) => format!("{} {}", quote(&kind), quote(name)),
        (ns, name) => format!("{} {}/{}", quote(&kind), quote(ns), quote(name)),
    }
}

fn show_path(p: &str) -> &str {
    if p.is_empty() { WHOLE_OBJECT } else { p }
}

fn path_list(paths: &[String]) -> String {
    let shown: Vec<String> = paths
        .iter()
        .take(MAX_PATHS_SHOWN)
        .map(|p| quote(show_path(p)).to_string())
        .collect();
    let mut out = shown.join(", ");
    if paths.len() > MAX_PATHS_SHOWN {
        out.push_str(&format!(" (and {} more)", paths.len() - MAX_PATHS_SHOWN));
    }
    out
}

fn manager_text(d: &Decision) -> String {
    let Some(m) = &d.manager else {
        return "its GitOps tool".into();
    };
    match &d.source {
        Some(src) => format!("{} ({})", quote(&m.to_string()), quote(&src.to_string())),
        None => quote(&m.to_string()).to_string(),
    }
}

/// One message for the person at the terminal: what, who manages it, the way forward.
fn denial(view: &Request, d: &Decision) -> String {
    let obj = describe_object(view);
    let manager = manager_text(d);
    let tool = d.manager.as_ref().map_or("the GitOps tool", |m| m.tool());
    let paths = path_list(&d.drifted_paths);
    let what = match &d.finding {
        Finding::DeleteByHand => {
            format!("{obj} is managed by {manager}; only {tool} may delete (prune) it.")
        }
        Finding::DeleteDestination => format!(
            "{obj} is the destination namespace of {manager}, whose objects live there; only {tool} may delete (prune) it."
        ),
        Finding::DeleteCascade(lost) => {
            format!(
                "deleting {obj} deletes {} with it, and those deletes are never judged.",
                quote(lost)
            )
        }
        Finding::CreateWithTracking => format!(
            "{obj} carries {tool} tracking metadata of {manager}; only {tool} may create it."
        ),
        Finding::BreakGlassUnauthorized => format!(
            "{} is not authorized to break glass on {obj} (managed by {manager}); drifted: {paths}.",
            quote(view.username)
        ),
        Finding::BreakGlassInvalid(why) => {
            format!("break-glass on {obj} rejected: {why}; drifted: {paths}.")
        }
        Finding::UnknownParent => format!(
            "{obj}: the parent could not be read to check GitOps ownership; drifted: {paths}."
        ),
        Finding::ScalerTarget(target) => {
            let target = quote(target);
            let glass = match d.break_glass_max {
                Some(max) => format!(
                    " In an emergency, if you are authorized, break glass on {target} itself \
                     ({REASON}=<reason>, {EXPIRES}=<RFC 3339 time, at most {max:#} ahead>)."
                ),
                None => String::new(),
            };
            return format!(
                "driftguard: {obj} would scale {target}, managed by {manager}: its controller would write \
                 /spec/replicas there, which drifts from Git. Put the {kind} in Git next to it, or have \
                 /spec/replicas ignored for it ({tool}'s ignore rules, as Argo CD's docs recommend with an HPA, \
                 or driftguard's policy).{glass}",
                kind = view.kind
            );
        }
        Finding::CreatePlanned(by) => {
            let by = quote(by);
            return format!(
                "driftguard: {obj} is listed by {by}, which creates it from Git; created by hand first, \
                 {tool} would adopt whatever it carries. Let {tool} create it (sync), or change Git."
            );
        }
        Finding::NamespaceExemption => {
            return format!(
                "driftguard: labelling {obj} driftguard.io/ignore=true would exempt every object in it from driftguard; \
                 only the GitOps controllers and trusted identities may. Put the label in Git, or exclude the \
                 namespace at registration (driftguard register --exclude-namespace, or the chart's \
                 webhook.excludeNamespaces)."
            );
        }
        _ if !d.inputs_changed.is_empty() => format!(
            "{obj} is managed by {manager}; this {} changes what driftguard or {tool} reads to judge \
             or apply later writes, at {}, which is refused in every mode; drifted: {paths}.",
            view.operation.as_str(),
            path_list(&d.inputs_changed)
        ),
        _ => format!(
            "{obj} is managed by {manager}; this {} drifts from Git at {paths}.",
            view.operation.as_str()
        ),
    };
    let fix = match d.finding {
        Finding::DeleteCascade(_) => format!(
            "Remove them from Git and let {tool} prune them first (or delete the Application or \
             Kustomization that manages them, whose finalizer or prune deletes them)"
        ),
        _ => format!("Change it in Git and let {tool} sync it"),
    };
    let glass = match d.break_glass_max {
        Some(max) if d.finding != Finding::BreakGlassUnauthorized => format!(
            "; in an emergency, if you are authorized, annotate it {REASON}=<reason> and {EXPIRES}=<RFC 3339 time, at most {max:#} ahead>"
        ),
        Some(_) => String::new(),
        None => "; break-glass is disabled in driftguard's policy".into(),
    };
    let flux = [reapplied_text(d), cleaned_up_text(d), last_applied_text(d)]
        .into_iter()
        .flatten()
        .map(|(a, b)| format!(" {a}: {b}."))
        .collect::<String>();
    let unread = if d.sources_unread.is_empty() {
        String::new()
    } else {
        format!(" ({SOURCES_UNREAD}.)")
    };
    format!("driftguard: {what}{flux} {fix}{glass}.{unread}")
}

/// Why `kubectl replace` (or a client-side `kubectl apply`) of an Argo CD
/// object is refused even where every changed field is ignored, in two
/// halves: both rewrite the last-applied record when it exists (kubectl's
/// `UpdateApplyAnnotation`; `kubectl edit` does only with `--save-config`),
/// and Argo CD's legacy diff merges three ways against it, so the
/// Application goes OutOfSync and self-heal syncs (tests/e2e_argocd_modes.rs).
fn last_applied_text(d: &Decision) -> Option<(String, String)> {
    let pointer = format!(
        "/metadata/annotations/{}",
        crate::policy::path::escape(crate::drift::owned::LAST_APPLIED)
    );
    if !matches!(d.manager, Some(crate::drift::Manager::ArgoCd { .. }))
        || !d.inputs_changed.contains(&pointer)
    {
        return None;
    }
    Some((
        "kubectl replace and apply rewrite the last-applied record that Argo CD's three-way diff reads"
            .to_owned(),
        "Argo CD would see drift and self-heal sync it; for ignored fields use kubectl edit, patch, scale or set"
            .to_owned(),
    ))
}

/// Why an ignore rule did not allow a change Flux re-applies, in two halves
/// (each fits a warning line for one path).
fn reapplied_text(d: &Decision) -> Option<(String, String)> {
    let (it, field) = match d.reapplied.len() {
        0 => return None,
        1 => ("it", "the field"),
        _ => ("them", "the fields"),
    };
    Some((
        format!(
            "Flux applies {} from Git (kustomize-controller owns {it}) and would revert this change",
            path_list(&d.reapplied)
        ),
        format!(
            "an ignore rule does not stop Flux; remove {field} from Git to let {it} change by hand"
        ),
    ))
}

/// Why an ignore rule did not allow a change written with kubectl on a Flux
/// object, in two halves.
fn cleaned_up_text(d: &Decision) -> Option<(String, String)> {
    if d.cleaned_up.is_empty() {
        return None;
    }
    Some((
        format!(
            "Flux removes what kubectl wrote ({}) on its next reconcile",
            path_list(&d.cleaned_up)
        ),
        "an ignore rule does not stop Flux; change it in Git, or with a field manager of its own"
            .to_owned(),
    ))
}

fn warnings(view: &Request, d: &Decision) -> Vec<String> {
    let mut out = Vec::new();
    let obj = describe_object(view);
    match d.verdict {
        Verdict::Warn => {
            out.push(format!(
                "driftguard: drift on {obj}, managed by {}",
                manager_text(d)
            ));
            out.extend(drifted::warnings(&d.drifted_paths));
            out.push(format!(
                "driftguard: {} will revert this; change it in Git",
                d.manager.as_ref().map_or("GitOps", |m| m.tool())
            ));
            for (a, b) in [reapplied_text(d), cleaned_up_text(d), last_applied_text(d)]
                .into_iter()
                .flatten()
            {
                out.push(format!("driftguard: {a}"));
                out.push(format!("driftguard: {b}"));
            }
        }
        Verdict::Allow if d.finding == Finding::UnownedChange => out.push(format!(
            "driftguard: {} does not own {}: allowed and recorded on the object",
            d.manager.as_ref().map_or("the GitOps tool", |m| m.tool()),
            path_list(&d.drifted_paths)
        )),
        Verdict::Allow if d.finding == Finding::BreakGlassEnded => out.push(format!(
            "driftguard: break-glass on {obj} ended; {} restores it from Git",
            d.manager.as_ref().map_or("the GitOps tool", |m| m.tool())
        )),
        Verdict::Allow if d.finding == Finding::BreakGlass => {
            if let Some(bg) = &d.break_glass {
                out.push(format!(
                    "driftguard: BREAK-GLASS by {} on {obj} until {}: {}",
                    quote(&bg.user),
                    quote(&bg.expires),
                    quote(&bg.reason)
                ));
                out.extend(drifted::warnings(&d.drifted_paths));
                out.push(if d.drifted_paths.is_empty() {
                    "driftguard: break-glass armed; this use is audited".to_owned()
                } else {
                    "driftguard: drift under break-glass; this use is audited".to_owned()
                });
            }
        }
        _ => {}
    }
    if d.dry_run
        && (d.finding != Finding::NoDrift || d.verdict != Verdict::Allow)
        && !matches!(
            d.finding,
            Finding::OutOfScope(_) | Finding::Controller | Finding::Trusted
        )
    {
        let would = match d.verdict {
            Verdict::Deny => "be denied",
            Verdict::Warn => "be allowed with drift warnings",
            Verdict::Audit => "be allowed and recorded as drift (audit mode)",
            Verdict::Allow => "be allowed",
        };
        out.push(format!(
            "driftguard: dry run: the real write would {would} ({})",
            d.finding.code()
        ));
        if matches!(d.verdict, Verdict::Audit | Verdict::Deny) {
            out.extend(drifted::warnings(&d.drifted_paths));
        }
    }
    out.extend(d.rule_failures.iter().map(|f| {
        format!(
            "driftguard: ignore rule failed, ignored nothing: {}",
            f.describe()
        )
    }));
    out.extend(d.notes.iter().map(|n| format!("driftguard: {n}")));
    // Said where sources could have mattered: not on every unmanaged write.
    if !d.sources_unread.is_empty() && (d.manager.is_some() || d.verdict != Verdict::Allow) {
        out.push(format!("driftguard: {SOURCES_UNREAD}"));
    }
    limit(out)
}

/// No newlines, each at most 120 characters, all together under 4 KiB.
fn limit(warnings: Vec<String>) -> Vec<String> {
    let mut total = 0;
    let mut out = Vec::new();
    for w in warnings {
        let mut w: String = w.replace(['\n', '\r'], " ");
        if w.chars().count() > MAX_WARNING_CHARS {
            w = w.chars().take(MAX_WARNING_CHARS - 3).collect::<String>() + "...";
        }
        if total + w.len() > MAX_WARNING_BYTES {
            out.push(OMITTED_WARNINGS.into());
            break;
        }
        total += w.len();
        out.push(w);
    }
    out
}

/// Whether `limit` may have cut `warning` (one of exactly the longest length
/// ending in `...`: a whole one that happens to look so counts as cut).
fn is_cut(warning: &str) -> bool {
    warning.ends_with("...") && warning.chars().count() == MAX_WARNING_CHARS
}

/// Written into the apiserver's audit log next to the request (the apiserver
/// prefixes each key with the webhook's name).
pub(crate) fn audit_annotations(d: &Decision) -> Vec<(String, String)> {
    let mut out = vec![
        ("verdict".to_owned(), d.verdict.as_str().to_owned()),
        ("reason".to_owned(), d.finding.code().to_owned()),
        ("mode".to_owned(), d.mode.as_str().to_owned()),
    ];
    if let Some(m) = &d.manager {
        out.push(("manager".into(), quote(&m.to_string()).to_string()));
    }
    if !d.drifted_paths.is_empty() {
        let paths: Vec<&str> = d.drifted_paths.iter().map(|p| clip(show_path(p))).collect();
        out.push(("drifted-paths".into(), ellipsize(&paths.join(","), 1024)));
    }
    if let Some(bg) = &d.break_glass {
        out.push(("break-glass-user".into(), quote(&bg.user).to_string()));
        out.push(("break-glass-reason".into(), quote(&bg.reason).to_string()));
        out.push(("break-glass-expires".into(), quote(&bg.expires).to_string()));
    }
    if !d.rule_failures.is_empty() {
        let text: Vec<String> = d.rule_failures.iter().map(|f| f.describe()).collect();
        out.push(("rule-failures".into(), ellipsize(&text.join("; "), 1024)));
    }
    if !d.sources_unread.is_empty() {
        out.push(("sources-unread".into(), d.sources_unread.join(",")));
    }
    out
}

/// Adds `driftguard.io/drift` (user, time, paths). Applying it twice gives the
/// same object: `add` replaces an existing member.
fn drift_patch(view: &Request, d: &Decision, now: Timestamp) -> Option<Patch> {
    if view.operation == Operation::Delete || !view.sub_resource.is_empty() {
        return None;
    }
    let object = view.object?;
    let record =
        crate::drift::record::record(view.username, &now.to_string(), &d.drifted_paths).to_string();
    let has_annotations = object
        .pointer("/metadata/annotations")
        .is_some_and(Value::is_object);
    let op = if has_annotations {
        AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations", DRIFT_ANNOTATION]),
            value: Value::String(record),
        }
    } else {
        AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: json!({ DRIFT_ANNOTATION: record }),
        }
    };
    Some(Patch(vec![PatchOperation::Add(op)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_bounded() {
        let many: Vec<String> = (0..200)
            .map(|i| format!("{i}\n{}", "x".repeat(300)))
            .collect();
        let out = limit(many);
        assert!(
            out.iter()
                .all(|w| w.chars().count() <= MAX_WARNING_CHARS && !w.contains('\n'))
        );
        assert!(out.iter().map(String::len).sum::<usize>() < 4096);
        assert_eq!(out.last().unwrap(), OMITTED_WARNINGS);
    }
}
