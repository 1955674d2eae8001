//! Security properties of the local control plane and of the client
//! configuration kcache builds from it: credentials never show in `Debug`
//! output, and TLS verification stays on unless the kubeconfig turns it off.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kcache_envtest::{CertAndKey, ControlPlane};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A bearer token that must never be printed.
const TOKEN: &str = "kcache-test-token-7f3a9c1e5b2d4f6a8c0e";

/// Pieces of a PEM private key that must never be printed: every base64
/// line of its body, and its base64 form as a kubeconfig carries it.
fn key_fragments(key_pem: &str) -> Vec<String> {
    let mut out: Vec<String> = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
        .map(str::to_owned)
        .collect();
    let encoded = STANDARD.encode(key_pem);
    out.extend(
        encoded
            .as_bytes()
            .chunks(32)
            .filter(|c| c.len() == 32)
            .map(|c| String::from_utf8_lossy(c).into_owned()),
    );
    assert!(out.len() > 2, "not a PEM key: {} bytes", key_pem.len());
    out
}

fn assert_no_secret(what: &str, text: &str, fragments: &[String]) {
    for f in fragments {
        assert!(
            !text.contains(f.as_str()),
            "{what} shows key material {f:?}:\n{text}"
        );
    }
    assert!(
        !text.contains("PRIVATE KEY"),
        "{what} shows a PEM key:\n{text}"
    );
    assert!(
        !text.contains(TOKEN),
        "{what} shows the bearer token:\n{text}"
    );
}

/// A kubeconfig for `server` trusting `ca_pem` (if any), authenticated by
/// `cert` (if any) or `token` (if any).
fn kubeconfig(
    server: &str,
    ca_pem: Option<&str>,
    cert: Option<&CertAndKey>,
    token: Option<&str>,
    insecure: bool,
) -> String {
    let mut cluster = format!("    server: {server}\n");
    if let Some(ca) = ca_pem {
        cluster.push_str(&format!(
            "    certificate-authority-data: {}\n",
            STANDARD.encode(ca)
        ));
    }
    if insecure {
        cluster.push_str("    insecure-skip-tls-verify: true\n");
    }
    let mut user = String::new();
    if let Some(c) = cert {
        user.push_str(&format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            STANDARD.encode(&c.cert_pem),
            STANDARD.encode(&c.key_pem)
        ));
    }
    if let Some(t) = token {
        user.push_str(&format!("    token: {t}\n"));
    }
    if user.is_empty() {
        user.push_str("    {}\n");
    }
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
{cluster}users:
- name: u
  user:
{user}contexts:
- name: ctx
  context:
    cluster: c
    user: u
current-context: ctx
"
    )
}

async fn config_of(yaml: &str) -> Config {
    let kc = Kubeconfig::from_yaml(yaml).expect("kubeconfig parses");
    Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig loads")
}

#[tokio::test]
async fn cert_and_key_debug_hides_the_private_key() {
    let cp = ControlPlane::shared().await.unwrap();
    let cert = cp.issue_client_cert("debug-user", &["g"]).unwrap();
    assert!(cert.key_pem.contains("PRIVATE KEY"));
    let fragments = key_fragments(&cert.key_pem);
    let debug = format!("{cert:?}");
    let pretty = format!("{cert:#?}");
    assert!(debug.contains("CertAndKey"), "{debug}");
    assert_no_secret("CertAndKey Debug", &debug, &fragments);
    assert_no_secret("CertAndKey {:#?}", &pretty, &fragments);
}

