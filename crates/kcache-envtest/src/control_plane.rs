//! Starting, restarting and stopping etcd + kube-apiserver.

use std::ffi::OsString;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::{Deserialize, Serialize};

use crate::binaries::{Binaries, cache_dir};
use crate::certs::{CertAndKey, CertificateAuthority, service_account_key};
use crate::error::{EnvtestError, tail};
use crate::kubeconfig::kubeconfig_yaml;
use crate::lock;
use crate::raw_http;

/// The environment variable that points [`ControlPlane::shared`] at an
/// existing cluster instead of a local control plane.
pub const EXTERNAL_KUBECONFIG_ENV: &str = "KCACHE_E2E_KUBECONFIG";

/// How long to wait for etcd and kube-apiserver to become ready by default.
const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(120);

/// What the apiserver's audit log records (see
/// [`ControlPlaneBuilder::audit_log`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditPolicy {
    /// Every write (create, update, patch, delete, deletecollection): an
    /// event when it arrives (stage `RequestReceived`, with its request
    /// body) and one when it was answered (`ResponseComplete`, with the
    /// request and response bodies; `requestReceivedTimestamp` and
    /// `stageTimestamp` give when it arrived and when it was answered). A
    /// write in flight when the apiserver was killed has only the first. No
    /// reads.
    Writes,
    /// A policy of one's own: the YAML of an `audit.k8s.io/v1` `Policy`.
    Custom(String),
}

impl AuditPolicy {
    const WRITES: &'static str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [\"ResponseStarted\", \"Panic\"]
rules:
  - level: RequestResponse
    verbs: [\"create\", \"update\", \"patch\", \"delete\", \"deletecollection\"]
  - level: None
";

    fn yaml(&self) -> &str {
        match self {
            AuditPolicy::Writes => Self::WRITES,
            AuditPolicy::Custom(yaml) => yaml,
        }
    }
}

/// Configuration of a [`ControlPlane`] before it starts.
#[derive(Debug, Clone)]
pub struct ControlPlaneBuilder {
    start_timeout: Duration,
    detached: bool,
    extra_apiserver_args: Vec<String>,
    sharded_list_and_watch: bool,
    cbor_serving_and_storage: bool,
    audit: Option<AuditPolicy>,
}

impl Default for ControlPlaneBuilder {
    fn default() -> Self {
        Self {
            start_timeout: DEFAULT_START_TIMEOUT,
            detached: false,
            extra_apiserver_args: Vec::new(),
            sharded_list_and_watch: true,
            cbor_serving_and_storage: false,
            audit: None,
        }
    }
}

impl ControlPlaneBuilder {
    /// The environment variable that points [`ControlPlane::shared`] at an
    /// existing cluster instead of a local control plane.
    pub const EXTERNAL_KUBECONFIG_ENV: &str = "KCACHE_E2E_KUBECONFIG";

    /// How long to wait for each process to become ready (default 120 s).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Start processes that outlive this handle and this process (for
    /// `cargo xtask controlplane start`). A detached control plane is not
    /// stopped on drop; use [`ControlPlane::write_state`] and
    /// [`stop_detached`] to manage it.
    pub fn detached(mut self, detached: bool) -> Self {
        self.detached = detached;
        self
    }

    /// Whether kube-apiserver runs with the alpha feature gate
    /// `ShardedListAndWatch` (server-side sharded list and watch, KEP-5866:
    /// the `shardSelector` list/watch parameter). On by default; off to test
    /// the client-side fallback. With the gate off the apiserver ignores
    /// `shardSelector` and serves every object, with no
    /// `metadata.shardInfo` on lists. A later
    /// `apiserver_arg("--feature-gates=ShardedListAndWatch=...")` overrides this.
    pub fn sharded_list_and_watch(mut self, enabled: bool) -> Self {
        self.sharded_list_and_watch = enabled;
        self
    }

    /// Whether kube-apiserver runs with the feature gate
    /// `CBORServingAndStorage` (KEP-4222: it serves `application/cbor` and
    /// `application/cbor-seq` to clients that ask, custom resources
    /// included). Off by default, as on most clusters today; a client that
    /// asks for CBOR from a server without it gets JSON or 406.
    pub fn cbor_serving_and_storage(mut self, enabled: bool) -> Self {
        self.cbor_serving_and_storage = enabled;
        self
    }

