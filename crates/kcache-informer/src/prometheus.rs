//! A [`InformerMetricsProvider`] on the `prometheus-client` crate (feature
//! `prometheus`).

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use kcache_core::metrics::prometheus::{HistogramFamily, Labels, family, histogram_family, labels};
use prometheus_client::metrics::histogram::Histogram;

use crate::metrics::{InformerId, InformerMetricsProvider, SnapshotMetrics};

use kcache_core::metrics::{CounterMetric, HistogramMetric, SettableGaugeMetric};

fn resource(id: &InformerId) -> Labels {
    labels(&[
        ("name", &id.name),
        ("group", &id.group),
        ("version", &id.version),
        ("resource", &id.resource),
    ])
}

/// client-go's buckets for `informer_processing_latency_seconds`.
fn latency_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

type Count = Family<Labels, Gauge>;
type Seconds = Family<Labels, Gauge<f64, AtomicU64>>;

fn informer(name: &str) -> Labels {
    labels(&[("informer", name)])
}

fn handler(informer: &str, handler: &str) -> Labels {
    labels(&[("informer", informer), ("handler", handler)])
}

/// Registers the informer metrics (see [`metrics`](crate::metrics)) in a
/// `prometheus-client` [`Registry`] and hands them to informers, labelled
/// by informer (and handler) name.
///
/// Register it once per registry and share it (it is cheap to clone)
/// between every informer, e.g. through
/// [`SharedInformerFactoryBuilder::metrics`](crate::SharedInformerFactoryBuilder::metrics).
/// The reflectors' metrics are registered separately, with
/// kcache-reflector's `PrometheusReflectorMetricsProvider`.
///
/// ```
/// use std::sync::Arc;
/// use kcache_informer::PrometheusInformerMetricsProvider;
/// use kcache_reflector::PrometheusReflectorMetricsProvider;
/// use prometheus_client::registry::Registry;
///
/// # fn build(client: kube::Client) {
/// let mut registry = Registry::default();
/// let informers = PrometheusInformerMetricsProvider::new(&mut registry);
/// let reflectors = PrometheusReflectorMetricsProvider::new(&mut registry);
/// let factory = kcache_informer::SharedInformerFactory::builder(client)
///     .metrics(Arc::new(informers))
///     .reflector_metrics(Arc::new(reflectors))
///     .build();
/// # let _ = factory;
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PrometheusInformerMetricsProvider {
    synced: Count,
    cached_objects: Count,
    backlog: Count,
    delivered: Family<Labels, Counter>,
    panics: Family<Labels, Counter>,
    warm_start: Count,
    snapshot_age: Seconds,
    objects_loaded: Count,
    resume_relisted: Count,
    time_to_synced: Seconds,
    writes: Family<Labels, Counter>,
    write_failures: Family<Labels, Counter>,
    last_write_seconds: Seconds,
    last_write_bytes: Count,
    last_write_objects: Count,
    queued_items: Count,
    processing_latency: HistogramFamily,
    store_resource_version: Family<Labels, Gauge<f64, AtomicU64>>,
}

