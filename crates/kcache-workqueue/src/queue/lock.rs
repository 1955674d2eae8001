//! The queue's mutex, [`QueueLock`] (the held lock, whose release wakes a
//! drain and applies deferred `done` calls, is
//! [`Locked`](super::inner::Locked)).

/// The mutex of the queue's state and of its inbox (named so as not to
/// shadow `std`'s): `std`'s futex mutex, which parks a waiter after a short
/// spin. parking_lot's mutex spins longer and then calls `sched_yield`; with
/// an adder and workers on more threads than cores (a multi-threaded tokio
/// runtime plus the adding thread on 2 cores), that spinning cost a third of
/// the throughput (1M adds with 8 workers: 2.17 vs 3.08 M/s, 9 alternating
/// runs). Not poisoned by a panic (as with parking_lot): the only foreign
/// code run under the lock is a metrics provider's and a
/// [`merge`](super::WorkQueueBuilder::merge) function.
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
    pub(super) fn try_lock(&self) -> Option<std::sync::MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}
