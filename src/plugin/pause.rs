//! The plugin's side of a break-glass pause on Argo CD: the Application is
//! read and written with the user's own credentials, each write carrying the
//! resourceVersion it was computed from, so two break-glasses in one
//! Application never overwrite each other's entry (a conflict reads again).

use http::Method;
use serde_json::Value;

use super::PluginError;
use super::api::Api;
use crate::pause::{AppChange, AppState, application_update};

/// Conflicting writers are people arming or ending at the same moment: a few
/// fresh reads settle it.
pub const CONFLICT_RETRIES: usize = 5;

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
    let path = format!("/apis/argoproj.io/v1alpha1/namespaces/{namespace}/applications/{name}");
    let entry = match change {
        AppChange::Pause(e) | AppChange::Resume(e) => e,
    };
    for _ in 0..CONFLICT_RETRIES {
        let app = match api.try_get(&path).await? {
            Ok(app) => app,
            Err(r) if r.code == 404 => {
                return Err(PluginError::Access(format!(
                    "Argo CD Application {namespace}/{name} not found (if Applications live in another namespace, give --argocd-namespace)"
                )));
            }
            Err(r) => return Err(refused(namespace, name, "get", r.message)),
        };
        let was_listed = listed(&app, entry);
        let (patch, state) = application_update(&app, change);
        let Some(patch) = patch else {
            return Ok(AppOutcome { state, was_listed });
        };
        match api
            .call(
                Method::PATCH,
                &path,
                Some("application/merge-patch+json"),
                Some(&patch),
            )
            .await?
        {
            Ok(_) => return Ok(AppOutcome { state, was_listed }),
            Err(r) if r.code == 409 => continue,
            Err(r) => return Err(refused(namespace, name, "patch", r.message)),
        }
    }
    Err(PluginError::Access(format!(
        "Argo CD Application {namespace}/{name} kept changing ({CONFLICT_RETRIES} conflicting writes); try again"
    )))
}

/// Whether `entry` is in the Application's list of paused objects.
fn listed(app: &Value, entry: &str) -> bool {
    app["metadata"]["annotations"][crate::pause::PAUSED_FOR]
        .as_str()
        .is_some_and(|l| l.split(',').any(|e| e.trim() == entry))
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
        let app = json!({"metadata": {"annotations": {crate::pause::PAUSED_FOR: "/ConfigMap:p/a, apps/Deployment:p/b"}}});
        assert!(listed(&app, "apps/Deployment:p/b"));
        assert!(!listed(&app, "apps/Deployment:p/bb"));
        assert!(!listed(&json!({}), "apps/Deployment:p/b"));
    }
}
