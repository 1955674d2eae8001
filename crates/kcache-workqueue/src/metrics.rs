//! Queue metrics behind a small provider trait.
//!
//! A queue reports metrics only when it has a name and a provider
//! ([`WorkQueueBuilder::name`](crate::WorkQueueBuilder::name) and
//! [`WorkQueueBuilder::metrics`](crate::WorkQueueBuilder::metrics)). The
//! provider creates one metric of each kind per queue name; the metric names
//! and meanings are client-go's:
//!
//! | metric | kind | meaning |
//! | --- | --- | --- |
//! | `workqueue_depth` | gauge | items waiting to be handed out (+1 on an accepted add, -1 on `get`) |
//! | `workqueue_adds_total` | counter | accepted adds (an add of an item already waiting does not count) |
//! | `workqueue_queue_duration_seconds` | histogram | time from add (or ready time) to `get` |
//! | `workqueue_work_duration_seconds` | histogram | time from `get` to `done` |
//! | `workqueue_unfinished_work_seconds` | gauge | sum of the ages of all items being processed |
//! | `workqueue_longest_running_processor_seconds` | gauge | age of the oldest item being processed |
//! | `workqueue_retries_total` | counter | calls to `add_after` / `add_rate_limited` (client-go counts every `AddAfter`) |
//!
//! The two unfinished-work gauges are recomputed every 500 ms by default
//! ([`WorkQueueBuilder::unfinished_work_update_period`](crate::WorkQueueBuilder::unfinished_work_update_period)).
//! The `prometheus` feature adds [`PrometheusWorkQueueMetricsProvider`](crate::PrometheusWorkQueueMetricsProvider).

use std::collections::HashMap;
use std::hash::Hash;

use tokio::time::Instant;

// The four primitives have the shape of kcache-core's
// (`kcache_core::metrics`), so one Prometheus adapter reads the same in every
// crate; they are defined here because this crate depends on no other
// kcache crate (like client-go's `workqueue` package).

/// A value that only goes up.
pub trait CounterMetric: Send + Sync {
    /// Adds `n`.
    fn inc_by(&self, n: u64);
    /// Adds one.
    fn inc(&self) {
        self.inc_by(1);
    }
}

/// A value that goes up and down by one.
pub trait GaugeMetric: Send + Sync {
    /// Adds one.
    fn inc(&self);
    /// Subtracts one.
    fn dec(&self);
}

/// A value that is set.
pub trait SettableGaugeMetric: Send + Sync {
    /// Sets the value.
    fn set(&self, value: f64);
}

/// A distribution of observed values.
pub trait HistogramMetric: Send + Sync {
    /// Records one value.
    fn observe(&self, value: f64);
}

/// Creates the metrics of a named queue. `name` is the value of the `name`
/// label.
pub trait WorkQueueMetricsProvider: Send + Sync {
    /// `workqueue_depth`.
    fn new_depth_metric(&self, name: &str) -> Box<dyn GaugeMetric>;
    /// `workqueue_adds_total`.
    fn new_adds_metric(&self, name: &str) -> Box<dyn CounterMetric>;
    /// `workqueue_queue_duration_seconds`.
    fn new_latency_metric(&self, name: &str) -> Box<dyn HistogramMetric>;
    /// `workqueue_work_duration_seconds`.
    fn new_work_duration_metric(&self, name: &str) -> Box<dyn HistogramMetric>;
    /// `workqueue_unfinished_work_seconds`.
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric>;
    /// `workqueue_longest_running_processor_seconds`.
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn SettableGaugeMetric>;
    /// `workqueue_retries_total`.
    fn new_retries_metric(&self, name: &str) -> Box<dyn CounterMetric>;
    /// Whether the metrics are recorded at all. A provider that returns
    /// `false` (like [`NoopWorkQueueMetricsProvider`]) spares the queue its
    /// bookkeeping and its updater task.
    fn enabled(&self) -> bool {
        true
    }
}

/// A metric that records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopMetric;

impl CounterMetric for NoopMetric {
    fn inc_by(&self, _n: u64) {}
}
impl GaugeMetric for NoopMetric {
    fn inc(&self) {}
    fn dec(&self) {}
}
impl SettableGaugeMetric for NoopMetric {
    fn set(&self, _value: f64) {}
}
impl HistogramMetric for NoopMetric {
    fn observe(&self, _value: f64) {}
}

