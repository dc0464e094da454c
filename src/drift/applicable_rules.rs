//! The ignore rules that apply to an object: the policy's, argocd-cm's, the
//! managing Application's (and its per-resource annotation), or a Flux
//! source's. Apart from the steps so that the diff (`compare`) and
//! the steps both read them without importing each other.

use serde_json::Value;

use super::annotated::{self, Annotated};
use super::ownership::Manager;
use super::{ArgoCdSources, Context, DEFAULT_ARGOCD_NAMESPACE, Installation};
use crate::policy::flux::FluxSource;
use crate::policy::{Application, IgnoreRule, Policy, Target};

/// An Application from `--argocd-application` files, else from the cluster.
pub(crate) fn find_application<'p>(
    policy: &'p Policy,
    ctx: &Context<'p>,
    name: &str,
    namespace: Option<&str>,
) -> Option<&'p Application> {
    let files = ctx.files_apply().then_some(&policy.applications[..]);
    let in_files = |control_plane: &str| {
        files
            .into_iter()
            .flatten()
            .find(|a| a.tracks(name, namespace, control_plane))
    };
    let in_watched = |w: &'p ArgoCdSources| w.applications.named(name, namespace, w.namespace());
    match ctx.installation {
        Installation::Other => None,
        Installation::Known { watched, .. } => {
            in_files(watched.map_or(DEFAULT_ARGOCD_NAMESPACE, ArgoCdSources::namespace))
                .or_else(|| watched.and_then(in_watched))
        }
        Installation::Unresolved => in_files(
            ctx.argocd()
                .map_or(DEFAULT_ARGOCD_NAMESPACE, ArgoCdSources::namespace),
        )
        .or_else(|| ctx.sources?.argocd.iter().find_map(in_watched)),
    }
}

/// Where an ignore rule that applies comes from.
#[derive(Clone, Copy, Debug)]
pub enum RuleFrom<'p> {
    /// The policy file's own `ignore` rules.
    Policy,
    /// argocd-cm's `resource.customizations.ignoreDifferences.*`.
    ArgoCdOverrides,
    /// The Argo CD Application's `spec.ignoreDifferences`.
    Application(&'p Application),
    /// The Flux object's ignore rules.
    Flux(&'p FluxSource),
    /// Argo CD's per-resource `ignore-differences` annotation.
    Annotation,
}

/// The ignore rules that apply to an object, in order.
#[derive(Debug)]
pub struct Rules<'p> {
    /// The policy's, then the managing tool's.
    pub listed: Vec<(RuleFrom<'p>, &'p IgnoreRule)>,
    /// Argo CD's per-resource rule, from the stored object (never the new one).
    pub annotated: Annotated,
}

impl Rules<'_> {
    /// Every rule that applies, the annotation's last.
    pub fn iter(&self) -> impl Iterator<Item = (RuleFrom<'_>, &IgnoreRule)> {
        let annotated = match &self.annotated {
            Annotated::Rule(rule, _) => Some((RuleFrom::Annotation, &**rule)),
            _ => None,
        };
        self.listed.iter().copied().chain(annotated)
    }
}

/// Policy rules, then what the managing tool itself ignores: the
/// Application's rules and Argo CD's resource customizations, or the Flux
/// object's ignore rules; then Argo CD's per-resource annotation on `stored`.
/// `version` and `stored` are what Flux's rule targets select on.
pub(crate) fn rules<'p>(
    policy: &'p Policy,
    ctx: &Context<'p>,
    target: &Target,
    manager: Option<&Manager>,
    version: &str,
    stored: &Value,
) -> Rules<'p> {
    let mut listed: Vec<_> = policy
        .rules
        .matching(target)
        .into_iter()
        .map(|r| (RuleFrom::Policy, r))
        .collect();
    let mut annotated = Annotated::Absent;
    match manager {
        Some(Manager::ArgoCd {
            application,
            application_namespace,
        }) => {
            if let Some(argocd) = ctx.argocd() {
                let overrides = argocd.overrides.matching(target).into_iter();
                listed.extend(overrides.map(|r| (RuleFrom::ArgoCdOverrides, r)));
            }
            if let Some(app) =
                find_application(policy, ctx, application, application_namespace.as_deref())
            {
                let own = app.rules.matching(target).into_iter();
                listed.extend(own.map(|r| (RuleFrom::Application(app), r)));
            }
            if !ctx.other_installation() {
                annotated = annotated::rule(stored);
            }
        }
        Some(flux) => {
            if let Some(source) = ctx.sources.and_then(|s| s.flux_source(flux)) {
                let own = flux_rules(source, target, version, stored).into_iter();
                listed.extend(own.map(|r| (RuleFrom::Flux(source), r)));
            }
        }
        None => {}
    }
    Rules { listed, annotated }
}

/// A Flux object's own ignore rules that apply to this object.
pub(super) fn flux_rules<'p>(
    source: &'p FluxSource,
    target: &Target,
    version: &str,
    obj: &Value,
) -> Vec<&'p IgnoreRule> {
    source
        .rules
        .iter()
        .filter(|r| r.matches(target, version, obj))
        .map(|r| &r.rule)
        .collect()
}
