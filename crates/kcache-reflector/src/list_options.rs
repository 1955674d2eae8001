//! The watch configuration: what a reflector lists and watches, and how.

use std::time::Duration;

use kcache_core::{ObjectOptions, ShardSelector};

use crate::limits::{DEFAULT_MAX_LIST_BYTES, RequestTimeouts};
use crate::wire_format::WireFormat;

/// How a reflector lists and watches: namespace, selectors, page size,
/// streaming lists, object options, deadlines, size caps, wire format,
/// shard selector.
///
/// The one watch configuration of kcache, as kube-runtime's
/// `watcher::Config`: built once and handed down whole, to
/// [`ReflectorBuilder::list_options`](crate::ReflectorBuilder::list_options)
/// or to an informer (kcache-informer's builder `list_options`, or a
/// factory's `tweak_list_options`), which passes it to its reflector as is.
///
/// ```
/// use kcache_reflector::ListOptions;
///
/// let options = ListOptions {
///     namespace: Some("default".into()),
///     label_selector: Some("app=web".into()),
///     ..ListOptions::default()
/// };
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct ListOptions {
    /// Only this namespace (default: all).
    pub namespace: Option<String>,
    /// Label selector, Kubernetes syntax.
    pub label_selector: Option<String>,
    /// Field selector, Kubernetes syntax.
    pub field_selector: Option<String>,
    /// List page size (0: client-go's default rules).
    pub page_size: u32,
    /// Use streaming lists (`sendInitialEvents`) where the server has them.
    pub use_watch_list: bool,
    /// How objects are built from the apiserver's bytes (field paths for
    /// field indexes; managedFields cutting).
    pub object_options: ObjectOptions,
    /// Abandon a watch that received no byte for this long (a stalled
    /// connection) and open a new one; `None`: the reflector's default, the
    /// watch's server-side timeout plus 30 s.
    pub watch_idle_timeout: Option<Duration>,
    /// Deadlines on the reflector's requests: response headers, LIST page
    /// bodies (default: [`RequestTimeouts::default`]).
    pub request_timeouts: RequestTimeouts,
    /// Largest LIST page body, in bytes (default: 2 GiB); see
    /// `ReflectorBuilder::max_list_page_bytes`.
    pub max_list_page_bytes: usize,
    /// Largest total of a streaming list's buffered initial events, in
    /// bytes (default: 2 GiB); see
    /// `ReflectorBuilder::max_initial_events_bytes`.
    pub max_initial_events_bytes: usize,
    /// The format asked of the apiserver (default: [`WireFormat::Auto`]:
    /// protobuf for built-in types, JSON otherwise); see
    /// `ReflectorBuilder::wire_format`.
    pub wire_format: WireFormat,
    /// Server-side sharding (default: none): cache only the objects whose
    /// `metadata.uid` or `metadata.namespace` hashes into the selector's
    /// ranges. Sent to the apiserver as `shardSelector` on every list and
    /// watch, and applied on the client too, so the cache holds exactly
    /// the shard whether or not the apiserver's `ShardedListAndWatch`
    /// feature gate is on (see [`ReflectorBuilder::shard_selector`](crate::ReflectorBuilder::shard_selector)
    /// and [`Reflector::shard_filter_mode`](crate::Reflector::shard_filter_mode)).
    pub shard_selector: Option<ShardSelector>,
}

impl Default for ListOptions {
    fn default() -> Self {
        Self {
            namespace: None,
            label_selector: None,
            field_selector: None,
            page_size: 0,
            use_watch_list: true,
            object_options: ObjectOptions::default(),
            watch_idle_timeout: None,
            request_timeouts: RequestTimeouts::default(),
            max_list_page_bytes: DEFAULT_MAX_LIST_BYTES,
            max_initial_events_bytes: DEFAULT_MAX_LIST_BYTES,
            wire_format: WireFormat::Auto,
            shard_selector: None,
        }
    }
}
