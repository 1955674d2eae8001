//! Controller metrics on `prometheus-client`, and the registry served on
//! `/metrics`.
//!
//! One [`MetricsRegistry`] per process holds every family once, labelled by
//! controller, queue or informer name:
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
//! | `kcache_informer_synced` | gauge (1 synced) | `informer` |
//! | `kcache_informer_cached_objects` | gauge | `informer` |
//! | `kcache_informer_handler_backlog` | gauge | `informer` |
//! | `kcache_shard_members` | gauge (members in the view being worked towards) | `controller`, `group` |
//! | `kcache_shard_owned_keys` | gauge (cached keys this replica may reconcile) | `controller`, `group` |
//! | `kcache_shard_handovers_total` | counter (keys) | `controller`, `group`, `direction` (`gained`, `released`) |
//! | `workqueue_*` | client-go's workqueue metrics | `name` |
//! | `reflector_*` | kcache-reflector's metrics, for reflectors given [`MetricsRegistry::reflector_provider`] | `name` |
//!
//! The reconcile names are controller-runtime's, so existing dashboards
//! work. Informer gauges are read from the informers when `/metrics` is
//! scraped.

use std::fmt;
use std::sync::Arc;

use kcache_workqueue::PrometheusMetricsProvider;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn reconcile_time_histogram() -> Histogram {
    // controller-runtime's buckets.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

/// A `prometheus-client` metric seen through kcache-core's metric
/// primitives (what kcache-lease records into).
pub(crate) struct Prom<M>(pub(crate) M);

impl kcache_core::metrics::CounterMetric for Prom<Counter> {
    fn inc_by(&self, n: u64) {
        self.0.inc_by(n);
    }
}

impl kcache_core::metrics::SettableGaugeMetric for Prom<Gauge> {
    fn set(&self, value: f64) {
        // gauges here count things: whole numbers
        self.0.set(value as i64);
    }
}

pub(crate) fn label(name: &str, value: &str) -> Labels {
    vec![(name.to_owned(), value.to_owned())]
}

#[derive(Clone)]
pub(crate) struct Families {
    pub(crate) reconcile_total: Family<Labels, Counter>,
    pub(crate) reconcile_errors: Family<Labels, Counter>,
    pub(crate) reconcile_panics: Family<Labels, Counter>,
    pub(crate) terminal_reconcile_errors: Family<Labels, Counter>,
    pub(crate) reconcile_time: HistogramFamily,
    pub(crate) active_workers: Family<Labels, Gauge>,
    pub(crate) max_concurrent: Family<Labels, Gauge>,
    pub(crate) leader: Family<Labels, Gauge>,
    pub(crate) leader_errors: Family<Labels, Counter>,
    pub(crate) informer_synced: Family<Labels, Gauge>,
    pub(crate) informer_objects: Family<Labels, Gauge>,
    pub(crate) informer_backlog: Family<Labels, Gauge>,
    pub(crate) shard_members: Family<Labels, Gauge>,
    pub(crate) shard_owned_keys: Family<Labels, Gauge>,
    pub(crate) shard_handovers: Family<Labels, Counter>,
}

type Refresher = Box<dyn Fn() + Send + Sync>;

struct Inner {
    registry: Mutex<Registry>,
    families: Families,
    workqueue: PrometheusMetricsProvider,
    reflector: kcache_reflector::PrometheusMetricsProvider,
    refreshers: Mutex<Vec<(u64, Refresher)>>,
    next_refresher: std::sync::atomic::AtomicU64,
}

/// The process's metrics: a `prometheus-client` [`Registry`] with the
/// controller, leader election, informer and workqueue families registered
/// once. Cheap to clone; share one between controllers and add your own
/// metrics with [`register`](Self::register).
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
        let families = Families {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_panics: Family::default(),
            terminal_reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_time_histogram),
            active_workers: Family::default(),
            max_concurrent: Family::default(),
            leader: Family::default(),
            leader_errors: Family::default(),
            informer_synced: Family::default(),
            informer_objects: Family::default(),
            informer_backlog: Family::default(),
            shard_members: Family::default(),
            shard_owned_keys: Family::default(),
            shard_handovers: Family::default(),
        };
        // prometheus-client appends `_total` to counters.
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            families.reconcile_total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            families.reconcile_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            families.reconcile_panics.clone(),
        );
        registry.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            families.terminal_reconcile_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            families.reconcile_time.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            families.active_workers.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            families.max_concurrent.clone(),
        );
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            families.leader.clone(),
        );
        registry.register(
            "kcache_leader_election_errors",
            "Lease requests of leader election that failed (conflicts between candidates excluded)",
            families.leader_errors.clone(),
        );
        registry.register(
            "kcache_informer_synced",
            "Whether the informer's cache has synced (1) or not (0)",
            families.informer_synced.clone(),
        );
        registry.register(
            "kcache_informer_cached_objects",
            "Number of objects in the informer's cache",
            families.informer_objects.clone(),
        );
        registry.register(
            "kcache_informer_handler_backlog",
            "Notifications waiting in the informer's handler buffers",
            families.informer_backlog.clone(),
        );
        registry.register(
            "kcache_shard_members",
            "Members of the shard group in the view this replica works towards",
            families.shard_members.clone(),
        );
        registry.register(
            "kcache_shard_owned_keys",
            "Cached keys this replica of a sharded controller may reconcile",
            families.shard_owned_keys.clone(),
        );
        registry.register(
            "kcache_shard_handovers",
            "Keys this replica gained or released in shard handovers",
            families.shard_handovers.clone(),
        );
        let workqueue = PrometheusMetricsProvider::new(&mut registry);
        let reflector = kcache_reflector::PrometheusMetricsProvider::new(&mut registry);
        Self {
            inner: Arc::new(Inner {
                registry: Mutex::new(registry),
                families,
                workqueue,
                reflector,
                refreshers: Mutex::new(Vec::new()),
                next_refresher: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// Registers more metrics (yours, or another crate's provider).
    pub fn register(&self, f: impl FnOnce(&mut Registry)) {
        f(&mut self.inner.registry.lock());
    }

    /// The workqueue metrics provider for queues (the controller uses it
    /// for its own queue).
    pub fn workqueue_provider(&self) -> PrometheusMetricsProvider {
        self.inner.workqueue.clone()
    }

    /// The reflector metrics provider, for reflectors built by hand
    /// (`ReflectorBuilder::metrics`). The informer factory does not take a
    /// reflector metrics provider yet, so informers' reflectors are not
    /// covered; the informer gauges above are.
    pub fn reflector_provider(&self) -> Arc<dyn kcache_reflector::MetricsProvider> {
        Arc::new(self.inner.reflector.clone())
    }

    pub(crate) fn families(&self) -> &Families {
        &self.inner.families
    }

    /// Adds a function run before every encode (to read gauges from live
    /// state); returns an id for [`remove_refresher`](Self::remove_refresher).
    pub(crate) fn add_refresher(&self, f: impl Fn() + Send + Sync + 'static) -> u64 {
        let id = self
            .inner
            .next_refresher
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.refreshers.lock().push((id, Box::new(f)));
        id
    }

    pub(crate) fn remove_refresher(&self, id: u64) {
        self.inner.refreshers.lock().retain(|(i, _)| *i != id);
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        for (_, f) in self.inner.refreshers.lock().iter() {
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
