//! [`SharedIndexInformerBuilder`]: the options of a [`SharedIndexInformer`]
//! and the [`build`](SharedIndexInformerBuilder::build) that makes one.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kcache_core::ShardSelector;
use kcache_indexer::{Indexer, Indexers};
use kcache_reflector::{ListOptions, WireFormat};
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;

use super::{DEFAULT_HANDLER_SHUTDOWN_TIMEOUT, FifoKind, Inner, Lifecycle, SharedIndexInformer};
use crate::background_compression::BackgroundCompression;
use crate::metrics::{InformerMetrics, InformerMetricsProvider, ReflectorMetricsProvider};
use crate::processor::SharedProcessor;
use crate::snapshot::{SnapshotOptions, SnapshotStatus};

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
    metrics: Option<Arc<dyn InformerMetricsProvider>>,
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
    pub fn metrics(mut self, provider: Arc<dyn InformerMetricsProvider>) -> Self {
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
            let id = super::informer_id::<K>(&name, &self.dyntype);
            let _ = metrics.set(InformerMetrics::new(p, &id, self.snapshot.is_some()));
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
}
