//! Informer metrics behind a small provider trait (the reflector's and the
//! work queue's pattern).
//!
//! An informer records into the metrics of the provider given to
//! [`SharedIndexInformerBuilder::metrics`](crate::SharedIndexInformerBuilder::metrics),
//! [`SharedInformerFactoryBuilder::metrics`](crate::SharedInformerFactoryBuilder::metrics)
//! or, later, [`SharedIndexInformer::set_metrics`](crate::SharedIndexInformer::set_metrics)
//! (the first one given is kept). Values are pushed by the informer where
//! they change, not read at scrape time: the cache size and the sync state
//! when the informer wakes its listeners (after every run of deltas), a
//! handler's backlog when a notification is queued for it or taken by it,
//! deliveries and panics when a handler returns, the warm-restart figures
//! when they are known.
//!
//! | metric | kind | labels | meaning |
//! | --- | --- | --- | --- |
//! | `kcache_informer_synced` | gauge | `informer` | 1 once the cache is known current ([`has_synced`](crate::SharedIndexInformer::has_synced)), else 0 |
//! | `kcache_informer_cached_objects` | gauge | `informer` | objects in the cache |
//! | `kcache_informer_listener_backlog` | gauge | `informer`, `handler` | notifications waiting for a handler |
//! | `kcache_informer_listener_delivered_total` | counter | `informer`, `handler` | notifications a handler returned from |
//! | `kcache_informer_handler_panics_total` | counter | `informer`, `handler` | handler panics (each event skipped) |
//!
//! And client-go's informer metrics (client-go 1.36,
//! `tools/cache/informer_metrics.go`; the names controller-runtime
//! registers), labelled `name` (the informer's name, made unique in the
//! process: a second live informer of the same name records under
//! `<name>-2`, a third `<name>-3`..., said once at INFO), `group`,
//! `version`, `resource`:
//!
//! | metric | kind | meaning |
//! | --- | --- | --- |
//! | `informer_queued_items` | gauge | keys with pending deltas in the informer's queue (DeltaFIFO), after each pop |
//! | `informer_processing_latency_seconds` | histogram | time to handle one popped key's deltas (cache update and hand-off to the handlers) |
//! | `informer_store_resource_version` | gauge | the 15 least significant digits of the resourceVersion the cache last took |
//!
//! A handler that takes more than 100 ms for one notification is named in
//! a WARN (at most one a minute per handler, with the count of slow calls
//! since the last).
//!
//! Informers with [snapshots](crate::SnapshotOptions) (warm restarts) also
//! record, per informer:
//!
//! | metric | kind | meaning |
//! | --- | --- | --- |
//! | `kcache_informer_warm_start` | gauge | 1: started from a snapshot, 0: listed |
//! | `kcache_informer_snapshot_age_seconds` | gauge | age of the snapshot loaded (0 on a cold start) |
//! | `kcache_informer_snapshot_objects_loaded` | gauge | objects loaded from it (0 on a cold start) |
//! | `kcache_informer_snapshot_resume_relisted` | gauge | 1: its resourceVersion was too old and the informer relisted |
//! | `kcache_informer_time_to_synced_seconds` | gauge | from the start of the run until synced |
//! | `kcache_informer_snapshot_writes_total` | counter | snapshots written |
//! | `kcache_informer_snapshot_write_failures_total` | counter | snapshot writes that failed |
//! | `kcache_informer_snapshot_last_write_seconds` | gauge | duration of the last write (encode, write, fsync, rename) |
//! | `kcache_informer_snapshot_last_write_bytes` | gauge | size of the last snapshot written |
//! | `kcache_informer_snapshot_last_write_objects` | gauge | objects in the last snapshot written |
//!
//! The reflector under each informer records into its own provider
//! ([`ReflectorMetricsProvider`](kcache_reflector::ReflectorMetricsProvider), `reflector_*` metrics), given with
//! `reflector_metrics` on the same builders. The `prometheus` feature adds
//! `PrometheusInformerMetricsProvider`; kcache-reflector's is
//! `PrometheusReflectorMetricsProvider`.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};

use kcache_core::metrics::{CounterMetric, HistogramMetric, NoopMetric, SettableGaugeMetric};

use crate::snapshot::{SnapshotStatus, StartKind};

