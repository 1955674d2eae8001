//! The shared index informer: [`SharedIndexInformer`], its shared state
//! ([`Inner`], [`Lifecycle`]) and its accessors, plus the free helpers
//! ([`FifoKind`], [`HasSynced`],
//! [`wait_for_cache_sync`]).
//!
//! The rest lives beside it: the config in [`config`], the builder in [`builder`], handler
//! registration in [`handlers`], the run (queue, reflector, loop,
//! shutdown) in [`run`], and delta handling with the reflector's store in
//! [`deltas`].

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kcache_core::ShardSelector;
use kcache_core::sync::lock;
use kcache_deltafifo::{Queue, TransformFunc};
use kcache_indexer::{IndexError, Indexer, Indexers, Lister};
use kcache_reflector::{Reflector, ShardFilterMode, WatchConfig, WatchErrorHandler};
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;

use crate::background_compression::{BackgroundCompression, BackgroundCompressionStats, Counters};
use crate::listener::Listener;
use crate::metrics::{InformerMetrics, InformerMetricsProvider};
use crate::processor::SharedProcessor;
use crate::snapshot::{SnapshotOptions, SnapshotStatus};
use kcache_reflector::ReflectorMetricsProvider;

mod builder;
mod config;
mod deltas;
mod handlers;
mod run;

pub use builder::SharedIndexInformerBuilder;
pub use config::InformerConfig;
pub use handlers::ResourceEventHandlerRegistration;
pub(crate) use run::{InitialQueue, Started};

/// How long a stopping informer waits, by default, for each handler to
/// return from the call it is in (see
/// [`InformerConfig::handler_shutdown_timeout`]).
pub const DEFAULT_HANDLER_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Which queue sits between the reflector and the indexer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FifoKind {
    /// client-go's DeltaFIFO: per-key coalesced deltas (the default).
    #[default]
    DeltaFifo,
    /// client-go 1.33+'s in-order FIFO: one entry per event.
    RealFifo,
}

/// When an informer last swept its own writes against its freshness.
#[derive(Debug, Default)]
pub(crate) struct OwnWriteSweep {
    pub(crate) at: Option<kcache_core::ResourceVersion>,
    pub(crate) writes_since: usize,
}

/// Something whose cache can be synced: informers and handler
/// registrations. See [`wait_for_cache_sync`].
pub trait HasSynced: Send + Sync {
    /// Whether the cache (and, for a registration, the handler) has synced.
    fn has_synced(&self) -> bool;
}

