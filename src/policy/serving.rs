//! What the running server provides that a policy relies on, checked when
//! `serve` starts and at every reload (principle 8: a setting is judged by
//! what it does where it runs). Two things a policy alone cannot tell:
//! - Argo CD's own writes are exempt only if `controllers` (or `trusted`)
//!   cover its application controller, a service account of the namespace it
//!   runs in here (`--argocd-namespace`, `--local-argocd-namespace`); else
//!   every sync is denied as a manual change.
//! - A break-glass ends only by the expiry sweeper: where none runs, an armed
//!   object keeps its GitOps tool paused past `maxDuration`, with no record
//!   and nothing to end it. So break-glass is allowed only where it runs.

use super::identity_traps::covers_an_account_of;
use super::{Policy, PolicyError};

/// The server's flags, as far as a policy depends on them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Serving {
    /// Namespaces of this cluster where an Argo CD runs whose marks the
    /// policy reads, each with the flag that says so.
    pub(crate) argocd_namespaces: Vec<(String, &'static str)>,
    /// Why no break-glass expiry sweeper runs, when none does (the flag).
    pub(crate) no_sweeper: Option<&'static str>,
}

impl Policy {
    /// Refuses this policy where `serving` cannot carry it out.
    pub(crate) fn check_serving(&self, serving: &Serving) -> Result<(), PolicyError> {
        let file = &self.source;
        if self.argocd.is_some() {
            for (namespace, flag) in &serving.argocd_namespaces {
                let exempt = [&self.controllers, &self.trusted]
                    .iter()
                    .any(|ids| covers_an_account_of(ids, namespace));
                // argocd-server writes for every Argo CD UI and API user: a
                // glob over the namespace's accounts must not exempt it.
                let server = format!("system:serviceaccount:{namespace}:argocd-server");
                let groups = [
                    "system:serviceaccounts".to_owned(),
                    format!("system:serviceaccounts:{namespace}"),
                    "system:authenticated".to_owned(),
                ];
                if [&self.controllers, &self.trusted]
                    .iter()
                    .any(|ids| ids.contains(&server, &groups))
                {
                    return Err(PolicyError(format!(
                        "{file}: controllers or trusted cover `{server}`, Argo CD's API server ({flag}): it writes on behalf of every Argo CD UI and API user (a live-manifest edit, a resource action), which are manual changes. Name the application controller alone: `system:serviceaccount:{namespace}:argocd-application-controller`"
                    )));
                }
                if !exempt {
                    return Err(PolicyError(format!(
                        "{file}: controllers (and trusted) cover no service account of namespace `{namespace}`, where Argo CD runs ({flag}): its application controller's syncs would be denied as manual changes. Add its account to controllers.users (in a standard install `system:serviceaccount:{namespace}:argocd-application-controller`), give {flag} the namespace Argo CD runs in, or set gitops.argocd.enabled: false"
                    )));
                }
            }
        }
        if let Some(flag) = serving.no_sweeper
            && !self.break_glass.allowed.is_empty()
        {
            let (users, groups) = self.break_glass.allowed.patterns();
            return Err(PolicyError(format!(
                "{file}: breakGlass allows users {users:?} and groups {groups:?} to break glass, but no expiry sweeper runs ({flag}): an armed object would keep its GitOps tool paused past maxDuration, with nothing to end it. Run the sweeper (--break-glass-sweep-interval above 0 with cluster access; chart: breakGlass.restoreAtExpiry: true) or allow no one (empty breakGlass.allowedUsers and allowedGroups)"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str) -> Policy {
        Policy::from_yaml(yaml, "p.yaml").unwrap()
    }

    fn argocd_in(namespace: &str, flag: &'static str) -> Serving {
        Serving {
            argocd_namespaces: vec![(namespace.to_owned(), flag)],
            no_sweeper: None,
        }
    }

    /// Issue 48: `--argocd-namespace openshift-gitops` with the default
    /// controllers started without a word, and Argo CD's syncs were denied.
    #[test]
    fn controllers_must_cover_argo_cds_namespace() {
        let defaults = policy("{}");
        assert!(
            defaults
                .check_serving(&argocd_in("argocd", "--argocd-namespace"))
                .is_ok()
        );
        let err = defaults
            .check_serving(&argocd_in("openshift-gitops", "--argocd-namespace"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("p.yaml: controllers (and trusted) cover no service account of namespace `openshift-gitops`, where Argo CD runs (--argocd-namespace)")
                && err.contains("system:serviceaccount:openshift-gitops:argocd-application-controller"),
            "{err}"
        );
        for covered in [
            "controllers: {users: ['system:serviceaccount:openshift-gitops:openshift-gitops-argocd-application-controller']}\n",
            "trusted: {users: ['system:serviceaccount:openshift-gitops:team-controller']}\n",
            "gitops: {argocd: {enabled: false}}\n",
        ] {
            let serving = argocd_in("openshift-gitops", "--local-argocd-namespace");
            assert!(policy(covered).check_serving(&serving).is_ok(), "{covered}");
        }
        let flux_only = policy(
            "controllers: {users: ['system:serviceaccount:flux-system:kustomize-controller']}\n",
        );
        let err = flux_only
            .check_serving(&argocd_in("argocd", "--local-argocd-namespace"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("(--local-argocd-namespace)"), "{err}");
        assert!(
            flux_only.check_serving(&Serving::default()).is_ok(),
            "no Argo CD here"
        );
    }

    /// The careless operator's review of issue 48: a glob over Argo CD's
    /// accounts, copied from the docs, exempted argocd-server's writes.
    #[test]
    fn a_pattern_covering_argocd_server_is_refused() {
        for wide in [
            "controllers: {users: ['system:serviceaccount:argocd:*']}\n",
            "controllers: {users: ['system:serviceaccount:{argocd,flux-system}:*']}\n",
            "controllers: {groups: ['system:serviceaccounts:argocd']}\n",
            "trusted: {users: ['system:serviceaccount:argocd:argocd-server']}\n",
        ] {
            let err = policy(wide)
                .check_serving(&argocd_in("argocd", "--argocd-namespace"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("cover `system:serviceaccount:argocd:argocd-server`"),
                "{wide}: {err}"
            );
        }
    }

    /// Issue 48: break-glass allowed where the chart turned the sweeper off
    /// armed Flux objects with no record, and nothing ended them.
    #[test]
    fn break_glass_needs_a_sweeper() {
        let off = Serving {
            argocd_namespaces: Vec::new(),
            no_sweeper: Some("--break-glass-sweep-interval=0"),
        };
        let allowed = policy("breakGlass: {allowedGroups: [sre-oncall]}\n");
        let err = allowed.check_serving(&off).unwrap_err().to_string();
        assert!(
            err.starts_with("p.yaml: breakGlass allows users [] and groups [\"sre-oncall\"] to break glass, but no expiry sweeper runs (--break-glass-sweep-interval=0)")
                && err.contains("breakGlass.restoreAtExpiry: true"),
            "{err}"
        );
        assert!(allowed.check_serving(&Serving::default()).is_ok());
        assert!(
            policy("{}").check_serving(&off).is_ok(),
            "no one may break glass"
        );
    }
}
