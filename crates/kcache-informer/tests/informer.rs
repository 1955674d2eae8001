//! SharedIndexInformer behaviour against a fake apiserver (client-go's
//! shared_informer_test.go scenarios).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kcache_core::{CachedObject, ObjectOrTombstone};
use kcache_deltafifo::TransformFunc;
use kcache_informer::{
    InformerError, ResourceEventHandler, ResourceEventHandlerFuncs, SharedIndexInformer,
    SharedIndexInformerBuilder, wait_for_cache_sync,
};
use kcache_testing::eventually;
use kcache_testing::logs::Logs;
use support::{ConfigMap, FakeApi, InformerOnFake, spawn_run};
use tokio_util::sync::CancellationToken;

/// Records every notification as a string.
#[derive(Clone, Default)]
struct Recorder {
    events: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }
    fn count(&self, prefix: &str) -> usize {
        self.events()
            .iter()
            .filter(|e| e.starts_with(prefix))
            .count()
    }
}

impl ResourceEventHandler<ConfigMap> for Recorder {
    fn on_add(&self, obj: &CachedObject<ConfigMap>, initial: bool) {
        self.events.lock().unwrap().push(format!(
            "add {} {} {}",
            obj.key(),
            obj.resource_version().unwrap_or(""),
            if initial { "initial" } else { "live" }
        ));
    }
    fn on_update(&self, old: &CachedObject<ConfigMap>, new: &CachedObject<ConfigMap>) {
        self.events.lock().unwrap().push(format!(
            "update {} {}->{}",
            new.key(),
            old.resource_version().unwrap_or(""),
            new.resource_version().unwrap_or("")
        ));
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<ConfigMap>) {
        self.events.lock().unwrap().push(format!(
            "delete {} {}",
            obj.key(),
            if obj.is_tombstone() {
                "tombstone"
            } else {
                "object"
            }
        ));
    }
}

/// A closed gate that handler threads wait on until the test opens it.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    fn wait(&self) {
        let (m, cv) = &*self.0;
        let mut open = m.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
    }
    fn open(&self) {
        let (m, cv) = &*self.0;
        *m.lock().unwrap() = true;
        cv.notify_all();
    }
}

struct Running {
    informer: SharedIndexInformer<ConfigMap>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), InformerError>>,
}

impl Running {
    fn start(informer: SharedIndexInformer<ConfigMap>) -> Self {
        let (cancel, task) = spawn_run(&informer);
        Running {
            informer,
            cancel,
            task,
        }
    }
    async fn synced(&self) {
        assert!(wait_for_cache_sync(&self.cancel, &[&self.informer]).await);
    }
    /// Starts `informer` and waits for its sync.
    async fn synced_start(informer: SharedIndexInformer<ConfigMap>) -> Self {
        let run = Running::start(informer);
        run.synced().await;
        run
    }
    /// The same with a [`Recorder`] registered first.
    async fn recorded(informer: SharedIndexInformer<ConfigMap>) -> (Self, Recorder) {
        let rec = Recorder::default();
        informer.add_event_handler(rec.clone()).unwrap();
        (Running::synced_start(informer).await, rec)
    }
    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap().unwrap();
    }
}

/// A fake apiserver holding a ConfigMap (`v: "1"`) per (namespace, name),
/// and an informer on it.
fn informer_on_fake(objects: &[(&str, &str)]) -> (FakeApi, SharedIndexInformer<ConfigMap>) {
    informer_on_fake_with(objects, |b| b)
}

/// [`informer_on_fake`] with `f` applied to the informer's builder.
fn informer_on_fake_with(
    objects: &[(&str, &str)],
    f: impl FnOnce(SharedIndexInformerBuilder<ConfigMap>) -> SharedIndexInformerBuilder<ConfigMap>,
) -> (FakeApi, SharedIndexInformer<ConfigMap>) {
    let api = FakeApi::new();
    for (ns, name) in objects {
        api.create(ns, name, "1");
    }
    let informer = f(api.informer()).build();
    (api, informer)
}

/// Waits up to 10 s for `cond`.
async fn soon(what: &str, cond: impl FnMut() -> bool) {
    eventually(what, Duration::from_secs(10), cond).await
}

