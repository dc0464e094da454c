//! How long the certificates `status` sees stay valid: the serving
//! certificate (the chart's Secret, or what a URL's handshake presents) and
//! the caBundle's CAs, each said as "expires in N days" or "expired N days
//! ago", in the server's words ([`crate::certs::expiry`]).

use serde::Serialize;

use crate::certs::expiry::{self, Certificate, Standing};
use crate::plugin::out::{Color, Out};

/// One certificate's dates, as `status` reports them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Expiry {
    pub(super) subject: String,
    pub(super) not_after: String,
    /// Whole days left, negative once expired; null before notBefore.
    pub(super) days_left: Option<i64>,
    /// Within its dates now: a TLS client accepts it.
    pub(super) usable: bool,
    /// "expires in 62 days (2027-02-07T00:00:00Z)".
    pub(super) text: String,
}

impl Expiry {
    fn of(cert: &Certificate, now: i64) -> Self {
        let standing = cert.validity.standing(now);
        let date = match standing {
            Standing::NotYetValid { .. } => cert.validity.not_before_text(),
            _ => cert.validity.not_after_text(),
        };
        Expiry {
            subject: cert.subject.clone(),
            not_after: cert.validity.not_after_text(),
            days_left: standing.days_left(),
            usable: standing.usable(),
            text: format!("{} ({date})", standing.text()),
        }
    }

    /// Worth a red word: past its dates, or under the server's warning
    /// threshold.
    fn alarming(&self) -> bool {
        let warn_days = expiry::WARN_WITHIN_SECONDS / 86_400;
        !self.usable || self.days_left.is_some_and(|d| d < warn_days)
    }

    /// `    LABEL SUBJECT: expires in N days (DATE)`, the days red when
    /// they call for a renewal.
    pub(super) fn print(&self, out: &mut Out, label: &str) {
        out.text(format_args!("    {label} {}: ", self.subject));
        if self.alarming() {
            out.paint(&self.text, Color::Red).line("");
        } else {
            out.line(&self.text);
        }
    }
}

/// Every certificate of PEM `pem` at `now`; none when it does not parse
/// (the chain check beside it says so).
pub(super) fn of_pem(pem: &[u8], now: i64) -> Vec<Expiry> {
    expiry::certificates(pem)
        .unwrap_or_default()
        .iter()
        .map(|c| Expiry::of(c, now))
        .collect()
}

/// The first certificate of PEM `pem` (a serving chain's leaf).
pub(super) fn leaf_of_pem(pem: &[u8], now: i64) -> Option<Expiry> {
    of_pem(pem, now).into_iter().next()
}

/// A DER certificate's dates (what a handshake presented).
pub(super) fn of_der(der: &[u8], now: i64) -> Option<Expiry> {
    let der = rustls_pki_types::CertificateDer::from(der);
    let certs = expiry::from_ders(std::slice::from_ref(&der)).ok()?;
    certs.first().map(|c| Expiry::of(c, now))
}

/// Whether a caBundle with these CAs can still verify anything: false when
/// it holds certificates and none is within its dates (the apiserver checks
/// a CA's dates as Go's x509 does).
pub(super) fn some_ca_usable(cas: &[Expiry]) -> bool {
    cas.is_empty() || cas.iter().any(|c| c.usable)
}
