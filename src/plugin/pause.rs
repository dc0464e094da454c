//! The plugin's side of a break-glass pause on Argo CD: the Application is
//! read and written with the user's own credentials, each write carrying the
//! resourceVersion it was computed from, so two break-glasses in one
//! Application never overwrite each other's entry (a conflict reads again).

use kube::api::{Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use super::PluginError;
use super::api::{Api, answer};
use crate::breakglass::application::{AppChange, AppState, application_update};

use crate::breakglass::ending::ApplicationError;
pub use crate::breakglass::ending::CONFLICT_RETRIES;

/// What happened to the Application.
pub struct AppOutcome {
    pub state: AppState,
    /// The object was listed before this change (it already held the pause).
    pub was_listed: bool,
}

/// Applies `change` to Argo CD Application `namespace/name`.
pub async fn update_application(
    api: &Api,
    namespace: &str,
    name: &str,
    change: AppChange<'_>,
) -> Result<AppOutcome, PluginError> {
    let ar = crate::breakglass::application::application_resource();
    let apps = api.dynamic(&ar, Some(namespace));
    let entry = match change {
        AppChange::Pause(e) | AppChange::Resume(e) => e,
    };
    for _ in 0..CONFLICT_RETRIES {
        let app = match api.get_object(&ar, Some(namespace), name).await? {
            Ok(app) => app,
            Err(r) if r.code == 404 => return Err(not_found(namespace, name)),
            Err(r) => return Err(refused(namespace, name, "get", r.message)),
        };
        let was_listed = listed(&app, entry);
        let (patch, state) = application_update(&app, change);
        let Some(patch) = patch else {
            return Ok(AppOutcome { state, was_listed });
        };
        let patched = apps
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        match answer(
            patched,
            format_args!("patch application {namespace}/{name}"),
        )? {
            Ok(_) => return Ok(AppOutcome { state, was_listed }),
            Err(r) if r.code == 409 => continue,
            Err(r) => return Err(refused(namespace, name, "patch", r.message)),
        }
    }
    Err(kept_changing(namespace, name))
}

/// Whether driftguard's pause of an Application can hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetCheck {
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
    pub fn holds(&self) -> bool {
        matches!(self, SetCheck::NotGenerated | SetCheck::Keeps { .. })
    }
}

/// Reads Argo CD Application `namespace/name`.
pub async fn read_application(
    api: &Api,
    namespace: &str,
    name: &str,
) -> Result<Value, PluginError> {
    let ar = crate::breakglass::application::application_resource();
    match api.get_object(&ar, Some(namespace), name).await? {
        Ok(app) => Ok(app),
        Err(r) if r.code == 404 => Err(not_found(namespace, name)),
        Err(r) => Err(refused(namespace, name, "get", r.message)),
    }
}

/// When an ApplicationSet generated Application `app`
/// (`namespace/name`, as read), reads that set: whether it keeps
/// driftguard's pause ([`crate::breakglass::application::application_set_drops`]).
pub async fn application_set_check(
    api: &Api,
    namespace: &str,
    name: &str,
    app: &Value,
) -> Result<SetCheck, PluginError> {
    let Some(set) = crate::breakglass::application::generated_by(app) else {
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
            let dropped = crate::breakglass::application::application_set_drops(&value, name);
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

/// Whether `entry` is in the Application's list of paused objects.
fn listed(app: &Value, entry: &str) -> bool {
    app["metadata"]["annotations"][crate::breakglass::application::PAUSED_FOR]
        .as_str()
        .is_some_and(|l| l.split(',').any(|e| e.trim() == entry))
}

/// Why ending could not lift Application `namespace/name`'s pause, in the
/// words the plugin uses when it writes the Application itself.
pub fn application_error(namespace: &str, name: &str, error: ApplicationError) -> PluginError {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_entry_is_listed_exactly() {
        let app = json!({"metadata": {"annotations": {crate::breakglass::application::PAUSED_FOR: "/ConfigMap:p/a, apps/Deployment:p/b"}}});
        assert!(listed(&app, "apps/Deployment:p/b"));
        assert!(!listed(&app, "apps/Deployment:p/bb"));
        assert!(!listed(&json!({}), "apps/Deployment:p/b"));
    }
}
