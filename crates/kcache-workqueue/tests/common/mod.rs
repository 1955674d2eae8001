//! What the work queue tests share.
#![allow(dead_code)] // each test file uses a part

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kcache_workqueue::{QueueItem, WorkQueue};
use tokio::task::JoinHandle;

/// A queue (`WorkQueue::new`) with `items` added in order.
pub fn queue_of<T: QueueItem>(items: impl IntoIterator<Item = T>) -> WorkQueue<T> {
    let q = WorkQueue::new();
    for item in items {
        q.add(item);
    }
    q
}

/// `n` tasks, each waiting in `get` on `q`.
pub fn spawn_getters<T: QueueItem>(q: &WorkQueue<T>, n: usize) -> Vec<JoinHandle<Option<T>>> {
    (0..n)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect()
}

/// How a worker hands an item back before taking the next.
#[derive(Clone, Copy, Debug)]
pub enum WorkerLoop {
    /// `get`, then `done` (never awaiting anything else).
    GetThenDone,
    /// `get` once, then `done_and_get` for every later item.
    DoneAndGet,
}

/// Two workers on one thread, looping as `how` says, always find an item
/// ready; the getter woken to share the work still runs (it waits behind
/// the busy task until that yields): 1,000 items are processed, each
/// worker takes some, and the drain ends at the last done.
pub async fn busy_worker_yields_to_a_woken_getter(how: WorkerLoop) {
    let q: WorkQueue<u32> = WorkQueue::new();
    let counts: Vec<Arc<AtomicUsize>> = (0..2).map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let workers: Vec<_> = counts
        .iter()
        .map(|count| {
            let (q, count) = (q.clone(), Arc::clone(count));
            tokio::spawn(async move {
                let mut next = q.get().await;
                while let Some(item) = next {
                    count.fetch_add(1, Ordering::SeqCst);
                    next = match how {
                        WorkerLoop::GetThenDone => {
                            q.done(&item);
                            q.get().await
                        }
                        WorkerLoop::DoneAndGet => q.done_and_get(&item).await,
                    };
                }
            })
        })
        .collect();
    tokio::task::yield_now().await; // both workers park
    for i in 0..1_000 {
        q.add(i);
    }
    tokio::time::timeout(Duration::from_secs(10), q.shut_down_with_drain())
        .await
        .expect("the drain missed the last done");
    for w in workers {
        w.await.unwrap();
    }
    let counts: Vec<_> = counts.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    assert_eq!(counts.iter().sum::<usize>(), 1_000);
    assert!(
        counts.iter().all(|&n| n > 0),
        "one worker took every item: {counts:?}"
    );
}
