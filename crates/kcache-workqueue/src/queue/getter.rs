//! One [`WorkQueue::get`] call: it takes a ready
//! item, or parks among the waiting getters (with a timer for the earliest
//! delayed item) until it is woken.
//!
//! [`WorkQueue::get`]: super::WorkQueue::get

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Instant;

use super::QueueItem;
use super::hints::remember_handed_out;
use super::inner::Inner;
use super::queues::Wake;
use crate::waiters::WaiterId;

/// One [`WorkQueue::get`] call: its place among the parked getters and its
/// timer. Dropping it (a cancelled `get`) leaves the waiters and passes on
/// a wake it received.
///
/// [`WorkQueue::get`]: super::WorkQueue::get
pub(super) struct Getter<'a, T: QueueItem> {
    pub(super) inner: &'a Inner<T>,
    /// Set once the getter parks.
    pub(super) id: Option<WaiterId>,
    /// Made when the getter first waits for a delayed item.
    pub(super) sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T: QueueItem> Getter<'_, T> {
    pub(super) fn poll_get(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
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
