//! Writing kubeconfig files for the local control plane.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::certs::CertAndKey;

/// A kubeconfig with one cluster (`kcache-envtest`), one user authenticated
/// by a client certificate, and a current context joining them.
pub fn kubeconfig_yaml(server: &str, ca_pem: &str, user: &str, cert: &CertAndKey) -> String {
    let ca = STANDARD.encode(ca_pem);
    let crt = STANDARD.encode(&cert.cert_pem);
    let key = STANDARD.encode(&cert.key_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kcache-envtest
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user:?}
  user:
    client-certificate-data: {crt}
    client-key-data: {key}
contexts:
- name: kcache-envtest
  context:
    cluster: kcache-envtest
    user: {user:?}
current-context: kcache-envtest
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_parses_and_names_the_user() {
        let ca = crate::certs::CertificateAuthority::new().unwrap();
        let cert = ca.client_cert("bob", &[]).unwrap();
        let yaml = kubeconfig_yaml("https://127.0.0.1:6443", ca.cert_pem(), "bob", &cert);
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("kcache-envtest"));
        assert_eq!(kc.auth_infos[0].name, "bob");
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
    }
}
