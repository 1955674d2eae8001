//! The work queue: dedup, delays, rate limits, priorities, shutdown.

use std::collections::BTreeMap;

use foldhash::fast::RandomState;
use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

/// The queue's lock: `std`'s futex mutex, which parks a waiter after a short
/// spin. parking_lot's mutex spins longer and then calls `sched_yield`; with
/// an adder and workers on more threads than cores (a multi-threaded tokio
/// runtime plus the adding thread on 2 cores), that spinning cost a third of
/// the throughput (1M adds with 8 workers: 2.17 vs 3.08 M/s, 9 alternating
/// runs). Not poisoned by a panic (as with parking_lot): the only foreign
/// code run under the lock is a metrics provider's.
struct Mutex<T>(std::sync::Mutex<T>);

impl<T> Mutex<T> {
    fn new(value: T) -> Self {
        Self(std::sync::Mutex::new(value))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, T> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The lock if it is free now.
    fn try_lock(&self) -> Option<std::sync::MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}
use tokio::sync::Notify;
use tokio::time::{Instant, MissedTickBehavior};

use crate::error::BuildError;
use crate::metrics::{CounterMetric, MetricsProvider, QueueMetrics};
use crate::rate_limiter::{RateLimiter, default_controller_rate_limiter};
use crate::ready::ReadyQueue;
use crate::slab::Slab;
use crate::table::{ItemTable, Probe, SlotIdx};
use crate::waiters::{WaiterId, Waiters, Wakeups};

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

/// Where an item is waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Not waiting (being processed, or a free slot).
    Nowhere,
    /// In the ready queue, in the entry numbered `Slot::seq`.
    Ready,
    /// In the timer queue at `(Slot::ready_at, Slot::seq)`.
    Delayed,
    /// Ready, but the item is being processed: it joins the ready queue at
    /// `done` (client-go's "dirty while processing").
    Parked,
}

/// What the queue knows about one item, in a slab indexed by the item
/// table. A slot is in use while the item is waiting, being processed, or
/// both. The slot holds the queue's only copy of the item: the item table
/// and the ready and timer queues hold the slot's index, so an accepted add
/// stores its item once and clones nothing (`get` makes the one clone the
/// queue needs, see [`State::pop_ready`]).
#[derive(Debug)]
struct Slot<T> {
    /// The item; `None` while the slot is free.
    key: Option<T>,
    /// Sequence number of the item's ready or timer queue entry; an entry
    /// whose number differs is stale.
    seq: u64,
    /// When the item became (or becomes) ready, in nanoseconds since the
    /// queue's epoch. Meaningful while waiting.
    ready_at: u64,
    /// Meaningful while waiting.
    priority: i32,
    /// The item's hash tag (see [`tag_of`]), to find its table entry.
    tag: u32,
    place: Place,
    processing: bool,
}

impl<T> Slot<T> {
    fn free() -> Self {
        Slot {
            key: None,
            seq: 0,
            ready_at: 0,
            priority: 0,
            tag: 0,
            place: Place::Nowhere,
            processing: false,
        }
    }
}

/// The 32-bit tag of `item` under the queue's random seed (see
/// [`ItemTable`]).
fn tag_of<T: Hash>(hasher: &RandomState, item: &T) -> u32 {
    let h = hasher.hash_one(item);
    (h ^ (h >> 32)) as u32
}

/// Whom to wake after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Nobody,
    /// Items became ready: one parked getter (it wakes the next one if
    /// items remain, see [`Waiters`]).
    One,
    /// The earliest deadline moved earlier: every parked getter must re-arm
    /// its timer.
    All,
}

impl Wake {
    fn max(self, other: Wake) -> Wake {
        match (self, other) {
            (Wake::All, _) | (_, Wake::All) => Wake::All,
            (Wake::One, _) | (_, Wake::One) => Wake::One,
            (Wake::Nobody, Wake::Nobody) => Wake::Nobody,
        }
    }
}

/// The ordered queues and the slots (everything but the item table, so
/// that both can be borrowed at once).
struct Queues<T> {
    /// Ready items' slots.
    ready: ReadyQueue<SlotIdx>,
    /// Slots of items waiting for a later time, by `(ready_at, seq)`.
    delayed: BTreeMap<(u64, u64), SlotIdx>,
    slots: Slab<Slot<T>>,
    /// Free slots, reused last-freed first (likely still in cache).
    free: Vec<SlotIdx>,
    seq: u64,
    parked: usize,
    processing: usize,
    /// Nanoseconds of waiting worth one priority level; `None` is strict
    /// priority.
    aging_nanos: Option<i128>,
    epoch: Instant,
    metrics: Option<QueueMetrics<T>>,
}

impl<T: QueueItem> Queues<T> {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// `t` in nanoseconds since the epoch (times before it count as the
    /// epoch; 2^64 ns is 584 years).
    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    fn instant(&self, nanos: u64) -> Instant {
        self.epoch
            .checked_add(Duration::from_nanos(nanos))
            .unwrap_or(self.epoch)
    }

    /// A slot for `item`, not waiting and not processing.
    fn alloc_slot(&mut self, item: T, tag: u32) -> SlotIdx {
        let idx = match self.free.pop() {
            Some(idx) => idx,
            None => {
                let idx = SlotIdx::try_from(self.slots.len())
                    .expect("a work queue holds fewer than 2^32 items");
                self.slots.push(Slot::free());
                idx
            }
        };
        let slot = &mut self.slots[idx as usize];
        slot.key = Some(item);
        slot.tag = tag;
        idx
    }

    /// Frees slot `idx`; returns its item.
    fn free_slot(&mut self, idx: SlotIdx) -> Option<T> {
        let key = std::mem::replace(&mut self.slots[idx as usize], Slot::free()).key;
        self.free.push(idx);
        key
    }

