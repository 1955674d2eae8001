//! The reflector: list + watch into a store, with client-go's rules.
//!
//! This module holds the [`Reflector`] itself and its relist loop, the
//! state machine of one `run`: [`run_until`](Reflector::run_until) calls
//! `list_and_watch` over and over with a backoff step between calls; each
//! call lists (a streaming list, else a paged list) or resumes, then
//! watches until an error needs a relist. The parts live in submodules:
//!
//! - `builder`: [`ReflectorBuilder`], the configuration;
//! - `transport`: the HTTP requests (content negotiation, deadlines,
//!   error bodies, the `406` fallback to JSON);
//! - `list`: paged lists into the store (and the relist memory);
//! - `streaming`: streaming lists (`sendInitialEvents`) and their buffer;
//! - `watch`: the watch loop and the handling of each event;
//! - `sharding`: the shard selector and who filters;
//! - `resync`: the periodic resync.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kcache_core::{CachedObject, ErrorChain, ReflectorStore};
use kube::Client;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::backoff::{Backoff, BackoffConfig};
use crate::codec::CodecId;
use crate::decode::EventDecoder;
use crate::error::{ApiError, ErrorReason, MAX_LOGGED_ERROR, Operation, ReflectorError, Truncated};
use crate::limits::{Limits, RequestTimeouts};
use crate::metrics::ReflectorMetrics;
use crate::shard::Sharding;
#[cfg(doc)]
use crate::watch_config::WatchConfig;

mod builder;
mod initial_buffer;
mod list;
mod resync;
mod sharding;
mod streaming;
mod transport;
mod watch;

pub use builder::ReflectorBuilder;

/// Called with every error the reflector meets (see [`ReflectorError`]).
/// It must return quickly: it runs on the reflector's task.
pub type WatchErrorHandler = Arc<dyn Fn(&ReflectorError) + Send + Sync>;

/// client-go's default page size.
pub const DEFAULT_PAGE_SIZE: u32 = 500;

pub(crate) use crate::limits::DEFAULT_MIN_WATCH_TIMEOUT;

/// Added to a watch's requested server-side timeout to get the default
/// client-side idle limit (see [`RequestTimeouts::watch_idle_timeout`]).
pub const WATCH_IDLE_MARGIN: Duration = Duration::from_secs(30);

/// Server-side timeout of the watches opened by a resuming reflector until
/// the resume is confirmed (see [`ReflectorBuilder::resume_from`]). The
/// apiserver answers a watch from a resourceVersion it no longer has with
/// an error at once, and sends bookmarks only when the resource's
/// resourceVersion has moved; a clean end of the watch at this short
/// timeout (not before it) therefore confirms the resume within 2 s even
/// when nothing changed (long enough not to count as a too-short watch).
pub const RESUME_WATCH_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest part of a server-provided resourceVersion shown in a log line.
const MAX_LOGGED_RV: usize = 64;

/// Largest part of a request URI shown in a log line.
const MAX_LOGGED_URI: usize = 1024;

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
    backoff: BackoffConfig,
    handler: Option<WatchErrorHandler>,
    metrics: ReflectorMetrics,
    /// As configured, the watch timeout raised to client-go's minimum.
    timeouts: RequestTimeouts,
    /// As configured, each cap at least 1.
    limits: Limits,
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
                let mut retry_after = None;
                if let Err(e) = self.list_and_watch(&mut st, &mut backoff).await {
                    // a 429 (a consistent LIST the watch cache cannot
                    // serve yet) says how long to wait
                    retry_after = e.retry_after();
                    self.report(&e);
                }
                // client-go's BackoffUntil(sliding): one backoff step after
                // every list-and-watch return (at least the Retry-After).
                tokio::time::sleep(self.retry_wait(&mut backoff, retry_after)).await;
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
}
