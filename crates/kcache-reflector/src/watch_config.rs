//! The watch configuration: what a reflector lists and watches, and how.

use kcache_core::{ObjectOptions, ShardSelector};

use crate::limits::{Limits, RequestTimeouts};
use crate::wire_format::WireFormat;

/// How a reflector lists and watches: namespace, selectors, page size,
/// streaming lists, wire format, shard selector, how objects are built;
/// with its timeouts ([`RequestTimeouts`]) and byte caps ([`Limits`]) as
/// named parts. Every field has client-go's default.
///
/// The one watch configuration of kcache, as kube-runtime's
/// `watcher::Config`: plain data, built once (struct update syntax over
/// [`WatchConfig::default`]) and handed down whole, to
/// [`ReflectorBuilder::config`](crate::ReflectorBuilder::config) or to an
/// informer (as the `watch` of kcache-informer's `InformerConfig`), which
/// passes it to its reflector as is.
///
/// ```
/// use std::time::Duration;
/// use kcache_reflector::{Limits, RequestTimeouts, WatchConfig};
///
/// let config = WatchConfig {
///     namespace: Some("default".into()),
///     label_selector: Some("app=web".into()),
///     timeouts: RequestTimeouts {
///         watch_idle_timeout: Some(Duration::from_secs(180)),
///         ..RequestTimeouts::default()
///     },
///     limits: Limits { max_event_size: 16 << 20, ..Limits::default() },
///     ..WatchConfig::default()
/// };
/// assert_eq!(config.limits.max_list_page_bytes, 2 << 30);
/// ```
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Only objects in this namespace (default: all namespaces).
    pub namespace: Option<String>,
    /// A label selector, Kubernetes syntax (`app=web,tier in (a,b)`).
    pub label_selector: Option<String>,
    /// A field selector, Kubernetes syntax (`metadata.name=x`).
    pub field_selector: Option<String>,
    /// client-go's `WatchListPageSize`: a fixed page size for every list.
    /// `0` (the default) applies client-go's rules: 500 for lists at
    /// resourceVersion `"0"` or `""`, unpaged for lists at a specific
    /// resourceVersion (served from the watch cache), 500 always once a
    /// list at `"0"` came back paged.
    pub page_size: u32,
    /// Use streaming lists (`sendInitialEvents=true`) for the initial state
    /// (default: `true`, as in client-go since 1.35). When the server does
    /// not support them, the reflector falls back to list + watch.
    pub use_watch_list: bool,
    /// How objects are built from the apiserver's bytes (field paths for
    /// field indexes; managedFields cutting).
    pub object_options: ObjectOptions,
    /// Timeouts of the reflector's requests and watches (client-go's
    /// defaults; see [`RequestTimeouts`]).
    pub timeouts: RequestTimeouts,
    /// Caps on the bytes the reflector reads from the network (see
    /// [`Limits`]).
    pub limits: Limits,
    /// The format to ask the apiserver for (default: [`WireFormat::Auto`]:
    /// protobuf for built-in types, with JSON as the fallback; JSON for
    /// custom resources and metadata-only reflectors).
    /// [`WireFormat::Json`] asks for JSON always. Either way each response
    /// is read in the format its `Content-Type` names.
    pub wire_format: WireFormat,
    /// Server-side sharding (KEP-5866; default: none): list and watch only
    /// the objects whose hashed field (`metadata.uid` or
    /// `metadata.namespace`) falls in the selector's ranges.
    ///
    /// The selector goes as the `shardSelector` parameter on every LIST
    /// page, streaming list and watch, and every list item and watch event
    /// is checked on the client with the same hash, so the store holds
    /// exactly the shard whether or not the apiserver filters (its feature
    /// gate `ShardedListAndWatch` is alpha in Kubernetes 1.36+; without it
    /// the apiserver ignores the parameter and serves everything).
    /// [`Reflector::shard_filter_mode`](crate::Reflector::shard_filter_mode)
    /// says which side filters; the mode is logged (INFO) when first known
    /// and when it changes. A selector the apiserver rejects fails each
    /// attempt with
    /// [`ReflectorError::ShardSelectorRejected`](crate::ReflectorError::ShardSelectorRejected)
    /// (retried with backoff).
    ///
    /// The selector is fixed for the reflector's life: to move to another
    /// shard, stop the reflector and build a new one over a new store.
    pub shard_selector: Option<ShardSelector>,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            label_selector: None,
            field_selector: None,
            page_size: 0,
            use_watch_list: true,
            object_options: ObjectOptions::default(),
            timeouts: RequestTimeouts::default(),
            limits: Limits::default(),
            wire_format: WireFormat::Auto,
            shard_selector: None,
        }
    }
}