    /// The slot's rank in the ready queue (see [`ReadyQueue`]): with aging,
    /// the ready time less `priority` agings, saturated to `i64` (2^63 ns
    /// is 292 years: only absurd priorities times agings saturate, and
    /// saturated ranks go by order of adding); strict priority orders
    /// lanes by priority and ranks by ready time.
    fn rank(&self, priority: i32, ready_at: u64) -> i64 {
        let t = i128::from(ready_at);
        let rank = match self.aging_nanos {
            // Aging: each `aging` of waiting is worth one priority level.
            Some(aging) => t - i128::from(priority) * aging,
            // Strict: the lanes order priorities.
            None => t,
        };
        rank.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Queues slot `idx` by its priority and ready time.
    fn push_ready(&mut self, idx: SlotIdx) {
        let slot = &self.slots[idx as usize];
        let (priority, ready_at) = (slot.priority, slot.ready_at);
        let rank = self.rank(priority, ready_at);
        let seq = self.next_seq();
        self.ready.push(idx, priority, rank, seq);
        let slot = &mut self.slots[idx as usize];
        slot.seq = seq;
        slot.place = Place::Ready;
    }

    /// Puts slot `idx` in the timer queue; returns its seq and whether it is
    /// now the earliest deadline.
    fn push_delayed(&mut self, idx: SlotIdx, ready_at: u64) -> (u64, bool) {
        let seq = self.next_seq();
        let earliest = self
            .delayed
            .first_key_value()
            .is_none_or(|((first, _), _)| ready_at < *first);
        self.delayed.insert((ready_at, seq), idx);
        (seq, earliest)
    }

    /// The item of slot `idx` (not waiting) became ready at `ready_at`.
    fn make_ready(&mut self, idx: SlotIdx, priority: i32, ready_at: u64) -> Wake {
        if self.metrics.is_some() {
            let at = self.instant(ready_at);
            if let (Some(m), Some(key)) = (&mut self.metrics, &self.slots[idx as usize].key) {
                m.add(key, at);
            }
        }
        let slot = &mut self.slots[idx as usize];
        slot.priority = priority;
        slot.ready_at = ready_at;
        if slot.processing {
            slot.place = Place::Parked;
            self.parked += 1;
            Wake::Nobody
        } else {
            self.push_ready(idx);
            Wake::One
        }
    }

    /// Adds the item of slot `idx` to be ready at `ready_at`.
    fn add(&mut self, idx: SlotIdx, priority: i32, ready_at: u64, now: u64) -> Wake {
        let slot = &self.slots[idx as usize];
        if slot.place == Place::Nowhere {
            if ready_at <= now {
                return self.make_ready(idx, priority, ready_at);
            }
            let (seq, earliest) = self.push_delayed(idx, ready_at);
            let slot = &mut self.slots[idx as usize];
            slot.seq = seq;
            slot.ready_at = ready_at;
            slot.priority = priority;
            slot.place = Place::Delayed;
            return if earliest { Wake::All } else { Wake::Nobody };
        }
        // Already waiting: keep the highest priority and the earliest time.
        let (old_priority, old_ready_at, old_seq) = (slot.priority, slot.ready_at, slot.seq);
        let priority = old_priority.max(priority);
        let ready_at = old_ready_at.min(ready_at);
        match slot.place {
            Place::Delayed => {
                if ready_at == old_ready_at {
                    self.slots[idx as usize].priority = priority;
                    return Wake::Nobody;
                }
                self.delayed.remove(&(old_ready_at, old_seq));
                self.slots[idx as usize].place = Place::Nowhere;
                // Re-add as new; it was not counted as added while delayed.
                self.add(idx, priority, ready_at, now)
            }
            Place::Ready => {
                if priority != old_priority || ready_at != old_ready_at {
                    // The old entry stays behind, stale; the item queues
                    // anew in its new priority's lane.
                    self.ready.mark_stale();
                    let slot = &mut self.slots[idx as usize];
                    slot.priority = priority;
                    slot.ready_at = ready_at;
                    self.push_ready(idx);
                }
                Wake::Nobody
            }
            Place::Parked | Place::Nowhere => {
                let slot = &mut self.slots[idx as usize];
                slot.priority = priority;
                slot.ready_at = ready_at;
                Wake::Nobody
            }
        }
    }

    /// Moves every delayed item whose time has come to the ready queue.
    fn promote_due(&mut self, now: Instant) -> Wake {
        let now = self.nanos(now);
        let mut wake = Wake::Nobody;
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((ready_at, seq), idx) = entry.remove_entry();
            let slot = &mut self.slots[idx as usize];
            if slot.place != Place::Delayed || slot.seq != seq {
                continue;
            }
            slot.place = Place::Nowhere;
            let priority = slot.priority;
            wake = wake.max(self.make_ready(idx, priority, ready_at));
        }
        wake
    }
}

/// Plain adds (no delay, priority 0) and deferred `done` calls waiting to
/// be applied to the queue.
///
/// An add of a queue without metrics only pushes its item here, under a
/// lock of its own held for a push: the adding thread never takes the
/// queue's lock nor touches the item table, the slots or the ready queue,
/// which stay in the cache of the workers' threads. A `done` that finds the
/// queue's lock taken (another worker is getting an item) leaves its call
/// here instead of waiting for the lock (see [`WorkQueue::done`]). Whoever
/// next takes the queue's lock applies the inbox first, in the order of
/// the calls (see [`State::apply_inbox`]), so every call sees every add and
/// `done` that returned before it began.
struct Inbox<T> {
    items: Mutex<InboxCalls<T>>,
    /// Whether `items` is not empty, written under its lock: a reader with
    /// nothing to apply (most `done` calls) looks at this flag instead of
    /// taking the lock, so it reads the adder's line instead of writing it.
    /// An add that happened before the read is seen.
    pending: AtomicBool,
    /// Whether a deferred `done` waits in `items`, written under its lock.
    /// Whoever releases the queue's lock looks at it afterwards (see
    /// [`Inner::after_unlock`]): a deferred `done` is applied even if no
    /// other call comes (it may hand out an item added again while it was
    /// processed, or end a drain).
    dones_pending: AtomicBool,
    /// Set while a getter is parked and no getter woken for ready items has
    /// run yet: an add must then wake one (through the queue's lock). Kept
    /// up to date under the queue's lock by [`State::publish`].
    wake_needed: AtomicBool,
}

/// The calls waiting in an [`Inbox`].
struct InboxCalls<T> {
    adds: Vec<T>,
    /// In the order of the calls; each knows how many of `adds` came
    /// before it.
    dones: Vec<DeferredDone<T>>,
}

impl<T> InboxCalls<T> {
    fn is_empty(&self) -> bool {
        self.adds.is_empty() && self.dones.is_empty()
    }
}

/// A `done` call that found the queue's lock taken.
struct DeferredDone<T> {
    item: T,
    /// How many adds of the inbox were pushed before this call.
    after_adds: usize,
    /// The calling thread's [`HANDED_OUT`] hints for this queue.
    hints: Hints,
    /// When the call was made, for the work-duration metric (queues with
    /// metrics only).
    at: Option<Instant>,
}

impl<T> Inbox<T> {
    fn new() -> Self {
        Self {
            items: Mutex::new(InboxCalls {
                adds: Vec::new(),
                dones: Vec::new(),
            }),
            pending: AtomicBool::new(false),
            dones_pending: AtomicBool::new(false),
            wake_needed: AtomicBool::new(false),
        }
    }

    /// Pushes `item`; returns whether a parked getter must be woken.
    fn push(&self, item: T) -> bool {
        {
            let mut items = self.items.lock();
            if items.is_empty() {
                self.pending.store(true, Ordering::Release);
            }
            items.adds.push(item);
        }
        // Ordered after the push by the inbox lock: a getter that set the
        // flag before its last look at the inbox (under the same lock) is
        // seen here, or that look saw this item (see `State::publish`).
        self.wake_needed.load(Ordering::Relaxed)
    }

