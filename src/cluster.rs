//! driftguard and the cluster it protects (kube-rs): the webhook rules and their
//! registration, reading the parent of a `…/scale` write, the GitOps sources,
//! and Events. Break-glass's own writes are in `crate::breakglass`.

pub mod bounded;
pub mod events;
pub mod guard;
pub mod parents;
pub mod register;
pub mod rules;
pub mod source_cache;
pub mod source_cost;
pub mod watch;

/// Why no kube client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("{0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("{0}")]
    Client(#[from] kube::Error),
}

/// A kube client from `kubeconfig`, or inferred (in-cluster, `$KUBECONFIG`,
/// `~/.kube/config`).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let located = |source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let file = kube::config::Kubeconfig::read_from(path).map_err(located)?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(located)?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}