/// A provider whose metrics record nothing: the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopWorkQueueMetricsProvider;

impl WorkQueueMetricsProvider for NoopWorkQueueMetricsProvider {
    fn new_depth_metric(&self, _name: &str) -> Box<dyn GaugeMetric> {
        Box::new(NoopMetric)
    }
    fn new_adds_metric(&self, _name: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    fn new_latency_metric(&self, _name: &str) -> Box<dyn HistogramMetric> {
        Box::new(NoopMetric)
    }
    fn new_work_duration_metric(&self, _name: &str) -> Box<dyn HistogramMetric> {
        Box::new(NoopMetric)
    }
    fn new_unfinished_work_seconds_metric(&self, _name: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        _name: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    fn new_retries_metric(&self, _name: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    fn enabled(&self) -> bool {
        false
    }
}

/// The per-queue metrics and their bookkeeping. Called with the queue's
/// lock held, like client-go's `defaultQueueMetrics`.
pub(crate) struct QueueMetrics<T> {
    depth: Box<dyn GaugeMetric>,
    adds: Box<dyn CounterMetric>,
    latency: Box<dyn HistogramMetric>,
    work_duration: Box<dyn HistogramMetric>,
    unfinished: Box<dyn SettableGaugeMetric>,
    longest: Box<dyn SettableGaugeMetric>,
    add_times: HashMap<T, Instant>,
    processing_starts: HashMap<T, Instant>,
}

impl<T: Hash + Eq + Clone> QueueMetrics<T> {
    pub(crate) fn new(provider: &dyn WorkQueueMetricsProvider, name: &str) -> Self {
        Self {
            depth: provider.new_depth_metric(name),
            adds: provider.new_adds_metric(name),
            latency: provider.new_latency_metric(name),
            work_duration: provider.new_work_duration_metric(name),
            unfinished: provider.new_unfinished_work_seconds_metric(name),
            longest: provider.new_longest_running_processor_seconds_metric(name),
            add_times: HashMap::new(),
            processing_starts: HashMap::new(),
        }
    }

    /// An item became ready to be handed out (`at` is its ready time).
    pub(crate) fn add(&mut self, item: &T, at: Instant) {
        self.adds.inc();
        self.depth.inc();
        if !self.add_times.contains_key(item) {
            self.add_times.insert(item.clone(), at);
        }
    }

    /// An item was handed out.
    pub(crate) fn get(&mut self, item: &T, now: Instant) {
        self.depth.dec();
        self.processing_starts.insert(item.clone(), now);
        if let Some(added) = self.add_times.remove(item) {
            self.latency
                .observe(now.saturating_duration_since(added).as_secs_f64());
        }
    }

    /// An item is done.
    pub(crate) fn done(&mut self, item: &T, now: Instant) {
        if let Some(start) = self.processing_starts.remove(item) {
            self.work_duration
                .observe(now.saturating_duration_since(start).as_secs_f64());
        }
    }

    pub(crate) fn update_unfinished_work(&self, now: Instant) {
        let mut total = 0.0;
        let mut oldest = 0.0f64;
        for start in self.processing_starts.values() {
            let age = now.saturating_duration_since(*start).as_secs_f64();
            total += age;
            oldest = oldest.max(age);
        }
        self.unfinished.set(total);
        self.longest.set(oldest);
    }
}

impl<P: WorkQueueMetricsProvider + ?Sized> WorkQueueMetricsProvider for std::sync::Arc<P> {
    fn new_depth_metric(&self, name: &str) -> Box<dyn GaugeMetric> {
        (**self).new_depth_metric(name)
    }
    fn new_adds_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        (**self).new_adds_metric(name)
    }
    fn new_latency_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        (**self).new_latency_metric(name)
    }
    fn new_work_duration_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        (**self).new_work_duration_metric(name)
    }
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric> {
        (**self).new_unfinished_work_seconds_metric(name)
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        (**self).new_longest_running_processor_seconds_metric(name)
    }
    fn new_retries_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        (**self).new_retries_metric(name)
    }
    fn enabled(&self) -> bool {
        (**self).enabled()
    }
}