    /// Pushes a deferred `done` of `item`.
    fn push_done(&self, item: T, hints: Hints, at: Option<Instant>) {
        let mut items = self.items.lock();
        if items.is_empty() {
            self.pending.store(true, Ordering::Release);
        }
        let after_adds = items.adds.len();
        items.dones.push(DeferredDone {
            item,
            after_adds,
            hints,
            at,
        });
        self.dones_pending.store(true, Ordering::Relaxed);
    }
}

/// Room (in items) an idle queue keeps in each of its buffers (see
/// [`State::shrink_idle`]).
const IDLE_KEEP_CAPACITY: usize = 1024;

/// Table lookups warmed together (see [`ItemTable::warm`]): adds of an
/// inbox batch, and entries unlinked by `done`.
const GROUP: usize = 16;

thread_local! {
    /// The last items `get` handed out on this thread, as (queue, slot):
    /// `done` usually comes on the same thread right after, and finds the
    /// slot here without a table lookup (a cache miss per item once the
    /// table outgrows the cache). Only a hint: `done` checks under the
    /// lock that the slot holds the item and is processing.
    static HANDED_OUT: Cell<([(usize, SlotIdx); HANDED_OUT_HINTS], usize)> =
        const { Cell::new(([(0, 0); HANDED_OUT_HINTS], 0)) };
}

/// Items remembered by [`HANDED_OUT`] per thread.
const HANDED_OUT_HINTS: usize = 4;

fn remember_handed_out(queue: usize, idx: SlotIdx) {
    HANDED_OUT.with(|h| {
        let (mut hints, next) = h.get();
        hints[next % HANDED_OUT_HINTS] = (queue, idx);
        h.set((hints, next.wrapping_add(1)));
    });
}

/// The slots of the items handed out by `queue` on this thread lately
/// (see [`HANDED_OUT`]).
#[derive(Debug, Clone, Copy)]
struct Hints {
    slots: [SlotIdx; HANDED_OUT_HINTS],
    len: usize,
}

impl Hints {
    /// This thread's hints for `queue`.
    fn of(queue: usize) -> Self {
        let (handed_out, _) = HANDED_OUT.with(Cell::get);
        let mut hints = Hints {
            slots: [0; HANDED_OUT_HINTS],
            len: 0,
        };
        for (q, idx) in handed_out {
            if q == queue {
                hints.slots[hints.len] = idx;
                hints.len += 1;
            }
        }
        hints
    }

    fn iter(&self) -> impl Iterator<Item = SlotIdx> + '_ {
        self.slots[..self.len].iter().copied()
    }
}

struct State<T> {
    /// Slot of every item waiting or being processed.
    items: ItemTable,
    hasher: RandomState,
    q: Queues<T>,
    waiters: Waiters,
    shutting_down: bool,
    drain: bool,
    /// The inbox's previous buffers, swapped in for the next batch.
    spare: Vec<T>,
    spare_dones: Vec<DeferredDone<T>>,
    /// A `done` left the queue drained while it shuts down with drain:
    /// `shut_down_with_drain` is to be woken once the lock is released.
    drained_signal: bool,
    /// The tags of an inbox batch (kept for its capacity).
    tags: Vec<u32>,
    /// Table entries of freed slots not yet removed: `done` frees a slot it
    /// found through [`HANDED_OUT`] at once, and removes the entries in
    /// groups (see [`ItemTable::warm`]). Until then an entry points at a
    /// free or reused slot; lookups compare the slot's item, so it matches
    /// nothing (or, if the slot was reused by the same item, that item).
    unlinked: Vec<(u32, SlotIdx)>,
}

impl<T: QueueItem> State<T> {
    /// Adds `item` (to be ready at `ready_at`, nanoseconds since the epoch);
    /// returns whom to wake and the item if an equal one was already there
    /// (to drop once the lock is released).
    fn add(&mut self, item: T, priority: i32, ready_at: u64, now: u64) -> (Wake, Option<T>) {
        let tag = tag_of(&self.hasher, &item);
        self.add_tagged(item, tag, priority, ready_at, now)
    }

    /// [`add`](Self::add) of an item whose tag is known.
    fn add_tagged(
        &mut self,
        item: T,
        tag: u32,
        priority: i32,
        ready_at: u64,
        now: u64,
    ) -> (Wake, Option<T>) {
        let slots = &self.q.slots;
        let (idx, duplicate) = match self
            .items
            .probe(tag, |i| slots[i as usize].key.as_ref() == Some(&item))
        {
            Probe::Found(_, idx) => (idx, Some(item)),
            Probe::Vacant(pos) => {
                let idx = self.q.alloc_slot(item, tag);
                self.items.insert_at(pos, idx, tag);
                (idx, None)
            }
        };
        (self.q.add(idx, priority, ready_at, now), duplicate)
    }

    /// Applies the adds waiting in `inbox`, in order, as added now. After
    /// shutdown they are dropped (an add that raced with shutdown is
    /// ignored, as if it came after it).
    fn apply_inbox(&mut self, inbox: &Inbox<T>) -> Wake {
        if !inbox.pending.load(Ordering::Acquire) {
            return Wake::Nobody;
        }
        self.apply_inbox_locked(inbox)
    }

    /// [`apply_inbox`](Self::apply_inbox) without the look at
    /// [`Inbox::pending`] first: the inbox's lock orders this look after
    /// the caller's earlier writes (see [`publish`](Self::publish)).
    fn apply_inbox_locked(&mut self, inbox: &Inbox<T>) -> Wake {
        let (mut batch, mut dones) = {
            let mut items = inbox.items.lock();
            if items.is_empty() {
                return Wake::Nobody;
            }
            inbox.pending.store(false, Ordering::Relaxed);
            inbox.dones_pending.store(false, Ordering::Relaxed);
            (
                std::mem::replace(&mut items.adds, std::mem::take(&mut self.spare)),
                std::mem::replace(&mut items.dones, std::mem::take(&mut self.spare_dones)),
            )
        };
        let mut wake = Wake::Nobody;
        if self.shutting_down {
            // Adds that raced with shutdown are ignored; the dones count.
            batch.clear();
        }
        let mut dones_iter = dones.drain(..).peekable();
        if !batch.is_empty() {
            let now = Instant::now();
            // Items whose time came go first: ready queues are FIFO.
            if !self.q.delayed.is_empty() {
                wake = self.q.promote_due(now);
            }
            let now = self.q.nanos(now);
            // With many items waiting the table is larger than the cache:
            // read the table lines of each group of items before adding
            // them, so that their misses overlap.
            let mut tags = std::mem::take(&mut self.tags);
            tags.clear();
            tags.extend(batch.iter().map(|item| tag_of(&self.hasher, item)));
            for (i, item) in batch.drain(..).enumerate() {
                while let Some(done) = dones_iter.next_if(|d| d.after_adds <= i) {
                    wake = wake.max(self.apply_deferred_done(done));
                }
                if i % GROUP == 0 {
                    let group = &tags[i..tags.len().min(i + GROUP)];
                    self.items.warm(group.iter().copied());
                }
                wake = wake.max(self.add_tagged(item, tags[i], 0, now, now).0);
            }
            self.tags = tags;
        }
        for done in dones_iter {
            wake = wake.max(self.apply_deferred_done(done));
        }
        self.spare = batch;
        self.spare_dones = dones;
        wake
    }

