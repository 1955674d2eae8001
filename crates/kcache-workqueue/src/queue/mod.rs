//! The work queue: dedup, delays, rate limits, priorities, shutdown.
//!
//! Split along the queue's parts (client-go spreads the same over
//! `util/workqueue`'s `queue.go`, `delaying_queue.go` and
//! `rate_limiting_queue.go`):
//!
//! * this module: the public [`WorkQueue`] handle (plain adds, `get`,
//!   `done`, lengths), [`QueueItem`], [`AddOpts`] and the constants;
//! * [`builder`]: [`WorkQueueBuilder`] and the metrics updater task;
//! * [`delayed`]: adds with a delay, a rate limit or a priority, and the
//!   rate limiter's `forget` / `num_requeues`;
//! * [`shutdown`]: `shut_down` and `shut_down_with_drain`;
//! * [`inner`]: the state every clone shares;
//! * [`lock`]: the queue's lock ([`QueueLock`](lock::QueueLock),
//!   [`Locked`](lock::Locked)) and what releasing it does;
//! * [`state`]: what the lock guards: the item table on top of
//!   [`queues`], the slots and the ordered ready and timer queues;
//! * [`inbox`]: plain adds and deferred `done` calls waiting for the lock;
//! * [`hints`]: the slots a thread's `get` handed out, for its `done`;
//! * [`getter`]: one `get` call, parked until an item is ready.

mod builder;
mod delayed;
mod getter;
mod hints;
mod inbox;
mod inner;
mod lock;
mod queues;
mod shutdown;
mod state;
#[cfg(test)]
mod tests;

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

pub use builder::WorkQueueBuilder;
use getter::Getter;
use hints::{Hints, remember_handed_out};
use inner::Inner;
use queues::Wake;

/// The bound every queued item satisfies.
///
/// Items are compared and hashed to deduplicate them. The queue stores an
/// added item once and clones it once per [`get`](WorkQueue::get) (it keeps
/// a copy while the item is processed), plus the metrics' bookkeeping when
/// metrics are on: cheap keys such as `namespace/name` strings or small
/// structs are the intended use.
pub trait QueueItem: Hash + Eq + Clone + Send + Sync + 'static {}
impl<T: Hash + Eq + Clone + Send + Sync + 'static> QueueItem for T {}

/// Default interval after which a waiting item gains one priority level.
pub const DEFAULT_PRIORITY_AGING: Duration = Duration::from_secs(1);

/// Default period of the unfinished-work metrics update (client-go's).
pub const DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD: Duration = Duration::from_millis(500);

/// Delays larger than this are clamped to it (about 30 years), so that no
/// deadline overflows the clock.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// Options of [`WorkQueue::add_with_opts`].
///
/// The default adds the item now, without rate limiting, at priority 0.
///
/// ```
/// use std::time::Duration;
/// use kcache_workqueue::{AddOpts, WorkQueue};
///
/// let queue: WorkQueue<&str> = WorkQueue::builder().strict_priority().build().unwrap();
/// queue.add_with_opts("resync", AddOpts::priority(-100));
/// queue.add_with_opts("changed", AddOpts { priority: 10, ..AddOpts::default() });
/// queue.add_with_opts(
///     "retry",
///     AddOpts { after: Some(Duration::from_secs(5)), rate_limited: true, priority: 0 },
/// );
/// assert_eq!(queue.len(), 2); // "retry" waits for its time
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// assert_eq!(queue.get().await, Some("changed"));
/// assert_eq!(queue.get().await, Some("resync"));
/// # });
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddOpts {
    /// Wait at least this long before handing the item out. `None` or zero
    /// means now.
    pub after: Option<Duration>,
    /// Also ask the rate limiter; the item waits the longer of `after` and
    /// the limiter's answer.
    pub rate_limited: bool,
    /// Higher is handed out first. Items added through the other methods
    /// have priority 0.
    pub priority: i32,
}

impl AddOpts {
    /// Options with the given priority, no delay, no rate limiting.
    pub fn priority(priority: i32) -> Self {
        Self {
            priority,
            ..Self::default()
        }
    }
}

/// A work queue shared by producers (event handlers) and workers.
///
/// Cloning is cheap (an `Arc`): all clones are the same queue. See the
/// [crate documentation](crate) for the rules and an example.
pub struct WorkQueue<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T: QueueItem> fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.inner.lock();
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .field("ready", &st.q.ready.len())
            .field("delayed", &st.q.delayed.len())
            .field("processing", &st.q.processing)
            .field("shutting_down", &st.shutting_down)
            .finish()
    }
}

impl<T: QueueItem> Default for WorkQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: QueueItem> WorkQueue<T> {
    /// An unnamed queue (no metrics) with
    /// [`default_controller_rate_limiter`] and the default priority aging.
    /// Needs no runtime to be created.
    ///
    /// [`default_controller_rate_limiter`]: crate::default_controller_rate_limiter
    pub fn new() -> Self {
        Self::builder().build_unnamed()
    }

    /// Starts configuring a queue.
    pub fn builder() -> WorkQueueBuilder<T> {
        WorkQueueBuilder::default()
    }

