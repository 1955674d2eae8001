//! The getters parked in [`WorkQueue::get`](crate::WorkQueue::get), kept
//! under the queue's lock.
//!
//! At most one wake is in flight at a time for ready items: an `add` wakes a
//! parked getter only if no getter already woken for an item has run yet;
//! when that getter runs and takes an item, it wakes the next parked getter
//! if more items are ready (a chain). So a burst of adds costs one wake, not
//! one per add, and every ready item still reaches an idle getter:
//!
//! *Invariant* (under the lock): if an item is ready and a getter is parked,
//! a getter has been woken and has not run yet. Every path that ends a woken
//! getter's turn (it takes an item, finds none, or its future is dropped)
//! passes the wake on when items remain ready.

use std::collections::VecDeque;
use std::task::Waker;

/// Identifies one `get` call while it waits.
pub(crate) type WaiterId = u64;

#[derive(Debug, Default)]
pub(crate) struct Waiters {
    next_id: WaiterId,
    /// Parked getters not yet woken, in the order they parked.
    parked: VecDeque<(WaiterId, Waker)>,
    /// Getters woken by the queue that have not run since. Short: one
    /// entry, except after [`wake_all`](Self::wake_all).
    woken: Vec<WaiterId>,
    /// Items taken by running getters since a woken getter last ran.
    taken_while_woken: u32,
}

/// After this many items taken by other getters while a woken getter has
/// not run, the next getter yields once (see [`Waiters::should_yield`]).
const YIELD_AFTER_TAKES: u32 = 32;

/// Wakers to call once the lock is released.
#[derive(Debug, Default)]
pub(crate) enum Wakeups {
    #[default]
    None,
    One(Waker),
    Many(Vec<Waker>),
}

impl Wakeups {
    /// Adds `other`'s wakers to these.
    pub(crate) fn merge(&mut self, other: Wakeups) {
        if matches!(other, Wakeups::None) {
            return;
        }
        let this = std::mem::take(self);
        *self = match (this, other) {
            (Wakeups::None, w) | (w, Wakeups::None) => w,
            (Wakeups::One(a), Wakeups::One(b)) => Wakeups::Many(vec![a, b]),
            (Wakeups::One(a), Wakeups::Many(mut v)) | (Wakeups::Many(mut v), Wakeups::One(a)) => {
                v.push(a);
                Wakeups::Many(v)
            }
            (Wakeups::Many(mut a), Wakeups::Many(b)) => {
                a.extend(b);
                Wakeups::Many(a)
            }
        };
    }

    pub(crate) fn wake(self) {
        match self {
            Wakeups::None => {}
            Wakeups::One(w) => w.wake(),
            Wakeups::Many(ws) => ws.into_iter().for_each(Waker::wake),
        }
    }
}

impl Waiters {
    pub(crate) fn new_id(&mut self) -> WaiterId {
        self.next_id += 1;
        self.next_id
    }

    /// An item became ready: wakes a parked getter unless one woken earlier
    /// has not run yet (that one passes the wake on).
    pub(crate) fn wake_one(&mut self) -> Wakeups {
        if !self.woken.is_empty() {
            return Wakeups::None;
        }
        match self.parked.pop_front() {
            Some((id, waker)) => {
                self.woken.push(id);
                Wakeups::One(waker)
            }
            None => Wakeups::None,
        }
    }

    /// Wakes every parked getter (shutdown, or a timer deadline moved
    /// earlier).
    pub(crate) fn wake_all(&mut self) -> Wakeups {
        if self.parked.is_empty() {
            return Wakeups::None;
        }
        let mut wakers = Vec::with_capacity(self.parked.len());
        for (id, waker) in self.parked.drain(..) {
            self.woken.push(id);
            wakers.push(waker);
        }
        Wakeups::Many(wakers)
    }

    /// Whether a getter is parked and none woken for ready items has run
    /// yet: an item that becomes ready must then wake one.
    pub(crate) fn needs_wake(&self) -> bool {
        self.woken.is_empty() && !self.parked.is_empty()
    }

    /// A running getter took an item.
    pub(crate) fn took_item(&mut self) {
        if !self.woken.is_empty() {
            self.taken_while_woken = self.taken_while_woken.saturating_add(1);
        }
    }

    /// Whether a running getter should yield before taking another item: a
    /// getter woken for ready items has not run while others took
    /// [`YIELD_AFTER_TAKES`] items. On a tokio worker thread the woken
    /// getter may be queued behind the running task (in the slot no other
    /// thread steals from) until that task yields; without the yield, one
    /// task could take every item while the other getters stay parked.
    pub(crate) fn should_yield(&mut self) -> bool {
        if self.woken.is_empty() || self.taken_while_woken < YIELD_AFTER_TAKES {
            return false;
        }
        self.taken_while_woken = 0;
        true
    }

    /// Whether [`should_yield`](Self::should_yield) would say yes (without
    /// resetting its count): a caller that cannot yield leaves the item to
    /// `get`.
    pub(crate) fn owes_turn(&self) -> bool {
        !self.woken.is_empty() && self.taken_while_woken >= YIELD_AFTER_TAKES
    }

    /// Getter `id` runs: if the queue woke it, that wake is consumed (the
    /// caller must pass it on if it leaves items ready). Returns whether it
    /// had been woken.
    pub(crate) fn running(&mut self, id: WaiterId) -> bool {
        match self.woken.iter().position(|w| *w == id) {
            Some(i) => {
                self.woken.swap_remove(i);
                self.taken_while_woken = 0;
                true
            }
            None => false,
        }
    }

    /// Getter `id` waits (again) with `waker`. Keeps its place if it was
    /// already parked.
    pub(crate) fn park(&mut self, id: WaiterId, waker: &Waker) {
        match self.parked.iter_mut().find(|(w, _)| *w == id) {
            Some((_, old)) => old.clone_from(waker),
            None => self.parked.push_back((id, waker.clone())),
        }
    }

    /// Getter `id` stops waiting (it got an answer or was dropped).
    pub(crate) fn leave(&mut self, id: WaiterId) {
        if let Some(i) = self.parked.iter().position(|(w, _)| *w == id) {
            self.parked.remove(i);
        }
    }

    #[cfg(test)]
    fn parked_len(&self) -> usize {
        self.parked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn one_wake_in_flight_then_chain() {
        let counts: Vec<_> = (0..3)
            .map(|_| Arc::new(Count(AtomicUsize::new(0))))
            .collect();
        let mut w = Waiters::default();
        let ids: Vec<_> = counts
            .iter()
            .map(|c| {
                let id = w.new_id();
                w.park(id, &Waker::from(Arc::clone(c)));
                id
            })
            .collect();
        w.wake_one().wake();
        // Second add while the first woken getter has not run: no wake.
        assert!(matches!(w.wake_one(), Wakeups::None));
        assert_eq!(counts[0].0.load(Ordering::SeqCst), 1);
        assert_eq!(counts[1].0.load(Ordering::SeqCst), 0);
        // The woken getter runs and passes the wake on.
        assert!(w.running(ids[0]));
        w.leave(ids[0]);
        w.wake_one().wake();
        assert_eq!(counts[1].0.load(Ordering::SeqCst), 1);
        assert!(!w.running(ids[2]));
        assert_eq!(w.parked_len(), 1);
        w.wake_all().wake();
        assert_eq!(counts[2].0.load(Ordering::SeqCst), 1);
        assert_eq!(w.parked_len(), 0);
    }
}
