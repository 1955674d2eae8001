//! The metric primitives every kcache layer above the core records into
//! (the work queue, which depends on no kcache crate, has the same four of
//! its own, in the same shape, like client-go's `workqueue` package).
//!
//! Each layer has a small provider trait that creates its named metrics
//! from these primitives (`kcache_reflector::ReflectorMetricsProvider`,
//! `kcache_informer::metrics::InformerMetricsProvider`,
//! `kcache_controller::metrics::ControllerMetricsProvider`; kcache-lease takes the
//! primitives themselves), and a Prometheus implementation behind its own
//! `prometheus` feature.
//! [`NoopMetric`] records nothing (the default).
//!
//! With this crate's `prometheus` feature (turned on by the `prometheus`
//! feature of the crates above, never by their defaults alone, except
//! kcache-controller's, whose `prometheus` is a default), `prometheus-client`'s `Counter`,
//! `Gauge` and `Histogram` implement the primitives, so a provider hands
//! out a family's metric as it is: `Box::new(family.get_or_create_owned(&labels))`.

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

#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
mod prometheus_impls {
    //! `prometheus-client`'s metrics as kcache primitives.
    use std::sync::atomic::{AtomicI64, AtomicU64};

    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::{Atomic, Gauge};
    use prometheus_client::metrics::histogram::Histogram;

    use super::{CounterMetric, GaugeMetric, HistogramMetric, SettableGaugeMetric};

    impl CounterMetric for Counter<u64, AtomicU64> {
        fn inc_by(&self, n: u64) {
            Counter::inc_by(self, n);
        }
    }

    /// Every gauge: whole-number ones (counts: objects, members, a 0/1
    /// state) and floating-point ones (seconds, timestamps).
    impl<N, A> GaugeMetric for Gauge<N, A>
    where
        N: Send + Sync,
        A: Atomic<N> + Send + Sync,
    {
        fn inc(&self) {
            Gauge::inc(self);
        }
        fn dec(&self) {
            Gauge::dec(self);
        }
    }

    /// Whole-number gauges are set to the value rounded towards zero.
    impl SettableGaugeMetric for Gauge<i64, AtomicI64> {
        fn set(&self, value: f64) {
            // `as` saturates (and maps NaN to 0): counts stay counts
            Gauge::set(self, value as i64);
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

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn prometheus_metrics_record_through_the_primitives() {
            let c = Counter::<u64, AtomicU64>::default();
            let as_counter: &dyn CounterMetric = &c;
            as_counter.inc();
            as_counter.inc_by(4);
            assert_eq!(c.get(), 5);
            let g = Gauge::<i64, AtomicI64>::default();
            GaugeMetric::inc(&g);
            GaugeMetric::inc(&g);
            GaugeMetric::dec(&g);
            assert_eq!(g.get(), 1);
            SettableGaugeMetric::set(&g, 41.9);
            assert_eq!(g.get(), 41);
            let f = Gauge::<f64, AtomicU64>::default();
            SettableGaugeMetric::set(&f, 1.5);
            assert_eq!(f.get(), 1.5);
            GaugeMetric::inc(&f);
            GaugeMetric::dec(&f);
            GaugeMetric::dec(&f);
            assert_eq!(f.get(), 0.5);
        }
    }
}

/// What every crate's `prometheus-client` provider builds its families
/// with: one label type, and a family created and registered in one call,
/// so each family's name and HELP text stand where its field is set.
/// Plumbing for the providers of the crates above: hidden from the docs,
/// outside semver.
#[cfg(feature = "prometheus")]
#[doc(hidden)]
pub mod prometheus {
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::{Metric, Registry};

    /// The labels of a kcache metric: `(name, value)` pairs.
    pub type Labels = Vec<(String, String)>;

    /// A family of histograms whose buckets a function gives.
    pub type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

    /// `pairs` as [`Labels`].
    pub fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// A new family of `M`, registered in `registry` as `name` with `help`
    /// (`prometheus-client` appends `_total` to a counter's name and a
    /// period to the HELP text).
    pub fn family<M>(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, M>
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
    pub fn histogram_family(
        registry: &mut Registry,
        name: &str,
        help: &str,
        buckets: fn() -> Histogram,
    ) -> HistogramFamily {
        let family = Family::new_with_constructor(buckets);
        registry.register(name, help, family.clone());
        family
    }

    #[cfg(test)]
    mod tests {
        use prometheus_client::metrics::counter::Counter;

        use super::*;

        #[test]
        fn a_family_is_registered_under_its_name() {
            let mut registry = Registry::default();
            let f: Family<Labels, Counter> = family(&mut registry, "things", "Things seen");
            f.get_or_create(&labels(&[("name", "a")])).inc();
            let h = histogram_family(&mut registry, "waits_seconds", "Waits", || {
                Histogram::new([1.0])
            });
            h.get_or_create(&labels(&[("name", "a")])).observe(0.5);
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
            assert!(out.contains("# HELP things Things seen."), "{out}");
            assert!(out.contains("things_total{name=\"a\"} 1"), "{out}");
            assert!(out.contains("waits_seconds_count{name=\"a\"} 1"), "{out}");
        }
    }
}
