//! A real local Kubernetes control plane for tests and examples.
//!
//! `kcache-envtest` starts **etcd** and **kube-apiserver** on loopback, the
//! way controller-runtime's envtest does: no kubelet, no controllers, just
//! the API, with the real apiserver's semantics (resourceVersions, watch
//! bookmarks, `410 Gone`, RBAC, CRDs, streaming lists).
//!
//! The two binaries are built from the Kubernetes Go modules pinned in the
//! crate's `controlplane/go.mod` (kube-apiserver from
//! `k8s.io/kubernetes` [`KUBERNETES_VERSION`], etcd [`ETCD_VERSION`]) the
//! first time they are needed, into `target/controlplane/`, and reused
//! afterwards; only Go >= 1.26 must be installed. A cold build takes several
//! minutes; `cargo xtask controlplane build` does it up front with progress.
//!
//! Each control plane has its own CA and serving certificate, authenticates
//! users by client certificate (CN = user, O = groups), authorizes with RBAC,
//! and writes an admin kubeconfig (group `system:masters`). Its keys, the
//! kubeconfig, its logs and the state file of a detached control plane are
//! written with mode 0600, in a run folder (and data and PKI folders) of
//! mode 0700, tightened when they exist from an earlier run.
//!
//! # Example
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kcache_envtest::ControlPlane;
//! use kube::api::{Api, PostParams};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // One control plane for every test of this test binary.
//! let cp = ControlPlane::shared().await?;
//! let ns = cp.create_namespace("example").await?;
//! let cms: Api<ConfigMap> = Api::namespaced(cp.client()?, &ns);
//! let cm: ConfigMap = serde_json::from_value(serde_json::json!({
//!     "metadata": { "name": "hello" },
//!     "data": { "greeting": "hi" }
//! }))?;
//! cms.create(&PostParams::default(), &cm).await?;
//! assert_eq!(cms.list(&Default::default()).await?.items.len(), 1);
//! # Ok(())
//! # }
//! ```
//!
//! kube-apiserver runs with the alpha feature gate `ShardedListAndWatch`
//! (server-side sharded list and watch: the `shardSelector` parameter);
//! [`ControlPlaneBuilder::sharded_list_and_watch`]`(false)` starts it without.
//!
//! Fault tests start their own control plane with [`ControlPlane::start`] and
//! use [`ControlPlane::restart_apiserver`], [`ControlPlane::stop_apiserver`],
//! [`ControlPlane::start_apiserver`] and [`ControlPlane::compact_etcd`].
//!
//! Processes never outlive their owner: dropping a [`ControlPlane`] stops
//! them, and they exit by themselves when the process that started them
//! exits (even on a panic or `SIGKILL`), since the wrapper binaries watch
//! their parent. Logs are kept under `target/controlplane/runs/<run>/`; when
//! a process fails to start, the error carries the last lines of its log.

// docs.rs (rustdoc --cfg docsrs, nightly): items behind a feature carry a
// badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod binaries;
mod certs;
mod control_plane;
mod error;
mod kubeconfig;
pub mod proxy;
mod raw_http;

/// Locks a mutex, recovering it if a panicking thread poisoned it (as
/// `kcache_core::sync::lock`; this crate does not depend on kcache-core
/// outside its tests).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub use binaries::{Binaries, ETCD_VERSION, KUBERNETES_VERSION};
pub use certs::CertAndKey;
pub use control_plane::{AuditPolicy, ControlPlane, ControlPlaneBuilder, EXTERNAL_KUBECONFIG_ENV};
// `cargo xtask controlplane start|stop|status`'s detached control plane:
// hidden from the docs, outside semver
#[doc(hidden)]
pub use control_plane::{DetachedState, detached_state, pid_alive, stop_detached};
pub use error::EnvtestError;
