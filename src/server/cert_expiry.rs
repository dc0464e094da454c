//! The serving chain's and the client CA's expiry as the server holds them:
//! `driftguard_certificate_expiry_timestamp_seconds`, a log line at start and
//! at each serving reload (an error when expired or not yet valid, a warning
//! within [`WARN_WITHIN_SECONDS`]), and the serving window that `/readyz`
//! checks ([`super::probes::Health::not_ready`]).
//!
//! The gauge is notAfter itself, not the seconds left: a fact that stays true
//! between reloads without a clock ticking it, as cert-manager's and the
//! blackbox exporter's expiry metrics are, so that an alert says
//! `… - time() < 14 * 86400` and a dashboard shows a date.

use rustls_pki_types::CertificateDer;

use super::probes::Health;
use crate::certs::expiry::{self, Certificate, Standing, Validity, WARN_WITHIN_SECONDS};
use crate::metrics::{CertificateLabels, Metrics};

/// The `certificate` label of the webhook's serving chain.
pub(crate) const SERVING: &str = "serving";
/// The `certificate` label of the `--client-ca` bundle.
pub(crate) const CLIENT_CA: &str = "client-ca";

/// The serving chain's certificates, or `None` (logged) when x509-parser
/// cannot read one: rustls took the pair, so this only loses the dates.
pub(crate) fn serving_chain(chain: &[CertificateDer<'_>]) -> Option<Vec<Certificate>> {
    expiry::from_ders(chain)
        .inspect_err(|e| tracing::warn!(error = %e, "cannot read the serving certificate's dates: no expiry metric or readiness check for it"))
        .ok()
}

/// Puts serving chain `certs` in force for the gauge, the log and `/readyz`.
pub(crate) fn serving_in_force(certs: &[Certificate], metrics: &Metrics, health: &Health) {
    let window = record(SERVING, certs, metrics, expiry::now());
    health.set_serving_validity(window);
}

/// Reads the `--client-ca` bundle's dates into the gauge and the log. An
/// expired client CA leaves readiness alone: rustls checks the dates of the
/// client's certificate, not those of the CA it trusts, so clients it
/// signed are let in while their own certificates are valid.
pub(crate) fn client_ca_in_force(pem: &[u8], metrics: &Metrics) {
    match expiry::certificates(pem) {
        Ok(certs) => {
            record(CLIENT_CA, &certs, metrics, expiry::now());
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the --client-ca certificates' dates: no expiry metric for them");
        }
    }
}

/// Sets `role`'s gauge to the earliest notAfter of `certs` and logs each
/// one that is expired, not yet valid or expiring; returns their window.
fn record(
    role: &'static str,
    certs: &[Certificate],
    metrics: &Metrics,
    now: i64,
) -> Option<Validity> {
    let labels = CertificateLabels { certificate: role };
    let Some(window) = expiry::window(certs) else {
        metrics.certificate_expiry.remove(&labels);
        return None;
    };
    metrics
        .certificate_expiry
        .get_or_create(&labels)
        .set(window.not_after);
    for cert in certs {
        log(role, cert, now);
    }
    // One line for the lot: a bundle of many CAs logs only those to act on.
    tracing::info!(
        certificate = role,
        count = certs.len(),
        not_after = %window.not_after_text(),
        "the {role} certificate in force {}",
        window.standing(now).text()
    );
    Some(window)
}

/// A line for a certificate to act on (expired, not yet valid, expiring):
/// dates and subject only, never key material.
fn log(role: &'static str, cert: &Certificate, now: i64) {
    let v = cert.validity;
    let standing = v.standing(now);
    let what = standing.text();
    let (subject, not_before, not_after) = (&cert.subject, v.not_before_text(), v.not_after_text());
    match (standing, role) {
        (Standing::Expired { .. } | Standing::NotYetValid { .. }, SERVING) => tracing::error!(
            certificate = role, %subject, %not_before, %not_after,
            "the serving certificate {what}: the apiserver refuses every call to this replica, which stays unready until a valid pair is mounted (read again without a restart; docs/troubleshooting.md)"
        ),
        (Standing::Expired { .. } | Standing::NotYetValid { .. }, _) => tracing::error!(
            certificate = role, %subject, %not_before, %not_after,
            "a --client-ca certificate {what}: clients it signed are let in only while their own certificates are valid; replace it with the CA of the apiserver's current client certificate and restart (docs/troubleshooting.md)"
        ),
        (Standing::Expiring { .. }, _) => tracing::warn!(
            certificate = role, %subject, %not_before, %not_after,
            "the {role} certificate {what}, under {} days: renew it (docs/troubleshooting.md)",
            WARN_WITHIN_SECONDS / 86_400
        ),
        (Standing::Valid { .. }, _) => {}
    }
}

/// Whether a new serving chain with `new` as its window is refused: one that
/// has expired while the pair serving has not would only make every call
/// fail. A not-yet-valid one is taken: a freshly issued certificate looks so
/// under a little clock skew, and the file poll would not offer it again.
pub(crate) fn refuse_new_serving(
    new: Option<Validity>,
    health: &Health,
    now: i64,
) -> Option<String> {
    let new = new?.standing(now);
    let serving_usable = health
        .serving_validity()
        .is_none_or(|v| v.standing(now).usable());
    (matches!(new, Standing::Expired { .. }) && serving_usable)
        .then(|| format!("its certificate {}", new.text()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    fn cert(not_before: i64, not_after: i64) -> Certificate {
        Certificate {
            subject: "CN=driftguard".into(),
            validity: Validity {
                not_before,
                not_after,
            },
        }
    }

    /// The gauge holds notAfter itself; the earliest of a bundle; no series
    /// for no certificate.
    #[test]
    fn the_gauge_is_the_earliest_not_after() {
        let metrics = Metrics::default();
        let now = expiry::now();
        let bundle = [cert(0, now + 400 * DAY), cert(0, now - 3 * DAY)];
        let window = record(CLIENT_CA, &bundle, &metrics, now).unwrap();
        assert_eq!(window.not_after, now - 3 * DAY);
        let line = format!(
            "driftguard_certificate_expiry_timestamp_seconds{{certificate=\"client-ca\"}} {}",
            now - 3 * DAY
        );
        assert!(metrics.encode().contains(&line), "{}", metrics.encode());
        assert_eq!(record(CLIENT_CA, &[], &metrics, now), None);
        assert!(!metrics.encode().contains("certificate=\"client-ca\""));
    }

    /// An expired pair does not replace a usable one; it does replace an
    /// expired one, and a not-yet-valid one is always taken.
    #[test]
    fn an_expired_new_pair_is_refused_only_over_a_usable_one() {
        let now = expiry::now();
        let health = Health::default();
        let expired = Some(cert(0, now - DAY).validity);
        let future = Some(cert(now + DAY, now + 90 * DAY).validity);
        let refused = refuse_new_serving(expired, &health, now);
        assert_eq!(
            refused.as_deref(),
            Some("its certificate expired 1 day ago")
        );
        assert_eq!(refuse_new_serving(future, &health, now), None);
        health.set_serving_validity(expired);
        assert_eq!(refuse_new_serving(expired, &health, now), None);
        assert_eq!(refuse_new_serving(None, &health, now), None);
    }
}
