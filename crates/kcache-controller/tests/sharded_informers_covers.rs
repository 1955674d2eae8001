//! Sharded informers, the worker's cache check (`Caches::covers`): a key
//! whose range this replica is gaining is reconciled only from a cache that
//! holds that range. Against an in-process fake apiserver and the in-memory
//! membership store, on tokio's paused clock, with explicit holds instead
//! of timing: the candidate informer set's primary lists and watches, but
//! its owned informer's list is held, so the controller cannot switch to
//! it; a watch event of the candidate for a gained key reaches the queue
//! while the shard protocol already lets this replica start the key. The
//! reconciler must not see the key until the switch, and must see it (from
//! the new cache) after. Its own test binary: it captures the logs with a
//! thread-local subscriber.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, StreamExt as _};
use http_body::Frame;
use http_body_util::StreamBody;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kcache_controller::{
    Action, Config, Controller, ControllerHandle, Request, SHARD_SLOTS, Trigger,
};
use kcache_core::ShardField;
use kcache_core::{ShardSlots, shard_hash};
use kcache_informer::SharedInformerFactory;
use kcache_lease::shard::ShardConfig;
use kcache_lease::shard::{Placement, Shard, ShardHooks};
use kcache_lease::testing::InMemoryMembershipStore;
use kcache_testing::logs::LogBuffer;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One ConfigMap `cm` in each of these namespaces.
const NAMESPACES: usize = 16;
const GROUP: &str = "cm-covers";

fn config_map(ns: usize, rv: u64) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": format!("ns-{ns}"), "uid": format!("uid-{ns}"),
            "resourceVersion": rv.to_string()},
        "data": {"v": rv.to_string()}})
}

/// The fake apiserver: lists every ConfigMap (whatever the shard selector:
/// the client filters), streams ConfigMap watch events the test sends,
/// lists no Secret (held while `hold_secrets` is set), holds Secret
/// watches open.
struct FakeApi {
    events: broadcast::Sender<Bytes>,
    hold_secrets: watch::Sender<bool>,
    /// ConfigMap watch requests so far.
    cm_watches: Arc<AtomicUsize>,
}

