//! The controller's metrics: a provider trait ([`ControllerMetricsProvider`]) that
//! creates this layer's named metrics from kcache-core's primitives, a
//! no-op default, and (feature `prometheus`, on by default) the
//! `prometheus-client` registry served on `/metrics`
//! ([`MetricsRegistry`]), which also registers every lower layer's
//! families once (workqueue, informer, reflector), the process metrics and
//! the REST client metrics.
//!
//! This layer's metrics (the reconcile names are controller-runtime's, so
//! existing dashboards work):
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` (`success`, `requeue_after`, `error`) |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` |
//! | `controller_runtime_reconcile_panics_total` | counter | `controller` |
//! | `controller_runtime_terminal_reconcile_errors_total` | counter (errors not retried: [`TerminalError`](crate::TerminalError)) | `controller` |
//! | `controller_runtime_reconcile_time_seconds` | histogram | `controller` |
//! | `controller_runtime_active_workers` | gauge | `controller` |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` |
//! | `leader_election_master_status` | gauge (1 leading, 0 not) | `name` |
//! | `kcache_leader_election_errors_total` | counter (failed lease requests, conflicts excluded) | `name` |
//! | `kcache_shard_members` | gauge (members in the view being worked towards) | `controller`, `group` |
//! | `kcache_shard_owned_keys` | gauge (cached keys this replica may reconcile) | `controller`, `group` |
//! | `kcache_shard_handovers_total` | counter (keys) | `controller`, `group`, `direction` (`gained`, `released`) |
//! | `kcache_controller_stale_reconciles_deferred_total` | counter (reconciles the stale-cache gate deferred) | `controller` |
//! | `kcache_controller_stale_reconcile_wait_seconds` | histogram (how long a deferred reconcile waited for the cache) | `controller` |
//! | `kcache_controller_reconcile_timeouts_total` | counter (reconciles cancelled by [`Config::reconcile_timeout`](crate::Config::reconcile_timeout); controller-runtime's `controller_runtime_reconcile_timeouts_total`) | `controller` |
//!
//! The lower layers' metrics are their own crates' (`workqueue_*`:
//! kcache-workqueue; `kcache_informer_*`: kcache-informer's
//! [`metrics`](kcache_informer::metrics); `reflector_*`:
//! kcache-reflector's); see
//! [metrics.md](https://github.com/kcache/kcache/blob/main/docs/metrics.md)
//! for the whole list.

use std::sync::Arc;

use kcache_core::metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, NoopMetric, SettableGaugeMetric,
};

#[cfg(feature = "prometheus")]
mod process;
#[cfg(feature = "prometheus")]
mod prometheus;
#[cfg(feature = "prometheus")]
mod rest_client;

#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use prometheus::MetricsRegistry;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use rest_client::{RestClientMetrics, RestClientMetricsLayer, RestClientMetricsService};

/// A function run before every scrape, to read a gauge from live state.
pub type Refresher = Box<dyn Fn() + Send + Sync>;