fn cached_keys(i: &SharedIndexInformer<ConfigMap>) -> Vec<(String, String)> {
    let mut v: Vec<_> = i
        .indexer()
        .list()
        .iter()
        .map(|o| {
            (
                o.key().to_string(),
                o.resource_version().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

fn fake_keys(api: &FakeApi) -> Vec<(String, String)> {
    api.snapshot().into_iter().collect()
}

#[tokio::test]
async fn initial_list_then_live_changes_in_order() {
    let (api, informer) = informer_on_fake(&[("a", "one"), ("a", "two")]);
    let rec = Recorder::default();
    let reg = informer.add_event_handler(rec.clone()).unwrap();
    let run = Running::synced_start(informer.clone()).await;
    soon("registration synced", || reg.has_synced()).await;
    assert_eq!(rec.events(), ["add a/one 1 initial", "add a/two 2 initial"]);

    api.update("a", "one", "2");
    api.delete("a", "two");
    api.create("b", "three", "1");
    soon("3 live events", || rec.events().len() == 5).await;
    assert_eq!(
        rec.events()[2..],
        [
            "update a/one 1->3",
            "delete a/two object",
            "add b/three 5 live"
        ]
    );
    assert_eq!(cached_keys(&informer), fake_keys(&api));
    assert_eq!(informer.last_sync_resource_version(), "5");
    // listers read the cache; typed decode on demand
    let one = informer.lister().namespaced("a").get("one").unwrap();
    let typed: ConfigMap = one.decode().unwrap();
    assert_eq!(typed.data.unwrap()["v"], "2");
    assert!(informer.lister().namespaced("a").get("two").is_err());
    run.stop().await;
}

#[tokio::test]
async fn watch_disruption_relists_with_updates_and_tombstones() {
    // TestSharedInformerWatchDisruption / TestResetWatch / TestReplaceEvents
    let (api, informer) = informer_on_fake(&[("ns", "keep"), ("ns", "change"), ("ns", "gone")]);
    let (run, rec) = Running::recorded(informer.clone()).await;
    soon("initial adds", || rec.count("add") == 3).await;

    // While disconnected: an update, a delete, a create; and the server
    // forgot the history, so the watch gets 410 and the informer relists.
    api.silently(|api| {
        api.update("ns", "change", "2");
        api.delete("ns", "gone");
        api.create("ns", "new", "1");
    });
    api.expire_old_resource_versions();
    soon("cache equals the server", || {
        cached_keys(&informer) == fake_keys(&api)
    })
    .await;
    soon("three changes and one sync delivered", || {
        rec.events().len() == 7
    })
    .await;
    let tail = rec.events()[3..].to_vec();
    assert!(
        tail.contains(&"update ns/change 2->4".to_string()),
        "{tail:?}"
    );
    assert!(
        tail.contains(&"delete ns/gone tombstone".to_string()),
        "{tail:?}"
    );
    assert!(tail.contains(&"add ns/new 6 live".to_string()), "{tail:?}");
    // the unchanged object is a Replaced delta with the same RV: a sync
    // update, which (as in client-go) an informer without resync delivers
    // to every handler
    assert!(
        tail.contains(&"update ns/keep 1->1".to_string()),
        "{tail:?}"
    );
    assert!(api.lists() >= 2);
    run.stop().await;
}

#[tokio::test]
async fn clean_end_of_watch_rewatches_without_relist() {
    let (api, informer) = informer_on_fake(&[("ns", "a")]);
    let (run, rec) = Running::recorded(informer.clone()).await;
    let lists = api.lists();
    // (a watch that ends within 1 s without any event counts as an error
    // and relists, as in client-go: let this one carry an event first)
    api.update("ns", "a", "2");
    soon("update on the first watch", || rec.count("update") == 1).await;
    api.close_watches();
    soon("a second watch", || api.watches() >= 2).await;
    api.update("ns", "a", "3");
    soon("update after rewatch", || rec.count("update") == 2).await;
    assert_eq!(api.lists(), lists, "a clean end of stream must not relist");
    run.stop().await;
}

#[tokio::test]
async fn list_errors_reach_the_watch_error_handler() {
    // TestSharedInformerErrorHandling
    let errors = Arc::new(AtomicUsize::new(0));
    let e2 = errors.clone();
    let (api, informer) = informer_on_fake_with(&[("ns", "a")], |b| {
        b.watch_error_handler(Arc::new(move |_e| {
            e2.fetch_add(1, Ordering::SeqCst);
        }))
    });
    api.fail_lists(1);
    let run = Running::synced_start(informer.clone()).await; // recovers after the backoff
    assert!(errors.load(Ordering::SeqCst) >= 1);
    assert_eq!(cached_keys(&informer), fake_keys(&api));
    run.stop().await;
}

/// A transform that cuts managedFields (as `ObjectOptions` does while
/// reading, here after).
fn strip_managed_fields() -> TransformFunc<ConfigMap> {
    Arc::new(|o: CachedObject<ConfigMap>| o.without_managed_fields().map_err(Into::into))
}

#[tokio::test]
async fn transform_runs_before_caching() {
    // TestSharedInformerTransformer
    let (_api, informer) =
        informer_on_fake_with(&[("ns", "a")], |b| b.transform(strip_managed_fields()));
    let run = Running::synced_start(informer.clone()).await;
    let cached = informer.indexer().get_by_key("ns/a").unwrap();
    let v: serde_json::Value = serde_json::from_slice(cached.bytes()).unwrap();
    assert!(v["metadata"].get("managedFields").is_none());
    assert_eq!(v["data"]["v"], "1");
    run.stop().await;
}

/// A relist (after a 410) does not hold the cache twice: the cache keeps
/// its own object for each unchanged ConfigMap (the reflector reuses it
/// and the queue does not transform it again); changed ones are fresh
/// objects, transformed once.
#[tokio::test]
async fn relist_keeps_unchanged_objects_and_transforms_only_changed_ones() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let strip = strip_managed_fields();
    let (api, informer) = informer_on_fake_with(&[("ns", "keep"), ("ns", "change")], |b| {
        b.transform(Arc::new(move |o| {
            c.fetch_add(1, Ordering::SeqCst);
            strip(o)
        }))
    });
    let (run, rec) = Running::recorded(informer.clone()).await;
    let keep = informer.indexer().get_by_key("ns/keep").unwrap();
    let change = informer.indexer().get_by_key("ns/change").unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    api.silently(|api| api.update("ns", "change", "2"));
    api.expire_old_resource_versions();
    soon("both relisted objects delivered", || {
        rec.count("update") == 2
    })
    .await;
    assert_eq!(cached_keys(&informer), fake_keys(&api));
    let keep_now = informer.indexer().get_by_key("ns/keep").unwrap();
    let change_now = informer.indexer().get_by_key("ns/change").unwrap();
    assert!(keep_now.ptr_eq(&keep), "the unchanged object is reused");
    assert!(!change_now.ptr_eq(&change));
    assert!(!String::from_utf8_lossy(change_now.bytes()).contains("managedFields"));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "only the changed object is transformed"
    );
    assert!(api.lists() >= 2);
    run.stop().await;
}

#[tokio::test]
async fn late_handler_gets_the_cache_then_live_events_without_loss_or_duplicates() {
    // TestAddWhileActive
    let api = FakeApi::new();
    for i in 0..50 {
        api.create("ns", &format!("cm{i}"), "1");
    }
    let informer = api.informer().build();
    let (run, _first) = Running::recorded(informer.clone()).await;

    // A writer keeps changing objects while the second handler registers.
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                api.update("ns", &format!("cm{}", i % 50), &i.to_string());
                tokio::task::yield_now().await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(1)).await;
    let late = Recorder::default();
    let reg = informer.add_event_handler(late.clone()).unwrap();
    writer.await.unwrap();
    soon("late handler synced", || reg.has_synced()).await;
    soon("cache caught up", || {
        cached_keys(&informer) == fake_keys(&api)
    })
    .await;
    soon("late handler idle", || reg.is_idle()).await;

    // Replaying the late handler's events over its initial adds must give
    // exactly the final state: nothing lost, nothing seen twice or stale.
    let mut state = std::collections::BTreeMap::<String, String>::new();
    let mut initial = 0;
    for e in late.events() {
        let parts: Vec<&str> = e.split(' ').collect();
        match parts[0] {
            "add" => {
                assert_eq!(parts[3], "initial", "{e}");
                assert!(
                    state.insert(parts[1].into(), parts[2].into()).is_none(),
                    "duplicate {e}"
                );
                initial += 1;
            }
            "update" => {
                let (old, new) = parts[2].split_once("->").unwrap();
                let cur = state.get(parts[1]).expect("update before add");
                assert_eq!(cur, old, "update does not follow the state it saw: {e}");
                state.insert(parts[1].into(), new.into());
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(initial, 50);
    let expected: std::collections::BTreeMap<_, _> = fake_keys(&api).into_iter().collect();
    assert_eq!(state, expected);
    run.stop().await;
}

#[tokio::test]
async fn removed_handler_gets_nothing_more_and_removal_is_idempotent() {
    // TestSharedInformerRemoveHandler / TestRemoveWhileActive / TestRemovingRemovedSharedInformer
    let (api, informer) = informer_on_fake(&[]);
    let a = Recorder::default();
    let b = Recorder::default();
    let reg_a = informer.add_event_handler(a.clone()).unwrap();
    let reg_b = informer.add_event_handler(b.clone()).unwrap();
    let run = Running::synced_start(informer.clone()).await;
    api.create("ns", "x", "1");
    soon("both saw x", || a.count("add") == 1 && b.count("add") == 1).await;
    informer.remove_event_handler(&reg_a);
    assert!(!reg_a.is_active());
    informer.remove_event_handler(&reg_a); // idempotent
    api.create("ns", "y", "1");
    soon("b saw y", || b.count("add") == 2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(a.count("add"), 1);
    assert!(reg_b.is_active());
    run.stop().await;
}

#[tokio::test]
async fn the_same_handler_registered_twice_gets_events_twice() {
    // TestSharedInformerMultipleRegistration
    let (api, informer) = informer_on_fake(&[]);
    let rec = Recorder::default();
    let r1 = informer.add_event_handler(rec.clone()).unwrap();
    let _r2 = informer.add_event_handler(rec.clone()).unwrap();
    let run = Running::synced_start(informer.clone()).await;
    api.create("ns", "x", "1");
    soon("two adds", || rec.count("add") == 2).await;
    informer.remove_event_handler(&r1);
    api.create("ns", "y", "1");
    soon("one more add", || rec.count("add") == 3).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(rec.count("add"), 3);
    run.stop().await;
}

#[tokio::test]
async fn a_panicking_handler_keeps_receiving_and_others_are_unaffected() {
    // TestEventPanics (kcache recovers instead of crashing)
    let (api, informer) = informer_on_fake(&[]);
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let panicky = informer
        .add_event_handler(ResourceEventHandlerFuncs::new().add_func(move |obj, _| {
            s2.fetch_add(1, Ordering::SeqCst);
            if obj.name() == "boom" {
                panic!("handler bug");
            }
        }))
        .unwrap();
    let (run, rec) = Running::recorded(informer.clone()).await;
    api.create("ns", "boom", "1");
    api.create("ns", "after", "1");
    soon("panicking handler saw both", || {
        seen.load(Ordering::SeqCst) == 2
    })
    .await;
    soon("other handler saw both", || rec.count("add") == 2).await;
    assert_eq!(panicky.panics(), 1);
    assert_eq!(cached_keys(&informer).len(), 2);
    run.stop().await;
}

#[tokio::test]
async fn a_stuck_handler_does_not_delay_the_others_or_the_cache() {
    let (api, informer) = informer_on_fake(&[]);
    let gate = Gate::default();
    let g2 = gate.clone();
    let stuck = informer
        .add_event_handler(ResourceEventHandlerFuncs::new().add_func(move |_, _| g2.wait()))
        .unwrap();
    let (run, fast) = Running::recorded(informer.clone()).await;
    for i in 0..100 {
        api.create("ns", &format!("cm{i}"), "1");
    }
    soon("fast handler kept pace", || fast.count("add") == 100).await;
    assert_eq!(informer.indexer().len(), 100);
    assert!(stuck.backlog() >= 98, "backlog {}", stuck.backlog());
    let backlogs = informer.listener_backlogs();
    assert!(backlogs.iter().any(|(_, n)| *n >= 98), "{backlogs:?}");
    gate.open();
    soon("stuck handler drained", || stuck.backlog() == 0).await;
    run.stop().await;
}

#[tokio::test]
async fn registration_syncs_only_after_its_initial_adds_returned() {
    let (_api, informer) = informer_on_fake(&[("ns", "a")]);
    let release = Gate::default();
    let r2 = release.clone();
    let reg = informer
        .add_event_handler(ResourceEventHandlerFuncs::new().add_func(move |_, _| r2.wait()))
        .unwrap();
    let run = Running::synced_start(informer.clone()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(informer.has_synced());
    assert!(
        !reg.has_synced(),
        "the handler has not returned from its initial add"
    );
    release.open();
    soon("registration synced", || reg.has_synced()).await;
    run.stop().await;
}

#[tokio::test]
async fn shutdown_stops_everything_and_rejects_late_use() {
    // TestShutdown / TestAddOnStoppedSharedInformer
    let (api, informer) = informer_on_fake(&[("ns", "a")]);
    let (run, rec) = Running::recorded(informer.clone()).await;
    assert!(informer.has_started());
    run.stop().await;
    assert!(informer.is_stopped());
    assert!(matches!(
        informer.add_event_handler(Recorder::default()),
        Err(InformerError::Stopped)
    ));
    // run only once
    let again = informer.run(CancellationToken::new()).await;
    assert!(matches!(again, Err(InformerError::AlreadyStarted("run"))));
    // nothing is delivered after stop
    let before = rec.events().len();
    api.create("ns", "b", "1");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(rec.events().len(), before);
}

#[tokio::test]
async fn updates_arrive_in_order_per_key() {
    // TestUpdate
    let (api, informer) = informer_on_fake(&[]);
    let (run, rec) = Running::recorded(informer.clone()).await;
    api.create("ns", "k", "0");
    for i in 1..=100 {
        api.update("ns", "k", &i.to_string());
    }
    soon("100 updates", || rec.count("update") == 100).await;
    let mut last = 0u64;
    for e in rec.events().iter().filter(|e| e.starts_with("update")) {
        let (old, new) = e.split(' ').nth(2).unwrap().split_once("->").unwrap();
        let (old, new): (u64, u64) = (old.parse().unwrap(), new.parse().unwrap());
        assert!(old < new && old >= last, "{e}");
        last = new;
    }
    run.stop().await;
}

#[tokio::test]
async fn real_fifo_informer_behaves_the_same() {
    let api = FakeApi::new();
    api.create("ns", "a", "1");
    let informer = api
        .informer()
        .config(kcache_informer::InformerConfig {
            fifo: kcache_informer::FifoKind::RealFifo,
            ..support::on_fake()
        })
        .build();
    let (run, rec) = Running::recorded(informer.clone()).await;
    api.update("ns", "a", "2");
    api.silently(|api| api.delete("ns", "a"));
    api.expire_old_resource_versions();
    soon("tombstone delete", || rec.count("delete") == 1).await;
    assert_eq!(
        rec.events(),
        [
            "add ns/a 1 initial",
            "update ns/a 1->2",
            "delete ns/a tombstone"
        ]
    );
    run.stop().await;
}

#[tokio::test]
async fn listener_backlog_and_panics_are_exported_to_prometheus() {
    let api = FakeApi::new();
    let mut registry = prometheus_client::registry::Registry::default();
    let reflector_metrics =
        kcache_reflector::PrometheusReflectorMetricsProvider::new(&mut registry);
    let informer = api
        .informer()
        .reflector_metrics(Arc::new(reflector_metrics))
        .build();
    let gate = Gate::default();
    let g2 = gate.clone();
    informer
        .add_event_handler(ResourceEventHandlerFuncs::new().add_func(move |_, _| g2.wait()))
        .unwrap();
    let metrics = kcache_informer::PrometheusInformerMetricsProvider::new(&mut registry);
    assert!(informer.set_metrics(Arc::new(metrics)));
    let run = Running::synced_start(informer.clone()).await;
    for i in 0..5 {
        api.create("ns", &format!("c{i}"), "1");
    }
    soon("cached", || informer.indexer().len() == 5).await;
    soon("one add in the handler, four waiting", || {
        informer.listener_backlogs().first().map(|b| b.1) == Some(4)
    })
    .await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    // one add is in the handler, four wait
    assert!(
        text.contains(
            r#"kcache_informer_listener_backlog{informer="configmaps",handler="configmaps#1"} 4"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"kcache_informer_cached_objects{informer="configmaps"} 5"#),
        "{text}"
    );
    assert!(
        text.contains("kcache_informer_handler_panics_total"),
        "{text}"
    );
    gate.open();
    run.stop().await;
}

/// A handler stuck in a call for ever: it reports the key it is stuck on,
/// then blocks on a channel nobody sends on (until the test drops the
/// sender at its very end).
fn stuck_handler(
    entered: tokio::sync::mpsc::UnboundedSender<String>,
) -> (
    ResourceEventHandlerFuncs<ConfigMap>,
    std::sync::mpsc::Sender<()>,
) {
    let (release, stuck) = std::sync::mpsc::channel::<()>();
    let stuck = Mutex::new(stuck);
    let handler = ResourceEventHandlerFuncs::new().add_func(move |o, _| {
        let _ = entered.send(o.key().to_owned());
        let _ = stuck.lock().unwrap().recv();
    });
    (handler, release)
}

/// Issue 15, finding 7: a handler that never returns does not hang `run`.
/// After cancel, the informer waits the handler shutdown timeout (15 s of
/// paused-clock time here) for its handlers, then names each stuck one in
/// a WARN (with what it is stuck in) and returns; a handler removed while
/// stuck is waited for and named the same way, and removing it does not
/// block.
#[tokio::test(start_paused = true)]
async fn shutdown_is_bounded_with_a_stuck_handler() {
    let logs = Logs::capture();
    let api = FakeApi::new();
    api.create("ns", "a", "1");
    let timeout = Duration::from_secs(15);
    let informer = api
        .informer()
        .config(kcache_informer::InformerConfig {
            name: Some(("stuck").into()),
            handler_shutdown_timeout: timeout,
            ..support::on_fake()
        })
        .build();
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (h1, release1) = stuck_handler(entered_tx.clone());
    let (h2, release2) = stuck_handler(entered_tx);
    let reg1 = informer.add_event_handler(h1).unwrap();
    let reg2 = informer.add_event_handler(h2).unwrap();
    let cancel = CancellationToken::new();
    let run = informer.try_start(cancel.clone()).unwrap();
    assert_eq!(entered.recv().await.as_deref(), Some("ns/a"));
    assert_eq!(entered.recv().await.as_deref(), Some("ns/a"));
    // removing a stuck handler returns at once
    informer.remove_event_handler(&reg2);
    assert!(!reg2.is_active());

    let cancelled_at = tokio::time::Instant::now();
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(3600), run)
        .await
        .expect("run returned within an hour (paused clock) of cancel");
    result.unwrap().unwrap();
    let waited = cancelled_at.elapsed();
    assert!(
        waited >= timeout && waited < timeout + Duration::from_secs(1),
        "run returned {waited:?} after cancel; the bound is {timeout:?}"
    );
    assert!(informer.is_stopped());

    let warns = logs.at(tracing::Level::WARN);
    for reg in [&reg1, &reg2] {
        let named: Vec<_> = warns
            .iter()
            .filter(|w| w.contains(&format!("handler={} ", reg.name())))
            .collect();
        assert_eq!(named.len(), 1, "one WARN for {}: {warns:#?}", reg.name());
        let w = named[0];
        assert!(w.contains("informer=stuck"), "{w}");
        assert!(w.contains("stuck_in=on_add of ns/a"), "{w}");
        assert!(w.contains("handler shutdown timeout"), "{w}");
    }
    // (while the test waited for the handlers' threads, the paused clock
    // ran on to the reflector's watch timeouts: those WARNs are not ours)
    let about_handlers: Vec<_> = warns.iter().filter(|w| w.contains("handler=")).collect();
    assert_eq!(about_handlers.len(), 2, "{about_handlers:#?}");
    assert!(
        logs.at(tracing::Level::ERROR).is_empty(),
        "{:#?}",
        logs.all()
    );
    drop((release1, release2));
}

/// A handler that returns within the bound is joined without a WARN, and
/// so is a removed one. (Real clock, no timed assertion: with a paused
/// clock the runtime would jump to the deadline while the handler's thread
/// is still returning.)
#[tokio::test]
async fn shutdown_waits_for_a_handler_that_returns_within_the_bound() {
    let logs = Logs::capture();
    let api = FakeApi::new();
    api.create("ns", "a", "1");
    let informer = api
        .informer()
        .config(kcache_informer::InformerConfig {
            handler_shutdown_timeout: Duration::from_secs(60),
            ..support::on_fake()
        })
        .build();
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (h, release) = stuck_handler(entered_tx);
    let removed = informer
        .add_event_handler(ResourceEventHandlerFuncs::new())
        .unwrap();
    informer.add_event_handler(h).unwrap();
    let cancel = CancellationToken::new();
    let run = informer.try_start(cancel.clone()).unwrap();
    assert_eq!(entered.recv().await.as_deref(), Some("ns/a"));
    informer.remove_event_handler(&removed);
    cancel.cancel();
    // the handler returns while `run` waits for it
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(release);
    });
    run.await.unwrap().unwrap();
    assert!(
        logs.at(tracing::Level::WARN).is_empty(),
        "{:#?}",
        logs.all()
    );
}

/// Issue 33: client-go 1.36's informer metrics under its names and labels
/// (`informer_queued_items`, `informer_processing_latency_seconds`,
/// `informer_store_resource_version`, by `name`, `group`, `version`,
/// `resource`), the name unique in the process (a second live informer
/// of the same name records under `<name>-2`), and a WARN naming a handler
/// slower than 100 ms, at most once a minute.
#[tokio::test]
async fn informer_metrics_match_client_go_names() {
    // the test thread's events here; the handler's (its own thread) in
    // the binary-wide capture
    let logs = Logs::capture();
    kcache_testing::logs::capture_global_warnings();
    let api = FakeApi::new();
    let mut registry = prometheus_client::registry::Registry::default();
    let provider = Arc::new(kcache_informer::PrometheusInformerMetricsProvider::new(
        &mut registry,
    ));
    let informer = api
        .informer()
        .config(kcache_informer::InformerConfig {
            name: Some(("cm-informer-metrics").into()),
            ..support::on_fake()
        })
        .metrics(provider.clone())
        .build();
    informer
        .add_event_handler(ResourceEventHandlerFuncs::new().add_func(
            |o: &CachedObject<ConfigMap>, _| {
                if o.name().starts_with("slow") {
                    std::thread::sleep(Duration::from_millis(150));
                }
            },
        ))
        .unwrap();
    // the same name again, while the first lives
    let twin = api
        .informer()
        .config(kcache_informer::InformerConfig {
            name: Some(("cm-informer-metrics").into()),
            ..support::on_fake()
        })
        .metrics(provider)
        .build();
    let run = Running::synced_start(informer.clone()).await;
    let mut last = 0;
    for name in ["a", "slow-1", "slow-2", "b"] {
        last = api.create("ns", name, "1");
    }
    soon("cached", || informer.indexer().len() == 4).await;
    soon("handled", || {
        informer.listener_backlogs().first().map(|b| b.1) == Some(0)
    })
    .await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let labels = r#"{name="cm-informer-metrics",group="",version="v1",resource="configmaps"}"#;
    assert!(
        text.contains(&format!("informer_queued_items{labels} 0")),
        "{text}"
    );
    assert!(
        text.contains(&format!("informer_store_resource_version{labels} {last}")),
        "{text}"
    );
    let pops = text
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "informer_processing_latency_seconds_count{labels}"
            ))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no latency count: {text}"));
    assert!(pops >= 4, "one observation per popped key: {pops}");
    assert!(
        text.contains(r#"informer_queued_items{name="cm-informer-metrics-2",group="",version="v1",resource="configmaps"}"#),
        "the twin records under a unique name: {text}"
    );
    assert!(logs.at(tracing::Level::WARN).is_empty(), "{:?}", logs.all());
    let slow = || -> Vec<String> {
        kcache_testing::logs::global_warnings()
            .into_iter()
            .filter(|l| l.contains("took over 100 ms") && l.contains("cm-informer-metrics#"))
            .collect()
    };
    soon("slow handler named", || !slow().is_empty()).await;
    let slow = slow();
    assert_eq!(slow.len(), 1, "rate-limited: {slow:?}");
    assert!(slow[0].contains("cm-informer-metrics#1"), "{}", slow[0]);
    drop(twin);
    run.stop().await;
}