/// Waits until every one of `synced` has synced, polling every 100 ms like
/// client-go. Returns `false` if `cancel` fires first.
pub async fn wait_for_cache_sync(cancel: &CancellationToken, synced: &[&dyn HasSynced]) -> bool {
    loop {
        if synced.iter().all(|s| s.has_synced()) {
            return true;
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

pub(crate) struct Lifecycle<K> {
    started: bool,
    stopped: bool,
    pub(crate) transform: Option<TransformFunc<K>>,
    watch_error_handler: Option<WatchErrorHandler>,
    resync_check_period: Duration,
    queue: Option<Arc<dyn Queue<K>>>,
    reflector: Option<Arc<Reflector<K>>>,
}

pub(crate) struct Inner<K: Resource> {
    pub(crate) name: String,
    pub(crate) client: Client,
    pub(crate) dyntype: K::DynamicType,
    pub(crate) watch: WatchConfig,
    fifo_kind: FifoKind,
    default_handler_resync: Duration,
    /// Taken when the reflector is built.
    reflector_metrics: OnceLock<Arc<dyn ReflectorMetricsProvider>>,
    /// Set once (by the builder or `set_metrics`).
    metrics: OnceLock<InformerMetrics>,
    pub(crate) indexer: Arc<Indexer<K>>,
    processor: SharedProcessor<K>,
    pub(crate) lifecycle: Mutex<Lifecycle<K>>,
    /// Held while deltas are handled and while a late handler gets the
    /// cache replayed, so the two never interleave.
    block_deltas: Mutex<()>,
    next_listener_id: AtomicU64,
    /// Removed listeners whose thread has not been joined yet.
    retired: Mutex<Vec<Arc<Listener<K>>>>,
    handler_shutdown_timeout: Duration,
    stopped: CancellationToken,
    pub(crate) snapshot: Option<SnapshotOptions>,
    /// False from a warm start until the cache is known current.
    pub(crate) current: AtomicBool,
    pub(crate) snapshot_status: Mutex<SnapshotStatus>,
    /// The last error the reflector reported, as text.
    last_error: Arc<Mutex<Option<String>>>,
    /// How quiet objects are compressed in the background.
    background_compression: BackgroundCompression,
    /// What the compactor has done.
    compaction: Arc<Counters>,
    /// What the cache has caught up to; every queue of every run publishes
    /// on it.
    pub(crate) freshness: kcache_deltafifo::StoreFreshness,
    /// When own writes were last swept against the freshness.
    pub(crate) own_write_sweep: Mutex<OwnWriteSweep>,
}

/// One reflector, one FIFO, one indexer, any number of handlers: client-go's
/// `SharedIndexInformer`.
///
/// Cheap to clone (a handle on shared state). See the crate docs for an
/// example.
pub struct SharedIndexInformer<K: Resource> {
    pub(crate) inner: Arc<Inner<K>>,
}

impl<K: Resource> Clone for SharedIndexInformer<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Resource> fmt::Debug for SharedIndexInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("name", &self.inner.name)
            .field("cached", &self.inner.indexer.len())
            .finish_non_exhaustive()
    }
}

impl<K: Resource + 'static> SharedIndexInformer<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// The informer's name (logs, metrics).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The cache.
    pub fn indexer(&self) -> &Arc<Indexer<K>> {
        &self.inner.indexer
    }

    /// The background compression settings (see
    /// [`InformerConfig::background_compression`]).
    pub fn background_compression(&self) -> &BackgroundCompression {
        &self.inner.background_compression
    }

    /// What background compression has done so far: objects compressed,
    /// bytes before and after, time spent (all zero when it is off).
    pub fn background_compression_stats(&self) -> BackgroundCompressionStats {
        self.inner.compaction.snapshot()
    }

    /// A lister over the cache.
    pub fn lister(&self) -> Lister<K> {
        Lister::new(self.inner.indexer.clone())
    }

    /// Adds indexes; allowed before and after start (existing objects are
    /// indexed at once).
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError> {
        self.inner.indexer.add_indexers(indexers)
    }

    /// Whether the cache is known current: the first complete list has
    /// been processed into the cache (and handed to every handler's
    /// listener). After a warm start: the snapshot's objects have been
    /// processed, the resumed watch was confirmed by the apiserver (a
    /// bookmark, or a clean end of the watch) or a relist replaced the
    /// cache, and every change received up to that confirmation has been
    /// processed.
    pub fn has_synced(&self) -> bool {
        self.inner.has_synced()
    }

    /// Warm-restart state: warm or cold start, objects loaded, snapshot
    /// age, whether the resume needed a relist, writes.
    pub fn snapshot_status(&self) -> SnapshotStatus {
        lock(&self.inner.snapshot_status).clone()
    }

    /// Whether snapshots are configured.
    pub fn snapshots_enabled(&self) -> bool {
        self.inner.snapshot.is_some()
    }

    /// Reports this informer's metrics and its handlers' (see
    /// [`metrics`](crate::metrics)) to `provider` from now on, starting
    /// from the current values; before or after [`run`](Self::run).
    /// `false`, and nothing changes, when the informer has a provider
    /// already (from its builder, its factory or an earlier call): an
    /// informer shared by several users is recorded once.
    pub fn set_metrics(&self, provider: Arc<dyn InformerMetricsProvider>) -> bool {
        {
            // under the lifecycle lock: no handler is added meanwhile
            let _lc = lock(&self.inner.lifecycle);
            if self.inner.metrics.get().is_some() {
                // checked first: a second provider gets no series at all
                return false;
            }
            let name = &self.inner.name;
            let id = informer_id::<K>(name, &self.inner.dyntype);
            let fresh = InformerMetrics::new(provider, &id, self.inner.snapshot.is_some());
            let m = self.inner.metrics.get_or_init(|| fresh);
            for l in self.inner.processor.listeners() {
                l.attach_metrics(m.listener(name, &l.name));
            }
        }
        self.inner.push_cache_metrics(self.inner.has_synced());
        self.inner
            .snapshot_changed(&lock(&self.inner.snapshot_status));
        true
    }

    /// The reflector reports its metrics to `provider` (see
    /// [`SharedIndexInformerBuilder::reflector_metrics`]). Only before the
    /// reflector is built (when [`run`](Self::run) starts): `false`, and
    /// nothing changes, after that or when a provider was given already.
    pub fn set_reflector_metrics(&self, provider: Arc<dyn ReflectorMetricsProvider>) -> bool {
        let lc = lock(&self.inner.lifecycle);
        lc.reflector.is_none() && self.inner.reflector_metrics.set(provider).is_ok()
    }

    /// Whether the run was claimed: [`run`](Self::run) was called or
    /// [`try_start`](Self::try_start) returned a handle (true from that
    /// moment, before the run has listed anything).
    pub fn has_started(&self) -> bool {
        lock(&self.inner.lifecycle).started
    }

    /// Whether the informer has stopped.
    pub fn is_stopped(&self) -> bool {
        lock(&self.inner.lifecycle).stopped
    }

    /// The resourceVersion the cache reflects (`""` before the first list).
    pub fn last_sync_resource_version(&self) -> String {
        lock(&self.inner.lifecycle)
            .reflector
            .as_ref()
            .map(|r| r.last_sync_resource_version())
            .unwrap_or_default()
    }

    /// The shard selector the informer lists and watches with
    /// ([`WatchConfig::shard_selector`]).
    pub fn shard_selector(&self) -> Option<&ShardSelector> {
        self.inner.watch.shard_selector.as_ref()
    }

    /// Who cuts the collection down to the informer's shard: `None`
    /// without a shard selector or before the first list;
    /// [`ShardFilterMode::Server`] when the apiserver filters (each replica
    /// receives only its share), [`ShardFilterMode::Client`] when it serves
    /// everything (feature gate `ShardedListAndWatch` off) and the
    /// reflector drops the rest. The cache holds the same objects either way.
    pub fn shard_filter_mode(&self) -> Option<ShardFilterMode> {
        lock(&self.inner.lifecycle)
            .reflector
            .as_ref()
            .and_then(|r| r.shard_filter_mode())
    }

    /// The last error the informer's reflector reported (a failed list or
    /// watch, a skipped event), as text; `None` before any. What a
    /// controller's cache-sync timeout names for an informer that never
    /// synced.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.inner.last_error).clone()
    }

    /// Waits until the informer has stopped after its `run` was cancelled.
    pub async fn stopped(&self) {
        self.inner.stopped.cancelled().await
    }
}

