//! A [`ReflectorMetricsProvider`] on the `prometheus-client` crate.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use kcache_core::metrics::prometheus::{Labels, family};

use crate::error::ErrorReason;
use crate::metrics::ReflectorMetricsProvider;
use kcache_core::metrics::{CounterMetric, SettableGaugeMetric};

fn labels(name: &str) -> Labels {
    kcache_core::metrics::prometheus::labels(&[("name", name)])
}

/// Registers the reflector metrics in a `prometheus-client` [`Registry`],
/// labelled `name=<reflector name>`: `reflector_lists_total`,
/// `reflector_watches_total`, `reflector_watch_events_total`,
/// `reflector_relists_total`, `reflector_errors_total{reason}`,
/// `reflector_last_sync_timestamp_seconds`.
///
/// Register it once per registry and share it (it is cheap to clone).
#[derive(Clone, Debug)]
pub struct PrometheusReflectorMetricsProvider {
    lists: Family<Labels, Counter>,
    watches: Family<Labels, Counter>,
    events: Family<Labels, Counter>,
    relists: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    last_sync: Family<Labels, Gauge<f64, AtomicU64>>,
}

impl PrometheusReflectorMetricsProvider {
    /// Creates the metric families and registers them in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let r = registry;
        Self {
            lists: family(r, "reflector_lists", "Full lists done by the reflector"),
            watches: family(
                r,
                "reflector_watches",
                "Watch requests opened by the reflector",
            ),
            events: family(
                r,
                "reflector_watch_events",
                "Watch events handled by the reflector",
            ),
            relists: family(
                r,
                "reflector_relists",
                "Lists after the first successful one",
            ),
            errors: family(r, "reflector_errors", "Reflector errors by reason"),
            last_sync: family(
                r,
                "reflector_last_sync_timestamp_seconds",
                "When the reflector's cache was last known current (a list, a watch event or a bookmark), as Unix time",
            ),
        }
    }
}

// prometheus-client's metrics are kcache-core's primitives (kcache-core's
// `prometheus` feature): a family's metric is handed out as it is.
impl ReflectorMetricsProvider for PrometheusReflectorMetricsProvider {
    fn new_lists_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        Box::new(self.lists.get_or_create_owned(&labels(name)))
    }
    fn new_watches_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        Box::new(self.watches.get_or_create_owned(&labels(name)))
    }
    fn new_events_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        Box::new(self.events.get_or_create_owned(&labels(name)))
    }
    fn new_relists_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        Box::new(self.relists.get_or_create_owned(&labels(name)))
    }
    fn new_errors_metric(&self, name: &str, reason: ErrorReason) -> Box<dyn CounterMetric> {
        let mut l = labels(name);
        l.push(("reason".to_owned(), reason.as_str().to_owned()));
        Box::new(self.errors.get_or_create_owned(&l))
    }
    fn new_last_sync_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(self.last_sync.get_or_create_owned(&labels(name)))
    }
}
