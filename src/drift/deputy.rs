//! Scalers as deputies: a HorizontalPodAutoscaler or a KEDA ScaledObject
//! makes a trusted controller (the HPA controller, KEDA's operator through
//! the HPA it creates) write the target's `/spec/replicas` through its
//! `scale` subresource. A person who may not `kubectl scale` a managed
//! object could otherwise create a scaler with `minReplicas = maxReplicas`
//! and have the controller do it. So a CREATE, or an UPDATE that changes what
//! the scaler does, of a scaler that is not itself GitOps-managed is judged
//! as the scale write it causes on its target, by the same code as a real
//! `kubectl scale` (`super::pipeline`).
//!
//! Why the writes left out are safe: a DELETE stops the scaler; a `status`
//! write cannot move it (the HPA status strategy keeps the stored spec, a
//! custom resource's keeps everything but status); a scaler in Git is judged
//! as itself, and a CREATE claiming tracking metadata is refused as usual.

use serde_json::{Value, json};

use super::pipeline::judge_change;
use super::steps::verdict_for;
use super::{Change, Context, DecideError, Decision, Finding, Operation, Request, Verdict};
use crate::policy::Policy;

/// The object a scaler scales: its group, kind and name, in the scaler's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScaleTarget {
    pub group: String,
    pub kind: String,
    pub name: String,
}

impl ScaleTarget {
    fn describe(&self, namespace: &str) -> String {
        format!("{} {namespace}/{}", self.kind, self.name)
    }
}

/// The scaler kinds, by `group/resource` as the apiserver names them (the
/// registration's condition matches the same pairs).
pub const SCALERS: &[(&str, &str)] = &[
    ("autoscaling", "horizontalpodautoscalers"),
    ("keda.sh", "scaledobjects"),
];

/// The target of this write when it is a CREATE of a scaler, or an UPDATE
/// that changes what it does; `None` for anything else.
///
/// "What it does" is its `spec` (target, bounds, metrics, behaviour) and its
/// annotations: KEDA reads `autoscaling.keda.sh/paused-replicas` (scale to N
/// and hold), and autoscaling/v1 keeps v2 fields in annotations. Any change
/// there counts, so no field of a scaler can be changed to reach the target
/// without being judged; labels and status never move a target.
pub(crate) fn scaler_target(req: &Request) -> Option<ScaleTarget> {
    if !req.sub_resource.is_empty() || !SCALERS.contains(&(req.resource_group, req.resource)) {
        return None;
    }
    let new = req.object?;
    match req.operation {
        Operation::Create => {}
        Operation::Update => {
            let old = req.old_object?;
            let annotations = |o: &Value| o.pointer("/metadata/annotations").cloned();
            if old.get("spec") == new.get("spec") && annotations(old) == annotations(new) {
                return None;
            }
        }
        _ => return None,
    }
    let reference = new.pointer("/spec/scaleTargetRef")?;
    let text = |key: &str| reference.get(key).and_then(Value::as_str);
    let name = text("name").filter(|n| !n.is_empty())?;
    let (api_version, kind) = if req.resource_group == "keda.sh" {
        // KEDA's defaults for an omitted apiVersion and kind.
        (
            text("apiVersion")
                .filter(|v| !v.is_empty())
                .unwrap_or("apps/v1"),
            text("kind")
                .filter(|k| !k.is_empty())
                .unwrap_or("Deployment"),
        )
    } else {
        (text("apiVersion").unwrap_or_default(), text("kind")?)
    };
    // The HPA controller maps group and kind only (ParseGroupVersion: no
    // slash is the core group); the version plays no part.
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    Some(ScaleTarget {
        group: group.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
    })
}

