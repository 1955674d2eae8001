//! The state every clone of a [`WorkQueue`](super::WorkQueue) shares,
//! behind its `Arc`: [`Inner`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
