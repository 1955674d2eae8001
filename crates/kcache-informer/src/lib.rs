//! Shared index informers: client-go's `SharedIndexInformer` and
//! `SharedInformerFactory` for Rust.
//!
//! A [`SharedIndexInformer`] runs one reflector (list + watch, from
//! `kcache-reflector`), one FIFO (`kcache-deltafifo`) and one indexed cache
//! (`kcache-indexer`) for a resource type, and fans every change out to any
//! number of handlers. Each handler has its own listener: an unbounded
//! buffer (starting at 1024 notifications, doubling) and a thread of its
//! own, so a slow or stuck handler never delays the others, the cache or the
//! watch. A handler that panics is caught, logged with the object's key and
//! counted; it keeps receiving later events.
//!
//! Handlers receive [`CachedObject`](kcache_core::CachedObject)s: reference
//! counted, with metadata at hand; nothing on the informer's path decodes
//! the typed object unless a handler calls `decode()`.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kcache_informer::{
//!     InformerConfig, ResourceEventHandlerFuncs, SharedIndexInformer, wait_for_cache_sync,
//! };
//! use kcache_reflector::WatchConfig;
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let informer = SharedIndexInformer::<ConfigMap>::builder(client)
//!     .config(InformerConfig {
//!         watch: WatchConfig { namespace: Some("default".into()), ..WatchConfig::default() },
//!         ..InformerConfig::default()
//!     })
//!     .build();
//! let registration = informer.add_event_handler(
//!     ResourceEventHandlerFuncs::new()
//!         .add_func(|cm, initial| println!("add {} (initial list: {initial})", cm.key()))
//!         .update_func(|_old, new| println!("update {}", new.key()))
//!         .delete_func(|cm| println!("delete {}", cm.key())),
//! )?;
//! let cancel = CancellationToken::new();
//! let run = tokio::spawn({
//!     let (informer, cancel) = (informer.clone(), cancel.clone());
//!     async move { informer.run(cancel).await }
//! });
//! wait_for_cache_sync(&cancel, &[&informer, &registration]).await;
//! let cached = informer.lister().namespaced("default").get("my-config")?;
//! let typed: ConfigMap = cached.decode()?; // decode only when needed
//! # let _ = typed;
//! cancel.cancel();
//! run.await??;
//! # Ok(())
//! # }
//! ```
//!
//! # Configuration
//!
//! What an informer does is one plain value, [`InformerConfig`]: what its
//! reflector asks for ([`WatchConfig`](kcache_reflector::WatchConfig): namespace, selectors, paging,
//! wire format, timeouts, size caps, managedFields stripping), resync,
//! FIFO, warm restarts, shutdown timeout, background compression. The same
//! value configures one informer ([`SharedIndexInformerBuilder::config`])
//! or every informer of a factory
//! ([`SharedInformerFactoryBuilder::config`]). The builders take only what
//! must be registered: indexers, a transform, a watch error handler,
//! metrics providers (and, on the factory, per-type resyncs, transforms
//! and snapshot choices).
//!
//! Handlers are synchronous (like client-go's) and run on their listener's
//! thread: keep them quick, typically computing a key and adding it to a
//! work queue.
//!
//! # Metrics
//!
//! An informer given a [`InformerMetricsProvider`] (on its builder, its factory's,
//! or later with [`SharedIndexInformer::set_metrics`]) records its sync
//! state, cache size, per-handler backlog, deliveries and panics, and
//! warm-restart figures (see [`metrics`]); its reflector records into a
//! [`ReflectorMetricsProvider`](kcache_reflector::ReflectorMetricsProvider).
//! The `prometheus` feature adds `PrometheusInformerMetricsProvider`;
//! kcache-reflector's is `PrometheusReflectorMetricsProvider`.
//!
//! # Background compression
//!
//! By default an informer keeps objects as received while they change,
//! and LZ4-compresses those not written for 30 s in a background task
//! (the hot set stays plain, the quiet bulk takes about a third of the
//! memory); readers see the same values and handlers no event. Tune it or
//! turn it off with [`InformerConfig::background_compression`]; [`SharedIndexInformer::background_compression_stats`] reports
//! its work. See [`background_compression`].
//!
//! # Warm restarts
//!
//! With [`SnapshotOptions`], an informer persists its cache (every few
//! minutes while synced, and on graceful shutdown) and, when it starts
//! again, loads it, hands its objects to handlers as initial-list adds and
//! resumes the watch from the snapshot's resourceVersion instead of
//! listing everything. If the apiserver no longer has that
//! resourceVersion (410 Gone), the informer relists and the differences
//! arrive as updates and tombstone deletes. A factory's snapshot folder
//! leaves core/v1 Secrets out unless they are named
//! ([`SharedInformerFactoryBuilder::snapshot_for`]); files are private
//! (0600, folders 0700) and written without following symlinks. See
//! [Warm restarts](https://github.com/kcache/kcache/blob/main/docs/warm-restart.md).
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Pod;
//! use kcache_informer::{
//!     InformerConfig, SharedIndexInformer, SnapshotOptions, StartKind, wait_for_cache_sync,
//! };
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run(config: kube::Config) -> Result<(), Box<dyn std::error::Error>> {
//! let server = config.cluster_url.to_string();
//! let client = kube::Client::try_from(config)?;
//! let informer = SharedIndexInformer::<Pod>::builder(client)
//!     .config(InformerConfig {
//!         snapshot: Some(SnapshotOptions::dir("/var/lib/my-controller/cache").server_url(server)),
//!         ..InformerConfig::default()
//!     })
//!     .build();
//! let cancel = CancellationToken::new();
//! let run = tokio::spawn({
//!     let (informer, cancel) = (informer.clone(), cancel.clone());
//!     async move { informer.run(cancel).await }
//! });
//! wait_for_cache_sync(&cancel, &[&informer]).await;
//! let status = informer.snapshot_status();
//! if status.start == StartKind::Warm {
//!     println!("resumed from {} cached objects", status.objects_loaded);
//! }
//! cancel.cancel(); // writes a last snapshot before `run` returns
//! run.await??;
//! # Ok(())
//! # }
//! ```

// docs.rs (rustdoc --cfg docsrs, nightly): items behind a feature carry a
// badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod allocator;
pub mod background_compression;
mod error;
mod factory;
mod freshness;
#[cfg(feature = "fuzzing")]
#[cfg_attr(docsrs, doc(cfg(feature = "fuzzing")))]
pub mod fuzzing;
mod handler;
mod informer;
mod listener;
pub mod metrics;
mod processor;
#[cfg(feature = "prometheus")]
mod prometheus;
pub mod snapshot;

pub use background_compression::{BackgroundCompression, BackgroundCompressionStats};
pub use error::InformerError;
pub use factory::{SharedInformerFactory, SharedInformerFactoryBuilder};
pub use freshness::FreshnessError;
pub use handler::{FilteringResourceEventHandler, ResourceEventHandler, ResourceEventHandlerFuncs};
pub use informer::{
    DEFAULT_HANDLER_SHUTDOWN_TIMEOUT, FifoKind, HasSynced, InformerConfig,
    ResourceEventHandlerRegistration, SharedIndexInformer, SharedIndexInformerBuilder,
    wait_for_cache_sync,
};
pub use snapshot::{SnapshotError, SnapshotOptions, SnapshotStatus, StartKind};

pub use metrics::{InformerMetricsProvider, NoopInformerMetricsProvider};
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use prometheus::PrometheusInformerMetricsProvider;
