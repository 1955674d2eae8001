//! Starting, restarting and stopping etcd + kube-apiserver: the
//! [`ControlPlane`] handle, its accessors and clients. Beside it: the
//! options in [`builder`], starting a new control plane (run folder,
//! certificates, ports, command lines) in [`start`], the two processes
//! (spawn, readiness, apiserver stop/start, shutdown) in [`process`],
//! operations on the running cluster (namespaces, CRDs, etcd revision and
//! compaction) in [`cluster`], the detached control plane's state file in
//! [`detached`], and the private files and folders in [`files`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Mutex;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::binaries::Binaries;
use crate::certs::{CertAndKey, CertificateAuthority};
use crate::error::EnvtestError;
use crate::kubeconfig::kubeconfig_yaml;

mod builder;
mod cluster;
mod detached;
mod files;
mod pid;
mod process;
mod start;

pub use builder::{AuditPolicy, ControlPlaneBuilder};
#[doc(hidden)] // xtask's detached control plane (see lib.rs)
pub use detached::{DetachedState, detached_state, stop_detached};
#[doc(hidden)]
pub use pid::pid_alive;

/// The environment variable that points [`ControlPlane::shared`] at an
/// existing cluster instead of a local control plane.
pub const EXTERNAL_KUBECONFIG_ENV: &str = "KCACHE_E2E_KUBECONFIG";

/// How long to wait for etcd and kube-apiserver to become ready by default.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running local control plane: etcd plus kube-apiserver on loopback, with
/// their own CA, client-certificate authentication and RBAC authorization.
///
/// Dropping it stops both processes (and a test binary that exits or panics
/// takes them down with it: they watch their parent process).
pub struct ControlPlane {
    run_dir: PathBuf,
    /// `None` for an external cluster (see [`ControlPlane::external`]).
    binaries: Option<Binaries>,
    ca: Option<CertificateAuthority>,
    etcd_port: u16,
    server_url: String,
    kubeconfig_path: PathBuf,
    admin_config: Config,
    etcd: Mutex<Option<Child>>,
    apiserver: Mutex<Option<Child>>,
    apiserver_args: Vec<OsString>,
    start_timeout: Duration,
    detached: bool,
    audit_log: Option<PathBuf>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("server", &self.server_url())
            .field("etcd", &self.etcd_endpoint())
            .field("run_dir", &self.run_dir)
            .field("kubeconfig", &self.kubeconfig_path)
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    /// The apiserver's URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> String {
        self.server_url.clone()
    }

    /// etcd's client URL, `http://127.0.0.1:<port>`.
    pub(crate) fn etcd_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_port)
    }

    /// The admin kubeconfig (user `kcache-admin`, group `system:masters`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The folder of this run: data, certificates and the two processes'
    /// logs (`etcd.log`, `kube-apiserver.log`).
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The apiserver's audit log, when turned on with
    /// [`ControlPlaneBuilder::audit_log`].
    pub fn audit_log_path(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }

    /// The admin client configuration.
    pub fn config(&self) -> Config {
        self.admin_config.clone()
    }

    /// A new admin client (`system:masters`) bound to the current tokio
    /// runtime. Make one per runtime: each `#[tokio::test]` has its own.
    pub fn client(&self) -> Result<Client, EnvtestError> {
        Client::try_from(self.admin_config.clone())
            .map_err(|e| EnvtestError::api("building the admin client", e))
    }

    /// A client authenticated by a client certificate for user `name` in
    /// `groups` (for RBAC tests: such a user can do nothing until a Role or
    /// ClusterRole is bound to it).
    pub async fn client_for_user(
        &self,
        name: &str,
        groups: &[&str],
    ) -> Result<Client, EnvtestError> {
        let config = match &self.ca {
            Some(ca) => {
                let cert = ca.client_cert(name, groups)?;
                let yaml = kubeconfig_yaml(&self.server_url(), ca.cert_pem(), name, &cert);
                config_from_yaml(&yaml).await?
            }
            // An external cluster: impersonate the user with the admin identity.
            None => {
                let mut config = self.admin_config.clone();
                config.auth_info.impersonate = Some(name.to_string());
                config.auth_info.impersonate_groups =
                    Some(groups.iter().map(|g| g.to_string()).collect());
                config
            }
        };
        Client::try_from(config).map_err(|e| EnvtestError::api("building a user client", e))
    }

    /// A client certificate for `name`/`groups` signed by this control
    /// plane's CA (for tests that build their own clients).
    pub fn issue_client_cert(
        &self,
        name: &str,
        groups: &[&str],
    ) -> Result<CertAndKey, EnvtestError> {
        self.local_ca("issue_client_cert")?
            .client_cert(name, groups)
    }

    /// The CA certificate that signs the apiserver's serving certificate, PEM
    /// (`None` on an external cluster).
    pub fn ca_cert_pem(&self) -> Option<&str> {
        self.ca.as_ref().map(CertificateAuthority::cert_pem)
    }

    fn local_ca(&self, what: &'static str) -> Result<&CertificateAuthority, EnvtestError> {
        self.ca.as_ref().ok_or(EnvtestError::External(what))
    }

    fn local_binaries(&self, what: &'static str) -> Result<&Binaries, EnvtestError> {
        self.binaries.as_ref().ok_or(EnvtestError::External(what))
    }

    /// Whether this is an external cluster (given by a kubeconfig) rather
    /// than processes started here: fault operations are not available then.
    pub fn is_external(&self) -> bool {
        self.binaries.is_none()
    }
}

async fn config_from_yaml(yaml: &str) -> Result<Config, EnvtestError> {
    let kc = Kubeconfig::from_yaml(yaml)?;
    Ok(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}
