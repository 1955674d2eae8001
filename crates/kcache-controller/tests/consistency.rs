//! A controller that never acts on a cache older than its own writes,
//! against the local control plane, with the informers' watches behind the
//! apiserver: their client goes through the fault proxy in HTTP mode,
//! which holds every watch event back for a while
//! (`FaultProxy::delay_watch_events`) while lists and writes go straight
//! through. The reconcilers write with the controller's fenced client,
//! straight to the apiserver.
//!
//! The primary is a ConfigMap (its `replicas` in `data`) owning a
//! Deployment, sample-controller's Foo and Deployment with a built-in
//! type (no CRD needed).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kcache_controller::{
    Action, Config, Consistency, Controller, ControllerError, ControllerHandle, MetricsRegistry,
    Request,
};
use kcache_core::Selector;
use kcache_envtest::proxy::FaultProxy;
use kcache_informer::SharedInformerFactory;
use kcache_reflector::WireFormat;
use kcache_testing::builders::{config_map, deployment};
use kcache_testing::envtest::namespace;
use kcache_testing::eventually;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use tokio::task::JoinHandle;

/// A namespace, an admin client, and an informer factory whose watches go
/// through a proxy that delays their events.
struct Env {
    ns: String,
    admin: Client,
    proxy: FaultProxy,
    factory: SharedInformerFactory,
}

async fn env(prefix: &str, delay: Duration) -> Env {
    let t = namespace(prefix).await;
    let proxy = FaultProxy::start_http(t.cp.config()).await.unwrap();
    assert!(proxy.delay_watch_events(delay));
    let watching = proxy.client(t.cp.config()).unwrap();
    // JSON: the proxy injects at line boundaries (a protobuf watch is
    // length-prefixed)
    let factory = SharedInformerFactory::builder(watching)
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(t.ns.clone()),
                wire_format: WireFormat::Json,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    Env {
        ns: t.ns,
        admin: t.client,
        proxy,
        factory,
    }
}

fn child_name(primary: &str) -> String {
    format!("{primary}-child")
}

fn replicas_of(cm: &ConfigMap) -> i32 {
    cm.data
        .as_ref()
        .and_then(|d| d.get("replicas"))
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
}

