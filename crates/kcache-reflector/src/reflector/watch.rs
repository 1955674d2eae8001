//! Watches (client-go's `watch`): opening one, the watch loop that
//! re-opens watches from the last synced resourceVersion until an error
//! needs a relist, reading one watch's frames, and handing each event to
//! the store (or, during a streaming list, to its buffer).

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use kcache_core::ErrorChain;
use kube::api::WatchParams;
use kube::core::Request;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tracing::{Instrument, debug, info, info_span, warn};

use super::initial_buffer::{InitialBuffer, WATCH_LIST_PROGRESS};
use super::resync::tick;
use super::transport::DataStream;
use super::{MAX_LOGGED_RV, MAX_LOGGED_URI, RESUME_WATCH_TIMEOUT, Reflector, WATCH_IDLE_MARGIN};
use crate::backoff::Backoff;
use crate::codec::CodecId;
use crate::decode::WatchEvent;
use crate::error::{
    ApiError, BadEventKind, MAX_LOGGED_ERROR, Operation, ReflectorError, Truncated, is_probable_eof,
};
use crate::framing::{FrameError, Framer};
use crate::shard;

/// A watch that ends faster than this without any event is an error.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// An open watch response and its framing state.
pub(super) struct OpenWatch {
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
    pub(super) propagate_rv: bool,
}

pub(super) enum Mode<'a, K> {
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

impl<K: 'static> Reflector<K> {
    pub(super) fn watch_timeout_secs(&self) -> u32 {
        let min = self.timeouts.min_watch_timeout.as_secs_f64();
        let secs = min * (rand::random::<f64>() + 1.0);
        secs.min(u32::MAX as f64) as u32
    }

    pub(super) async fn open_watch(
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
            .timeouts
            .watch_idle_timeout
            .unwrap_or(Duration::from_secs(u64::from(timeout_secs)) + WATCH_IDLE_MARGIN);
        let codec = self.answered(resp.headers());
        Ok(OpenWatch {
            body: Box::pin(resp.into_body().into_data_stream()),
            idle_limit,
            framer: codec.get::<K>().framer(self.limits.max_event_size),
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
    pub(super) async fn watch_loop(
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
            max: self.timeouts.max_internal_error_retry_duration,
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
                            self.sleep_retry(backoff, e.retry_after(), resync.as_mut())
                                .await;
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
    pub(super) async fn handle_watch(
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
            if let Some(rv) = self.drain_frames(w, &mut mode)? {
                return Ok(Some(rv));
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
        self.end_of_watch(w, &mut mode)
    }

    /// Handles every whole frame the bytes read so far hold; the RV of the
    /// `initial-events-end` bookmark when one of them is it.
    fn drain_frames(
        &self,
        w: &mut OpenWatch,
        mode: &mut Mode<'_, K>,
    ) -> Result<Option<String>, ReflectorError> {
        loop {
            match w.framer.next_frame() {
                Ok(Some(frame)) => {
                    if let Some(rv) = self.handle_frame(frame, mode, w)? {
                        return Ok(Some(rv));
                    }
                }
                Ok(None) => return Ok(None),
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
    }

    /// The end of a watch's body: a last frame without its terminator
    /// (handled when it is a whole event), then the very-short-watch check.
    fn end_of_watch(
        &self,
        w: &mut OpenWatch,
        mode: &mut Mode<'_, K>,
    ) -> Result<Option<String>, ReflectorError> {
        match w.framer.finish() {
            Ok(Some(line)) => {
                // a last line without newline: accept it if it is a whole event
                match w.codec.get::<K>().decode_event(&self.decoder, line.clone()) {
                    Err(e) if e.kind == BadEventKind::Undecodable => {
                        debug!("ignoring a truncated last line of a watch stream");
                    }
                    _ => {
                        if let Some(rv) = self.handle_frame(line, mode, w)? {
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
