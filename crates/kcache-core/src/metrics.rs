//! The metric primitives every kcache layer above the core records into
//! (the work queue, which depends on no kcache crate, has the same four of
//! its own, like client-go's `workqueue` package). Each layer has a small
//! provider trait that creates its named metrics from these; the
//! Prometheus implementations live behind each crate's `prometheus`
//! feature, and [`NoopMetric`] records nothing (the default).

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