#[tokio::test]
async fn control_plane_and_client_config_debug_hide_credentials() {
    let cp = ControlPlane::shared().await.unwrap();
    // The admin identity's key, as written into the admin kubeconfig.
    let yaml = std::fs::read_to_string(cp.kubeconfig_path()).unwrap();
    let kc: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
    let key_b64 = kc["users"][0]["user"]["client-key-data"]
        .as_str()
        .expect("the admin kubeconfig has a client key");
    let key_pem = String::from_utf8(STANDARD.decode(key_b64).unwrap()).unwrap();
    let fragments = key_fragments(&key_pem);

    let cp_debug = format!("{cp:?}");
    assert!(cp_debug.contains(&cp.server_url()), "{cp_debug}");
    assert_no_secret("ControlPlane Debug", &cp_debug, &fragments);

    // kube::Config as kcache uses it: the admin config (client cert)...
    let admin = cp.config();
    assert!(admin.auth_info.client_key_data.is_some());
    assert_no_secret(
        "admin kube::Config Debug",
        &format!("{admin:?}"),
        &fragments,
    );
    assert_no_secret(
        "admin kube::Config {:#?}",
        &format!("{admin:#?}"),
        &fragments,
    );

    // ...a client-certificate config from a kubeconfig, and a token config.
    let user = cp.issue_client_cert("debug-user", &[]).unwrap();
    let user_fragments = key_fragments(&user.key_pem);
    let ca = cp.ca_cert_pem();
    let with_cert = config_of(&kubeconfig(&cp.server_url(), ca, Some(&user), None, false)).await;
    assert!(with_cert.auth_info.client_key_data.is_some());
    assert_no_secret(
        "client-cert kube::Config Debug",
        &format!("{with_cert:?}"),
        &user_fragments,
    );
    let with_token = config_of(&kubeconfig(&cp.server_url(), ca, None, Some(TOKEN), false)).await;
    assert!(with_token.auth_info.token.is_some());
    assert_no_secret(
        "token kube::Config Debug",
        &format!("{with_token:?} {:?}", with_token.auth_info),
        &[],
    );
    let mut set_in_code = cp.config();
    set_in_code.auth_info.token = Some(String::from(TOKEN).into());
    assert_no_secret(
        "kube::Config with a token set in code",
        &format!("{set_in_code:?}"),
        &fragments,
    );
}

/// A self-signed certificate that did not sign the apiserver's.
fn foreign_ca_pem() -> String {
    rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .unwrap()
        .cert
        .pem()
}

async fn server_version(config: Config) -> Result<String, String> {
    let client = Client::try_from(config).map_err(|e| format!("client: {e}"))?;
    client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .map_err(|e| format!("{e:?}"))
}

#[tokio::test]
async fn tls_verification_stays_on() {
    let cp = ControlPlane::shared().await.unwrap();
    if cp.is_external() {
        return; // the certificates here are the local control plane's
    }
    let server = cp.server_url();
    let user = cp
        .issue_client_cert("tls-user", &["system:masters"])
        .unwrap();
    assert!(!cp.config().accept_invalid_certs);

    // Control: the right CA works.
    let good = config_of(&kubeconfig(
        &server,
        cp.ca_cert_pem(),
        Some(&user),
        None,
        false,
    ))
    .await;
    assert!(!good.accept_invalid_certs);
    let v = server_version(good)
        .await
        .expect("the right CA is accepted");
    assert_eq!(v, kcache_envtest::KUBERNETES_VERSION);

    // A CA that did not sign the server's certificate: refused.
    let foreign = foreign_ca_pem();
    let wrong = config_of(&kubeconfig(
        &server,
        Some(&foreign),
        Some(&user),
        None,
        false,
    ))
    .await;
    let err = server_version(wrong)
        .await
        .expect_err("a server certificate not signed by the configured CA must be refused");
    assert!(
        !err.contains("Api("),
        "refused by TLS, not by the server: {err}"
    );

    // No CA at all: the system roots do not know the envtest CA either.
    let none = config_of(&kubeconfig(&server, None, Some(&user), None, false)).await;
    server_version(none)
        .await
        .expect_err("a server certificate unknown to the system roots must be refused");

    // Only an explicit `insecure-skip-tls-verify: true` turns checking off.
    let insecure = config_of(&kubeconfig(&server, None, Some(&user), None, true)).await;
    assert!(insecure.accept_invalid_certs);
    server_version(insecure)
        .await
        .expect("insecure-skip-tls-verify is honoured when the kubeconfig says so");
}
