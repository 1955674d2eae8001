//! `Controller::run` under leader election, against an in-process fake
//! apiserver and the in-memory lease store, on tokio's paused clock: the
//! lease outlives the workers (release after they stopped, reconciles
//! dropped before a standby can take over), and lease failures are loud.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{Action, Config, Controller, ControllerError, Request};
use kcache_informer::SharedInformerFactory;
use kcache_lease::LeaderCallbacks;
use kcache_lease::testing::InMemoryLeaseLock;
use kcache_lease::{LeaderElectionConfig, LeaderElector, LeaseLock};
use kcache_testing::fake::{Fake, Reply, cm_items, list_json};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A factory whose client lists the ConfigMaps `names` (namespace `ns`)
/// and holds every watch open, silent.
fn factory(names: &[&str]) -> SharedInformerFactory {
    let list = list_json("100", "", cm_items(names));
    SharedInformerFactory::builder(Fake::serving(list).client)
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build()
}

fn le(id: &str) -> LeaderElectionConfig {
    // client-go's documented defaults: 15 s lease, 10 s renew deadline,
    // 2 s retry period.
    LeaderElectionConfig::new(id)
}

/// A standby candidate on `lock`; returns when it acquired the lease
/// (recorded in `acquired`) and the token that stops it.
fn standby(
    lock: impl LeaseLock + 'static,
    acquired: Arc<Mutex<Option<Instant>>>,
) -> CancellationToken {
    let elector = LeaderElector::new(le("standby"), Arc::new(lock)).unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        elector
            .run(
                c,
                LeaderCallbacks {
                    on_started_leading: Box::new(move |_| {
                        *acquired.lock() = Some(Instant::now());
                    }),
                    ..LeaderCallbacks::default()
                },
            )
            .await
    });
    cancel
}

/// Records when a reconcile future ended (returned or was dropped).
struct EndGuard(Arc<Mutex<Vec<Instant>>>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.0.lock().push(Instant::now());
    }
}

struct Probe {
    started: Notify,
    ends: Arc<Mutex<Vec<Instant>>>,
}

impl Probe {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            started: Notify::new(),
            ends: Arc::new(Mutex::new(Vec::new())),
        })
    }
}