    /// The queue's name, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// Marks `item` as needing processing, now.
    ///
    /// Ignored after shutdown. An item already waiting is not added twice
    /// (if it was waiting for a later time, it becomes ready now). An item
    /// being processed is handed out again only after its [`done`](Self::done).
    pub fn add(&self, item: T) {
        let inner = &*self.inner;
        if !inner.use_inbox {
            self.insert(item, 0, Duration::ZERO);
        } else if inner.shutting_down.load(Ordering::Acquire) {
            // Ignored after shutdown.
        } else if inner.inbox.push(item) {
            inner.wake_parked();
        }
    }

    /// Waits for an item to process and returns it, or `None` once the queue
    /// is shutting down and no item is left to hand out.
    ///
    /// The caller must call [`done`](Self::done) with the item when it has
    /// finished with it. No other caller gets the same item until then.
    /// Cancel-safe: dropping the future never loses an item. Waiting for a
    /// delayed item needs tokio's time driver.
    pub async fn get(&self) -> Option<T> {
        let mut getter = Getter {
            inner: &self.inner,
            id: None,
            sleep: None,
        };
        std::future::poll_fn(|cx| getter.poll_get(cx)).await
    }

    /// Marks `item` as processed. If it was added again while being
    /// processed, it is now handed out again.
    pub fn done(&self, item: &T) {
        let inner = &*self.inner;
        let Some(mut st) = inner.try_lock() else {
            // The lock is taken (by the adder or another worker): rather
            // than wait for it (and hand it back and forth between the
            // threads), leave the call in the inbox; the holder applies it
            // when it releases the lock, before anything else sees the queue.
            let at = (!inner.use_inbox).then(Instant::now);
            inner
                .inbox
                .push_done(item.clone(), Hints::of(inner.id()), at);
            inner.after_unlock();
            return;
        };
        // Calls that returned before this one come first (an item added
        // again while processed is then handed out again at once).
        let wake = inner.apply_inbox(&mut st);
        let (done_wake, released) = st.done(item, Hints::of(inner.id()), Instant::now);
        let wakeups = inner.wakeups(&mut st, wake.max(done_wake));
        drop(st);
        wakeups.wake();
        // The released key is dropped after the lock: freeing it (often on
        // another thread than the one that allocated it) stays out of the
        // critical section.
        drop(released);
    }

    /// [`done`](Self::done) of `item`, then [`get`](Self::get): a worker's
    /// loop step in one acquisition of the queue's lock when an item is
    /// ready (with several workers on a multi-threaded runtime, `done` and
    /// the next `get` otherwise take the lock twice per item, and the
    /// threads hand it back and forth). Same rules as the two calls: `item`
    /// is done before the next item is chosen (if it was added again while
    /// processed, it is queued behind the items already ready), and when
    /// nothing is ready this waits as `get` does.
    pub async fn done_and_get(&self, item: &T) -> Option<T> {
        if let Some(next) = self.done_then_try_get(item) {
            return Some(next);
        }
        self.get().await
    }

    /// The lock-once part of [`done_and_get`](Self::done_and_get): `done`,
    /// then the first ready item if one is there and no woken getter is
    /// owed a turn (see [`Waiters::should_yield`]); `None` sends the caller
    /// to `get`.
    ///
    /// [`Waiters::should_yield`]: crate::waiters::Waiters::should_yield
    fn done_then_try_get(&self, item: &T) -> Option<T> {
        let inner = &*self.inner;
        let (wakeups, next, _released) = {
            let mut st = inner.lock();
            let mut wake = inner.apply_inbox(&mut st);
            let (done_wake, released) = st.done(item, Hints::of(inner.id()), Instant::now);
            wake = wake.max(done_wake);
            let drained = st.shutting_down && st.drained();
            let mut next = None;
            if !drained && !st.waiters.owes_turn() {
                if !st.q.delayed.is_empty() {
                    wake = wake.max(st.promote_due(Instant::now()));
                }
                if let Some((next_item, idx)) = st.pop_ready(Instant::now) {
                    remember_handed_out(inner.id(), idx);
                    st.waiters.took_item();
                    if !st.q.ready.is_empty() {
                        wake = wake.max(Wake::One);
                    }
                    next = Some(next_item);
                }
            }
            (inner.wakeups(&mut st, wake), next, released)
        };
        wakeups.wake();
        next
    }

    /// Number of items ready to be handed out. Items being processed and
    /// items waiting for a later time are not counted.
    pub fn len(&self) -> usize {
        let inner = &*self.inner;
        let (wakeups, len) = {
            let mut st = inner.lock();
            let mut wake = inner.apply_inbox(&mut st);
            if !st.q.delayed.is_empty() {
                wake = wake.max(st.promote_due(Instant::now()));
            }
            let len = st.q.ready.len();
            (inner.wakeups(&mut st, wake), len)
        };
        wakeups.wake();
        len
    }

    /// Whether no item is ready to be handed out (see [`len`](Self::len)).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of items waiting for a later time.
    pub fn delayed_len(&self) -> usize {
        let _ = self.len();
        self.inner.lock().q.delayed.len()
    }

    /// Number of items handed out and not yet done.
    pub fn processing_len(&self) -> usize {
        let inner = &*self.inner;
        let (wakeups, processing) = {
            let mut st = inner.lock();
            let wake = inner.apply_inbox(&mut st);
            let processing = st.q.processing;
            (inner.wakeups(&mut st, wake), processing)
        };
        wakeups.wake();
        processing
    }
}
