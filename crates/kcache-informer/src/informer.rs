//! The shared index informer.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use kcache_core::sync::lock;
use kcache_core::{
    BoxError, CachedObject, ErrorChain, ObjectOrTombstone, ReflectorStore, ShardSelector,
    StoreError,
};
use kcache_deltafifo::{
    DeltaFifo, DeltaType, Deltas, FifoOptions, PopError, Queue, RealFifo, TransformFunc,
};
use kcache_indexer::{IndexError, Indexer, Indexers, Lister};
use kcache_reflector::{
    ListOptions, Reflector, ReflectorError, ShardFilterMode, WatchErrorHandler, WireFormat,
};
use kube::{Client, Resource};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::background_compression::{
    BackgroundCompression, BackgroundCompressionStats, Compactor, Counters,
};
use crate::error::InformerError;
use crate::handler::ResourceEventHandler;
use crate::listener::{Listener, Notification, SyncedFn};
use crate::metrics::{InformerMetrics, MetricsProvider, ReflectorMetricsProvider};
use crate::processor::{MINIMUM_RESYNC_PERIOD, SharedProcessor, determine_resync_period};
use crate::snapshot::{
    Loaded, PushTracker, SnapshotError, SnapshotOptions, SnapshotPlan, SnapshotStatus,
    SnapshotWriter, WriteStats, join_write,
};

/// How long a stopping informer waits, by default, for each handler to
/// return from the call it is in (see
/// [`SharedIndexInformerBuilder::handler_shutdown_timeout`]).
pub const DEFAULT_HANDLER_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Parked listeners are woken at least once per this many pops.
const FLUSH_EVERY: u64 = 256;

/// Which queue sits between the reflector and the indexer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FifoKind {
    /// client-go's DeltaFIFO: per-key coalesced deltas (the default).
    #[default]
    DeltaFifo,
    /// client-go 1.33+'s in-order FIFO: one entry per event.
    RealFifo,
}

/// A transform that cuts `metadata.managedFields` out of each object's
/// bytes (no typed decode); usually the biggest saving in memory.
pub fn strip_managed_fields<K: 'static>() -> TransformFunc<K> {
    Arc::new(|obj: CachedObject<K>| obj.without_managed_fields().map_err(BoxError::from))
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
    pub(crate) list_options: ListOptions,
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
    pub(crate) own_write_sweep: Mutex<crate::freshness::OwnWriteSweep>,
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

/// Configures a [`SharedIndexInformer`].
pub struct SharedIndexInformerBuilder<K: Resource> {
    client: Client,
    dyntype: K::DynamicType,
    list_options: ListOptions,
    resync: Duration,
    indexers: Indexers<K>,
    fifo_kind: FifoKind,
    name: Option<String>,
    reflector_metrics: Option<Arc<dyn ReflectorMetricsProvider>>,
    metrics: Option<Arc<dyn MetricsProvider>>,
    snapshot: Option<SnapshotOptions>,
    handler_shutdown_timeout: Duration,
    background_compression: BackgroundCompression,
}

