//! [`SharedIndexInformerBuilder`]: an [`InformerConfig`] and the
//! registrations of a [`SharedIndexInformer`], and the
//! [`build`](SharedIndexInformerBuilder::build) that makes one.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock};

use kcache_deltafifo::TransformFunc;
use kcache_indexer::{Indexer, Indexers};
use kcache_reflector::WatchErrorHandler;
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;

use super::{InformerConfig, Inner, Lifecycle, SharedIndexInformer};
use crate::metrics::{InformerMetrics, InformerMetricsProvider};
use crate::processor::SharedProcessor;
use crate::snapshot::SnapshotStatus;
use kcache_reflector::ReflectorMetricsProvider;

/// Builds a [`SharedIndexInformer`]: its [`InformerConfig`] (plain data)
/// and what must be registered with it (indexers, a transform, a watch
/// error handler, metrics providers).
///
/// ```no_run
/// # fn f(client: kube::Client) {
/// use k8s_openapi::api::core::v1::Pod;
/// use kcache_informer::{InformerConfig, SharedIndexInformer};
/// use kcache_reflector::WatchConfig;
///
/// let informer = SharedIndexInformer::<Pod>::builder(client)
///     .config(InformerConfig {
///         watch: WatchConfig {
///             namespace: Some("prod".into()),
///             ..WatchConfig::default()
///         },
///         ..InformerConfig::default()
///     })
///     .build();
/// # let _ = informer;
/// # }
/// ```
pub struct SharedIndexInformerBuilder<K: Resource> {
    client: Client,
    dyntype: K::DynamicType,
    config: InformerConfig,
    indexers: Indexers<K>,
    transform: Option<TransformFunc<K>>,
    watch_error_handler: Option<WatchErrorHandler>,
    reflector_metrics: Option<Arc<dyn ReflectorMetricsProvider>>,
    metrics: Option<Arc<dyn InformerMetricsProvider>>,
}

impl<K: Resource + 'static> SharedIndexInformerBuilder<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// What the informer does (default: [`InformerConfig::default`]).
    pub fn config(mut self, config: InformerConfig) -> Self {
        self.config = config;
        self
    }
    /// Extra indexes besides the built-in `namespace` index (more can be
    /// added later with [`SharedIndexInformer::add_indexers`]).
    pub fn indexers(mut self, indexers: Indexers<K>) -> Self {
        self.indexers.extend(indexers);
        self
    }
    /// A transform applied once to every object before it is cached (and
    /// before handlers see it). To cut managedFields, prefer
    /// [`ObjectOptions::strip_managed_fields`](kcache_core::ObjectOptions::strip_managed_fields)
    /// in [`InformerConfig::watch`]: it cuts them while the bytes are read.
    pub fn transform(mut self, transform: TransformFunc<K>) -> Self {
        self.transform = Some(transform);
        self
    }
    /// Called with every list or watch error of the reflector (client-go's
    /// `SetWatchErrorHandler`); the default logs it.
    pub fn watch_error_handler(mut self, handler: WatchErrorHandler) -> Self {
        self.watch_error_handler = Some(handler);
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
        let InformerConfig {
            watch,
            name,
            resync_period,
            fifo,
            snapshot,
            handler_shutdown_timeout,
            background_compression,
        } = self.config;
        let name = name.unwrap_or_else(|| K::plural(&self.dyntype).to_string());
        let reflector_metrics = OnceLock::new();
        if let Some(p) = self.reflector_metrics {
            let _ = reflector_metrics.set(p);
        }
        let metrics = OnceLock::new();
        if let Some(p) = self.metrics {
            let id = super::informer_id::<K>(&name, &self.dyntype);
            let _ = metrics.set(InformerMetrics::new(p, &id, snapshot.is_some()));
        }
        SharedIndexInformer {
            inner: Arc::new(Inner {
                name,
                client: self.client,
                dyntype: self.dyntype,
                watch,
                fifo_kind: fifo,
                default_handler_resync: resync_period,
                reflector_metrics,
                metrics,
                indexer,
                processor: SharedProcessor::new(),
                lifecycle: Mutex::new(Lifecycle {
                    started: false,
                    stopped: false,
                    transform: self.transform,
                    watch_error_handler: self.watch_error_handler,
                    resync_check_period: resync_period,
                    queue: None,
                    reflector: None,
                }),
                block_deltas: Mutex::new(()),
                next_listener_id: AtomicU64::new(1),
                retired: Mutex::new(Vec::new()),
                handler_shutdown_timeout,
                stopped: CancellationToken::new(),
                snapshot,
                current: AtomicBool::new(true),
                snapshot_status: Mutex::new(SnapshotStatus::default()),
                last_error: Arc::new(Mutex::new(None)),
                background_compression,
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
            config: InformerConfig::default(),
            indexers: Indexers::new(),
            transform: None,
            watch_error_handler: None,
            reflector_metrics: None,
            metrics: None,
        }
    }
}