    /// An extra kube-apiserver flag, e.g. `--feature-gates=...` (the flag
    /// may be repeated; a later value for the same gate wins).
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_apiserver_args.push(arg.into());
        self
    }

    /// Turns on the apiserver's audit log (JSON lines, one event per
    /// request, in the order the apiserver completes them) with `policy`;
    /// it is written to [`ControlPlane::audit_log_path`] and survives
    /// apiserver restarts (appended). Off by default (it costs a write per
    /// request).
    pub fn audit_log(mut self, policy: AuditPolicy) -> Self {
        self.audit = Some(policy);
        self
    }

    /// Builds the binaries if needed, starts etcd and kube-apiserver, waits
    /// until the apiserver answers `/readyz`, and writes an admin kubeconfig.
    pub async fn start(self) -> Result<ControlPlane, EnvtestError> {
        ControlPlane::start_with(self).await
    }
}

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

/// What `cargo xtask controlplane start` records about a detached control
/// plane, so that `stop` and `status` find it later.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DetachedState {
    /// PID of etcd.
    pub etcd_pid: u32,
    /// PID of kube-apiserver.
    pub apiserver_pid: u32,
    /// The run folder (data, certificates, logs).
    pub run_dir: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The apiserver URL.
    pub server: String,
}

/// Path of the state file of the detached control plane.
pub fn detached_state_path() -> PathBuf {
    cache_dir().join("detached.json")
}

/// Reads the state of the detached control plane, if one was started.
pub fn detached_state() -> Result<DetachedState, EnvtestError> {
    let path = detached_state_path();
    let text = fs::read_to_string(&path).map_err(|_| EnvtestError::NotRunning(path.clone()))?;
    serde_json::from_str(&text)
        .map_err(|e| EnvtestError::State(format!("unreadable state file {}: {e}", path.display())))
}

/// Whether a process with this PID is alive (and not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // state is the field after the ")" that ends the command name
        Ok(stat) => {
            !matches!(stat.rsplit(')').next().map(str::trim_start), Some(s) if s.starts_with('Z'))
        }
        Err(_) => false,
    }
}

/// Stops the detached control plane started by `cargo xtask controlplane
/// start`, and removes its data.
pub fn stop_detached() -> Result<DetachedState, EnvtestError> {
    let state = detached_state()?;
    for pid in [state.apiserver_pid, state.etcd_pid] {
        terminate_pid(pid);
    }
    let _ = fs::remove_dir_all(state.run_dir.join("data"));
    let _ = fs::remove_file(detached_state_path());
    Ok(state)
}

/// SIGTERM, then SIGKILL after 5 s.
fn terminate_pid(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let Ok(raw) = i32::try_from(pid) else { return };
    let p = Pid::from_raw(raw);
    if kill(p, Signal::SIGTERM).is_err() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pid_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if pid_alive(pid) {
        let _ = kill(p, Signal::SIGKILL);
    }
}

fn free_port() -> Result<u16, EnvtestError> {
    let l = TcpListener::bind(("127.0.0.1", 0)).map_err(EnvtestError::NoFreePort)?;
    let port = l.local_addr().map_err(EnvtestError::NoFreePort)?.port();
    Ok(port)
}

/// Writes `text` to `path`, readable and writable by this user only (mode
/// 0600 on Unix): the control plane's files are private keys, a kubeconfig
/// with the admin's client key, and what points at them. An existing file is
/// truncated and its mode tightened before anything is written into it.
fn write_file(path: &Path, text: &str) -> Result<(), EnvtestError> {
    use std::io::Write as _;
    let err = |e| EnvtestError::io("writing", path, e);
    let mut open = fs::OpenOptions::new();
    open.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(0o600);
    }
    let mut f = open.open(path).map_err(err)?;
    #[cfg(unix)]
    {
        // `mode` applies only to a file the open creates
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(err)?;
    }
    f.write_all(text.as_bytes()).map_err(err)
}