impl<K: Resource + 'static> SharedIndexInformerBuilder<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// Only this namespace (default: all namespaces).
    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.list_options.namespace = Some(ns.into());
        self
    }
    /// Label selector (Kubernetes syntax), applied by the server.
    pub fn label_selector(mut self, s: impl Into<String>) -> Self {
        self.list_options.label_selector = Some(s.into());
        self
    }
    /// Field selector (Kubernetes syntax), applied by the server.
    pub fn field_selector(mut self, s: impl Into<String>) -> Self {
        self.list_options.field_selector = Some(s.into());
        self
    }
    /// Abandon a watch that received no byte for this long (see
    /// [`ListOptions::watch_idle_timeout`]).
    pub fn watch_idle_timeout(mut self, idle: Duration) -> Self {
        self.list_options.watch_idle_timeout = Some(idle);
        self
    }
    /// What to ask the apiserver for: [`WireFormat::Auto`] (the default:
    /// protobuf for built-in types, JSON for custom resources) or
    /// [`WireFormat::Json`] (see [`ListOptions::wire_format`]).
    pub fn wire_format(mut self, format: WireFormat) -> Self {
        self.list_options.wire_format = format;
        self
    }
    /// Cache only one shard of the objects (see
    /// [`ListOptions::shard_selector`]), e.g. member `i` of
    /// `ShardSelector::contiguous(ShardField::Uid, n)?`. The selector is
    /// fixed for the informer's life: to move to another shard, stop the
    /// informer and build a new one.
    pub fn shard_selector(mut self, selector: ShardSelector) -> Self {
        self.list_options.shard_selector = Some(selector);
        self
    }
    /// Replaces all list options at once (the namespace and selectors
    /// too: call it before the methods that set one option).
    pub fn list_options(mut self, options: ListOptions) -> Self {
        self.list_options = options;
        self
    }
    /// The default handler resync period, which is also the informer's
    /// resync check period (0, the default: no resyncs).
    pub fn resync_period(mut self, period: Duration) -> Self {
        self.resync = period;
        self
    }
    /// Extra indexes besides the built-in `namespace` index.
    pub fn indexers(mut self, indexers: Indexers<K>) -> Self {
        self.indexers.extend(indexers);
        self
    }
    /// Which FIFO to use (default: DeltaFIFO).
    pub fn fifo(mut self, kind: FifoKind) -> Self {
        self.fifo_kind = kind;
        self
    }
    /// Where the reflector reports its metrics (lists, watches, events,
    /// relists, errors, last sync time), e.g.
    /// [`PrometheusReflectorMetricsProvider`](crate::metrics) (feature
    /// `prometheus`) or kcache-controller's `MetricsRegistry::reflector_provider`.
    pub fn reflector_metrics(mut self, provider: Arc<dyn ReflectorMetricsProvider>) -> Self {
        self.reflector_metrics = Some(provider);
        self
    }
    /// Where the informer and its handlers report their metrics (sync
    /// state, cache size, handler backlogs, deliveries, panics, warm
    /// restarts: see [`metrics`](crate::metrics)).
    pub fn metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics = Some(provider);
        self
    }
    /// Name for logs and metrics (default: the resource's plural).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    /// Warm restarts: persist the cache as configured and, on start, resume
    /// from a matching snapshot instead of listing (see [`SnapshotOptions`]
    /// and [Warm restarts](https://github.com/kcache/kcache/blob/main/docs/warm-restart.md)).
    pub fn snapshot(mut self, options: SnapshotOptions) -> Self {
        self.snapshot = Some(options);
        self
    }

    /// How long a stopping informer waits for each handler to return from
    /// the call it is in (default [`DEFAULT_HANDLER_SHUTDOWN_TIMEOUT`], 10
    /// s). A handler still in a call after that is named in a WARN (with the
    /// call and the object's key), its thread is left running, detached,
    /// and [`run`](SharedIndexInformer::run) returns. Removed handlers are
    /// waited for the same way.
    pub fn handler_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.handler_shutdown_timeout = timeout;
        self
    }

    /// How quiet objects are compressed in the background: on by default
    /// ([`BackgroundCompression::default`]: objects not written for 30 s
    /// are kept LZ4-compressed), [`BackgroundCompression::off`] to keep
    /// every object as received.
    pub fn background_compression(mut self, config: BackgroundCompression) -> Self {
        self.background_compression = config;
        self
    }

    /// Builds the informer (nothing runs until [`SharedIndexInformer::run`]).
    pub fn build(self) -> SharedIndexInformer<K> {
        let mut indexers = self.indexers;
        indexers
            .entry(kcache_indexer::NAMESPACE_INDEX.to_owned())
            .or_insert_with(kcache_indexer::meta_namespace_index_func);
        let indexer = Arc::new(Indexer::with_indexers(
            Arc::new(kcache_core::meta_namespace_key::<K>),
            indexers,
        ));
        let name = self
            .name
            .unwrap_or_else(|| K::plural(&self.dyntype).to_string());
        let reflector_metrics = OnceLock::new();
        if let Some(p) = self.reflector_metrics {
            let _ = reflector_metrics.set(p);
        }
        let metrics = OnceLock::new();
        if let Some(p) = self.metrics {
            let _ = metrics.set(InformerMetrics::new(p, &name, self.snapshot.is_some()));
        }
        SharedIndexInformer {
            inner: Arc::new(Inner {
                name,
                client: self.client,
                dyntype: self.dyntype,
                list_options: self.list_options,
                fifo_kind: self.fifo_kind,
                default_handler_resync: self.resync,
                reflector_metrics,
                metrics,
                indexer,
                processor: SharedProcessor::new(),
                lifecycle: Mutex::new(Lifecycle {
                    started: false,
                    stopped: false,
                    transform: None,
                    watch_error_handler: None,
                    resync_check_period: self.resync,
                    queue: None,
                    reflector: None,
                }),
                block_deltas: Mutex::new(()),
                next_listener_id: AtomicU64::new(1),
                retired: Mutex::new(Vec::new()),
                handler_shutdown_timeout: self.handler_shutdown_timeout,
                stopped: CancellationToken::new(),
                snapshot: self.snapshot,
                current: AtomicBool::new(true),
                snapshot_status: Mutex::new(SnapshotStatus::default()),
                last_error: Arc::new(Mutex::new(None)),
                background_compression: self.background_compression,
                compaction: Arc::default(),
                freshness: kcache_deltafifo::StoreFreshness::new(),
                own_write_sweep: Mutex::default(),
            }),
        }
    }
}