/// Creates the metrics of a named informer and of its handlers. `informer`
/// is the informer's name, `handler` a handler's (`<informer>#<n>`). Every
/// metric a provider does not create records nothing.
pub trait InformerMetricsProvider: Send + Sync {
    /// `kcache_informer_synced`.
    fn new_synced_metric(&self, _informer: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    /// `kcache_informer_cached_objects`.
    fn new_cached_objects_metric(&self, _informer: &str) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    /// `kcache_informer_listener_backlog`.
    fn new_listener_backlog_metric(
        &self,
        _informer: &str,
        _handler: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    /// `kcache_informer_listener_delivered_total`.
    fn new_listener_delivered_metric(
        &self,
        _informer: &str,
        _handler: &str,
    ) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    /// `kcache_informer_handler_panics_total`.
    fn new_handler_panics_metric(&self, _informer: &str, _handler: &str) -> Box<dyn CounterMetric> {
        Box::new(NoopMetric)
    }
    /// The warm-restart metrics of an informer with snapshots.
    fn new_snapshot_metrics(&self, _informer: &str) -> SnapshotMetrics {
        SnapshotMetrics::noop()
    }
    /// `informer_queued_items{name,group,version,resource}` (client-go's
    /// `NewQueuedItemMetric`).
    fn new_queued_items_metric(&self, _id: &InformerId) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
    /// `informer_processing_latency_seconds{name,group,version,resource}`
    /// (client-go's `NewProcessingLatencyMetric`).
    fn new_processing_latency_metric(&self, _id: &InformerId) -> Box<dyn HistogramMetric> {
        Box::new(NoopMetric)
    }
    /// `informer_store_resource_version{name,group,version,resource}`
    /// (client-go's `NewStoreResourceVersionMetric`).
    fn new_store_resource_version_metric(&self, _id: &InformerId) -> Box<dyn SettableGaugeMetric> {
        Box::new(NoopMetric)
    }
}

/// Which informer client-go's informer metrics are about: its name (unique
/// in the process) and its resource (client-go's
/// `InformerNameAndResource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InformerId {
    /// The informer's name.
    pub name: String,
    /// The resource's API group (`""` for the core group).
    pub group: String,
    /// The resource's version.
    pub version: String,
    /// The resource's plural name.
    pub resource: String,
}

/// The informer names in use by live informers with metrics (client-go's
/// `NewInformerName` refuses a name twice).
static NAMES_IN_USE: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

/// A name held in [`NAMES_IN_USE`] for as long as its informer lives.
struct NameReservation(String);

impl NameReservation {
    /// `name`, or the first of `name-2`, `name-3`... no live informer holds.
    fn take(name: &str) -> Self {
        let mut names = NAMES_IN_USE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut candidate = name.to_owned();
        let mut n = 1;
        while !names.insert(candidate.clone()) {
            n += 1;
            candidate = format!("{name}-{n}");
        }
        NameReservation(candidate)
    }
}

impl Drop for NameReservation {
    fn drop(&mut self) {
        NAMES_IN_USE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.0);
    }
}

/// The resourceVersion as client-go's gauge shows it: its 15 least
/// significant digits as a number (`None`: not a decimal number).
pub(crate) fn resource_version_gauge(rv: &str) -> Option<f64> {
    if rv.is_empty() || !rv.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let tail = &rv[rv.len().saturating_sub(15)..];
    tail.parse::<u64>().ok().map(|v| v as f64)
}

/// The warm-restart metrics of one informer (see the [module](self) docs
/// for their names).
pub struct SnapshotMetrics {
    /// `kcache_informer_warm_start`.
    pub warm_start: Box<dyn SettableGaugeMetric>,
    /// `kcache_informer_snapshot_age_seconds`.
    pub age_seconds: Box<dyn SettableGaugeMetric>,
    /// `kcache_informer_snapshot_objects_loaded`.
    pub objects_loaded: Box<dyn SettableGaugeMetric>,
    /// `kcache_informer_snapshot_resume_relisted`.
    pub resume_relisted: Box<dyn SettableGaugeMetric>,
    /// `kcache_informer_time_to_synced_seconds`.
    pub time_to_synced_seconds: Box<dyn SettableGaugeMetric>,
    /// `kcache_informer_snapshot_writes_total`.
    pub writes: Box<dyn CounterMetric>,
    /// `kcache_informer_snapshot_write_failures_total`.
    pub write_failures: Box<dyn CounterMetric>,
    /// `kcache_informer_snapshot_last_write_seconds`.
    pub last_write_seconds: Box<dyn SettableGaugeMetric>,
    /// `kcache_informer_snapshot_last_write_bytes`.
    pub last_write_bytes: Box<dyn SettableGaugeMetric>,
    /// `kcache_informer_snapshot_last_write_objects`.
    pub last_write_objects: Box<dyn SettableGaugeMetric>,
}

impl SnapshotMetrics {
    /// Metrics that record nothing.
    pub fn noop() -> Self {
        SnapshotMetrics {
            warm_start: Box::new(NoopMetric),
            age_seconds: Box::new(NoopMetric),
            objects_loaded: Box::new(NoopMetric),
            resume_relisted: Box::new(NoopMetric),
            time_to_synced_seconds: Box::new(NoopMetric),
            writes: Box::new(NoopMetric),
            write_failures: Box::new(NoopMetric),
            last_write_seconds: Box::new(NoopMetric),
            last_write_bytes: Box::new(NoopMetric),
            last_write_objects: Box::new(NoopMetric),
        }
    }
}

