//! The reflector: list + watch into a store, with client-go's rules.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http_body_util::BodyExt;
use kcache_core::{CachedObject, ErrorChain, Format, ReflectorStore, ShardSelector};
use kube::api::{ListParams, WatchParams};
use kube::client::Body;
use kube::core::Request;
use kube::{Client, Resource};
use parking_lot::Mutex;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::backoff::{Backoff, BackoffConfig};
use crate::codec::{self, CodecId, Target, WireCodec};
use crate::decode::{EventDecoder, ListParser, WatchEvent};
use crate::error::{
    ApiError, BadEvent, BadEventKind, ErrorReason, MAX_LOGGED_ERROR, Operation, ReflectorError,
    TimeoutPhase, Truncated, is_probable_eof,
};
use crate::framing::{FrameError, Framer};
use crate::limits::{BodyError, BodyLimits, RequestTimeouts, read_body_with, read_error_body};
use crate::list_options::ListOptions;
use crate::metrics::{MetricsProvider, NoopMetricsProvider, ReflectorMetrics};
use crate::shard::{self, ShardFilterMode, Sharding};

/// Called with every error the reflector meets (see [`ReflectorError`]).
/// It must return quickly: it runs on the reflector's task.
pub type WatchErrorHandler = Arc<dyn Fn(&ReflectorError) + Send + Sync>;

/// client-go's default page size.
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// client-go's default minimum watch timeout: watches ask for a server-side
/// timeout in `[min, 2 * min)`.
pub const DEFAULT_MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// Added to a watch's requested server-side timeout to get the default
/// client-side idle limit (see [`ListOptions::watch_idle_timeout`]).
pub const WATCH_IDLE_MARGIN: Duration = Duration::from_secs(30);

/// A watch that ends faster than this without any event is an error.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// Server-side timeout of the watches opened by a resuming reflector until
/// the resume is confirmed (see [`ReflectorBuilder::resume_from`]). The
/// apiserver answers a watch from a resourceVersion it no longer has with
/// an error at once, and sends bookmarks only when the resource's
/// resourceVersion has moved; a clean end of the watch at this short
/// timeout (not before it) therefore confirms the resume within 2 s even
/// when nothing changed (long enough not to count as a too-short watch).
pub const RESUME_WATCH_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a slow streaming list is reported.
const WATCH_LIST_PROGRESS: Duration = Duration::from_secs(10);

/// Largest error body read.
const MAX_ERROR_BODY: usize = 1 << 20;

/// Largest part of a server-provided resourceVersion shown in a log line.
const MAX_LOGGED_RV: usize = 64;

/// Largest part of a request URI shown in a log line.
const MAX_LOGGED_URI: usize = 1024;

type DataStream = Pin<Box<dyn Stream<Item = Result<Bytes, kube::Error>> + Send>>;

/// Configures a [`Reflector`]; obtained from [`Reflector::builder`] or
/// [`Reflector::builder_with`]. Every setting has client-go's default.
pub struct ReflectorBuilder<K: Resource> {
    client: Client,
    store: Arc<dyn ReflectorStore<K>>,
    dyntype: K::DynamicType,
    options: ListOptions,
    resync_period: Option<Duration>,
    backoff: BackoffConfig,
    name: Option<String>,
    handler: Option<WatchErrorHandler>,
    metrics: Arc<dyn MetricsProvider>,
    resume_from: Option<String>,
}

impl<K: Resource> fmt::Debug for ReflectorBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReflectorBuilder")
            .field("namespace", &self.options.namespace)
            .field("label_selector", &self.options.label_selector)
            .field("field_selector", &self.options.field_selector)
            .field("page_size", &self.options.page_size)
            .field("use_watch_list", &self.options.use_watch_list)
            .field("resync_period", &self.resync_period)
            .field("wire_format", &self.options.wire_format)
            .field("shard_selector", &self.options.shard_selector)
            .finish_non_exhaustive()
    }
}

impl<K: Resource + 'static> ReflectorBuilder<K> {
    /// Every list and watch setting (namespace, selectors, page size,
    /// streaming lists, object options, watch timeouts, request deadlines,
    /// size caps, wire format, shard selector; default:
    /// [`ListOptions::default`]): the one configuration an informer passes
    /// down whole (as kube-runtime's `watcher::Config`).
    pub fn list_options(mut self, options: ListOptions) -> Self {
        self.options = options;
        self
    }

    /// Call the store's `resync` every `period` while watching (default: never).
    /// A zero period disables it.
    pub fn resync_period(mut self, period: Duration) -> Self {
        self.resync_period = (!period.is_zero()).then_some(period);
        self
    }

    /// Backoff settings (default: [`BackoffConfig::default`]).
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.backoff = backoff;
        self
    }

    /// The reflector's name, used in logs and as the metrics label
    /// (default: the resource, e.g. `configmaps` or `widgets.example.com`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A hook called with every error (list and watch failures, skipped
    /// events, store errors). Default: none (errors are logged).
    pub fn watch_error_handler(
        mut self,
        handler: impl Fn(&ReflectorError) + Send + Sync + 'static,
    ) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// Where metrics go (default: [`NoopMetricsProvider`]).
    pub fn metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics = provider;
        self
    }

    /// Start from a known resourceVersion instead of listing (a warm
    /// restart): the store must already hold the state as of `rv`.
    ///
    /// The first cycle does no list: it watches from `rv` (with a server
    /// timeout of [`RESUME_WATCH_TIMEOUT`] until confirmed). The resume is
    /// confirmed, and [`Reflector::has_synced`] turns true, when that watch
    /// delivers a bookmark (every change up to the bookmark's
    /// resourceVersion has then been handed to the store) or ends cleanly
    /// at or after its timeout (the server accepted `rv` and sent what
    /// followed it). A watch that ends earlier (a reset or closed
    /// connection) or stalls confirms nothing: it is re-opened from the
    /// last resourceVersion after a backoff step.
    /// If the server no longer has `rv` (`410 Gone` / `Expired`), the
    /// reflector relists exactly as after any expired watch; the list's
    /// `replace` corrects the store, and the list confirms the sync. All
    /// other errors follow the normal rules. An empty `rv` is ignored.
    pub fn resume_from(mut self, rv: impl Into<String>) -> Self {
        let rv = rv.into();
        self.resume_from = (!rv.is_empty()).then_some(rv);
        self
    }

    /// Builds the reflector.
    pub fn build(self) -> Reflector<K> {
        let dt = &self.dyntype;
        let metadata_only = K::metadata_api();
        let url_path = K::url_path(dt, self.options.namespace.as_deref());
        let group = K::group(dt);
        let plural = K::plural(dt);
        let mut resource = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        let name = self.name.unwrap_or_else(|| resource.clone());
        if let Some(ns) = &self.options.namespace {
            resource.push_str(" in namespace ");
            resource.push_str(ns);
        }
        let (kind, api_version) = if metadata_only {
            (
                "PartialObjectMetadata".to_owned(),
                "meta.k8s.io/v1".to_owned(),
            )
        } else {
            (K::kind(dt).into_owned(), K::api_version(dt).into_owned())
        };
        let kind = (!kind.is_empty()).then_some(kind);
        let api_version = (!api_version.is_empty()).then_some(api_version);
        let codec = codec::preferred(
            self.options.wire_format,
            Target {
                api_version: api_version.as_deref(),
                kind: kind.as_deref(),
                metadata_only,
            },
        );
        Reflector {
            metrics: ReflectorMetrics::new(&*self.metrics, &name),
            client: self.client,
            store: self.store,
            url_path,
            metadata_only,
            resource,
            name,
            decoder: EventDecoder::new(
                self.options.object_options,
                kind.as_deref(),
                api_version.as_deref(),
            ),
            label_selector: self.options.label_selector,
            field_selector: self.options.field_selector,
            page_size: self.options.page_size,
            use_watch_list: self.options.use_watch_list,
            resync_period: self.resync_period,
            min_watch_timeout: self
                .options
                .min_watch_timeout
                .max(DEFAULT_MIN_WATCH_TIMEOUT),
            watch_idle_timeout: self.options.watch_idle_timeout,
            backoff: self.backoff,
            handler: self.handler,
            max_internal_error_retry_duration: self.options.max_internal_error_retry_duration,
            max_event_size: self.options.max_event_size.max(1),
            timeouts: self.options.request_timeouts,
            max_list_page_bytes: self.options.max_list_page_bytes.max(1),
            max_initial_events_bytes: self.options.max_initial_events_bytes.max(1),
            shared: Mutex::new(Shared {
                last_sync_rv: self.resume_from.clone().unwrap_or_default(),
                synced: false,
            }),
            synced_notify: tokio::sync::Notify::new(),
            resume_from: self.resume_from,
            sharding: self.options.shard_selector.map(Sharding::new),
            shard_dropped: AtomicU64::new(0),
            fallback_logged: AtomicBool::new(false),
            running: AtomicBool::new(false),
            codec,
            asks_json: AtomicBool::new(codec.format() == Format::Json),
        }
    }
}