impl<K: Resource + 'static> SharedIndexInformer<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// A builder for a type whose dynamic type is `Default` (k8s-openapi
    /// types, derived custom resources, `PartialObjectMeta<K>`).
    pub fn builder(client: Client) -> SharedIndexInformerBuilder<K>
    where
        K::DynamicType: Default,
    {
        Self::builder_with(client, K::DynamicType::default())
    }

    /// A builder with an explicit dynamic type (an `ApiResource` for
    /// `DynamicObject`).
    pub fn builder_with(client: Client, dyntype: K::DynamicType) -> SharedIndexInformerBuilder<K> {
        SharedIndexInformerBuilder {
            client,
            dyntype,
            list_options: ListOptions::default(),
            resync: Duration::ZERO,
            indexers: Indexers::new(),
            fifo_kind: FifoKind::default(),
            name: None,
            reflector_metrics: None,
            metrics: None,
            snapshot: None,
            handler_shutdown_timeout: DEFAULT_HANDLER_SHUTDOWN_TIMEOUT,
            background_compression: BackgroundCompression::default(),
        }
    }

    /// The informer's name (logs, metrics).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The cache.
    pub fn indexer(&self) -> &Arc<Indexer<K>> {
        &self.inner.indexer
    }

    /// The background compression settings (see
    /// [`SharedIndexInformerBuilder::background_compression`]).
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

    /// Sets the transform applied once to every object before it is cached.
    /// Only before [`run`](Self::run).
    pub fn set_transform(&self, transform: TransformFunc<K>) -> Result<(), InformerError> {
        let mut lc = lock(&self.inner.lifecycle);
        if lc.started {
            return Err(InformerError::AlreadyStarted("set_transform"));
        }
        lc.transform = Some(transform);
        Ok(())
    }

    /// Sets the handler called with every list/watch error. Only before
    /// [`run`](Self::run).
    pub fn set_watch_error_handler(&self, handler: WatchErrorHandler) -> Result<(), InformerError> {
        let mut lc = lock(&self.inner.lifecycle);
        if lc.started {
            return Err(InformerError::AlreadyStarted("set_watch_error_handler"));
        }
        lc.watch_error_handler = Some(handler);
        Ok(())
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
    pub fn set_metrics(&self, provider: Arc<dyn MetricsProvider>) -> bool {
        {
            // under the lifecycle lock: no handler is added meanwhile
            let _lc = lock(&self.inner.lifecycle);
            if self.inner.metrics.get().is_some() {
                // checked first: a second provider gets no series at all
                return false;
            }
            let name = &self.inner.name;
            let fresh = InformerMetrics::new(provider, name, self.inner.snapshot.is_some());
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
    /// ([`ListOptions::shard_selector`]).
    pub fn shard_selector(&self) -> Option<&ShardSelector> {
        self.inner.list_options.shard_selector.as_ref()
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

    /// Adds a handler with the informer's default resync period.
    pub fn add_event_handler(
        &self,
        handler: impl ResourceEventHandler<K>,
    ) -> Result<ResourceEventHandlerRegistration<K>, InformerError> {
        let resync = self.inner.default_handler_resync;
        self.add_event_handler_with_resync_period(handler, resync)
    }

    /// Adds a handler that wants a resync every `resync_period` (0: never;
    /// at least 1 s). client-go's rules apply: an informer that does not
    /// resync ignores it; a period below the informer's check period lowers
    /// the check period before start and is raised to it after start.
    ///
    /// A handler added after start first receives the current cache as
    /// adds with `is_in_initial_list = true`, to it alone, with no event
    /// lost or duplicated around the registration.
    pub fn add_event_handler_with_resync_period(
        &self,
        handler: impl ResourceEventHandler<K>,
        resync_period: Duration,
    ) -> Result<ResourceEventHandlerRegistration<K>, InformerError> {
        let mut lc = lock(&self.inner.lifecycle);
        if lc.stopped {
            return Err(InformerError::Stopped);
        }
        let mut requested = resync_period;
        if requested > Duration::ZERO {
            if requested < MINIMUM_RESYNC_PERIOD {
                tracing::info!(
                    ?requested,
                    "resync period too small; raised to the minimum of 1s"
                );
                requested = MINIMUM_RESYNC_PERIOD;
            }
            if requested < lc.resync_check_period {
                if lc.started {
                    tracing::info!(
                        ?requested,
                        check = ?lc.resync_check_period,
                        "resync period below the running informer's check period; raised to it"
                    );
                    requested = lc.resync_check_period;
                } else {
                    lc.resync_check_period = requested;
                    self.inner.processor.resync_check_period_changed(requested);
                }
            }
        }
        let period = determine_resync_period(requested, lc.resync_check_period);
        let id = self.inner.next_listener_id.fetch_add(1, Ordering::Relaxed);
        let weak: Weak<Inner<K>> = Arc::downgrade(&self.inner);
        let synced: SyncedFn = Arc::new(move || weak.upgrade().is_some_and(|i| i.has_synced()));
        let listener = Listener::new(
            id,
            format!("{}#{id}", self.inner.name),
            Box::new(handler),
            requested,
            period,
            synced,
        );
        if let Some(m) = self.inner.metrics.get() {
            listener.attach_metrics(m.listener(&self.inner.name, &listener.name));
        }
        if !lc.started {
            self.inner
                .processor
                .add_listener(listener.clone())
                .map_err(InformerError::Thread)?;
        } else {
            // Replay the cache to this handler alone while no delta is
            // being handled, so nothing is lost or seen twice.
            let _block = lock(&self.inner.block_deltas);
            self.inner
                .processor
                .add_listener(listener.clone())
                .map_err(InformerError::Thread)?;
            for obj in self.inner.indexer.list() {
                listener.add(Notification::Add {
                    obj,
                    is_in_initial_list: true,
                });
            }
        }
        drop(lc);
        Ok(ResourceEventHandlerRegistration {
            listener,
            informer: Arc::downgrade(&self.inner),
        })
    }

    /// Removes a handler: it gets no more events (those still queued for
    /// it are dropped). Idempotent. Never blocks: the handler's thread ends
    /// once its current call (if any) returns, and is joined later without
    /// blocking (on the next removal, or within the handler shutdown
    /// timeout when the informer stops).
    pub fn remove_event_handler(&self, registration: &ResourceEventHandlerRegistration<K>) {
        let _lc = lock(&self.inner.lifecycle);
        let removed = self
            .inner
            .processor
            .remove_listener(registration.listener.id);
        let mut retired = lock(&self.inner.retired);
        retired.extend(removed);
        retired.retain(|l| !l.try_join());
    }

    /// Backlog per handler (notifications not yet handled), by handler name.
    pub fn listener_backlogs(&self) -> Vec<(String, usize)> {
        self.inner
            .processor
            .listeners()
            .iter()
            .map(|l| (l.name.clone(), l.backlog()))
            .collect()
    }

    /// Runs the informer until `cancel` fires: lists and watches, keeps the
    /// cache, notifies handlers. Returns once everything it started has
    /// stopped (listener threads included, within the handler shutdown
    /// timeout). A second call is an error.
    ///
    /// With [snapshots](SharedIndexInformerBuilder::snapshot), a matching
    /// snapshot is loaded first (warm start), snapshots are written while
    /// synced, and a last one after cancellation (what is still queued is
    /// processed first, so handlers may receive a few events after
    /// `cancel`).
    ///
    /// The run is claimed when this future is first polled, before it
    /// waits for anything: a second `run` returns
    /// [`InformerError::AlreadyStarted`] at once (a
    /// [`try_start`](Self::try_start) gets `None`). To claim synchronously,
    /// before spawning, use [`try_start`](Self::try_start).
    ///
    /// On shutdown, each handler gets up to the
    /// [handler shutdown timeout](SharedIndexInformerBuilder::handler_shutdown_timeout)
    /// to return from the call it is in; a handler that does not is named in
    /// a WARN and its thread is left running, detached, and `run` returns.
    pub async fn run(&self, cancel: CancellationToken) -> Result<(), InformerError> {
        self.claim()?;
        self.run_claimed(cancel).await
    }

    /// Claims this informer's run and spawns it on the current tokio
    /// runtime, atomically: whoever calls `try_start` (or
    /// [`run`](Self::run)) first owns the run, and every later caller gets
    /// `None` (the informer already runs, or ran, under another owner).
    /// [`has_started`](Self::has_started) is true as soon as this returns.
    ///
    /// The handle yields what [`run`](Self::run) returns; only the owner
    /// should cancel `cancel` (an informer shared through a factory belongs
    /// to the factory when the factory started it first).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, like `tokio::spawn`.
    pub fn try_start(
        &self,
        cancel: CancellationToken,
    ) -> Option<JoinHandle<Result<(), InformerError>>> {
        self.claim().ok()?;
        let me = self.clone();
        Some(tokio::spawn(async move { me.run_claimed(cancel).await }))
    }

    /// Takes the one run of this informer, under the lifecycle lock.
    fn claim(&self) -> Result<(), InformerError> {
        let mut lc = lock(&self.inner.lifecycle);
        if lc.started {
            return Err(InformerError::AlreadyStarted("run"));
        }
        if lc.stopped {
            return Err(InformerError::Stopped);
        }
        lc.started = true;
        Ok(())
    }

    /// The run, once [`claim`](Self::claim)ed; client-go's
    /// `sharedIndexInformer.Run`: load a snapshot, build the queue and the
    /// reflector, run the reflector, pop the queue until cancelled, then
    /// finish the snapshots and stop the listeners.
    async fn run_claimed(&self, cancel: CancellationToken) -> Result<(), InformerError> {
        let started_at = Instant::now();
        let plan = tokio::select! {
            biased;
            _ = cancel.cancelled() => SnapshotPlan::default(),
            p = self.prepare_snapshot() => p,
        };
        let writer = plan.writer;
        let run = self.start(plan.loaded)?;
        let warm = !self.inner.current.load(Ordering::Acquire);
        let reflector_task = {
            let reflector = run.reflector.clone();
            let token = cancel.child_token();
            tokio::spawn(async move { reflector.run(token).await })
        };
        let compactor = self.start_compactor(&cancel);
        let mut state = LoopState::new(started_at, warm, writer.as_ref());
        self.process_loop(&cancel, &run, writer.as_ref(), &mut state)
            .await;
        run.queue.close();
        let _ = reflector_task.await;
        if let Some((token, task)) = compactor {
            token.cancel();
            let _ = task.await;
        }
        self.finish_snapshots(&run, writer.as_ref(), state.write_task)
            .await;
        self.stop_listeners().await;
        tracing::debug!(informer = %self.inner.name, "informer stopped");
        Ok(())
    }

    /// Spawns the background compactor (unless it is off), stopped by the
    /// returned token or by `cancel`.
    fn start_compactor(
        &self,
        cancel: &CancellationToken,
    ) -> Option<(CancellationToken, JoinHandle<()>)> {
        let config = self.inner.background_compression.clone();
        if !config.is_enabled() {
            return None;
        }
        let token = cancel.child_token();
        let compactor = Compactor::new(
            config,
            self.inner.indexer.clone(),
            self.inner.compaction.clone(),
        );
        let task = tokio::spawn(compactor.run(token.clone()));
        Some((token, task))
    }

    /// Pops the queue into the indexer and the handlers until `cancel` or
    /// the queue closes (client-go's `processLoop`); between pops, marks a
    /// warm-started cache current once the reflector confirms it, and
    /// writes the periodic snapshots.
    async fn process_loop(
        &self,
        cancel: &CancellationToken,
        run: &Started<K>,
        writer: Option<&SnapshotWriter>,
        state: &mut LoopState,
    ) {
        let inner = self.inner.clone();
        loop {
            let step = tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                _ = run.reflector.wait_synced(), if state.awaiting_confirmation => Step::Confirmed,
                r = join_write(&mut state.write_task), if state.write_task.is_some() => Step::Written(r),
                _ = tick(state.snapshot_timer.as_mut()) => Step::SnapshotDue,
                r = run.queue.pop(Box::new(|deltas, initial| inner.handle_deltas(deltas, initial))) => Step::Popped(r),
            };
            if !self.apply_step(step, &run.queue, state) {
                break;
            }
            self.after_step(run, writer, state);
        }
    }

    /// Applies one wake-up of the loop to its state; false when the queue
    /// has closed (the loop ends).
    fn apply_step(&self, step: Step, queue: &Arc<dyn Queue<K>>, state: &mut LoopState) -> bool {
        match step {
            Step::Confirmed => {
                state.awaiting_confirmation = false;
                // everything queued now arrived before the confirmation
                state.confirm_target = Some(state.pops + queue.len() as u64);
            }
            Step::Written(r) => {
                state.write_task = None;
                self.record_write(r);
            }
            Step::SnapshotDue => state.snapshot_due = true,
            Step::Popped(Ok(())) => state.pops += 1,
            Step::Popped(Err(PopError::Closed)) => return false,
            Step::Popped(Err(PopError::Process(e))) => {
                state.pops += 1;
                tracing::warn!(informer = %self.inner.name, error = %ErrorChain(&*e), "handling deltas failed");
            }
        }
        true
    }

    /// The bookkeeping after each wake-up: wakes the listeners, marks a
    /// warm-started cache current, records the time to sync, pushes the
    /// cache metrics and starts a due snapshot write.
    fn after_step(&self, run: &Started<K>, writer: Option<&SnapshotWriter>, state: &mut LoopState) {
        let queue = &run.queue;
        // Listeners are woken in batches while deltas keep coming; wake
        // them for what is left once the queue has run dry, and every
        // FLUSH_EVERY pops in any case (a listener that gets few of a
        // long run of deltas, e.g. one not resyncing during another's
        // resync, does not wait for the whole run).
        let flush = state.pops.is_multiple_of(FLUSH_EVERY) || queue.is_empty();
        if flush {
            self.inner.processor.flush();
        }
        if let Some(target) = state.confirm_target
            && (state.pops >= target || queue.is_empty())
        {
            state.confirm_target = None;
            self.inner.current.store(true, Ordering::Release);
            tracing::info!(informer = %self.inner.name, "warm start: the cache is current");
        }
        if !state.synced_recorded && self.has_synced() {
            state.synced_recorded = true;
            let mut st = lock(&self.inner.snapshot_status);
            st.time_to_synced = Some(state.started_at.elapsed());
            self.inner.snapshot_changed(&st);
        }
        if flush || state.synced_recorded != state.synced_pushed {
            // the cache's metrics follow the listeners' wake-ups
            state.synced_pushed = state.synced_recorded;
            self.inner.push_cache_metrics(state.synced_recorded);
        }
        if state.snapshot_due
            && state.write_task.is_none()
            && self.has_synced()
            && let (Some(w), Some(t)) = (writer, &run.tracker)
            && let Some((rv, items)) = self.capture(queue, t)
        {
            state.snapshot_due = false;
            state.write_task = Some(w.spawn_write(rv, items));
        }
    }

    /// Pops the (closed) queue into the indexer and the handlers until it
    /// is empty.
    pub(crate) async fn drain(&self, queue: &Arc<dyn Queue<K>>) {
        let inner = self.inner.clone();
        loop {
            match queue
                .pop(Box::new(|deltas, initial| {
                    inner.handle_deltas(deltas, initial)
                }))
                .await
            {
                Ok(()) => {}
                Err(PopError::Closed) => break,
                Err(PopError::Process(e)) => {
                    tracing::warn!(informer = %self.inner.name, error = %ErrorChain(&*e), "handling deltas failed");
                }
            }
        }
    }

    /// Stops the listeners (the current and the removed ones), waits for
    /// their threads, and marks the informer stopped.
    async fn stop_listeners(&self) {
        let mut listeners = self.inner.processor.stop();
        listeners.append(&mut lock(&self.inner.retired));
        self.join_listeners(listeners).await;
        lock(&self.inner.lifecycle).stopped = true;
        self.inner.stopped.cancel();
    }

    /// Waits, up to the handler shutdown timeout, for the threads of the
    /// (closed) listeners to end, without blocking the runtime; names each
    /// handler still in a call after that in a WARN and leaves its thread
    /// detached.
    async fn join_listeners(&self, mut waiting: Vec<Arc<Listener<K>>>) {
        let timeout = self.inner.handler_shutdown_timeout;
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            waiting.retain(|l| !l.try_join());
            let now = Instant::now();
            if waiting.is_empty() || now >= deadline {
                break;
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
        for l in waiting {
            let stuck_in = l.stuck_in().unwrap_or_else(|| "(unknown)".to_owned());
            tracing::warn!(
                informer = %self.inner.name,
                handler = %l.name,
                stuck_in = %stuck_in,
                timeout_s = timeout.as_secs_f64(),
                "an event handler did not return within the handler shutdown timeout; its thread is left running, detached, and the informer stops without it: make the handler return (handlers must not block), or raise handler_shutdown_timeout"
            );
            l.detach();
        }
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

    /// Builds this run's queue and reflector (what client-go's `Run` does
    /// before it starts the controller), with a loaded snapshot queued
    /// first; records both in the lifecycle and starts the listeners'
    /// threads.
    fn start(&self, warm: Option<Loaded<K>>) -> Result<Started<K>, InformerError> {
        let mut lc = lock(&self.inner.lifecycle);
        // claimed by `run`/`try_start`; `stopped` is set only at the end of
        // the one run
        debug_assert!(lc.started && !lc.stopped);
        // Snapshot objects were transformed before they were written: the
        // transform is bypassed while they are queued.
        let bypass = Arc::new(AtomicBool::new(false));
        let InitialQueue { queue, resume_rv } = self.queue_snapshot(&lc, &bypass, warm);
        let tracker = self.inner.snapshot.as_ref().map(|_| {
            Arc::new(PushTracker {
                last_rv: Mutex::new(resume_rv.clone().unwrap_or_default()),
            })
        });
        let sink: Arc<dyn ReflectorStore<K>> = Arc::new(ResyncGate {
            queue: queue.clone(),
            informer: Arc::downgrade(&self.inner),
            tracker: tracker.clone(),
        });
        let reflector = Arc::new(self.build_reflector(&lc, sink, resume_rv));
        lc.queue = Some(queue.clone());
        lc.reflector = Some(reflector.clone());
        self.inner.processor.run().map_err(InformerError::Thread)?;
        Ok(Started {
            queue,
            reflector,
            tracker,
        })
    }

    /// A new, empty queue of the configured kind that knows the indexer's
    /// objects, with the user's transform (skipped while `bypass` is set).
    pub(crate) fn new_queue(
        &self,
        lc: &Lifecycle<K>,
        bypass: &Arc<AtomicBool>,
    ) -> Arc<dyn Queue<K>> {
        let mut fifo_options = FifoOptions::new()
            .known_objects(self.inner.indexer.clone())
            .emit_delta_type_replaced(true)
            .freshness(self.inner.freshness.clone());
        if let Some(t) = &lc.transform {
            let t = t.clone();
            let bypass = bypass.clone();
            let wrapped: TransformFunc<K> = Arc::new(move |o| {
                if bypass.load(Ordering::Relaxed) {
                    Ok(o)
                } else {
                    t(o)
                }
            });
            fifo_options = fifo_options.transformer(wrapped);
        }
        match self.inner.fifo_kind {
            FifoKind::DeltaFifo => Arc::new(DeltaFifo::new(fifo_options)),
            FifoKind::RealFifo => Arc::new(RealFifo::new(fifo_options)),
        }
    }

    /// The reflector feeding `sink`: the list options, the resync check
    /// period, the reflector metrics, a watch error handler that records
    /// the last error before calling the user's, and the resourceVersion to
    /// resume the watch from after a warm start.
    fn build_reflector(
        &self,
        lc: &Lifecycle<K>,
        sink: Arc<dyn ReflectorStore<K>>,
        resume_rv: Option<String>,
    ) -> Reflector<K> {
        let mut rb =
            Reflector::builder_with(self.inner.client.clone(), sink, self.inner.dyntype.clone())
                .name(self.inner.name.clone())
                .list_options(self.inner.list_options.clone())
                .resync_period(lc.resync_check_period);
        if let Some(m) = self.inner.reflector_metrics.get() {
            rb = rb.metrics(m.clone());
        }
        let user = lc.watch_error_handler.clone();
        let last = self.inner.last_error.clone();
        rb = rb.watch_error_handler(move |e: &ReflectorError| {
            *lock(&last) = Some(ErrorChain(e).to_string());
            if let Some(h) = &user {
                h(e);
            }
        });
        if let Some(rv) = resume_rv {
            rb = rb.resume_from(rv);
        }
        rb.build()
    }
}

/// What [`SharedIndexInformer::start`] builds for one run.
pub(crate) struct Started<K> {
    /// The queue between the reflector and the indexer.
    pub(crate) queue: Arc<dyn Queue<K>>,
    /// The reflector feeding `queue`.
    pub(crate) reflector: Arc<Reflector<K>>,
    /// The resourceVersion of the last change queued, when snapshots are
    /// configured.
    pub(crate) tracker: Option<Arc<PushTracker>>,
}

/// The first queue of a run and where its watch resumes.
pub(crate) struct InitialQueue<K> {
    /// Empty, or holding a loaded snapshot's objects.
    pub(crate) queue: Arc<dyn Queue<K>>,
    /// The snapshot's resourceVersion when its objects were queued (a warm
    /// start): the watch resumes there without a list.
    pub(crate) resume_rv: Option<String>,
}

/// One wake-up of the informer's loop.
enum Step {
    Confirmed,
    Written(Result<WriteStats, SnapshotError>),
    SnapshotDue,
    Popped(Result<(), PopError<BoxError>>),
}

async fn tick(timer: Option<&mut Interval>) {
    match timer {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// The state of the informer's loop, carried between its wake-ups.
struct LoopState {
    /// When the run began (for the time to sync).
    started_at: Instant,
    /// Deltas popped, handled or not.
    pops: u64,
    /// A warm start waits for the reflector to confirm the resumed watch.
    awaiting_confirmation: bool,
    /// After a confirmation: the pops after which the cache is current.
    confirm_target: Option<u64>,
    /// The time to sync has been recorded.
    synced_recorded: bool,
    /// The sync state last pushed to the cache metrics.
    synced_pushed: bool,
    /// Ticks when a periodic snapshot is due (none without an interval).
    snapshot_timer: Option<Interval>,
    /// A snapshot is due and waits for a synced, drained cache.
    snapshot_due: bool,
    /// The snapshot write in flight.
    write_task: Option<JoinHandle<Result<WriteStats, SnapshotError>>>,
}

impl LoopState {
    /// The state before the first wake-up; the snapshot timer's first tick
    /// is one interval from now.
    fn new(started_at: Instant, warm: bool, writer: Option<&SnapshotWriter>) -> Self {
        let snapshot_timer = writer
            .and_then(|w| (!w.interval.is_zero()).then_some(w.interval))
            .map(|p| {
                let mut i = tokio::time::interval_at(Instant::now() + p, p);
                i.set_missed_tick_behavior(MissedTickBehavior::Delay);
                i
            });
        LoopState {
            started_at,
            pops: 0,
            awaiting_confirmation: warm,
            confirm_target: None,
            synced_recorded: false,
            synced_pushed: false,
            snapshot_timer,
            snapshot_due: false,
            write_task: None,
        }
    }
}

impl<K: Resource> Inner<K> {
    fn has_synced(&self) -> bool {
        // Cloned out so the FIFO's lock is not taken under ours.
        let queue = lock(&self.lifecycle).queue.clone();
        queue.is_some_and(|q| q.has_synced()) && self.current.load(Ordering::Acquire)
    }

    /// Pushes the sync state and the cache size to the metrics, if any.
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

impl<K: Resource + 'static> Inner<K> {
    /// client-go's processDeltas, under `block_deltas`.
    fn handle_deltas(&self, deltas: Deltas<K>, is_in_initial_list: bool) -> Result<(), BoxError> {
        let _block = lock(&self.block_deltas);
        for delta in deltas.into_vec() {
            match delta.kind {
                DeltaType::Sync | DeltaType::Replaced | DeltaType::Added | DeltaType::Updated => {
                    let obj = delta.object.into_object();
                    let old = self.indexer.get_by_key(obj.key());
                    match old {
                        Some(old) => {
                            if let Err(e) = self.indexer.update(obj.clone()) {
                                self.store_failed(&obj, e);
                                continue;
                            }
                            let is_sync = old.resource_version() == obj.resource_version();
                            self.processor
                                .distribute(&Notification::Update { old, new: obj }, is_sync);
                        }
                        None => {
                            if let Err(e) = self.indexer.add(obj.clone()) {
                                self.store_failed(&obj, e);
                                continue;
                            }
                            self.processor.distribute(
                                &Notification::Add {
                                    obj,
                                    is_in_initial_list,
                                },
                                false,
                            );
                        }
                    }
                }
                DeltaType::Deleted => {
                    let obj: ObjectOrTombstone<K> = delta.object;
                    if let Err(e) = self.indexer.delete(obj.clone()) {
                        self.store_failed(obj.object(), e);
                        continue;
                    }
                    self.processor
                        .distribute(&Notification::Delete { obj }, false);
                }
            }
        }
        Ok(())
    }

    fn store_failed(&self, obj: &CachedObject<K>, e: StoreError) {
        tracing::error!(
            informer = %self.name,
            key = %obj.key(),
            error = %ErrorChain(&e),
            "writing to the cache failed; the change is skipped"
        );
    }
}

/// The store the reflector writes into: the queue, with `resync` passed on
/// only when some handler's resync is due (client-go's `ShouldResync`).
///
/// With snapshots, it also records the resourceVersion of the last change
/// queued, under the tracker's lock, and notes a relist of a warm start.
struct ResyncGate<K: Resource> {
    queue: Arc<dyn Queue<K>>,
    informer: Weak<Inner<K>>,
    tracker: Option<Arc<PushTracker>>,
}

impl<K: Resource> ResyncGate<K> {
    fn tracked(
        &self,
        rv: Option<&str>,
        push: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let Some(t) = &self.tracker else {
            return push();
        };
        let mut last = lock(&t.last_rv);
        let r = push();
        if let Some(rv) = rv {
            last.clear();
            last.push_str(rv);
        }
        r
    }
}

impl<K: Resource + 'static> ReflectorStore<K> for ResyncGate<K> {
    fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        let keep = obj.clone();
        self.tracked(keep.resource_version(), || self.queue.add(obj))
    }
    fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        let keep = obj.clone();
        self.tracked(keep.resource_version(), || self.queue.update(obj))
    }
    fn delete(&self, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
        let keep = obj.object().clone();
        self.tracked(keep.resource_version(), || self.queue.delete(obj))
    }
    fn replace(&self, items: Vec<CachedObject<K>>, rv: String) -> Result<(), StoreError> {
        if let Some(i) = self.informer.upgrade()
            && !i.current.load(Ordering::Acquire)
        {
            let mut st = lock(&i.snapshot_status);
            if !st.resume_relisted {
                st.resume_relisted = true;
                tracing::info!(informer = %i.name, "warm start: the snapshot's resourceVersion is too old; relisted");
                i.snapshot_changed(&st);
            }
        }
        let keep = rv.clone();
        self.tracked(Some(&keep), || self.queue.replace(items, rv))
    }
    fn resync(&self) -> Result<(), StoreError> {
        let due = self
            .informer
            .upgrade()
            .is_some_and(|i| i.processor.should_resync());
        if due { self.queue.resync() } else { Ok(()) }
    }
    fn bookmark(&self, rv: &str) -> Result<(), StoreError> {
        self.tracked(Some(rv), || self.queue.bookmark(rv))
    }
    fn last_store_sync_resource_version(&self) -> Option<String> {
        self.queue.last_store_sync_resource_version()
    }
    fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        // what the queue holds (queued or in the indexer): a relist reuses
        // unchanged objects instead of holding a second copy of the cache
        self.queue.cached(key)
    }
}

/// A handler's registration: its sync state and statistics; pass it to
/// [`SharedIndexInformer::remove_event_handler`] to remove the handler.
pub struct ResourceEventHandlerRegistration<K: Resource> {
    listener: Arc<Listener<K>>,
    informer: Weak<Inner<K>>,
}

impl<K: Resource> fmt::Debug for ResourceEventHandlerRegistration<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceEventHandlerRegistration")
            .field("name", &self.listener.name)
            .finish_non_exhaustive()
    }
}

