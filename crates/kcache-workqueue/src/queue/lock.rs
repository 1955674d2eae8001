//! The queue's lock: [`QueueLock`], the mutex, and [`Locked`], the held
//! lock, whose release wakes a drain and applies deferred `done` calls.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{Ordering, fence};

use super::QueueItem;
use super::inner::Inner;
use super::state::State;

/// The mutex of the queue's state and of its inbox (named so as not to
/// shadow `std`'s): `std`'s futex mutex, which parks a waiter after a short
/// spin. parking_lot's mutex spins longer and then calls `sched_yield`; with
/// an adder and workers on more threads than cores (a multi-threaded tokio
/// runtime plus the adding thread on 2 cores), that spinning cost a third of
/// the throughput (1M adds with 8 workers: 2.17 vs 3.08 M/s, 9 alternating
/// runs). Not poisoned by a panic (as with parking_lot): the only foreign
/// code run under the lock is a metrics provider's.
pub(super) struct QueueLock<T>(std::sync::Mutex<T>);

impl<T> QueueLock<T> {
    pub(super) fn new(value: T) -> Self {
        Self(std::sync::Mutex::new(value))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, T> {
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
