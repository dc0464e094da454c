//! Deletes that take managed objects with them: a Namespace (the namespace
//! controller then deletes everything in it, as a trusted identity) and a
//! CustomResourceDefinition (the apiserver drops every custom resource of
//! that kind with no admission call at all). Neither later delete can be
//! judged, so the decision is made here, at the Namespace or CRD delete.
//!
//! What is managed comes from the tools' own records in the source cache
//! ([`Sources::planned`]: Applications' `status.resources`, Kustomizations'
//! `status.inventory`) and the watched HelmReleases' release namespaces
//! (Flux lists a release's objects nowhere), read with no I/O. An object
//! whose Application, Kustomization or HelmRelease this driftguard does not
//! watch is not in them.

use serde_json::Value;

use super::steps::{apply_break_glass, detects, exemption, set_manager, verdict_for};
use super::{
    Context, Decision, Finding, Inputs, Installation, Manager, Operation, Request, Sources,
    breakglass_state,
};
use crate::policy::{Mode, Policy, planned};

/// At most this many lost objects are named in a denial; the rest are counted.
const NAMED: usize = 3;
/// What a delete takes with it while some watched source is unread.
const UNKNOWN: &str = "whatever the Argo CD / Flux sources not read yet list there";

/// What a Namespace or CRD delete would take with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cascade {
    /// Every lost object, as `group/Kind:namespace/name`, sorted.
    pub objects: Vec<String>,
    /// Who manages them, in the order of `objects`, each once.
    pub managers: Vec<Manager>,
    /// The namespaces they live in (empty: cluster-scoped), for the mode.
    pub namespaces: Vec<String>,
}

impl Cascade {
    /// `N managed objects (a, b, c and M more, managed by X and K others)`.
    pub fn describe(&self) -> String {
        if self.objects.is_empty() {
            return UNKNOWN.to_owned();
        }
        let named = self.objects.iter().take(NAMED).cloned().collect::<Vec<_>>();
        let more = self.objects.len() - named.len();
        let rest = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let count = match self.objects.len() {
            1 => "1 managed object".to_owned(),
            n => format!("{n} managed objects"),
        };
        let others = match self.managers.len() {
            0 | 1 => String::new(),
            2 => " and 1 other".to_owned(),
            n => format!(" and {} others", n - 1),
        };
        let by = self
            .managers
            .first()
            .map_or("?".to_owned(), Manager::to_string);
        format!(
            "{count} ({}{rest}, managed by {by}{others})",
            named.join(", ")
        )
    }
}

/// A Namespace or CRD DELETE that the rest of the decision found out of
/// scope (the Namespace or CRD is not itself managed): refused, like a
/// manual delete of what it takes with it, when that holds managed objects.
/// Judged as a delete of them: an identity exempt for every one of their
/// managers passes (controllers, trusted identities, a tool's sync account
/// for its own objects only), an authorized break-glass on the Namespace or
/// CRD passes, and the mode is
/// the policy's strictest for the namespaces they live in (never a
/// `driftguard.io/mode` annotation on the untracked Namespace or CRD: no
/// write to that is judged, so it is no input). While a watched source is
/// unread ([`Sources::unread`]), what it lists cannot be known: the
/// strictest reading takes every such delete to hold managed objects, and
/// only controllers, trusted identities and break-glass pass.
pub(super) fn guard(policy: &Policy, req: &Request, ctx: &Context, d: Decision) -> Decision {
    let Finding::OutOfScope(why) = &d.finding else {
        return d;
    };
    let why = why.clone();
    let (Some(cascade), Some(old)) = (cascade_of(policy, req, ctx), req.old_object) else {
        return d;
    };
    let mut d = d;
    d.notes.push(format!("itself out of scope: {why}"));
    d.mode = cascade
        .namespaces
        .iter()
        .map(|ns| policy.mode_for_namespace(ns))
        .max()
        .unwrap_or(Mode::Enforce);
    // Exempt only for every manager: a Flux tenant's account may delete its
    // own objects, never another tool's or tenant's along with them.
    let exempt_for = |m: &Manager| {
        exemption(
            policy,
            ctx.sources,
            Installation::Unresolved,
            Some(m),
            req.username,
            req.groups,
        )
    };
    let unexempt = cascade.managers.iter().find(|m| exempt_for(m).is_none());
    let exempt = match unexempt.or(cascade.managers.first()) {
        Some(manager) => {
            set_manager(policy, ctx, &mut d, manager.clone());
            unexempt.is_none().then(|| exempt_for(manager)).flatten()
        }
        // No manager known: only the identities exempt for every manager.
        None => exemption(
            policy,
            None,
            Installation::Unresolved,
            None,
            req.username,
            req.groups,
        ),
    };
    if let Some(finding) = exempt {
        d.finding = finding;
        return d;
    }
    let stored = Inputs::read(old, policy);
    let bg = breakglass_state::evaluate(&stored, None, req.username, req.groups, policy, ctx.now);
    d.finding = Finding::DeleteCascade(cascade.describe());
    d.drifted_paths = vec![String::new()];
    apply_break_glass(policy, &mut d, bg, (Some(&stored), &stored));
    d.verdict = verdict_for(&d.finding, d.mode, policy.unknown_scale_parent);
    d
}