fn owner_ref(cm: &ConfigMap) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: cm.name_any(),
        uid: cm.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn child_of(cm: &ConfigMap, ns: &str) -> Deployment {
    deployment(&child_name(&cm.name_any()))
        .namespace(ns)
        .with(|d| {
            d.metadata.owner_references = Some(vec![owner_ref(cm)]);
            d.spec.replicas = Some(replicas_of(cm));
        })
        .build()
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Stops a controller and checks its run ended without error.
async fn stop(handle: ControllerHandle, task: JoinHandle<Result<(), ControllerError>>) {
    handle.stop();
    task.await.unwrap().unwrap();
}

/// A counter or histogram count of `registry` whose line contains every
/// one of `needles` (0 when none does).
fn metric(registry: &MetricsRegistry, needles: &[&str]) -> f64 {
    registry
        .encode()
        .lines()
        .filter(|l| !l.starts_with('#') && needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// ------------------------------------------------- duplicate children

/// What the sample-controller-style reconciler did.
#[derive(Default)]
struct Writes {
    created: AtomicU64,
    already_exists: AtomicU64,
    patched: AtomicU64,
}

struct ChildCtx {
    client: Client,
    handle: ControllerHandle,
    writes: Writes,
}

/// sample-controller's syncHandler: create the child when the lister shows
/// none, else scale it to the primary's replicas.
async fn ensure_child(req: Request<ConfigMap>, ctx: Arc<ChildCtx>) -> Result<Action, kube::Error> {
    let Some(cm) = req.object else {
        return Ok(Action::await_change());
    };
    let ns = req.namespace.clone().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let name = child_name(&cm.name_any());
    let lister = ctx.handle.informer::<Deployment>().lister();
    match lister.namespaced(&ns).get(&name) {
        Err(_) => match deployments
            .create(&PostParams::default(), &child_of(&cm, &ns))
            .await
        {
            Ok(_) => {
                ctx.writes.created.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                if is_conflict(&e) {
                    ctx.writes.already_exists.fetch_add(1, Ordering::SeqCst);
                }
                return Err(e);
            }
        },
        Ok(cached) => {
            let have: Deployment = cached.decode().expect("a cached Deployment decodes");
            let want = replicas_of(&cm);
            if have.spec.replicas != Some(want) {
                let patch = json!({"spec": {"replicas": want}});
                deployments
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                ctx.writes.patched.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    Ok(Action::await_change())
}

/// Primaries created, then their replicas changed every 300 ms for 3.6 s,
/// while the watch lags 2 s: reconciles keep coming before the watch has
/// delivered the child the first one created. Returns what the reconciler
/// wrote and the deferrals the gate counted, once every child has the
/// final replicas.
async fn churn_primaries(prefix: &str, consistency: Consistency) -> (u64, u64, u64, f64) {
    const PRIMARIES: usize = 4;
    const FINAL: i32 = 12;
    let env = env(prefix, Duration::from_secs(2)).await;
    let registry = MetricsRegistry::new();
    let name = prefix.to_owned();
    let controller = Controller::<ConfigMap>::new(
        &env.factory,
        Config {
            consistency,
            ..Config::default().name(&name).workers(2)
        },
    )
    .owns::<Deployment>()
    .metrics(registry.clone());
    let handle = controller.handle();
    let ctx = Arc::new(ChildCtx {
        client: handle.fenced_client(env.admin.clone()),
        handle: handle.clone(),
        writes: Writes::default(),
    });
    let task = tokio::spawn(controller.run(ensure_child, ctx.clone()));
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), &env.ns);
    let names: Vec<String> = (0..PRIMARIES).map(|i| format!("foo-{i}")).collect();
    for n in &names {
        cms.create(
            &PostParams::default(),
            &config_map(n).data("replicas", "1").build(),
        )
        .await
        .unwrap();
    }
    for replicas in 2..=FINAL {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for n in &names {
            let patch = json!({"data": {"replicas": replicas.to_string()}});
            cms.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    }
    // converged: every child exists with the final replicas
    let deployments: Api<Deployment> = Api::namespaced(env.admin.clone(), &env.ns);
    let started = Instant::now();
    loop {
        let mut done = 0;
        for n in &names {
            if let Some(d) = deployments.get_opt(&child_name(n)).await.unwrap()
                && d.spec.replicas == Some(FINAL)
            {
                done += 1;
            }
        }
        if done == PRIMARIES {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{prefix}: the children did not converge"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop(handle, task).await;
    env.factory.shutdown().await;
    let w = &ctx.writes;
    let deferred = metric(
        &registry,
        &[
            "kcache_controller_stale_reconciles_deferred_total",
            &format!("controller=\"{name}\""),
        ],
    );
    drop(env.proxy);
    (
        w.created.load(Ordering::SeqCst),
        w.already_exists.load(Ordering::SeqCst),
        w.patched.load(Ordering::SeqCst),
        deferred,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_cache_gate_prevents_duplicate_children() {
    // the fault bites: without the gate (and without own reads, which would
    // hide it too) reconciles act on a cache that has not seen the child
    let (created, exists, patched, deferred) =
        churn_primaries("gate-off", Consistency::off()).await;
    eprintln!(
        "gate off: {created} creates, {exists} AlreadyExists, {patched} patches, {deferred} deferred"
    );
    assert_eq!(created, 4, "each child is created once by the apiserver");
    assert!(
        exists > 0,
        "no duplicate create with the gate off: the stale window was not hit"
    );
    assert_eq!(deferred, 0.0);

    // the gate alone (own reads off): no reconcile acts before the cache
    // has caught up with the controller's own writes
    let gate_only = Consistency {
        read_own_writes: false,
        ..Consistency::default()
    };
    let (created, exists, patched, deferred) = churn_primaries("gate-on", gate_only).await;
    eprintln!(
        "gate on: {created} creates, {exists} AlreadyExists, {patched} patches, {deferred} deferred"
    );
    assert_eq!(created, 4);
    assert_eq!(exists, 0, "a duplicate create with the gate on");
    assert!(deferred > 0.0, "the gate deferred nothing");
}

// ------------------------------------------------- reading own writes

/// One step of the scripted reconciler of the own-reads test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    ScaleChild,
    ReadChild,
    WriteChildStatus,
    AnnotatePrimary,
    ReadPrimary,
    DeleteChild,
    ReadDeletedChild,
}

/// What a step read: (what, through the lister, in the raw cache).
type Seen = (Step, Option<String>, Option<String>);

struct ScriptCtx {
    client: Client,
    handle: ControllerHandle,
    steps: Mutex<VecDeque<Step>>,
    seen: Mutex<Vec<Seen>>,
}

async fn scripted(req: Request<ConfigMap>, ctx: Arc<ScriptCtx>) -> Result<Action, kube::Error> {
    let Some(step) = ctx.steps.lock().pop_front() else {
        return Ok(Action::await_change());
    };
    let ns = req.namespace.clone().unwrap_or_default();
    let name = child_name(&req.name);
    let child_key = format!("{ns}/{name}");
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let informer = ctx.handle.informer::<Deployment>();
    let lister = informer.lister();
    let replicas = |d: Option<Deployment>| d.and_then(|d| d.spec.replicas).map(|r| r.to_string());
    let listed = || {
        replicas(
            lister
                .get_by_key(&child_key)
                .ok()
                .map(|c| c.decode().unwrap()),
        )
    };
    let raw = || {
        replicas(
            informer
                .indexer()
                .get_by_key(&child_key)
                .map(|c| c.decode().unwrap()),
        )
    };
    let seen = match step {
        Step::ScaleChild => {
            let patch = json!({"spec": {"replicas": 3}});
            deployments
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            (step, listed(), raw())
        }
        Step::ReadChild | Step::ReadDeletedChild => (step, listed(), raw()),
        Step::WriteChildStatus => {
            let patch = json!({"status": {"observedGeneration": 7}});
            deployments
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            let generation = |c: Option<kcache_core::CachedObject<Deployment>>| {
                c.and_then(|c| c.decode().ok())
                    .and_then(|d: Deployment| d.status)
                    .and_then(|s| s.observed_generation)
                    .map(|g| g.to_string())
            };
            (
                step,
                generation(lister.get_by_key(&child_key).ok()),
                generation(informer.indexer().get_by_key(&child_key)),
            )
        }
        Step::AnnotatePrimary => {
            let patch = json!({"metadata": {"annotations": {"seen": "yes"}}});
            Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
                .patch(&req.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            (step, None, None)
        }
        Step::ReadPrimary => {
            let annotation =
                |cm: Option<&ConfigMap>| cm.and_then(|c| c.annotations().get("seen").cloned());
            let cached = ctx
                .handle
                .informer::<ConfigMap>()
                .indexer()
                .get_by_key(&req.key)
                .map(|c| c.decode().unwrap());
            (
                step,
                annotation(req.object.as_ref()),
                annotation(cached.as_ref()),
            )
        }
        Step::DeleteChild => {
            deployments.delete(&name, &DeleteParams::default()).await?;
            let in_list = lister
                .namespaced(&ns)
                .list(&Selector::everything())
                .iter()
                .any(|o| o.key() == child_key);
            (
                step,
                listed().or(in_list.then(|| "listed".to_owned())),
                raw(),
            )
        }
    };
    ctx.seen.lock().push(seen);
    Ok(Action::await_change())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_see_own_writes_until_the_watch_delivers_them() {
    let delay = Duration::from_secs(4);
    let env = env("own-reads", delay).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), &env.ns);
    let primary = cms
        .create(&PostParams::default(), &config_map("foo").build())
        .await
        .unwrap();
    Api::<Deployment>::namespaced(env.admin.clone(), &env.ns)
        .create(&PostParams::default(), &child_of(&primary, &env.ns))
        .await
        .unwrap();
    // own reads alone: the gate would defer these reconciles until the watch
    // caught up, and there would be nothing left to read early
    let controller = Controller::<ConfigMap>::new(
        &env.factory,
        Config {
            consistency: Consistency {
                stale_cache_gate: false,
                ..Consistency::default()
            },
            ..Config::default().name("own-reads")
        },
    )
    .owns::<Deployment>();
    let handle = controller.handle();
    let ctx = Arc::new(ScriptCtx {
        client: handle.fenced_client(env.admin.clone()),
        handle: handle.clone(),
        steps: Mutex::new(VecDeque::new()),
        seen: Mutex::new(Vec::new()),
    });
    let task = tokio::spawn(controller.run(scripted, ctx.clone()));
    let key = format!("{}/foo", env.ns);
    let child_key = format!("{}/{}", env.ns, child_name("foo"));
    // synced, and the initial reconciles done (they had no step)
    let deployments = handle.informer::<Deployment>();
    eventually("the caches synced", Duration::from_secs(30), || {
        deployments.indexer().get_by_key(&child_key).is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let run = |step: Step| {
        let (ctx, handle, key) = (ctx.clone(), handle.clone(), key.clone());
        async move {
            let before = ctx.seen.lock().len();
            ctx.steps.lock().push_back(step);
            assert!(handle.enqueue(key));
            eventually(&format!("step {step:?}"), Duration::from_secs(10), || {
                ctx.seen.lock().len() > before
            })
            .await;
            ctx.seen.lock().last().cloned().unwrap()
        }
    };
    let some = |s: &str| Some(s.to_owned());
    let started = Instant::now();
    // update: read back at once, and by the next reconcile, while the
    // cache (the watch) still has the old replicas
    assert_eq!(
        run(Step::ScaleChild).await,
        (Step::ScaleChild, some("3"), some("1"))
    );
    assert_eq!(
        run(Step::ReadChild).await,
        (Step::ReadChild, some("3"), some("1"))
    );
    // status
    assert_eq!(
        run(Step::WriteChildStatus).await,
        (Step::WriteChildStatus, some("7"), None)
    );
    // the request's own object
    run(Step::AnnotatePrimary).await;
    assert_eq!(
        run(Step::ReadPrimary).await,
        (Step::ReadPrimary, some("yes"), None)
    );
    // delete: gone for the lister (get and list), still in the cache
    assert_eq!(
        run(Step::DeleteChild).await,
        (Step::DeleteChild, None, some("1"))
    );
    assert_eq!(
        run(Step::ReadDeletedChild).await,
        (Step::ReadDeletedChild, None, some("1"))
    );
    assert!(
        started.elapsed() < delay,
        "the steps took {:?}, longer than the watch delay: they did not run in the stale window",
        started.elapsed()
    );
    // the watch delivers them: nothing is held any more, the cache agrees
    let primaries = handle.informer::<ConfigMap>();
    eventually("the watch delivered the writes", delay * 4, || {
        deployments.indexer().own_writes() == 0
            && primaries.indexer().own_writes() == 0
            && deployments.indexer().get_by_key(&child_key).is_none()
    })
    .await;
    let cached = primaries.indexer().get_by_key(&key).unwrap();
    assert_eq!(cached.annotations().get("seen"), Some("yes"));
    stop(handle, task).await;
    env.factory.shutdown().await;
}

// ------------------------------------------------- own events

/// What the own-events test's reconciler does next for a primary.
#[derive(Debug, Clone, Copy)]
enum Command {
    Annotate(u32),
    CreateChild,
    DeleteChild,
}

struct EventsCtx {
    client: Client,
    reconciles: Mutex<HashMap<String, u32>>,
    /// Every reconcile, as "name: trigger" (printed when a count is off).
    triggers: Mutex<Vec<String>>,
    commands: Mutex<HashMap<String, Command>>,
    written: AtomicU64,
}

async fn counting(req: Request<ConfigMap>, ctx: Arc<EventsCtx>) -> Result<Action, kube::Error> {
    *ctx.reconciles.lock().entry(req.name.clone()).or_default() += 1;
    ctx.triggers
        .lock()
        .push(format!("{}: {}", req.name, req.trigger));
    let Some(command) = ctx.commands.lock().remove(&req.name) else {
        return Ok(Action::await_change());
    };
    let ns = req.namespace.clone().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    match command {
        Command::Annotate(n) => {
            let patch = json!({"metadata": {"annotations": {"round": n.to_string()}}});
            Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
                .patch(&req.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Command::CreateChild => {
            let cm = req.object.as_ref().expect("the primary exists");
            deployments
                .create(&PostParams::default(), &child_of(cm, &ns))
                .await?;
        }
        Command::DeleteChild => {
            deployments
                .delete(&child_name(&req.name), &DeleteParams::default())
                .await?;
        }
    }
    ctx.written.fetch_add(1, Ordering::SeqCst);
    Ok(Action::await_change())
}

/// A watch ERROR event carrying 410 Gone: the reflector relists.
fn gone_event() -> String {
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version (injected)", "reason": "Expired", "code": 410});
    format!("{}\n", json!({"type": "ERROR", "object": status}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_write_events_do_not_retrigger_across_a_relist() {
    let delay = Duration::from_secs(3);
    let env = env("own-events", delay).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), &env.ns);
    let deployments: Api<Deployment> = Api::namespaced(env.admin.clone(), &env.ns);
    let mut primaries = HashMap::new();
    for n in ["p1", "p2", "p3"] {
        let cm = cms
            .create(&PostParams::default(), &config_map(n).build())
            .await
            .unwrap();
        primaries.insert(n, cm);
    }
    // p3's child exists before the controller starts
    deployments
        .create(&PostParams::default(), &child_of(&primaries["p3"], &env.ns))
        .await
        .unwrap();
    let registry = MetricsRegistry::new();
    let controller = Controller::<ConfigMap>::new(
        &env.factory,
        Config {
            consistency: Consistency {
                skip_own_events: true,
                ..Consistency::default()
            },
            ..Config::default().name("own-events")
        },
    )
    .owns::<Deployment>()
    .metrics(registry.clone());
    let handle = controller.handle();
    let ctx = Arc::new(EventsCtx {
        client: handle.fenced_client(env.admin.clone()),
        reconciles: Mutex::new(HashMap::new()),
        triggers: Mutex::new(Vec::new()),
        commands: Mutex::new(HashMap::new()),
        written: AtomicU64::new(0),
    });
    let task = tokio::spawn(controller.run(counting, ctx.clone()));
    let counts = |ctx: &EventsCtx| {
        let r = ctx.reconciles.lock();
        ["p1", "p2", "p3"].map(|n| r.get(n).copied().unwrap_or(0))
    };
    eventually("the initial reconciles", Duration::from_secs(30), || {
        counts(&ctx) == [1, 1, 1]
    })
    .await;
    let settle = delay + Duration::from_secs(2);
    let key = |n: &str| format!("{}/{n}", env.ns);

    // 1. an own write to the primary: its event queues nothing
    ctx.commands
        .lock()
        .insert("p1".into(), Command::Annotate(1));
    assert!(handle.enqueue(key("p1")));
    eventually("p1 written", Duration::from_secs(10), || {
        ctx.written.load(Ordering::SeqCst) == 1
    })
    .await;
    tokio::time::sleep(settle).await;
    assert_eq!(
        counts(&ctx),
        [2, 1, 1],
        "an own write's event reconciled again"
    );

    // 2. own writes outstanding in the delayed watches, then 410 Gone on
    // both: the relists deliver the own versions (p1's annotation, p2's new
    // child, p3's child as a tombstone) and none of them reconciles
    let relists = |what: &str| metric(&registry, &["reflector_relists_total", what]);
    let (cm_relists, dep_relists) = (relists("configmaps"), relists("deployments"));
    {
        let mut c = ctx.commands.lock();
        c.insert("p1".into(), Command::Annotate(2));
        c.insert("p2".into(), Command::CreateChild);
        c.insert("p3".into(), Command::DeleteChild);
    }
    for n in ["p1", "p2", "p3"] {
        assert!(handle.enqueue(key(n)));
    }
    eventually("the three writes", Duration::from_secs(10), || {
        ctx.written.load(Ordering::SeqCst) == 4
    })
    .await;
    assert_eq!(counts(&ctx), [3, 2, 2]);
    let base = format!("/namespaces/{}/", env.ns);
    assert!(
        env.proxy
            .inject_watch(&format!("{base}configmaps"), gone_event())
    );
    assert!(
        env.proxy
            .inject_watch(&format!("{base}deployments"), gone_event())
    );
    eventually("both informers relisted", Duration::from_secs(20), || {
        relists("configmaps") > cm_relists && relists("deployments") > dep_relists
    })
    .await;
    tokio::time::sleep(settle).await;
    // A relist delivers every unchanged object to the handlers as an
    // update of the same version (client-go's rule without a resync
    // period): p2 and p3, not written since, are reconciled for it
    // (trigger "resync"); p1, whose latest version is its own write, is
    // not, and the own writes to the children (p2's create, p3's delete,
    // a tombstone after the 410) reconcile nothing.
    let after: Vec<String> = ctx.triggers.lock()[7..].to_vec();
    let mut sorted = after.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["p2: resync", "p3: resync"],
        "a relist that delivered the controller's own writes reconciled again: {after:?}"
    );
    assert_eq!(counts(&ctx), [3, 3, 3]);
    // nothing lost: the caches hold what the apiserver holds
    let cached_cms = handle.informer::<ConfigMap>();
    let cached_deps = handle.informer::<Deployment>();
    let p1 = cached_cms.indexer().get_by_key(&key("p1")).unwrap();
    assert_eq!(p1.annotations().get("round"), Some("2"));
    assert!(cached_deps.indexer().get_by_key(&key("p2-child")).is_some());
    assert!(cached_deps.indexer().get_by_key(&key("p3-child")).is_none());

    // 3. someone else's changes always reconcile: the primary p1, the
    // child of p2
    let patch = json!({"data": {"from": "someone-else"}});
    cms.patch("p1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let patch = json!({"metadata": {"labels": {"touched": "yes"}}});
    deployments
        .patch("p2-child", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("the foreign changes reconciled", delay * 4, || {
        counts(&ctx) == [4, 4, 3]
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(counts(&ctx), [4, 4, 3], "{:?}", ctx.triggers.lock());
    stop(handle, task).await;
    env.factory.shutdown().await;
}

// ------------------------------------------------- the gate's bound

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_gives_up_after_its_bound_and_warns() {
    kcache_testing::logs::capture_global_warnings();
    let env = env("gate-bound", Duration::ZERO).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.admin.clone(), &env.ns);
    cms.create(&PostParams::default(), &config_map("foo").build())
        .await
        .unwrap();
    let registry = MetricsRegistry::new();
    let bound = Duration::from_secs(2);
    let controller = Controller::<ConfigMap>::new(
        &env.factory,
        Config {
            consistency: Consistency {
                max_stale_wait: bound,
                read_own_writes: false,
                ..Consistency::default()
            },
            ..Config::default().name("gate-bound")
        },
    )
    .owns::<Deployment>()
    .metrics(registry.clone());
    let handle = controller.handle();
    let ctx = Arc::new(EventsCtx {
        client: handle.fenced_client(env.admin.clone()),
        reconciles: Mutex::new(HashMap::new()),
        triggers: Mutex::new(Vec::new()),
        commands: Mutex::new(HashMap::new()),
        written: AtomicU64::new(0),
    });
    let task = tokio::spawn(controller.run(counting, ctx.clone()));
    let count = |ctx: &EventsCtx| ctx.reconciles.lock().get("foo").copied().unwrap_or(0);
    eventually("the initial reconcile", Duration::from_secs(30), || {
        count(&ctx) == 1
    })
    .await;
    // from now on the watches never catch up within the test
    env.proxy.delay_watch_events(Duration::from_secs(600));
    let key = format!("{}/foo", env.ns);
    ctx.commands
        .lock()
        .insert("foo".into(), Command::CreateChild);
    assert!(handle.enqueue(key.clone()));
    eventually("the child created", Duration::from_secs(10), || {
        ctx.written.load(Ordering::SeqCst) == 1
    })
    .await;
    let asked = Instant::now();
    assert!(handle.enqueue(key.clone()));
    eventually(
        "the deferred reconcile ran",
        Duration::from_secs(30),
        || count(&ctx) == 3,
    )
    .await;
    let waited = asked.elapsed();
    assert!(
        waited >= bound.mul_f64(0.9),
        "ran after {waited:?}, before the bound"
    );
    assert!(waited < bound * 5, "ran only after {waited:?}");
    let name = "controller=\"gate-bound\"";
    assert_eq!(
        metric(
            &registry,
            &["kcache_controller_stale_reconciles_deferred_total", name]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &registry,
            &["kcache_controller_stale_reconcile_wait_seconds_count", name]
        ),
        1.0
    );
    let warned: Vec<String> = kcache_testing::logs::global_warnings()
        .into_iter()
        .filter(|w| w.contains("gate-bound") && w.contains("stale cache"))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("writes behind"), "{warned:?}");
    assert!(warned[0].contains("deployments"), "{warned:?}");
    env.proxy.delay_watch_events(Duration::ZERO);
    stop(handle, task).await;
    env.factory.shutdown().await;
}
