//! Argo CD sync impersonation: with `application.sync.impersonation.enabled:
//! "true"` in argocd-cm, Argo CD syncs each Application as the service account
//! that the Application's AppProject names for its destination in
//! `spec.destinationServiceAccounts`. This derives that account as Argo CD
//! v3.6 does (`util/settings/impersonation.go`), so that driftguard can trust
//! it for that Application's objects and no others.

use serde_json::Value;

pub use super::app_project::AppProject;
use super::app_project::permits;
use super::argocd::Application;
use super::pattern::Pattern;

/// The argocd-cm key that turns sync impersonation on (exactly `"true"`).
pub(crate) const ENABLED_KEY: &str = "application.sync.impersonation.enabled";

/// The account Argo CD syncs one Application as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncAccount {
    /// The Application's name.
    pub(crate) application: String,
    /// The Application's namespace.
    pub(crate) namespace: String,
    /// The Application lives in Argo CD's own namespace, where tracking ids
    /// name it without a namespace.
    pub(crate) control_plane: bool,
    /// The user it syncs as, `system:serviceaccount:<ns>:<sa>`.
    pub(crate) service_account: String,
}

impl SyncAccount {
    /// Whether a tracking id's `<namespace>_<application>` (or bare
    /// `<application>`, in Argo CD's own namespace) names this Application.
    pub(crate) fn is_for(&self, application: &str, namespace: Option<&str>) -> bool {
        self.application == application
            && namespace.map_or(self.control_plane, |ns| ns == self.namespace)
    }
}

/// With impersonation `enabled`, the account each Application is synced as,
/// its AppProject looked up by name in Argo CD's namespace, as Argo CD does.
pub fn sync_accounts(
    applications: &[Application],
    projects: &[AppProject],
    enabled: bool,
    argocd_namespace: &str,
) -> Vec<SyncAccount> {
    if !enabled {
        return Vec::new();
    }
    applications
        .iter()
        .filter_map(|app| {
            let project = projects.iter().find(|p| {
                p.metadata.name == app.project && p.metadata.namespace == argocd_namespace
            })?;
            let namespace = app.namespace.clone().unwrap_or_default();
            Some(SyncAccount {
                service_account: sync_account(project, app, argocd_namespace)?,
                application: app.name.clone(),
                control_plane: namespace.is_empty() || namespace == argocd_namespace,
                namespace,
            })
        })
        .collect()
}

/// `application.sync.impersonation.enabled` of argocd-cm's data.
pub(crate) fn enabled(data: &serde_json::Map<String, Value>) -> bool {
    data.get(ENABLED_KEY).and_then(Value::as_str) == Some("true")
}

/// Characters Argo CD refuses in `defaultServiceAccount`.
const DISALLOWED: [char; 8] = ['!', '*', '[', ']', '{', '}', '\\', '/'];

