//! Adds with a delay, a rate limit or a priority (client-go's
//! `delaying_queue.go` and `rate_limiting_queue.go`), the rate limiter's
//! `forget` and `num_requeues`, and the add through the queue's lock they
//! (and a plain add of a queue with metrics) share.

use std::time::Duration;

use tokio::time::Instant;

use super::{AddOpts, FAR_FUTURE, QueueItem, WorkQueue};

impl<T: QueueItem> WorkQueue<T> {
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

    fn count_retry(&self) {
        if let Some(r) = &self.inner.retries {
            r.inc();
        }
    }

    pub(super) fn insert(&self, item: T, priority: i32, delay: Duration) {
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