/// Creates `dir` and its missing parents with mode 0700 (Unix), then sets
/// 0700 on `dir` and on each of `tighten` (folders under the run folder that
/// may exist from an earlier run, e.g. the detached control plane's).
fn create_private_dir(dir: &Path, tighten: &[&Path]) -> Result<(), EnvtestError> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
        .map_err(|e| EnvtestError::io("creating", dir, e))?;
    #[cfg(unix)]
    for d in tighten.iter().copied().chain([dir]) {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(d, fs::Permissions::from_mode(0o700))
            .map_err(|e| EnvtestError::io("setting the mode of", d, e))?;
    }
    #[cfg(not(unix))]
    let _ = tighten;
    Ok(())
}

/// Removes the data of earlier runs whose process is gone, and keeps at most
/// 20 run folders (their logs) around.
fn prune_runs(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        let owner = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = owner
            && !pid_alive(pid)
        {
            let _ = fs::remove_dir_all(path.join("data"));
            let mtime = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            dirs.push((mtime, path));
        }
    }
    dirs.sort();
    if dirs.len() > 20 {
        for (_, p) in &dirs[..dirs.len() - 20] {
            let _ = fs::remove_dir_all(p);
        }
    }
}

fn open_log(path: &Path) -> Result<(Stdio, Stdio), EnvtestError> {
    let mut open = fs::OpenOptions::new();
    open.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(0o600);
    }
    let f = open
        .open(path)
        .map_err(|e| EnvtestError::io("opening log", path, e))?;
    let f2 = f
        .try_clone()
        .map_err(|e| EnvtestError::io("opening log", path, e))?;
    Ok((Stdio::from(f), Stdio::from(f2)))
}

