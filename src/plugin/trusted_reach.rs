//! `status`'s check of who else may act as a trusted identity: lists the
//! cluster's RBAC objects and the sync service accounts Flux and Argo CD
//! impersonate, and runs [`crate::policy::reach`] over them. Nothing here
//! fails `status`: what cannot be read is said.

use k8s_openapi::Resource as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::ListParams;
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;
use serde_json::Value;

use super::PluginError;
use super::api::{Api, answer};
use super::out::{Color, Out, outln};
use crate::policy::Policy;
use crate::policy::flux::FluxKind;
use crate::policy::impersonation::{self, AppProject};
use crate::policy::reach::{Finding, Rbac, Reach, SyncTrust, reach};

/// The `trustedIdentityReach` part of `status -o json`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReachReport {
    /// False when no RBAC object could be listed.
    checked: bool,
    /// Why not checked (the first refusal); absent when checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
    /// `findings`, `clusterAdmins` and `missingRoles`, when checked.
    #[serde(flatten)]
    found: Option<Reach>,
    /// Not checked: no findings (and no `clusterAdmins`, `missingRoles`:
    /// unknown, not none).
    #[serde(skip_serializing_if = "Option::is_none")]
    findings: Option<[Finding; 0]>,
    /// The derived accounts checked too; absent when not checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    sync_accounts: Option<Vec<SyncAccount>>,
    /// What could not be listed, and why.
    not_readable: Vec<String>,
}

impl ReachReport {
    /// No RBAC object could be listed: `not_readable` says why.
    pub fn not_checked(not_readable: Vec<String>) -> Self {
        ReachReport {
            checked: false,
            why: not_readable.first().cloned(),
            found: None,
            findings: Some([]),
            sync_accounts: None,
            not_readable,
        }
    }
}

/// A service account a GitOps source makes driftguard trust.
#[derive(Debug, Serialize)]
pub struct SyncAccount {
    username: String,
    origin: String,
}

/// Who else may act as a trusted identity, from the cluster's RBAC.
pub async fn report(
    api: &Api,
    policy: &Policy,
    argocd_namespace: &str,
) -> Result<ReachReport, PluginError> {
    let mut not_readable = Vec::new();
    let mut rbac = Rbac::default();
    let mut listed = 0;
    macro_rules! list_into {
        ($field:ident, $kind:ty) => {
            let listed_now = api.all::<$kind>().list(&ListParams::default()).await;
            match answer(
                listed_now,
                format_args!("list {}", <$kind>::URL_PATH_SEGMENT),
            )? {
                Ok(list) => {
                    listed += 1;
                    rbac.$field = list.items;
                }
                // The apiserver's refusal names the verb and the resource.
                Err(r) => not_readable.push(r.message),
            }
        };
    }
    list_into!(cluster_roles, ClusterRole);
    list_into!(roles, Role);
    list_into!(cluster_role_bindings, ClusterRoleBinding);
    list_into!(role_bindings, RoleBinding);
    if listed == 0 {
        return Ok(ReachReport::not_checked(not_readable));
    }
    let sync = sync_accounts(api, policy, argocd_namespace, &mut not_readable).await?;
    let found: Reach = reach(&policy.controllers, &policy.trusted, &sync, &rbac);
    Ok(ReachReport {
        checked: true,
        why: None,
        found: Some(found),
        findings: None,
        sync_accounts: Some(
            sync.into_iter()
                .map(|s| SyncAccount {
                    username: s.username,
                    origin: s.origin,
                })
                .collect(),
        ),
        not_readable,
    })
}

/// Every object of a kind (in `namespace`, else everywhere), or why not
/// (404: the type is not served, an empty list).
async fn list(
    api: &Api,
    ar: &ApiResource,
    namespace: Option<&str>,
) -> Result<Result<Vec<Value>, String>, PluginError> {
    Ok(match api.list_objects(ar, namespace).await? {
        Ok(items) => Ok(items),
        Err(r) if r.code == 404 => Ok(Vec::new()),
        Err(r) => Err(r.message),
    })
}

/// Where Flux's Kustomizations and HelmReleases are served (the versions
/// driftguard's sources read).
pub fn flux_resource(kind: FluxKind) -> ApiResource {
    let gvk = match kind {
        FluxKind::Kustomization => {
            GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization")
        }
        FluxKind::HelmRelease => {
            GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease")
        }
    };
    ApiResource::from_gvk(&gvk)
}

/// Argo CD's AppProjects.
pub fn app_project_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "AppProject",
    ))
}

