//! Starting a new local control plane (or a handle on an external
//! cluster): the run folder, the certificates, the ports and the two
//! processes' command lines.

use std::ffi::OsString;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kube::Config;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::builder::{AuditPolicy, ControlPlaneBuilder};
use super::files::{create_private_dir, prune_runs, write_file};
use super::{ControlPlane, DEFAULT_START_TIMEOUT, EXTERNAL_KUBECONFIG_ENV, config_from_yaml};
use crate::binaries::{Binaries, cache_dir};
use crate::certs::{CertAndKey, CertificateAuthority, service_account_key};
use crate::error::EnvtestError;
use crate::kubeconfig::kubeconfig_yaml;
use crate::lock;

impl ControlPlane {
    /// Starts a control plane with the defaults (see [`ControlPlaneBuilder::start`]).
    pub async fn start() -> Result<ControlPlane, EnvtestError> {
        ControlPlaneBuilder::default().start().await
    }

    /// The control plane shared by every test of the current test binary,
    /// started on first use (or, when `KCACHE_E2E_KUBECONFIG` names a
    /// kubeconfig, that cluster: see [`ControlPlane::external`]). Tests isolate themselves with
    /// [`ControlPlane::create_namespace`]. Never restart or stop a shared
    /// control plane: fault tests start their own.
    pub async fn shared() -> Result<&'static ControlPlane, EnvtestError> {
        static SHARED: tokio::sync::OnceCell<ControlPlane> = tokio::sync::OnceCell::const_new();
        SHARED
            .get_or_try_init(|| async {
                match std::env::var_os(EXTERNAL_KUBECONFIG_ENV) {
                    Some(path) => ControlPlane::external(path).await,
                    None => ControlPlane::start().await,
                }
            })
            .await
    }

    /// A handle on an existing cluster given by a kubeconfig (for running
    /// the integration suite against kind or any other cluster). Namespaces,
    /// CRDs and clients work as on a local control plane; users of
    /// [`ControlPlane::client_for_user`] are impersonated; the fault
    /// operations (restart, stop, compaction) return
    /// [`EnvtestError::External`].
    pub async fn external(kubeconfig: impl AsRef<Path>) -> Result<ControlPlane, EnvtestError> {
        let path = kubeconfig.as_ref().to_path_buf();
        let kc = Kubeconfig::read_from(&path)?;
        let admin_config =
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        Ok(ControlPlane {
            run_dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            binaries: None,
            ca: None,
            etcd_port: 0,
            server_url: admin_config.cluster_url.to_string(),
            kubeconfig_path: path,
            admin_config,
            etcd: Mutex::new(None),
            apiserver: Mutex::new(None),
            apiserver_args: Vec::new(),
            start_timeout: DEFAULT_START_TIMEOUT,
            detached: true,
            audit_log: None,
        })
    }

    pub(super) async fn start_with(
        opts: ControlPlaneBuilder,
    ) -> Result<ControlPlane, EnvtestError> {
        let binaries = Binaries::ensure_async().await?;
        let run_dir = Self::prepare_run_dir(opts.detached)?;
        let certs = run_dir.join("data/pki");
        let Pki { ca, admin } = Self::write_pki(&certs)?;
        let ports = Ports::pick()?;
        let server = format!("https://127.0.0.1:{}", ports.apiserver);

        let kubeconfig_path = run_dir.join("kubeconfig");
        let yaml = kubeconfig_yaml(&server, ca.cert_pem(), "kcache-admin", &admin);
        write_file(&kubeconfig_path, &yaml)?;
        let admin_config = config_from_yaml(&yaml).await?;

        let etcd_args = etcd_args(&run_dir.join("data/etcd"), &ports);
        let mut apiserver_args = apiserver_args(
            &certs,
            &ports,
            opts.sharded_list_and_watch,
            opts.cbor_serving_and_storage,
        );
        let audit_log = match &opts.audit {
            Some(policy) => Some(audit_args(&run_dir, policy, &mut apiserver_args)?),
            None => None,
        };
        apiserver_args.extend(opts.extra_apiserver_args.iter().map(OsString::from));

        let cp = ControlPlane {
            run_dir,
            binaries: Some(binaries.clone()),
            ca: Some(ca),
            etcd_port: ports.etcd,
            server_url: server,
            kubeconfig_path,
            admin_config,
            etcd: Mutex::new(None),
            apiserver: Mutex::new(None),
            apiserver_args,
            start_timeout: opts.start_timeout,
            detached: opts.detached,
            audit_log,
        };
        let etcd = cp.spawn("etcd", &binaries.etcd, &etcd_args)?;
        *lock(&cp.etcd) = Some(etcd);
        cp.wait_etcd_ready().await?;
        cp.start_apiserver().await?;
        tracing::info!(server = %cp.server_url(), kubeconfig = %cp.kubeconfig_path.display(), "local control plane ready");
        Ok(cp)
    }

    /// The run's directory, with a private, empty `data/pki` in it: the
    /// fixed `detached` one (its old data removed), or a new one under
    /// `runs` (after pruning the runs left behind).
    fn prepare_run_dir(detached: bool) -> Result<PathBuf, EnvtestError> {
        let root = cache_dir();
        let run_dir = if detached {
            root.join("detached")
        } else {
            let runs = root.join("runs");
            prune_runs(&runs);
            let suffix: u32 = rand::random();
            runs.join(format!("{}-{suffix:08x}", std::process::id()))
        };
        if detached {
            let _ = fs::remove_dir_all(run_dir.join("data"));
        }
        let certs = run_dir.join("data/pki");
        create_private_dir(&certs, &[&run_dir, &run_dir.join("data")])?;
        Ok(run_dir)
    }

    /// Makes a CA, the apiserver's serving certificate, an admin client
    /// certificate and the service-account key pair, and writes all but
    /// the admin's into `certs`.
    fn write_pki(certs: &Path) -> Result<Pki, EnvtestError> {
        let ca = CertificateAuthority::new()?;
        let serving = ca.serving_cert()?;
        let admin = ca.client_cert("kcache-admin", &["system:masters"])?;
        write_file(&certs.join("ca.crt"), ca.cert_pem())?;
        write_file(&certs.join("apiserver.crt"), &serving.cert_pem)?;
        write_file(&certs.join("apiserver.key"), &serving.key_pem)?;
        let (sa_key, sa_pub) = service_account_key()?;
        write_file(&certs.join("sa.key"), &sa_key)?;
        write_file(&certs.join("sa.pub"), &sa_pub)?;
        Ok(Pki { ca, admin })
    }
}