    /// Applies a `done` left in the inbox.
    fn apply_deferred_done(&mut self, done: DeferredDone<T>) -> Wake {
        let at = done.at;
        self.done(&done.item, done.hints, || at.unwrap_or_else(Instant::now))
            .0
    }

    /// The queue ran dry (a getter parks): gives back the room a burst of
    /// items took (the item table, the slots, the ready lanes and the inbox
    /// buffers), which is kept while items flow so that a queue refilled
    /// after each batch does not allocate and fault in fresh memory each
    /// time.
    fn shrink_idle(&mut self) {
        if !self.unlinked.is_empty() {
            self.items.remove_all(&self.unlinked);
            self.unlinked.clear();
        }
        self.items.shrink();
        let q = &mut self.q;
        if q.slots.len() > IDLE_KEEP_CAPACITY && q.free.len() == q.slots.len() {
            q.slots.clear();
            q.free.clear();
            q.free.shrink_to(IDLE_KEEP_CAPACITY);
        }
        q.ready.shrink_to(IDLE_KEEP_CAPACITY);
        if self.spare.capacity() > IDLE_KEEP_CAPACITY {
            self.spare = Vec::new();
        }
        if self.spare_dones.capacity() > IDLE_KEEP_CAPACITY {
            self.spare_dones = Vec::new();
        }
        if self.tags.capacity() > IDLE_KEEP_CAPACITY {
            self.tags = Vec::new();
        }
    }

    /// Ends a critical section that may have parked, woken or released
    /// getters: tells adders whether they must wake one
    /// ([`Inbox::wake_needed`]). When they must, it then looks at the inbox
    /// once more (after setting the flag, under the inbox lock): an add
    /// that pushed before that look and did not see the flag is applied
    /// here, and a getter woken for it; an add that pushes after it sees
    /// the flag. No add is left in the inbox while getters sleep.
    fn publish(&mut self, inbox: &Inbox<T>) -> Wakeups {
        let mut wakeups = Wakeups::None;
        loop {
            let needed = self.waiters.needs_wake();
            if inbox.wake_needed.load(Ordering::Relaxed) != needed {
                inbox.wake_needed.store(needed, Ordering::Relaxed);
            }
            if !needed {
                return wakeups;
            }
            let wake = self.apply_inbox_locked(inbox);
            if !self.q.ready.is_empty() {
                wakeups.merge(self.wakeups(wake.max(Wake::One)));
            } else if wake == Wake::All {
                wakeups.merge(self.wakeups(wake));
            } else {
                return wakeups;
            }
        }
    }

    /// The getters to wake for `wake`.
    fn wakeups(&mut self, wake: Wake) -> Wakeups {
        match wake {
            Wake::Nobody => Wakeups::None,
            Wake::One => self.waiters.wake_one(),
            Wake::All => self.waiters.wake_all(),
        }
    }

    fn promote_due(&mut self, now: Instant) -> Wake {
        self.q.promote_due(now)
    }

    /// Hands out the first ready item and marks it processing. The queue
    /// keeps a clone of it, to recognise adds and `done` of the item while
    /// it is processed; the clone is made here, on the worker's thread,
    /// which is also the thread that frees it at `done`.
    fn pop_ready(&mut self, now: impl Fn() -> Instant) -> Option<(T, SlotIdx)> {
        let Queues { ready, slots, .. } = &mut self.q;
        let idx = ready.pop_front(|idx, key| {
            let slot = &mut slots[*idx as usize];
            if slot.place != Place::Ready || slot.seq != key.seq {
                return false;
            }
            slot.place = Place::Nowhere;
            slot.processing = true;
            true
        })?;
        let slot = &mut self.q.slots[idx as usize];
        let item = slot.key.as_mut().map(|key| {
            let copy = key.clone();
            std::mem::replace(key, copy)
        })?;
        self.q.processing += 1;
        if let Some(m) = &mut self.q.metrics {
            m.get(&item, now());
        }
        Some((item, idx))
    }

    /// Marks `item` as processed (`hints`: slots it may be in; `now`: the
    /// time for the metrics); returns whom to wake and the item's copy if
    /// the queue released it (to drop once the lock is released).
    fn done(&mut self, item: &T, hints: Hints, now: impl FnOnce() -> Instant) -> (Wake, Option<T>) {
        let hinted = hints.iter().find(|&idx| {
            self.q
                .slots
                .get(idx as usize)
                .is_some_and(|slot| slot.processing && slot.key.as_ref() == Some(item))
        });
        let (idx, pos) = match hinted {
            Some(idx) => (idx, None),
            None => {
                let tag = tag_of(&self.hasher, item);
                let slots = &self.q.slots;
                let Probe::Found(pos, idx) = self
                    .items
                    .probe(tag, |i| slots[i as usize].key.as_ref() == Some(item))
                else {
                    return (Wake::Nobody, None);
                };
                (idx, Some(pos))
            }
        };
        let q = &mut self.q;
        let mut wake = Wake::Nobody;
        let slot = &mut q.slots[idx as usize];
        if slot.processing {
            slot.processing = false;
            let parked = slot.place == Place::Parked;
            q.processing -= 1;
            if let Some(m) = &mut q.metrics {
                m.done(item, now());
            }
            if parked {
                q.parked -= 1;
                q.push_ready(idx);
                wake = Wake::One;
            }
        }
        if self.shutting_down && self.drained() {
            self.drained_signal = true;
        }
        let q = &mut self.q;
        let slot = &q.slots[idx as usize];
        if slot.place == Place::Nowhere && !slot.processing {
            match pos {
                Some(pos) => self.items.remove_at(pos),
                None => {
                    self.unlinked.push((slot.tag, idx));
                    if self.unlinked.len() >= GROUP {
                        self.items.remove_all(&self.unlinked);
                        self.unlinked.clear();
                    }
                }
            }
            (wake, q.free_slot(idx))
        } else {
            (wake, None)
        }
    }

