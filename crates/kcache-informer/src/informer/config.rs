//! [`InformerConfig`]: everything an informer does, as plain data.

use std::time::Duration;

use kcache_reflector::WatchConfig;

use super::{DEFAULT_HANDLER_SHUTDOWN_TIMEOUT, FifoKind};
use crate::background_compression::BackgroundCompression;
use crate::snapshot::SnapshotOptions;

/// What a [`SharedIndexInformer`](crate::SharedIndexInformer) does: the one
/// place its settings live, for an informer built alone
/// ([`SharedIndexInformerBuilder::config`](crate::SharedIndexInformerBuilder::config))
/// and for every informer of a factory
/// ([`SharedInformerFactoryBuilder::config`](crate::SharedInformerFactoryBuilder::config)).
///
/// Plain data with a [`Default`] for every field: set what differs. What a
/// builder still takes is what must be registered rather than described
/// (indexers, a transform, a watch error handler, metrics providers).
///
/// ```
/// use std::time::Duration;
/// use kcache_core::ObjectOptions;
/// use kcache_informer::InformerConfig;
/// use kcache_reflector::WatchConfig;
///
/// let config = InformerConfig {
///     watch: WatchConfig {
///         namespace: Some("prod".into()),
///         label_selector: Some("app=web".into()),
///         // the one way to cut managedFields: while the bytes are read
///         object_options: ObjectOptions { strip_managed_fields: true, ..ObjectOptions::default() },
///         ..WatchConfig::default()
///     },
///     resync_period: Duration::from_secs(600),
///     ..InformerConfig::default()
/// };
/// assert_eq!(config.handler_shutdown_timeout, Duration::from_secs(10));
/// ```
#[derive(Debug, Clone)]
pub struct InformerConfig {
    /// What the reflector asks the apiserver for and how: namespace,
    /// selectors, paging, streaming lists, wire format, shard selector,
    /// timeouts, size caps, and how objects are built from the bytes
    /// ([`WatchConfig::object_options`]: field paths, managedFields
    /// stripping). Default: everything, in every namespace.
    pub watch: WatchConfig,
    /// Name for logs and metrics (default `None`: the resource's plural).
    pub name: Option<String>,
    /// The default handler resync period, which is also the informer's
    /// resync check period (default zero: no resyncs).
    pub resync_period: Duration,
    /// Which FIFO sits between the reflector and the indexer (default:
    /// DeltaFIFO).
    pub fifo: FifoKind,
    /// Warm restarts: persist the cache as configured and, on start, resume
    /// from a matching snapshot instead of listing (default `None`; see
    /// [`SnapshotOptions`] and
    /// [Warm restarts](https://github.com/kcache/kcache/blob/main/docs/warm-restart.md)).
    /// In a factory's config the location must be a folder: each informer
    /// gets its own file in it.
    pub snapshot: Option<SnapshotOptions>,
    /// How long a stopping informer waits for each handler to return from
    /// the call it is in (default [`DEFAULT_HANDLER_SHUTDOWN_TIMEOUT`], 10
    /// s). A handler still in a call after that is named in a WARN (with the
    /// call and the object's key), its thread is left running, detached,
    /// and [`run`](crate::SharedIndexInformer::run) returns. Removed
    /// handlers are waited for the same way.
    pub handler_shutdown_timeout: Duration,
    /// How quiet objects are compressed in the background: on by default
    /// ([`BackgroundCompression::default`]: objects not written for 30 s
    /// are kept LZ4-compressed), [`BackgroundCompression::off`] to keep
    /// every object as received.
    pub background_compression: BackgroundCompression,
}

impl Default for InformerConfig {
    fn default() -> Self {
        InformerConfig {
            watch: WatchConfig::default(),
            name: None,
            resync_period: Duration::ZERO,
            fifo: FifoKind::default(),
            snapshot: None,
            handler_shutdown_timeout: DEFAULT_HANDLER_SHUTDOWN_TIMEOUT,
            background_compression: BackgroundCompression::default(),
        }
    }
}
