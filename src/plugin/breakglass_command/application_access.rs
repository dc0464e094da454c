//! The command's side of a break-glass pause on Argo CD: the Application,
//! and the ApplicationSet that generated it, read and written with the
//! user's own credentials; their errors in the plugin's words.

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::breakglass::application::{
    self, AppChange, ApplicationError, CONFLICT_RETRIES, Changed, application_resource,
};
use crate::plugin::PluginError;
use crate::plugin::api::Api;

/// Applies `change` to Argo CD Application `namespace/name` with the user's
/// credentials, as ending does ([`application::change`]).
pub(super) async fn update_application(
    api: &Api,
    namespace: &str,
    name: &str,
    change: AppChange<'_>,
) -> Result<Changed, PluginError> {
    match application::change(api.client(), namespace, name, change, None).await {
        Ok(Some(changed)) => Ok(changed),
        Ok(None) => Err(not_found(namespace, name)),
        Err(e) => Err(application_error(namespace, name, e)),
    }
}

/// Whether driftguard's pause of an Application can hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SetCheck {
    /// No ApplicationSet generated the Application.
    NotGenerated,
    /// ApplicationSet `set` (in the Application's namespace) generated it
    /// and keeps both pause annotations.
    Keeps { set: String },
    /// `set` generated it and would remove `dropped` at its next reconcile.
    Drops {
        set: String,
        dropped: Vec<&'static str>,
    },
    /// `set` generated it and cannot be read, so whether it keeps the pause
    /// is unknown.
    Unreadable { set: String, why: String },
}

impl SetCheck {
    /// Whether the pause may be written: it is known to hold.
    pub(super) fn holds(&self) -> bool {
        matches!(self, SetCheck::NotGenerated | SetCheck::Keeps { .. })
    }
}

/// Reads Argo CD Application `namespace/name`.
pub(super) async fn read_application(
    api: &Api,
    namespace: &str,
    name: &str,
) -> Result<Value, PluginError> {
    let ar = application_resource();
    match api.get_object(&ar, Some(namespace), name).await? {
        Ok(app) => Ok(app),
        Err(r) if r.code == 404 => Err(not_found(namespace, name)),
        Err(r) => Err(refused(namespace, name, "get", r.message)),
    }
}

/// When an ApplicationSet generated Application `app`
/// (`namespace/name`, as read), reads that set: whether it keeps
/// driftguard's pause ([`application::application_set_drops`]).
pub(super) async fn application_set_check(
    api: &Api,
    namespace: &str,
    name: &str,
    app: &Value,
) -> Result<SetCheck, PluginError> {
    let Some(set) = application::generated_by(app) else {
        return Ok(SetCheck::NotGenerated);
    };
    let set = set.to_owned();
    let sets = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "ApplicationSet",
    ));
    Ok(match api.get_object(&sets, Some(namespace), &set).await? {
        Ok(value) => {
            let dropped = application::application_set_drops(&value, name);
            if dropped.is_empty() {
                SetCheck::Keeps { set }
            } else {
                SetCheck::Drops { set, dropped }
            }
        }
        Err(r) => SetCheck::Unreadable {
            set,
            why: format!("HTTP {}: {}", r.code, r.message),
        },
    })
}

fn not_found(namespace: &str, name: &str) -> PluginError {
    PluginError::Access(format!(
        "Argo CD Application {namespace}/{name} not found (if Applications live in another namespace, give --argocd-namespace)"
    ))
}

/// Why ending could not lift Application `namespace/name`'s pause, in the
/// words the plugin uses when it writes the Application itself.
pub(super) fn application_error(
    namespace: &str,
    name: &str,
    error: ApplicationError,
) -> PluginError {
    match error {
        ApplicationError::Refused { verb, message, .. } => refused(namespace, name, verb, message),
        ApplicationError::KeptChanging => kept_changing(namespace, name),
        ApplicationError::Unreachable(why) => PluginError::Access(why),
    }
}

fn kept_changing(namespace: &str, name: &str) -> PluginError {
    PluginError::Access(format!(
        "Argo CD Application {namespace}/{name} kept changing ({CONFLICT_RETRIES} conflicting writes); try again"
    ))
}

fn refused(namespace: &str, name: &str, verb: &str, message: String) -> PluginError {
    let hint = if message.contains("admission webhook") {
        " (an Application managed by another Application must ignore the annotations argocd.argoproj.io/skip-reconcile and driftguard.io/break-glass-paused-for: see docs/break-glass.md)"
    } else {
        " (pausing Argo CD needs get and patch on applications.argoproj.io in that namespace)"
    };
    PluginError::Access(format!(
        "cannot {verb} Argo CD Application {namespace}/{name}: {message}{hint}"
    ))
}
