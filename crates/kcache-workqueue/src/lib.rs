//! Work queues for Kubernetes controllers: dedup, delaying, rate-limited and
//! priority queues, rate limiters, metrics.
//!
//! This is client-go's `util/workqueue` for async Rust: event handlers add
//! keys, reconcile workers take them. One type, [`WorkQueue`], does what
//! client-go spreads over `Interface`, `DelayingInterface` and
//! `RateLimitingInterface` (and controller-runtime's priority queue).
//!
//! # Rules
//!
//! * **Dedup.** An item waiting to be handed out is not added twice.
//! * **One worker per item.** [`get`](WorkQueue::get) hands an item out and
//!   marks it *processing* until [`done`](WorkQueue::done). An item added
//!   while being processed is handed out again only after `done`, so no two
//!   workers ever hold the same item.
//! * **Delays.** [`add_after`](WorkQueue::add_after) makes an item ready
//!   later (a zero delay means now). An item is waiting at most once: adding
//!   it again keeps the *earlier* ready time (and the higher priority).
//! * **Rate limits.** [`add_rate_limited`](WorkQueue::add_rate_limited) asks
//!   the queue's [`RateLimiter`] how long to wait; [`forget`](WorkQueue::forget)
//!   resets the item's backoff and [`num_requeues`](WorkQueue::num_requeues)
//!   tells how often it was retried.
//! * **Length.** [`len`](WorkQueue::len) counts items ready to be handed
//!   out, not those being processed or waiting for a later time.
//! * **Shutdown.** [`shut_down`](WorkQueue::shut_down) ignores later adds,
//!   drops items still waiting for a later time, and lets `get` hand out what
//!   is ready before it returns `None`.
//!   [`shut_down_with_drain`](WorkQueue::shut_down_with_drain) also waits
//!   until all of that is done.
//!
//! # Priorities
//!
//! [`add_with_opts`](WorkQueue::add_with_opts) takes an [`AddOpts`] with a
//! priority (default 0; higher is handed out first). Among items of equal
//! priority the one ready earliest goes first (FIFO by ready time, then by
//! order of adding).
//!
//! **Aging.** So that a low priority never starves, every
//! [`priority_aging`](WorkQueueBuilder::priority_aging) interval an item has
//! been ready counts as one priority level (default
//! [`DEFAULT_PRIORITY_AGING`], 1 s). Precisely, ready items are handed out
//! in increasing order of `ready_time - priority * aging`. An item of
//! priority `p` therefore goes before every item of priority `q > p` that
//! became ready more than `(q - p) * aging` after it: its wait is bounded by
//! that, however many higher-priority items keep arriving.
//! [`strict_priority`](WorkQueueBuilder::strict_priority) turns aging off.
//!
//! # Metrics
//!
//! A named queue given a [`WorkQueueMetricsProvider`] reports client-go's metrics
//! (`workqueue_depth`, `workqueue_adds_total`, ...; see [`metrics`]). The
//! `prometheus` feature provides [`PrometheusWorkQueueMetricsProvider`].
//!
//! # Example: a worker loop
//!
//! Take a key, process it, forget it on success, retry it with backoff on
//! error up to a limit:
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//! use kcache_workqueue::{ItemExponentialFailureRateLimiter, WorkQueue};
//!
//! const MAX_RETRIES: u32 = 3;
//!
//! /// Fails the first two attempts for every key.
//! fn reconcile(attempts: &Mutex<HashMap<String, u32>>, key: &str) -> Result<(), String> {
//!     let mut attempts = attempts.lock().unwrap();
//!     let n = attempts.entry(key.to_owned()).or_default();
//!     *n += 1;
//!     if *n <= 2 { Err(format!("attempt {n} of {key} failed")) } else { Ok(()) }
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let queue: WorkQueue<String> = WorkQueue::builder()
//!         .name("example")
//!         .rate_limiter(ItemExponentialFailureRateLimiter::new(
//!             Duration::from_millis(5),
//!             Duration::from_secs(10),
//!         ))
//!         .build()?;
//!     let attempts = Arc::new(Mutex::new(HashMap::new()));
//!     let (finished_tx, mut finished_rx) = tokio::sync::mpsc::unbounded_channel();
//!
//!     let worker = tokio::spawn({
//!         let queue = queue.clone();
//!         let attempts = Arc::clone(&attempts);
//!         async move {
//!             while let Some(key) = queue.get().await {
//!                 match reconcile(&attempts, &key) {
//!                     Ok(()) => {
//!                         queue.forget(&key);
//!                         finished_tx.send(key.clone()).unwrap();
//!                     }
//!                     Err(_) if queue.num_requeues(&key) < MAX_RETRIES => {
//!                         queue.add_rate_limited(key.clone());
//!                     }
//!                     Err(err) => {
//!                         eprintln!("giving up on {key}: {err}");
//!                         queue.forget(&key);
//!                     }
//!                 }
//!                 queue.done(&key);
//!             }
//!         }
//!     });
//!
//!     queue.add("default/web".to_owned());
//!     queue.add("default/db".to_owned());
//!     queue.add("default/web".to_owned()); // deduplicated
//!     let mut finished = vec![finished_rx.recv().await.unwrap(), finished_rx.recv().await.unwrap()];
//!     finished.sort();
//!     assert_eq!(finished, ["default/db", "default/web"]);
//!     assert_eq!(attempts.lock().unwrap()["default/web"], 3);
//!
//!     queue.shut_down_with_drain().await;
//!     worker.await?;
//!     Ok(())
//! }
//! ```

// docs.rs (rustdoc --cfg docsrs, nightly): items behind a feature carry a
// badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
pub mod metrics;
#[cfg(feature = "prometheus")]
mod prometheus;
mod queue;
pub mod rate_limiter;
mod ready;
mod slab;
mod table;
mod waiters;

pub use error::{BuildError, RateLimiterError};
pub use metrics::{NoopWorkQueueMetricsProvider, WorkQueueMetricsProvider};
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use prometheus::PrometheusWorkQueueMetricsProvider;
pub use queue::{
    AddOpts, DEFAULT_PRIORITY_AGING, DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD, QueueItem, WorkQueue,
    WorkQueueBuilder,
};
pub use rate_limiter::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, WithMaxWaitRateLimiter, default_controller_rate_limiter,
    default_item_based_rate_limiter,
};