#[derive(Default)]
struct Shared {
    last_sync_rv: String,
    synced: bool,
}

/// Lists and watches one resource type into a [`ReflectorStore`], following
/// client-go's `Reflector` (see the crate docs for the rules).
///
/// Build one with [`Reflector::builder`], then drive it with
/// [`run`](Self::run) (until a [`CancellationToken`] is cancelled) or
/// [`run_until`](Self::run_until). All work happens inside that future: no
/// task is spawned, and dropping or cancelling it leaves nothing behind.
/// Run one `run` at a time per reflector.
pub struct Reflector<K> {
    client: Client,
    store: Arc<dyn ReflectorStore<K>>,
    url_path: String,
    metadata_only: bool,
    resource: String,
    name: String,
    decoder: EventDecoder<K>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    page_size: u32,
    use_watch_list: bool,
    resync_period: Option<Duration>,
    min_watch_timeout: Duration,
    watch_idle_timeout: Option<Duration>,
    backoff: BackoffConfig,
    handler: Option<WatchErrorHandler>,
    metrics: ReflectorMetrics,
    max_internal_error_retry_duration: Duration,
    max_event_size: usize,
    timeouts: RequestTimeouts,
    max_list_page_bytes: usize,
    max_initial_events_bytes: usize,
    shared: Mutex<Shared>,
    synced_notify: tokio::sync::Notify,
    resume_from: Option<String>,
    /// The shard selector, and who filters.
    sharding: Option<Sharding>,
    /// Objects (list items, watch events) dropped as outside the shard.
    shard_dropped: AtomicU64,
    fallback_logged: AtomicBool,
    running: AtomicBool,
    /// The format lists and watches prefer (protobuf for a built-in type
    /// and CBOR for a custom resource with [`WireFormat::Auto`]).
    codec: CodecId,
    /// They ask for JSON instead: the preferred format is JSON, or the
    /// server refused it (406) or answered JSON.
    asks_json: AtomicBool,
}

impl<K> fmt::Debug for Reflector<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reflector")
            .field("name", &self.name)
            .field("resource", &self.resource)
            .field("url_path", &self.url_path)
            .finish_non_exhaustive()
    }
}

/// State kept across list-and-watch attempts of one `run`.
#[derive(Debug, Default)]
struct RunState {
    /// client-go's `isLastSyncResourceVersionUnavailable`.
    rv_unavailable: bool,
    /// client-go's `paginatedResult`.
    paginated_result: bool,
    /// The server rejected streaming lists.
    watch_list_unsupported: bool,
    /// The next cycle watches from the resume resourceVersion, no list.
    resume: bool,
    /// The last synced resourceVersion when a watch last ended in
    /// `410 Gone` (see [`Reflector::after_watch`]).
    expired_at: Option<String>,
}

/// An open watch response and its framing state.
struct OpenWatch {
    body: DataStream,
    /// No byte for this long: the watch is abandoned as stalled.
    idle_limit: Duration,
    /// The response's format, as its `Content-Type` says, and its framer.
    codec: CodecId,
    framer: Box<dyn Framer>,
    /// When the request was sent.
    start: Instant,
    /// The server-side timeout the watch asked for.
    timeout: Duration,
    events: usize,
    op: Operation,
    /// Abandoned for lack of bytes (not a clean end).
    stalled: bool,
    /// Whether ADDED events move the RV: not for a watch from "" or "0",
    /// whose synthetic ADDED events are not ordered, until another event
    /// type arrives (client-go's `propagateRVFromStart`).
    propagate_rv: bool,
}

/// Initial events of a streaming list, by key, in arrival order. Each
/// entry records whether its object was reused from the store.
struct InitialBuffer<K> {
    index: HashMap<String, usize>,
    items: Vec<Option<(CachedObject<K>, bool)>>,
    resource_version: String,
    /// The stored bytes of the objects held (capped).
    bytes: usize,
    /// Events dropped as outside the shard.
    shard_dropped: usize,
}

impl<K> InitialBuffer<K> {
    fn new() -> Self {
        InitialBuffer {
            index: HashMap::new(),
            items: Vec::new(),
            resource_version: String::new(),
            bytes: 0,
            shard_dropped: 0,
        }
    }
    fn upsert(&mut self, (obj, reused): (CachedObject<K>, bool)) {
        self.bytes = self.bytes.saturating_add(obj.bytes().len());
        match self.index.get(obj.key()) {
            Some(&i) => {
                if let Some((old, _)) = self.items[i].replace((obj, reused)) {
                    self.bytes -= old.bytes().len();
                }
            }
            None => {
                self.index.insert(obj.key().to_owned(), self.items.len());
                self.items.push(Some((obj, reused)));
            }
        }
    }
    fn delete(&mut self, obj: &CachedObject<K>) {
        if let Some(i) = self.index.remove(obj.key())
            && let Some((old, _)) = self.items[i].take()
        {
            self.bytes -= old.bytes().len();
        }
    }
    /// The objects, and how many of them were reused from the store.
    fn into_items(self) -> (Vec<CachedObject<K>>, usize) {
        drop(self.index);
        let mut reused = 0;
        let items = self
            .items
            .into_iter()
            .flatten()
            .map(|(o, r)| {
                reused += usize::from(r);
                o
            })
            .collect();
        (items, reused)
    }
}

/// The objects of a (paged) list, ready for `ReflectorStore::replace`.
struct Listed<K> {
    items: Vec<CachedObject<K>>,
    resource_version: String,
    /// How many items are objects reused from the store.
    reused: usize,
    /// Every page echoed the reflector's shard selector
    /// (`metadata.shardInfo`): the apiserver filtered.
    shard_echoed: bool,
    /// Items dropped as outside the shard.
    shard_dropped: usize,
}

/// The items of a list page read so far.
struct PageItems<K> {
    items: Vec<CachedObject<K>>,
    /// How many items are objects reused from the store.
    reused: usize,
    /// Items dropped as outside the shard.
    dropped: usize,
}