/// The certificates a new control plane keeps.
struct Pki {
    /// Signs the serving and client certificates.
    ca: CertificateAuthority,
    /// The admin's client certificate (in the kubeconfig).
    admin: CertAndKey,
}

/// The local ports of a control plane.
struct Ports {
    /// etcd's client port.
    etcd: u16,
    /// etcd's peer port.
    etcd_peer: u16,
    /// The apiserver's secure port.
    apiserver: u16,
}

impl Ports {
    /// Three free ports: etcd's client and peer ports, then the apiserver's.
    fn pick() -> Result<Self, EnvtestError> {
        Ok(Ports {
            etcd: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
        })
    }

    /// The URL etcd serves its clients on.
    fn etcd_client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd)
    }
}

/// etcd's command line: a single member storing in `data_dir`, without fsync.
fn etcd_args(data_dir: &Path, ports: &Ports) -> Vec<OsString> {
    let peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    let client_url = ports.etcd_client_url();
    vec![
        "--name=default".into(),
        format!("--data-dir={}", data_dir.display()).into(),
        format!("--listen-client-urls={client_url}").into(),
        format!("--advertise-client-urls={client_url}").into(),
        format!("--listen-peer-urls={peer}").into(),
        format!("--initial-advertise-peer-urls={peer}").into(),
        format!("--initial-cluster=default={peer}").into(),
        "--unsafe-no-fsync=true".into(),
        "--log-level=warn".into(),
    ]
}

/// The apiserver's command line (before audit and extra arguments): on
/// loopback, against the local etcd, with the certificates in `certs`.
fn apiserver_args(
    certs: &Path,
    ports: &Ports,
    sharded_list_and_watch: bool,
    cbor_serving_and_storage: bool,
) -> Vec<OsString> {
    vec![
        format!("--etcd-servers={}", ports.etcd_client_url()).into(),
        format!("--secure-port={}", ports.apiserver).into(),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        // The endpoint reconciler refuses a loopback advertise address;
        // there are no Pods to reach the `kubernetes` Service anyway.
        "--endpoint-reconciler-type=none".into(),
        format!("--cert-dir={}", certs.display()).into(),
        format!("--tls-cert-file={}", certs.join("apiserver.crt").display()).into(),
        format!(
            "--tls-private-key-file={}",
            certs.join("apiserver.key").display()
        )
        .into(),
        format!("--client-ca-file={}", certs.join("ca.crt").display()).into(),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--authorization-mode=RBAC".into(),
        "--disable-admission-plugins=ServiceAccount".into(),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!(
            "--service-account-key-file={}",
            certs.join("sa.pub").display()
        )
        .into(),
        format!(
            "--service-account-signing-key-file={}",
            certs.join("sa.key").display()
        )
        .into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        "--v=1".into(),
        format!(
            "--feature-gates=ShardedListAndWatch={sharded_list_and_watch},CBORServingAndStorage={cbor_serving_and_storage}"
        )
        .into(),
    ]
}

/// Writes the audit `policy` into `run_dir` and adds the apiserver
/// arguments that log by it (JSON, blocking); the log's path.
fn audit_args(
    run_dir: &Path,
    policy: &AuditPolicy,
    apiserver_args: &mut Vec<OsString>,
) -> Result<PathBuf, EnvtestError> {
    let policy_path = run_dir.join("audit-policy.yaml");
    write_file(&policy_path, policy.yaml())?;
    let log = run_dir.join("audit.log");
    apiserver_args.extend([
        format!("--audit-policy-file={}", policy_path.display()).into(),
        format!("--audit-log-path={}", log.display()).into(),
        "--audit-log-format=json".into(),
        "--audit-log-mode=blocking".into(),
    ]);
    Ok(log)
}

fn free_port() -> Result<u16, EnvtestError> {
    let l = TcpListener::bind(("127.0.0.1", 0)).map_err(EnvtestError::NoFreePort)?;
    let port = l.local_addr().map_err(EnvtestError::NoFreePort)?.port();
    Ok(port)
}
