//! When certificates stop being valid: their validity read from PEM with
//! x509-parser, judged against a clock, and said in days. The server's logs,
//! metric and readiness and the plugin's `status` all ask here, so that the
//! 14-day threshold and the wording have one source.
//!
//! Only dates and subject names are read: nothing here sees a private key.

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Under this much validity left a certificate is worth a warning: cert-manager
/// renews at a third of the lifetime left (30 days of a 90-day certificate), so
/// a certificate that reaches 14 days was not renewed. The chart's
/// `DriftguardCertificateExpiringSoon` alert uses the same number.
pub const WARN_WITHIN_SECONDS: i64 = 14 * DAY;

const DAY: i64 = 86_400;

/// A certificate's validity window, in Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// notBefore.
    pub not_before: i64,
    /// notAfter.
    pub not_after: i64,
}

/// One certificate of a PEM file: whom it names and when it is valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    /// The subject's distinguished name (at most 256 bytes): a name to find it
    /// by in a log, not a secret.
    pub subject: String,
    /// When it is valid.
    pub validity: Validity,
}

/// Where a certificate stands at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Before notBefore: refused as surely as an expired one.
    NotYetValid {
        /// Seconds until notBefore.
        starts_in: i64,
    },
    /// Past notAfter.
    Expired {
        /// Seconds since notAfter.
        ago: i64,
    },
    /// Valid, with less than [`WARN_WITHIN_SECONDS`] left.
    Expiring {
        /// Seconds until notAfter.
        left: i64,
    },
    /// Valid, with time to spare.
    Valid {
        /// Seconds until notAfter.
        left: i64,
    },
}

/// Why a PEM file's certificates could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file is not PEM.
    #[error("certificate PEM: {0}")]
    Pem(rustls_pki_types::pem::Error),
    /// A certificate that x509-parser cannot read.
    #[error("certificate {index}: not X.509 DER: {why}")]
    Der {
        /// Its place in the file, from 0.
        index: usize,
        /// x509-parser's error.
        why: String,
    },
}

/// Every certificate in PEM `pem`, in file order (empty when it holds none).
pub fn certificates(pem: &[u8]) -> Result<Vec<Certificate>, ReadError> {
    let ders: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(ReadError::Pem)?;
    from_ders(&ders)
}