/// The user Argo CD syncs `app` as (`system:serviceaccount:<ns>:<sa>`), when
/// `project` is its AppProject and `argocd_namespace` Argo CD's own namespace.
/// `None` where Argo CD would not impersonate or would fail the sync: a
/// destination on another cluster, an Application the project does not admit
/// from its namespace, no matching entry, an invalid glob or account.
pub(crate) fn sync_account(
    project: &AppProject,
    app: &Application,
    argocd_namespace: &str,
) -> Option<String> {
    // Other clusters are not ours.
    let destination = app.sync_destination.as_deref()?;
    let app_namespace = app.namespace.as_deref().unwrap_or_default();
    if !permits(project, app_namespace, argocd_namespace) {
        return None;
    }
    let account_namespace = if destination.is_empty() {
        app_namespace
    } else {
        destination
    };
    for item in &project.spec.destination_service_accounts {
        // Argo CD fails the sync on a pattern that does not compile.
        let server = Pattern::new(&item.server).ok()?;
        let namespace = Pattern::new(&item.namespace).ok()?;
        // Argo CD matches the server URL it resolved the destination to. For
        // a destination `name` known here by several URLs, it is one of them:
        // the entry must match them all.
        let servers = &app.sync_servers;
        let server_matches = !servers.is_empty() && servers.iter().all(|s| server.is_match(s));
        if !(server_matches && namespace.is_match(destination)) {
            continue;
        }
        let sa = item.default_service_account.as_str();
        if sa.trim_matches(' ').is_empty() || sa.contains(DISALLOWED) {
            return None;
        }
        if sa.contains(':') {
            return Some(format!("system:serviceaccount:{sa}"));
        }
        // Argo CD would name `system:serviceaccount::<sa>`, which no token is.
        if account_namespace.is_empty() {
            return None;
        }
        return Some(format!("system:serviceaccount:{account_namespace}:{sa}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn project(accounts: Value) -> AppProject {
        AppProject::from_value(&json!({
            "metadata": {"name": "shop", "namespace": "argocd"},
            "spec": {"sourceNamespaces": ["team-*", "/^ops-[0-9]+$/"], "destinationServiceAccounts": accounts}
        }))
        .unwrap()
    }

    fn app(namespace: &str, destination: Value) -> Application {
        crate::policy::argocd::from_value(&json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {"project": "shop", "destination": destination}
        }))
        .unwrap()
    }

    fn local(namespace: &str) -> Value {
        json!({"server": "https://kubernetes.default.svc", "namespace": namespace})
    }

    fn derive(accounts: Value, app: &Application) -> Option<String> {
        sync_account(&project(accounts), app, "argocd")
    }

    #[test]
    fn the_first_matching_entry_names_the_account() {
        let accounts = json!([
            {"server": "https://kubernetes.default.svc", "namespace": "shop", "defaultServiceAccount": "deployer"},
            {"server": "*", "namespace": "*", "defaultServiceAccount": "fallback"}
        ]);
        let shop = app("argocd", local("shop"));
        assert_eq!(
            derive(accounts.clone(), &shop).as_deref(),
            Some("system:serviceaccount:shop:deployer")
        );
        let other = app("argocd", local("billing"));
        assert_eq!(
            derive(accounts, &other).as_deref(),
            Some("system:serviceaccount:billing:fallback")
        );
    }

    #[test]
    fn in_cluster_by_name_and_trailing_slash_resolve_to_this_server() {
        let accounts = json!([{"server": "https://kubernetes.default.svc", "namespace": "*", "defaultServiceAccount": "sa"}]);
        let want = Some("system:serviceaccount:shop:sa".to_owned());
        let named = app("argocd", json!({"name": "in-cluster", "namespace": "shop"}));
        assert_eq!(derive(accounts.clone(), &named), want);
        let slash = app(
            "argocd",
            json!({"server": "https://kubernetes.default.svc/", "namespace": "shop"}),
        );
        assert_eq!(derive(accounts.clone(), &slash), want);
        // Another cluster, or server and name both set (Argo CD refuses it).
        let remote = app(
            "argocd",
            json!({"server": "https://10.0.0.1:6443", "namespace": "shop"}),
        );
        assert_eq!(
            derive(
                json!([{"server": "*", "namespace": "*", "defaultServiceAccount": "sa"}]),
                &remote
            ),
            None
        );
        let both = app(
            "argocd",
            json!({"server": "https://kubernetes.default.svc", "name": "in-cluster", "namespace": "shop"}),
        );
        assert_eq!(derive(accounts, &both), None);
    }

    /// In a spoke, Argo CD matches an entry's `server` against the URL of
    /// the spoke's cluster Secret (`destCluster.Server`), whether the
    /// Application names the spoke by `server` or by `name`; the hub's
    /// in-cluster URL is the hub.
    #[test]
    fn in_a_spoke_the_entry_matches_the_spokes_own_server() {
        use crate::policy::argocd::{ThisCluster, from_value_for};
        const SPOKE: &str = "https://spoke-1.example:6443";
        let spoke = |names: &[&str], destination: Value| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            from_value_for(
                &json!({
                    "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                    "metadata": {"name": "web", "namespace": "argocd"},
                    "spec": {"project": "shop", "destination": destination}
                }),
                &ThisCluster::named(&names),
            )
            .unwrap()
        };
        let to_spoke =
            json!([{"server": SPOKE, "namespace": "shop", "defaultServiceAccount": "deployer"}]);
        let to_hub = json!([{"server": "https://kubernetes.default.svc", "namespace": "*", "defaultServiceAccount": "deployer"}]);
        let want = Some("system:serviceaccount:shop:deployer".to_owned());
        let by_server = spoke(
            &[SPOKE],
            json!({"server": format!("{SPOKE}/"), "namespace": "shop"}),
        );
        assert_eq!(derive(to_spoke.clone(), &by_server), want);
        assert_eq!(derive(to_hub.clone(), &by_server), None);
        let by_name = spoke(
            &["spoke-1", SPOKE],
            json!({"name": "spoke-1", "namespace": "shop"}),
        );
        assert_eq!(derive(to_spoke.clone(), &by_name), want);
        assert_eq!(derive(to_hub, &by_name), None);
        // Known by name alone, or by URLs the entry does not all match: which
        // URL Argo CD resolved is unknown here, so no trust.
        let name_only = spoke(
            &["spoke-1"],
            json!({"name": "spoke-1", "namespace": "shop"}),
        );
        assert_eq!(derive(to_spoke.clone(), &name_only), None);
        let two = spoke(
            &["spoke-1", SPOKE, "https://10.0.0.9:6443"],
            json!({"name": "spoke-1", "namespace": "shop"}),
        );
        assert_eq!(derive(to_spoke, &two), None);
        let any = json!([{"server": "https://*", "namespace": "shop", "defaultServiceAccount": "deployer"}]);
        assert_eq!(derive(any, &two), want);
    }

    #[test]
    fn namespace_qualified_account_is_used_as_written() {
        let accounts = json!([{"server": "*", "namespace": "shop", "defaultServiceAccount": "argocd:sync-shop"}]);
        assert_eq!(
            derive(accounts, &app("argocd", local("shop"))).as_deref(),
            Some("system:serviceaccount:argocd:sync-shop")
        );
    }

    #[test]
    fn without_a_destination_namespace_the_applications_namespace_is_used() {
        // The namespace glob is matched against the empty destination namespace.
        let accounts = json!([{"server": "*", "namespace": "*", "defaultServiceAccount": "sa"}]);
        assert_eq!(
            derive(accounts.clone(), &app("team-a", local(""))).as_deref(),
            Some("system:serviceaccount:team-a:sa")
        );
        let exact = json!([{"server": "*", "namespace": "shop", "defaultServiceAccount": "sa"}]);
        assert_eq!(derive(exact, &app("team-a", local(""))), None);
    }

    #[test]
    fn an_invalid_account_or_glob_gives_no_trust() {
        for bad in ["", "   ", "sa*", "ns/sa", "!sa", "sa[0]", "{a,b}", "a\\b"] {
            let accounts = json!([
                {"server": "*", "namespace": "shop", "defaultServiceAccount": bad},
                {"server": "*", "namespace": "*", "defaultServiceAccount": "later"}
            ]);
            assert_eq!(
                derive(accounts, &app("argocd", local("shop"))),
                None,
                "{bad:?}"
            );
        }
        // Argo CD stops at a pattern that does not compile.
        let accounts = json!([
            {"server": "[", "namespace": "shop", "defaultServiceAccount": "sa"},
            {"server": "*", "namespace": "*", "defaultServiceAccount": "later"}
        ]);
        assert_eq!(derive(accounts, &app("argocd", local("shop"))), None);
    }

    #[test]
    fn no_matching_entry_gives_no_trust() {
        let accounts = json!([
            {"server": "https://10.0.0.1:6443", "namespace": "*", "defaultServiceAccount": "remote"},
            {"server": "*", "namespace": "billing", "defaultServiceAccount": "billing"}
        ]);
        assert_eq!(derive(accounts, &app("argocd", local("shop"))), None);
        assert_eq!(derive(json!([]), &app("argocd", local("shop"))), None);
    }

    #[test]
    fn accounts_only_when_enabled_and_only_for_their_application() {
        let accounts = json!([{"server": "*", "namespace": "*", "defaultServiceAccount": "sa"}]);
        let projects = [project(accounts)];
        let mut other = app("argocd", local("billing"));
        other.name = "billing".into();
        other.project = "default".into();
        let apps = [
            app("argocd", local("shop")),
            app("team-a", local("shop")),
            other,
        ];
        assert!(sync_accounts(&apps, &projects, false, "argocd").is_empty());
        let got = sync_accounts(&apps, &projects, true, "argocd");
        // `billing`'s project (default) is not there: no account.
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].is_for("web", None) && got[0].is_for("web", Some("argocd")));
        assert!(!got[0].is_for("web", Some("team-a")) && !got[0].is_for("billing", None));
        assert!(got[1].is_for("web", Some("team-a")) && !got[1].is_for("web", None));
        // A project of the same name in another namespace is not Argo CD's.
        let mut elsewhere = projects[0].clone();
        elsewhere.metadata.namespace = "team-a".into();
        assert!(sync_accounts(&apps, &[elsewhere], true, "argocd").is_empty());
    }

    #[test]
    fn the_flag_must_be_exactly_true() {
        for (value, on) in [("true", true), ("True", false), ("yes", false), ("", false)] {
            let data = json!({ENABLED_KEY: value});
            assert_eq!(enabled(data.as_object().unwrap()), on, "{value:?}");
        }
        assert!(!enabled(json!({}).as_object().unwrap()));
    }

    #[test]
    fn applications_outside_argocd_need_the_projects_source_namespaces() {
        let accounts = json!([{"server": "*", "namespace": "*", "defaultServiceAccount": "sa"}]);
        let want = |ns: &str| Some(format!("system:serviceaccount:{ns}:sa"));
        assert_eq!(
            derive(accounts.clone(), &app("team-a", local("shop"))),
            want("shop")
        );
        assert_eq!(
            derive(accounts.clone(), &app("ops-12", local("shop"))),
            want("shop")
        );
        assert_eq!(derive(accounts.clone(), &app("ops-x", local("shop"))), None);
        assert_eq!(derive(accounts, &app("intruder", local("shop"))), None);
    }
}