impl FakeApi {
    fn new(hold_secrets: bool) -> (Arc<Self>, kube::Client) {
        let (events, _) = broadcast::channel(16);
        let (hold, _) = watch::channel(hold_secrets);
        let api = Arc::new(Self {
            events,
            hold_secrets: hold,
            cm_watches: Arc::default(),
        });
        let items: Vec<_> = (0..NAMESPACES)
            .map(|i| config_map(i, i as u64 + 1))
            .collect();
        let cm_list = Bytes::from(
            json!({"kind": "ConfigMapList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "100"}, "items": items})
            .to_string(),
        );
        let secret_list = Bytes::from(
            json!({"kind": "SecretList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "100"}, "items": []})
            .to_string(),
        );
        let a = api.clone();
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let is_watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
            let secrets = req.uri().path().ends_with("/secrets");
            // subscribed here, before the request is answered: an event sent
            // once the watch was counted reaches it
            let events = (!secrets && is_watch).then(|| {
                let rx = a.events.subscribe();
                a.cm_watches.fetch_add(1, Ordering::SeqCst);
                rx
            });
            let mut held = a.hold_secrets.subscribe();
            let (cm_list, secret_list) = (cm_list.clone(), secret_list.clone());
            async move {
                let body = match (secrets, events) {
                    (_, Some(rx)) => stream::unfold(rx, |mut rx| async move {
                        let b = rx.recv().await.ok()?;
                        Some((Ok::<_, io::Error>(Frame::data(b)), rx))
                    })
                    .boxed(),
                    (true, None) if is_watch => {
                        stream::pending::<Result<Frame<Bytes>, io::Error>>().boxed()
                    }
                    (true, None) => {
                        let _ = held.wait_for(|h| !*h).await;
                        stream::iter([Ok(Frame::data(secret_list))]).boxed()
                    }
                    (false, None) => stream::iter([Ok(Frame::data(cm_list))]).boxed(),
                };
                http::Response::builder()
                    .status(200)
                    .body(StreamBody::new(body))
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
            }
        });
        (api, kube::Client::new(svc, "default"))
    }

    fn hold_secret_lists(&self, hold: bool) {
        self.hold_secrets.send_replace(hold);
    }

    fn cm_watches(&self) -> usize {
        self.cm_watches.load(Ordering::SeqCst)
    }

    /// Sends a MODIFIED event for the ConfigMap of namespace `ns-{ns}` to
    /// every open ConfigMap watch.
    fn modify(&self, ns: usize) {
        let event = json!({"type": "MODIFIED", "object": config_map(ns, 1000)});
        let _ = self.events.send(Bytes::from(format!("{event}\n")));
    }
}

/// This test's logs, kept in kcache-testing's [`LogBuffer`].
struct Logs(LogBuffer);

impl Logs {
    /// Captures this thread's logs (the paused-clock runtime runs every
    /// task on the test's thread): the controller's from DEBUG, the rest
    /// from WARN.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = LogBuffer::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_env_filter("kcache_controller=debug,warn")
            .finish();
        (Logs(logs), tracing::subscriber::set_default(subscriber))
    }

    /// Whether a worker dropped `key` because the current cache does not
    /// hold its range.
    fn dropped_uncovered(&self, key: &str) -> bool {
        let key = format!("key={key}");
        self.0.text().lines().any(|l| {
            l.contains("not in this replica's cached ranges: dropped")
                && l.split_whitespace().any(|w| w == key)
        })
    }
}

/// A reconcile: the key, whether the cache held its object, the trigger.
type Calls = Arc<Mutex<Vec<(String, bool, Trigger)>>>;

fn shard_config(id: &str) -> ShardConfig {
    ShardConfig::new(GROUP, id)
        .lease_duration(Duration::from_secs(4))
        .renew_deadline(Duration::from_secs(3))
        .retry_period(Duration::from_millis(500))
}

struct Replica {
    handle: ControllerHandle,
    shard: Shard,
    calls: Calls,
    factory: SharedInformerFactory,
    task: JoinHandle<Result<(), kcache_controller::ControllerError>>,
}

/// A fake apiserver (its Secret lists held or not), a membership store
/// and replica `a` started on them, alone in its group.
fn a_alone(hold_secret_lists: bool) -> (Arc<FakeApi>, InMemoryMembershipStore, Replica) {
    let (api, client) = FakeApi::new(hold_secret_lists);
    let store = InMemoryMembershipStore::new();
    let a = start_a(client, &store);
    (api, store, a)
}

/// Replica `a`: a controller of ConfigMaps owning Secrets, sharded on the
/// namespace with sharded informers.
fn start_a(client: kube::Client, store: &InMemoryMembershipStore) -> Replica {
    let factory = SharedInformerFactory::builder(client)
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let controller = Controller::<ConfigMap>::new(&factory, Config::default().name("cm"))
        .owns::<Secret>()
        .sharded(shard_config("a"), store.clone())
        .shard_informers(ShardField::Namespace);
    let handle = controller.handle();
    let shard = controller.shard().cloned().expect("sharded");
    let calls: Calls = Arc::default();
    let task = tokio::spawn(controller.run(
        |req: Request<ConfigMap>, calls: Calls| async move {
            calls
                .lock()
                .push((req.key.clone(), req.object.is_some(), req.trigger.clone()));
            Ok::<_, io::Error>(Action::await_change())
        },
        calls.clone(),
    ));
    Replica {
        handle,
        shard,
        calls,
        factory,
        task,
    }
}

impl Replica {
    fn calls_of(&self, key: &str) -> Vec<(String, bool, Trigger)> {
        self.calls
            .lock()
            .iter()
            .filter(|(k, ..)| k == key)
            .cloned()
            .collect()
    }

    fn fraction(&self) -> Option<f64> {
        self.handle.shard_selector().map(|s| s.fraction())
    }

