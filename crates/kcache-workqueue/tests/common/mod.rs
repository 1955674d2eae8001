//! What the work queue tests share.

use kcache_workqueue::{QueueItem, WorkQueue};
use tokio::task::JoinHandle;

/// `n` tasks, each waiting in `get` on `q`.
pub fn spawn_getters<T: QueueItem>(q: &WorkQueue<T>, n: usize) -> Vec<JoinHandle<Option<T>>> {
    (0..n)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect()
}