impl<K: Resource + 'static> ResourceEventHandlerRegistration<K> {
    /// True once the informer has synced and every initial add for this
    /// handler has returned from it.
    pub fn has_synced(&self) -> bool {
        self.listener.has_synced()
    }
    /// Notifications waiting for this handler.
    pub fn backlog(&self) -> usize {
        self.listener.backlog()
    }
    /// Notifications handed to this handler so far.
    pub fn delivered(&self) -> u64 {
        self.listener.delivered()
    }
    /// How many times this handler panicked (each time the event was
    /// skipped and the handler kept receiving later events).
    pub fn panics(&self) -> u64 {
        self.listener.panics()
    }
    /// Whether nothing is waiting and the handler is not running.
    pub fn is_idle(&self) -> bool {
        self.listener.idle()
    }
    /// The resync period in use for this handler (0: none).
    pub fn resync_period(&self) -> Duration {
        self.listener.resync_period()
    }
    /// Whether the handler is still registered with a live informer.
    pub fn is_active(&self) -> bool {
        self.informer
            .upgrade()
            .is_some_and(|i| i.processor.contains(self.listener.id))
    }
    /// The handler's name (informer name + registration number).
    pub fn name(&self) -> &str {
        &self.listener.name
    }
}

impl<K: Resource + 'static> HasSynced for ResourceEventHandlerRegistration<K> {
    fn has_synced(&self) -> bool {
        self.listener.has_synced()
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
