//! How far the store behind a queue has caught up: client-go's
//! `LastStoreSyncResourceVersion` (1.36), moved by events, bookmarks and
//! relists only once what came before them has been popped and processed.
//!
//! The reflector writes into the queue in the apiserver's order; the
//! informer pops and applies later. A queue therefore keeps *marks*: "once
//! every item pushed before this point is processed, the store holds the
//! state at resourceVersion R". An event's mark is its object's
//! resourceVersion, a relist's is the list's, a bookmark's is its own. When
//! a pop finishes, every mark whose items are all processed is passed and
//! the newest one is published on the [`StoreFreshness`] handle, which
//! wakes whoever waits for a version.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use kcache_core::{IncomparableResourceVersion, ResourceVersion};
use tokio::sync::watch;

/// The resourceVersion the store behind a queue has caught up to, and a way
/// to wait for a given one. Cheap to clone; every clone sees the same
/// value.
///
/// `None` until the first list (or event, or bookmark) has been processed.
/// After that it is the resourceVersion of the last event, bookmark or list
/// whose changes are all in the store: every change the apiserver made at
/// or before it (to objects this store caches) is visible to readers.
///
/// ```
/// use kcache_core::ResourceVersion;
/// use kcache_deltafifo::StoreFreshness;
///
/// # futures::executor::block_on(async {
/// let freshness = StoreFreshness::new();
/// let want = ResourceVersion::new("42");
/// assert!(!freshness.has_reached(&want)?);
/// freshness.set(ResourceVersion::new("57"));
/// assert!(freshness.has_reached(&want)?);
/// freshness.reached(&want).await?; // returns at once
/// # Ok::<_, kcache_core::IncomparableResourceVersion>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct StoreFreshness {
    tx: Arc<watch::Sender<Option<ResourceVersion>>>,
}

impl Default for StoreFreshness {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for StoreFreshness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoreFreshness")
            .field(&*self.tx.borrow())
            .finish()
    }
}

impl StoreFreshness {
    /// A handle that has seen nothing yet.
    pub fn new() -> Self {
        StoreFreshness {
            tx: Arc::new(watch::Sender::new(None)),
        }
    }

    /// The resourceVersion the store has caught up to, if any.
    pub fn resource_version(&self) -> Option<ResourceVersion> {
        self.tx.borrow().clone()
    }

    /// Publishes `rv` as the version the store has caught up to (the
    /// queues do it; a store fed by other means may too). It may move
    /// back: a relist served from a lagging apiserver's cache is older,
    /// and the store then holds that older state.
    pub fn set(&self, rv: ResourceVersion) {
        self.tx.send_if_modified(|cur| {
            if cur.as_ref() == Some(&rv) {
                false
            } else {
                *cur = Some(rv);
                true
            }
        });
    }

    /// Whether the store has caught up to `rv` (false before anything was
    /// processed).
    pub fn has_reached(&self, rv: &ResourceVersion) -> Result<bool, IncomparableResourceVersion> {
        match &*self.tx.borrow() {
            Some(cur) => cur.is_at_least(rv),
            None => Ok(false),
        }
    }

    /// Waits until the store has caught up to `rv`. Cancelled by dropping
    /// the future; bound it with a timeout (the informer's
    /// `wait_for_resource_version` does).
    pub async fn reached(&self, rv: &ResourceVersion) -> Result<(), IncomparableResourceVersion> {
        let mut result = Ok(());
        self.wait_until(|cur| match cur.map(|c| c.is_at_least(rv)) {
            Some(Ok(reached)) => reached,
            None => false,
            Some(Err(e)) => {
                result = Err(e);
                true
            }
        })
        .await;
        result
    }

