//! The reconcile loop for Kubernetes controllers on kcache informers:
//! client-go's sample-controller loop and controller-runtime's builder,
//! with leader election, events, finalizers, metrics and health.
//!
//! A [`Controller`] watches a primary resource type through a shared
//! informer factory, maps events of the types it owns (through `controller:
//! true` ownerReferences) or watches (through a mapper) to primary keys,
//! filters them with [`Predicate`]s evaluated on cached metadata, and feeds
//! a rate-limited [`WorkQueue`](kcache_workqueue::WorkQueue) that N workers
//! drain by calling your [`Reconciler`]:
//!
//! * the reconciler gets the object **read from the informer's cache** by
//!   key and decoded to `K` for this reconcile only (`None` once deleted);
//! * `Ok(Action::requeue_after(d))` reconciles again later,
//!   `Ok(Action::await_change())` waits for the next event; either way the
//!   key's backoff is forgotten;
//! * an error (or a **panic**, which is caught) sends the key back through
//!   the rate limiter (client-go's default controller rate limiter:
//!   per-key exponential backoff from 5 ms to 1000 s, and 10 qps overall);
//! * the same key is never reconciled by two workers at once;
//! * keys from the initial list get a lower queue priority than live
//!   changes, so a restart's full resync does not delay them;
//! * at shutdown (a signal, a future, or [`ControllerHandle::stop`]) no new
//!   key is taken, running reconciles get a deadline to finish, the queue
//!   shuts down and the lease is released.
//!
//! With [`leader_election`](Controller::leader_election) only the replica
//! holding a `coordination.k8s.io/v1` Lease runs workers
//! ([`kcache_lease::leader_election`]);
//! with [`sharded`](Controller::sharded) every replica runs workers for its
//! share of the keys, handed over through membership Leases so that no key
//! is reconciled by two replicas at once ([`kcache_lease::shard`]);
//! [`events::Recorder`] publishes `events.k8s.io/v1` events folded into
//! series; [`finalizer::finalizer`] runs cleanup before deletion;
//! [`metrics`] records into a provider of this layer's metrics; with the
//! `prometheus` feature (on by default), `MetricsRegistry` (every layer's
//! families, process and REST client metrics) and the endpoint
//! (`MetricsServer`) serve `/metrics`, `/healthz` and `/readyz`. Every reconcile runs in a tracing
//! span `reconcile` with the controller name, key, trigger and retry count.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kcache_controller::{Action, Config, Controller, MetricsRegistry, Predicate, Request};
//! use kcache_informer::SharedInformerFactory;
//!
//! struct Ctx {
//!     client: kube::Client,
//! }
//!
//! async fn reconcile(req: Request<Deployment>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
//!     let Some(deployment) = req.object else {
//!         return Ok(Action::await_change()); // deleted
//!     };
//!     // ... compare deployment.spec with the world, write with ctx.client ...
//!     let _ = (deployment, &ctx.client);
//!     Ok(Action::requeue_after(Duration::from_secs(300)))
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let factory = SharedInformerFactory::new(client.clone());
//! let metrics = MetricsRegistry::new();
//! Controller::<Deployment>::new(&factory, Config::default().name("deployments").workers(4))
//!     .owns::<ReplicaSet>()
//!     .watches::<ConfigMap>(|cm| {
//!         // the Deployments named by the config map's "app" label
//!         let ns = cm.namespace().unwrap_or_default();
//!         cm.labels().get("app").map(|app| vec![format!("{ns}/{app}")]).unwrap_or_default()
//!     })
//!     .with_predicate(Predicate::generation_changed() | Predicate::labels_changed())
//!     .metrics(metrics)
//!     .serve_metrics("0.0.0.0:8080".parse()?)
//!     .shutdown_on_signal()
//!     .run(reconcile, Arc::new(Ctx { client }))
//!     .await?;
//! factory.shutdown().await;
//! # Ok(())
//! # }
//! ```

// docs.rs (rustdoc --cfg docsrs, nightly): items behind a feature carry a
// badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod action;
mod config;
pub mod consistency;
mod controller;
mod error;
pub mod events;
pub mod finalizer;
mod membership_store;
pub mod metrics;
mod predicate;
mod queued;
mod reconciler;
pub mod retry;
mod run_mode;
pub mod server;
mod shard_informers;
mod source;
mod worker;

pub use action::Action;
pub use config::{
    Config, DEFAULT_CACHE_SYNC_TIMEOUT, DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT, INITIAL_LIST_PRIORITY,
};
pub use consistency::{Consistency, DEFAULT_MAX_STALE_WAIT};
pub use controller::{Controller, ControllerHandle, NotLeading};
pub use error::{ControllerError, UnsyncedInformer};
pub use membership_store::KubeMembershipStore;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use metrics::MetricsRegistry;
pub use metrics::{ControllerMetricsProvider, NoopControllerMetricsProvider};
pub use predicate::{Predicate, PredicateEvent};
pub use reconciler::{Reconciler, Request, Trigger};
pub use retry::TerminalError;
pub use server::Health;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use server::MetricsServer;
pub use shard_informers::SLOTS as SHARD_SLOTS;
pub use source::owner_key;

/// A `tracing_subscriber::EnvFilter` directive for an operator: everything
/// at `level`, except kube-client's per-request trace layer
/// (`kube_client::client::builder`), whose ERROR lines ("failed with
/// status 503", "failed with error ... Connection refused") repeat, once
/// per request, failures that kcache already reports once as a WARN saying
/// what to fix.
///
/// ```
/// assert_eq!(kcache_controller::log_filter("info"), "info,kube_client::client::builder=off");
/// ```
pub fn log_filter(level: &str) -> String {
    format!("{level},kube_client::client::builder=off")
}
