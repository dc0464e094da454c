//! With a hub's Argo CD and this cluster's own at once (`--argocd-kubeconfig`
//! or `--argocd-context`, and `--local-argocd-namespace`): which of the two
//! tracks an object, by Argo CD's own rule
//! ([`ownership::installation_tracks`]): the object's
//! `argocd.argoproj.io/installation-id` against each argocd-cm's
//! `installationID`, read with the user's own credentials. Its Application
//! is read, paused and resumed there. When the ids cannot tell, the user is
//! told so, and the hub is used as without `--local-argocd-namespace`, unless
//! the hub's id rules it out.

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::Value;

use super::PluginError;
use super::api::{Api, ArgoCdArgs, Resource, answer};
use crate::drift::inputs::Inputs;
use crate::drift::ownership::{self, ARGOCD_CM_INSTALLATION_ID, ARGOCD_INSTALLATION_ID, Manager};
use crate::policy::Policy;

/// An argocd-cm's `installationID` as read: `Ok(None)` when it sets none;
/// `Err(why)` when it could not be read.
pub type Id = Result<Option<String>, String>;

/// Which Argo CD tracks the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Hub,
    Local,
    /// The ids do not tell (`why`); `hub_excluded`: the hub's id was read
    /// and is not the object's, so the hub's Application is not its.
    Unsure {
        why: String,
        hub_excluded: bool,
    },
}

/// Where the object's Argo CD Application is read, paused and resumed.
pub struct Chosen<'a> {
    pub api: &'a Api,
    /// kubectl's flags that reach the hub, when `api` is the hub's.
    pub hub: Option<String>,
    /// Where the Applications live when a tracking id names no namespace
    /// (and argocd-cm).
    pub namespace: &'a str,
    /// Why the ids could not tell: said to the user.
    pub unsure: Option<String>,
    /// Neither Argo CD is known to track the object: pause nothing.
    pub no_pause: bool,
}

/// Where the Application of `object` (`None`: not read) is, for the hub
/// `hub` given by `args` (`None`: this cluster holds it) and
/// `argocd_namespace`, the hub's Argo CD namespace. `policy` detects Argo
/// CD, and its `gitops.argocd.installationID` stands for an argocd-cm that
/// sets none, as in the decision.
pub async fn choose<'a>(
    api: &'a Api,
    hub: Option<&'a Api>,
    args: &'a ArgoCdArgs,
    argocd_namespace: &'a str,
    object: Option<&Value>,
    policy: &Policy,
) -> Result<Chosen<'a>, PluginError> {
    let local = args.local_argocd_namespace.as_deref();
    let chosen = |api, hub, namespace, unsure, no_pause| Chosen {
        api,
        hub,
        namespace,
        unsure,
        no_pause,
    };
    let Some(hub_api) = hub else {
        if local.is_some() {
            return Err(PluginError::Usage(
                "--local-argocd-namespace needs --argocd-kubeconfig or --argocd-context (without a hub, --argocd-namespace names this cluster's Argo CD)".into(),
            ));
        }
        return Ok(chosen(api, None, argocd_namespace, None, false));
    };
    let flags = Some(args.kubectl_flags());
    let tracked = object.and_then(|o| tracked(o, policy));
    let (Some(local), Some(object)) = (local, tracked) else {
        return Ok(chosen(hub_api, flags, argocd_namespace, None, false));
    };
    let fallback = policy
        .argocd
        .as_ref()
        .and_then(|a| a.installation_id.as_deref());
    let hub_id = installation_id(hub_api, argocd_namespace, " in the hub", fallback).await;
    let local_id = installation_id(api, local, " in this cluster", fallback).await;
    let object_id = object["metadata"]["annotations"][ARGOCD_INSTALLATION_ID].as_str();
    Ok(match pick(object_id, &hub_id, &local_id) {
        Route::Hub => chosen(hub_api, flags, argocd_namespace, None, false),
        Route::Local => chosen(api, None, local, None, false),
        Route::Unsure {
            why,
            hub_excluded: false,
        } => {
            let why = format!("{why}: using the hub's, as without --local-argocd-namespace");
            chosen(hub_api, flags, argocd_namespace, Some(why), false)
        }
        Route::Unsure {
            why,
            hub_excluded: true,
        } => chosen(api, None, local, Some(why), true),
    })
}

