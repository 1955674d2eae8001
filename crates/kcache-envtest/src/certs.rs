//! The control plane's own PKI: a CA, the apiserver's serving certificate,
//! client certificates (user = CN, groups = O) and the service-account
//! signing key.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::error::EnvtestError;

/// A PEM certificate with its PEM (PKCS#8) private key.
#[derive(Clone)]
pub struct CertAndKey {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
}

impl std::fmt::Debug for CertAndKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("CertAndKey")
            .field("cert_pem", &format_args!("<{} bytes>", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// The certificate authority of one control plane.
pub struct CertificateAuthority {
    params: CertificateParams,
    key: KeyPair,
    cert_pem: String,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// A new self-signed CA.
    pub fn new() -> Result<Self, EnvtestError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kcache-envtest-ca");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(Self {
            params,
            key,
            cert_pem,
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A serving certificate for `127.0.0.1`, `::1` and `localhost`.
    pub fn serving_cert(&self) -> Result<CertAndKey, EnvtestError> {
        let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv6Addr::LOCALHOST.into()));
        // The in-cluster service IP of `kubernetes.default` (first of 10.0.0.0/24).
        params.subject_alt_names.push(SanType::IpAddress(
            std::net::Ipv4Addr::new(10, 0, 0, 1).into(),
        ));
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate for user `name` in `groups` (CN = name, O = groups),
    /// which kube-apiserver's client-certificate authentication maps to that
    /// user.
    pub fn client_cert(&self, name: &str, groups: &[&str]) -> Result<CertAndKey, EnvtestError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        for g in groups {
            dn.push(DnType::OrganizationName, *g);
        }
        params.distinguished_name = dn;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<CertAndKey, EnvtestError> {
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A key pair for signing service-account tokens: (private key PEM in
/// PKCS#8, public key PEM). kube-apiserver reads the private key with
/// `--service-account-signing-key-file` and the public one with
/// `--service-account-key-file`.
pub fn service_account_key() -> Result<(String, String), EnvtestError> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_pem_certificates_and_redacts_keys_in_debug() {
        let ca = CertificateAuthority::new().unwrap();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let client = ca.client_cert("alice", &["devs", "ops"]).unwrap();
        assert!(client.cert_pem.contains("BEGIN CERTIFICATE"));
        assert!(client.key_pem.contains("PRIVATE KEY"));
        let dbg = format!("{client:?} {ca:?}");
        assert!(!dbg.contains("PRIVATE KEY"), "{dbg}");
        assert!(dbg.contains("redacted"));
    }
}
