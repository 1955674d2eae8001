//! [`MetricsRegistry`]: the controller's metrics on `prometheus-client`,
//! and the registry served on `/metrics` (feature `prometheus`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use kcache_core::metrics::prometheus::{HistogramFamily, Labels, family, histogram_family, labels};

use super::rest_client::{RestClientMetrics, RestClientMetricsLayer};
use super::{
    ControllerMetricsProvider, CounterMetric, GaugeMetric, HistogramMetric, Refresher,
    SettableGaugeMetric,
};

fn reconcile_time_histogram() -> Histogram {
    // controller-runtime's buckets.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

fn stale_wait_histogram() -> Histogram {
    // from a watch a millisecond behind to the gate's bound and past it
    Histogram::new([
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

/// The controller layer's families.
#[derive(Clone)]
struct Families {
    reconcile_total: Family<Labels, Counter>,
    reconcile_errors: Family<Labels, Counter>,
    reconcile_panics: Family<Labels, Counter>,
    terminal_reconcile_errors: Family<Labels, Counter>,
    reconcile_time: HistogramFamily,
    active_workers: Family<Labels, Gauge>,
    max_concurrent: Family<Labels, Gauge>,
    leader: Family<Labels, Gauge>,
    leader_errors: Family<Labels, Counter>,
    shard_members: Family<Labels, Gauge>,
    shard_owned_keys: Family<Labels, Gauge>,
    shard_handovers: Family<Labels, Counter>,
    stale_deferred: Family<Labels, Counter>,
    stale_wait: HistogramFamily,
    reconcile_timeouts: Family<Labels, Counter>,
}

impl Families {
    fn new(registry: &mut Registry) -> Self {
        // HELP texts end in no period: prometheus-client adds one.
        let r = registry;
        Families {
            reconcile_total: family(
                r,
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
            ),
            reconcile_errors: family(
                r,
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
            ),
            reconcile_panics: family(
                r,
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics per controller",
            ),
            terminal_reconcile_errors: family(
                r,
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
            ),
            reconcile_time: histogram_family(
                r,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                reconcile_time_histogram,
            ),
            active_workers: family(
                r,
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
            ),
            max_concurrent: family(
                r,
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
            ),
            leader: family(
                r,
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            ),
            leader_errors: family(
                r,
                "kcache_leader_election_errors",
                "Lease requests of leader election that failed (conflicts between candidates excluded)",
            ),
            shard_members: family(
                r,
                "kcache_shard_members",
                "Members of the shard group in the view this replica works towards",
            ),
            shard_owned_keys: family(
                r,
                "kcache_shard_owned_keys",
                "Cached keys this replica of a sharded controller may reconcile",
            ),
            shard_handovers: family(
                r,
                "kcache_shard_handovers",
                "Keys this replica gained or released in shard handovers",
            ),
            stale_deferred: family(
                r,
                "kcache_controller_stale_reconciles_deferred",
                "Reconciles deferred because a cache had not caught up with the controller's own write",
            ),
            stale_wait: histogram_family(
                r,
                "kcache_controller_stale_reconcile_wait_seconds",
                "How long a deferred reconcile waited for the cache to catch up with the controller's own write",
                stale_wait_histogram,
            ),
            reconcile_timeouts: family(
                r,
                "kcache_controller_reconcile_timeouts",
                "Reconciles cancelled because they ran longer than the controller's reconcile timeout",
            ),
        }
    }
}

/// A registered refresher, shared so that a scrape runs it without the lock.
type SharedRefresher = Arc<dyn Fn() + Send + Sync>;

struct Inner {
    registry: Mutex<Registry>,
    families: Families,
    workqueue: kcache_workqueue::PrometheusWorkQueueMetricsProvider,
    informer: kcache_informer::PrometheusInformerMetricsProvider,
    reflector: kcache_reflector::PrometheusReflectorMetricsProvider,
    rest_client: RestClientMetrics,
    refreshers: Mutex<Vec<(u64, SharedRefresher)>>,
    next_refresher: AtomicU64,
}

/// The process's metrics: a `prometheus-client` [`Registry`] with every
/// kcache family registered once (the controller's, and the workqueue,
/// informer and reflector providers' of the crates below), the process
/// metrics (`process_*`, read from `/proc/self` at scrape time on Linux)
/// and the REST client metrics (`rest_client_*`, recorded by
/// [`rest_client_layer`](Self::rest_client_layer)). Cheap to clone; share
/// one between controllers and add your own metrics with
/// [`register`](Self::register) and scrape-time
/// [refreshers](Self::add_refresher).
#[derive(Clone)]
pub struct MetricsRegistry {
    inner: Arc<Inner>,
}

impl fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsRegistry").finish_non_exhaustive()
    }
}

impl Default for MetricsRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl MetricsRegistry {
    /// A registry with every kcache family registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let families = Families::new(&mut registry);
        let workqueue = kcache_workqueue::PrometheusWorkQueueMetricsProvider::new(&mut registry);
        let informer = kcache_informer::PrometheusInformerMetricsProvider::new(&mut registry);
        let reflector = kcache_reflector::PrometheusReflectorMetricsProvider::new(&mut registry);
        let rest_client = RestClientMetrics::new(&mut registry);
        super::process::register(&mut registry);
        Self {
            inner: Arc::new(Inner {
                registry: Mutex::new(registry),
                families,
                workqueue,
                informer,
                reflector,
                rest_client,
                refreshers: Mutex::new(Vec::new()),
                next_refresher: AtomicU64::new(0),
            }),
        }
    }

    /// Registers more metrics (yours, or another crate's provider).
    pub fn register(&self, f: impl FnOnce(&mut Registry)) {
        f(&mut self.inner.registry.lock());
    }

    /// The workqueue metrics provider, for queues built by hand (the
    /// controller uses it for its own queue).
    pub fn workqueue_provider(&self) -> kcache_workqueue::PrometheusWorkQueueMetricsProvider {
        self.inner.workqueue.clone()
    }

    /// The informer metrics provider (`kcache_informer_*`), for informers
    /// and factories built by hand (the controller sets it on the
    /// informers it watches).
    pub fn informer_provider(&self) -> Arc<dyn kcache_informer::InformerMetricsProvider> {
        Arc::new(self.inner.informer.clone())
    }

    /// The reflector metrics provider (`reflector_*`), for reflectors and
    /// informers built by hand (the controller sets it on the informers it
    /// watches that have not started yet).
    pub fn reflector_provider(&self) -> Arc<dyn kcache_reflector::ReflectorMetricsProvider> {
        Arc::new(self.inner.reflector.clone())
    }

    /// A tower layer for a [`kube::Client`] that records client-go's REST
    /// client metrics (`rest_client_requests_total{code,method,host}`,
    /// `rest_client_request_duration_seconds{verb,host}`) here. `host`
    /// labels requests whose URI carries no host (kube's
    /// `ClientBuilder::with_layer` adds layers outside the one that sets
    /// the cluster URL): give the cluster's `host:port`, e.g.
    /// [`RestClientMetricsLayer::host_of`] of the config's `cluster_url`.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use kcache_controller::metrics::{MetricsRegistry, RestClientMetricsLayer};
    /// let registry = MetricsRegistry::new();
    /// let config = kube::Config::infer().await?;
    /// let layer = registry.rest_client_layer(RestClientMetricsLayer::host_of(&config.cluster_url));
    /// let client = kube::client::ClientBuilder::try_from(config)?
    ///     .with_layer(&layer)
    ///     .build();
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn rest_client_layer(&self, host: impl Into<String>) -> RestClientMetricsLayer {
        RestClientMetricsLayer::new(self.inner.rest_client.clone(), host)
    }

    /// Runs `f` before every scrape ([`encode`](Self::encode)), to set
    /// gauges from live state; returns an id for
    /// [`remove_refresher`](Self::remove_refresher).
    pub fn add_refresher(&self, f: impl Fn() + Send + Sync + 'static) -> u64 {
        let id = self.inner.next_refresher.fetch_add(1, Ordering::Relaxed);
        self.inner.refreshers.lock().push((id, Arc::new(f)));
        id
    }

    /// Stops running the refresher `id` (from
    /// [`add_refresher`](Self::add_refresher)).
    pub fn remove_refresher(&self, id: u64) {
        self.inner.refreshers.lock().retain(|(i, _)| *i != id);
    }

    /// The OpenMetrics text exposition of every metric (refreshers run
    /// first).
    pub fn encode(&self) -> String {
        // run the refreshers without holding the lock: one may add another
        let refreshers: Vec<_> = self
            .inner
            .refreshers
            .lock()
            .iter()
            .map(|(_, f)| f.clone())
            .collect();
        for f in refreshers {
            f();
        }
        let mut out = String::new();
        let registry = self.inner.registry.lock();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }
}

impl ControllerMetricsProvider for MetricsRegistry {
    fn new_reconcile_total_metric(&self, controller: &str, result: &str) -> Box<dyn CounterMetric> {
        let l = labels(&[("controller", controller), ("result", result)]);
        Box::new(self.inner.families.reconcile_total.get_or_create_owned(&l))
    }
    fn new_reconcile_errors_metric(&self, controller: &str) -> Box<dyn CounterMetric> {
        let l = labels(&[("controller", controller)]);
        Box::new(self.inner.families.reconcile_errors.get_or_create_owned(&l))
    }
    fn new_reconcile_panics_metric(&self, controller: &str) -> Box<dyn CounterMetric> {
        let l = labels(&[("controller", controller)]);
        Box::new(self.inner.families.reconcile_panics.get_or_create_owned(&l))
    }
    fn new_terminal_reconcile_errors_metric(&self, controller: &str) -> Box<dyn CounterMetric> {
        let l = labels(&[("controller", controller)]);
        let f = &self.inner.families.terminal_reconcile_errors;
        Box::new(f.get_or_create_owned(&l))
    }
    fn new_reconcile_time_metric(&self, controller: &str) -> Box<dyn HistogramMetric> {
        let l = labels(&[("controller", controller)]);
        Box::new(self.inner.families.reconcile_time.get_or_create_owned(&l))
    }
    fn new_active_workers_metric(&self, controller: &str) -> Box<dyn GaugeMetric> {
        let l = labels(&[("controller", controller)]);
        Box::new(self.inner.families.active_workers.get_or_create_owned(&l))
    }
    fn new_max_concurrent_reconciles_metric(
        &self,
        controller: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        let l = labels(&[("controller", controller)]);
        Box::new(self.inner.families.max_concurrent.get_or_create_owned(&l))
    }
    fn new_leader_status_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric> {
        let l = labels(&[("name", name)]);
        Box::new(self.inner.families.leader.get_or_create_owned(&l))
    }
    fn new_leader_errors_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        let l = labels(&[("name", name)]);
        Box::new(self.inner.families.leader_errors.get_or_create_owned(&l))
    }
    fn new_shard_members_metric(
        &self,
        controller: &str,
        group: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        let l = labels(&[("controller", controller), ("group", group)]);
        Box::new(self.inner.families.shard_members.get_or_create_owned(&l))
    }
    fn new_shard_owned_keys_metric(
        &self,
        controller: &str,
        group: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        let l = labels(&[("controller", controller), ("group", group)]);
        Box::new(self.inner.families.shard_owned_keys.get_or_create_owned(&l))
    }
    fn new_shard_handovers_metric(
        &self,
        controller: &str,
        group: &str,
        direction: &str,
    ) -> Box<dyn CounterMetric> {
        let l = labels(&[
            ("controller", controller),
            ("group", group),
            ("direction", direction),
        ]);
        Box::new(self.inner.families.shard_handovers.get_or_create_owned(&l))
    }
    fn new_stale_reconciles_deferred_metric(&self, controller: &str) -> Box<dyn CounterMetric> {
        let l = labels(&[("controller", controller)]);
        Box::new(self.inner.families.stale_deferred.get_or_create_owned(&l))
    }
    fn new_stale_reconcile_wait_metric(&self, controller: &str) -> Box<dyn HistogramMetric> {
        let l = labels(&[("controller", controller)]);
        Box::new(self.inner.families.stale_wait.get_or_create_owned(&l))
    }
    fn new_reconcile_timeouts_metric(&self, controller: &str) -> Box<dyn CounterMetric> {
        let l = labels(&[("controller", controller)]);
        Box::new(
            self.inner
                .families
                .reconcile_timeouts
                .get_or_create_owned(&l),
        )
    }
    fn workqueue_provider(&self) -> Option<Arc<dyn kcache_workqueue::WorkQueueMetricsProvider>> {
        Some(Arc::new(self.inner.workqueue.clone()))
    }
    fn informer_provider(&self) -> Option<Arc<dyn kcache_informer::InformerMetricsProvider>> {
        Some(MetricsRegistry::informer_provider(self))
    }
    fn reflector_provider(&self) -> Option<Arc<dyn kcache_reflector::ReflectorMetricsProvider>> {
        Some(MetricsRegistry::reflector_provider(self))
    }
    fn add_refresher(&self, f: Refresher) -> Option<u64> {
        Some(MetricsRegistry::add_refresher(self, f))
    }
    fn remove_refresher(&self, id: u64) {
        MetricsRegistry::remove_refresher(self, id);
    }
}