/// Creates the controller layer's metrics (see the [module](self) docs for
/// their names), and hands out the providers of the layers below.
pub trait ControllerMetricsProvider: Send + Sync {
    /// `controller_runtime_reconcile_total{controller,result}`.
    fn new_reconcile_total_metric(&self, controller: &str, result: &str) -> Box<dyn CounterMetric>;
    /// `controller_runtime_reconcile_errors_total{controller}`.
    fn new_reconcile_errors_metric(&self, controller: &str) -> Box<dyn CounterMetric>;
    /// `controller_runtime_reconcile_panics_total{controller}`.
    fn new_reconcile_panics_metric(&self, controller: &str) -> Box<dyn CounterMetric>;
    /// `controller_runtime_terminal_reconcile_errors_total{controller}`.
    fn new_terminal_reconcile_errors_metric(&self, controller: &str) -> Box<dyn CounterMetric>;
    /// `controller_runtime_reconcile_time_seconds{controller}`.
    fn new_reconcile_time_metric(&self, controller: &str) -> Box<dyn HistogramMetric>;
    /// `controller_runtime_active_workers{controller}`.
    fn new_active_workers_metric(&self, controller: &str) -> Box<dyn GaugeMetric>;
    /// `controller_runtime_max_concurrent_reconciles{controller}`.
    fn new_max_concurrent_reconciles_metric(
        &self,
        controller: &str,
    ) -> Box<dyn SettableGaugeMetric>;
    /// `leader_election_master_status{name}`.
    fn new_leader_status_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric>;
    /// `kcache_leader_election_errors_total{name}`.
    fn new_leader_errors_metric(&self, name: &str) -> Box<dyn CounterMetric>;
    /// `kcache_shard_members{controller,group}`.
    fn new_shard_members_metric(
        &self,
        controller: &str,
        group: &str,
    ) -> Box<dyn SettableGaugeMetric>;
    /// `kcache_shard_owned_keys{controller,group}`.
    fn new_shard_owned_keys_metric(
        &self,
        controller: &str,
        group: &str,
    ) -> Box<dyn SettableGaugeMetric>;
    /// `kcache_shard_handovers_total{controller,group,direction}`.
    fn new_shard_handovers_metric(
        &self,
        controller: &str,
        group: &str,
        direction: &str,
    ) -> Box<dyn CounterMetric>;
    /// `kcache_controller_stale_reconciles_deferred_total{controller}`:
    /// reconciles the stale-cache gate deferred (see
    /// [`Consistency`](crate::Consistency)). Default: not recorded.
    fn new_stale_reconciles_deferred_metric(&self, controller: &str) -> Box<dyn CounterMetric> {
        let _ = controller;
        Box::new(NoopMetric)
    }
    /// `kcache_controller_stale_reconcile_wait_seconds{controller}`: how
    /// long each deferred reconcile waited for the cache. Default: not
    /// recorded.
    fn new_stale_reconcile_wait_metric(&self, controller: &str) -> Box<dyn HistogramMetric> {
        let _ = controller;
        Box::new(NoopMetric)
    }
    /// `kcache_controller_reconcile_timeouts_total{controller}`: reconciles
    /// cancelled because they ran past
    /// [`Config::reconcile_timeout`](crate::Config::reconcile_timeout).
    /// Default: not recorded.
    fn new_reconcile_timeouts_metric(&self, controller: &str) -> Box<dyn CounterMetric> {
        let _ = controller;
        Box::new(NoopMetric)
    }
    /// The provider for the controller's work queue (none: not recorded).
    fn workqueue_provider(&self) -> Option<Arc<dyn kcache_workqueue::WorkQueueMetricsProvider>> {
        None
    }
    /// The provider for the controller's informers (none: not recorded).
    fn informer_provider(&self) -> Option<Arc<dyn kcache_informer::InformerMetricsProvider>> {
        None
    }
    /// The provider for the reflectors of the controller's informers, set
    /// on informers not started yet (none: not recorded).
    fn reflector_provider(&self) -> Option<Arc<dyn kcache_reflector::ReflectorMetricsProvider>> {
        None
    }
    /// Runs `f` before every scrape (for gauges read from live state);
    /// returns an id for [`remove_refresher`](Self::remove_refresher), or
    /// `None` when this provider is never scraped.
    fn add_refresher(&self, f: Refresher) -> Option<u64> {
        let _ = f;
        None
    }
    /// Stops running the refresher `id`.
    fn remove_refresher(&self, id: u64) {
        let _ = id;
    }
}

/// A provider whose metrics record nothing: the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopControllerMetricsProvider;

impl ControllerMetricsProvider for NoopControllerMetricsProvider {
    fn new_reconcile_total_metric(&self, _: &str, _: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    fn new_reconcile_errors_metric(&self, _: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    fn new_reconcile_panics_metric(&self, _: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    fn new_terminal_reconcile_errors_metric(&self, _: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    fn new_reconcile_time_metric(&self, _: &str) -> Box<dyn HistogramMetric> {
        Box::new(NoopMetric)
    }
    fn new_active_workers_metric(&self, _: &str) -> Box<dyn GaugeMetric> {
        Box::new(NoopMetric)
    }
    fn new_max_concurrent_reconciles_metric(&self, _: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    fn new_leader_status_metric(&self, _: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    fn new_leader_errors_metric(&self, _: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    fn new_shard_members_metric(&self, _: &str, _: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    fn new_shard_owned_keys_metric(&self, _: &str, _: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    fn new_shard_handovers_metric(&self, _: &str, _: &str, _: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
}
