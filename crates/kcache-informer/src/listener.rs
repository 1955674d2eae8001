//! Per-handler listeners: an unbounded buffer and a thread each, so that a
//! slow or stuck handler delays only itself.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use kcache_core::sync::lock;
use kcache_core::{CachedObject, ObjectOrTombstone};
use tokio::time::Instant;

use crate::handler::ResourceEventHandler;
use crate::metrics::ListenerMetrics;

/// A handler call longer than this is slow (client-go 1.36 traces handlers
/// slower than 100 ms).
pub(crate) const SLOW_HANDLER: Duration = Duration::from_millis(100);
/// At most one slow-handler WARN per handler per this long.
const SLOW_HANDLER_WARN_EVERY: Duration = Duration::from_secs(60);

/// Slow calls of one handler since its last WARN.
#[derive(Default)]
struct SlowCalls {
    /// When the last WARN was logged (wall clock: the listener runs on its
    /// own thread, outside the runtime).
    last_warn: Option<std::time::Instant>,
    /// Slow calls since then, not yet logged.
    unlogged: u64,
}

/// client-go's initial listener buffer size; the buffer doubles as needed.
pub(crate) const INITIAL_BUFFER_SIZE: usize = 1024;

/// While the informer has more deltas to hand out, a parked listener is
/// woken only once this many notifications wait for it (or when the
/// informer runs out of deltas and calls [`Listener::flush`]): one wake per
/// batch instead of one per event, which is a futex syscall and two context
/// switches saved per event under load.
pub(crate) const WAKE_BATCH: usize = 32;

/// One change, as queued for a handler.
pub(crate) enum Notification<K> {
    Add {
        obj: CachedObject<K>,
        is_in_initial_list: bool,
    },
    Update {
        old: CachedObject<K>,
        new: CachedObject<K>,
    },
    Delete {
        obj: ObjectOrTombstone<K>,
    },
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => Notification::Add {
                obj: obj.clone(),
                is_in_initial_list: *is_in_initial_list,
            },
            Notification::Update { old, new } => Notification::Update {
                old: old.clone(),
                new: new.clone(),
            },
            Notification::Delete { obj } => Notification::Delete { obj: obj.clone() },
        }
    }
}

impl<K> Notification<K> {
    fn key(&self) -> &str {
        match self {
            Notification::Add { obj, .. } => obj.key(),
            Notification::Update { new, .. } => new.key(),
            Notification::Delete { obj } => obj.key(),
        }
    }
    /// What a handler does with it, e.g. `on_update of ns/name`.
    fn describe(&self) -> String {
        let call = match self {
            Notification::Add { .. } => "on_add",
            Notification::Update { .. } => "on_update",
            Notification::Delete { .. } => "on_delete",
        };
        format!("{call} of {}", self.key())
    }
    fn is_initial_add(&self) -> bool {
        matches!(
            self,
            Notification::Add {
                is_in_initial_list: true,
                ..
            }
        )
    }
}

/// How a handler call ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Handled {
    Returned,
    Panicked,
}

struct Buffer<K> {
    items: VecDeque<Notification<K>>,
    closed: bool,
    /// A notification is being handled right now.
    busy: bool,
    /// The notification being handled (a reference-count bump; cleared
    /// under the lock the listener takes anyway for the next one), so a
    /// handler stuck at shutdown can be named with what it is stuck in.
    current: Option<Notification<K>>,
    /// The listener thread is parked on the condvar: only then does an
    /// add wake it (a wake is a syscall; most adds find the thread busy).
    waiting: bool,
}

struct Resync {
    /// What the handler asked for (after the 1 s minimum).
    requested: Duration,
    /// What is used: `requested` adjusted to the informer's check period,
    /// or zero when the informer does not resync.
    period: Duration,
    next: Instant,
}

/// Shared "has the informer synced" flag, read by registrations.
pub(crate) type SyncedFn = Arc<dyn Fn() -> bool + Send + Sync>;