    /// Nothing is waiting to be handed out and nothing is being processed.
    fn drained(&self) -> bool {
        self.q.processing == 0 && self.q.ready.is_empty() && self.q.parked == 0
    }

    /// Marks the queue as shutting down, after applying the adds in
    /// `inbox` (they were accepted before the shutdown).
    fn begin_shut_down(&mut self, inbox: &Inbox<T>, drain: bool) {
        let _ = self.apply_inbox(inbox);
        self.shutting_down = true;
        self.drain = drain;
        // Delayed items never become ready after shutdown (client-go stops
        // its waiting loop); parked items still come back at `done`.
        let delayed = std::mem::take(&mut self.q.delayed);
        if !delayed.is_empty() {
            tracing::debug!(
                dropped = delayed.len(),
                "work queue shutting down: dropping items waiting for a later time"
            );
        }
        for ((_, seq), idx) in delayed {
            let slot = &mut self.q.slots[idx as usize];
            if slot.place != Place::Delayed || slot.seq != seq {
                continue;
            }
            slot.place = Place::Nowhere;
            if !slot.processing {
                let tag = slot.tag;
                self.items.remove_slot(idx, tag);
                self.q.free_slot(idx);
            }
        }
    }
}

/// The queue's lock, held (see [`Inner::lock`]). Releasing it wakes
/// `shut_down_with_drain` if a `done` drained the queue, then applies the
/// `done` calls deferred while it was held ([`Inner::after_unlock`]).
struct Locked<'a, T: QueueItem> {
    inner: &'a Inner<T>,
    /// Always `Some` until dropped.
    st: Option<std::sync::MutexGuard<'a, State<T>>>,
}

impl<T: QueueItem> Deref for Locked<'_, T> {
    type Target = State<T>;

    fn deref(&self) -> &State<T> {
        match &self.st {
            Some(st) => st,
            None => unreachable!("the guard is held until dropped"),
        }
    }
}

impl<T: QueueItem> DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut State<T> {
        match &mut self.st {
            Some(st) => st,
            None => unreachable!("the guard is held until dropped"),
        }
    }
}

impl<T: QueueItem> Drop for Locked<'_, T> {
    fn drop(&mut self) {
        let Some(st) = self.st.take() else {
            return;
        };
        self.inner.unlock(st);
        self.inner.after_unlock();
    }
}

struct Inner<T> {
    state: Mutex<State<T>>,
    /// Calls not yet applied: plain adds of queues without metrics
    /// (`use_inbox`: their adds need no timestamp of their own), and `done`
    /// calls that found the lock taken (all queues).
    inbox: Inbox<T>,
    use_inbox: bool,
    /// Mirrors `State::shutting_down` for lock-free checks.
    shutting_down: AtomicBool,
    /// Wakes `shut_down_with_drain`.
    drained: Notify,
    /// Stops the metrics task (also signalled when the queue is dropped).
    stop: Arc<Notify>,
    limiter: Box<dyn RateLimiter<T>>,
    retries: Option<Box<dyn CounterMetric>>,
    name: Option<String>,
}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        self.stop.notify_one();
    }
}

impl<T: QueueItem> Inner<T> {
    /// This queue's identity in [`HANDED_OUT`] hints (its address: a
    /// hint left by a dropped queue at the same address fails the check
    /// under the lock).
    fn id(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }

    /// Takes the queue's lock; releasing it runs
    /// [`after_unlock`](Self::after_unlock).
    fn lock(&self) -> Locked<'_, T> {
        Locked {
            inner: self,
            st: Some(self.state.lock()),
        }
    }

    /// [`lock`](Self::lock) if the lock is free now.
    fn try_lock(&self) -> Option<Locked<'_, T>> {
        let st = self.state.try_lock()?;
        Some(Locked {
            inner: self,
            st: Some(st),
        })
    }

    /// Releases the lock, then wakes `shut_down_with_drain` if a `done`
    /// drained the queue under it.
    fn unlock(&self, mut st: std::sync::MutexGuard<'_, State<T>>) {
        let drained = std::mem::take(&mut st.drained_signal);
        drop(st);
        if drained {
            self.drained.notify_waiters();
        }
    }

    /// Applies the calls waiting in the inbox: adds, and `done` calls that
    /// found the lock taken (first thing under the lock, so that each call
    /// sees the calls that returned before it).
    fn apply_inbox(&self, st: &mut State<T>) -> Wake {
        st.apply_inbox(&self.inbox)
    }

    /// Run by every holder of the lock once it released it, and by a `done`
    /// that deferred itself: applies the deferred `done` calls waiting in
    /// the inbox, unless the lock is taken again (its holder then does it
    /// when it releases the lock).
    ///
    /// No deferred `done` is left behind: a `done` sets
    /// [`Inbox::dones_pending`], then (after a full fence) tries the lock;
    /// a holder releases the lock, then (after a full fence) reads the
    /// flag. Of two such threads at least one sees the other's write: the
    /// `done`'s try finds the lock free, or the holder finds the flag set.
    fn after_unlock(&self) {
        loop {
            fence(Ordering::SeqCst);
            if !self.inbox.dones_pending.load(Ordering::Relaxed) {
                return;
            }
            let Some(mut st) = self.state.try_lock() else {
                return;
            };
            let wake = st.apply_inbox_locked(&self.inbox);
            let wakeups = self.wakeups(&mut st, wake);
            self.unlock(st);
            wakeups.wake();
        }
    }

    /// The wakes for `wake` plus those [`State::publish`] finds, to call
    /// once the lock is released.
    fn wakeups(&self, st: &mut State<T>, wake: Wake) -> Wakeups {
        let mut wakeups = st.wakeups(wake);
        // Nothing to publish while no getter waits for a wake and adders
        // already know it (the common case while workers are busy).
        if self.use_inbox
            && (st.waiters.needs_wake() || self.inbox.wake_needed.load(Ordering::Relaxed))
        {
            wakeups.merge(st.publish(&self.inbox));
        }
        wakeups
    }

    /// An add found a getter parked with no wake in flight: apply the inbox
    /// and wake one.
    fn wake_parked(&self) {
        let wakeups = {
            let mut st = self.lock();
            let wake = self.apply_inbox(&mut st);
            self.wakeups(&mut st, wake)
        };
        wakeups.wake();
    }

    /// The metrics updater's tick; false once the queue shuts down.
    fn metrics_tick(&self) -> bool {
        let wakeups = {
            let mut st = self.lock();
            if st.shutting_down {
                return false;
            }
            let now = Instant::now();
            let wake = self.apply_inbox(&mut st).max(st.promote_due(now));
            if let Some(m) = &st.q.metrics {
                m.update_unfinished_work(now);
            }
            self.wakeups(&mut st, wake)
        };
        wakeups.wake();
        true
    }
}

