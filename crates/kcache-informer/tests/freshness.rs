//! The informer's cache freshness (client-go 1.36's
//! `LastStoreSyncResourceVersion`) against the stateful fake apiserver:
//! a relist sets it, events and bookmarks move it once they are in the
//! cache, and `wait_for_resource_version` waits for it, bounded.

mod support;

use std::time::Duration;

use kcache_informer::{FreshnessError, wait_for_cache_sync};

use kcache_core::ResourceVersion;
use kcache_testing::eventually;
use support::{FakeApi, InformerOnFake, spawn_run};
use tokio_util::sync::CancellationToken;

fn at(informer: &kcache_informer::SharedIndexInformer<support::ConfigMap>) -> Option<u64> {
    informer
        .last_store_sync_resource_version()
        .and_then(|rv| rv.as_u64())
}

#[tokio::test]
async fn the_cache_reports_what_it_has_caught_up_to() {
    let api = FakeApi::new();
    api.create("ns", "a", "1");
    let list_rv = api.create("ns", "b", "1");
    let informer = api.informer().build();
    assert_eq!(at(&informer), None, "nothing processed before the run");
    let (stop, task) = spawn_run(&informer);
    assert!(wait_for_cache_sync(&CancellationToken::new(), &[&informer]).await);
    assert_eq!(at(&informer), Some(list_rv), "the initial list");
    assert_eq!(
        informer.freshness().resource_version(),
        Some(ResourceVersion::from_u64(list_rv)),
        "the type-erased handle sees the same"
    );

    // an event: readable from the cache once the freshness says so
    let rv = api.update("ns", "a", "2");
    informer
        .wait_for_resource_version(&rv.to_string(), Duration::from_secs(10))
        .await
        .unwrap();
    let cached = informer.indexer().get_by_key("ns/a").unwrap();
    assert_eq!(cached.resource_version(), Some(rv.to_string().as_str()));

    // a bookmark moves it past writes to other resources
    let bm = api.bookmark(40);
    eventually("the bookmark's version", Duration::from_secs(10), || {
        at(&informer) == Some(bm)
    })
    .await;

    // already there: at once
    informer
        .wait_for_resource_version(&rv.to_string(), Duration::ZERO)
        .await
        .unwrap();

    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn waiting_for_a_version_the_watch_never_brings_times_out() {
    let api = FakeApi::new();
    let list_rv = api.create("ns", "a", "1");
    let informer = api.informer().build();
    let (stop, task) = spawn_run(&informer);
    assert!(wait_for_cache_sync(&CancellationToken::new(), &[&informer]).await);
    let wanted = list_rv + 100;
    let e = informer
        .wait_for_resource_version(&wanted.to_string(), Duration::from_millis(200))
        .await
        .unwrap_err();
    match &e {
        FreshnessError::TimedOut {
            reached,
            behind,
            waited,
            ..
        } => {
            assert_eq!(reached.as_ref().and_then(|r| r.as_u64()), Some(list_rv));
            assert_eq!(*behind, Some(100));
            assert_eq!(*waited, Duration::from_millis(200));
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("100 writes behind"), "{e}");
    // not a number: a clear error, not a wait
    let e = informer
        .wait_for_resource_version("opaque-token", Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(matches!(e, FreshnessError::Incomparable(_)), "{e:?}");
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_relist_sets_it_to_the_list() {
    let api = FakeApi::new();
    api.create("ns", "a", "1");
    let informer = api.informer().build();
    let (stop, task) = spawn_run(&informer);
    assert!(wait_for_cache_sync(&CancellationToken::new(), &[&informer]).await);
    // changes the watch never sees, then 410: the relist brings them
    let newest = api.silently(|api| {
        api.update("ns", "a", "2");
        api.create("ns", "b", "1")
    });
    api.expire_old_resource_versions();
    eventually("the relist's version", Duration::from_secs(10), || {
        at(&informer) == Some(newest)
    })
    .await;
    assert!(informer.indexer().get_by_key("ns/b").is_some());
    stop.cancel();
    task.await.unwrap().unwrap();
}

fn ghost(i: u64, rv: u64) -> bytes::Bytes {
    bytes::Bytes::from(format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"ghost-{i}","namespace":"ns","uid":"u-{i}","resourceVersion":"{rv}"}}}}"#
    ))
}

/// Own writes the watch never settles (here: objects the fake apiserver
/// never had, as a write outside the informer's selectors would be) are
/// forgotten by a later write once the cache's freshness has passed them,
/// so they do not pile up to the cap.
#[tokio::test]
async fn own_writes_the_cache_has_passed_are_swept_by_later_writes() {
    let api = FakeApi::new();
    let list_rv = api.create("ns", "a", "1");
    let informer = api.informer().build();
    let (stop, task) = spawn_run(&informer);
    assert!(wait_for_cache_sync(&CancellationToken::new(), &[&informer]).await);

    for i in 1..=100 {
        assert!(informer.record_own_write(ghost(i, list_rv + i)).unwrap());
    }
    assert_eq!(
        informer.indexer().own_writes(),
        100,
        "ahead of the cache: all held"
    );

    let bm = api.bookmark(200);
    eventually("the bookmark's version", Duration::from_secs(10), || {
        at(&informer) == Some(bm)
    })
    .await;
    assert!(informer.record_own_write(ghost(101, bm + 1)).unwrap());
    assert_eq!(
        informer.indexer().own_writes(),
        1,
        "the 100 the cache has passed are forgotten, the new one is held"
    );

    stop.cancel();
    task.await.unwrap().unwrap();
}