pub(crate) struct Listener<K> {
    pub(crate) id: u64,
    pub(crate) name: String,
    handler: Box<dyn ResourceEventHandler<K>>,
    buffer: Mutex<Buffer<K>>,
    wake: Condvar,
    resync: Mutex<Resync>,
    pending_initial: AtomicUsize,
    /// Counted under the buffer's lock (with their metrics), so that
    /// metrics attached while the handler runs start from exact values.
    panics: AtomicU64,
    delivered: AtomicU64,
    /// Set once, when the informer gets a metrics provider.
    metrics: OnceLock<ListenerMetrics>,
    slow: Mutex<SlowCalls>,
    upstream_synced: SyncedFn,
    started: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<K: 'static> Listener<K> {
    pub(crate) fn new(
        id: u64,
        name: String,
        handler: Box<dyn ResourceEventHandler<K>>,
        requested_resync: Duration,
        resync: Duration,
        upstream_synced: SyncedFn,
    ) -> Arc<Self> {
        Arc::new(Listener {
            id,
            name,
            handler,
            buffer: Mutex::new(Buffer {
                items: VecDeque::with_capacity(INITIAL_BUFFER_SIZE),
                closed: false,
                busy: false,
                current: None,
                waiting: false,
            }),
            wake: Condvar::new(),
            resync: Mutex::new(Resync {
                requested: requested_resync,
                period: resync,
                next: Instant::now() + resync,
            }),
            pending_initial: AtomicUsize::new(0),
            panics: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            metrics: OnceLock::new(),
            slow: Mutex::new(SlowCalls::default()),
            upstream_synced,
            started: AtomicBool::new(false),
            thread: Mutex::new(None),
        })
    }

    /// Queues a notification; never blocks on the handler. Wakes the
    /// listener thread at once.
    pub(crate) fn add(&self, n: Notification<K>) {
        self.add_deferred(n, false);
    }

    /// Queues a notification. With `defer`, a parked listener thread is
    /// woken only when [`WAKE_BATCH`] notifications wait: the caller must
    /// call [`flush`](Self::flush) when it has nothing more to queue.
    pub(crate) fn add_deferred(&self, n: Notification<K>, defer: bool) {
        let mut buf = lock(&self.buffer);
        if buf.closed {
            return;
        }
        if n.is_initial_add() {
            self.pending_initial.fetch_add(1, Ordering::SeqCst);
        }
        buf.items.push_back(n);
        if let Some(m) = self.metrics.get() {
            m.backlog.set(buf.items.len() as f64);
        }
        let wake = buf.waiting && (!defer || buf.items.len() >= WAKE_BATCH);
        drop(buf);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Wakes the listener thread if it is parked with notifications waiting
    /// (the end of a run of [`add_deferred`](Self::add_deferred) calls).
    pub(crate) fn flush(&self) {
        let buf = lock(&self.buffer);
        let wake = buf.waiting && !buf.items.is_empty();
        drop(buf);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Starts the listener's thread (once).
    pub(crate) fn start(self: &Arc<Self>) -> std::io::Result<()> {
        if self.started.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let me = self.clone();
        let handle = std::thread::Builder::new()
            .name(format!("kcache-listener-{}", self.id))
            .spawn(move || me.run())?;
        *lock(&self.thread) = Some(handle);
        Ok(())
    }

    fn run(&self) {
        // what the last notification came to: counted under the lock
        let mut handled: Option<Handled> = None;
        loop {
            let n = {
                let mut buf = lock(&self.buffer);
                if let Some(h) = handled.take() {
                    self.count(h);
                }
                buf.busy = false;
                buf.current = None;
                loop {
                    if buf.closed {
                        return;
                    }
                    if let Some(n) = buf.items.pop_front() {
                        if let Some(m) = self.metrics.get() {
                            m.backlog.set(buf.items.len() as f64);
                        }
                        buf.busy = true;
                        buf.current = Some(n.clone());
                        break n;
                    }
                    if buf.items.capacity() > 4 * INITIAL_BUFFER_SIZE {
                        // a burst (the initial list) is over: give its room back
                        buf.items.shrink_to(INITIAL_BUFFER_SIZE);
                    }
                    buf.waiting = true;
                    buf = self.wake.wait(buf).unwrap_or_else(PoisonError::into_inner);
                    buf.waiting = false;
                }
            };
            handled = Some(self.dispatch(n));
        }
    }

    /// Counts a handled notification (under the buffer's lock).
    fn count(&self, h: Handled) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        if h == Handled::Panicked {
            self.panics.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(m) = self.metrics.get() {
            m.delivered.inc();
            if h == Handled::Panicked {
                m.panics.inc();
            }
        }
    }

    /// Records into `metrics` from now on, starting from this listener's
    /// counts; a no-op when metrics were attached already.
    pub(crate) fn attach_metrics(&self, metrics: ListenerMetrics) {
        let buf = lock(&self.buffer);
        if self.metrics.set(metrics).is_err() {
            return;
        }
        if let Some(m) = self.metrics.get() {
            m.backlog.set(buf.items.len() as f64);
            m.delivered.inc_by(self.delivered.load(Ordering::Relaxed));
            m.panics.inc_by(self.panics.load(Ordering::Relaxed));
        }
    }

    fn dispatch(&self, n: Notification<K>) -> Handled {
        let initial = n.is_initial_add();
        let started = std::time::Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| match &n {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => self.handler.on_add(obj, *is_in_initial_list),
            Notification::Update { old, new } => self.handler.on_update(old, new),
            Notification::Delete { obj } => self.handler.on_delete(obj),
        }));
        let handled = match &result {
            Ok(()) => Handled::Returned,
            Err(_) => Handled::Panicked,
        };
        let took = started.elapsed();
        if took > SLOW_HANDLER {
            self.slow_call(took, n.key());
        }
        if let Err(panic) = result {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(non-string panic payload)".into());
            tracing::error!(
                handler = %self.name,
                key = %n.key(),
                panic = %message,
                "event handler panicked; the event is skipped and the handler keeps receiving later events"
            );
        }
        if initial {
            self.pending_initial.fetch_sub(1, Ordering::SeqCst);
        }
        handled
    }