/// What the delete takes with it: what the records list, or, while a watched
/// source is unread, an unknown cascade (no object or manager known).
fn cascade_of(policy: &Policy, req: &Request, ctx: &Context) -> Option<Cascade> {
    let unread = ctx.sources.is_some_and(|s| !s.unread.is_empty())
        && (policy.argocd.is_some() || policy.flux);
    match (ctx.sources.and_then(|s| lost(policy, req, s)), taken(req)) {
        (Some(cascade), _) => Some(cascade),
        (None, Some((namespace, _))) if unread => Some(Cascade {
            objects: Vec::new(),
            managers: Vec::new(),
            namespaces: namespace.into_iter().map(str::to_owned).collect(),
        }),
        _ => None,
    }
}

/// The namespace of a `group/Kind:namespace/name` key (empty: cluster-scoped).
fn namespace_of(key: &str) -> &str {
    key.split_once(':')
        .and_then(|(_, rest)| rest.split_once('/'))
        .map_or("", |(ns, _)| ns)
}

/// The `group/Kind`s whose objects a CRD DELETE removes: the stored CRD's
/// `spec.group` with `spec.names.kind` and with the kind the apiserver
/// serves (`status.acceptedNames.kind`), which differ while a renamed kind
/// is not yet accepted (a write to an untracked CRD is not judged).
fn crd_kinds(old: &Value) -> Option<Vec<String>> {
    let group = old.pointer("/spec/group")?.as_str()?;
    let kinds = ["/spec/names/kind", "/status/acceptedNames/kind"]
        .into_iter()
        .filter_map(|p| old.pointer(p)?.as_str())
        .map(|kind| format!("{group}/{kind}"))
        .collect::<std::collections::BTreeSet<_>>();
    (!kinds.is_empty()).then(|| kinds.into_iter().collect())
}

