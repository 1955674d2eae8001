//! [`ControlPlaneBuilder`]: the options of a [`ControlPlane`] before it
//! starts, and the [`AuditPolicy`] of its apiserver.

use std::time::Duration;

use super::{ControlPlane, DEFAULT_START_TIMEOUT};
use crate::error::EnvtestError;

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

    pub(super) fn yaml(&self) -> &str {
        match self {
            AuditPolicy::Writes => Self::WRITES,
            AuditPolicy::Custom(yaml) => yaml,
        }
    }
}

/// Configuration of a [`ControlPlane`] before it starts.
#[derive(Debug, Clone)]
pub struct ControlPlaneBuilder {
    pub(super) start_timeout: Duration,
    pub(super) detached: bool,
    pub(super) extra_apiserver_args: Vec<String>,
    pub(super) sharded_list_and_watch: bool,
    pub(super) cbor_serving_and_storage: bool,
    pub(super) audit: Option<AuditPolicy>,
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
    /// [`stop_detached`](crate::stop_detached) to manage it.
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

impl ControlPlane {
    /// A builder with the defaults.
    pub fn builder() -> ControlPlaneBuilder {
        ControlPlaneBuilder::default()
    }
}