    /// Logs a slow handler call: a WARN naming the handler, at most one a
    /// minute, with the slow calls since the last one.
    fn slow_call(&self, took: Duration, key: &str) {
        let mut slow = lock(&self.slow);
        slow.unlogged += 1;
        let due = slow
            .last_warn
            .is_none_or(|at| at.elapsed() >= SLOW_HANDLER_WARN_EVERY);
        if due {
            tracing::warn!(
                handler = %self.name,
                key,
                took_ms = took.as_millis() as u64,
                slow_calls = slow.unlogged,
                "an event handler took over 100 ms: it delays every later event for this handler (move slow work out of the handler, e.g. into a work queue); logged at most once a minute"
            );
            slow.last_warn = Some(std::time::Instant::now());
            slow.unlogged = 0;
        }
    }

    /// Stops the listener: pending notifications are dropped, the thread
    /// ends after the handler call in progress (if any) returns.
    pub(crate) fn close(&self) {
        let mut buf = lock(&self.buffer);
        buf.closed = true;
        buf.items.clear();
        buf.items.shrink_to_fit();
        if let Some(m) = self.metrics.get() {
            m.backlog.set(0.0);
        }
        drop(buf);
        self.pending_initial.store(0, Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// Waits for the thread to end (after [`Listener::close`]). Blocking,
    /// without a bound: tests only; the informer uses
    /// [`try_join`](Self::try_join) with a deadline.
    #[cfg(test)]
    pub(crate) fn join(&self) {
        let handle = lock(&self.thread).take();
        if let Some(h) = handle
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }

    /// Joins the thread if it has ended (after [`Listener::close`]), without
    /// blocking: `true` when there is no thread left (it ended and was
    /// joined, or never started), `false` while the handler is still in a
    /// call.
    pub(crate) fn try_join(&self) -> bool {
        let mut slot = lock(&self.thread);
        if slot.as_ref().is_some_and(|h| !h.is_finished()) {
            return false;
        }
        if let Some(h) = slot.take() {
            // finished: `join` returns at once (std: "can be expected to
            // return quickly, without blocking for any significant amount
            // of time"); it only reaps the thread
            let _ = h.join();
        }
        true
    }

    /// Gives up on the thread: it keeps running, detached, until its
    /// handler returns (then it ends on its own: the listener is closed).
    pub(crate) fn detach(&self) {
        drop(lock(&self.thread).take());
    }

    /// What the handler is in right now, e.g. `on_update of ns/name`.
    pub(crate) fn stuck_in(&self) -> Option<String> {
        lock(&self.buffer)
            .current
            .as_ref()
            .map(Notification::describe)
    }

    /// Notifications waiting for the handler.
    pub(crate) fn backlog(&self) -> usize {
        lock(&self.buffer).items.len()
    }

    /// Whether nothing is waiting and the handler is not running.
    pub(crate) fn idle(&self) -> bool {
        let buf = lock(&self.buffer);
        buf.items.is_empty() && !buf.busy
    }

    pub(crate) fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    pub(crate) fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// The informer synced and every initial add queued for this handler has
    /// returned from it.
    pub(crate) fn has_synced(&self) -> bool {
        (self.upstream_synced)() && self.pending_initial.load(Ordering::SeqCst) == 0
    }

    pub(crate) fn should_resync(&self, now: Instant) -> bool {
        let r = lock(&self.resync);
        !r.period.is_zero() && now >= r.next
    }

    pub(crate) fn determine_next_resync(&self, now: Instant) {
        let mut r = lock(&self.resync);
        r.next = now + r.period;
    }

    pub(crate) fn requested_resync_period(&self) -> Duration {
        lock(&self.resync).requested
    }

    pub(crate) fn resync_period(&self) -> Duration {
        lock(&self.resync).period
    }

    pub(crate) fn set_resync_period(&self, period: Duration) {
        lock(&self.resync).period = period;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Count(Arc<AtomicUsize>);
    impl ResourceEventHandler<serde_json::Value> for Count {
        fn on_add(&self, _: &CachedObject<serde_json::Value>, _: bool) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn listener(seen: &Arc<AtomicUsize>) -> Arc<Listener<serde_json::Value>> {
        Listener::new(
            1,
            "count".into(),
            Box::new(Count(seen.clone())),
            Duration::ZERO,
            Duration::ZERO,
            Arc::new(|| true),
        )
    }

    fn add(i: usize) -> Notification<serde_json::Value> {
        let json = format!(r#"{{"metadata":{{"name":"o{i}","namespace":"ns"}}}}"#);
        Notification::Add {
            obj: CachedObject::from_bytes(json.into_bytes()).unwrap(),
            is_in_initial_list: false,
        }
    }

    fn wait_parked(l: &Listener<serde_json::Value>) {
        for _ in 0..2000 {
            if lock(&l.buffer).waiting {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the listener thread never parked");
    }

    fn wait_count(seen: &AtomicUsize, n: usize) {
        for _ in 0..5000 {
            if seen.load(Ordering::SeqCst) == n {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("handler saw {} of {n}", seen.load(Ordering::SeqCst));
    }

    #[test]
    fn a_drained_buffer_gives_back_the_room_of_a_burst() {
        let seen = Arc::new(AtomicUsize::new(0));
        let l = listener(&seen);
        for i in 0..20_000 {
            l.add(add(i));
        }
        assert!(lock(&l.buffer).items.capacity() >= 20_000);
        l.start().unwrap();
        wait_count(&seen, 20_000);
        wait_parked(&l);
        let cap = lock(&l.buffer).items.capacity();
        assert!(cap <= 4 * INITIAL_BUFFER_SIZE, "{cap}");
        l.close();
        l.join();
    }

    #[test]
    fn deferred_adds_wake_a_parked_listener_per_batch_or_on_flush() {
        let seen = Arc::new(AtomicUsize::new(0));
        let l = listener(&seen);
        l.start().unwrap();
        wait_parked(&l);
        // fewer than a batch: queued, the thread stays parked until flush
        for i in 0..WAKE_BATCH - 1 {
            l.add_deferred(add(i), true);
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(seen.load(Ordering::SeqCst), 0);
        assert_eq!(l.backlog(), WAKE_BATCH - 1);
        l.flush();
        wait_count(&seen, WAKE_BATCH - 1);
        // a full batch wakes it without a flush
        wait_parked(&l);
        for i in 0..WAKE_BATCH {
            l.add_deferred(add(100 + i), true);
        }
        wait_count(&seen, 2 * WAKE_BATCH - 1);
        // an immediate add wakes it at once
        wait_parked(&l);
        l.add(add(1000));
        wait_count(&seen, 2 * WAKE_BATCH);
        l.close();
        l.join();
    }
}