impl<K> PageItems<K> {
    /// The page, with what its envelope said.
    fn into_page(
        self,
        resource_version: String,
        shard_echoed: bool,
        continue_token: Option<String>,
    ) -> Page<K> {
        Page {
            listed: Listed {
                items: self.items,
                resource_version,
                reused: self.reused,
                shard_echoed,
                shard_dropped: self.dropped,
            },
            continue_token,
        }
    }
}

/// One list page.
struct Page<K> {
    listed: Listed<K>,
    continue_token: Option<String>,
}

/// Whether `held` (an object the store holds) is the same as `fresh` (just
/// decoded): same key, and the same non-empty `metadata.uid` and
/// `metadata.resourceVersion`. In Kubernetes an object's content changes
/// only with its resourceVersion, and a deleted and re-created object gets
/// a new uid.
fn same_object<K>(held: &CachedObject<K>, fresh: &CachedObject<K>) -> bool {
    let (Some(uid), Some(rv)) = (fresh.uid(), fresh.resource_version()) else {
        return false;
    };
    !uid.is_empty()
        && !rv.is_empty()
        && held.uid() == Some(uid)
        && held.resource_version() == Some(rv)
        && held.key() == fresh.key()
}

enum Mode<'a, K> {
    Normal,
    Initial(&'a mut InitialBuffer<K>),
}

/// client-go's `retryWithDeadline` for watch InternalErrors.
struct InternalErrorRetry {
    max: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl InternalErrorRetry {
    fn after_error(&mut self) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|l| now.saturating_duration_since(l) > Duration::from_secs(60))
        {
            self.first = None;
        }
        self.first.get_or_insert(now);
        self.last = Some(now);
    }
    fn should_retry(&self) -> bool {
        !self.max.is_zero()
            && self
                .first
                .is_some_and(|f| Instant::now().saturating_duration_since(f) <= self.max)
    }
}