    async fn stop(self) {
        self.handle.stop();
        self.task.await.unwrap().unwrap();
        self.factory.shutdown().await;
    }
}

/// Polls `done` every 50 ms of paused time, for at most `limit`.
async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out (paused clock, {limit:?}) waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends a watch event for `ns`'s ConfigMap to the candidate informers
/// and waits until a worker took the key from the queue: with the check,
/// it is dropped (logged); without it, the reconciler sees it, from a
/// cache that does not hold its range.
async fn event_before_the_switch(api: &FakeApi, logs: &Logs, a: &Replica, ns: usize) {
    let key = format!("ns-{ns}/cm");
    let before = a.calls_of(&key).len();
    api.modify(ns);
    wait_until(
        "the worker took the gained key",
        Duration::from_secs(30),
        || {
            let early = a.calls_of(&key);
            assert_eq!(
                early.len(),
                before,
                "{key} reconciled before the informers that cache its range went live (share of the hash space cached: {:?}): {:?}",
                a.fraction(),
                &early[before..]
            );
            logs.dropped_uncovered(&key)
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_key_waits_for_the_first_informers_of_its_range() {
    let (logs, _guard) = Logs::capture();
    let (api, _store, a) = a_alone(true);

    // Alone in the group: the protocol lets `a` start every key as soon as
    // it acknowledged its view; its first informers list the ConfigMaps
    // and watch them, but the Secret list is held, so they are not synced.
    let key = "ns-0/cm";
    wait_until(
        "a owns every key and its candidate watches ConfigMaps",
        Duration::from_secs(30),
        || a.shard.owns(key) && api.cm_watches() > 0,
    )
    .await;
    assert_eq!(a.fraction(), None, "no informers live yet");
    event_before_the_switch(&api, &logs, &a, 0).await;
    assert!(a.calls.lock().is_empty(), "{:?}", a.calls.lock());

    api.hold_secret_lists(false);
    wait_until(
        "every ConfigMap was reconciled",
        Duration::from_secs(60),
        || a.calls.lock().len() >= NAMESPACES,
    )
    .await;
    assert_eq!(a.fraction(), Some(1.0));
    let calls = a.calls.lock().clone();
    assert!(
        calls.iter().all(|(_, cached, _)| *cached),
        "every reconcile read its object from the cache: {calls:?}"
    );
    assert_eq!(calls.len(), NAMESPACES, "{calls:?}");
    a.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_gained_key_waits_for_the_informers_of_its_range() {
    let (logs, _guard) = Logs::capture();
    let (api, store, a) = a_alone(false);
    wait_until("a caches everything", Duration::from_secs(30), || {
        a.fraction() == Some(1.0) && a.calls.lock().len() >= NAMESPACES
    })
    .await;

    // `b` joins (a bare member of the group, with the same placement):
    // `a` switches to half the slots.
    let b = Shard::new(shard_config("b"), store.clone());
    b.set_placement(Placement::Slots {
        slots: ShardSlots::new(SHARD_SLOTS).unwrap(),
        point: Arc::new(|key: &str| {
            let ns = key.split_once('/').map_or("", |(ns, _)| ns);
            Some(shard_hash(ns.as_bytes()))
        }),
    });
    let b_stop = CancellationToken::new();
    let b_task = tokio::spawn({
        let (b, stop) = (b.clone(), b_stop.clone());
        let hooks = ShardHooks {
            keys: Box::new(Vec::new),
            gained: Box::new(|_| {}),
        };
        async move { b.run(stop, hooks).await }
    });
    wait_until("a caches only its half", Duration::from_secs(30), || {
        a.fraction().is_some_and(|f| f < 1.0) && a.shard.status().settled() && b.status().settled()
    })
    .await;
    let half = a.handle.shard_selector().unwrap();
    let ns = (0..NAMESPACES)
        .find(|i| !half.matches_value(&format!("ns-{i}")))
        .expect("a namespace in b's slots");
    let key = format!("ns-{ns}/cm");
    assert!(!a.shard.owns(&key));

    // `b` leaves: `a` gains b's slots. Its new informers list and watch
    // the ConfigMaps, but their Secret list is held: no switch.
    api.hold_secret_lists(true);
    let watches = api.cm_watches();
    b_stop.cancel();
    b_task.await.unwrap().unwrap();
    wait_until(
        "a may start the gained key and its candidate watches ConfigMaps",
        Duration::from_secs(30),
        || a.shard.owns(&key) && api.cm_watches() > watches,
    )
    .await;
    assert_eq!(
        a.handle.shard_selector().as_ref(),
        Some(&half),
        "not switched"
    );
    event_before_the_switch(&api, &logs, &a, ns).await;
    assert_eq!(
        a.handle.shard_selector().as_ref(),
        Some(&half),
        "not switched"
    );
    let before = a.calls_of(&key).len();

    // The new informers sync: the controller switches and queues the keys
    // it gained, from the new cache.
    api.hold_secret_lists(false);
    wait_until(
        "the gained key was reconciled",
        Duration::from_secs(60),
        || a.calls_of(&key).len() > before,
    )
    .await;
    assert_eq!(a.fraction(), Some(1.0));
    let after = a.calls_of(&key);
    assert_eq!(
        &after[before..],
        &[(key.clone(), true, Trigger::Handover)],
        "reconciled once, from the new cache, as a handover"
    );
    a.stop().await;
}
