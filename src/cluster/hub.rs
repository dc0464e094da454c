//! Where a GitOps tool's sources are read from: this cluster, a hub whose
//! tool deploys here, or both; and the names that mean this cluster in the
//! hub. `driftguard serve` describes Argo CD (`--argocd-kubeconfig`,
//! `--local-argocd-namespace`) and Flux (`--flux-kubeconfig`, `--local-flux`)
//! alike, with `--cluster-name` for both; the watches and the sweeper read it.

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