/// The managed objects a DELETE of a Namespace or a CRD would take with it,
/// per the records of the tools whose detector the policy enables (the
/// registration sends these deletes only then); `None` for any other
/// request, or when none would be. Read from the index by namespace or by
/// kind: what the delete takes, never every listing.
pub fn lost(policy: &Policy, req: &Request, sources: &Sources) -> Option<Cascade> {
    let (namespace, group_kinds) = taken(req)?;
    let matches = |gk: &str, ns: &str| {
        namespace.is_none_or(|n| n == ns)
            && group_kinds
                .as_ref()
                .is_none_or(|kinds| kinds.iter().any(|k| k == gk))
    };
    let listings: Box<dyn Iterator<Item = (&str, &Manager)>> = match (namespace, &group_kinds) {
        (Some(namespace), _) => Box::new(sources.listings_in(namespace)),
        (None, Some(kinds)) => Box::new(sources.listings_of(kinds)),
        (None, None) => return None,
    };
    let objects: Vec<(&str, &Manager)> = listings
        .filter(|(_, by)| detects(policy, by))
        .filter(|(key, _)| {
            // A refused source's whole-namespace listing takes any kind.
            let wide = planned::is_wide(key) && namespace.is_none_or(|n| sources.covers(key, n));
            wide || key
                .split_once(':')
                .is_some_and(|(gk, _)| matches(gk, namespace_of(key)))
        })
        .collect();
    let mut objects: Vec<(String, Manager)> = objects
        .into_iter()
        .map(|(k, m)| (k.to_owned(), m.clone()))
        .collect();
    if let Some(namespace) = namespace.filter(|_| policy.flux) {
        objects.extend(releases_in(sources, namespace));
    }
    if objects.is_empty() {
        return None;
    }
    objects.sort_by(|a, b| a.0.cmp(&b.0));
    let mut managers: Vec<Manager> = Vec::new();
    for (_, m) in &objects {
        if !managers.contains(m) {
            managers.push(m.clone());
        }
    }
    let mut namespaces: Vec<String> = match namespace {
        Some(ns) => vec![ns.to_owned()],
        None => objects
            .iter()
            .map(|(k, _)| namespace_of(k).to_owned())
            .collect(),
    };
    namespaces.sort();
    namespaces.dedup();
    Some(Cascade {
        objects: objects.into_iter().map(|(k, _)| k).collect(),
        managers,
        namespaces,
    })
}

/// For a DELETE of a Namespace or a CRD, the namespace, or the `group/Kind`s,
/// of the objects it takes with it.
fn taken<'a>(req: &Request<'a>) -> Option<(Option<&'a str>, Option<Vec<String>>)> {
    if req.operation != Operation::Delete || !req.sub_resource.is_empty() {
        return None;
    }
    match (req.resource_group, req.resource) {
        ("", "namespaces") => Some((Some(req.name), None)),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            Some((None, Some(crd_kinds(req.old_object?)?)))
        }
        _ => None,
    }
}

