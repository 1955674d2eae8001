//! The watch configuration: what a reflector lists and watches, and how.

use std::time::Duration;

use kcache_core::{ObjectOptions, ShardSelector};

use crate::framing::DEFAULT_MAX_FRAME;
use crate::limits::{DEFAULT_MAX_LIST_BYTES, RequestTimeouts};
use crate::wire_format::WireFormat;

/// client-go's default minimum watch timeout: watches ask for a server-side
/// timeout in `[min, 2 * min)`.
pub const DEFAULT_MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// How a reflector lists and watches: namespace, selectors, page size,
/// streaming lists, object options, watch timeouts, deadlines, size caps,
/// wire format, shard selector. Every field has client-go's default.
///
/// The one watch configuration of kcache, as kube-runtime's
/// `watcher::Config`: plain data, built once (struct update syntax over
/// [`ListOptions::default`]) and handed down whole, to
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
    /// Minimum server-side watch timeout; each watch asks for a random
    /// timeout in `[min, 2 * min)`. client-go honours values above 5
    /// minutes only; so does kcache (default: 5 minutes,
    /// [`DEFAULT_MIN_WATCH_TIMEOUT`]).
    pub min_watch_timeout: Duration,
    /// Abandon a watch on which no byte has arrived for this long, and open
    /// a new one from the last resourceVersion (a stalled connection: no
    /// data, no FIN). `None` (the default): the watch's requested
    /// server-side timeout plus
    /// [`WATCH_IDLE_MARGIN`](crate::WATCH_IDLE_MARGIN), which a healthy
    /// server never exceeds. With bookmarks flowing (about one a minute
    /// from the apiserver's watch cache) a shorter limit, e.g. 2-3
    /// minutes, detects stalls sooner.
    pub watch_idle_timeout: Option<Duration>,
    /// client-go's `MaxInternalErrorRetryDuration`: for how long a watch
    /// ending with an `InternalError` is re-opened without a relist
    /// (default: zero, i.e. relist at once).
    pub max_internal_error_retry_duration: Duration,
    /// Deadlines on response headers and LIST page bodies (default:
    /// [`RequestTimeouts::default`]: 2 minutes for headers, 1 minute
    /// without a byte of a list body, 10 minutes per list page). A request
    /// that misses one fails with
    /// [`ReflectorError::Timeout`](crate::ReflectorError::Timeout) and the
    /// reflector relists after a backoff step.
    pub request_timeouts: RequestTimeouts,
    /// Largest accepted watch event, in bytes (default: 128 MiB,
    /// [`DEFAULT_MAX_FRAME`]; 0 counts as 1). A larger event ends the watch
    /// with [`ReflectorError::EventTooLarge`](crate::ReflectorError::EventTooLarge)
    /// and the reflector relists.
    pub max_event_size: usize,
    /// Largest accepted LIST page body, in bytes (default: 2 GiB,
    /// [`DEFAULT_MAX_LIST_BYTES`]; 0 counts as 1). The apiserver answers a
    /// list at resourceVersion `"0"` (and a relist at an exact
    /// resourceVersion) from its watch cache as **one** body whatever the
    /// page size: 20,000 Pods made a 230 MB JSON body, so the default
    /// leaves room for a collection about 9 times that size. A larger body
    /// fails with
    /// [`ReflectorError::ListPageTooLarge`](crate::ReflectorError::ListPageTooLarge)
    /// as soon as the cap is passed (nothing more is read) and the
    /// reflector relists after a backoff.
    pub max_list_page_bytes: usize,
    /// Largest total size, in bytes, of the objects a streaming list
    /// buffers before its `initial-events-end` bookmark (default: 2 GiB,
    /// [`DEFAULT_MAX_LIST_BYTES`]; 0 counts as 1; the buffer is the whole
    /// collection, as a list at `"0"` is). Passing it fails the streaming
    /// list with
    /// [`ReflectorError::InitialEventsTooLarge`](crate::ReflectorError::InitialEventsTooLarge)
    /// at once (the buffer is dropped) and the reflector relists after a
    /// backoff.
    pub max_initial_events_bytes: usize,
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

impl Default for ListOptions {
    fn default() -> Self {
        Self {
            namespace: None,
            label_selector: None,
            field_selector: None,
            page_size: 0,
            use_watch_list: true,
            object_options: ObjectOptions::default(),
            min_watch_timeout: DEFAULT_MIN_WATCH_TIMEOUT,
            watch_idle_timeout: None,
            max_internal_error_retry_duration: Duration::ZERO,
            request_timeouts: RequestTimeouts::default(),
            max_event_size: DEFAULT_MAX_FRAME,
            max_list_page_bytes: DEFAULT_MAX_LIST_BYTES,
            max_initial_events_bytes: DEFAULT_MAX_LIST_BYTES,
            wire_format: WireFormat::Auto,
            shard_selector: None,
        }
    }
}
