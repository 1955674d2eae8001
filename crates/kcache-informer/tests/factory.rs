//! SharedInformerFactory against the fake apiserver.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use kcache_informer::{
    InformerError, ResourceEventHandlerFuncs, SharedInformerFactory, wait_for_cache_sync,
};
use kcache_reflector::WatchConfig;
use kcache_testing::eventually;
use kcache_testing::logs::Logs;
use support::{ConfigMap, FakeApi, InformerOnFake};
use tokio_util::sync::CancellationToken;

fn factory(api: &FakeApi) -> SharedInformerFactory {
    SharedInformerFactory::builder(api.client.clone())
        .config(kcache_informer::InformerConfig {
            watch: WatchConfig {
                use_watch_list: false,
                ..WatchConfig::default()
            },
            resync_period: Duration::from_secs(30),
            ..kcache_informer::InformerConfig::default()
        })
        .resync_for::<ConfigMap>(Duration::from_secs(10))
        .build()
}

/// Log capture, a fake with one ConfigMap, a [`factory`] on it and its
/// ConfigMap informer.
fn one_configmap_factory() -> (
    Logs,
    FakeApi,
    SharedInformerFactory,
    kcache_informer::SharedIndexInformer<ConfigMap>,
) {
    let logs = Logs::capture();
    let api = FakeApi::new();
    api.create("ns", "a", "1");
    let f = factory(&api);
    let informer = f.informer::<ConfigMap>();
    (logs, api, f, informer)
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
    eventually("one watch", Duration::from_secs(10), || api.watches() == 1).await;
    assert_eq!(api.lists(), 1, "one list for the shared informer");

    // an informer created after start is started by the next start()
    let meta = f.metadata_informer::<ConfigMap>();
    assert!(!meta.has_started());
    f.start();
    eventually("second informer started", Duration::from_secs(10), || {
        meta.has_started()
    })
    .await;

    f.shutdown().await;
    assert!(i1.is_stopped() && meta.is_stopped());
}

/// Issue 15, finding 5: `factory.start()` claims each informer before it
/// returns, so a caller that checks right after sees it started, cannot
/// start it again (`try_start` is `None`, `run` is `AlreadyStarted` at
/// once), and nothing logs an ERROR; the one run lists once.
#[tokio::test]
async fn factory_start_then_try_start_returns_none() {
    let (logs, api, f, informer) = one_configmap_factory();
    assert!(!informer.has_started());
    f.start();
    assert!(informer.has_started(), "claimed when start() returns");
    assert!(informer.try_start(CancellationToken::new()).is_none());
    let again = informer.run(CancellationToken::new()).now_or_never();
    assert!(
        matches!(again, Some(Err(InformerError::AlreadyStarted("run")))),
        "a second run returns at once: {again:?}"
    );
    assert!(f.wait_for_cache_sync().await.values().all(|ok| *ok));
    eventually("one watch", Duration::from_secs(10), || api.watches() == 1).await;
    assert_eq!(api.lists(), 1);
    f.shutdown().await;
    assert!(
        informer.is_stopped(),
        "the factory owned and stopped the run"
    );
    assert!(
        logs.at(tracing::Level::ERROR).is_empty(),
        "{:#?}",
        logs.all()
    );
}

/// The other way round: an informer its caller started first is left to
/// that caller; the factory neither runs it again nor stops it.
#[tokio::test]
async fn factory_leaves_an_informer_started_elsewhere_to_its_owner() {
    let (logs, api, f, informer) = one_configmap_factory();
    let cancel = CancellationToken::new();
    let run = informer.try_start(cancel.clone()).expect("first claim");
    f.start();
    assert!(f.wait_for_cache_sync().await.values().all(|ok| *ok));
    f.shutdown().await;
    assert!(!informer.is_stopped(), "not the factory's to stop");
    assert!(informer.has_synced());
    cancel.cancel();
    run.await.unwrap().unwrap();
    assert!(informer.is_stopped());
    assert_eq!(api.lists(), 1);
    assert!(
        logs.at(tracing::Level::ERROR).is_empty(),
        "{:#?}",
        logs.all()
    );
}

