//! What the soaks measure: a client as a control plane's user, percentiles,
//! a Prometheus sample, a process's memory.

use std::time::Duration;

use crate::control_plane::ControlPlane;

/// A client as `user`, impersonating the service account `impersonate` names.
pub async fn client(plane: &ControlPlane, user: &str, impersonate: Option<&str>) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig(user)).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    if let Some(service_account) = impersonate {
        let ns = service_account.split(':').nth(2).unwrap_or_default();
        config.auth_info.impersonate = Some(service_account.to_owned());
        config.auth_info.impersonate_groups = Some(vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
        ]);
    }
    config.read_timeout = Some(Duration::from_secs(30));
    kube::Client::try_from(config).unwrap()
}

/// The `q` quantile of `values` (nearest rank); 0 for none.
pub fn percentile(values: &[u64], q: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// The value of the unlabelled sample `name` in Prometheus text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// A `/proc/PID/status` field in KiB (VmRSS, VmHWM); 0 when unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim_start_matches(':')
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}
