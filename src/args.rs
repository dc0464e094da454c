//! Flag groups shared by more than one command (`serve`, `check`,
//! `register`), kept apart from the CLI so that the server can take them
//! without importing the command line.

use std::path::PathBuf;
use std::time::Duration;

/// The decision deadline, shared by `serve` and `check`.
#[derive(Clone, Debug, clap::Args)]
pub struct DecisionTimeout {
    /// Longest one review may take in `serve` (its body, the memory budget, a scale parent's
    /// read and the decision with its queueing) or one decision in `check`, before it is
    /// answered by --on-error (`check`: exit 2). Keep it below the webhooks' timeoutSeconds (5
    /// by default).
    #[arg(long, env = "DRIFTGUARD_DECISION_TIMEOUT", default_value = "2s", value_parser = decision_timeout)]
    pub decision_timeout: Duration,
}

/// The apiserver waits at most 30 s for a webhook; a longer deadline could
/// never be met, and zero would fail every review.
const MAX_DECISION_TIMEOUT: Duration = Duration::from_secs(30);

/// A duration flag that cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DurationArgError {
    /// Not a duration at all.
    #[error("`{0}` is not a duration such as 5s: {1}")]
    Syntax(String, jiff::Error),
    /// A duration below zero.
    #[error("`{0}` must not be negative")]
    Negative(String),
    /// A decision deadline of zero, or one no apiserver would wait for.
    #[error(
        "`{0}` is out of range: the decision deadline must be more than 0 and less than {max}s (the longest an apiserver waits for a webhook); keep it below the webhooks' timeoutSeconds",
        max = MAX_DECISION_TIMEOUT.as_secs()
    )]
    DeadlineOutOfRange(String),
}

fn decision_timeout(text: &str) -> Result<Duration, DurationArgError> {
    let d = duration(text)?;
    if d.is_zero() || d >= MAX_DECISION_TIMEOUT {
        return Err(DurationArgError::DeadlineOutOfRange(text.to_owned()));
    }
    Ok(d)
}

/// `4h`, `30s`, `500ms`.
pub(crate) fn duration(text: &str) -> Result<Duration, DurationArgError> {
    let d: jiff::SignedDuration = text
        .parse()
        .map_err(|e| DurationArgError::Syntax(text.to_owned(), e))?;
    Duration::try_from(d).map_err(|_| DurationArgError::Negative(text.to_owned()))
}

/// The policy file and Argo CD Applications, shared by `serve`, `check` and `register`.
#[derive(Clone, Debug, clap::Args)]
pub struct PolicySource {
    /// Policy file (YAML). Without it, the embedded default policy applies.
    #[arg(long, env = "DRIFTGUARD_POLICY")]
    pub policy: Option<PathBuf>,
    /// Argo CD Application manifest(s) whose spec.ignoreDifferences apply to the objects they track.
    #[arg(
        long = "argocd-application",
        env = "DRIFTGUARD_ARGOCD_APPLICATION",
        value_delimiter = ','
    )]
    pub argocd_applications: Vec<PathBuf>,
}
