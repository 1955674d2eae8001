//! The controller: [`Controller`] (the primary, its sources, the run
//! mode), with its parts beside it (its settings are [`crate::config`]): the
//! [`ControllerHandle`] in [`handle`], the builder methods in [`builder`]
//! and the run path (steps, cache sync, workers, cleanup) in [`run`].

use std::fmt;
use std::future::Future;
#[cfg(feature = "prometheus")]
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use kcache_core::ShardField;
use kcache_informer::{SharedIndexInformer, SharedInformerFactory};
use kube::Resource;

use crate::config::Config;
use crate::metrics::ControllerMetricsProvider;
#[cfg(feature = "prometheus")]
use crate::metrics::MetricsRegistry;
use crate::predicate::Predicate;
use crate::run_mode::RunMode;
use crate::shard_informers::PrimaryOf;
use crate::source::SourceFn;

mod builder;
mod handle;
mod run;

pub use handle::{ControllerHandle, NotLeading};

type ShutdownFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

#[cfg(feature = "prometheus")]
enum MetricsBind {
    Addr(SocketAddr),
    Listener(std::net::TcpListener),
}

/// A controller for the primary resource `K`: client-go's sample-controller
/// loop, controller-runtime's builder. See the [crate docs](crate) for an
/// example.
pub struct Controller<K: Resource> {
    config: Config,
    factory: SharedInformerFactory,
    primary: SharedIndexInformer<K>,
    primary_namespaced: bool,
    primary_group: String,
    primary_kind: String,
    /// The primary's resource (plural), as a `Status` answer names it.
    primary_plural: String,
    primary_predicate: Option<Predicate>,
    sources: Vec<SourceFn>,
    /// Builds the primary informer of a factory (typed controllers only).
    primary_of: Option<PrimaryOf<K>>,
    /// Set by `shard_informers`.
    shard_field: Option<ShardField>,
    mode: RunMode,
    /// Set when both leader election and sharding were asked for.
    conflicting_modes: bool,
    metrics: Option<Arc<dyn ControllerMetricsProvider>>,
    #[cfg(feature = "prometheus")]
    registry: Option<MetricsRegistry>,
    #[cfg(feature = "prometheus")]
    metrics_bind: Option<MetricsBind>,
    shutdown: Vec<ShutdownFuture>,
    handle: ControllerHandle,
}

impl<K: Resource> fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("config", &self.config)
            .field("sources", &self.sources.len())
            .field(
                "leader_election",
                &matches!(self.mode, RunMode::LeaderElected(..)),
            )
            .field("shard", &self.mode.shard())
            .finish_non_exhaustive()
    }
}