/// `d` is the scaler's own decision. When the scaler is not GitOps-managed
/// (`d` is out of scope) and this write drives it, the decision becomes that
/// of the scale write it causes: `ctx.parent` is the target as the server
/// read it (`None`: unreadable, `unknownScaleParent` decides).
pub(super) fn judge(
    policy: &Policy,
    req: &Request,
    ctx: &Context,
    d: Decision,
) -> Result<Decision, DecideError> {
    if !matches!(d.finding, Finding::OutOfScope(_)) {
        return Ok(d);
    }
    let Some(target) = scaler_target(req) else {
        return Ok(d);
    };
    // A parent that is not this target is not trusted for it: read as unknown.
    let parent = ctx
        .parent
        .filter(|p| is_the_target(p, &target, req.namespace));
    let current = parent
        .and_then(|p| p.pointer("/spec/replicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let proposed = proposed_replicas(req, current);
    let scale =
        |r: i64| json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": r}});
    let (old, new) = (scale(current), scale(proposed));
    // Unknown plural (no discovery here): the kind names it in notes.
    let plural = builtin_plural(&target.group, &target.kind).unwrap_or(&target.kind);
    let write = Request {
        operation: Operation::Update,
        group: "autoscaling",
        // The target's kind: the rules of an unreadable target match on it.
        kind: &target.kind,
        resource_group: &target.group,
        resource: plural,
        sub_resource: "scale",
        name: &target.name,
        namespace: req.namespace,
        username: req.username,
        groups: req.groups,
        object: Some(&new),
        old_object: Some(&old),
        dry_run: req.dry_run,
    };
    let scoped = Context { parent, ..*ctx };
    let change = Change::Scale {
        old: &old,
        new: &new,
    };
    let mut judged = judge_change(policy, &write, &scoped, change, d.clone())?;
    if matches!(judged.finding, Finding::OutOfScope(_)) {
        return Ok(d);
    }
    name_the_target(policy, &target.describe(req.namespace), &mut judged);
    Ok(judged)
}

/// The scale write's decision `judged`, told as the scaler's: drift is the
/// scaler's on the target named `target`.
fn name_the_target(policy: &Policy, target: &str, judged: &mut Decision) {
    if judged.finding != Finding::Drift {
        judged
            .notes
            .push(format!("judged as the scale write it causes on {target}"));
        return;
    }
    // Also a `Warning:` line: kubectl 1.37's `autoscale` falls back to
    // autoscaling/v1 after a denial and shows only its own error.
    let manager = judged
        .manager
        .as_ref()
        .map_or_else(|| "its GitOps tool".to_owned(), ToString::to_string);
    judged.finding = Finding::ScalerTarget(target.to_owned());
    judged.verdict = verdict_for(&judged.finding, judged.mode, policy.unknown_scale_parent);
    let denied = if judged.verdict == Verdict::Deny {
        "denied: "
    } else {
        ""
    };
    judged.notes.push(format!(
        "{denied}/spec/replicas drifts: would scale {target}, managed by {manager}"
    ));
}

/// The target as read names the same kind, group, name and namespace.
fn is_the_target(parent: &Value, target: &ScaleTarget, namespace: &str) -> bool {
    let text = |p: &str| {
        parent
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let group = text("/apiVersion").rsplit_once('/').map_or("", |(g, _)| g);
    text("/kind") == target.kind
        && group == target.group
        && text("/metadata/name") == target.name
        && text("/metadata/namespace") == namespace
}

/// A replica count the scaler may set that differs from `current`: its
/// ceiling, else its floor, else one more. Any value would do for the
/// decision (the scaler takes `/spec/replicas` over, holding it against Git
/// even at today's count); a real bound keeps value-matching rules honest.
fn proposed_replicas(req: &Request, current: i64) -> i64 {
    let spec = req.object.and_then(|o| o.get("spec"));
    let int = |key: &str| spec.and_then(|s| s.get(key)).and_then(Value::as_i64);
    let (min, max) = if req.resource_group == "keda.sh" {
        (
            int("minReplicaCount").unwrap_or(0),
            int("maxReplicaCount").unwrap_or(100),
        )
    } else {
        (
            int("minReplicas").unwrap_or(1),
            int("maxReplicas").unwrap_or(1),
        )
    };
    [max, min]
        .into_iter()
        .find(|&r| r != current)
        .unwrap_or(current.saturating_add(1))
}

/// The resource of the scalable built-in kinds, without discovery.
pub(crate) fn builtin_plural(group: &str, kind: &str) -> Option<&'static str> {
    Some(match (group, kind) {
        ("apps", "Deployment") => "deployments",
        ("apps", "StatefulSet") => "statefulsets",
        ("apps", "ReplicaSet") => "replicasets",
        ("", "ReplicationController") => "replicationcontrollers",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(
        resource: (&'a str, &'a str),
        op: Operation,
        old: Option<&'a Value>,
        new: Option<&'a Value>,
    ) -> Request<'a> {
        Request {
            operation: op,
            group: resource.0,
            kind: "HorizontalPodAutoscaler",
            resource_group: resource.0,
            resource: resource.1,
            sub_resource: "",
            name: "web",
            namespace: "production",
            username: "alice",
            groups: &[],
            object: new,
            old_object: old,
            dry_run: false,
        }
    }

    #[test]
    fn targets_are_read_as_the_controllers_read_them() {
        let hpa = json!({"spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}});
        let r = request(SCALERS[0], Operation::Create, None, Some(&hpa));
        assert_eq!(
            scaler_target(&r),
            Some(ScaleTarget {
                group: "apps".into(),
                kind: "Deployment".into(),
                name: "web".into()
            })
        );
        // KEDA defaults apiVersion and kind.
        let so = json!({"spec": {"scaleTargetRef": {"name": "web"}}});
        let r = request(SCALERS[1], Operation::Create, None, Some(&so));
        assert_eq!(scaler_target(&r).unwrap().kind, "Deployment");
        assert_eq!(scaler_target(&r).unwrap().group, "apps");
        // Only the labels changed: nothing the scaler does.
        let labelled = json!({"metadata": {"labels": {"a": "b"}}, "spec": hpa["spec"]});
        let r = request(SCALERS[0], Operation::Update, Some(&hpa), Some(&labelled));
        assert_eq!(scaler_target(&r), None);
        // An annotation did (KEDA's paused-replicas).
        let paused = json!({"metadata": {"annotations": {"autoscaling.keda.sh/paused-replicas": "5"}}, "spec": so["spec"]});
        let r = request(SCALERS[1], Operation::Update, Some(&so), Some(&paused));
        assert!(scaler_target(&r).is_some());
        // Another kind, or a status write: not a scaler write.
        let mut r = request(("apps", "deployments"), Operation::Create, None, Some(&hpa));
        assert_eq!(scaler_target(&r), None);
        r = request(SCALERS[0], Operation::Update, Some(&hpa), Some(&labelled));
        r.sub_resource = "status";
        assert_eq!(scaler_target(&r), None);
    }

    #[test]
    fn the_proposed_count_always_differs() {
        let hpa = json!({"spec": {"minReplicas": 3, "maxReplicas": 3}});
        let r = request(SCALERS[0], Operation::Create, None, Some(&hpa));
        assert_eq!(proposed_replicas(&r, 1), 3);
        assert_eq!(proposed_replicas(&r, 3), 4);
        assert_eq!(proposed_replicas(&r, i64::MAX), 3);
    }
}
