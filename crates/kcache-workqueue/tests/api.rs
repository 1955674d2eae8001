//! Compile-time and surface checks: handles are Send + Sync, the futures
//! are Send (so no lock is held across an await), clones share one queue.

use std::time::Duration;

use kcache_workqueue::{AddOpts, WorkQueue, WorkQueueBuilder};

fn assert_send_sync<T: Send + Sync>() {}
fn assert_send<F: Send>(_: &F) {}

#[test]
fn handles_and_futures_are_send() {
    assert_send_sync::<WorkQueue<String>>();
    assert_send_sync::<kcache_workqueue::PrometheusWorkQueueMetricsProvider>();
    let q: WorkQueue<String> = WorkQueue::new();
    let get = q.get();
    assert_send(&get);
    let drain = q.shut_down_with_drain();
    assert_send(&drain);
    let _: WorkQueueBuilder<u8> = WorkQueue::builder();
}

#[tokio::test]
async fn clones_share_one_queue() {
    let a: WorkQueue<&str> = WorkQueue::new();
    let b = a.clone();
    a.add("x");
    assert_eq!(b.len(), 1);
    assert_eq!(b.get().await, Some("x"));
    assert_eq!(a.processing_len(), 1);
    b.shut_down();
    assert!(a.shutting_down());
}

#[test]
fn debug_and_defaults() {
    let q: WorkQueue<u8> = WorkQueue::builder().name("dbg").build().unwrap();
    q.add(1);
    q.add_after(2, Duration::from_secs(1));
    let s = format!("{q:?}");
    assert!(
        s.contains("\"dbg\"") && s.contains("ready: 1") && s.contains("delayed: 1"),
        "{s}"
    );
    assert_eq!(q.name(), Some("dbg"));
    assert_eq!(
        AddOpts::default(),
        AddOpts {
            after: None,
            rate_limited: false,
            priority: 0
        }
    );
    assert_eq!(AddOpts::priority(3).priority, 3);
}