/// One [`WorkQueue::get`] call: its place among the parked getters and its
/// timer. Dropping it (a cancelled `get`) leaves the waiters and passes on
/// a wake it received.
struct Getter<'a, T: QueueItem> {
    inner: &'a Inner<T>,
    /// Set once the getter parks.
    id: Option<WaiterId>,
    /// Made when the getter first waits for a delayed item.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T: QueueItem> Getter<'_, T> {
    fn poll_get(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let inner = self.inner;
        loop {
            let mut st = inner.lock();
            if let Some(id) = self.id {
                // A wake this getter received is consumed here: if it leaves
                // items ready, it wakes the next getter below.
                st.waiters.running(id);
            }
            if st.waiters.should_yield() {
                // A getter woken for the items this one keeps taking has not
                // run for a while: it may be queued behind this task on the
                // same thread (tokio runs a task woken by the running one
                // next, but only once that one yields). Let it run.
                let wakeups = inner.wakeups(&mut st, Wake::Nobody);
                drop(st);
                wakeups.wake();
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let mut wake = inner.apply_inbox(&mut st);
            if !st.q.delayed.is_empty() {
                wake = wake.max(st.promote_due(Instant::now()));
            }
            if let Some((item, idx)) = st.pop_ready(Instant::now) {
                remember_handed_out(inner.id(), idx);
                if let Some(id) = self.id.take() {
                    st.waiters.leave(id);
                }
                st.waiters.took_item();
                if !st.q.ready.is_empty() {
                    // Items this getter did not take are for the others.
                    wake = wake.max(Wake::One);
                }
                let wakeups = inner.wakeups(&mut st, wake);
                drop(st);
                wakeups.wake();
                return Poll::Ready(Some(item));
            }
            if st.shutting_down {
                if let Some(id) = self.id.take() {
                    st.waiters.leave(id);
                }
                let wakeups = inner.wakeups(&mut st, wake);
                drop(st);
                wakeups.wake();
                return Poll::Ready(None);
            }
            let id = match self.id {
                Some(id) => id,
                None => *self.id.insert(st.waiters.new_id()),
            };
            st.waiters.park(id, cx.waker());
            if st.q.ready.is_empty() && st.q.processing == 0 {
                st.shrink_idle();
            }
            let deadline =
                st.q.delayed
                    .first_key_value()
                    .map(|((t, _), _)| st.q.instant(*t));
            let wakeups = inner.wakeups(&mut st, wake);
            drop(st);
            wakeups.wake();
            let Some(deadline) = deadline else {
                return Poll::Pending;
            };
            let sleep = match &mut self.sleep {
                Some(sleep) => {
                    if sleep.deadline() != deadline {
                        sleep.as_mut().reset(deadline);
                    }
                    sleep
                }
                None => self
                    .sleep
                    .insert(Box::pin(tokio::time::sleep_until(deadline))),
            };
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            // The deadline passed: promote the due items.
        }
    }
}

impl<T: QueueItem> Drop for Getter<'_, T> {
    fn drop(&mut self) {
        let Some(id) = self.id else {
            return;
        };
        let wakeups = {
            let mut st = self.inner.lock();
            let woken = st.waiters.running(id);
            st.waiters.leave(id);
            let wake = if woken && !st.q.ready.is_empty() {
                Wake::One
            } else {
                Wake::Nobody
            };
            self.inner.wakeups(&mut st, wake)
        };
        wakeups.wake();
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

    /// Adds `item` once `delay` has passed; a zero delay adds it now.
    ///
    /// If the item is already waiting, the earlier of the two ready times
    /// wins. Ignored after shutdown; items still waiting for their time when
    /// the queue shuts down are dropped.
    pub fn add_after(&self, item: T, delay: Duration) {
        if self.shutting_down() {
            return;
        }
        self.count_retry();
        self.insert(item, 0, delay);
    }

    /// Adds `item` after the wait the rate limiter gives it
    /// (`add_after(item, limiter.when(&item))`); returns that wait (`None`
    /// when the queue is shutting down and the item was dropped), so that
    /// a caller can say when the item comes back.
    pub fn add_rate_limited(&self, item: T) -> Option<Duration> {
        if self.shutting_down() {
            return None;
        }
        let delay = self.inner.limiter.when(&item);
        self.count_retry();
        self.insert(item, 0, delay);
        Some(delay)
    }

    /// Adds `item` with a delay, rate limiting and a priority.
    ///
    /// The item waits the longer of `opts.after` and (if
    /// `opts.rate_limited`) the rate limiter's wait. If the item is already
    /// waiting, it keeps the higher of the two priorities and the earlier of
    /// the two ready times.
    pub fn add_with_opts(&self, item: T, opts: AddOpts) {
        if self.shutting_down() {
            return;
        }
        let mut delay = opts.after.unwrap_or(Duration::ZERO);
        if opts.rate_limited {
            delay = delay.max(self.inner.limiter.when(&item));
        }
        if opts.after.is_some() || opts.rate_limited {
            self.count_retry();
        }
        self.insert(item, opts.priority, delay);
    }

    /// Stops rate limiting `item`: its next failure counts as the first.
    /// Call it when processing succeeded (or was given up).
    pub fn forget(&self, item: &T) {
        self.inner.limiter.forget(item);
    }

    /// How many rate-limited retries of `item` the rate limiter recorded.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.inner.limiter.num_requeues(item)
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

    /// Shuts the queue down now: later adds are ignored, items waiting for a
    /// later time are dropped, and [`get`](Self::get) hands out the items
    /// that are ready, then returns `None`. Does not wait for workers.
    ///
    /// Also ends a [`shut_down_with_drain`](Self::shut_down_with_drain) that
    /// is waiting.
    pub fn shut_down(&self) {
        self.begin_shut_down(false);
        self.after_shut_down();
    }

    /// Shuts the queue down like [`shut_down`](Self::shut_down), then waits
    /// until every ready item has been handed out and every handed-out item
    /// is done, including items added again while being processed (which
    /// `done` hands out once more).
    ///
    /// Workers must keep calling `get` and `done`, or this waits forever;
    /// a call to `shut_down` ends the wait.
    pub async fn shut_down_with_drain(&self) {
        self.begin_shut_down(true);
        self.after_shut_down();
        let inner = &*self.inner;
        loop {
            let notified = inner.drained.notified();
            let mut notified = std::pin::pin!(notified);
            let (wakeups, finished) = {
                let mut st = inner.lock();
                // `done` calls deferred before this look count.
                let wake = inner.apply_inbox(&mut st);
                let finished = !st.drain || st.drained();
                if !finished {
                    notified.as_mut().enable();
                }
                (inner.wakeups(&mut st, wake), finished)
            };
            wakeups.wake();
            if finished {
                return;
            }
            notified.await;
        }
    }

    /// Whether the queue is shutting down.
    pub fn shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::Acquire)
    }

    /// Marks the queue as shutting down and wakes every parked getter.
    fn begin_shut_down(&self, drain: bool) {
        let inner = &*self.inner;
        let wakeups = {
            let mut st = inner.lock();
            st.begin_shut_down(&inner.inbox, drain);
            inner.wakeups(&mut st, Wake::All)
        };
        wakeups.wake();
    }

    fn after_shut_down(&self) {
        let inner = &*self.inner;
        inner.shutting_down.store(true, Ordering::Release);
        tracing::debug!(
            queue = inner.name.as_deref().unwrap_or(""),
            "work queue shutting down"
        );
        inner.drained.notify_waiters();
        inner.stop.notify_one();
    }

    fn count_retry(&self) {
        if let Some(r) = &self.inner.retries {
            r.inc();
        }
    }

    fn insert(&self, item: T, priority: i32, delay: Duration) {
        let now = Instant::now();
        let ready_at = if delay.is_zero() {
            now
        } else {
            now.checked_add(delay.min(FAR_FUTURE)).unwrap_or(now)
        };
        let inner = &*self.inner;
        let (wakeups, _duplicate) = {
            let mut st = inner.lock();
            if st.shutting_down {
                return;
            }
            // Earlier adds first, then items whose time came: ready queues
            // are FIFO, so both must be queued before this one.
            let mut wake = inner.apply_inbox(&mut st);
            if !st.q.delayed.is_empty() {
                wake = wake.max(st.promote_due(now));
            }
            let (ready_at, now) = (st.q.nanos(ready_at), st.q.nanos(now));
            let (added, duplicate) = st.add(item, priority, ready_at, now);
            (inner.wakeups(&mut st, wake.max(added)), duplicate)
        };
        wakeups.wake();
    }
}