/// [`choose`] for the object `name` of `resource` (in `api`'s namespace),
/// read only when there are two Argo CDs to choose between.
pub async fn choose_for<'a>(
    api: &'a Api,
    hub: Option<&'a Api>,
    args: &'a ArgoCdArgs,
    argocd_namespace: &'a str,
    (resource, name, policy): (&Resource, &str, &Policy),
) -> Result<Chosen<'a>, PluginError> {
    let object = match (hub, &args.local_argocd_namespace) {
        (Some(_), Some(_)) => match api.get_target(resource, name).await? {
            Ok(object) => Some(object),
            Err(r) => return Err(PluginError::from_refusal(r)),
        },
        _ => None,
    };
    choose(api, hub, args, argocd_namespace, object.as_ref(), policy).await
}

/// `object` when Argo CD tracks it under `policy`'s detectors: only then
/// has it an Application to look for.
fn tracked<'v>(object: &'v Value, policy: &Policy) -> Option<&'v Value> {
    let manager = ownership::detect(&Inputs::read(object, policy));
    matches!(manager, Some(Manager::ArgoCd { .. })).then_some(object)
}

/// argocd-cm's `installationID` in `namespace` of `api`'s cluster, or
/// `fallback` where it sets none (`at` says which cluster, in a message).
async fn installation_id(api: &Api, namespace: &str, at: &str, fallback: Option<&str>) -> Id {
    let got = api
        .namespaced::<ConfigMap>(namespace)
        .get("argocd-cm")
        .await;
    match answer(got, "get configmap argocd-cm") {
        Ok(Ok(cm)) => Ok(cm
            .data
            .and_then(|mut data| data.remove(ARGOCD_CM_INSTALLATION_ID))
            .filter(|id| !id.is_empty())
            .or(fallback.map(str::to_owned))),
        Ok(Err(refusal)) => Err(format!(
            "cannot read ConfigMap {namespace}/argocd-cm{at}: {}",
            refusal.message
        )),
        Err(e) => Err(format!(
            "cannot read ConfigMap {namespace}/argocd-cm{at}: {e}"
        )),
    }
}

/// How an installation whose id was read stands to an object.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// Its id is the object's.
    Id,
    /// It has no id, so it tracks every object (Argo CD v3.6.1).
    Every,
    /// Its id is not the object's.
    No,
}

/// Which installation tracks an object whose installation-id annotation is
/// `object`, given the hub's and this cluster's ids. The installation whose
/// id the object carries decides, and one without an id when the other's
/// id was read and is not the object's; an unreadable id never decides, and
/// two that both track it (two Argo CDs in one cluster must have different
/// ids) are said, not chosen between.
pub fn pick(object: Option<&str>, hub: &Id, local: &Id) -> Route {
    let tracks = |id: &Id| {
        id.as_ref().ok().map(|id| {
            match (
                id.as_deref().filter(|id| !id.is_empty()),
                ownership::installation_tracks(id.as_deref(), object),
            ) {
                (None, _) => Claim::Every,
                (Some(_), true) => Claim::Id,
                (Some(_), false) => Claim::No,
            }
        })
    };
    let shown = |id: Option<&str>| match id.unwrap_or_default() {
        "" => "none".to_owned(),
        id => format!("{id:?}"),
    };
    let ids = format!(
        "the object's {ARGOCD_INSTALLATION_ID} is {}; the hub's argocd-cm {ARGOCD_CM_INSTALLATION_ID} {}, this cluster's {}",
        shown(object),
        said(hub, shown),
        said(local, shown)
    );
    let unsure = |what: &str, hub_excluded| Route::Unsure {
        why: format!("cannot tell which Argo CD tracks it ({what}): {ids}"),
        hub_excluded,
    };
    use Claim::{Every, Id as Own, No};
    let both = "both track it: an Argo CD without an installationID tracks every object, and two must differ";
    match (tracks(hub), tracks(local)) {
        (Some(Own), Some(No) | None) | (Some(Every), Some(No)) => Route::Hub,
        (Some(No) | None, Some(Own)) | (Some(No), Some(Every)) => Route::Local,
        (Some(Own | Every), Some(Own | Every)) => unsure(both, false),
        (Some(No), Some(No)) => unsure("neither has its id", true),
        (Some(No), None) | (None, Some(No | Every)) | (None, None) | (Some(Every), None) => unsure(
            "an installationID could not be read",
            tracks(hub) == Some(No),
        ),
    }
}