#[tokio::test(start_paused = true)]
async fn lease_is_released_only_after_workers_stop() {
    let store = InMemoryLeaseLock::new();
    let factory = factory(&["a"]);
    let ctl = Controller::<ConfigMap>::new(&factory, Config::default().name("cm"))
        .leader_election(le("leader"), store.clone());
    let handle = ctl.handle();
    let probe = Probe::new();
    // A reconcile that needs 5 s more after it was asked to stop (it does
    // not look at its token): the lease must stay held until it returned.
    let run = tokio::spawn(ctl.run(
        |_req: Request<ConfigMap>, p: Arc<Probe>| async move {
            let _end = EndGuard(p.ends.clone());
            p.started.notify_one();
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, io::Error>(Action::await_change())
        },
        probe.clone(),
    ));
    probe.started.notified().await;
    assert_eq!(store.record().unwrap().holder_identity, "leader");
    let acquired = Arc::new(Mutex::new(None));
    let stop_standby = standby(store.clone(), acquired.clone());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(acquired.lock().is_none(), "the standby took a held lease");

    // Stop: the running reconcile is cancelled, ignores it, and is
    // dropped at the graceful timeout (30 s).
    let stopped_at = Instant::now();
    handle.stop();
    run.await.unwrap().expect("a clean shutdown");
    let ended = probe
        .ends
        .lock()
        .first()
        .copied()
        .expect("the reconcile ended");
    assert!(
        ended >= stopped_at + kcache_controller::DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT,
        "the reconcile was dropped before the graceful timeout"
    );
    // The standby acquires only after the reconcile ended ...
    if let Some(taken) = *acquired.lock() {
        assert!(
            taken >= ended,
            "the standby acquired the lease {:?} before the old leader's reconcile ended",
            ended - taken
        );
    }
    // ... and promptly: the lease was released (release_on_cancel), not
    // left to expire (15 s after the last renewal).
    let deadline = ended + Duration::from_secs(10);
    while acquired.lock().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let taken = acquired
        .lock()
        .expect("the standby took the released lease within 10 s");
    assert!(taken >= ended);
    stop_standby.cancel();
    factory.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn reconciles_end_before_a_standby_can_take_over() {
    let store = InMemoryLeaseLock::new();
    let leader_lock = store.handle();
    let factory = factory(&["polite", "stubborn"]);
    let ctl = Controller::<ConfigMap>::new(&factory, Config::default().name("cm").workers(2))
        .leader_election(le("leader"), leader_lock.clone());
    let probe = Probe::new();
    let cancelled_seen = Arc::new(Mutex::new(None::<Instant>));
    let seen = cancelled_seen.clone();
    let run = tokio::spawn(ctl.run(
        move |req: Request<ConfigMap>, p: Arc<Probe>| {
            let seen = seen.clone();
            async move {
                let _end = EndGuard(p.ends.clone());
                p.started.notify_one();
                if req.name == "polite" {
                    // Follows the rule: stops when told.
                    req.cancelled().await;
                    *seen.lock() = Some(Instant::now());
                } else {
                    // Ignores its token: must be dropped in time.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Ok::<_, io::Error>(Action::await_change())
            }
        },
        probe.clone(),
    ));
    probe.started.notified().await;
    probe.started.notified().await;
    let acquired = Arc::new(Mutex::new(None));
    let stop_standby = standby(store.clone(), acquired.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The leader is cut off from the apiserver: it loses the lease after
    // its renew deadline; the standby may take over a lease duration
    // after the last renewal it saw.
    leader_lock.set_failing(true);
    let result = run.await.unwrap();
    assert!(
        matches!(result, Err(ControllerError::LeadershipLost)),
        "{result:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while acquired.lock().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let taken = acquired.lock().expect("the standby took over");
    let ends = probe.ends.lock().clone();
    assert_eq!(ends.len(), 2, "both reconciles ended");
    for end in &ends {
        assert!(
            *end < taken,
            "a reconcile of the old leader still ran {:?} after the standby acquired the lease",
            *end - taken
        );
    }
    assert!(
        cancelled_seen.lock().is_some(),
        "the polite reconcile saw its token cancelled"
    );
    stop_standby.cancel();
    factory.shutdown().await;
}

/// A client that answers every write with 200 `{}` and records when each
/// one was sent.
fn recording_client(writes: Arc<Mutex<Vec<Instant>>>) -> kube::Client {
    Fake::new(move |r| {
        if r.method != http::Method::GET {
            writes.lock().push(Instant::now());
        }
        Reply::Json(200, "{}".to_owned())
    })
    .client
}

#[tokio::test(start_paused = true)]
async fn a_fenced_client_sends_no_write_after_the_renew_deadline() {
    let store = InMemoryLeaseLock::new();
    let leader_lock = store.handle();
    let factory = factory(&["stubborn"]);
    let ctl = Controller::<ConfigMap>::new(&factory, Config::default().name("cm"))
        .leader_election(le("leader"), leader_lock.clone());
    let handle = ctl.handle();
    let writes = Arc::new(Mutex::new(Vec::new()));
    let fenced = handle.fenced_client(recording_client(writes.clone()));
    let refused = Arc::new(Mutex::new(0usize));
    let started = Arc::new(Notify::new());
    let (r, s) = (refused.clone(), started.clone());
    // A reconcile that ignores its token and writes every 500 ms: only the
    // fence can stop its writes once the lease may have been taken over.
    let run = tokio::spawn(ctl.run(
        move |_req: Request<ConfigMap>, client: Arc<kube::Client>| {
            let (refused, started) = (r.clone(), s.clone());
            async move {
                started.notify_one();
                loop {
                    let req = http::Request::post("/api/v1/namespaces/ns/configmaps")
                        .body(kube::client::Body::empty())
                        .unwrap();
                    if let Err(e) = client.send(req).await {
                        assert!(e.to_string().contains("not the leader"), "{e}");
                        *refused.lock() += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                #[allow(unreachable_code)]
                Ok::<_, io::Error>(Action::await_change())
            }
        },
        Arc::new(fenced),
    ));
    started.notified().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(handle.may_act());
    // Cut off: the last renewal started at most a retry period (2 s) ago,
    // so the renew deadline (10 s) falls within [cut + 8 s, cut + 10 s].
    leader_lock.set_failing(true);
    let cut = Instant::now();
    let result = run.await.unwrap();
    assert!(
        matches!(result, Err(ControllerError::LeadershipLost)),
        "{result:?}"
    );
    let writes = writes.lock().clone();
    let last = *writes.last().expect("writes were sent while leading");
    assert!(
        last < cut + Duration::from_secs(10),
        "a write was sent {:?} after the cut, past the renew deadline",
        last - cut
    );
    assert!(
        *refused.lock() > 0,
        "the fence refused the writes between the renew deadline and the drop"
    );
    assert!(!handle.may_act());
    factory.shutdown().await;
}
