//! Development certificates: a CA and a serving certificate signed by it,
//! generated with rcgen. Nothing here is ever written into the repository.
//! When certificates expire, for the server and the plugin: [`expiry`].

pub mod expiry;

use std::path::Path;

use expiry::Validity;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// PEM text of a generated CA and a certificate it signed.
pub(crate) struct Generated {
    pub(crate) ca_cert_pem: String,
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

/// A CA that can sign more leaves: serving certificates, and client
/// certificates for test users.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's own certificate, PEM: what clients trust.
    pub cert_pem: String,
}

impl Authority {
    /// A new self-signed CA whose common name is `name`.
    pub fn new(name: &str) -> Result<Self, rcgen::Error> {
        Self::build(name, None)
    }

    /// A CA valid only within `validity` (an expired one, for tests).
    pub fn new_valid(name: &str, validity: Validity) -> Result<Self, rcgen::Error> {
        Self::build(name, Some(validity))
    }

    fn build(name: &str, validity: Option<Validity>) -> Result<Self, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        set_validity(&mut params, validity);
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Self {
            issuer: Issuer::new(params, key),
            cert_pem: cert.pem(),
        })
    }

    /// A leaf for `names` (DNS names or IP addresses), usable for serving and
    /// as a client certificate; `organizations` become the subject's O fields,
    /// which the kube-apiserver reads as the groups of a client certificate.
    /// Returns the certificate and key PEM.
    pub fn leaf(
        &self,
        common_name: &str,
        names: &[String],
        organizations: &[&str],
    ) -> Result<(String, String), rcgen::Error> {
        leaf(&self.issuer, common_name, names, organizations, None)
    }

    /// [`Authority::leaf`], valid only within `validity`: an expired or
    /// nearly expired certificate, for tests of what expiry does.
    pub fn leaf_valid(
        &self,
        common_name: &str,
        names: &[String],
        organizations: &[&str],
        validity: Validity,
    ) -> Result<(String, String), rcgen::Error> {
        leaf(
            &self.issuer,
            common_name,
            names,
            organizations,
            Some(validity),
        )
    }
}

/// Sets `params`' notBefore and notAfter (Unix seconds, none before 1970);
/// rcgen's defaults without `validity`.
fn set_validity(params: &mut CertificateParams, validity: Option<Validity>) {
    let Some(v) = validity else { return };
    let at = |seconds: i64| {
        let since = std::time::Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
        rcgen::date_time_ymd(1970, 1, 1) + since
    };
    params.not_before = at(v.not_before);
    params.not_after = at(v.not_after);
}

/// A CA and a leaf for `names` signed by it, named `common_name`.
pub(crate) fn generate(common_name: &str, names: &[String]) -> Result<Generated, rcgen::Error> {
    let ca = Authority::new("driftguard development CA")?;
    let (cert_pem, key_pem) = ca.leaf(common_name, names, &[])?;
    Ok(Generated {
        ca_cert_pem: ca.cert_pem,
        cert_pem,
        key_pem,
    })
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    common_name: &str,
    names: &[String],
    organizations: &[&str],
    validity: Option<Validity>,
) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    set_validity(&mut params, validity);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    for org in organizations {
        params
            .distinguished_name
            .push(DnType::OrganizationName, *org);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Writes `ca.crt`, `tls.crt` and `tls.key` (mode 0600) into `dir`.
pub(crate) fn write(dir: &Path, generated: &Generated) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("ca.crt"), &generated.ca_cert_pem)?;
    std::fs::write(dir.join("tls.crt"), &generated.cert_pem)?;
    write_private(&dir.join("tls.key"), &generated.key_pem)
}

/// Writes `pem` to `path`, created readable by its owner only (mode 0600 on
/// Unix): for private keys.
pub fn write_private(path: &Path, pem: &str) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    options.open(path)?.write_all(pem.as_bytes())
}
