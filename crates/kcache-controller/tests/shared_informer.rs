//! Two controllers on one factory share its primary informer: it runs
//! exactly once (one LIST, no "did not run" error), and a controller that
//! stops leaves it running for the other. An informer no one else runs
//! (given to `for_informer`) is run, and stopped, by its controller.
//! Its own test binary: it captures the logs with a thread-local
//! subscriber.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{Action, Config, Controller, Request};
use kcache_informer::{SharedIndexInformer, SharedInformerFactory};
use kcache_testing::fake::{End, Fake, Reply, cm_items, list_json};
use kcache_testing::logs::LogBuffer;
use parking_lot::Mutex;

/// A client that lists two ConfigMaps, holds watches open, and counts
/// the lists it answered.
fn client(lists: Arc<AtomicUsize>) -> kube::Client {
    let list = list_json("100", "", cm_items(&["a", "b"]));
    Fake::new(move |r| {
        if r.is_watch() {
            return Reply::Chunks(vec![], End::Hang);
        }
        lists.fetch_add(1, Ordering::SeqCst);
        Reply::Json(200, list.clone())
    })
    .client
}

type Seen = Arc<Mutex<BTreeSet<String>>>;

fn reconciler() -> impl Fn(Request<ConfigMap>, Seen) -> std::future::Ready<Result<Action, io::Error>>
{
    |req, seen| {
        seen.lock().insert(req.key);
        std::future::ready(Ok(Action::await_change()))
    }
}

async fn until(what: &str, f: impl Fn() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn shared_primary_informer_runs_once() {
    let (logs, _guard) = LogBuffer::set_default(tracing::Level::INFO);

    let lists = Arc::new(AtomicUsize::new(0));
    let factory = SharedInformerFactory::builder(client(lists.clone()))
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let (seen_a, seen_b): (Seen, Seen) = Default::default();
    let a = Controller::<ConfigMap>::new(&factory, Config::default().name("a"));
    let b = Controller::<ConfigMap>::new(&factory, Config::default().name("b"));
    let (stop_a, stop_b) = (a.handle(), b.handle());
    let run_a = tokio::spawn(a.run(reconciler(), seen_a.clone()));
    let run_b = tokio::spawn(b.run(reconciler(), seen_b.clone()));
    until("both controllers reconciled both keys", || {
        seen_a.lock().len() == 2 && seen_b.lock().len() == 2
    })
    .await;
    assert_eq!(
        lists.load(Ordering::SeqCst),
        1,
        "the shared informer listed once"
    );

    // Stopping one controller leaves the shared informer to the factory.
    stop_a.stop();
    run_a.await.unwrap().unwrap();
    let informer: SharedIndexInformer<ConfigMap> = factory.informer();
    assert!(
        !informer.is_stopped(),
        "a controller stopped an informer it did not start"
    );
    assert!(informer.has_synced());
    assert!(stop_b.health().readiness().0);
    stop_b.stop();
    run_b.await.unwrap().unwrap();
    factory.shutdown().await;
    assert!(informer.is_stopped());

    // An informer nobody else runs is run by its controller, and stopped
    // with it.
    let own = SharedIndexInformer::<ConfigMap>::builder(client(lists.clone()))
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..Default::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let other = SharedInformerFactory::new(client(Arc::new(AtomicUsize::new(0))));
    let c = Controller::for_informer(&other, own.clone(), &(), Config::default().name("c"));
    let stop_c = c.handle();
    let seen_c: Seen = Default::default();
    let run_c = tokio::spawn(c.run(reconciler(), seen_c.clone()));
    until("the controller reconciled its own informer's keys", || {
        seen_c.lock().len() == 2
    })
    .await;
    stop_c.stop();
    run_c.await.unwrap().unwrap();
    assert!(own.is_stopped(), "the controller stops the informer it ran");
    other.shutdown().await;

    let text = logs.text();
    assert!(!text.contains("ERROR"), "{text}");
    assert!(!text.contains("did not run"), "{text}");
}
