//! Where a GitOps tool's sources are read from: this cluster, a hub whose
//! tool deploys here, or both; and the names that mean this cluster in the
//! hub. `driftguard serve` describes Argo CD (`--argocd-kubeconfig`,
//! `--local-argocd-namespace`) and Flux (`--flux-kubeconfig`, `--local-flux`)
//! alike, with `--cluster-name` for both; the watches and the sweeper read it,
//! and the webhook tells it to `kubectl driftguard break-glass`
//! ([`names_warning`]).

use anyhow::Context;

use crate::policy::argocd::ThisCluster;

/// One tool's sources. `L` says where this cluster's own installation is
/// read beside a hub's: Argo CD's namespace, or `()` for Flux (which is read
/// in every namespace).
#[derive(Clone)]
pub struct ToolSources<L = ()> {
    /// The hub whose installation deploys here; `None`: this cluster's.
    pub hub: Option<kube::Client>,
    /// With a hub, this cluster's own installation too (ignored without).
    pub local: Option<L>,
    /// What the hub calls this cluster (`--cluster-name`).
    pub cluster_names: Vec<String>,
}

impl<L> Default for ToolSources<L> {
    /// This cluster's installation only.
    fn default() -> Self {
        ToolSources {
            hub: None,
            local: None,
            cluster_names: Vec::new(),
        }
    }
}

impl<L> ToolSources<L> {
    /// With a client for the hub of `kubeconfig` (given as `flag`), if any.
    pub async fn connect(
        kubeconfig: Option<&std::path::Path>,
        flag: &str,
        local: Option<L>,
        cluster_names: &[String],
    ) -> anyhow::Result<Self> {
        let hub = match kubeconfig {
            Some(path) => Some(
                super::client(Some(path))
                    .await
                    .with_context(|| format!("{flag}: {}", path.display()))?,
            ),
            None => None,
        };
        Ok(ToolSources {
            hub,
            local,
            cluster_names: cluster_names.to_vec(),
        })
    }

    /// The client the tool's first installation is read with: the hub's, or `here`.
    pub fn client<'a>(&'a self, here: &'a kube::Client) -> &'a kube::Client {
        self.hub.as_ref().unwrap_or(here)
    }

    /// This cluster's own installation, read beside a hub's.
    pub fn beside_hub(&self) -> Option<&L> {
        self.local.as_ref().filter(|_| self.hub.is_some())
    }

    /// What the cluster holding the first installation calls this one: the
    /// hub's names for it, or in-cluster.
    pub fn this_cluster(&self) -> ThisCluster {
        match self.hub {
            Some(_) => ThisCluster::named(&self.cluster_names),
            None => ThisCluster::default(),
        }
    }
}

/// How driftguard tells the plugin what the hub calls this cluster: one
/// `Warning:` of its answer to an allowed dry run of a break-glass write
/// (arming or ending) by someone the policy lets break glass, when serve
/// reads a hub (`--argocd-kubeconfig`). The plugin sends that dry run
/// anyway, so the names come from the running server's own
/// `--cluster-name`, through the apiserver, with no copy to drift, no
/// grant for either side, and no path to driftguard's pods
/// (docs/fleets.md).
const NAMES_TOLD: &str =
    "driftguard: break-glass: the hub (--argocd-kubeconfig) calls this cluster ";

/// The most bytes of names told: a warning past the apiserver's limits
/// (4 KiB in all, 256 characters each beyond that) may be cut, and a cut
/// one is not JSON, so never read.
const MAX_NAMES_TOLD: usize = 200;

/// The warning that tells `names`, as a JSON array after `NAMES_TOLD`;
/// `None` when there are none or they are too long to tell whole.
pub fn names_warning(names: &[String]) -> Option<String> {
    let json = serde_json::to_string(names).ok()?;
    (!names.is_empty() && json.len() <= MAX_NAMES_TOLD).then(|| format!("{NAMES_TOLD}{json}"))
}

/// The names a dry run's `warnings` tell ([`names_warning`]): `Ok(None)`
/// when none does (a server that reads no hub, or an older one), `Err(why)`
/// when two tell different names (some other webhook claims to be
/// driftguard), which the plugin does not choose between.
pub fn names_told(warnings: &[String]) -> Result<Option<Vec<String>>, String> {
    let mut told: Option<Vec<String>> = None;
    for w in warnings {
        let Some(names) = w.strip_prefix(NAMES_TOLD) else {
            continue;
        };
        let Ok(names) = serde_json::from_str::<Vec<String>>(names) else {
            continue;
        };
        if names.is_empty() || names.iter().any(String::is_empty) {
            continue;
        }
        match &told {
            Some(before) if *before != names => {
                return Err(format!(
                    "the answer names this cluster in the hub twice, differently ({} and {})",
                    before.join(","),
                    names.join(",")
                ));
            }
            _ => told = Some(names),
        }
    }
    Ok(told)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_told_are_read_back_exactly() {
        let spoke = names(&["https://spoke-1.example.com:6443", "spoke \"1\", eu"]);
        let w = names_warning(&spoke).unwrap();
        let other = "driftguard: BREAK-GLASS by oncall on deployment/web".to_owned();
        assert_eq!(
            names_told(&[other.clone(), w.clone()]),
            Ok(Some(spoke.clone()))
        );
        // The same twice (two replicas, both webhooks): one answer.
        assert_eq!(names_told(&[w.clone(), w.clone()]), Ok(Some(spoke.clone())));
        assert_eq!(names_told(&[other]), Ok(None));
        assert_eq!(names_warning(&[]), None);
    }

    #[test]
    fn names_told_twice_differently_or_cut_are_not_read() {
        let w = names_warning(&names(&["https://spoke-1.example.com:6443"])).unwrap();
        let forged = names_warning(&names(&["https://spoke-2.example.com:6443"])).unwrap();
        let why = names_told(&[w.clone(), forged]).unwrap_err();
        assert!(why.contains("spoke-1") && why.contains("spoke-2"), "{why}");
        // Cut by the apiserver: not JSON, never half a name.
        let cut = w[..w.len() - 3].to_owned();
        assert_eq!(names_told(&[cut]), Ok(None));
        assert_eq!(names_told(&[format!("{NAMES_TOLD}[\"\"]")]), Ok(None));
        // Too long to tell whole: not told.
        assert_eq!(names_warning(&[("x".repeat(MAX_NAMES_TOLD))]), None);
    }
}
