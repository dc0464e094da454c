//! driftguard and the cluster it protects (kube-rs): the webhook rules and their
//! registration, and reading the parent of a `…/scale` write.

pub mod events;
pub mod parents;
pub mod register;
pub mod rules;
pub mod watch;

/// A kube client from `kubeconfig`, or inferred (in-cluster, `$KUBECONFIG`,
/// `~/.kube/config`).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| e.to_string())?,
    };
    kube::Client::try_from(config).map_err(|e| e.to_string())
}
