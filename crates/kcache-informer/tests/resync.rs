//! Resync periods: client-go's TestResyncCheckPeriod and
//! TestListenerResyncPeriods.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kcache_informer::{ResourceEventHandlerFuncs, SharedIndexInformer};
use kcache_testing::eventually;
use support::{ConfigMap, FakeApi, InformerOnFake, spawn_run};

const H: Duration = Duration::from_secs(3600);
const M: Duration = Duration::from_secs(60);
const S: Duration = Duration::from_secs(1);

fn noop() -> ResourceEventHandlerFuncs<ConfigMap> {
    ResourceEventHandlerFuncs::new()
}

#[tokio::test]
async fn check_period_follows_the_shortest_handler_before_start() {
    let api = FakeApi::new();
    let informer = api
        .informer()
        .config(kcache_informer::InformerConfig {
            resync_period: 12 * H,
            ..support::on_fake()
        })
        .build();
    let r1 = informer
        .add_event_handler_with_resync_period(noop(), 12 * H)
        .unwrap();
    assert_eq!(r1.resync_period(), 12 * H);
    let r2 = informer
        .add_event_handler_with_resync_period(noop(), M)
        .unwrap();
    assert_eq!((r1.resync_period(), r2.resync_period()), (12 * H, M));
    let r3 = informer
        .add_event_handler_with_resync_period(noop(), 55 * S)
        .unwrap();
    assert_eq!(
        (r1.resync_period(), r2.resync_period(), r3.resync_period()),
        (12 * H, M, 55 * S)
    );
    let r4 = informer
        .add_event_handler_with_resync_period(noop(), 5 * S)
        .unwrap();
    assert_eq!(r4.resync_period(), 5 * S);
    // below the 1 s minimum: raised to it (and lowers the check period)
    let r5 = informer
        .add_event_handler_with_resync_period(noop(), Duration::from_millis(10))
        .unwrap();
    assert_eq!(r5.resync_period(), S);
    // 0: never
    let r6 = informer
        .add_event_handler_with_resync_period(noop(), Duration::ZERO)
        .unwrap();
    assert_eq!(r6.resync_period(), Duration::ZERO);
    // the default is the informer's period
    let r7 = informer.add_event_handler(noop()).unwrap();
    assert_eq!(r7.resync_period(), 12 * H);
}

#[tokio::test]
async fn an_informer_without_resync_gives_no_handler_a_resync() {
    let api = FakeApi::new();
    let informer = api.informer().build();
    let r = informer
        .add_event_handler_with_resync_period(noop(), M)
        .unwrap();
    assert_eq!(r.resync_period(), Duration::ZERO);
}

#[tokio::test]
async fn after_start_a_short_period_is_raised_to_the_check_period() {
    let api = FakeApi::new();
    let informer = api
        .informer()
        .config(kcache_informer::InformerConfig {
            resync_period: M,
            ..support::on_fake()
        })
        .build();
    let (cancel, task) = spawn_run(&informer);
    eventually("started", Duration::from_secs(10), || {
        informer.has_started()
    })
    .await;
    let r = informer
        .add_event_handler_with_resync_period(noop(), 5 * S)
        .unwrap();
    assert_eq!(r.resync_period(), M);
    cancel.cancel();
    task.await.unwrap().unwrap();
}

fn sync_counter(count: Arc<AtomicUsize>) -> ResourceEventHandlerFuncs<ConfigMap> {
    ResourceEventHandlerFuncs::new().update_func(move |old, new| {
        // a resync delivers the cached object again: same resourceVersion
        assert_eq!(old.resource_version(), new.resource_version());
        count.fetch_add(1, Ordering::SeqCst);
    })
}

#[tokio::test(start_paused = true)]
async fn sync_updates_go_only_to_handlers_whose_resync_is_due() {
    let api = FakeApi::new();
    api.create("ns", "a", "1");
    let informer: SharedIndexInformer<ConfigMap> = api
        .informer()
        .config(kcache_informer::InformerConfig {
            resync_period: S,
            ..support::on_fake()
        })
        .build();
    let (every_1s, every_3s, never) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    informer
        .add_event_handler(sync_counter(every_1s.clone()))
        .unwrap();
    informer
        .add_event_handler_with_resync_period(sync_counter(every_3s.clone()), 3 * S)
        .unwrap();
    informer
        .add_event_handler_with_resync_period(sync_counter(never.clone()), Duration::ZERO)
        .unwrap();
    let (cancel, task) = spawn_run(&informer);
    // Handlers run on the listeners' own threads, in real time, while the
    // paused clock runs the resync timer ahead at once: poll with a real
    // deadline, giving the threads real time between virtual steps.
    let guard = std::time::Instant::now() + Duration::from_secs(60);
    while every_3s.load(Ordering::SeqCst) < 2 {
        assert!(
            std::time::Instant::now() < guard,
            "the 3 s handler got no two resyncs in a minute"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        std::thread::sleep(Duration::from_millis(1));
    }
    // Block this (the runtime's only) thread, which stops the paused clock,
    // until what was distributed so far has been handled (a generous
    // real-time guard, not a timing assertion).
    let (one, three) = loop {
        let three = every_3s.load(Ordering::SeqCst);
        let one = every_1s.load(Ordering::SeqCst);
        if one >= 2 * three || std::time::Instant::now() > guard {
            break (one, three);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(one >= 2 * three, "1 s handler: {one}, 3 s handler: {three}");
    assert_eq!(never.load(Ordering::SeqCst), 0);
    cancel.cancel();
    task.await.unwrap().unwrap();
}
