//! Basic queue rules: client-go's queue_test.go scenarios and more.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{queue_of, spawn_getters};
use kcache_workqueue::WorkQueue;
use tokio::task::yield_now;

async fn settle() {
    for _ in 0..20 {
        yield_now().await;
    }
}

/// client-go TestBasic: 50 producers add 50 times each, 10 consumers; after
/// shutdown adds are ignored, nothing is left, and no item is ever held by
/// two consumers at once.
async fn basic(drain: bool) {
    let q: WorkQueue<i64> = WorkQueue::new();
    let in_flight = Arc::new(Mutex::new(HashSet::new()));
    let processed = Arc::new(Mutex::new(HashSet::new()));
    let mut producers = Vec::new();
    for i in 0..50i64 {
        let q = q.clone();
        producers.push(tokio::spawn(async move {
            for _ in 0..50 {
                q.add(i);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    let mut consumers = Vec::new();
    for _ in 0..10 {
        let q = q.clone();
        let in_flight = Arc::clone(&in_flight);
        let processed = Arc::clone(&processed);
        consumers.push(tokio::spawn(async move {
            while let Some(item) = q.get().await {
                assert_ne!(item, -1, "got an item added after shutdown");
                assert!(in_flight.lock().unwrap().insert(item), "{item} held twice");
                tokio::time::sleep(Duration::from_millis(3)).await;
                in_flight.lock().unwrap().remove(&item);
                processed.lock().unwrap().insert(item);
                q.done(&item);
            }
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    if drain {
        q.shut_down_with_drain().await;
    } else {
        q.shut_down();
    }
    q.add(-1);
    for c in consumers {
        c.await.unwrap();
    }
    assert_eq!(q.len(), 0);
    assert_eq!(processed.lock().unwrap().len(), 50);
}

#[tokio::test(start_paused = true)]
async fn basic_shut_down() {
    basic(false).await;
}

#[tokio::test(start_paused = true)]
async fn basic_shut_down_with_drain() {
    basic(true).await;
}

/// client-go TestAddWhileProcessing: every worker re-adds every item it
/// gets up to twice while processing it.
async fn add_while_processing(drain: bool) {
    let q: WorkQueue<i64> = WorkQueue::new();
    let in_flight = Arc::new(Mutex::new(HashSet::new()));
    for i in 0..50 {
        q.add(i);
    }
    let mut consumers = Vec::new();
    for _ in 0..10 {
        let q = q.clone();
        let in_flight = Arc::clone(&in_flight);
        consumers.push(tokio::spawn(async move {
            let mut counters = std::collections::HashMap::new();
            let mut gets = 0;
            while let Some(item) = q.get().await {
                gets += 1;
                assert!(in_flight.lock().unwrap().insert(item), "{item} held twice");
                let c = counters.entry(item).or_insert(0);
                *c += 1;
                if *c < 2 {
                    q.add(item);
                }
                yield_now().await;
                in_flight.lock().unwrap().remove(&item);
                q.done(&item);
            }
            gets
        }));
    }
    settle().await;
    if drain {
        q.shut_down_with_drain().await;
    } else {
        // Let the workers finish the re-added items before shutting down.
        while !q.is_empty() || q.processing_len() > 0 {
            yield_now().await;
        }
        q.shut_down();
    }
    let mut total = 0;
    for c in consumers {
        total += c.await.unwrap();
    }
    assert_eq!(q.len(), 0);
    // Each item was re-added at least once while being processed, and the
    // re-add was handed out again after done.
    assert!(total >= 100, "only {total} gets");
}

#[tokio::test(start_paused = true)]
async fn add_while_processing_shut_down() {
    add_while_processing(false).await;
}

#[tokio::test(start_paused = true)]
async fn add_while_processing_shut_down_with_drain() {
    add_while_processing(true).await;
}

/// client-go TestLen.
#[test]
fn len_counts_distinct_waiting_items() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add("foo");
    assert_eq!(q.len(), 1);
    q.add("bar");
    assert_eq!(q.len(), 2);
    q.add("foo");
    assert_eq!(q.len(), 2);
}

#[tokio::test]
async fn len_excludes_processing_and_delayed() {
    let q = queue_of(["a", "b"]);
    q.add_after("c", Duration::from_secs(60));
    assert_eq!(q.len(), 2);
    assert_eq!(q.delayed_len(), 1);
    let a = q.get().await.unwrap();
    assert_eq!(q.len(), 1);
    assert_eq!(q.processing_len(), 1);
    q.add(a); // dirty while processing: not counted until done
    assert_eq!(q.len(), 1);
    q.done(&a);
    assert_eq!(q.len(), 2);
}

/// client-go TestReinsert.
#[tokio::test]
async fn reinsert_while_processing() {
    let q = queue_of(["foo"]);
    let i = q.get().await.unwrap();
    assert_eq!(i, "foo");
    q.add(i);
    assert_eq!(q.len(), 0, "must not be handed out while processing");
    q.done(&i);
    assert_eq!(q.len(), 1);
    let i = q.get().await.unwrap();
    assert_eq!(i, "foo");
    q.done(&i);
    assert_eq!(q.len(), 0);
}

/// client-go TestCollapse.
#[tokio::test]
async fn collapse_duplicate_adds() {
    let q = queue_of(["bar", "bar"]);
    assert_eq!(q.get().await, Some("bar"));
    q.done(&"bar");
    assert_eq!(q.len(), 0);
    q.shut_down();
    assert_eq!(q.get().await, None);
}

/// client-go TestCollapseWhileProcessing: a second worker is blocked until
/// the first calls done.
#[tokio::test(start_paused = true)]
async fn second_worker_waits_for_done() {
    let q = queue_of(["foo"]);
    let i = q.get().await.unwrap();
    q.add("foo");
    q.add("foo");
    let other = tokio::spawn({
        let q = q.clone();
        async move {
            let i = q.get().await.unwrap();
            q.done(&i);
            i
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!other.is_finished(), "worker should be blocked until done");
    q.done(&i);
    assert_eq!(other.await.unwrap(), "foo");
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn get_waits_while_empty() {
    let q: WorkQueue<u32> = WorkQueue::new();
    let getter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!getter.is_finished());
    q.add(7);
    assert_eq!(getter.await.unwrap(), Some(7));
}

#[tokio::test]
async fn fifo_order() {
    let q = queue_of(0..100u32);
    for i in 0..100 {
        assert_eq!(q.get().await, Some(i));
    }
}

#[tokio::test]
async fn add_ignored_after_shut_down() {
    let q = queue_of(["a"]);
    q.shut_down();
    assert!(q.shutting_down());
    q.add("b");
    q.add_after("c", Duration::ZERO);
    q.add_rate_limited("d");
    assert_eq!(
        q.num_requeues(&"d"),
        0,
        "limiter not consulted after shutdown"
    );
    // Items ready before shutdown are still handed out, then None.
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, None);
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn shut_down_wakes_waiting_getters() {
    let q: WorkQueue<u32> = WorkQueue::new();
    let getters = spawn_getters(&q, 4);
    settle().await;
    q.shut_down();
    for g in getters {
        assert_eq!(g.await.unwrap(), None);
    }
}

#[tokio::test]
async fn done_of_unknown_item_is_harmless() {
    let q: WorkQueue<u32> = WorkQueue::new();
    q.done(&1);
    q.add(2);
    q.done(&2); // not processing: stays waiting
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some(2));
    q.done(&2);
    q.done(&2);
    assert_eq!(q.processing_len(), 0);
}

/// client-go TestQueueDrainageUsingShutDownWithDrain.
#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_waits_for_done() {
    let q = queue_of(["foo", "bar"]);
    let first = q.get().await.unwrap();
    let second = q.get().await.unwrap();
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    settle().await;
    assert!(q.shutting_down());
    assert_eq!(q.get().await, None);
    assert!(!drain.is_finished());
    q.done(&first);
    settle().await;
    assert!(!drain.is_finished(), "one item still processing");
    q.done(&second);
    drain.await.unwrap();
}

/// client-go TestNoQueueDrainageUsingShutDown: shut_down does not wait.
#[tokio::test]
async fn shut_down_does_not_wait() {
    let q = queue_of(["foo", "bar"]);
    q.get().await.unwrap();
    q.get().await.unwrap();
    q.shut_down();
    assert_eq!(q.processing_len(), 2);
    assert_eq!(q.get().await, None);
}

/// client-go TestForceQueueShutdownUsingShutDown: shut_down ends a drain.
#[tokio::test(start_paused = true)]
async fn shut_down_forces_drain_to_end() {
    let q = queue_of(["foo", "bar"]);
    q.get().await.unwrap();
    q.get().await.unwrap();
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    settle().await;
    assert_eq!(q.get().await, None);
    assert!(!drain.is_finished());
    q.shut_down();
    drain.await.unwrap();
    assert_eq!(q.processing_len(), 2);
}

/// client-go TestQueueDrainageUsingShutDownWithDrainWithDirtyItem.
#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_waits_for_dirty_item() {
    let q = queue_of(["foo"]);
    let gotten = q.get().await.unwrap();
    q.add("foo");
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    settle().await;
    // The dirty item is not ready while its first copy is processing.
    assert_eq!(q.get().await, None);
    q.done(&gotten);
    settle().await;
    assert!(!drain.is_finished(), "the dirty item came back");
    let again = q.get().await.expect("done hands the dirty item out again");
    assert_eq!(again, "foo");
    settle().await;
    assert!(!drain.is_finished());
    q.done(&again);
    assert_eq!(q.get().await, None);
    drain.await.unwrap();
}

#[tokio::test]
async fn shut_down_with_drain_on_idle_queue_returns() {
    let q: WorkQueue<u8> = WorkQueue::new();
    q.shut_down_with_drain().await;
    assert!(q.shutting_down());
}

#[tokio::test(start_paused = true)]
async fn get_is_cancel_safe() {
    let q: WorkQueue<u32> = WorkQueue::new();
    // A get that is dropped while waiting loses nothing.
    let r = tokio::time::timeout(Duration::from_millis(10), q.get()).await;
    assert!(r.is_err());
    q.add(1);
    assert_eq!(q.get().await, Some(1));
}

#[test]
fn usable_without_a_runtime() {
    let q: WorkQueue<String> = WorkQueue::new();
    q.add("x".into());
    q.add_after("y".into(), Duration::from_secs(1));
    assert_eq!(q.len(), 1);
    assert_eq!(q.delayed_len(), 1);
    q.shut_down();
    assert_eq!(q.delayed_len(), 0, "delayed items are dropped at shutdown");
}
