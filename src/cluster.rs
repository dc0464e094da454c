//! driftguard and the cluster it protects (kube-rs): the webhook rules and their
//! registration, reading the parent of a `…/scale` write, the GitOps sources,
//! and Events. Break-glass's own writes are in `crate::breakglass`.

pub(crate) mod bounded;
pub mod events;
pub mod guard;
pub mod hub;
pub mod parents;
pub mod register;
pub(crate) mod registration;
pub(crate) mod rules;
pub mod source_cache;
pub mod source_cost;
pub(crate) mod watch;

/// Why no kube client could be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    /// The kubeconfig at `path` (or its context) could not be used.
    #[error("{path}: {source}")]
    Kubeconfig {
        /// The file, or `(default)`.
        path: String,
        /// Why.
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig given, and none could be inferred.
    #[error("{0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The configuration does not make a client.
    #[error("{0}")]
    Client(#[from] kube::Error),
}

/// The client configuration from `kubeconfig` (at `context`, else its
/// current one), or without a file, from the default kubeconfig at
/// `context`, or inferred (in-cluster, `$KUBECONFIG`, `~/.kube/config`).
/// The server and the kubectl plugin build theirs alike.
pub(crate) async fn config(
    kubeconfig: Option<&std::path::Path>,
    context: Option<String>,
) -> Result<kube::Config, ClientError> {
    let options = kube::config::KubeConfigOptions {
        context,
        ..Default::default()
    };
    let located = |path: &dyn std::fmt::Display| {
        let path = path.to_string();
        move |source| ClientError::Kubeconfig { path, source }
    };
    Ok(match kubeconfig {
        Some(path) => {
            let file =
                kube::config::Kubeconfig::read_from(path).map_err(located(&path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(located(&path.display()))?
        }
        None if options.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(located(&"(default)"))?,
        None => kube::Config::infer().await?,
    })
}

/// A kube client from `kubeconfig`, or inferred ([`config`]).
pub(crate) async fn client(
    kubeconfig: Option<&std::path::Path>,
) -> Result<kube::Client, ClientError> {
    Ok(kube::Client::try_from(config(kubeconfig, None).await?)?)
}
