//! Delays: client-go's delaying_queue_test.go scenarios and more. All on
//! tokio's paused clock, with exact expected delays.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::spawn_getters;
use kcache_workqueue::WorkQueue;
use tokio::time::{Instant, advance};

const MS: Duration = Duration::from_millis(1);
const US: Duration = Duration::from_micros(1);

#[tokio::test(start_paused = true)]
async fn add_after_waits_exactly() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add_after("foo", 50 * MS);
    assert_eq!(q.len(), 0);
    assert_eq!(q.delayed_len(), 1);
    advance(50 * MS - US).await;
    assert_eq!(q.len(), 0);
    advance(US).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 0);
    assert_eq!(q.get().await, Some("foo"));
}

#[tokio::test(start_paused = true)]
async fn zero_delay_adds_now() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add_after("foo", Duration::ZERO);
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn waiting_get_wakes_at_ready_time() {
    let q: WorkQueue<&str> = WorkQueue::new();
    let start = Instant::now();
    q.add_after("foo", 250 * MS);
    assert_eq!(q.get().await, Some("foo"));
    assert_eq!(start.elapsed(), 250 * MS);
}

/// A getter already sleeping until a later deadline is woken for an item
/// added with an earlier one.
#[tokio::test(start_paused = true)]
async fn sleeping_getter_rearms_for_earlier_item() {
    let q: WorkQueue<&str> = WorkQueue::new();
    let start = Instant::now();
    q.add_after("late", Duration::from_secs(10));
    let getter = tokio::spawn({
        let q = q.clone();
        async move { (q.get().await, Instant::now()) }
    });
    tokio::task::yield_now().await;
    q.add_after("early", Duration::from_secs(1));
    let (item, at) = getter.await.unwrap();
    assert_eq!(item, Some("early"));
    assert_eq!(at - start, Duration::from_secs(1));
}

/// client-go TestDeduping: the earlier of two delays wins, and the later
/// one does not add the item a second time.
#[tokio::test(start_paused = true)]
async fn deduping_earlier_delay_wins() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add_after("foo", 50 * MS);
    q.add_after("foo", 70 * MS);
    assert_eq!(q.len(), 0);
    assert_eq!(q.delayed_len(), 1);

    advance(60 * MS).await;
    assert_eq!(q.len(), 1);
    let item = q.get().await.unwrap();
    q.done(&item);
    advance(20 * MS).await;
    assert_eq!(q.len(), 0, "the 70 ms add must have been merged");
    assert_eq!(q.delayed_len(), 0);

    // Again, but this time the second (earlier) add overrides.
    q.add_after("foo", 50 * MS);
    q.add_after("foo", 30 * MS);
    assert_eq!(q.len(), 0);
    advance(30 * MS - US).await;
    assert_eq!(q.len(), 0);
    advance(US).await;
    assert_eq!(q.len(), 1);
    let item = q.get().await.unwrap();
    q.done(&item);
    advance(30 * MS).await;
    assert_eq!(q.len(), 0);
    assert_eq!(q.delayed_len(), 0);
}

/// client-go TestAddTwoFireEarly.
#[tokio::test(start_paused = true)]
async fn add_two_fire_early() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add_after("foo", Duration::from_secs(1));
    q.add_after("bar", 50 * MS);
    assert_eq!(q.len(), 0);

    advance(60 * MS).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("bar"));

    q.add_after("baz", Duration::from_secs(2));
    advance(Duration::from_secs(1)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("foo"));

    advance(Duration::from_secs(2)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("baz"));
}

/// client-go TestCopyShifting: items ready at once come out by ready time.
#[tokio::test(start_paused = true)]
async fn copy_shifting() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add_after("foo", Duration::from_secs(1));
    q.add_after("bar", 500 * MS);
    q.add_after("baz", 250 * MS);
    assert_eq!(q.len(), 0);
    advance(Duration::from_secs(2)).await;
    assert_eq!(q.len(), 3);
    assert_eq!(q.get().await, Some("baz"));
    assert_eq!(q.get().await, Some("bar"));
    assert_eq!(q.get().await, Some("foo"));
}