impl<K: Resource> Inner<K> {
    fn has_synced(&self) -> bool {
        // Cloned out so the FIFO's lock is not taken under ours.
        let queue = lock(&self.lifecycle).queue.clone();
        queue.is_some_and(|q| q.has_synced()) && self.current.load(Ordering::Acquire)
    }

    /// Pushes the sync state and the cache size to the metrics, if any.
    pub(crate) fn metrics(&self) -> Option<&InformerMetrics> {
        self.metrics.get()
    }

    /// `informer_queued_items`: the keys left in the queue after a pop.
    pub(crate) fn queued_items(&self, n: usize) {
        if let Some(m) = self.metrics.get() {
            m.queued_items.set(n as f64);
        }
    }

    fn push_cache_metrics(&self, synced: bool) {
        if let Some(m) = self.metrics.get() {
            m.cache(synced, self.indexer.len());
        }
    }

    /// Pushes the warm-restart state to the metrics, if any (called with
    /// the status lock held, so pushes keep the order of the changes).
    pub(crate) fn snapshot_changed(&self, status: &SnapshotStatus) {
        if let Some(m) = self.metrics.get() {
            m.snapshot(status);
        }
    }
}

impl<K: Resource + 'static> HasSynced for SharedIndexInformer<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    fn has_synced(&self) -> bool {
        self.inner.has_synced()
    }
}

/// The identity client-go's informer metrics are labelled with.
pub(crate) fn informer_id<K: Resource>(
    name: &str,
    dt: &K::DynamicType,
) -> crate::metrics::InformerId {
    crate::metrics::InformerId {
        name: name.to_owned(),
        group: K::group(dt).into_owned(),
        version: K::version(dt).into_owned(),
        resource: K::plural(dt).into_owned(),
    }
}
