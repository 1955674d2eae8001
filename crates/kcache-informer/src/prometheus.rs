//! Prometheus metrics of informers (feature `prometheus`).

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

type Source = Arc<dyn Fn() -> Vec<ListenerStats> + Send + Sync>;
type SizeSource = Arc<dyn Fn() -> (String, usize) + Send + Sync>;

/// One handler's numbers at scrape time.
#[derive(Debug, Clone)]
pub struct ListenerStats {
    /// Informer name.
    pub informer: String,
    /// Handler name.
    pub handler: String,
    /// Notifications waiting for the handler.
    pub backlog: usize,
    /// Notifications handed to the handler so far.
    pub delivered: u64,
    /// Handler panics so far.
    pub panics: u64,
}

/// Exposes, for every handler of the registered informers,
/// `kcache_informer_listener_backlog` (gauge),
/// `kcache_informer_listener_delivered_total` and
/// `kcache_informer_handler_panics_total` (counters), labelled `informer`
/// and `handler`; plus `kcache_informer_cached_objects` per informer.
///
/// ```
/// # #[cfg(feature = "prometheus")] {
/// use prometheus_client::registry::Registry;
/// let mut registry = Registry::default();
/// let metrics = kcache_informer::prometheus::InformerMetrics::register(&mut registry);
/// // metrics.add(&informer) for each informer
/// # let _ = metrics;
/// # }
/// ```
#[derive(Clone, Default)]
pub struct InformerMetrics {
    sources: Arc<Mutex<Vec<(Source, SizeSource)>>>,
}

impl std::fmt::Debug for InformerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerMetrics").finish_non_exhaustive()
    }
}

impl InformerMetrics {
    /// Registers the collector in `registry`; add informers to the result.
    pub fn register(registry: &mut Registry) -> Self {
        let m = InformerMetrics::default();
        registry.register_collector(Box::new(m.clone()));
        m
    }

    /// Reports this informer's handlers and cache size from now on.
    pub fn add<K>(&self, informer: &crate::SharedIndexInformer<K>)
    where
        K: kube::Resource + 'static,
        K::DynamicType: Clone + Send + Sync + 'static,
    {
        let stats = informer.clone();
        let size = informer.clone();
        let source: Source = Arc::new(move || stats.listener_stats());
        let cached: SizeSource = Arc::new(move || (size.name().to_string(), size.indexer().len()));
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((source, cached));
    }

    fn snapshot(&self) -> (Vec<ListenerStats>, Vec<(String, usize)>) {
        let sources = self
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut listeners = Vec::new();
        let mut sizes = Vec::new();
        for (s, c) in sources {
            listeners.extend(s());
            sizes.push(c());
        }
        (listeners, sizes)
    }
}

impl Collector for InformerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (listeners, sizes) = self.snapshot();
        let labels = |l: &ListenerStats| {
            [
                ("informer".to_string(), l.informer.clone()),
                ("handler".to_string(), l.handler.clone()),
            ]
        };
        let sample = ConstGauge::new(0i64);
        let mut family = encoder.encode_descriptor(
            "kcache_informer_listener_backlog",
            "Notifications waiting for an event handler",
            None,
            sample.metric_type(),
        )?;
        for l in &listeners {
            let g = ConstGauge::new(i64::try_from(l.backlog).unwrap_or(i64::MAX));
            g.encode(family.encode_family(&labels(l))?)?;
        }
        let csample = ConstCounter::new(0u64);
        let mut family = encoder.encode_descriptor(
            "kcache_informer_listener_delivered",
            "Notifications handed to an event handler",
            None,
            csample.metric_type(),
        )?;
        for l in &listeners {
            ConstCounter::new(l.delivered).encode(family.encode_family(&labels(l))?)?;
        }
        let mut family = encoder.encode_descriptor(
            "kcache_informer_handler_panics",
            "Event handler panics (the event was skipped)",
            None,
            csample.metric_type(),
        )?;
        for l in &listeners {
            ConstCounter::new(l.panics).encode(family.encode_family(&labels(l))?)?;
        }
        let mut family = encoder.encode_descriptor(
            "kcache_informer_cached_objects",
            "Objects in an informer's cache",
            None,
            sample.metric_type(),
        )?;
        for (name, n) in &sizes {
            let g = ConstGauge::new(i64::try_from(*n).unwrap_or(i64::MAX));
            g.encode(family.encode_family(&[("informer".to_string(), name.clone())])?)?;
        }
        Ok(())
    }
}