/// An id as the message says it: `is "x"`, `is none`, or why it is unknown.
fn said(id: &Id, shown: impl Fn(Option<&str>) -> String) -> String {
    match id {
        Ok(id) => format!("is {}", shown(id.as_deref())),
        Err(why) => format!("is unknown ({why})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installation_whose_id_the_object_carries_tracks_it() {
        let (hub, spoke): (Id, Id) = (Ok(Some("hub".into())), Ok(None));
        // Without an id, this cluster's Argo CD tracks what the hub's does not.
        assert_eq!(pick(None, &hub, &spoke), Route::Local);
        assert_eq!(pick(Some(""), &hub, &spoke), Route::Local);
        assert_eq!(pick(Some("other"), &hub, &spoke), Route::Local);
        assert_eq!(
            pick(Some("hub"), &Ok(None), &Ok(Some("spoke".into()))),
            Route::Hub
        );
        let spoke: Id = Ok(Some("spoke".into()));
        assert_eq!(pick(Some("hub"), &hub, &spoke), Route::Hub);
        assert_eq!(pick(Some("spoke"), &hub, &spoke), Route::Local);
        // One id read and tracking it decides, the other unknown.
        let unknown: Id = Err("forbidden".into());
        assert_eq!(pick(Some("hub"), &hub, &unknown), Route::Hub);
        assert_eq!(pick(Some("spoke"), &unknown, &spoke), Route::Local);
    }

    #[test]
    fn ids_that_cannot_tell_are_said_never_guessed() {
        let unknown: Id =
            Err("cannot read ConfigMap argocd/argocd-cm in the hub: forbidden".into());
        let (hub, spoke): (Id, Id) = (Ok(Some("hub".into())), Ok(Some("spoke".into())));
        let unsure = |route: Route| match route {
            Route::Unsure { why, hub_excluded } => (why, hub_excluded),
            other => panic!("decided: {other:?}"),
        };
        // Unreadable: not the local one by elimination.
        let (why, excluded) = unsure(pick(Some("spoke"), &unknown, &Ok(None)));
        assert!(!excluded);
        assert!(
            why.contains("could not be read") && why.contains("forbidden"),
            "{why}"
        );
        // The hub without an id tracks every object: unknown here, not chosen.
        let (why, excluded) = unsure(pick(Some("hub"), &Ok(None), &unknown));
        assert!(!excluded);
        assert!(
            why.contains("could not be read") && why.contains("forbidden"),
            "{why}"
        );
        let (_, excluded) = unsure(pick(None, &unknown, &unknown));
        assert!(!excluded);
        // The hub's id read and not the object's: never the hub's Application.
        let (why, excluded) = unsure(pick(Some("other"), &hub, &spoke));
        assert!(excluded);
        assert!(
            why.contains("neither has its id") && why.contains("\"other\""),
            "{why}"
        );
        let (_, excluded) = unsure(pick(Some("spoke"), &hub, &unknown));
        assert!(excluded);
        // The same id on both, or one without an id that tracks it too: a
        // misconfiguration, said.
        let (why, excluded) = unsure(pick(Some("hub"), &hub, &hub));
        assert!(!excluded && why.contains("must differ"), "{why}");
        let (why, excluded) = unsure(pick(Some("hub"), &hub, &Ok(None)));
        assert!(
            !excluded && why.contains("without an installationID"),
            "{why}"
        );
        let (_, excluded) = unsure(pick(None, &Ok(None), &Ok(None)));
        assert!(!excluded);
    }
}