/// Configures a [`WorkQueue`].
///
/// ```
/// use std::time::Duration;
/// use kcache_workqueue::{WorkQueue, default_item_based_rate_limiter};
///
/// let queue: WorkQueue<String> = WorkQueue::builder()
///     .rate_limiter(default_item_based_rate_limiter())
///     .priority_aging(Duration::from_millis(500))
///     .build()
///     .unwrap();
/// assert!(queue.is_empty());
/// ```
pub struct WorkQueueBuilder<T> {
    name: Option<String>,
    limiter: Option<Box<dyn RateLimiter<T>>>,
    metrics: Option<Arc<dyn MetricsProvider>>,
    aging: Option<Duration>,
    update_period: Duration,
}

impl<T> fmt::Debug for WorkQueueBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueueBuilder")
            .field("name", &self.name)
            .field("custom_rate_limiter", &self.limiter.is_some())
            .field("metrics", &self.metrics.is_some())
            .field("aging", &self.aging)
            .field("update_period", &self.update_period)
            .finish()
    }
}

/// The defaults: unnamed, [`default_controller_rate_limiter`], priority
/// aging of [`DEFAULT_PRIORITY_AGING`], no metrics.
impl<T> Default for WorkQueueBuilder<T> {
    fn default() -> Self {
        Self {
            name: None,
            limiter: None,
            metrics: None,
            aging: Some(DEFAULT_PRIORITY_AGING),
            update_period: DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD,
        }
    }
}

impl<T: QueueItem> WorkQueueBuilder<T> {
    /// Names the queue: the value of the metrics' `name` label. Only a
    /// named queue (with a provider) reports metrics.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.name = (!name.is_empty()).then_some(name);
        self
    }

    /// The rate limiter of [`WorkQueue::add_rate_limited`].
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<T> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// Where a named queue reports its metrics.
    pub fn metrics(mut self, provider: impl MetricsProvider + 'static) -> Self {
        self.metrics = Some(Arc::new(provider));
        self
    }

    /// Every `interval` an item waits (from its ready time) is worth one
    /// priority level, so that lower priorities never starve. See the
    /// [crate documentation](crate#priorities).
    pub fn priority_aging(mut self, interval: Duration) -> Self {
        self.aging = Some(interval);
        self
    }

    /// Strict priorities: a lower priority item is handed out only when no
    /// higher priority item is ready (it can starve).
    pub fn strict_priority(mut self) -> Self {
        self.aging = None;
        self
    }

    /// How often the unfinished-work gauges are recomputed (default 500 ms).
    pub fn unfinished_work_update_period(mut self, period: Duration) -> Self {
        self.update_period = period;
        self
    }

    /// Builds the queue. A named queue with metrics starts its metrics
    /// updater task, which needs a tokio runtime; it ends when the queue
    /// shuts down or is dropped.
    pub fn build(self) -> Result<WorkQueue<T>, BuildError> {
        if self.aging == Some(Duration::ZERO) {
            return Err(BuildError::ZeroAgingInterval);
        }
        if self.update_period.is_zero() {
            return Err(BuildError::ZeroUpdatePeriod);
        }
        let provider = match (&self.name, &self.metrics) {
            (Some(_), Some(p)) if p.enabled() => Some(Arc::clone(p)),
            _ => None,
        };
        let runtime = match provider {
            Some(_) => {
                Some(tokio::runtime::Handle::try_current().map_err(|_| BuildError::NoRuntime)?)
            }
            None => None,
        };
        let period = self.update_period.min(FAR_FUTURE);
        let queue = self.build_with(provider);
        if let Some(rt) = runtime {
            let weak = Arc::downgrade(&queue.inner);
            let stop = Arc::clone(&queue.inner.stop);
            // Created here so that ticks count from the queue's creation.
            let ticker = {
                let _guard = rt.enter();
                let mut ticker = tokio::time::interval_at(
                    Instant::now()
                        .checked_add(period)
                        .unwrap_or_else(Instant::now),
                    period,
                );
                ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
                ticker
            };
            rt.spawn(metrics_loop(weak, stop, ticker));
        }
        Ok(queue)
    }

    /// Builds without metrics (cannot fail).
    fn build_unnamed(self) -> WorkQueue<T> {
        self.build_with(None)
    }

    fn build_with(self, provider: Option<Arc<dyn MetricsProvider>>) -> WorkQueue<T> {
        let name = self.name;
        let (metrics, retries) = match (&provider, &name) {
            (Some(p), Some(n)) => (
                Some(QueueMetrics::new(p.as_ref(), n)),
                Some(p.new_retries_metric(n)),
            ),
            _ => (None, None),
        };
        let limiter = self
            .limiter
            .unwrap_or_else(|| Box::new(default_controller_rate_limiter()));
        let aging_nanos = self.aging.map(|a| a.as_nanos() as i128);
        let use_inbox = metrics.is_none();
        WorkQueue {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    items: ItemTable::default(),
                    hasher: RandomState::default(),
                    spare: Vec::new(),
                    spare_dones: Vec::new(),
                    drained_signal: false,
                    tags: Vec::new(),
                    unlinked: Vec::with_capacity(GROUP),
                    q: Queues {
                        ready: ReadyQueue::new(aging_nanos.is_none()),
                        delayed: BTreeMap::new(),
                        slots: Slab::default(),
                        free: Vec::new(),
                        seq: 0,
                        parked: 0,
                        processing: 0,
                        aging_nanos,
                        epoch: Instant::now(),
                        metrics,
                    },
                    waiters: Waiters::default(),
                    shutting_down: false,
                    drain: false,
                }),
                inbox: Inbox::new(),
                use_inbox,
                shutting_down: AtomicBool::new(false),
                drained: Notify::new(),
                stop: Arc::new(Notify::new()),
                limiter,
                retries,
                name,
            }),
        }
    }
}

