//! Polling reloaders for the policy (a ConfigMap volume) and the serving pair
//! (a Secret volume). Kubernetes swaps a symlink to update such volumes, which a
//! file watch can miss, so we compare contents on an interval. A bad new version
//! keeps the last good one serving, is logged once and counted.
//!
//! Each reloader is a thread of its own: reading files and compiling a policy
//! block, and the async workers must keep answering reviews and probes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::cert_expiry;
use super::probes::Health;
use super::tls::{CertStore, TlsError, certified_key};
use crate::certs::expiry;
use crate::metrics::Metrics;
use crate::policy;
use crate::policy::serving::Serving;
use crate::service::PolicyHandle;

/// The contents of a set of files, to notice a change however it was made.
struct Snapshot {
    paths: Vec<PathBuf>,
    last: Vec<Option<Vec<u8>>>,
}

impl Snapshot {
    fn new(paths: Vec<PathBuf>) -> Self {
        let last = paths.iter().map(|p| std::fs::read(p).ok()).collect();
        Self { paths, last }
    }

    /// True when any file's content differs from the last call.
    fn changed(&mut self) -> bool {
        let now: Vec<Option<Vec<u8>>> = self.paths.iter().map(|p| std::fs::read(p).ok()).collect();
        let changed = now != self.last;
        self.last = now;
        changed
    }
}

/// Calls `on_change` on a thread named `name` whenever the contents of
/// `paths` differ from the last look, `interval` apart. The thread lives as
/// long as the process.
fn spawn_poller(
    name: &str,
    paths: Vec<PathBuf>,
    interval: Duration,
    mut on_change: impl FnMut() + Send + 'static,
) -> anyhow::Result<()> {
    // Read now, at startup like the first load, so that a change made as soon
    // as the server is ready is not taken for the starting point.
    let mut snapshot = Snapshot::new(paths);
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(interval);
                if snapshot.changed() {
                    on_change();
                }
            }
        })
        .with_context(|| format!("cannot start the {name} thread"))?;
    Ok(())
}

/// The policy and Applications files, read and checked against what the
/// server provides ([`Serving`]): at start and at every reload alike.
pub(crate) fn load(
    policy_path: Option<&std::path::Path>,
    app_paths: &[PathBuf],
    serving: &Serving,
) -> Result<(policy::Policy, Vec<String>), policy::PolicyError> {
    let (policy, notes) = policy::load_sources(policy_path, app_paths)?;
    policy.check_serving(serving)?;
    Ok((policy, notes))
}

/// Every `interval`, reloads the policy into `handle` when the policy file
/// or an Argo CD Application file changed.
pub(crate) fn spawn_policy_reloader(
    policy_path: PathBuf,
    app_paths: Vec<PathBuf>,
    serving: Serving,
    handle: PolicyHandle,
    metrics: Arc<Metrics>,
    interval: Duration,
) -> anyhow::Result<()> {
    let mut files = vec![policy_path.clone()];
    files.extend(app_paths.iter().cloned());
    spawn_poller("policy-reload", files, interval, move || {
        reload_policy(&policy_path, &app_paths, &serving, &handle, &metrics);
    })
}

/// Loads the policy again; on failure the last good one stays in force.
/// Returns whether the new policy was taken.
fn reload_policy(
    policy_path: &std::path::Path,
    app_paths: &[PathBuf],
    serving: &Serving,
    handle: &PolicyHandle,
    metrics: &Metrics,
) -> bool {
    match load(Some(policy_path), app_paths, serving) {
        Ok((policy, notes)) => {
            notes.iter().for_each(|n| tracing::info!("{n}"));
            metrics.policy_in_force(&policy);
            tracing::info!(path = %policy_path.display(), digest = %policy.digest, mode = policy.mode.as_str(), "policy reloaded");
            handle.replace(policy);
            Metrics::reloaded(&metrics.policy_reloads, true);
            metrics.policy_file_refused.set(0);
            true
        }
        Err(e) => {
            Metrics::reloaded(&metrics.policy_reloads, false);
            metrics.policy_file_refused.set(1);
            tracing::error!(error = %e, "new policy refused; the last good policy stays in force");
            false
        }
    }
}

/// Every `interval`, loads the serving pair into `store` when the
/// certificate or key file changed.
pub(crate) fn spawn_certificate_reloader(
    cert: PathBuf,
    key: PathBuf,
    store: Arc<CertStore>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    interval: Duration,
) -> anyhow::Result<()> {
    let files = vec![cert.clone(), key.clone()];
    spawn_poller("cert-reload", files, interval, move || {
        reload_certificate(&cert, &key, &store, &health, &metrics);
    })
}

