//! Prometheus metrics of informers (feature `prometheus`).

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::snapshot::{SnapshotStatus, StartKind};

type Source = Arc<dyn Fn() -> Vec<ListenerStats> + Send + Sync>;
type SizeSource = Arc<dyn Fn() -> (String, usize) + Send + Sync>;
type SnapshotSource = Arc<dyn Fn() -> Option<(String, SnapshotStatus)> + Send + Sync>;

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
/// For informers with [snapshots](crate::SnapshotOptions) (warm restarts),
/// per informer: `kcache_informer_warm_start` (1: started from a snapshot,
/// 0: cold), `kcache_informer_snapshot_age_seconds` (age of the snapshot
/// loaded), `kcache_informer_snapshot_objects_loaded`,
/// `kcache_informer_snapshot_resume_relisted` (1: the snapshot's
/// resourceVersion was too old and the informer relisted),
/// `kcache_informer_time_to_synced_seconds`,
/// `kcache_informer_snapshot_writes_total`,
/// `kcache_informer_snapshot_write_failures_total`,
/// `kcache_informer_snapshot_last_write_seconds`,
/// `kcache_informer_snapshot_last_write_bytes` and
/// `kcache_informer_snapshot_last_write_objects`.
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
    sources: Arc<Mutex<Vec<(Source, SizeSource, SnapshotSource)>>>,
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
        let snap = informer.clone();
        let source: Source = Arc::new(move || stats.listener_stats());
        let cached: SizeSource = Arc::new(move || (size.name().to_string(), size.indexer().len()));
        let snapshots: SnapshotSource = Arc::new(move || {
            snap.snapshots_enabled()
                .then(|| (snap.name().to_string(), snap.snapshot_status()))
        });
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((source, cached, snapshots));
    }

    #[allow(clippy::type_complexity)]
    fn snapshot(
        &self,
    ) -> (
        Vec<ListenerStats>,
        Vec<(String, usize)>,
        Vec<(String, SnapshotStatus)>,
    ) {
        let sources = self
            .sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut listeners = Vec::new();
        let mut sizes = Vec::new();
        let mut snapshots = Vec::new();
        for (s, c, w) in sources {
            listeners.extend(s());
            sizes.push(c());
            snapshots.extend(w());
        }
        (listeners, sizes, snapshots)
    }
}

impl Collector for InformerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (listeners, sizes, snapshots) = self.snapshot();
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
        encode_snapshots(&mut encoder, &snapshots)
    }
}

type SnapshotGauge = fn(&SnapshotStatus) -> Option<f64>;
type SnapshotCounter = fn(&SnapshotStatus) -> u64;

fn encode_snapshots(
    encoder: &mut DescriptorEncoder,
    snapshots: &[(String, SnapshotStatus)],
) -> Result<(), std::fmt::Error> {
    let gauges: [(&str, &str, SnapshotGauge); 8] = [
        (
            "kcache_informer_warm_start",
            "1 if the informer started from a snapshot, 0 if it listed",
            |s| match s.start {
                StartKind::NotStarted => None,
                StartKind::Cold => Some(0.0),
                StartKind::Warm => Some(1.0),
            },
        ),
        (
            "kcache_informer_snapshot_age_seconds",
            "Age of the snapshot loaded at start",
            |s| s.snapshot_age.map(|d| d.as_secs_f64()),
        ),
        (
            "kcache_informer_snapshot_objects_loaded",
            "Objects loaded from the snapshot at start",
            |s| (s.start == StartKind::Warm).then_some(s.objects_loaded as f64),
        ),
        (
            "kcache_informer_snapshot_resume_relisted",
            "1 if the snapshot's resourceVersion was too old and the informer relisted",
            |s| (s.start == StartKind::Warm).then_some(f64::from(u8::from(s.resume_relisted))),
        ),
        (
            "kcache_informer_time_to_synced_seconds",
            "Time from the start of the informer until it had synced",
            |s| s.time_to_synced.map(|d| d.as_secs_f64()),
        ),
        (
            "kcache_informer_snapshot_last_write_seconds",
            "Duration of the last snapshot write (encode, write, fsync, rename)",
            |s| s.last_write.as_ref().map(|w| w.duration.as_secs_f64()),
        ),
        (
            "kcache_informer_snapshot_last_write_bytes",
            "Size of the last snapshot written",
            |s| s.last_write.as_ref().map(|w| w.bytes as f64),
        ),
        (
            "kcache_informer_snapshot_last_write_objects",
            "Objects in the last snapshot written",
            |s| s.last_write.as_ref().map(|w| w.objects as f64),
        ),
    ];
    let sample = ConstGauge::new(0.0f64);
    for (name, help, get) in gauges {
        let mut family = encoder.encode_descriptor(name, help, None, sample.metric_type())?;
        for (informer, s) in snapshots {
            if let Some(v) = get(s) {
                ConstGauge::new(v)
                    .encode(family.encode_family(&[("informer".to_string(), informer.clone())])?)?;
            }
        }
    }
    let counters: [(&str, &str, SnapshotCounter); 2] = [
        (
            "kcache_informer_snapshot_writes",
            "Snapshots written",
            |s| s.writes,
        ),
        (
            "kcache_informer_snapshot_write_failures",
            "Snapshot writes that failed",
            |s| s.write_failures,
        ),
    ];
    let csample = ConstCounter::new(0u64);
    for (name, help, get) in counters {
        let mut family = encoder.encode_descriptor(name, help, None, csample.metric_type())?;
        for (informer, s) in snapshots {
            ConstCounter::new(get(s))
                .encode(family.encode_family(&[("informer".to_string(), informer.clone())])?)?;
        }
    }
    Ok(())
}