/// Many threads race to start one informer, half with `try_start`, half
/// with `run`: exactly one becomes the owner (a `try_start` handle, or a
/// `run` that returns `Ok` after cancel); every other caller is refused at
/// once. Repeated to give the race a chance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_run_the_informer_once() {
    enum Outcome {
        Started(Option<tokio::task::JoinHandle<Result<(), InformerError>>>),
        Ran(tokio::task::JoinHandle<Result<(), InformerError>>),
    }
    for round in 0..20 {
        let api = FakeApi::new();
        api.create("ns", "a", "1");
        let informer = api.informer().build();
        let cancel = CancellationToken::new();
        let go = Arc::new(std::sync::Barrier::new(8));
        let rt = tokio::runtime::Handle::current();
        let threads: Vec<_> = (0..8)
            .map(|k| {
                let (i, c, go, rt) = (informer.clone(), cancel.clone(), go.clone(), rt.clone());
                std::thread::spawn(move || {
                    let _rt = rt.enter();
                    go.wait();
                    if k % 2 == 0 {
                        Outcome::Started(i.try_start(c))
                    } else {
                        Outcome::Ran(tokio::spawn(async move { i.run(c).await }))
                    }
                })
            })
            .collect();
        let outcomes: Vec<Outcome> = tokio::task::spawn_blocking(move || {
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        })
        .await
        .unwrap();
        assert!(informer.has_started());
        assert!(wait_for_cache_sync(&cancel, &[&informer]).await);
        cancel.cancel();
        let (mut owners, mut refused) = (0, 0);
        for o in outcomes {
            match o {
                Outcome::Started(Some(h)) => {
                    owners += 1;
                    h.await.unwrap().unwrap();
                }
                Outcome::Started(None) => refused += 1,
                Outcome::Ran(h) => match h.await.unwrap() {
                    Ok(()) => owners += 1,
                    Err(InformerError::AlreadyStarted("run")) => refused += 1,
                    Err(e) => panic!("round {round}: {e}"),
                },
            }
        }
        assert_eq!((owners, refused), (1, 7), "round {round}");
        assert_eq!(api.lists(), 1, "round {round}");
    }
}

/// Finding 7 through the factory: `shutdown()` returns after the handler
/// shutdown timeout (paused clock) although a handler never returns, with
/// a WARN naming it.
#[tokio::test(start_paused = true)]
async fn factory_shutdown_is_bounded_with_a_stuck_handler() {
    let logs = Logs::capture();
    let api = FakeApi::new();
    api.create("ns", "a", "1");
    let f = SharedInformerFactory::builder(api.client.clone())
        .config(kcache_informer::InformerConfig {
            watch: WatchConfig {
                use_watch_list: false,
                ..WatchConfig::default()
            },
            handler_shutdown_timeout: Duration::from_secs(20),
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let informer = f.informer::<ConfigMap>();
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (release, stuck) = std::sync::mpsc::channel::<()>();
    let stuck = Mutex::new(stuck);
    let reg = informer
        .add_event_handler(ResourceEventHandlerFuncs::new().add_func(move |o, _| {
            let _ = entered_tx.send(o.key().to_owned());
            let _ = stuck.lock().unwrap().recv();
        }))
        .unwrap();
    f.start();
    assert_eq!(entered.recv().await.as_deref(), Some("ns/a"));
    let t0 = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(3600), f.shutdown())
        .await
        .expect("shutdown returned within an hour (paused clock)");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(20) && waited < Duration::from_secs(21),
        "{waited:?}"
    );
    assert!(informer.is_stopped());
    let warns: Vec<_> = logs
        .at(tracing::Level::WARN)
        .into_iter()
        .filter(|w| w.contains(&format!("handler={} ", reg.name())))
        .collect();
    assert_eq!(warns.len(), 1, "{:#?}", logs.all());
    assert!(warns[0].contains("stuck_in=on_add of ns/a"), "{}", warns[0]);
    drop(release);
}
