//! The inbox: plain adds and `done` calls that found the queue's lock
//! taken, waiting for the next holder of the lock to apply them in order.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::time::Instant;

use super::hints::Hints;
use super::lock::QueueLock;

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
///
/// [`WorkQueue::done`]: super::WorkQueue::done
pub(super) struct Inbox<T> {
    items: QueueLock<InboxCalls<T>>,
    /// Whether `items` is not empty, written under its lock: a reader with
    /// nothing to apply (most `done` calls) looks at this flag instead of
    /// taking the lock, so it reads the adder's line instead of writing it.
    /// An add that happened before the read is seen.
    pub(super) pending: AtomicBool,
    /// Whether a deferred `done` waits in `items`, written under its lock.
    /// Whoever releases the queue's lock looks at it afterwards (see
    /// [`Inner::after_unlock`]): a deferred `done` is applied even if no
    /// other call comes (it may hand out an item added again while it was
    /// processed, or end a drain).
    ///
    /// [`Inner::after_unlock`]: super::inner::Inner::after_unlock
    pub(super) dones_pending: AtomicBool,
    /// Set while a getter is parked and no getter woken for ready items has
    /// run yet: an add must then wake one (through the queue's lock). Kept
    /// up to date under the queue's lock by [`State::publish`].
    pub(super) wake_needed: AtomicBool,
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
pub(super) struct DeferredDone<T> {
    pub(super) item: T,
    /// How many adds of the inbox were pushed before this call.
    pub(super) after_adds: usize,
    /// The calling thread's [`HANDED_OUT`] hints for this queue.
    ///
    /// [`HANDED_OUT`]: super::hints
    pub(super) hints: Hints,
    /// When the call was made, for the work-duration metric (queues with
    /// metrics only).
    pub(super) at: Option<Instant>,
}

impl<T> Inbox<T> {
    /// Takes every waiting call (adds, in order, and deferred `done`
    /// calls), leaving `spare_adds` and `spare_dones` (emptied buffers of
    /// an earlier batch) in their place; `None` when nothing waits. Clears
    /// the pending flags: the caller applies what it took under the
    /// queue's lock.
    pub(super) fn take(
        &self,
        spare_adds: &mut Vec<T>,
        spare_dones: &mut Vec<DeferredDone<T>>,
    ) -> Option<(Vec<T>, Vec<DeferredDone<T>>)> {
        let mut items = self.items.lock();
        if items.is_empty() {
            return None;
        }
        self.pending.store(false, Ordering::Relaxed);
        self.dones_pending.store(false, Ordering::Relaxed);
        Some((
            std::mem::replace(&mut items.adds, std::mem::take(spare_adds)),
            std::mem::replace(&mut items.dones, std::mem::take(spare_dones)),
        ))
    }

    pub(super) fn new() -> Self {
        Self {
            items: QueueLock::new(InboxCalls {
                adds: Vec::new(),
                dones: Vec::new(),
            }),
            pending: AtomicBool::new(false),
            dones_pending: AtomicBool::new(false),
            wake_needed: AtomicBool::new(false),
        }
    }

    /// Pushes `item`; returns whether a parked getter must be woken.
    pub(super) fn push(&self, item: T) -> bool {
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
    pub(super) fn push_done(&self, item: T, hints: Hints, at: Option<Instant>) {
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