impl std::fmt::Debug for SnapshotMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotMetrics").finish_non_exhaustive()
    }
}

/// A provider whose metrics record nothing (the trait's defaults).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopInformerMetricsProvider;

impl InformerMetricsProvider for NoopInformerMetricsProvider {}

/// The metrics of one informer, created once its provider is known; the
/// provider stays for the informer's handlers.
pub(crate) struct InformerMetrics {
    provider: Arc<dyn InformerMetricsProvider>,
    synced: Box<dyn SettableGaugeMetric>,
    cached_objects: Box<dyn SettableGaugeMetric>,
    /// client-go's informer metrics, under the reserved name.
    pub(crate) queued_items: Box<dyn SettableGaugeMetric>,
    pub(crate) processing_latency: Box<dyn HistogramMetric>,
    pub(crate) store_resource_version: Box<dyn SettableGaugeMetric>,
    _name: NameReservation,
    /// Present when the informer has snapshots.
    snapshot: Option<SnapshotRecorder>,
}

impl InformerMetrics {
    pub(crate) fn new(
        provider: Arc<dyn InformerMetricsProvider>,
        id: &InformerId,
        snapshots: bool,
    ) -> Self {
        let informer = id.name.as_str();
        let reservation = NameReservation::take(informer);
        if reservation.0 != informer {
            tracing::info!(
                informer,
                unique = %reservation.0,
                "another live informer has this name: this one's informer_* metrics are labelled with the unique name (name informers with SharedIndexInformerBuilder::name to choose)"
            );
        }
        let id = InformerId {
            name: reservation.0.clone(),
            ..id.clone()
        };
        InformerMetrics {
            queued_items: provider.new_queued_items_metric(&id),
            processing_latency: provider.new_processing_latency_metric(&id),
            store_resource_version: provider.new_store_resource_version_metric(&id),
            _name: reservation,
            synced: provider.new_synced_metric(informer),
            cached_objects: provider.new_cached_objects_metric(informer),
            snapshot: snapshots.then(|| SnapshotRecorder {
                metrics: provider.new_snapshot_metrics(informer),
                recorded: Mutex::new(Recorded::default()),
            }),
            provider,
        }
    }

    /// The metrics of a handler of this informer.
    pub(crate) fn listener(&self, informer: &str, handler: &str) -> ListenerMetrics {
        ListenerMetrics {
            backlog: self.provider.new_listener_backlog_metric(informer, handler),
            delivered: self
                .provider
                .new_listener_delivered_metric(informer, handler),
            panics: self.provider.new_handler_panics_metric(informer, handler),
        }
    }

    /// The cache's state, pushed when the informer wakes its listeners.
    pub(crate) fn cache(&self, synced: bool, objects: usize) {
        self.synced.set(f64::from(u8::from(synced)));
        self.cached_objects.set(objects as f64);
    }

    /// The warm-restart state, pushed after each change of it.
    pub(crate) fn snapshot(&self, status: &SnapshotStatus) {
        if let Some(s) = &self.snapshot {
            s.record(status);
        }
    }
}

/// The counters already pushed, so that pushing a [`SnapshotStatus`] again
/// adds only what is new.
#[derive(Default)]
struct Recorded {
    writes: u64,
    write_failures: u64,
}

struct SnapshotRecorder {
    metrics: SnapshotMetrics,
    recorded: Mutex<Recorded>,
}

impl SnapshotRecorder {
    fn record(&self, s: &SnapshotStatus) {
        let m = &self.metrics;
        if s.start != StartKind::NotStarted {
            let warm = s.start == StartKind::Warm;
            m.warm_start.set(f64::from(u8::from(warm)));
            m.objects_loaded
                .set(if warm { s.objects_loaded as f64 } else { 0.0 });
            m.resume_relisted
                .set(f64::from(u8::from(warm && s.resume_relisted)));
            m.age_seconds
                .set(s.snapshot_age.map_or(0.0, |d| d.as_secs_f64()));
        }
        if let Some(d) = s.time_to_synced {
            m.time_to_synced_seconds.set(d.as_secs_f64());
        }
        if let Some(w) = &s.last_write {
            m.last_write_seconds.set(w.duration.as_secs_f64());
            m.last_write_bytes.set(w.bytes as f64);
            m.last_write_objects.set(w.objects as f64);
        }
        let mut r = self
            .recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.writes.inc_by(s.writes.saturating_sub(r.writes));
        m.write_failures
            .inc_by(s.write_failures.saturating_sub(r.write_failures));
        r.writes = r.writes.max(s.writes);
        r.write_failures = r.write_failures.max(s.write_failures);
    }
}

/// The metrics of one handler's listener.
pub(crate) struct ListenerMetrics {
    pub(crate) backlog: Box<dyn SettableGaugeMetric>,
    pub(crate) delivered: Box<dyn CounterMetric>,
    pub(crate) panics: Box<dyn CounterMetric>,
}
