//! The driver of scenario (d) of `cargo xtask bench-compare`, shared by
//! `kcache-client --scenario workqueue` (benches/compare) and this crate's
//! `scenario_d` bench (the same run in one process, without the harness's
//! other dependencies, for profiling).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kcache_workqueue::WorkQueue;

/// One producer adds `keys` distinct `namespace/name` keys, `workers`
/// workers get, forget and done them; returns the time until every key is
/// done. Producer and workers are all tasks on the caller's runtime (2
/// worker threads in both callers), the shape of the Go client
/// (goroutines on GOMAXPROCS=2): a producer run by `block_on` would be a
/// third OS thread that Go does not get. With `done_and_get` the workers
/// use [`WorkQueue::done_and_get`] (done and the next get in one lock
/// acquisition) instead of `done` then `get`.
pub async fn run(keys: usize, workers: usize, done_and_get: bool) -> Duration {
    let names = key_names(keys);
    // `new` has client-go's default controller rate limiter, like the Go
    // client's rate-limiting queue; a worker forgets a key it processed.
    let q: WorkQueue<String> = WorkQueue::new();
    let processed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (q, processed) = (q.clone(), processed.clone());
            tokio::spawn(async move {
                let mut next = q.get().await;
                while let Some(k) = next {
                    q.forget(&k);
                    if processed.fetch_add(1, Ordering::Relaxed) + 1 == keys as u64 {
                        q.shut_down();
                    }
                    next = if done_and_get {
                        q.done_and_get(&k).await
                    } else {
                        q.done(&k);
                        q.get().await
                    };
                }
            })
        })
        .collect();
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            for k in names {
                q.add(k);
            }
        })
    };
    let _ = producer.await;
    for h in handles {
        let _ = h.await;
    }
    start.elapsed()
}

/// The scenario's `keys` distinct `namespace/name` keys (50 namespaces).
pub fn key_names(keys: usize) -> Vec<String> {
    (0..keys)
        .map(|i| format!("team-{}/web-{i:08}", i % 50))
        .collect()
}