/// Loads the serving pair again; a pair that does not load, or that has
/// expired while the one serving has not, is refused and the old pair keeps
/// serving. Returns whether the new pair was taken.
fn reload_certificate(
    cert: &std::path::Path,
    key: &std::path::Path,
    store: &CertStore,
    health: &Health,
    metrics: &Metrics,
) -> bool {
    let pair = std::fs::read(cert)
        .and_then(|c| std::fs::read(key).map(|k| (c, k)))
        .map_err(TlsError::from)
        .and_then(|(c, k)| certified_key(&c, &k))
        .map_err(|e| e.to_string())
        .and_then(|pair| {
            let chain = cert_expiry::serving_chain(&pair.cert);
            let window = chain.as_deref().and_then(expiry::window);
            match cert_expiry::refuse_new_serving(window, health, expiry::now()) {
                Some(why) => Err(why),
                None => Ok((pair, chain)),
            }
        });
    match pair {
        Ok((pair, chain)) => {
            store.replace(pair);
            Metrics::reloaded(&metrics.certificate_reloads, true);
            tracing::info!(cert = %cert.display(), "serving certificate reloaded");
            cert_expiry::serving_in_force(chain.as_deref().unwrap_or_default(), metrics, health);
            true
        }
        Err(e) => {
            Metrics::reloaded(&metrics.certificate_reloads, false);
            tracing::error!(error = %e, "new certificate pair refused; the old pair keeps serving");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test, and where its policy file goes.
    fn policy_file(test: &str) -> (PathBuf, PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("driftguard-reload-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy.yaml");
        (dir, path)
    }

    #[test]
    fn a_policy_with_a_runaway_jq_expression_keeps_the_last_good_one() {
        let (dir, path) = policy_file("jq");
        let good = "mode: warn\nignoreDifferences:\n  - kind: Service\n    jqPathExpressions: [.spec.clusterIP]\n";
        std::fs::write(&path, good).unwrap();
        let handle = PolicyHandle::new(policy::Policy::embedded());
        let metrics = Metrics::default();
        assert!(reload_policy(
            &path,
            &[],
            &Serving::default(),
            &handle,
            &metrics
        ));
        assert_eq!(handle.current().mode, policy::Mode::Warn);
        let in_force = format!(
            "driftguard_policy_info{{digest=\"{}\",source=\"{}\",mode=\"warn\"}} 1",
            policy::digest(good),
            path.display()
        );
        assert!(metrics.encode().contains(&in_force), "{}", metrics.encode());

        let bad = "mode: audit\nignoreDifferences:\n  - kind: Service\n    jqPathExpressions: ['last(range(1e12)) as $x | .spec']\n";
        std::fs::write(&path, bad).unwrap();
        assert!(!reload_policy(
            &path,
            &[],
            &Serving::default(),
            &handle,
            &metrics
        ));
        let kept = handle.current();
        assert_eq!(kept.mode, policy::Mode::Warn, "the last good policy stays");
        assert!(
            metrics.encode().contains(&in_force),
            "the refused one is never shown in force"
        );
        assert_eq!(
            metrics.encode().matches("driftguard_policy_info{").count(),
            1
        );
        assert_eq!(
            kept.rules.iter().next().unwrap().jq[0].source(),
            ".spec.clusterIP"
        );
        assert!(
            metrics
                .encode()
                .contains("driftguard_policy_reloads_total{result=\"failure\"} 1"),
            "{}",
            metrics.encode()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 48: read as "another manifest", a policy with a `kind:` put the
    /// embedded default in force (dev-payments back to warn) and counted a
    /// success.
    #[test]
    fn a_policy_file_that_is_no_policy_keeps_the_last_good_one() {
        let (dir, path) = policy_file("kind");
        let good = "namespaces: [{names: [dev-payments], mode: enforce}]\n";
        std::fs::write(&path, good).unwrap();
        let handle = PolicyHandle::new(policy::Policy::embedded());
        let metrics = Metrics::default();
        assert!(reload_policy(
            &path,
            &[],
            &Serving::default(),
            &handle,
            &metrics
        ));
        for bad in [
            format!("kind: DriftguardPolicy\n{good}"),
            format!("apiVersion: v1\nkind: ConfigMap\ndata: {{policy: x}}\n{good}"),
            format!("{good}unknownKey: 1\n"),
        ] {
            std::fs::write(&path, &bad).unwrap();
            assert!(
                !reload_policy(&path, &[], &Serving::default(), &handle, &metrics),
                "{bad}"
            );
            let kept = handle.current();
            assert_eq!(
                kept.mode_for_namespace("dev-payments"),
                policy::Mode::Enforce,
                "{bad}"
            );
            assert_eq!(kept.digest, policy::digest(good), "{bad}");
        }
        assert!(
            metrics
                .encode()
                .contains("driftguard_policy_reloads_total{result=\"failure\"} 3"),
            "{}",
            metrics.encode()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A reload is checked against the server's flags as the start is: the
    /// chart turns the sweeper off when its values allow no break-glass, and a
    /// later ConfigMap edit allowing it must not arm what nothing ends.
    #[test]
    fn a_reload_the_servers_flags_cannot_carry_keeps_the_last_good_one() {
        let (dir, path) = policy_file("flags");
        let serving = Serving {
            argocd_namespaces: vec![("argocd".into(), "--argocd-namespace")],
            no_sweeper: Some("--break-glass-sweep-interval=0"),
        };
        std::fs::write(&path, "mode: warn\n").unwrap();
        let handle = PolicyHandle::new(policy::Policy::embedded());
        let metrics = Metrics::default();
        assert!(reload_policy(&path, &[], &serving, &handle, &metrics));
        for bad in [
            "mode: audit\nbreakGlass: {allowedGroups: [sre-oncall]}\n",
            "mode: audit\ncontrollers: {users: ['system:serviceaccount:flux-system:kustomize-controller']}\n",
        ] {
            std::fs::write(&path, bad).unwrap();
            assert!(
                !reload_policy(&path, &[], &serving, &handle, &metrics),
                "{bad}"
            );
            assert_eq!(handle.current().mode, policy::Mode::Warn, "{bad}");
        }
        assert!(
            metrics
                .encode()
                .contains("driftguard_policy_reloads_total{result=\"failure\"} 2"),
            "{}",
            metrics.encode()
        );
        // Refused for as long as the file stays so, not for an alert window.
        assert!(
            metrics
                .encode()
                .contains("driftguard_policy_file_refused 1")
        );
        std::fs::write(&path, "mode: enforce\n").unwrap();
        assert!(reload_policy(&path, &[], &serving, &handle, &metrics));
        assert!(
            metrics
                .encode()
                .contains("driftguard_policy_file_refused 0")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_truncated_policy_file_keeps_the_last_good_one() {
        let (dir, path) = policy_file("empty");
        std::fs::write(
            &path,
            "mode: warn
",
        )
        .unwrap();
        let handle = PolicyHandle::new(policy::Policy::embedded());
        let metrics = Metrics::default();
        assert!(reload_policy(
            &path,
            &[],
            &Serving::default(),
            &handle,
            &metrics
        ));
        // What a reload sees between a writer's truncation and its data, or a
        // file left with comments only.
        for text in ["", "\n  \n", "# policy\n---\n"] {
            std::fs::write(&path, text).unwrap();
            assert!(
                !reload_policy(&path, &[], &Serving::default(), &handle, &metrics),
                "{text:?}"
            );
            assert_eq!(handle.current().mode, policy::Mode::Warn, "{text:?}");
        }
        let err = policy::Policy::load(&path).unwrap_err().to_string();
        assert!(err.contains("the policy file is empty"), "{err}");
        // The defaults, asked for explicitly.
        std::fs::write(&path, "{}\n").unwrap();
        assert!(reload_policy(
            &path,
            &[],
            &Serving::default(),
            &handle,
            &metrics
        ));
        assert_eq!(handle.current().mode, policy::Policy::embedded().mode);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A reload puts the new chain's notAfter in the gauge and `/readyz`'s
    /// check, and refuses an expired pair while the one serving is valid.
    #[test]
    fn a_reload_updates_the_expiry_and_refuses_an_expired_pair() {
        use crate::certs::{Authority, expiry::Validity};
        let dir =
            std::env::temp_dir().join(format!("driftguard-reload-cert-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let ca = Authority::new("ca").unwrap();
        let now = expiry::now();
        let write = |not_after: i64| {
            let validity = Validity {
                not_before: now - 86_400,
                not_after,
            };
            let (c, k) = ca.leaf_valid("driftguard", &[], &[], validity).unwrap();
            std::fs::write(&cert, c).unwrap();
            std::fs::write(&key, k).unwrap();
        };
        let gauge = |metrics: &Metrics| {
            let text = metrics.encode();
            text.lines()
                .find_map(|l| {
                    l.strip_prefix(
                        "driftguard_certificate_expiry_timestamp_seconds{certificate=\"serving\"} ",
                    )
                })
                .map(|v| v.parse::<i64>().unwrap())
        };
        let soon = now + 10 * 86_400;
        write(soon);
        let pair = std::fs::read(&cert).unwrap();
        let first = certified_key(&pair, &std::fs::read(&key).unwrap()).unwrap();
        let store = CertStore::new(first);
        let (health, metrics) = (Health::default(), Metrics::default());
        assert!(reload_certificate(&cert, &key, &store, &health, &metrics));
        assert_eq!(gauge(&metrics), Some(soon));
        assert_eq!(health.serving_validity().map(|v| v.not_after), Some(soon));

        write(now - 30 * 86_400);
        assert!(!reload_certificate(&cert, &key, &store, &health, &metrics));
        assert_eq!(gauge(&metrics), Some(soon), "the pair serving is shown");
        assert_eq!(health.serving_validity().map(|v| v.not_after), Some(soon));

        let far = now + 400 * 86_400;
        write(far);
        assert!(reload_certificate(&cert, &key, &store, &health, &metrics));
        assert_eq!(gauge(&metrics), Some(far));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