/// Many items becoming ready at once: none lost, none duplicated, in ready
/// time order.
#[tokio::test(start_paused = true)]
async fn many_ready_at_once() {
    let q: WorkQueue<u32> = WorkQueue::new();
    let delay = |i: u32| MS * ((i * 7919) % 100 + 1);
    for i in 0..2000 {
        q.add_after(i, delay(i));
        // Every item added twice, the second time later: merged.
        q.add_after(i, delay(i) + 5 * MS);
    }
    assert_eq!(q.delayed_len(), 2000);
    advance(Duration::from_secs(1)).await;
    assert_eq!(q.len(), 2000);
    let mut seen = HashSet::new();
    let mut last = Duration::ZERO;
    for _ in 0..2000 {
        let i = q.get().await.unwrap();
        assert!(seen.insert(i), "{i} handed out twice");
        assert!(delay(i) >= last, "out of ready-time order");
        last = delay(i);
        q.done(&i);
    }
    assert_eq!(q.len(), 0);
    assert_eq!(q.delayed_len(), 0);
}

/// Several sleeping getters all receive the items that become ready
/// together.
#[tokio::test(start_paused = true)]
async fn several_getters_woken_together() {
    let q: WorkQueue<u32> = WorkQueue::new();
    let getters = spawn_getters(&q, 5);
    tokio::task::yield_now().await;
    for i in 0..5 {
        q.add_after(i, 10 * MS);
    }
    let mut got = Vec::new();
    for g in getters {
        got.push(g.await.unwrap().unwrap());
    }
    got.sort();
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn add_makes_delayed_item_ready_now() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add_after("foo", Duration::from_secs(3600));
    q.add("foo");
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 0);
    assert_eq!(q.get().await, Some("foo"));
    q.done(&"foo");
    advance(Duration::from_secs(7200)).await;
    assert_eq!(q.len(), 0, "no second copy from the earlier add_after");
}

#[tokio::test(start_paused = true)]
async fn later_delay_does_not_postpone_ready_item() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add("foo");
    q.add_after("foo", Duration::from_secs(5));
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 0);
}

/// A queue whose worker is processing "foo" (returned), with "foo" added
/// again to be ready after `delay`.
async fn processing_foo_added_again_after(
    delay: Duration,
) -> (WorkQueue<&'static str>, &'static str) {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add("foo");
    let item = q.get().await.unwrap();
    q.add_after("foo", delay);
    (q, item)
}

/// An item that becomes ready while it is being processed waits for done.
#[tokio::test(start_paused = true)]
async fn delayed_item_ready_while_processing_waits_for_done() {
    let (q, foo) = processing_foo_added_again_after(10 * MS).await;
    advance(20 * MS).await;
    assert_eq!(q.len(), 0);
    assert_eq!(q.delayed_len(), 0);
    q.done(&foo);
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("foo"));
}

/// Done while the item still waits for a later time keeps it waiting.
#[tokio::test(start_paused = true)]
async fn done_keeps_pending_delay() {
    let (q, foo) = processing_foo_added_again_after(10 * MS).await;
    q.done(&foo);
    assert_eq!(q.len(), 0);
    assert_eq!(q.delayed_len(), 1);
    advance(10 * MS).await;
    assert_eq!(q.get().await, Some("foo"));
}

#[tokio::test(start_paused = true)]
async fn delayed_items_dropped_at_shut_down() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add_after("foo", Duration::from_secs(1));
    q.add("bar");
    q.shut_down();
    advance(Duration::from_secs(2)).await;
    assert_eq!(q.get().await, Some("bar"));
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn huge_delay_does_not_overflow() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add_after("foo", Duration::MAX);
    assert_eq!(q.delayed_len(), 1);
    q.add_after("foo", MS);
    advance(MS).await;
    assert_eq!(q.len(), 1);
}
