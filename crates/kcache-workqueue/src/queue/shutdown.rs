//! Shutdown: [`WorkQueue::shut_down`] drops the items waiting for a later
//! time and lets `get` hand out the ready ones;
//! [`WorkQueue::shut_down_with_drain`] also waits until they are done.

use std::sync::atomic::Ordering;

use super::inbox::Inbox;
use super::queues::{Place, Wake};
use super::state::State;
use super::{QueueItem, WorkQueue};

impl<T: QueueItem> WorkQueue<T> {
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
}

impl<T: QueueItem> State<T> {
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
