//! The store's freshness (client-go's `LastStoreSyncResourceVersion`): a
//! queue publishes the resourceVersion of an event, a relist or a bookmark
//! only once every item queued before it has been popped and processed.

use std::sync::Arc;

use kcache_core::{CachedObject, ReflectorStore, ResourceVersion};
use kcache_deltafifo::{DeltaFifo, FifoOptions, Queue, RealFifo, StoreFreshness};
use serde_json::{Value, json};

type Obj = CachedObject<Value>;

fn obj(name: &str, rv: u64) -> Obj {
    let v =
        json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}});
    CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
}

fn rv(q: &dyn Queue<Value>) -> Option<u64> {
    q.freshness().resource_version().and_then(|r| r.as_u64())
}

async fn pop(q: &dyn Queue<Value>) {
    q.pop(Box::new(|_, _| Ok(()))).await.unwrap();
}

fn both() -> [(&'static str, Arc<dyn Queue<Value>>); 2] {
    [
        ("DeltaFifo", Arc::new(DeltaFifo::new(FifoOptions::new()))),
        ("RealFifo", Arc::new(RealFifo::new(FifoOptions::new()))),
    ]
}

#[tokio::test]
async fn an_event_counts_only_once_it_is_processed() {
    for (name, q) in both() {
        q.add(obj("a", 5)).unwrap();
        assert_eq!(rv(&*q), None, "{name}: queued, not processed");
        assert_eq!(q.last_store_sync_resource_version(), None, "{name}");
        pop(&*q).await;
        assert_eq!(rv(&*q), Some(5), "{name}");
        assert_eq!(
            q.last_store_sync_resource_version().as_deref(),
            Some("5"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_key_popped_early_does_not_claim_the_events_of_other_keys() {
    // The DeltaFifo pops a's two deltas (5 and 7) before b's (6): after
    // that pop the store holds 5 and 7 but not 6, so it is at 5.
    let q = DeltaFifo::<Value>::new(FifoOptions::new());
    q.add(obj("a", 5)).unwrap();
    q.add(obj("b", 6)).unwrap();
    q.update(obj("a", 7)).unwrap();
    pop(&q).await;
    assert_eq!(rv(&q), Some(5));
    pop(&q).await;
    assert_eq!(rv(&q), Some(7));
    // the RealFifo goes event by event
    let q = RealFifo::<Value>::new(FifoOptions::new());
    q.add(obj("a", 5)).unwrap();
    q.add(obj("b", 6)).unwrap();
    q.update(obj("a", 7)).unwrap();
    for want in [5, 6, 7] {
        pop(&q).await;
        assert_eq!(rv(&q), Some(want));
    }
}

#[tokio::test]
async fn a_bookmark_waits_for_what_came_before_it() {
    for (name, q) in both() {
        q.add(obj("a", 5)).unwrap();
        q.bookmark("9").unwrap();
        assert_eq!(rv(&*q), None, "{name}");
        pop(&*q).await;
        assert_eq!(
            rv(&*q),
            Some(9),
            "{name}: the bookmark passed with the event"
        );
        // idle: at once
        q.bookmark("12").unwrap();
        assert_eq!(rv(&*q), Some(12), "{name}");
    }
}

#[tokio::test]
async fn a_relist_counts_once_all_its_items_are_processed() {
    for (name, q) in both() {
        q.replace(vec![obj("a", 3), obj("b", 8), obj("c", 4)], "20".into())
            .unwrap();
        for _ in 0..2 {
            pop(&*q).await;
            assert_eq!(rv(&*q), None, "{name}: the items' versions do not count");
        }
        pop(&*q).await;
        assert_eq!(rv(&*q), Some(20), "{name}");
        // an empty relist with nothing known: at once
        q.replace(Vec::new(), "25".into()).unwrap();
        // (the DeltaFifo without known objects queues nothing; the RealFifo
        // neither)
        assert_eq!(rv(&*q), Some(25), "{name}");
    }
}

#[tokio::test]
async fn a_dropped_delete_still_moves_the_version() {
    // The DeltaFifo drops the delete of a key it neither holds nor knows.
    let q = DeltaFifo::<Value>::new(FifoOptions::new());
    q.delete(obj("gone", 30).into()).unwrap();
    assert!(q.is_empty());
    assert_eq!(rv(&q), Some(30));
}

#[tokio::test]
async fn the_handle_given_in_the_options_is_the_one_published_on() {
    let shared = StoreFreshness::new();
    let q = RealFifo::<Value>::new(FifoOptions::new().freshness(shared.clone()));
    let waiter = tokio::spawn({
        let shared = shared.clone();
        async move { shared.reached(&ResourceVersion::new("41")).await }
    });
    q.add(obj("a", 41)).unwrap();
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished(), "not processed yet");
    pop(&q).await;
    waiter.await.unwrap().unwrap();
    assert_eq!(shared.resource_version(), Some(ResourceVersion::new("41")));
}
