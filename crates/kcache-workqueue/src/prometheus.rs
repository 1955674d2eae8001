//! A [`WorkQueueMetricsProvider`] on the `prometheus-client` crate.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};
use std::sync::atomic::AtomicU64;

use crate::metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, SettableGaugeMetric, WorkQueueMetricsProvider,
};

type Labels = Vec<(String, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    // client-go's buckets: 10 ns, 100 ns, ..., 10^9 * 10 ns = 10 s.
    Histogram::new(exponential_buckets(10e-9, 10.0, 10))
}

fn labels(name: &str) -> Labels {
    vec![("name".to_owned(), name.to_owned())]
}

/// Registers client-go's workqueue metrics in a `prometheus-client`
/// [`Registry`] and hands them to queues, labelled `name=<queue name>`.
///
/// Register it once per registry and share it (it is cheap to clone) between
/// all queues: each queue name gets its own label value. (HELP texts carry
/// no final period: `prometheus-client` adds one.) Exposed names:
/// `workqueue_depth`, `workqueue_adds_total`,
/// `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds`,
/// `workqueue_unfinished_work_seconds`,
/// `workqueue_longest_running_processor_seconds`, `workqueue_retries_total`.
#[derive(Clone, Debug)]
pub struct PrometheusWorkQueueMetricsProvider {
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    latency: HistogramFamily,
    work_duration: HistogramFamily,
    unfinished: Family<Labels, Gauge<f64, AtomicU64>>,
    longest: Family<Labels, Gauge<f64, AtomicU64>>,
    retries: Family<Labels, Counter>,
}

impl PrometheusWorkQueueMetricsProvider {
    /// Creates the metric families and registers them in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        // prometheus-client appends `_total` to counters.
        let r = registry;
        Self {
            depth: family(r, "workqueue_depth", "Current depth of workqueue"),
            adds: family(
                r,
                "workqueue_adds",
                "Total number of adds handled by workqueue",
            ),
            latency: histogram_family(
                r,
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                duration_histogram,
            ),
            work_duration: histogram_family(
                r,
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                duration_histogram,
            ),
            unfinished: family(
                r,
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has done that is in progress and hasn't been observed by \
                 work_duration. Large values indicate stuck threads. One can deduce the number of \
                 stuck threads by observing the rate at which this increases",
            ),
            longest: family(
                r,
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
            ),
            retries: family(
                r,
                "workqueue_retries",
                "Total number of retries handled by workqueue",
            ),
        }
    }
}

// The family helpers of kcache-core's `metrics::prometheus`, kept here as
// this crate depends on no other kcache crate.

/// A new family of `M`, registered in `registry` as `name` with `help`.
fn family<M>(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, M>
where
    M: Default,
    Family<Labels, M>: Metric,
{
    let family = Family::default();
    registry.register(name, help, family.clone());
    family
}

/// A new family of histograms with the buckets of `buckets`, registered
/// as [`family`] registers one.
fn histogram_family(
    registry: &mut Registry,
    name: &str,
    help: &str,
    buckets: fn() -> Histogram,
) -> HistogramFamily {
    let family = Family::new_with_constructor(buckets);
    registry.register(name, help, family.clone());
    family
}

// prometheus-client's metrics are this crate's primitives as they are (the
// same impls as kcache-core's `prometheus` feature gives the other crates).
impl CounterMetric for Counter {
    fn inc_by(&self, n: u64) {
        Counter::inc_by(self, n);
    }
}
impl GaugeMetric for Gauge {
    fn inc(&self) {
        Gauge::inc(self);
    }
    fn dec(&self) {
        Gauge::dec(self);
    }
}
impl SettableGaugeMetric for Gauge<f64, AtomicU64> {
    fn set(&self, value: f64) {
        Gauge::set(self, value);
    }
}
impl HistogramMetric for Histogram {
    fn observe(&self, value: f64) {
        Histogram::observe(self, value);
    }
}

impl WorkQueueMetricsProvider for PrometheusWorkQueueMetricsProvider {
    fn new_depth_metric(&self, name: &str) -> Box<dyn GaugeMetric> {
        Box::new(self.depth.get_or_create_owned(&labels(name)))
    }
    fn new_adds_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        Box::new(self.adds.get_or_create_owned(&labels(name)))
    }
    fn new_latency_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        Box::new(self.latency.get_or_create_owned(&labels(name)))
    }
    fn new_work_duration_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        Box::new(self.work_duration.get_or_create_owned(&labels(name)))
    }
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.unfinished.get_or_create_owned(&labels(name)))
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.longest.get_or_create_owned(&labels(name)))
    }
    fn new_retries_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        Box::new(self.retries.get_or_create_owned(&labels(name)))
    }
}
