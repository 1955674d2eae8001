//! `WorkQueue::done_and_get`: `done` then `get` in one lock acquisition,
//! with the rules of the two calls.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kcache_workqueue::WorkQueue;

mod common;
use common::WorkerLoop;

/// An item added again while processed is queued behind the items already
/// ready, and handed out again after them.
#[tokio::test(flavor = "current_thread")]
async fn item_added_while_processed_comes_back_after_the_ready_ones() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add("a");
    q.add("b");
    assert_eq!(q.get().await, Some("a"));
    q.add("a"); // dirty while processed
    assert_eq!(q.len(), 1);
    assert_eq!(q.done_and_get(&"a").await, Some("b"));
    assert_eq!(q.done_and_get(&"b").await, Some("a"));
    assert_eq!(q.processing_len(), 1);
    q.done(&"a");
    assert_eq!(q.processing_len(), 0);
    assert!(q.is_empty());
}

/// A queue whose only item, 1, was handed out and is being processed.
async fn processing_only_1() -> WorkQueue<u32> {
    let q: WorkQueue<u32> = WorkQueue::new();
    q.add(1);
    assert_eq!(q.get().await, Some(1));
    q
}

/// With nothing ready it marks the item done at once and then waits like
/// `get`, for the next add.
#[tokio::test(flavor = "current_thread")]
async fn nothing_ready_done_at_once_then_waits() {
    let q = processing_only_1().await;
    let next = tokio::spawn({
        let q = q.clone();
        async move { q.done_and_get(&1).await }
    });
    tokio::task::yield_now().await; // done, then parked
    assert_eq!(q.processing_len(), 0);
    assert!(!next.is_finished());
    q.add(2);
    assert_eq!(next.await.unwrap(), Some(2));
}

/// `shut_down_with_drain` returns once the last item is done through
/// `done_and_get`, which then answers `None`.
#[tokio::test(flavor = "current_thread")]
async fn drain_ends_at_the_last_done_and_get() {
    let q = processing_only_1().await;
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    tokio::task::yield_now().await;
    assert!(!drain.is_finished());
    assert_eq!(q.done_and_get(&1).await, None);
    tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .expect("the drain missed the done of done_and_get")
        .unwrap();
}

/// After `shut_down` (no drain) the items still ready are handed out, as by
/// `get`, then `None`.
#[tokio::test(flavor = "current_thread")]
async fn after_shut_down_ready_items_then_none() {
    let q: WorkQueue<u32> = WorkQueue::new();
    q.add(1);
    q.add(2);
    assert_eq!(q.get().await, Some(1));
    q.shut_down();
    assert_eq!(q.done_and_get(&1).await, Some(2));
    assert_eq!(q.done_and_get(&2).await, None);
}

/// A worker looping on `done_and_get` that always finds an item ready
/// still lets the getter woken to share the work run (one thread: that
/// getter waits behind the busy task until it yields).
#[tokio::test(flavor = "current_thread")]
async fn busy_worker_yields_to_a_woken_getter() {
    common::busy_worker_yields_to_a_woken_getter(WorkerLoop::DoneAndGet).await;
}

/// Many workers on `done_and_get`, items added in bursts (workers park
/// often) and re-added while processed: no item is held by two workers at
/// once, every add is processed, none is stranded by a lost wake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_workers_one_per_key_and_no_lost_wake() {
    const ITEMS: usize = 20_000;
    const WORKERS: usize = 8;
    let q: WorkQueue<usize> = WorkQueue::new();
    let in_flight = Arc::new(Mutex::new(HashSet::new()));
    let seen: Arc<Vec<AtomicUsize>> = Arc::new((0..ITEMS).map(|_| AtomicUsize::new(0)).collect());
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (q, seen, in_flight) = (q.clone(), Arc::clone(&seen), Arc::clone(&in_flight));
            tokio::spawn(async move {
                let mut next = q.get().await;
                while let Some(item) = next {
                    assert!(in_flight.lock().unwrap().insert(item), "{item} held twice");
                    // The first time, add it again while processing it.
                    if seen[item].fetch_add(1, Ordering::SeqCst) == 0 {
                        q.add(item);
                    }
                    tokio::task::yield_now().await;
                    in_flight.lock().unwrap().remove(&item);
                    next = q.done_and_get(&item).await;
                }
            })
        })
        .collect();
    for i in 0..ITEMS {
        q.add(i);
        if i % 1_000 == 0 {
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
    }
    // Re-adds after a shutdown would be ignored: wait for every item's
    // second turn first.
    tokio::time::timeout(Duration::from_secs(30), async {
        while seen.iter().any(|n| n.load(Ordering::SeqCst) < 2) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("items stranded: a wake or a requeue was lost");
    tokio::time::timeout(Duration::from_secs(10), q.shut_down_with_drain())
        .await
        .expect("the drain missed the last done");
    for w in workers {
        w.await.unwrap();
    }
    for (i, n) in seen.iter().enumerate() {
        assert_eq!(n.load(Ordering::SeqCst), 2, "item {i}");
    }
    assert_eq!(q.processing_len(), 0);
}