/// A HelmRelease's objects: Flux lists them nowhere, but they live in its
/// release namespace (what helm-controller installed there goes with it).
fn releases_in<'s>(
    sources: &'s Sources,
    namespace: &'s str,
) -> impl Iterator<Item = (String, Manager)> + 's {
    sources
        .flux
        .iter()
        .filter(move |f| f.release_namespace.as_deref() == Some(namespace))
        .map(|f| {
            let by = Manager::FluxHelmRelease {
                namespace: f.namespace.clone(),
                name: f.name.clone(),
            };
            (format!("the release of {by}"), by)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn flux(name: &str) -> Manager {
        Manager::FluxKustomization {
            namespace: "flux-system".into(),
            name: name.into(),
        }
    }

    fn sources(keys: &[&str]) -> Sources {
        Sources {
            planned: Arc::new(
                keys.iter()
                    .map(|k| ((*k).into(), flux("apps").into()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn delete<'a>(group: &'a str, resource: &'a str, name: &'a str, old: &'a Value) -> Request<'a> {
        Request {
            operation: Operation::Delete,
            group,
            kind: "",
            resource_group: group,
            resource,
            sub_resource: "",
            name,
            namespace: "",
            username: "alice",
            groups: &[],
            object: None,
            old_object: Some(old),
            dry_run: false,
        }
    }

    /// What a delete takes, as the scan of every listing found it before
    /// the index kept keys by namespace and by kind.
    fn scanned(policy: &Policy, req: &Request, sources: &Sources) -> Vec<(String, Manager)> {
        let Some((namespace, kinds)) = taken(req) else {
            return Vec::new();
        };
        let first = sources.planned.iter().map(|(k, m)| (&**k, &**m));
        let more = sources.more_listers.iter();
        let more = more.flat_map(|(k, ms)| ms.iter().map(move |m| (&**k, m)));
        let mut out: Vec<(String, Manager)> = first
            .chain(more)
            .filter(|(_, by)| detects(policy, by))
            .filter(|(key, _)| {
                let wide =
                    planned::is_wide(key) && namespace.is_none_or(|n| sources.covers(key, n));
                wide || key.split_once(':').is_some_and(|(gk, _)| {
                    namespace.is_none_or(|n| n == namespace_of(key))
                        && kinds.as_ref().is_none_or(|ks| ks.iter().any(|k| k == gk))
                })
            })
            .map(|(k, m)| (k.to_owned(), m.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    proptest::proptest! {
        /// Whatever the tools list (objects, whole namespaces, every
        /// namespace, a project's), by one tool or several, a Namespace or
        /// CRD DELETE takes what a scan of every listing finds.
        #[test]
        fn what_a_delete_takes_is_what_a_scan_finds(
            listed in proptest::collection::vec((0..9usize, 0..3usize, proptest::bool::ANY), 0..40),
            deleted in 0..6usize,
        ) {
            let keys = ["apps/Deployment:team/web", "/ConfigMap:other/x", "/Namespace:/team",
                "example.com/Widget:team/w", "example.com/Gadget:/g", "*/*:team/*", planned::EVERYWHERE,
                "*/*:@proj/*", "example.com/Widget:other/v"];
            let managers = [flux("apps"), flux("infra"), Manager::ArgoCd {
                application: "shop".into(), application_namespace: Some("argocd".into()) }];
            let mut first = crate::drift::Index::default();
            let mut more: crate::drift::Listed<Vec<Manager>> = Default::default();
            for (k, m, again) in listed {
                let (key, by): (Arc<str>, Arc<Manager>) = (keys[k].into(), managers[m].clone().into());
                match first.get(&key) {
                    None => { first.insert(key, by); }
                    Some(f) if **f == *by || !again => {}
                    Some(_) => {
                        let others = more.entry(key).or_default();
                        if !others.contains(&by) { others.push((*by).clone()); }
                    }
                }
            }
            let scopes = vec![crate::drift::Scope {
                key: planned::within_project("proj"),
                project: None,
                here: Default::default(),
            }];
            let s = Sources { planned: Arc::new(first), more_listers: Arc::new(more),
                scopes: Arc::new(scopes), ..Default::default() };
            // A CRD's group has a dot (the apiserver refuses one without); a
            // renamed kind not yet accepted serves the old one too.
            let crd = |group: &str, kind: &str, served: &str| json!({"spec": {"group": group,
                "names": {"kind": kind}}, "status": {"acceptedNames": {"kind": served}}});
            let old = [json!({}), json!({}), json!({}), crd("example.com", "Widget", "Widget"),
                crd("example.com", "Gadget", "Gadget"), crd("example.com", "Gadget", "Widget")][deleted].clone();
            let req = match deleted {
                0 => delete("", "namespaces", "team", &old),
                1 => delete("", "namespaces", "other", &old),
                2 => delete("", "namespaces", "elsewhere", &old),
                _ => delete("apiextensions.k8s.io", "customresourcedefinitions", "c", &old),
            };
            let policy = Policy::embedded();
            let found = lost(&policy, &req, &s).map(|c| c.objects).unwrap_or_default();
            let expected: Vec<String> = scanned(&policy, &req, &s).into_iter().map(|(k, _)| k).collect();
            proptest::prop_assert_eq!(found, expected);
        }
    }

    #[test]
    fn a_namespace_loses_the_objects_in_it_and_a_crd_those_of_its_kind() {
        let s = sources(&[
            "apps/Deployment:team/web",
            "/ConfigMap:team/web-config",
            "/ConfigMap:other/x",
            "/Namespace:/team",
            "example.com/Widget:other/w",
            "example.com/Gadget:other/g",
        ]);
        let policy = Policy::embedded();
        let ns = json!({});
        let c = lost(&policy, &delete("", "namespaces", "team", &ns), &s).unwrap();
        assert_eq!(
            c.objects,
            ["/ConfigMap:team/web-config", "apps/Deployment:team/web"]
        );
        assert_eq!(c.managers, [flux("apps")]);
        assert!(lost(&policy, &delete("", "namespaces", "empty", &ns), &s).is_none());
        let crd = json!({"spec": {"group": "example.com", "names": {"kind": "Widget"}}});
        let c = lost(
            &policy,
            &delete(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "widgets.example.com",
                &crd,
            ),
            &s,
        )
        .unwrap();
        assert_eq!(c.objects, ["example.com/Widget:other/w"]);
        // The kind it still serves counts, renamed or not.
        let renamed = json!({"spec": {"group": "example.com", "names": {"kind": "Thing"}},
            "status": {"acceptedNames": {"kind": "Widget"}}});
        let req = delete(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "widgets.example.com",
            &renamed,
        );
        assert_eq!(
            lost(&policy, &req, &s).unwrap().objects,
            ["example.com/Widget:other/w"]
        );
        let unused = json!({"spec": {"group": "example.com", "names": {"kind": "Thing"}}});
        let req = delete(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "things.example.com",
            &unused,
        );
        assert!(lost(&policy, &req, &s).is_none());
        // Only DELETEs of the object itself.
        let mut update = delete("", "namespaces", "team", &ns);
        update.operation = Operation::Update;
        assert!(lost(&policy, &update, &s).is_none());
        let mut finalize = delete("", "namespaces", "team", &ns);
        finalize.sub_resource = "finalize";
        assert!(lost(&policy, &finalize, &s).is_none());
        // Only the records of enabled detectors: the registration sends these
        // deletes only then.
        let flux_off = Policy::from_yaml("gitops: {flux: {enabled: false}}\n", "p").unwrap();
        assert!(lost(&flux_off, &delete("", "namespaces", "team", &ns), &s).is_none());
    }

    /// While a source is unread, what it lists cannot be known: a Namespace
    /// or CRD delete is refused as if it held managed objects, but for the
    /// controllers and trusted identities; with every source read, an empty
    /// record lets it pass.
    #[test]
    fn an_unread_source_makes_every_namespace_delete_hold_managed_objects() {
        use crate::drift::{Verdict, decide};
        let policy = Policy::embedded();
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
        let judge = |sources: &Sources, username: &'static str| {
            let mut req = delete("", "namespaces", "team", &ns);
            req.kind = "Namespace";
            req.username = username;
            let none = crate::deadline::Deadline::none();
            let ctx = Context {
                now: "2026-11-29T10:00:00Z".parse().unwrap(),
                parent: None,
                sources: Some(sources),
                installation: Installation::Unresolved,
                deadline: &none,
            };
            decide(&policy, &req, &ctx).unwrap()
        };
        let unread = Sources {
            unread: vec!["Kustomization"],
            ..Default::default()
        };
        let d = judge(&unread, "alice");
        assert_eq!(d.verdict, Verdict::Deny, "{d:?}");
        assert_eq!(d.finding, Finding::DeleteCascade(UNKNOWN.into()));
        assert_eq!(d.sources_unread, ["Kustomization"]);
        let namespace_controller = "system:serviceaccount:kube-system:namespace-controller";
        assert_eq!(judge(&unread, namespace_controller).verdict, Verdict::Allow);
        let d = judge(&Sources::default(), "alice");
        assert_eq!(d.verdict, Verdict::Allow, "{d:?}");
        assert!(matches!(d.finding, Finding::OutOfScope(_)), "{d:?}");
    }

    #[test]
    fn the_description_names_a_few_and_counts_the_rest() {
        let c = Cascade {
            objects: (0..5).map(|i| format!("/ConfigMap:team/c{i}")).collect(),
            managers: vec![flux("apps"), flux("infra"), flux("db")],
            namespaces: vec!["team".into()],
        };
        assert_eq!(
            c.describe(),
            "5 managed objects (/ConfigMap:team/c0, /ConfigMap:team/c1, /ConfigMap:team/c2 and 2 more, \
             managed by Flux Kustomization flux-system/apps and 2 others)"
        );
        let one = Cascade {
            objects: vec!["/ConfigMap:team/c0".into()],
            managers: vec![flux("apps")],
            namespaces: vec!["team".into()],
        };
        assert_eq!(
            one.describe(),
            "1 managed object (/ConfigMap:team/c0, managed by Flux Kustomization flux-system/apps)"
        );
    }
}