/// The service accounts Flux Kustomizations and HelmReleases name in
/// `spec.serviceAccountName`, and those Argo CD syncs Applications as
/// (sync impersonation on in argocd-cm): driftguard trusts each for its own
/// objects when it watches Flux or Argo CD.
async fn sync_accounts(
    api: &Api,
    policy: &Policy,
    argocd_namespace: &str,
    not_readable: &mut Vec<String>,
) -> Result<Vec<SyncTrust>, PluginError> {
    let mut out = Vec::new();
    if policy.flux {
        for kind in [FluxKind::Kustomization, FluxKind::HelmRelease] {
            match list(api, &flux_resource(kind), None).await? {
                Ok(items) => out.extend(items.iter().filter_map(|item| {
                    let src = crate::sources::flux_from_value(kind, item).ok()?;
                    Some(SyncTrust {
                        username: src.service_account?,
                        origin: format!("Flux {} {}/{}", kind.as_str(), src.namespace, src.name),
                    })
                })),
                Err(why) => not_readable.push(format!("{}s: {why}", kind.as_str())),
            }
        }
    }
    if policy.argocd.is_some() {
        let got = api
            .namespaced::<ConfigMap>(argocd_namespace)
            .get("argocd-cm")
            .await;
        let enabled = match answer(got, "get configmap argocd-cm")? {
            Ok(cm) => cm.data.is_some_and(|data| {
                let data = data
                    .into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                impersonation::enabled(&data)
            }),
            Err(r) if r.code == 404 => false,
            Err(r) => {
                not_readable.push(format!("argocd-cm: {}", r.message));
                false
            }
        };
        if enabled {
            let projects = app_project_resource();
            let projects: Vec<AppProject> =
                match list(api, &projects, Some(argocd_namespace)).await? {
                    Ok(items) => items
                        .iter()
                        .filter_map(|p| AppProject::from_value(p).ok())
                        .collect(),
                    Err(why) => {
                        not_readable.push(format!("AppProjects: {why}"));
                        Vec::new()
                    }
                };
            let apps = match list(
                api,
                &crate::breakglass::application::application_resource(),
                None,
            )
            .await?
            {
                Ok(items) => items
                    .iter()
                    .filter_map(|a| crate::policy::argocd::from_value(a).ok())
                    .collect(),
                Err(why) => {
                    not_readable.push(format!("Applications: {why}"));
                    Vec::new()
                }
            };
            out.extend(
                impersonation::sync_accounts(&apps, &projects, true, argocd_namespace)
                    .into_iter()
                    .map(|a| SyncTrust {
                        origin: format!(
                            "Argo CD Application {}/{}",
                            if a.namespace.is_empty() {
                                argocd_namespace
                            } else {
                                &a.namespace
                            },
                            a.application
                        ),
                        username: a.service_account,
                    }),
            );
        }
    }
    out.sort_by(|a, b| (&a.username, &a.origin).cmp(&(&b.username, &b.origin)));
    out.dedup_by(|a, b| a.username == b.username && a.origin == b.origin);
    Ok(out)
}

/// The text of the report: a warning per trusted identity and namespace,
/// each binding that reaches it on its own line.
pub(crate) fn print(out: &mut Out, r: &ReachReport) {
    const TITLE: &str = "Trusted identities others can act as";
    let Some(found) = r.found.as_ref().filter(|_| r.checked) else {
        let more = r.not_readable.len().saturating_sub(1);
        let more = if more > 0 {
            format!(" (and {more} more refused)")
        } else {
            String::new()
        };
        let why = r.why.as_deref().unwrap_or_default();
        outln!(out, "{TITLE}: not checked: {why}{more}");
        return;
    };
    let findings = &found.findings;
    if findings.is_empty() {
        outln!(out, "{TITLE}: none found");
    } else {
        out.text(format_args!("{TITLE}: "))
            .paint(&findings.len().to_string(), Color::Red)
            .line(" (warning: whoever can act as one is exempt from driftguard)");
    }
    let mut last = String::new();
    for f in findings {
        let scope = match &f.namespace {
            Some(ns) => format!("in namespace {ns}"),
            None => "in every namespace".to_owned(),
        };
        let head = format!("  {} ({}), {scope}:", f.identity, f.trusted_by);
        if head != last {
            out.line(&head);
            last = head;
        }
        let ways: Vec<String> = f
            .ways
            .iter()
            .map(|w| {
                if w.names.is_empty() {
                    w.how.as_str().to_owned()
                } else {
                    format!("{} ({})", w.how.as_str(), w.names.join(", "))
                }
            })
            .collect();
        outln!(
            out,
            "    {} through {} ({}): {}",
            f.subjects.join(", "),
            f.binding,
            f.role,
            ways.join(", ")
        );
    }
    if !findings.is_empty() {
        outln!(
            out,
            "  Place them out of reach: no edit, admin, impersonate or create pods for others in their namespaces, no trusted glob over tenants' namespaces (docs/gitops.md, Identities)."
        );
    }
    for why in &r.not_readable {
        outln!(out, "  (not read: {why})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::reach::{How, Way};
    use serde_json::json;

    #[test]
    fn the_report_serializes_as_status_prints_it() {
        let r = Reach {
            findings: vec![Finding {
                identity: "system:serviceaccount:kube-system:*".into(),
                trusted_by: "trusted.users".into(),
                namespace: Some("kube-system".into()),
                binding: "RoleBinding kube-system/x".into(),
                role: "Role kube-system/y".into(),
                subjects: vec!["User alice".into()],
                ways: vec![Way {
                    how: How::ImpersonateServiceAccounts,
                    names: vec![],
                }],
            }],
            ..Reach::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["findings"][0]["trustedBy"], "trusted.users");
        assert_eq!(
            v["findings"][0]["ways"][0]["how"],
            "impersonate serviceaccounts"
        );
        assert_eq!(v["findings"][0]["namespace"], "kube-system");
        assert_eq!(v["clusterAdmins"], json!([]));
        assert_eq!(v["missingRoles"], json!([]));

        let report = |found: Option<Reach>| ReachReport {
            checked: found.is_some(),
            why: found.is_none().then(|| "forbidden".to_owned()),
            findings: found.is_none().then_some([]),
            found,
            sync_accounts: None,
            not_readable: vec!["forbidden".into()],
        };
        let keys = |r: &ReachReport| {
            let v = serde_json::to_value(r).unwrap();
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort_unstable();
            k
        };
        assert_eq!(
            keys(&report(Some(r))),
            [
                "checked",
                "clusterAdmins",
                "findings",
                "missingRoles",
                "notReadable"
            ]
        );
        assert_eq!(
            keys(&report(None)),
            ["checked", "findings", "notReadable", "why"]
        );
    }
}