/// Recomputes the unfinished-work gauges (and moves due delayed items, so
/// that the depth gauge is current even while every worker is busy) until
/// the queue shuts down or is dropped.
async fn metrics_loop<T: QueueItem>(
    weak: Weak<Inner<T>>,
    stop: Arc<Notify>,
    mut ticker: tokio::time::Interval,
) {
    loop {
        tokio::select! {
            _ = stop.notified() => return,
            _ = ticker.tick() => {}
        }
        let Some(inner) = weak.upgrade() else {
            return;
        };
        if !inner.metrics_tick() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    //! `done` calls deferred because the lock was taken: held here by the
    //! test thread while another thread calls `done`, so that the deferred
    //! path runs every time (the stress tests reach it only by chance).

    use super::*;

    /// Calls `f` on another thread while this thread holds `queue`'s lock;
    /// the lock is released (running [`Inner::after_unlock`]) on return.
    fn while_locked(queue: &WorkQueue<String>, f: impl FnOnce(WorkQueue<String>) + Send) {
        let held = queue.inner.lock();
        std::thread::scope(|s| {
            let other = queue.clone();
            s.spawn(move || f(other)).join().unwrap();
        });
        assert!(
            queue.inner.inbox.dones_pending.load(Ordering::SeqCst),
            "the done was not deferred"
        );
        drop(held);
    }

    /// The queue's counts as the lock shows them, without applying the
    /// inbox first (as every public call does).
    fn raw_counts(queue: &WorkQueue<String>) -> (usize, usize) {
        let st = queue.inner.state.lock();
        (st.q.ready.len(), st.q.processing)
    }

    fn processing(queue: &WorkQueue<String>, item: &str) {
        queue.add(item.to_string());
        let got = queue.done_then_try_get_for_test();
        assert_eq!(got.as_deref(), Some(item));
    }

    impl WorkQueue<String> {
        /// `get` of a ready item, without a runtime.
        fn done_then_try_get_for_test(&self) -> Option<String> {
            let mut st = self.inner.lock();
            let wake = self.inner.apply_inbox(&mut st);
            let (item, idx) = st.pop_ready(Instant::now)?;
            remember_handed_out(self.inner.id(), idx);
            let wakeups = self.inner.wakeups(&mut st, wake);
            drop(st);
            wakeups.wake();
            Some(item)
        }
    }

    #[test]
    fn deferred_done_is_applied_when_the_holder_releases_the_lock() {
        for queue in [WorkQueue::new(), metrics_queue()] {
            assert_eq!(queue.inner.use_inbox, queue.name().is_none());
            processing(&queue, "a");
            // Added again while processed: parked until its done.
            queue.add("a".to_string());
            while_locked(&queue, |q| q.done(&"a".to_string()));
            // No public call since: the release itself applied the done.
            assert_eq!(raw_counts(&queue), (1, 0));
            assert!(!queue.inner.inbox.dones_pending.load(Ordering::SeqCst));
        }
    }

    #[tokio::test]
    async fn deferred_done_wakes_a_parked_getter() {
        let queue = WorkQueue::new();
        processing(&queue, "a");
        queue.add("a".to_string());
        let getter = tokio::spawn({
            let q = queue.clone();
            async move { q.get().await }
        });
        // Let the getter park.
        while !queue.inner.state.lock().waiters.needs_wake() {
            tokio::task::yield_now().await;
        }
        while_locked(&queue, |q| q.done(&"a".to_string()));
        let got = tokio::time::timeout(Duration::from_secs(10), getter)
            .await
            .expect("the parked getter was not woken")
            .unwrap();
        assert_eq!(got.as_deref(), Some("a"));
    }

    #[tokio::test]
    async fn deferred_done_ends_a_drain() {
        let queue = WorkQueue::new();
        processing(&queue, "a");
        let drain = tokio::spawn({
            let q = queue.clone();
            async move { q.shut_down_with_drain().await }
        });
        while !queue.shutting_down() {
            tokio::task::yield_now().await;
        }
        // Let the drain register for the drained signal.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        while_locked(&queue, |q| q.done(&"a".to_string()));
        tokio::time::timeout(Duration::from_secs(10), drain)
            .await
            .expect("the drain did not see the deferred done")
            .unwrap();
    }

    #[test]
    fn deferred_dones_keep_their_place_among_the_adds() {
        // done, then add again: the item is queued where it was added,
        // ahead of later adds.
        let queue = WorkQueue::new();
        processing(&queue, "a");
        while_locked(&queue, |q| {
            q.done(&"a".to_string());
            q.add("a".to_string());
            q.add("b".to_string());
        });
        assert_eq!(queue.done_then_try_get_for_test().as_deref(), Some("a"));
        assert_eq!(queue.done_then_try_get_for_test().as_deref(), Some("b"));

        // add again, then done: the item comes back at its done, behind
        // the adds before it.
        let queue = WorkQueue::new();
        processing(&queue, "a");
        while_locked(&queue, |q| {
            q.add("a".to_string());
            q.add("b".to_string());
            q.done(&"a".to_string());
        });
        assert_eq!(queue.done_then_try_get_for_test().as_deref(), Some("b"));
        assert_eq!(queue.done_then_try_get_for_test().as_deref(), Some("a"));
    }

    #[test]
    fn deferred_done_after_shutdown_still_counts() {
        let queue = WorkQueue::new();
        processing(&queue, "a");
        queue.shut_down();
        while_locked(&queue, |q| q.done(&"a".to_string()));
        assert_eq!(raw_counts(&queue), (0, 0));
    }

    fn metrics_queue() -> WorkQueue<String> {
        WorkQueue::builder()
            .name("deferred")
            .metrics(crate::NoopMetricsProvider)
            .build_with_metrics_for_test()
    }

    impl WorkQueueBuilder<String> {
        /// `build` without the metrics task (which needs a runtime).
        fn build_with_metrics_for_test(mut self) -> WorkQueue<String> {
            let provider = self.metrics.take();
            self.build_with(provider)
        }
    }
}
