//! The controller against the local control plane (ConfigMaps as the
//! primary type): retries with growing delays, panics caught, graceful
//! shutdown, leader election between two replicas with takeover, and the
//! metrics endpoint.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{
    Action, Config, Controller, ControllerError, ControllerHandle, MetricsRegistry, Request,
};
use kcache_envtest::ControlPlane;
use kcache_informer::SharedInformerFactory;
use kcache_lease::{KubeLeaseLock, LeaderElectionConfig};
use kcache_testing::envtest::namespace;
use kcache_testing::raw_http::get;
use kcache_workqueue::ItemExponentialFailureRateLimiter;
use kube::Client;
use kube::api::{Api, PostParams};
use parking_lot::Mutex;
use tokio::task::JoinHandle;

async fn setup(prefix: &str) -> (Client, String) {
    let env = namespace(prefix).await;
    (env.client, env.ns)
}

fn factory(client: &Client, ns: &str) -> SharedInformerFactory {
    SharedInformerFactory::builder(client.clone())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.into()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build()
}

async fn create_cm(client: &Client, ns: &str, name: &str) {
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name}, "data": {"k": "v"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < timeout, "{what}: not after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops a controller, checks its run ended without error, then shuts its
/// informer factory down.
async fn stop(
    handle: ControllerHandle,
    task: JoinHandle<Result<(), ControllerError>>,
    factory: SharedInformerFactory,
) {
    handle.stop();
    task.await.unwrap().unwrap();
    factory.shutdown().await;
}

#[derive(Default)]
struct Attempts {
    at: Mutex<HashMap<String, Vec<Instant>>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_retried_with_growing_delay_then_succeed() {
    let (client, ns) = setup("ctrl-retry").await;
    let factory = factory(&client, &ns);
    let attempts = Arc::new(Attempts::default());
    let successes = Arc::new(Mutex::new(Vec::<String>::new()));
    let controller = Controller::<ConfigMap>::new(
        &factory,
        Config {
            rate_limiter: Some(Arc::new(ItemExponentialFailureRateLimiter::new(
                Duration::from_millis(200),
                Duration::from_secs(10),
            ))),
            ..Config::default().name("retry")
        },
    );
    let handle = controller.handle();
    let ok = successes.clone();
    let task = tokio::spawn(controller.run(
        move |req: Request<ConfigMap>, attempts: Arc<Attempts>| {
            let ok = ok.clone();
            async move {
                let n = {
                    let mut at = attempts.at.lock();
                    let v = at.entry(req.key.clone()).or_default();
                    v.push(Instant::now());
                    v.len()
                };
                assert!(req.object.is_some(), "the object comes from the cache");
                match n {
                    1 | 2 => Err(format!("attempt {n} fails")),
                    3 => panic!("attempt 3 panics"),
                    _ => {
                        assert_eq!(req.retries, 3, "three rate-limited retries so far");
                        ok.lock().push(req.key.clone());
                        Ok(Action::await_change())
                    }
                }
            }
        },
        attempts.clone(),
    ));
    create_cm(&client, &ns, "flaky").await;
    let key = format!("{ns}/flaky");
    wait_until("success after retries", Duration::from_secs(20), || {
        successes.lock().contains(&key)
    })
    .await;
    let times = attempts.at.lock()[&key].clone();
    assert_eq!(times.len(), 4);
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    // 200 ms, 400 ms, 800 ms (base * 2^failures), each at least that long
    for (i, gap) in gaps.iter().enumerate() {
        let want = Duration::from_millis(200 << i);
        assert!(
            *gap >= want.mul_f64(0.95),
            "retry {i}: waited {gap:?}, want >= {want:?} ({gaps:?})"
        );
    }
    assert!(gaps[2] > gaps[0], "delays grow: {gaps:?}");
    stop(handle, task, factory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_running_reconcile_finish() {
    let (client, ns) = setup("ctrl-shutdown").await;
    let factory = factory(&client, &ns);
    let started = Arc::new(Mutex::new(false));
    let finished = Arc::new(Mutex::new(false));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let controller = Controller::<ConfigMap>::new(&factory, Config::default().name("slow"))
        .shutdown_on(async move {
            let _ = rx.await;
        });
    let (s, f) = (started.clone(), finished.clone());
    let task = tokio::spawn(controller.run(
        move |_req: Request<ConfigMap>, _ctx: Arc<()>| {
            let (s, f) = (s.clone(), f.clone());
            async move {
                *s.lock() = true;
                tokio::time::sleep(Duration::from_millis(800)).await;
                *f.lock() = true;
                Ok::<_, std::io::Error>(Action::await_change())
            }
        },
        Arc::new(()),
    ));
    create_cm(&client, &ns, "slow").await;
    wait_until("reconcile started", Duration::from_secs(20), || {
        *started.lock()
    })
    .await;
    let _ = tx.send(());
    let stopped_at = Instant::now();
    task.await.unwrap().unwrap();
    assert!(
        *finished.lock(),
        "the running reconcile finished before run returned"
    );
    assert!(stopped_at.elapsed() < Duration::from_secs(5));
    factory.shutdown().await;
}

type Log = Arc<Mutex<Vec<(String, String)>>>;

fn replica(
    client: &Client,
    ns: &str,
    id: &str,
    log: &Log,
) -> (
    SharedInformerFactory,
    kcache_controller::ControllerHandle,
    tokio::task::JoinHandle<Result<(), ControllerError>>,
) {
    let factory = factory(client, ns);
    let le = LeaderElectionConfig::new(id)
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(300))
        // a killed leader does not get to release its lease
        .release_on_cancel(false);
    let controller =
        Controller::<ConfigMap>::new(&factory, Config::default().name("le").workers(2))
            .leader_election(le, KubeLeaseLock::new(client.clone(), ns, "le-test"));
    let handle = controller.handle();
    let id = id.to_owned();
    let log = log.clone();
    let task = tokio::spawn(controller.run(
        move |req: Request<ConfigMap>, _ctx: Arc<()>| {
            let (id, log) = (id.clone(), log.clone());
            async move {
                log.lock().push((id, req.name.clone()));
                Ok::<_, std::io::Error>(Action::await_change())
            }
        },
        Arc::new(()),
    ));
    (factory, handle, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_standby_takes_over() {
    let (client, ns) = setup("ctrl-le").await;
    let log: Log = Arc::default();
    let (fa, ha, ta) = replica(&client, &ns, "replica-a", &log);
    // let a lead first
    wait_until("a leads", Duration::from_secs(20), || {
        ha.health().readiness().1.contains("leading")
    })
    .await;
    let (fb, hb, tb) = replica(&client, &ns, "replica-b", &log);
    wait_until("b stands by", Duration::from_secs(20), || {
        hb.health().readiness().1.contains("standing by")
    })
    .await;
    for i in 0..5 {
        create_cm(&client, &ns, &format!("first-{i}")).await;
    }
    wait_until(
        "a reconciled the first batch",
        Duration::from_secs(20),
        || {
            log.lock()
                .iter()
                .filter(|(_, n)| n.starts_with("first-"))
                .count()
                >= 5
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        log.lock().iter().all(|(id, _)| id == "replica-a"),
        "only the leader reconciles: {:?}",
        log.lock()
    );

    // kill the leader: it stops without releasing the lease
    let killed = Instant::now();
    stop(ha, ta, fa).await;
    wait_until("b takes over", Duration::from_secs(15), || {
        hb.health().readiness().1.contains("leading")
    })
    .await;
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(8), "took over in {took:?}");
    // b reconciles everything it has in its warm cache, and new objects
    create_cm(&client, &ns, "second-0").await;
    wait_until("b reconciles", Duration::from_secs(20), || {
        log.lock()
            .iter()
            .any(|(id, n)| id == "replica-b" && n == "second-0")
    })
    .await;
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), &ns)
        .get("le-test")
        .await
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert_eq!(spec.lease_transitions, Some(1));
    stop(hb, tb, fb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_reconcile_and_workqueue_metrics() {
    let (client, ns) = setup("ctrl-metrics").await;
    let factory = factory(&client, &ns);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = MetricsRegistry::new();
    let controller = Controller::<ConfigMap>::new(&factory, Config::default().name("metrics-test"))
        .metrics(metrics.clone())
        .serve_metrics_on(listener);
    let handle = controller.handle();
    let done = Arc::new(Mutex::new(0usize));
    let d = done.clone();
    let task = tokio::spawn(controller.run(
        move |req: Request<ConfigMap>, _ctx: Arc<()>| {
            let d = d.clone();
            async move {
                *d.lock() += 1;
                if req.name == "bad" {
                    return Err("bad config map");
                }
                Ok(Action::await_change())
            }
        },
        Arc::new(()),
    ));
    create_cm(&client, &ns, "good").await;
    create_cm(&client, &ns, "bad").await;
    wait_until("reconciled", Duration::from_secs(20), || *done.lock() >= 3).await;
    wait_until("ready", Duration::from_secs(20), || {
        handle.health().readiness().0
    })
    .await;

    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200);
    for needle in [
        "controller_runtime_reconcile_total{controller=\"metrics-test\",result=\"success\"} 1",
        "controller_runtime_reconcile_errors_total{controller=\"metrics-test\"}",
        "controller_runtime_reconcile_time_seconds_bucket{",
        "controller_runtime_max_concurrent_reconciles{controller=\"metrics-test\"} 1",
        "workqueue_adds_total{name=\"metrics-test\"}",
        "workqueue_depth{name=\"metrics-test\"}",
        "workqueue_retries_total{name=\"metrics-test\"}",
        "workqueue_work_duration_seconds_bucket{",
        "kcache_informer_synced{informer=\"configmaps\"} 1",
        "kcache_informer_cached_objects{informer=\"configmaps\"} ",
        // the controller's handler on the primary informer
        "kcache_informer_listener_backlog{informer=\"configmaps\",handler=\"configmaps#",
        // the reflector under it (started after the controller gave it
        // the registry's provider)
        "reflector_lists_total{name=",
        "reflector_last_sync_timestamp_seconds{name=",
        "process_resident_memory_bytes ",
    ] {
        assert!(body.contains(needle), "missing {needle:?} in\n{body}");
    }
    assert_eq!(get(addr, "/healthz").await.0, 200);
    let (status, body) = get(addr, "/readyz").await;
    assert_eq!((status, body.trim()), (200, "metrics-test: ok"));
    assert_eq!(get(addr, "/debug/pprof").await.0, 404);

    handle.stop();
    task.await.unwrap().unwrap();
    // the endpoint is gone with the controller
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    factory.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_primary_informer_works_and_is_run_by_the_controller() {
    use kube::api::{ApiResource, DynamicObject};
    let (client, ns) = setup("ctrl-dynamic").await;
    let factory = factory(&client, &ns);
    let ar = ApiResource::erase::<ConfigMap>(&());
    // built by hand, not by the factory: nobody starts it but the controller
    let informer = kcache_informer::SharedIndexInformer::<DynamicObject>::builder_with(
        client.clone(),
        ar.clone(),
    )
    .config(kcache_informer::InformerConfig {
        watch: kcache_reflector::WatchConfig {
            namespace: Some(ns.clone()),
            ..kcache_reflector::WatchConfig::default()
        },
        ..kcache_informer::InformerConfig::default()
    })
    .build();
    let seen = Arc::new(Mutex::new(Vec::<(String, Option<String>)>::new()));
    let controller = Controller::for_informer(&factory, informer.clone(), &ar, Config::default());
    let handle = controller.handle();
    let s = seen.clone();
    let task = tokio::spawn(controller.run(
        move |req: Request<DynamicObject>, _ctx: Arc<()>| {
            let s = s.clone();
            async move {
                let data = req
                    .object
                    .and_then(|o| o.data.get("data").and_then(|d| d.get("k")).cloned())
                    .and_then(|v| v.as_str().map(str::to_owned));
                s.lock().push((req.key.clone(), data));
                Ok::<_, std::io::Error>(Action::await_change())
            }
        },
        Arc::new(()),
    ));
    create_cm(&client, &ns, "dyn").await;
    let key = format!("{ns}/dyn");
    wait_until("dynamic reconcile", Duration::from_secs(20), || {
        seen.lock()
            .iter()
            .any(|(k, d)| *k == key && d.as_deref() == Some("v"))
    })
    .await;
    assert!(informer.has_started());
    handle.stop();
    task.await.unwrap().unwrap();
    assert!(
        informer.is_stopped(),
        "the controller stopped the informer it ran"
    );
    factory.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_events_fold_into_a_series() {
    use k8s_openapi::api::events::v1::Event as KubeEvent;
    use kcache_controller::events::{Event, Recorder, Reporter};
    use kube::Resource as _;
    let (client, ns) = setup("ctrl-events").await;
    create_cm(&client, &ns, "subject").await;
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("subject")
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter::new("events-test").instance("test-0"),
    );
    let warn = Event::warning("Broken", "the subject is broken");
    for _ in 0..3 {
        recorder.publish(&cm.object_ref(&()), &warn).await.unwrap();
    }
    recorder
        .publish_for(&cm, &Event::normal("Fixed", "fixed"))
        .await
        .unwrap();
    let events = Api::<KubeEvent>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(events.len(), 2, "{events:?}");
    let broken = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Broken"))
        .unwrap();
    assert_eq!(broken.type_.as_deref(), Some("Warning"));
    assert_eq!(broken.series.as_ref().map(|s| s.count), Some(3));
    assert_eq!(broken.reporting_controller.as_deref(), Some("events-test"));
    assert_eq!(broken.reporting_instance.as_deref(), Some("test-0"));
    assert_eq!(
        broken.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("subject")
    );
    let fixed = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Fixed"))
        .unwrap();
    assert!(fixed.series.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_is_added_removed_and_conflict_safe() {
    use kcache_controller::finalizer::{FinalizerError, FinalizerEvent, finalizer, has_finalizer};
    use kube::api::{DeleteParams, Patch, PatchParams};
    const F: &str = "kcache.dev/test-cleanup";
    let (client, ns) = setup("ctrl-finalizer").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    create_cm(&client, &ns, "guarded").await;
    let stale = api.get("guarded").await.unwrap();

    // someone else changes the object: a write based on `stale` must fail
    api.patch(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"k": "changed"}})),
    )
    .await
    .unwrap();
    let r = finalizer(&api, F, stale, |_| async {
        Ok::<_, std::io::Error>(Action::await_change())
    })
    .await;
    match r {
        Err(FinalizerError::AddFinalizer(kube::Error::Api(s))) => assert_eq!(s.code, 409),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(!has_finalizer(&api.get("guarded").await.unwrap(), F));

    // fresh object: added, then Apply runs
    let fresh = api.get("guarded").await.unwrap();
    let applied = Arc::new(Mutex::new(false));
    let a = applied.clone();
    finalizer(&api, F, fresh, |ev| async move {
        assert!(matches!(ev, FinalizerEvent::Apply(ref cm) if has_finalizer(cm, F)));
        *a.lock() = true;
        Ok::<_, std::io::Error>(Action::await_change())
    })
    .await
    .unwrap();
    assert!(*applied.lock());
    assert!(has_finalizer(&api.get("guarded").await.unwrap(), F));

    // deletion waits for the finalizer; Cleanup removes it and the object goes
    api.delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    let deleting = api.get("guarded").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let cleaned = Arc::new(Mutex::new(false));
    let c = cleaned.clone();
    finalizer(&api, F, deleting, |ev| async move {
        assert!(matches!(ev, FinalizerEvent::Cleanup(_)));
        *c.lock() = true;
        Ok::<_, std::io::Error>(Action::await_change())
    })
    .await
    .unwrap();
    assert!(*cleaned.lock());
    assert!(api.get_opt("guarded").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_is_never_reconciled_twice_at_once() {
    use kube::api::{Patch, PatchParams};
    let (client, ns) = setup("ctrl-serial").await;
    let factory = factory(&client, &ns);
    #[derive(Default)]
    struct Seen {
        running: Mutex<HashMap<String, usize>>,
        max: Mutex<usize>,
        total: Mutex<usize>,
    }
    let seen = Arc::new(Seen::default());
    let controller = Controller::<ConfigMap>::new(&factory, Config::default().workers(4));
    let handle = controller.handle();
    let task = tokio::spawn(controller.run(
        |req: Request<ConfigMap>, seen: Arc<Seen>| async move {
            {
                let mut r = seen.running.lock();
                let n = r.entry(req.key.clone()).or_default();
                *n += 1;
                let mut max = seen.max.lock();
                *max = (*max).max(*n);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            *seen.running.lock().get_mut(&req.key).unwrap() -= 1;
            *seen.total.lock() += 1;
            Ok::<_, std::io::Error>(Action::await_change())
        },
        seen.clone(),
    ));
    create_cm(&client, &ns, "hot").await;
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    for i in 0..20 {
        api.patch(
            "hot",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        *seen.max.lock(),
        1,
        "never two reconciles of one key at once"
    );
    let total = *seen.total.lock();
    assert!(
        (2..=21).contains(&total),
        "events were coalesced: {total} reconciles for 21 changes"
    );
    stop(handle, task, factory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_lease_lock_errors_say_what_to_fix() {
    use kcache_lease::LeaseLock as _;
    use kcache_lease::{LeaderElectionRecord, LeaseError};
    let cp = ControlPlane::shared().await.expect("control plane");
    let admin = cp.client().expect("client");
    // The most likely first-deploy mistake: the lease's namespace does not
    // exist. The get finds nothing; the create names the namespace.
    let lock = KubeLeaseLock::new(admin.clone(), "no-such-namespace-kcache", "lease");
    assert!(lock.get().await.expect("get answers").is_none());
    let err = lock
        .create(&LeaderElectionRecord::default())
        .await
        .expect_err("no namespace");
    assert!(
        matches!(err, LeaseError::NamespaceNotFound { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("namespace \"no-such-namespace-kcache\" does not exist"),
        "{err}"
    );
    // A service account without RBAC on Leases: the verb and the fix.
    let ns = cp.create_namespace("lease-rbac").await.expect("namespace");
    let user = cp
        .client_for_user("lease-less", &[])
        .await
        .expect("user client");
    let lock = KubeLeaseLock::new(user, &ns, "lease");
    let err = lock.get().await.expect_err("forbidden");
    assert!(
        matches!(err, LeaseError::Forbidden { verb: "get", .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("grant the controller's service account the verbs get, create and update"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_remove_lets_an_object_go() {
    use kcache_controller::finalizer;
    let (client, ns) = setup("fin-remove").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "held", "finalizers": ["other.io/keep", "example.com/cleanup"]}
    }))
    .unwrap();
    let cm = api.create(&PostParams::default(), &cm).await.unwrap();
    // a stale copy is refused (409), the current one is updated
    let stale = cm.clone();
    let cm = finalizer::add(&api, &cm, "example.com/more")
        .await
        .unwrap()
        .expect("added");
    let err = finalizer::remove(&api, &stale, "example.com/cleanup")
        .await
        .expect_err("a stale object is refused");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{err}"
    );
    let cm = finalizer::remove(&api, &cm, "example.com/cleanup")
        .await
        .unwrap()
        .expect("removed");
    assert_eq!(
        cm.metadata.finalizers.as_deref().unwrap_or_default(),
        ["other.io/keep", "example.com/more"],
        "only our finalizer is removed"
    );
    // nothing to remove: no request
    assert!(
        finalizer::remove(&api, &cm, "example.com/cleanup")
            .await
            .unwrap()
            .is_none()
    );
    // deleting: the object goes once the last finalizers are removed
    api.delete("held", &Default::default()).await.unwrap();
    let cm = api.get("held").await.unwrap();
    let cm = finalizer::remove(&api, &cm, "example.com/more")
        .await
        .unwrap()
        .unwrap();
    finalizer::remove(&api, &cm, "other.io/keep").await.unwrap();
    assert!(
        api.get_opt("held").await.unwrap().is_none(),
        "gone once no finalizer holds it"
    );
}

/// The REST client layer on a client built as an operator builds one
/// (`ClientBuilder::with_layer`), against the real apiserver.
#[tokio::test]
async fn rest_client_layer_counts_requests_to_the_local_apiserver() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let registry = MetricsRegistry::new();
    let config = cp.config();
    let host = kcache_controller::metrics::RestClientMetricsLayer::host_of(&config.cluster_url);
    assert!(!host.is_empty(), "{}", config.cluster_url);
    let client = kube::client::ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&registry.rest_client_layer(host.clone()))
        .build();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.list(&Default::default()).await.unwrap();
    api.list(&Default::default()).await.unwrap();
    assert!(api.get("rest-client-layer-missing").await.is_err());
    let scrape = registry.encode();
    for needle in [
        format!("rest_client_requests_total{{code=\"200\",method=\"GET\",host=\"{host}\"}} 2"),
        format!("rest_client_requests_total{{code=\"404\",method=\"GET\",host=\"{host}\"}} 1"),
        format!("rest_client_request_duration_seconds_count{{verb=\"GET\",host=\"{host}\"}} 3"),
    ] {
        assert!(scrape.contains(&needle), "missing {needle:?} in\n{scrape}");
    }
}
