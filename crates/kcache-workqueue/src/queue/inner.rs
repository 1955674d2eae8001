//! The state every clone of a [`WorkQueue`](super::WorkQueue) shares,
//! behind its `Arc`: [`Inner`], and the held lock, [`Locked`], whose
//! release wakes a drain and applies deferred `done` calls.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::QueueItem;
use super::inbox::Inbox;
use super::lock::QueueLock;
use super::queues::Wake;
use super::state::State;
use crate::metrics::CounterMetric;
use crate::rate_limiter::RateLimiter;
use crate::waiters::Wakeups;

/// The shared part of a [`WorkQueue`](super::WorkQueue): the lock and what
/// it guards, the inbox, and what needs no lock.
pub(super) struct Inner<T> {
    pub(super) state: QueueLock<State<T>>,
    /// Calls not yet applied: plain adds of queues without metrics
    /// (`use_inbox`: their adds need no timestamp of their own), and `done`
    /// calls that found the lock taken (all queues).
    pub(super) inbox: Inbox<T>,
    pub(super) use_inbox: bool,
    /// Mirrors `State::shutting_down` for lock-free checks.
    pub(super) shutting_down: AtomicBool,
    /// Wakes `shut_down_with_drain`.
    pub(super) drained: Notify,
    /// Stops the metrics task (also signalled when the queue is dropped).
    pub(super) stop: Arc<Notify>,
    pub(super) limiter: Box<dyn RateLimiter<T>>,
    pub(super) retries: Option<Box<dyn CounterMetric>>,
    pub(super) name: Option<String>,
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
    ///
    /// [`HANDED_OUT`]: super::hints
    pub(super) fn id(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }

    /// Applies the calls waiting in the inbox: adds, and `done` calls that
    /// found the lock taken (first thing under the lock, so that each call
    /// sees the calls that returned before it).
    pub(super) fn apply_inbox(&self, st: &mut State<T>) -> Wake {
        st.apply_inbox(&self.inbox)
    }

    /// The wakes for `wake` plus those [`State::publish`] finds, to call
    /// once the lock is released.
    pub(super) fn wakeups(&self, st: &mut State<T>, wake: Wake) -> Wakeups {
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
    pub(super) fn wake_parked(&self) {
        let wakeups = {
            let mut st = self.lock();
            let wake = self.apply_inbox(&mut st);
            self.wakeups(&mut st, wake)
        };
        wakeups.wake();
    }

    /// The metrics updater's tick; false once the queue shuts down.
    pub(super) fn metrics_tick(&self) -> bool {
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

/// The queue's lock, held (see [`Inner::lock`]). Releasing it wakes
/// `shut_down_with_drain` if a `done` drained the queue, then applies the
/// `done` calls deferred while it was held ([`Inner::after_unlock`]).
pub(super) struct Locked<'a, T: QueueItem> {
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

impl<T: QueueItem> Inner<T> {
    /// Takes the queue's lock; releasing it runs
    /// [`after_unlock`](Self::after_unlock).
    pub(super) fn lock(&self) -> Locked<'_, T> {
        Locked {
            inner: self,
            st: Some(self.state.lock()),
        }
    }

    /// [`lock`](Self::lock) if the lock is free now.
    pub(super) fn try_lock(&self) -> Option<Locked<'_, T>> {
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
    ///
    /// [`Inbox::dones_pending`]: super::inbox::Inbox::dones_pending
    pub(super) fn after_unlock(&self) {
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
}
