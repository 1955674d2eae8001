//! Reflector metrics behind a small provider trait (the workqueue's pattern).
//!
//! A reflector creates its metrics once, labelled with its name
//! ([`ReflectorBuilder::name`](crate::ReflectorBuilder::name)), from the
//! provider given to
//! [`ReflectorBuilder::metrics`](crate::ReflectorBuilder::metrics):
//!
//! | metric | kind | meaning |
//! | --- | --- | --- |
//! | `reflector_lists_total` | counter | full lists done (paged or not), and completed streaming lists |
//! | `reflector_watches_total` | counter | watch requests opened |
//! | `reflector_watch_events_total` | counter | watch events handled (bookmarks included, skipped events not) |
//! | `reflector_relists_total` | counter | lists after the first successful one |
//! | `reflector_errors_total` | counter, label `reason` | errors by [`ErrorReason`](crate::ErrorReason) |
//! | `reflector_last_sync_timestamp_seconds` | gauge | when the cache was last known current (a list, a watch event or a bookmark), as Unix time: alert on `time() - reflector_last_sync_timestamp_seconds` |
//!
//! The resourceVersion itself is not exported: it is opaque (a string the
//! apiserver may change the shape of), and a float would round it.
//!
//! The `prometheus` feature adds [`PrometheusReflectorMetricsProvider`](crate::PrometheusReflectorMetricsProvider).

use kcache_core::metrics::{CounterMetric, NoopMetric, SettableGaugeMetric};

use crate::error::ErrorReason;

/// Creates the metrics of a named reflector. Every metric a provider does
/// not create records nothing.
pub trait ReflectorMetricsProvider: Send + Sync {
    /// `reflector_lists_total`.
    fn new_lists_metric(&self, _name: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    /// `reflector_watches_total`.
    fn new_watches_metric(&self, _name: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    /// `reflector_watch_events_total`.
    fn new_events_metric(&self, _name: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    /// `reflector_relists_total`.
    fn new_relists_metric(&self, _name: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    /// `reflector_errors_total{reason}`.
    fn new_errors_metric(&self, _name: &str, _reason: ErrorReason) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    /// `reflector_last_sync_timestamp_seconds`.
    fn new_last_sync_metric(&self, _name: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
}

/// A provider whose metrics record nothing (the trait's defaults): the
/// default.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopReflectorMetricsProvider;

impl ReflectorMetricsProvider for NoopReflectorMetricsProvider {}

/// The metrics of one reflector.
pub(crate) struct ReflectorMetrics {
    pub(crate) lists: Box<dyn CounterMetric>,
    pub(crate) watches: Box<dyn CounterMetric>,
    pub(crate) events: Box<dyn CounterMetric>,
    pub(crate) relists: Box<dyn CounterMetric>,
    errors: Vec<Box<dyn CounterMetric>>,
    last_sync: Box<dyn SettableGaugeMetric>,
}

impl ReflectorMetrics {
    pub(crate) fn new(p: &dyn ReflectorMetricsProvider, name: &str) -> Self {
        ReflectorMetrics {
            lists: p.new_lists_metric(name),
            watches: p.new_watches_metric(name),
            events: p.new_events_metric(name),
            relists: p.new_relists_metric(name),
            errors: ErrorReason::ALL
                .iter()
                .map(|r| p.new_errors_metric(name, *r))
                .collect(),
            last_sync: p.new_last_sync_metric(name),
        }
    }

    pub(crate) fn error(&self, reason: ErrorReason) {
        if let Some(c) = self.errors.get(reason.index()) {
            c.inc();
        }
    }

    /// The cache was known current now.
    pub(crate) fn synced_now(&self) {
        if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            self.last_sync.set(d.as_secs_f64());
        }
    }
}