impl ControlPlane {
    /// A builder with the defaults.
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }

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

    async fn start_with(opts: ControlPlaneBuilder) -> Result<ControlPlane, EnvtestError> {
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

impl ControlPlane {
    fn log_path(&self, process: &str) -> PathBuf {
        self.run_dir.join(format!("{process}.log"))
    }

    fn spawn(
        &self,
        process: &'static str,
        bin: &Path,
        args: &[OsString],
    ) -> Result<Child, EnvtestError> {
        let log = self.log_path(process);
        let (out, err) = open_log(&log)?;
        let mut cmd = Command::new(bin);
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        if !self.detached {
            cmd.env("KCACHE_PARENT_PID", std::process::id().to_string());
        } else {
            cmd.env_remove("KCACHE_PARENT_PID");
        }
        cmd.spawn().map_err(|e| EnvtestError::ProcessFailed {
            process,
            detail: format!("spawning {}: {e}", bin.display()),
            tail: tail(&log, 20),
            log,
        })
    }

    /// Fails with the log's tail if the process has exited.
    fn check_alive(&self, process: &'static str) -> Result<(), EnvtestError> {
        let slot = if process == "etcd" {
            &self.etcd
        } else {
            &self.apiserver
        };
        let mut guard = lock(slot);
        let exited = match guard.as_mut() {
            Some(child) => child.try_wait().ok().flatten(),
            None => return Err(EnvtestError::State(format!("{process} is not running"))),
        };
        if let Some(status) = exited {
            *guard = None;
            let log = self.log_path(process);
            return Err(EnvtestError::ProcessFailed {
                process,
                detail: format!("exited with {status}"),
                tail: tail(&log, 30),
                log,
            });
        }
        Ok(())
    }

    /// [`EnvtestError::ReadinessTimeout`] (with the tail of its log) once
    /// `process`, started at `started`, has not become ready within the
    /// start timeout.
    fn check_start_timeout(
        &self,
        process: &'static str,
        started: Instant,
    ) -> Result<(), EnvtestError> {
        if started.elapsed() <= self.start_timeout {
            return Ok(());
        }
        let log = self.log_path(process);
        Err(EnvtestError::ReadinessTimeout {
            process,
            waited: started.elapsed(),
            tail: tail(&log, 30),
            log,
        })
    }

    async fn wait_etcd_ready(&self) -> Result<(), EnvtestError> {
        let started = Instant::now();
        loop {
            self.check_alive("etcd")?;
            if let Ok(body) = raw_http::get(self.etcd_port, "/health").await
                && body.contains("\"health\":\"true\"")
            {
                return Ok(());
            }
            self.check_start_timeout("etcd", started)?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_apiserver_ready(&self) -> Result<(), EnvtestError> {
        let started = Instant::now();
        let client = self.client()?;
        loop {
            self.check_alive("kube-apiserver")?;
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| EnvtestError::State(format!("building the readiness request: {e}")))?;
            if let Ok(text) = client.request_text(req).await
                && text.trim() == "ok"
            {
                return Ok(());
            }
            self.check_start_timeout("kube-apiserver", started)?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The apiserver's URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> String {
        self.server_url.clone()
    }

    /// etcd's client URL, `http://127.0.0.1:<port>`.
    pub fn etcd_endpoint(&self) -> String {
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

    /// Creates a namespace named `<prefix>-<random suffix>` and returns its name.
    pub async fn create_namespace(&self, prefix: &str) -> Result<String, EnvtestError> {
        let client = self.client()?;
        let suffix: u32 = rand::random();
        let name = format!("{prefix}-{suffix:08x}");
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name }
        }))
        .map_err(|e| EnvtestError::State(format!("namespace object: {e}")))?;
        Api::<Namespace>::all(client)
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|e| EnvtestError::api(format!("creating namespace {name}"), e))?;
        Ok(name)
    }

    /// Applies each CRD (server-side apply) and waits until it is Established
    /// and its resource is served (discovery lists it).
    pub async fn install_crds(
        &self,
        crds: &[CustomResourceDefinition],
    ) -> Result<(), EnvtestError> {
        let client = self.client()?;
        let api = Api::<CustomResourceDefinition>::all(client.clone());
        let pp = PatchParams::apply("kcache-envtest").force();
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &pp, &Patch::Apply(crd))
                .await
                .map_err(|e| EnvtestError::api(format!("applying CRD {name}"), e))?;
        }
        let timeout = Duration::from_secs(60);
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let started = Instant::now();
            loop {
                let current = api
                    .get(&name)
                    .await
                    .map_err(|e| EnvtestError::api(format!("reading CRD {name}"), e))?;
                let established = current
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                let served = if established {
                    let group = &crd.spec.group;
                    let plural = &crd.spec.names.plural;
                    let mut all = true;
                    for v in crd.spec.versions.iter().filter(|v| v.served) {
                        let listed = client
                            .list_api_group_resources(&format!("{group}/{}", v.name))
                            .await
                            .map(|l| l.resources.iter().any(|r| &r.name == plural))
                            .unwrap_or(false);
                        all &= listed;
                    }
                    all
                } else {
                    false
                };
                if established && served {
                    break;
                }
                if started.elapsed() > timeout {
                    return Err(EnvtestError::CrdNotEstablished {
                        name,
                        waited: started.elapsed(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// Stops kube-apiserver (SIGKILL: open connections are cut, as in a
    /// crash). etcd and its data stay.
    pub async fn stop_apiserver(&self) -> Result<(), EnvtestError> {
        self.local_binaries("stop_apiserver")?;
        let child = lock(&self.apiserver).take();
        let Some(mut child) = child else {
            return Err(EnvtestError::State("kube-apiserver is not running".into()));
        };
        tokio::task::spawn_blocking(move || {
            let _ = child.kill();
            let _ = child.wait();
        })
        .await
        .map_err(|e| EnvtestError::State(format!("stopping kube-apiserver: {e}")))?;
        Ok(())
    }

    /// Starts kube-apiserver again (same port, certificates and etcd) and
    /// waits until it is ready.
    pub async fn start_apiserver(&self) -> Result<(), EnvtestError> {
        let bin = self
            .local_binaries("start_apiserver")?
            .kube_apiserver
            .clone();
        if lock(&self.apiserver).is_some() {
            return Err(EnvtestError::State(
                "kube-apiserver is already running".into(),
            ));
        }
        let child = self.spawn("kube-apiserver", &bin, &self.apiserver_args)?;
        *lock(&self.apiserver) = Some(child);
        self.wait_apiserver_ready().await
    }

    /// Stops and starts kube-apiserver; etcd keeps its data.
    pub async fn restart_apiserver(&self) -> Result<(), EnvtestError> {
        self.stop_apiserver().await?;
        self.start_apiserver().await
    }

    /// Whether kube-apiserver is running (started and not exited).
    pub fn apiserver_running(&self) -> bool {
        self.check_alive("kube-apiserver").is_ok()
    }

    /// The current etcd revision.
    pub async fn etcd_revision(&self) -> Result<i64, EnvtestError> {
        self.local_binaries("etcd_revision")?;
        // Range over an empty key: the response header carries the revision.
        let body = raw_http::post(self.etcd_port, "/v3/kv/range", r#"{"key":"AA=="}"#)
            .await
            .map_err(|e| EnvtestError::State(format!("etcd range request failed: {e}")))?;
        let v: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| EnvtestError::State(format!("etcd range answer {body:?}: {e}")))?;
        v.pointer("/header/revision")
            .and_then(|r| r.as_str().and_then(|s| s.parse().ok()).or(r.as_i64()))
            .ok_or_else(|| {
                EnvtestError::State(format!("etcd range answer without revision: {body}"))
            })
    }

    /// Compacts etcd up to its current revision, so that a watch from any
    /// older resourceVersion is answered `410 Gone` (once the apiserver's
    /// watch cache no longer holds it). Returns the compacted revision.
    pub async fn compact_etcd(&self) -> Result<i64, EnvtestError> {
        let rev = self.etcd_revision().await?;
        let body = format!(r#"{{"revision":"{rev}","physical":true}}"#);
        raw_http::post(self.etcd_port, "/v3/kv/compaction", &body)
            .await
            .map_err(|e| EnvtestError::State(format!("etcd compaction failed: {e}")))?;
        Ok(rev)
    }

    /// PIDs of (etcd, kube-apiserver), where running.
    pub fn pids(&self) -> (Option<u32>, Option<u32>) {
        (
            lock(&self.etcd).as_ref().map(Child::id),
            lock(&self.apiserver).as_ref().map(Child::id),
        )
    }

    /// Records a detached control plane's PIDs and paths in the state file
    /// that `cargo xtask controlplane stop|status` read.
    pub fn write_state(&self) -> Result<DetachedState, EnvtestError> {
        let (etcd, api) = self.pids();
        let state = DetachedState {
            etcd_pid: etcd.ok_or_else(|| EnvtestError::State("etcd is not running".into()))?,
            apiserver_pid: api
                .ok_or_else(|| EnvtestError::State("kube-apiserver is not running".into()))?,
            run_dir: self.run_dir.clone(),
            kubeconfig: self.kubeconfig_path.clone(),
            server: self.server_url(),
        };
        let path = detached_state_path();
        let text = serde_json::to_string_pretty(&state)
            .map_err(|e| EnvtestError::State(format!("state file: {e}")))?;
        write_file(&path, &text)?;
        Ok(state)
    }

    fn shutdown(&self) {
        for slot in [&self.apiserver, &self.etcd] {
            if let Some(mut child) = lock(slot).take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = fs::remove_dir_all(self.run_dir.join("data"));
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if !self.detached {
            self.shutdown();
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> String {
        format!(
            "{:o}",
            fs::metadata(p).unwrap().permissions().mode() & 0o7777
        )
    }

    #[test]
    fn files_are_written_0600_and_folders_0700_tightening_old_ones() {
        let root = std::env::temp_dir().join(format!(
            "kcache-envtest-modes-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        // an earlier run left a loose folder and a loose file behind
        let run = root.join("run");
        fs::create_dir_all(run.join("data")).unwrap();
        fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).unwrap();
        let pki = run.join("data/pki");
        create_private_dir(&pki, &[&run, &run.join("data")]).unwrap();
        for d in [&run, &run.join("data"), &pki] {
            assert_eq!(mode(d), "700", "{}", d.display());
        }
        let key = pki.join("sa.key");
        fs::write(&key, "old").unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
        write_file(&key, "new key").unwrap();
        assert_eq!(mode(&key), "600");
        assert_eq!(fs::read_to_string(&key).unwrap(), "new key");
        let fresh = pki.join("kubeconfig");
        write_file(&fresh, "config").unwrap();
        assert_eq!(mode(&fresh), "600");
        // a fresh tree: every level created 0700
        let fresh_tree = root.join("a/b/c");
        create_private_dir(&fresh_tree, &[]).unwrap();
        for d in [root.join("a"), root.join("a/b"), fresh_tree] {
            assert_eq!(mode(&d), "700", "{}", d.display());
        }
        fs::remove_dir_all(&root).unwrap();
    }
}

async fn config_from_yaml(yaml: &str) -> Result<Config, EnvtestError> {
    let kc = Kubeconfig::from_yaml(yaml)?;
    Ok(Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}