async fn tick(resync: Option<&mut Interval>) {
    match resync {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

impl<K: Resource + 'static> Reflector<K> {
    /// A builder for a resource whose dynamic type is `Default` (every
    /// k8s-openapi type, derived custom resources, `PartialObjectMeta<K>`
    /// of those).
    pub fn builder(client: Client, store: Arc<dyn ReflectorStore<K>>) -> ReflectorBuilder<K>
    where
        K::DynamicType: Default,
    {
        Self::builder_with(client, store, K::DynamicType::default())
    }

    /// A builder with an explicit dynamic type, e.g. an `ApiResource` for
    /// `DynamicObject`.
    pub fn builder_with(
        client: Client,
        store: Arc<dyn ReflectorStore<K>>,
        dyntype: K::DynamicType,
    ) -> ReflectorBuilder<K> {
        ReflectorBuilder {
            client,
            store,
            dyntype,
            options: ListOptions::default(),
            resync_period: None,
            backoff: BackoffConfig::default(),
            name: None,
            handler: None,
            metrics: Arc::new(NoopMetricsProvider),
            resume_from: None,
        }
    }
}

impl<K: 'static> Reflector<K> {
    /// The resourceVersion of the last list or watch event handed to the
    /// store (`""` before the first sync).
    pub fn last_sync_resource_version(&self) -> String {
        self.shared.lock().last_sync_rv.clone()
    }

    /// Whether a first complete list reached the store, or, for a reflector
    /// built with [`resume_from`](ReflectorBuilder::resume_from), whether
    /// the resume was confirmed (a bookmark, or a clean end of the resumed
    /// watch at its timeout) or a list replaced the store.
    pub fn has_synced(&self) -> bool {
        self.shared.lock().synced
    }

    /// Waits until [`has_synced`](Self::has_synced) is true.
    pub async fn wait_synced(&self) {
        loop {
            let notified = self.synced_notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.has_synced() {
                return;
            }
            notified.await;
        }
    }

    /// The reflector's name (logs, metrics label).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The format the reflector asks for: with
    /// [`WireFormat::Auto`](crate::WireFormat::Auto) protobuf for a
    /// built-in type and CBOR for a custom resource, until a server
    /// refused it with `406 Not Acceptable` or answered JSON (then JSON
    /// for the rest of its life).
    pub fn asks_for(&self) -> Format {
        self.asking().format()
    }

    /// The codec whose format the requests prefer.
    fn asking(&self) -> &'static dyn WireCodec<K> {
        if self.asks_json.load(Ordering::Relaxed) {
            CodecId::JSON.get()
        } else {
            self.codec.get()
        }
    }

    /// Adds the `Accept` of the preferred format to a list (`watch =
    /// false`) or watch request (nothing for JSON: kube's own header).
    fn set_accept(&self, req: &mut http::Request<Vec<u8>>, watch: bool) {
        let codec = self.asking();
        if codec.format() != Format::Json {
            req.headers_mut().insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static(codec.accept(watch)),
            );
        }
    }

    /// The codec of a response; a JSON answer to a request that preferred
    /// another format makes the reflector ask for JSON from now on.
    fn answered(&self, headers: &http::HeaderMap) -> CodecId {
        let answer = codec::of_response(headers);
        if answer.format() == Format::Json && !self.asks_json.swap(true, Ordering::Relaxed) {
            codec::log_json_answer(self.codec.format(), &self.resource);
        }
        answer
    }

    /// The shard selector (see [`ListOptions::shard_selector`]).
    pub fn shard_selector(&self) -> Option<&ShardSelector> {
        self.sharding.as_ref().map(|s| &s.selector)
    }

    /// Who cuts the collection down to the shard: `None` without a shard
    /// selector or before the first list; then [`ShardFilterMode::Server`]
    /// (the apiserver filtered) or [`ShardFilterMode::Client`] (the
    /// apiserver served everything; the reflector keeps its shard).
    pub fn shard_filter_mode(&self) -> Option<ShardFilterMode> {
        self.sharding.as_ref().and_then(Sharding::mode)
    }

    /// How many list items and watch events the reflector dropped as
    /// outside its shard (0 while the apiserver filters).
    pub fn shard_dropped(&self) -> u64 {
        self.shard_dropped.load(Ordering::Relaxed)
    }

    /// Runs until `cancel` is cancelled. Returns promptly after
    /// cancellation; any open request is dropped.
    pub async fn run(&self, cancel: CancellationToken) {
        self.run_until(cancel.cancelled_owned()).await
    }

    /// Runs until `stop` completes.
    ///
    /// A second concurrent call on the same reflector returns at once (with
    /// an error log): one reflector drives one watch.
    pub async fn run_until<F: Future>(&self, stop: F) {
        if self.running.swap(true, Ordering::SeqCst) {
            tracing::error!(name = %self.name, "this reflector is already running; ignoring the second run");
            return;
        }
        struct Running<'a>(&'a AtomicBool);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::SeqCst);
            }
        }
        let _running = Running(&self.running);
        let span = info_span!("reflector", name = %self.name, resource = %self.resource);
        let run = async {
            let mut st = RunState {
                resume: self.resume_from.is_some() && !self.has_synced(),
                ..RunState::default()
            };
            let mut backoff = Backoff::new(self.backoff.clone());
            loop {
                if let Err(e) = self.list_and_watch(&mut st, &mut backoff).await {
                    self.report(&e);
                }
                // client-go's BackoffUntil(sliding): one backoff step after
                // every list-and-watch return.
                tokio::time::sleep(backoff.next_delay()).await;
            }
        };
        tokio::select! {
            biased;
            _ = stop => {}
            _ = run.instrument(span) => {}
        }
        debug!(name = %self.name, "reflector stopped");
    }

    fn report(&self, e: &ReflectorError) {
        self.metrics.error(e.reason());
        // server-provided text is in there: bounded
        let shown = Truncated(&ErrorChain(e), MAX_LOGGED_ERROR);
        match e.reason() {
            ErrorReason::Expired => debug!(error = %shown, "watch closed"),
            ErrorReason::BadEvent => warn!(error = %shown, "skipped an event"),
            _ => warn!(error = %shown, "reflector error"),
        }
        if let Some(h) = &self.handler {
            h(e);
        }
    }

    fn set_last_sync_rv(&self, rv: &str) {
        {
            let mut g = self.shared.lock();
            g.last_sync_rv.clear();
            g.last_sync_rv.push_str(rv);
        }
        self.metrics.synced_now();
    }

    /// Marks the store as synced (first time only: wakes `wait_synced`).
    fn mark_synced(&self) -> bool {
        let was = {
            let mut g = self.shared.lock();
            std::mem::replace(&mut g.synced, true)
        };
        if !was {
            self.synced_notify.notify_waiters();
        }
        was
    }

    fn relist_resource_version(&self, st: &RunState) -> String {
        if st.rv_unavailable {
            // consistent read from etcd
            return String::new();
        }
        let rv = self.last_sync_resource_version();
        if rv.is_empty() {
            // never synced: the watch cache may answer
            "0".to_owned()
        } else {
            rv
        }
    }

    fn watch_timeout_secs(&self) -> u32 {
        let min = self.min_watch_timeout.as_secs_f64();
        let secs = min * (rand::random::<f64>() + 1.0);
        secs.min(u32::MAX as f64) as u32
    }

    async fn sleep_backoff(&self, backoff: &mut Backoff, resync: Option<&mut Interval>) {
        let sleep = tokio::time::sleep(backoff.next_delay());
        tokio::pin!(sleep);
        let mut resync = resync;
        loop {
            tokio::select! {
                _ = &mut sleep => return,
                _ = tick(resync.as_deref_mut()) => self.resync(),
            }
        }
    }

    fn resync(&self) {
        debug!("resync");
        if let Err(e) = self.store.resync() {
            self.report(&ReflectorError::Store {
                op: Operation::Resync,
                resource: self.resource.clone(),
                source: e,
            });
        }
    }

    /// Appends the shard selector, if any, to a request's query.
    fn add_shard_selector(&self, req: &mut http::Request<Vec<u8>>) -> Result<(), ReflectorError> {
        let Some(sh) = &self.sharding else {
            return Ok(());
        };
        let uri = sh
            .append_to(req.uri())
            .map_err(|e| ReflectorError::Request {
                resource: self.resource.clone(),
                source: kube::core::request::Error::Validation(format!(
                    "the shard selector does not fit in a request URI ({e}): use fewer ranges"
                )),
            })?;
        *req.uri_mut() = uri;
        Ok(())
    }

    /// Whether `obj` is in the reflector's shard (always, without a shard
    /// selector): the apiserver's filter, applied on the client. Objects
    /// outside are counted.
    fn in_shard(&self, obj: &CachedObject<K>) -> bool {
        match &self.sharding {
            Some(sh) if !sh.selector.matches(obj.meta()) => {
                self.shard_dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
            _ => true,
        }
    }

    /// Whether a list page's `metadata.shardInfo.selector` is the
    /// reflector's selector.
    fn is_shard_echo(&self, echo: Option<&str>) -> bool {
        match (&self.sharding, echo) {
            (Some(sh), Some(echo)) => sh.is_echo(echo),
            _ => false,
        }
    }

    /// Decides who filtered a list (see the `shard` module): the echo
    /// says the apiserver did; its absence, where a list carries it
    /// (`echo_expected`), or any object outside the shard says it did not.
    fn settle_shard_mode(&self, echoed: bool, echo_expected: bool, outside: usize) {
        let Some(sh) = &self.sharding else { return };
        if echoed && outside > 0 {
            warn!(
                outside,
                selector = %Truncated(sh.rendered(), MAX_LOGGED_URI),
                "the apiserver echoed the shard selector but sent objects outside it (dropped): kcache's hash disagrees with this apiserver's; please report it with the apiserver's version"
            );
        }
        let mode = if echoed {
            ShardFilterMode::Server
        } else if echo_expected || outside > 0 {
            ShardFilterMode::Client
        } else {
            ShardFilterMode::Server
        };
        self.set_shard_mode(sh, mode);
    }

    /// Sets the shard filter mode; logs it when it changes.
    fn set_shard_mode(&self, sh: &Sharding, mode: ShardFilterMode) {
        if sh.set_mode(mode) == Some(mode) {
            return;
        }
        let selector = Truncated(sh.rendered(), MAX_LOGGED_URI);
        let share = sh.selector.fraction();
        match mode {
            ShardFilterMode::Server => info!(
                shard_filter = %mode,
                %selector,
                share,
                "server-side sharding: the apiserver sends only this shard"
            ),
            _ => info!(
                shard_filter = %mode,
                %selector,
                share,
                "client-side sharding: the apiserver ignores the shard selector and sends every object; the reflector keeps its shard (enable the apiserver's ShardedListAndWatch feature gate, Kubernetes 1.36+, to cut each replica's traffic)"
            ),
        }
    }

    /// The object the store already holds for `obj`'s key when it is the
    /// same object (see [`same_object`]), else `obj`; and whether it was
    /// reused. A relist thus keeps one copy of each unchanged object: the
    /// fresh copy is dropped as soon as its page (or event) is processed,
    /// instead of living next to the old one until `replace`.
    fn reuse(&self, obj: CachedObject<K>) -> (CachedObject<K>, bool) {
        if obj.uid().is_none_or(str::is_empty) {
            return (obj, false);
        }
        match self.store.cached(obj.key()) {
            Some(held) if same_object(&held, &obj) => (held, true),
            _ => (obj, false),
        }
    }

    fn replace(
        &self,
        items: Vec<CachedObject<K>>,
        rv: String,
        op: Operation,
        reused: usize,
    ) -> Result<(), ReflectorError> {
        let count = items.len();
        self.store
            .replace(items, rv.clone())
            .map_err(|source| ReflectorError::Store {
                op,
                resource: self.resource.clone(),
                source,
            })?;
        self.set_last_sync_rv(&rv);
        self.metrics.lists.inc();
        // after a resume, every list is a relist (the store was populated)
        if self.mark_synced() || self.resume_from.is_some() {
            self.metrics.relists.inc();
        }
        info!(%op, items = count, relist_reused = reused, resource_version = %Truncated(rv.as_str(), MAX_LOGGED_RV), "caches populated");
        Ok(())
    }

    async fn list_and_watch(
        &self,
        st: &mut RunState,
        backoff: &mut Backoff,
    ) -> Result<(), ReflectorError> {
        if std::mem::take(&mut st.resume) {
            info!(
                resource_version = %self.last_sync_resource_version(),
                "resuming: watching from a known resourceVersion without listing"
            );
            let res = self.watch_loop(backoff, None).await;
            self.after_watch(st, &res);
            return res;
        }
        let mut open = None;
        if self.use_watch_list && !st.watch_list_unsupported {
            match self.watch_list(st, backoff).await {
                Ok(w) => open = Some(w),
                Err(e @ ReflectorError::ShardSelectorRejected { .. }) => {
                    // a list would be rejected the same way
                    return Err(e);
                }
                Err(e) => {
                    if e.api_error().is_some_and(ApiError::is_invalid) {
                        st.watch_list_unsupported = true;
                        if !self.fallback_logged.swap(true, Ordering::Relaxed) {
                            warn!(error = %Truncated(&ErrorChain(&e), MAX_LOGGED_ERROR), "the apiserver does not support streaming lists (sendInitialEvents); falling back to list + watch");
                        }
                    } else if matches!(e, ReflectorError::InitialEventsTooLarge { .. }) {
                        // a paged list would hold the same collection:
                        // relist after a backoff instead of falling back
                        return Err(e);
                    } else {
                        self.metrics.error(e.reason());
                        warn!(error = %Truncated(&ErrorChain(&e), MAX_LOGGED_ERROR), "the streaming list failed; falling back to list + watch for this attempt");
                    }
                }
            }
        }
        if open.is_none() {
            self.list(st).await?;
        }
        let res = self.watch_loop(backoff, open).await;
        self.after_watch(st, &res);
        res
    }

    /// After the watch ended in error. A `410 Gone` / `Expired` leaves the
    /// relist at the last synced resourceVersion (client-go's
    /// `DefaultWatchErrorHandler`: a LIST at that version returns data at
    /// least as fresh). But a *paged* list at a given version is served
    /// from etcd at exactly that version (limit set, no
    /// resourceVersionMatch: "Exact"): it answers the same old state, and
    /// the watch from it expires again. After an apiserver restart (its
    /// watch cache starts at the current revision) client-go loops so until
    /// etcd compacts that version, minutes later. Here, when a watch
    /// expires a second time at the same synced version and the relist
    /// would be paged, the relist is from the newest state (`""`).
    fn after_watch(&self, st: &mut RunState, res: &Result<(), ReflectorError>) {
        let Err(e) = res else {
            return;
        };
        if !e.is_expired() {
            return;
        }
        let synced = self.last_sync_resource_version();
        let again = st.expired_at.as_deref() == Some(synced.as_str());
        if again && (self.page_size > 0 || st.paginated_result) {
            info!(
                resource_version = %Truncated(synced.as_str(), MAX_LOGGED_RV),
                "the watch expired twice at the same resourceVersion, which a paged list cannot move past; listing from the newest state"
            );
            st.rv_unavailable = true;
            st.expired_at = None;
        } else {
            st.expired_at = Some(synced);
        }
    }

    /// client-go's `watchList`: a watch with `sendInitialEvents=true`, its
    /// initial events buffered until the `initial-events-end` bookmark.
    async fn watch_list(
        &self,
        st: &mut RunState,
        backoff: &mut Backoff,
    ) -> Result<OpenWatch, ReflectorError> {
        loop {
            let rv = if st.rv_unavailable {
                String::new()
            } else {
                self.last_sync_resource_version()
            };
            let mut w = match self
                .open_watch(Operation::WatchList, &rv, self.watch_timeout_secs(), true)
                .await
            {
                Ok(w) => w,
                Err(e) => {
                    self.watch_list_retry(st, backoff, &rv, e).await?;
                    continue;
                }
            };
            let mut buffer = InitialBuffer::new();
            let res = self
                .handle_watch(&mut w, Mode::Initial(&mut buffer), None)
                .await;
            if let Ok(Some(rv)) = res {
                st.rv_unavailable = false;
                // from here on the stream carries ordered events
                w.propagate_rv = true;
                // a streaming list has no list envelope to echo the selector
                self.settle_shard_mode(false, false, buffer.shard_dropped);
                let (items, reused) = buffer.into_items();
                self.replace(items, rv, Operation::WatchList, reused)?;
                return Ok(w);
            }
            // nothing held while waiting
            drop((w, buffer));
            match res {
                Err(e) => self.watch_list_retry(st, backoff, &rv, e).await?,
                _ => {
                    debug!(
                        "the streaming list ended before its initial-events-end bookmark; retrying after a backoff"
                    );
                    self.sleep_backoff(backoff, None).await;
                }
            }
        }
    }

    /// What to do after a streaming list failed (client-go's
    /// `isErrorRetriableWithSideEffectsFn`), with a backoff on every retry
    /// path: 429 or a refused connection retry after a backoff step;
    /// Expired or "too large resource version" retry at `""`, at once when
    /// the failed request had a resourceVersion (as client-go does), after
    /// a backoff step when it was already at `""` (a server that refuses
    /// even that is broken: no hot loop). Any other error is returned.
    async fn watch_list_retry(
        &self,
        st: &mut RunState,
        backoff: &mut Backoff,
        rv: &str,
        e: ReflectorError,
    ) -> Result<(), ReflectorError> {
        if e.is_watch_retriable() {
            self.report(&e);
            self.sleep_backoff(backoff, None).await;
        } else if e.is_expired() || e.is_too_large_resource_version() {
            self.report(&e);
            st.rv_unavailable = true;
            if rv.is_empty() {
                self.sleep_backoff(backoff, None).await;
            }
        } else {
            return Err(e);
        }
        Ok(())
    }

    /// client-go's `list`: a paged list, retried once at `""` when the
    /// resourceVersion is unavailable, then `store.replace`.
    async fn list(&self, st: &mut RunState) -> Result<(), ReflectorError> {
        let rv = self.relist_resource_version(st);
        let span = info_span!("list", resource_version = %rv);
        async {
            let mut result = self.paged_list(st, &rv).await;
            if let Err(e) = &result
                && (e.is_expired() || e.is_too_large_resource_version())
            {
                self.metrics.error(e.reason());
                info!(error = %Truncated(&ErrorChain(e), MAX_LOGGED_ERROR), "resourceVersion unavailable; listing again from the newest state");
                st.rv_unavailable = true;
                result = self.paged_list(st, "").await;
            }
            let (listed, paginated) = result?;
            if rv == "0" && paginated {
                st.paginated_result = true;
            }
            st.rv_unavailable = false;
            // a full list without the echo was not filtered; a
            // metadata-only list never carries it
            self.settle_shard_mode(
                listed.shard_echoed,
                !self.metadata_only,
                listed.shard_dropped,
            );
            self.replace(
                listed.items,
                listed.resource_version,
                Operation::List,
                listed.reused,
            )
        }
        .instrument(span)
        .await
    }

    /// The whole list and whether it came in several pages.
    async fn paged_list(
        &self,
        st: &RunState,
        rv: &str,
    ) -> Result<(Listed<K>, bool), ReflectorError> {
        let limit = if self.page_size > 0 {
            Some(self.page_size)
        } else if st.paginated_result || rv.is_empty() || rv == "0" {
            Some(DEFAULT_PAGE_SIZE)
        } else {
            // a list at a given RV is unpaged so the watch cache serves it
            None
        };
        let mut items = Vec::new();
        let mut reused = 0;
        let mut shard_echoed = true;
        let mut shard_dropped = 0;
        let mut cont: Option<String> = None;
        let mut paginated = false;
        loop {
            match self.list_page(rv, limit, cont.as_deref()).await {
                Err(e) if e.is_expired() && cont.is_some() => {
                    info!(error = %Truncated(&ErrorChain(&e), MAX_LOGGED_ERROR), "the continue token expired; doing one full list");
                    // the pages so far are dropped before the full list
                    drop(items);
                    let page = self.list_page(rv, None, None).await?;
                    return Ok((page.listed, paginated));
                }
                Err(e) => return Err(e),
                Ok(page) => {
                    let Listed {
                        items: page_items,
                        resource_version,
                        reused: page_reused,
                        shard_echoed: page_echoed,
                        shard_dropped: page_dropped,
                    } = page.listed;
                    reused += page_reused;
                    shard_echoed &= page_echoed;
                    shard_dropped += page_dropped;
                    if items.is_empty() {
                        items = page_items;
                    } else {
                        items.extend(page_items);
                    }
                    match page.continue_token {
                        None => {
                            let listed = Listed {
                                items,
                                resource_version,
                                reused,
                                shard_echoed,
                                shard_dropped,
                            };
                            return Ok((listed, paginated));
                        }
                        Some(c) => {
                            cont = Some(c);
                            paginated = true;
                        }
                    }
                }
            }
        }
    }

    async fn list_page(
        &self,
        rv: &str,
        limit: Option<u32>,
        cont: Option<&str>,
    ) -> Result<Page<K>, ReflectorError> {
        let mut lp = ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            continue_token: cont.map(str::to_owned),
            resource_version: (cont.is_none() && !rv.is_empty()).then(|| rv.to_owned()),
            ..Default::default()
        };
        // kube drops resourceVersion=0 when a limit is set; client-go sends
        // both, so the limit is appended by hand in that case.
        let manual_limit = if lp.resource_version.as_deref() == Some("0") {
            limit
        } else {
            lp.limit = limit;
            None
        };
        let req = Request::new(self.url_path.as_str());
        let built = if self.metadata_only {
            req.list_metadata(&lp)
        } else {
            req.list(&lp)
        };
        let mut req = built.map_err(|source| ReflectorError::Request {
            resource: self.resource.clone(),
            source,
        })?;
        if let Some(l) = manual_limit
            && let Ok(uri) = format!("{}&limit={l}", req.uri()).parse()
        {
            *req.uri_mut() = uri;
        }
        self.add_shard_selector(&mut req)?;
        self.set_accept(&mut req, false);
        // the URI carries a server-sent resourceVersion or continue token
        debug!(uri = %Truncated(req.uri(), MAX_LOGGED_URI), "list page");
        let resp = self
            .send(Operation::List, req)
            .await
            .map_err(|e| shard::classify(self.sharding.as_ref(), e))?;
        let content_length = resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let limits = BodyLimits {
            idle: self.timeouts.list_body_idle,
            total: self.timeouts.list_body,
            max_bytes: self.max_list_page_bytes,
        };
        let parser = self.answered(resp.headers()).get::<K>().list_parser();
        let stream = resp.into_body().into_data_stream();
        self.read_list_page(content_length, stream, limits, parser)
            .await
    }

    /// Reads a list page body within `limits` with `parser` (the
    /// response format's), as it arrives: each item is cut, built and (when
    /// unchanged) swapped for the store's copy as soon as its last byte is
    /// in (see [`keep`](Self::keep)), so the body is never held whole; the
    /// envelope (everything but the items) is read at the end. A malformed
    /// body anywhere fails the page as [`ReflectorError::InvalidList`],
    /// any other body failure as a list body error.
    async fn read_list_page(
        &self,
        content_length: Option<u64>,
        stream: impl Stream<Item = Result<Bytes, kube::Error>> + Unpin,
        limits: BodyLimits,
        mut parser: Box<dyn ListParser<K>>,
    ) -> Result<Page<K>, ReflectorError> {
        let invalid = |e| ReflectorError::InvalidList {
            resource: self.resource.clone(),
            source: e,
        };
        let mut acc = PageItems {
            items: Vec::new(),
            reused: 0,
            dropped: 0,
        };
        let mut malformed = None;
        let read = read_body_with(content_length, stream, limits, |chunk| {
            match parser.feed_chunk(chunk, &self.decoder, &mut |obj| self.keep(&mut acc, obj)) {
                Ok(()) => true,
                Err(e) => {
                    malformed = Some(e);
                    false
                }
            }
        })
        .await;
        match read {
            Ok(()) => {}
            Err(BodyError::Stopped) => {
                return Err(match malformed {
                    Some(e) => invalid(e),
                    None => self.list_body_error(BodyError::Stopped),
                });
            }
            Err(e) => return Err(self.list_body_error(e)),
        }
        let end = parser.finish_page(&self.decoder).map_err(invalid)?;
        // items the envelope held itself (not a literal "items" array)
        for obj in end.items {
            self.keep(&mut acc, obj);
        }
        self.report_skipped(end.skipped);
        Ok(acc.into_page(
            end.resource_version,
            self.is_shard_echo(end.shard_selector.as_deref()),
            end.continue_token,
        ))
    }

    /// Adds a list item to the page, unless it is outside the shard; an
    /// unchanged object is swapped for the store's copy.
    fn keep(&self, acc: &mut PageItems<K>, obj: CachedObject<K>) {
        if !self.in_shard(&obj) {
            acc.dropped += 1;
            return;
        }
        let (obj, r) = self.reuse(obj);
        acc.reused += usize::from(r);
        acc.items.push(obj);
    }

    /// Reports the list items that were skipped.
    fn report_skipped(&self, skipped: Vec<BadEvent>) {
        for bad in skipped {
            self.report(&ReflectorError::BadEvent {
                op: Operation::List,
                resource: self.resource.clone(),
                source: bad,
            });
        }
    }

    /// Sends a request within the response-headers deadline. A request
    /// that asked for protobuf and is refused with `406 Not Acceptable` (a
    /// proxy that dropped the JSON fallback from `Accept`, or a server
    /// without protobuf for the type) is sent again at once without it,
    /// and the reflector asks for JSON from then on (one WARN).
    async fn send(
        &self,
        op: Operation,
        req: http::Request<Vec<u8>>,
    ) -> Result<http::Response<Body>, ReflectorError> {
        let preferred = self.codec.get::<K>();
        let asked_binary = preferred.format() != Format::Json
            && req
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a == preferred.accept(false) || a == preferred.accept(true));
        if !asked_binary {
            return self.send_once(op, req).await;
        }
        let mut again = http::Request::new(req.body().clone());
        *again.method_mut() = req.method().clone();
        *again.uri_mut() = req.uri().clone();
        *again.headers_mut() = req.headers().clone();
        again.headers_mut().remove(http::header::ACCEPT);
        match self.send_once(op, req).await {
            Err(ReflectorError::Api { error, .. }) if error.code == 406 => {
                if !self.asks_json.swap(true, Ordering::Relaxed) {
                    warn!(
                        error = %Truncated(&error, MAX_LOGGED_ERROR),
                        format = ?preferred.format(),
                        "the apiserver (or a proxy in front of it) refused {:?} with 406 Not Acceptable; this reflector asks for JSON from now on (set WireFormat::Json to skip the attempt, or let the proxy pass `Accept: {}`)",
                        preferred.format(),
                        preferred.accept(false),
                    );
                }
                self.send_once(op, again).await
            }
            other => other,
        }
    }

    async fn send_once(
        &self,
        op: Operation,
        req: http::Request<Vec<u8>>,
    ) -> Result<http::Response<Body>, ReflectorError> {
        let after = self.timeouts.response_headers;
        let resp = tokio::time::timeout(after, self.client.send(req.map(Body::from)))
            .await
            .map_err(|_| ReflectorError::Timeout {
                op,
                resource: self.resource.clone(),
                phase: TimeoutPhase::ResponseHeaders,
                after,
            })?
            .map_err(|source| ReflectorError::Transport {
                op,
                resource: self.resource.clone(),
                source,
            })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let bytes = read_error_body(
            resp.into_body().into_data_stream(),
            MAX_ERROR_BODY,
            self.timeouts.list_body_idle,
        )
        .await;
        Err(ReflectorError::Api {
            op,
            resource: self.resource.clone(),
            error: ApiError::from_status_bytes(Some(status.as_u16()), &bytes),
        })
    }

    fn list_body_error(&self, e: BodyError<kube::Error>) -> ReflectorError {
        let timeout = |phase, after| ReflectorError::Timeout {
            op: Operation::List,
            resource: self.resource.clone(),
            phase,
            after,
        };
        match e {
            BodyError::Idle => timeout(TimeoutPhase::ListBodyIdle, self.timeouts.list_body_idle),
            BodyError::Total => timeout(TimeoutPhase::ListBody, self.timeouts.list_body),
            BodyError::TooLarge => ReflectorError::ListPageTooLarge {
                resource: self.resource.clone(),
                limit: self.max_list_page_bytes,
            },
            BodyError::Stream(e) => ReflectorError::Body {
                op: Operation::List,
                resource: self.resource.clone(),
                source: Box::new(e),
            },
            // only a consumer that found the body malformed stops, and it
            // reports that itself
            BodyError::Stopped => ReflectorError::Body {
                op: Operation::List,
                resource: self.resource.clone(),
                source: "the list body was not read to its end".into(),
            },
        }
    }

    async fn open_watch(
        &self,
        op: Operation,
        rv: &str,
        timeout_secs: u32,
        initial_events: bool,
    ) -> Result<OpenWatch, ReflectorError> {
        // the clock starts before the request: some proxies flush headers
        // only with the first event
        let start = Instant::now();
        // bookmarks are on by default
        let mut wp = WatchParams::default().timeout(timeout_secs);
        wp.label_selector = self.label_selector.clone();
        wp.field_selector = self.field_selector.clone();
        if initial_events {
            wp = wp.initial_events();
        }
        let req = Request::new(self.url_path.as_str());
        let built = if self.metadata_only {
            req.watch_metadata(&wp, rv)
        } else {
            req.watch(&wp, rv)
        };
        let mut req = built.map_err(|source| ReflectorError::Request {
            resource: self.resource.clone(),
            source,
        })?;
        self.add_shard_selector(&mut req)?;
        // Kubernetes 1.37 gzips watch streams one member per event: ask for
        // an identity encoding and frame the raw bytes.
        req.headers_mut().insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("identity"),
        );
        self.set_accept(&mut req, true);
        debug!(uri = %Truncated(req.uri(), MAX_LOGGED_URI), "watch");
        self.metrics.watches.inc();
        let resp = self
            .send(op, req)
            .await
            .map_err(|e| shard::classify(self.sharding.as_ref(), e))?;
        let idle_limit = self
            .watch_idle_timeout
            .unwrap_or(Duration::from_secs(u64::from(timeout_secs)) + WATCH_IDLE_MARGIN);
        let codec = self.answered(resp.headers());
        Ok(OpenWatch {
            body: Box::pin(resp.into_body().into_data_stream()),
            idle_limit,
            framer: codec.get::<K>().framer(self.max_event_size),
            codec,
            start,
            timeout: Duration::from_secs(u64::from(timeout_secs)),
            events: 0,
            op,
            stalled: false,
            propagate_rv: !(rv.is_empty() || rv == "0"),
        })
    }

    /// client-go's `watch`: re-open watches from the last synced RV until
    /// an error needs a relist.
    async fn watch_loop(
        &self,
        backoff: &mut Backoff,
        mut open: Option<OpenWatch>,
    ) -> Result<(), ReflectorError> {
        let mut resync = self.resync_period.map(|p| {
            let mut i = tokio::time::interval_at(Instant::now() + p, p);
            i.set_missed_tick_behavior(MissedTickBehavior::Delay);
            i
        });
        let mut internal = InternalErrorRetry {
            max: self.max_internal_error_retry_duration,
            first: None,
            last: None,
        };
        loop {
            let mut w = match open.take() {
                Some(w) => w,
                None => {
                    let rv = self.last_sync_resource_version();
                    // unsynced here means resuming: a short watch, so that
                    // the confirming bookmark (or clean end) comes soon
                    let timeout = if self.has_synced() {
                        self.watch_timeout_secs()
                    } else {
                        RESUME_WATCH_TIMEOUT.as_secs() as u32
                    };
                    match self.open_watch(Operation::Watch, &rv, timeout, false).await {
                        Ok(w) => w,
                        Err(e) if e.is_watch_retriable() => {
                            self.report(&e);
                            self.sleep_backoff(backoff, resync.as_mut()).await;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            let span = info_span!("watch", op = %w.op);
            let res = self
                .handle_watch(&mut w, Mode::Normal, resync.as_mut())
                .instrument(span)
                .await;
            let stalled = w.stalled;
            let lasted = w.start.elapsed();
            let asked = w.timeout;
            drop(w);
            match res {
                Ok(_) if stalled => {
                    // reported already; watch again from the last RV
                    self.sleep_backoff(backoff, resync.as_mut()).await;
                }
                Ok(_) if !self.has_synced() && lasted < asked => {
                    // a reset or closed connection before the server's
                    // timeout says nothing about the resourceVersion
                    info!(
                        lasted_ms = lasted.as_millis() as u64,
                        timeout_s = asked.as_secs(),
                        "the resumed watch ended before its timeout: the resume is not confirmed yet; watching again after a backoff"
                    );
                    self.sleep_backoff(backoff, resync.as_mut()).await;
                }
                Ok(_) => {
                    if !self.mark_synced() {
                        info!("the resumed watch ended cleanly at its timeout: resume confirmed");
                    }
                    debug!("watch closed; watching again from the last resourceVersion");
                }
                Err(e @ ReflectorError::ShardSelectorRejected { .. }) => {
                    // not transient: relist after a backoff step
                    return Err(e);
                }
                Err(e) => {
                    let is_internal = e.api_error().is_some_and(ApiError::is_internal_error);
                    if is_internal {
                        internal.after_error();
                    }
                    if e.is_too_many_requests() {
                        self.report(&e);
                        self.sleep_backoff(backoff, resync.as_mut()).await;
                        continue;
                    }
                    if is_internal && internal.should_retry() {
                        // client-go re-watches at once; a server failing
                        // every watch would make that a hot loop
                        self.report(&e);
                        self.sleep_backoff(backoff, resync.as_mut()).await;
                        continue;
                    }
                    // 410 and everything else: relist (after a backoff step)
                    return Err(e);
                }
            }
        }
    }

    /// Reads one watch until it ends. In `Initial` mode, returns the RV of
    /// the `initial-events-end` bookmark when it arrives.
    async fn handle_watch(
        &self,
        w: &mut OpenWatch,
        mut mode: Mode<'_, K>,
        mut resync: Option<&mut Interval>,
    ) -> Result<Option<String>, ReflectorError> {
        // client-go warns every 10 s while a streaming list is not done
        let mut progress = matches!(mode, Mode::Initial(_)).then(|| {
            let mut i =
                tokio::time::interval_at(Instant::now() + WATCH_LIST_PROGRESS, WATCH_LIST_PROGRESS);
            i.set_missed_tick_behavior(MissedTickBehavior::Delay);
            i
        });
        let mut idle_deadline = Instant::now() + w.idle_limit;
        loop {
            loop {
                match w.framer.next_frame() {
                    Ok(Some(frame)) => {
                        if let Some(rv) = self.handle_frame(frame, &mut mode, w)? {
                            return Ok(Some(rv));
                        }
                    }
                    Ok(None) => break,
                    Err(FrameError::TooLarge(e)) => {
                        return Err(ReflectorError::EventTooLarge {
                            op: w.op,
                            resource: self.resource.clone(),
                            limit: e.limit,
                        });
                    }
                    Err(FrameError::Malformed(source)) => {
                        return Err(ReflectorError::Body {
                            op: w.op,
                            resource: self.resource.clone(),
                            source,
                        });
                    }
                }
            }
            let next = tokio::select! {
                chunk = w.body.next() => chunk,
                _ = tokio::time::sleep_until(idle_deadline) => {
                    // No byte (not even a bookmark) for longer than the
                    // server may keep a watch open: the connection stalled
                    // without a FIN. Open a new watch from the last RV.
                    self.report(&ReflectorError::WatchStalled {
                        op: w.op,
                        resource: self.resource.clone(),
                        idle: w.idle_limit,
                    });
                    w.stalled = true;
                    return Ok(None);
                }
                _ = tick(resync.as_deref_mut()) => {
                    // client-go: a failed resync ends the watch (relist)
                    if let Err(source) = self.store.resync() {
                        return Err(ReflectorError::Store {
                            op: Operation::Resync,
                            resource: self.resource.clone(),
                            source,
                        });
                    }
                    continue;
                }
                _ = tick(progress.as_mut()) => {
                    if let Mode::Initial(buf) = &mode {
                        warn!(
                            objects = buf.items.len(),
                            elapsed_s = w.start.elapsed().as_secs(),
                            "the streaming list has not sent its initial-events-end bookmark yet"
                        );
                    }
                    continue;
                }
            };
            match next {
                Some(Ok(chunk)) => {
                    idle_deadline = Instant::now() + w.idle_limit;
                    w.framer.push(chunk)
                }
                Some(Err(e)) => {
                    if is_probable_eof(&e) {
                        debug!(error = %Truncated(&ErrorChain(&e), MAX_LOGGED_ERROR), "watch stream ended");
                        break;
                    }
                    return Err(ReflectorError::Body {
                        op: w.op,
                        resource: self.resource.clone(),
                        source: Box::new(e),
                    });
                }
                None => break,
            }
        }
        match w.framer.finish() {
            Ok(Some(line)) => {
                // a last line without newline: accept it if it is a whole event
                match w.codec.get::<K>().decode_event(&self.decoder, line.clone()) {
                    Err(e) if e.kind == BadEventKind::Undecodable => {
                        debug!("ignoring a truncated last line of a watch stream");
                    }
                    _ => {
                        if let Some(rv) = self.handle_frame(line, &mut mode, w)? {
                            return Ok(Some(rv));
                        }
                    }
                }
            }
            Ok(None) => {}
            Err(left) => {
                // a frame cut by the end of the stream
                debug!(
                    bytes = left,
                    "ignoring a truncated last frame of a watch stream"
                );
            }
        }
        if w.events == 0 && w.start.elapsed() < VERY_SHORT_WATCH {
            return Err(ReflectorError::VeryShortWatch {
                op: w.op,
                resource: self.resource.clone(),
            });
        }
        Ok(None)
    }

    fn store_result(&self, op: Operation, r: Result<(), kcache_core::StoreError>) {
        if let Err(source) = r {
            self.report(&ReflectorError::Store {
                op,
                resource: self.resource.clone(),
                source,
            });
        }
    }

    /// Handles one watch event (one frame of the response's format).
    fn handle_frame(
        &self,
        frame: Bytes,
        mode: &mut Mode<'_, K>,
        w: &mut OpenWatch,
    ) -> Result<Option<String>, ReflectorError> {
        let decoded = w.codec.get::<K>().decode_event(&self.decoder, frame);
        let event = match decoded {
            Ok(e) => e,
            Err(bad) => {
                self.report(&ReflectorError::BadEvent {
                    op: w.op,
                    resource: self.resource.clone(),
                    source: bad,
                });
                return Ok(None);
            }
        };
        let op = w.op;
        let mut end = None;
        // An object outside the shard (the apiserver did not filter) only
        // moves the resourceVersion.
        let outside = match &event {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                !self.in_shard(o)
            }
            _ => false,
        };
        if outside {
            self.outside_shard(mode);
        }
        match event {
            WatchEvent::Added(obj) => {
                let keep = obj.clone();
                match mode {
                    _ if outside => {}
                    Mode::Normal => self.store_result(op, self.store.add(obj)),
                    Mode::Initial(buf) => self.buffer_initial(buf, obj)?,
                }
                if w.propagate_rv {
                    self.event_rv(mode, keep.resource_version());
                }
            }
            WatchEvent::Modified(obj) => {
                w.propagate_rv = true;
                let keep = obj.clone();
                match mode {
                    _ if outside => {}
                    Mode::Normal => self.store_result(op, self.store.update(obj)),
                    Mode::Initial(buf) => self.buffer_initial(buf, obj)?,
                }
                self.event_rv(mode, keep.resource_version());
            }
            WatchEvent::Deleted(obj) => match mode {
                Mode::Normal => {
                    w.propagate_rv = true;
                    let keep = obj.clone();
                    if !outside {
                        self.store_result(op, self.store.delete(obj.into()));
                    }
                    self.event_rv(mode, keep.resource_version());
                }
                Mode::Initial(buf) => {
                    buf.delete(&obj);
                    self.event_rv(mode, obj.resource_version());
                }
            },
            WatchEvent::Bookmark(b) => match mode {
                Mode::Normal => {
                    w.propagate_rv = true;
                    self.set_last_sync_rv(&b.resource_version);
                    self.store_result(op, self.store.bookmark(&b.resource_version));
                    if !self.mark_synced() {
                        info!(resource_version = %Truncated(b.resource_version.as_str(), MAX_LOGGED_RV), "bookmark on the resumed watch: resume confirmed");
                    }
                }
                Mode::Initial(buf) => {
                    buf.resource_version.clone_from(&b.resource_version);
                    if b.initial_events_end {
                        end = Some(b.resource_version);
                    }
                }
            },
            WatchEvent::Error(error) => {
                return Err(shard::classify(
                    self.sharding.as_ref(),
                    ReflectorError::Api {
                        op,
                        resource: self.resource.clone(),
                        error,
                    },
                ));
            }
        }
        w.events += 1;
        self.metrics.events.inc();
        Ok(end)
    }

    /// An event outside the shard arrived: counted for a streaming list's
    /// mode; on a watch, proof that the apiserver does not filter.
    fn outside_shard(&self, mode: &mut Mode<'_, K>) {
        match mode {
            Mode::Initial(buf) => buf.shard_dropped += 1,
            Mode::Normal => {
                if let Some(sh) = &self.sharding
                    && sh.mode() != Some(ShardFilterMode::Client)
                {
                    self.set_shard_mode(sh, ShardFilterMode::Client);
                }
            }
        }
    }

    /// Buffers one initial event of a streaming list, within the cap.
    fn buffer_initial(
        &self,
        buf: &mut InitialBuffer<K>,
        obj: CachedObject<K>,
    ) -> Result<(), ReflectorError> {
        buf.upsert(self.reuse(obj));
        if buf.bytes > self.max_initial_events_bytes {
            return Err(ReflectorError::InitialEventsTooLarge {
                resource: self.resource.clone(),
                limit: self.max_initial_events_bytes,
            });
        }
        Ok(())
    }

    fn event_rv(&self, mode: &mut Mode<'_, K>, rv: Option<&str>) {
        let Some(rv) = rv else { return };
        match mode {
            Mode::Normal => self.set_last_sync_rv(rv),
            Mode::Initial(buf) => {
                buf.resource_version.clear();
                buf.resource_version.push_str(rv);
            }
        }
    }
}
