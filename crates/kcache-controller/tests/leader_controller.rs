//! `Controller::run` under leader election, against an in-process fake
//! apiserver and the in-memory lease store, on tokio's paused clock: the
//! lease outlives the workers (release after they stopped, reconciles
//! dropped before a standby can take over), and lease failures are loud.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, StreamExt as _};
use http_body::Frame;
use http_body_util::StreamBody;
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{
    Action, Config, Controller, ControllerError, LeaderElectionConfig, LeaderElector, LeaseLock,
    MetricsRegistry, Request,
};
use kcache_informer::SharedInformerFactory;
use kcache_lease::testing::InMemoryLeaseLock;
use kcache_lease::{LeaderCallbacks, LeaderElectionRecord, LeaseError};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A factory whose client lists the ConfigMaps `names` (namespace `ns`)
/// and holds every watch open, silent.
fn factory(names: &[&str]) -> SharedInformerFactory {
    let items: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": n, "namespace": "ns", "uid": format!("uid-{i}"),
                    "resourceVersion": (i + 1).to_string()}})
        })
        .collect();
    let list = Bytes::from(
        json!({"kind": "ConfigMapList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "100"}, "items": items})
        .to_string(),
    );
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let is_watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
        let body = if is_watch {
            stream::pending::<Result<Frame<Bytes>, io::Error>>().boxed()
        } else {
            stream::iter([Ok::<_, io::Error>(Frame::data(list.clone()))]).boxed()
        };
        async move {
            http::Response::builder()
                .status(200)
                .body(StreamBody::new(body))
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        }
    });
    SharedInformerFactory::builder(kube::Client::new(svc, "default"))
        .tweak_list_options(|o| o.use_watch_list = false)
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

/// A lease lock whose every request is refused by RBAC.
struct Forbidden;

#[async_trait]
impl LeaseLock for Forbidden {
    async fn get(&self) -> Result<Option<(LeaderElectionRecord, String)>, LeaseError> {
        Err(LeaseError::Forbidden {
            verb: "get",
            lease: self.describe(),
            message: "leases.coordination.k8s.io \"cm\" is forbidden".into(),
        })
    }
    async fn create(&self, _: &LeaderElectionRecord) -> Result<String, LeaseError> {
        unreachable!("get never succeeds")
    }
    async fn update(&self, _: &LeaderElectionRecord, _: &str) -> Result<String, LeaseError> {
        unreachable!("get never succeeds")
    }
    fn describe(&self) -> String {
        "kube-system/cm".into()
    }
}

/// Collects what tracing writes.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

#[tokio::test(start_paused = true)]
async fn lease_errors_are_warned_and_fail_readiness() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let factory = factory(&["a"]);
    let registry = MetricsRegistry::new();
    let ctl = Controller::<ConfigMap>::new(&factory, Config::default().name("cm"))
        .metrics(registry.clone())
        .leader_election(le("leader"), Forbidden);
    let handle = ctl.handle();
    let run =
        tokio::spawn(ctl.run(
            |_req: Request<ConfigMap>, _: Arc<()>| async move {
                Ok::<_, io::Error>(Action::await_change())
            },
            Arc::new(()),
        ));
    // Synced and standing by: ready, until the failures lasted a lease
    // duration.
    // (the informer's listener threads run on the real clock: wait for
    // them without letting the paused clock run ahead)
    for _ in 0..1000 {
        if handle.health().readiness().0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (ready, reason) = handle.health().readiness();
    assert!(ready, "{reason}\n{}", logs.text());
    assert!(reason.contains("standing by"), "{reason}");
    tokio::time::sleep(Duration::from_secs(16)).await;
    let (ready, reason) = handle.health().readiness();
    assert!(
        !ready,
        "a candidate that cannot read its lease is ready: {reason}"
    );
    assert!(
        reason.contains("leader election failing") && reason.contains("forbidden to get"),
        "{reason}"
    );
    assert!(
        reason.contains("leases.coordination.k8s.io") && reason.contains("Role"),
        "the reason says what to fix: {reason}"
    );
    let metrics = registry.encode();
    let errors = metrics
        .lines()
        .find(|l| l.starts_with("kcache_leader_election_errors_total{"))
        .unwrap_or_default()
        .to_owned();
    let count: f64 = errors
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(count >= 5.0, "failures counted: {errors:?}");

    // One WARN for the lasting failure (not one per attempt), with the fix.
    let text = logs.text();
    let warns: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("the lease get failed"))
        .collect();
    assert_eq!(warns.len(), 1, "{text}");
    assert!(
        warns[0].contains("grant the controller's service account"),
        "{}",
        warns[0]
    );
    assert!(!text.contains("ERROR"), "{text}");
    // ... and it is repeated while it lasts, once a minute.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let again = logs
        .text()
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("the lease get failed"))
        .count();
    assert_eq!(again, 2);
    handle.stop();
    run.await.unwrap().unwrap();
    factory.shutdown().await;
}