/// Every certificate of a DER chain (the serving pair's, as rustls holds it).
pub fn from_ders(ders: &[CertificateDer<'_>]) -> Result<Vec<Certificate>, ReadError> {
    ders.iter()
        .enumerate()
        .map(|(index, der)| {
            let (_, cert) =
                x509_parser::parse_x509_certificate(der).map_err(|e| ReadError::Der {
                    index,
                    why: e.to_string(),
                })?;
            let subject = cert.subject().to_string();
            Ok(Certificate {
                subject: crate::text::prefix(&subject, 256).to_owned(),
                validity: Validity {
                    not_before: cert.validity().not_before.timestamp(),
                    not_after: cert.validity().not_after.timestamp(),
                },
            })
        })
        .collect()
}

/// The window in which every one of `certs` is valid (the latest notBefore,
/// the earliest notAfter): a chain is refused as soon as any link is, and the
/// first CA of a bundle to expire is the first one to replace. `None` for none.
pub fn window(certs: &[Certificate]) -> Option<Validity> {
    let not_before = certs.iter().map(|c| c.validity.not_before).max()?;
    let not_after = certs.iter().map(|c| c.validity.not_after).min()?;
    Some(Validity {
        not_before,
        not_after,
    })
}

/// Now, in Unix seconds (0 for a clock before 1970, which makes every
/// certificate not yet valid rather than panicking).
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Validity {
    /// Where this window stands at `now` (Unix seconds).
    pub fn standing(&self, now: i64) -> Standing {
        if now < self.not_before {
            Standing::NotYetValid {
                starts_in: self.not_before.saturating_sub(now),
            }
        } else if now > self.not_after {
            Standing::Expired {
                ago: now.saturating_sub(self.not_after),
            }
        } else {
            let left = self.not_after.saturating_sub(now);
            if left < WARN_WITHIN_SECONDS {
                Standing::Expiring { left }
            } else {
                Standing::Valid { left }
            }
        }
    }

    /// notAfter as RFC 3339, for people.
    pub fn not_after_text(&self) -> String {
        rfc3339(self.not_after)
    }

    /// notBefore as RFC 3339, for people.
    pub fn not_before_text(&self) -> String {
        rfc3339(self.not_before)
    }
}

fn rfc3339(seconds: i64) -> String {
    jiff::Timestamp::from_second(seconds).map_or_else(|_| format!("{seconds}s"), |t| t.to_string())
}

impl Standing {
    /// Whether a TLS peer checking dates accepts it now.
    pub fn usable(&self) -> bool {
        matches!(self, Standing::Expiring { .. } | Standing::Valid { .. })
    }

    /// Whole days of validity left (negative once expired, 0 in its last
    /// day); `None` before notBefore.
    pub fn days_left(&self) -> Option<i64> {
        match *self {
            Standing::NotYetValid { .. } => None,
            Standing::Expired { ago } => Some(-(ago.saturating_add(DAY - 1) / DAY).max(1)),
            Standing::Expiring { left } | Standing::Valid { left } => Some(left / DAY),
        }
    }

    /// "expires in 12 days", "expired 3 days ago", "becomes valid in 2 days".
    pub fn text(&self) -> String {
        match *self {
            Standing::NotYetValid { starts_in } => {
                format!("becomes valid in {}", days(starts_in))
            }
            Standing::Expired { ago } => format!("expired {} ago", days(ago)),
            Standing::Expiring { left } | Standing::Valid { left } => {
                format!("expires in {}", days(left))
            }
        }
    }
}

/// Whole days, or "less than a day".
fn days(seconds: i64) -> String {
    match seconds / DAY {
        0 => "less than a day".to_owned(),
        1 => "1 day".to_owned(),
        n => format!("{n} days"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::Authority;

    const NOW: i64 = 1_800_000_000;

    fn valid(not_before: i64, not_after: i64) -> Validity {
        Validity {
            not_before,
            not_after,
        }
    }

    #[test]
    fn a_certificate_stands_expired_expiring_valid_or_not_yet_valid() {
        let cases = [
            (valid(0, NOW - 1500 * DAY), "expired 1500 days ago", false),
            (valid(0, NOW - 10), "expired less than a day ago", false),
            (valid(0, NOW + 13 * DAY + 5), "expires in 13 days", true),
            (valid(0, NOW + 3600), "expires in less than a day", true),
            (valid(0, NOW + 400 * DAY), "expires in 400 days", true),
            (
                valid(NOW + 2 * DAY, NOW + 90 * DAY),
                "becomes valid in 2 days",
                false,
            ),
        ];
        for (validity, text, usable) in cases {
            let standing = validity.standing(NOW);
            assert_eq!(standing.text(), text, "{validity:?}");
            assert_eq!(standing.usable(), usable, "{validity:?}");
        }
        assert!(matches!(
            valid(0, NOW + 13 * DAY).standing(NOW),
            Standing::Expiring { .. }
        ));
        assert!(matches!(
            valid(0, NOW + 14 * DAY).standing(NOW),
            Standing::Valid { .. }
        ));
        assert_eq!(valid(0, NOW - 10).standing(NOW).days_left(), Some(-1));
        assert_eq!(valid(0, NOW + 10).standing(NOW).days_left(), Some(0));
    }

    /// rcgen's dates survive the trip through PEM and x509-parser, each
    /// certificate of a chain or bundle read, and the window is the narrowest.
    #[test]
    fn generated_certificates_are_read_with_their_dates() {
        let ca = Authority::new("ca").unwrap();
        let past = valid(NOW - 400 * DAY, NOW - 30 * DAY);
        let (leaf, key) = ca.leaf_valid("expired", &[], &[], past).unwrap();
        let soon = valid(NOW - DAY, NOW + 10 * DAY);
        let (other, _) = ca.leaf_valid("soon", &[], &[], soon).unwrap();
        let both = format!("{leaf}{other}{}", ca.cert_pem);
        let read = certificates(both.as_bytes()).unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read[0].validity, past);
        assert_eq!(read[0].subject, "CN=expired");
        assert_eq!(read[1].validity, soon);
        assert_eq!(
            window(&read),
            Some(valid(NOW - DAY, NOW - 30 * DAY)),
            "the latest start and the earliest end"
        );
        assert_eq!(window(&[]), None);
        assert!(certificates(b"").unwrap().is_empty());
        assert!(certificates(key.as_bytes()).unwrap().is_empty());
        let broken = "-----BEGIN CERTIFICATE-----\nYnJva2Vu\n-----END CERTIFICATE-----\n";
        assert!(certificates(broken.as_bytes()).is_err());
        assert_eq!(
            past.not_after_text(),
            jiff::Timestamp::from_second(NOW - 30 * DAY)
                .unwrap()
                .to_string()
        );
    }
}