    /// Waits until `cond` holds, called with the published version now and
    /// after every change (a condition on the store itself works too: the
    /// version changes once a change to the store is processed). No change
    /// published between a call and the wait is missed.
    pub async fn wait_until(&self, mut cond: impl FnMut(Option<&ResourceVersion>) -> bool) {
        let mut rx = self.tx.subscribe();
        loop {
            if cond(rx.borrow_and_update().as_ref()) {
                return;
            }
            if rx.changed().await.is_err() {
                // The sender lives as long as this handle: unreachable.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Most marks a queue keeps; past it, every other one of the older half is
/// dropped. A dropped mark only makes the published version lag (an older
/// mark stands in for it), never run ahead.
const MAX_MARKS: usize = 4096;

/// A queue's marks, kept under the queue's lock.
#[derive(Default)]
pub(crate) struct Watermark {
    /// Items pushed so far; an item's sequence number is the count before it.
    pushed: u64,
    /// `(pushed, rv)`: once every item with a sequence number below
    /// `pushed` is processed, the store is at `rv`. In push order.
    marks: VecDeque<(u64, ResourceVersion)>,
}

impl Watermark {
    /// The sequence number of the next item pushed (and counts it).
    pub(crate) fn next_seq(&mut self) -> u64 {
        let seq = self.pushed;
        self.pushed += 1;
        seq
    }

    /// Items pushed so far.
    pub(crate) fn pushed(&self) -> u64 {
        self.pushed
    }

    /// Marks `rv` after everything pushed so far; published at once when
    /// everything below `done_through` (the smallest sequence number not
    /// yet processed) is all there is.
    pub(crate) fn mark(&mut self, rv: ResourceVersion, done_through: u64, out: &StoreFreshness) {
        if done_through >= self.pushed && self.marks.is_empty() {
            out.set(rv);
            return;
        }
        match self.marks.back_mut() {
            // nothing pushed since the last mark: the newer one stands for both
            Some((at, last)) if *at == self.pushed => *last = rv,
            _ => {
                if self.marks.len() >= MAX_MARKS {
                    self.thin();
                }
                self.marks.push_back((self.pushed, rv));
            }
        }
        self.advance(done_through, out);
    }

    /// Passes every mark whose items are all processed (`done_through`: the
    /// smallest sequence number not processed yet) and publishes the newest.
    pub(crate) fn advance(&mut self, done_through: u64, out: &StoreFreshness) {
        let mut passed = None;
        while let Some((at, _)) = self.marks.front() {
            if *at > done_through {
                break;
            }
            passed = self.marks.pop_front().map(|(_, rv)| rv);
        }
        if let Some(rv) = passed {
            out.set(rv);
        }
    }

    /// Drops every other mark of the older half.
    fn thin(&mut self) {
        let half = self.marks.len() / 2;
        let mut i = 0usize;
        self.marks.retain(|_| {
            let keep = i >= half || i % 2 == 1;
            i += 1;
            keep
        });
    }

    #[cfg(test)]
    pub(crate) fn marks(&self) -> usize {
        self.marks.len()
    }
}

/// The resourceVersion an event's mark carries: its object's.
pub(crate) fn object_rv<K>(obj: &kcache_core::ObjectOrTombstone<K>) -> Option<ResourceVersion> {
    match obj {
        kcache_core::ObjectOrTombstone::Object(o) => o.resource_version().map(ResourceVersion::new),
        // a tombstone carries the last known state, not the deletion's version
        kcache_core::ObjectOrTombstone::Tombstone(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rv(s: &str) -> ResourceVersion {
        ResourceVersion::new(s)
    }

    #[test]
    fn a_mark_is_passed_once_what_came_before_it_is_processed() {
        let out = StoreFreshness::new();
        let mut w = Watermark::default();
        let a = w.next_seq(); // 0
        w.mark(rv("10"), 0, &out);
        let _b = w.next_seq(); // 1
        w.mark(rv("11"), 0, &out);
        assert_eq!(out.resource_version(), None, "nothing processed yet");
        w.advance(a + 1, &out);
        assert_eq!(out.resource_version(), Some(rv("10")));
        w.advance(w.pushed(), &out);
        assert_eq!(out.resource_version(), Some(rv("11")));
        // idle: a bookmark is published at once
        w.mark(rv("15"), w.pushed(), &out);
        assert_eq!(out.resource_version(), Some(rv("15")));
        assert_eq!(w.marks(), 0);
    }

    #[test]
    fn marks_without_pushes_between_collapse_and_thinning_only_lags() {
        let out = StoreFreshness::new();
        let mut w = Watermark::default();
        w.next_seq();
        w.mark(rv("1"), 0, &out);
        w.mark(rv("2"), 0, &out);
        assert_eq!(w.marks(), 1);
        for i in 0..(MAX_MARKS as u64 * 2) {
            w.next_seq();
            w.mark(ResourceVersion::from_u64(100 + i), 0, &out);
        }
        assert!(w.marks() <= MAX_MARKS);
        // halfway through: the published version is at most the true one
        let half = w.pushed() / 2;
        w.advance(half, &out);
        let got = out.resource_version().unwrap().as_u64().unwrap();
        assert!(got <= 100 + half, "{got} ran ahead of {}", 100 + half);
        w.advance(w.pushed(), &out);
        assert_eq!(
            out.resource_version().unwrap().as_u64(),
            Some(100 + MAX_MARKS as u64 * 2 - 1)
        );
    }

    #[tokio::test]
    async fn waiters_wake_when_the_version_is_reached() {
        let out = StoreFreshness::new();
        let waiter = tokio::spawn({
            let out = out.clone();
            async move { out.reached(&rv("20")).await }
        });
        tokio::task::yield_now().await;
        out.set(rv("19"));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        out.set(rv("21"));
        waiter.await.unwrap().unwrap();
        out.set(rv("a-token"));
        assert!(
            out.reached(&rv("20")).await.is_err(),
            "incomparable: an error, not a hang"
        );
    }
}
