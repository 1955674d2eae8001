//! `done` calls deferred because the lock was taken: held here by the
//! test thread while another thread calls `done`, so that the deferred
//! path runs every time (the stress tests reach it only by chance).

use super::*;

/// Calls `f` on another thread while this thread holds `queue`'s lock;
/// the lock is released (running [`Inner::after_unlock`]) on return.
fn while_locked(queue: &WorkQueue<String>, f: impl FnOnce(WorkQueue<String>) + Send) {
    let held = queue.inner.lock();
    std::thread::scope(|s| {
        let other = queue.clone();
        s.spawn(move || f(other)).join().unwrap();
    });
    assert!(
        queue.inner.inbox.dones_pending.load(Ordering::SeqCst),
        "the done was not deferred"
    );
    drop(held);
}

/// The queue's counts as the lock shows them, without applying the
/// inbox first (as every public call does).
fn raw_counts(queue: &WorkQueue<String>) -> (usize, usize) {
    let st = queue.inner.state.lock();
    (st.q.ready.len(), st.q.processing)
}

fn processing(queue: &WorkQueue<String>, item: &str) {
    queue.add(item.to_string());
    let got = queue.done_then_try_get_for_test();
    assert_eq!(got.as_deref(), Some(item));
}

impl WorkQueue<String> {
    /// `get` of a ready item, without a runtime.
    fn done_then_try_get_for_test(&self) -> Option<String> {
        let mut st = self.inner.lock();
        let wake = self.inner.apply_inbox(&mut st);
        let (item, idx) = st.pop_ready(Instant::now)?;
        remember_handed_out(self.inner.id(), idx);
        let wakeups = self.inner.wakeups(&mut st, wake);
        drop(st);
        wakeups.wake();
        Some(item)
    }
}

#[test]
fn deferred_done_is_applied_when_the_holder_releases_the_lock() {
    for queue in [WorkQueue::new(), metrics_queue()] {
        assert_eq!(queue.inner.use_inbox, queue.name().is_none());
        processing(&queue, "a");
        // Added again while processed: parked until its done.
        queue.add("a".to_string());
        while_locked(&queue, |q| q.done(&"a".to_string()));
        // No public call since: the release itself applied the done.
        assert_eq!(raw_counts(&queue), (1, 0));
        assert!(!queue.inner.inbox.dones_pending.load(Ordering::SeqCst));
    }
}

#[tokio::test]
async fn deferred_done_wakes_a_parked_getter() {
    let queue = WorkQueue::new();
    processing(&queue, "a");
    queue.add("a".to_string());
    let getter = tokio::spawn({
        let q = queue.clone();
        async move { q.get().await }
    });
    // Let the getter park.
    while !queue.inner.state.lock().waiters.needs_wake() {
        tokio::task::yield_now().await;
    }
    while_locked(&queue, |q| q.done(&"a".to_string()));
    let got = tokio::time::timeout(Duration::from_secs(10), getter)
        .await
        .expect("the parked getter was not woken")
        .unwrap();
    assert_eq!(got.as_deref(), Some("a"));
}

#[tokio::test]
async fn deferred_done_ends_a_drain() {
    let queue = WorkQueue::new();
    processing(&queue, "a");
    let drain = tokio::spawn({
        let q = queue.clone();
        async move { q.shut_down_with_drain().await }
    });
    while !queue.shutting_down() {
        tokio::task::yield_now().await;
    }
    // Let the drain register for the drained signal.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    while_locked(&queue, |q| q.done(&"a".to_string()));
    tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .expect("the drain did not see the deferred done")
        .unwrap();
}

#[test]
fn deferred_dones_keep_their_place_among_the_adds() {
    // done, then add again: the item is queued where it was added,
    // ahead of later adds.
    let queue = WorkQueue::new();
    processing(&queue, "a");
    while_locked(&queue, |q| {
        q.done(&"a".to_string());
        q.add("a".to_string());
        q.add("b".to_string());
    });
    assert_eq!(queue.done_then_try_get_for_test().as_deref(), Some("a"));
    assert_eq!(queue.done_then_try_get_for_test().as_deref(), Some("b"));

    // add again, then done: the item comes back at its done, behind
    // the adds before it.
    let queue = WorkQueue::new();
    processing(&queue, "a");
    while_locked(&queue, |q| {
        q.add("a".to_string());
        q.add("b".to_string());
        q.done(&"a".to_string());
    });
    assert_eq!(queue.done_then_try_get_for_test().as_deref(), Some("b"));
    assert_eq!(queue.done_then_try_get_for_test().as_deref(), Some("a"));
}

#[test]
fn deferred_done_after_shutdown_still_counts() {
    let queue = WorkQueue::new();
    processing(&queue, "a");
    queue.shut_down();
    while_locked(&queue, |q| q.done(&"a".to_string()));
    assert_eq!(raw_counts(&queue), (0, 0));
}

fn metrics_queue() -> WorkQueue<String> {
    WorkQueue::builder()
        .name("deferred")
        .metrics(crate::NoopWorkQueueMetricsProvider)
        .build_with_metrics_for_test()
}

impl WorkQueueBuilder<String> {
    /// `build` without the metrics task (which needs a runtime).
    fn build_with_metrics_for_test(mut self) -> WorkQueue<String> {
        let provider = self.metrics.take();
        self.build_with(provider)
    }
}

/// An item equal by its first field, carrying its second.
#[derive(Debug, Clone)]
struct Tagged(&'static str, u32);
impl PartialEq for Tagged {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for Tagged {}
impl std::hash::Hash for Tagged {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.hash(h)
    }
}

#[tokio::test(start_paused = true)]
async fn merge_sees_whether_the_held_copy_waits() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let queue: WorkQueue<Tagged> = WorkQueue::builder()
        .merge({
            let seen = seen.clone();
            move |held: &mut Tagged, added: Tagged, waiting| {
                seen.lock().unwrap().push((held.1, added.1, waiting));
                std::mem::replace(held, added)
            }
        })
        .build()
        .unwrap();
    queue.add_after(Tagged("a", 1), Duration::from_secs(5));
    // delayed, then ready (the add moves it up)
    queue.add(Tagged("a", 2));
    queue.add(Tagged("a", 3));
    let got = queue.get().await.unwrap();
    assert_eq!(got.1, 3, "the merged copy is handed out");
    // handed out: not waiting; then parked while processed: waiting
    queue.add(Tagged("a", 4));
    queue.add(Tagged("a", 5));
    queue.done(&got);
    assert_eq!(queue.get().await.unwrap().1, 5);
    assert_eq!(
        *seen.lock().unwrap(),
        [(1, 2, true), (2, 3, true), (3, 4, false), (4, 5, true)]
    );
    // without a merge the held copy stays (client-go)
    let plain: WorkQueue<Tagged> = WorkQueue::new();
    plain.add(Tagged("a", 1));
    plain.add(Tagged("a", 2));
    assert_eq!(plain.get().await.unwrap().1, 1);
}