impl PrometheusInformerMetricsProvider {
    /// Creates the metric families and registers them in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let r = registry;
        Self {
            synced: family(
                r,
                "kcache_informer_synced",
                "Whether the informer's cache has synced (1) or not (0)",
            ),
            cached_objects: family(
                r,
                "kcache_informer_cached_objects",
                "Objects in the informer's cache",
            ),
            backlog: family(
                r,
                "kcache_informer_listener_backlog",
                "Notifications waiting for an event handler",
            ),
            delivered: family(
                r,
                "kcache_informer_listener_delivered",
                "Notifications an event handler returned from",
            ),
            panics: family(
                r,
                "kcache_informer_handler_panics",
                "Event handler panics (each event was skipped)",
            ),
            warm_start: family(
                r,
                "kcache_informer_warm_start",
                "1 if the informer started from a snapshot, 0 if it listed",
            ),
            snapshot_age: family(
                r,
                "kcache_informer_snapshot_age_seconds",
                "Age of the snapshot loaded at start (0 on a cold start)",
            ),
            objects_loaded: family(
                r,
                "kcache_informer_snapshot_objects_loaded",
                "Objects loaded from the snapshot at start (0 on a cold start)",
            ),
            resume_relisted: family(
                r,
                "kcache_informer_snapshot_resume_relisted",
                "1 if the snapshot's resourceVersion was too old and the informer relisted",
            ),
            time_to_synced: family(
                r,
                "kcache_informer_time_to_synced_seconds",
                "Time from the start of the informer until it had synced",
            ),
            writes: family(r, "kcache_informer_snapshot_writes", "Snapshots written"),
            write_failures: family(
                r,
                "kcache_informer_snapshot_write_failures",
                "Snapshot writes that failed",
            ),
            last_write_seconds: family(
                r,
                "kcache_informer_snapshot_last_write_seconds",
                "Duration of the last snapshot write (encode, write, fsync, rename)",
            ),
            last_write_bytes: family(
                r,
                "kcache_informer_snapshot_last_write_bytes",
                "Size of the last snapshot written, in bytes",
            ),
            last_write_objects: family(
                r,
                "kcache_informer_snapshot_last_write_objects",
                "Objects in the last snapshot written",
            ),
            queued_items: family(
                r,
                "informer_queued_items",
                "Number of items currently queued in the FIFO",
            ),
            processing_latency: histogram_family(
                r,
                "informer_processing_latency_seconds",
                "Time taken to process events after popping from the queue",
                latency_histogram,
            ),
            store_resource_version: family(
                r,
                "informer_store_resource_version",
                "The 15 least significant digits of the resource version of the store",
            ),
        }
    }
}

// prometheus-client's metrics are kcache-core's primitives (kcache-core's
// `prometheus` feature): a family's metric is handed out as it is.
impl InformerMetricsProvider for PrometheusInformerMetricsProvider {
    fn new_queued_items_metric(&self, id: &InformerId) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.queued_items.get_or_create_owned(&resource(id)))
    }
    fn new_processing_latency_metric(&self, id: &InformerId) -> Box<dyn HistogramMetric> {
        Box::new(self.processing_latency.get_or_create_owned(&resource(id)))
    }
    fn new_store_resource_version_metric(&self, id: &InformerId) -> Box<dyn SettableGaugeMetric> {
        Box::new(
            self.store_resource_version
                .get_or_create_owned(&resource(id)),
        )
    }
    fn new_synced_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.synced.get_or_create_owned(&informer(name)))
    }
    fn new_cached_objects_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.cached_objects.get_or_create_owned(&informer(name)))
    }
    fn new_listener_backlog_metric(&self, name: &str, h: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.backlog.get_or_create_owned(&handler(name, h)))
    }
    fn new_listener_delivered_metric(&self, name: &str, h: &str) -> Box<dyn CounterMetric> {
        Box::new(self.delivered.get_or_create_owned(&handler(name, h)))
    }
    fn new_handler_panics_metric(&self, name: &str, h: &str) -> Box<dyn CounterMetric> {
        Box::new(self.panics.get_or_create_owned(&handler(name, h)))
    }
    fn new_snapshot_metrics(&self, name: &str) -> SnapshotMetrics {
        let l = informer(name);
        SnapshotMetrics {
            warm_start: Box::new(self.warm_start.get_or_create_owned(&l)),
            age_seconds: Box::new(self.snapshot_age.get_or_create_owned(&l)),
            objects_loaded: Box::new(self.objects_loaded.get_or_create_owned(&l)),
            resume_relisted: Box::new(self.resume_relisted.get_or_create_owned(&l)),
            time_to_synced_seconds: Box::new(self.time_to_synced.get_or_create_owned(&l)),
            writes: Box::new(self.writes.get_or_create_owned(&l)),
            write_failures: Box::new(self.write_failures.get_or_create_owned(&l)),
            last_write_seconds: Box::new(self.last_write_seconds.get_or_create_owned(&l)),
            last_write_bytes: Box::new(self.last_write_bytes.get_or_create_owned(&l)),
            last_write_objects: Box::new(self.last_write_objects.get_or_create_owned(&l)),
        }
    }
}
