//! SharedInformerFactory against the fake apiserver.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kcache_informer::{ListOptions, SharedInformerFactory};
use support::{ConfigMap, FakeApi, eventually};

fn factory(api: &FakeApi) -> SharedInformerFactory {
    SharedInformerFactory::builder(api.client.clone())
        .tweak_list_options(|o: &mut ListOptions| o.use_watch_list = false)
        .default_resync(Duration::from_secs(30))
        .resync_for::<ConfigMap>(Duration::from_secs(10))
        .build()
}

#[tokio::test]
async fn one_informer_per_type_started_once_and_shut_down() {
    let api = FakeApi::new();
    api.create("ns", "a", "1");
    let f = factory(&api);
    let i1 = f.informer::<ConfigMap>();
    let i2 = f.informer::<ConfigMap>();
    assert!(Arc::ptr_eq(i1.indexer(), i2.indexer()), "the same informer");
    // the per-type resync applies
    let reg = i1
        .add_event_handler(kcache_informer::ResourceEventHandlerFuncs::new())
        .unwrap();
    assert_eq!(reg.resync_period(), Duration::from_secs(10));

    f.start();
    f.start(); // starting again starts nothing new
    let synced = f.wait_for_cache_sync().await;
    assert_eq!(synced.len(), 1);
    assert_eq!(synced.get("configmaps"), Some(&true));
    assert_eq!(i2.indexer().len(), 1);
    eventually("one watch", || api.watches() == 1).await;
    assert_eq!(api.lists(), 1, "one list for the shared informer");

    // an informer created after start is started by the next start()
    let meta = f.metadata_informer::<ConfigMap>();
    assert!(!meta.has_started());
    f.start();
    eventually("second informer started", || meta.has_started()).await;

    f.shutdown().await;
    assert!(i1.is_stopped() && meta.is_stopped());
}
