//! The fault suite (issue 9): an informer against a real local control
//! plane, behind a fault-injecting proxy, while a seeded driver churns
//! ConfigMaps. After each fault the driver stops and [`support::converge`]
//! checks: cache == fresh LIST (keys and resourceVersions), the handler's
//! view == fresh LIST (so every deleted key it had seen got a delete or a
//! tombstone), no update went backwards, and the informer ends cleanly.
//!
//! Quick form by default (CI); `KCACHE_FAULT_FULL=1` for more faults and
//! operations; `KCACHE_FAULT_SEED=<n>` replays a run.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kcache_envtest::ControlPlane;
use kcache_envtest::proxy::FaultProxy;
use kcache_informer::{SharedIndexInformer, wait_for_cache_sync};
use kube::api::{Api, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::*;

/// Convergence bound after the driver stops: the reflector's backoff caps at
/// 30 s with up to 100 % jitter.
const CONVERGE: Duration = Duration::from_secs(90);

async fn synced(informer: &SharedIndexInformer<ConfigMap>, within: Duration) {
    let cancel = tokio_util::sync::CancellationToken::new();
    let ok = tokio::time::timeout(within, wait_for_cache_sync(&cancel, &[informer])).await;
    assert!(
        matches!(ok, Ok(true)),
        "the informer did not sync within {within:?}"
    );
}

/// A fresh namespace, a fault proxy in front of `cp`'s apiserver, and a
/// synced informer on that namespace through the proxy, with a recorder.
struct Proxied {
    ns: String,
    proxy: FaultProxy,
    informer: SharedIndexInformer<ConfigMap>,
    rec: Recorder,
    cancel: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

async fn proxied(cp: &ControlPlane, ns_prefix: &str) -> Proxied {
    let ns = cp.create_namespace(ns_prefix).await.expect("namespace");
    let proxy = FaultProxy::for_url(&cp.server_url()).await.expect("proxy");
    let informer =
        SharedIndexInformer::<ConfigMap>::builder(proxy.client(cp.config()).expect("client"))
            .namespace(&ns)
            .build();
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone()).expect("handler");
    let (cancel, task) = spawn_informer(&informer);
    synced(&informer, Duration::from_secs(30)).await;
    Proxied {
        ns,
        proxy,
        informer,
        rec,
        cancel,
        task,
    }
}

/// Fault 1: every connection through the proxy is reset at random intervals
/// while the driver runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cuts() {
    let seed = seed("connection_cuts");
    let mut rng = StdRng::seed_from_u64(seed);
    let (cuts, ops) = if full() { (15, 600) } else { (4, 200) };
    let cp = ControlPlane::shared().await.expect("control plane");
    let Proxied {
        ns,
        proxy,
        informer,
        rec,
        cancel,
        task,
    } = proxied(cp, "fault-cuts").await;

    let driver = Driver::start(
        cp.client().expect("client"),
        &ns,
        "c",
        seed,
        ops,
        Duration::from_millis(20),
    );
    for _ in 0..cuts {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
        proxy.cut_all();
    }
    let done = driver.stop().await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    let out = converge(&informer, &rec, &api, &done, CONVERGE).await;
    let stats = proxy.stats();
    assert!(
        stats.cut >= 1,
        "no connection was cut: the fault was not injected ({stats:?})"
    );
    assert!(
        !done.deleted.is_empty() && out.deletes > 0,
        "no delete exercised"
    );
    report("connection_cuts", stats.cut, &done, &out);
    stop_informer(cancel, task).await;
}

/// Fault 1, mixed: at random intervals, one of: reset every connection;
/// stall every connection for 0.5-2 s (then resume: the held bytes flow);
/// delay every chunk by 100 ms for 1 s; refuse new connections and reset
/// the open ones for 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_chaos() {
    let seed = seed("network_chaos");
    let mut rng = StdRng::seed_from_u64(seed);
    let (faults, ops) = if full() { (20, 600) } else { (6, 200) };
    let cp = ControlPlane::shared().await.expect("control plane");
    let Proxied {
        ns,
        proxy,
        informer,
        rec,
        cancel,
        task,
    } = proxied(cp, "fault-chaos").await;

    let driver = Driver::start(
        cp.client().expect("client"),
        &ns,
        "c",
        seed,
        ops,
        Duration::from_millis(20),
    );
    let mut kinds = [0u32; 4];
    for _ in 0..faults {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1000))).await;
        let kind = rng.random_range(0..4usize);
        kinds[kind] += 1;
        match kind {
            0 => proxy.cut_all(),
            1 => {
                proxy.stall(true);
                tokio::time::sleep(Duration::from_millis(rng.random_range(500..2000))).await;
                proxy.stall(false);
            }
            2 => {
                proxy.delay(Duration::from_millis(100));
                tokio::time::sleep(Duration::from_secs(1)).await;
                proxy.delay(Duration::ZERO);
            }
            _ => {
                proxy.refuse(true);
                proxy.cut_all();
                tokio::time::sleep(Duration::from_secs(1)).await;
                proxy.refuse(false);
            }
        }
    }
    eprintln!(
        "network_chaos: cuts {}, stalls {}, delays {}, refusals {}",
        kinds[0], kinds[1], kinds[2], kinds[3]
    );
    let done = driver.stop().await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    let out = converge(&informer, &rec, &api, &done, CONVERGE).await;
    assert!(out.deletes > 0, "no delete exercised");
    report("network_chaos", faults, &done, &out);
    stop_informer(cancel, task).await;
}

/// Fault 2: the apiserver is restarted (etcd kept) during the informer's
/// initial list, then again while the driver runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_restarts() {
    let seed = seed("apiserver_restarts");
    let mut rng = StdRng::seed_from_u64(seed);
    let (restarts, ops) = if full() { (4, 600) } else { (2, 200) };
    let cp = ControlPlane::start().await.expect("control plane");
    let ns = cp
        .create_namespace("fault-restart")
        .await
        .expect("namespace");
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    for i in 0..150 {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": { "name": format!("pre{i}") },
            "data": { "pad": "x".repeat(512) }
        }))
        .expect("configmap");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    // slow every chunk down so the initial list is still in flight
    let proxy = FaultProxy::for_url(&cp.server_url()).await.expect("proxy");
    proxy.delay(Duration::from_millis(150));
    let informer =
        SharedIndexInformer::<ConfigMap>::builder(proxy.client(cp.config()).expect("client"))
            .namespace(&ns)
            .build();
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone()).expect("handler");
    let (cancel, task) = spawn_informer(&informer);
    eventually("the informer connected", Duration::from_secs(10), || {
        proxy.stats().accepted >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !informer.has_synced(),
        "the initial list finished before the restart: the fault missed its window"
    );
    cp.restart_apiserver().await.expect("restart");
    proxy.delay(Duration::ZERO);
    synced(&informer, Duration::from_secs(60)).await;

    let driver = Driver::start(
        cp.client().expect("client"),
        &ns,
        "c",
        seed,
        ops,
        Duration::from_millis(20),
    );
    for _ in 0..restarts {
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2000))).await;
        cp.restart_apiserver().await.expect("restart");
    }
    let done = driver.finish().await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    let out = converge(&informer, &rec, &api, &done, CONVERGE).await;
    assert!(out.deletes > 0, "no delete exercised");
    report("apiserver_restarts", 1 + restarts, &done, &out);
    stop_informer(cancel, task).await;
}

/// Fault 4: a 429 storm from a client layer (every request answered 429;
/// the proxy cuts the open watch at the start so the reflector must send
/// new requests). The reflector must back off: few requests during the
/// storm, but more than one (it keeps retrying); then it recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_429_storm() {
    http_storm("http_429_storm", 429).await;
}

/// Fault 4: a 500 storm, as [`http_429_storm`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_500_storm() {
    http_storm("http_500_storm", 500).await;
}

async fn http_storm(name: &str, status: u16) {
    let seed = seed(name);
    let storm = if full() {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(6)
    };
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp.create_namespace("fault-storm").await.expect("namespace");
    let proxy = FaultProxy::for_url(&cp.server_url()).await.expect("proxy");
    let faults = HttpFaults::default();
    let client = faults.client(proxy.config(cp.config()).expect("config"));
    let informer = SharedIndexInformer::<ConfigMap>::builder(client)
        .namespace(&ns)
        .build();
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone()).expect("handler");
    let (cancel, task) = spawn_informer(&informer);
    synced(&informer, Duration::from_secs(30)).await;

    let driver = Driver::start(
        cp.client().expect("client"),
        &ns,
        "c",
        seed,
        10_000,
        Duration::from_millis(30),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = faults.requests();
    faults.storm(status);
    proxy.cut_all();
    tokio::time::sleep(storm).await;
    faults.calm();
    let during = faults.requests() - before;
    let injected = faults.injected();
    eprintln!("storm {status}: {during} requests in {storm:?} ({injected} answered {status})");
    // a fresh backoff (0.8 s doubling, up to 100 % jitter) allows at least
    // 2 attempts within 4.8 s and a handful in S seconds; a hot loop makes
    // hundreds
    let bound = 2 + storm.as_secs() * 2;
    assert!(
        injected >= 2,
        "{status} storm: {injected} requests answered {status} in {storm:?}: \
         the reflector stopped retrying"
    );
    assert!(
        during <= bound,
        "{status} storm: {during} requests in {storm:?} (bound {bound}): no backoff (hot loop)"
    );
    let done = driver.stop().await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    let out = converge(&informer, &rec, &api, &done, CONVERGE).await;
    report(name, injected, &done, &out);
    stop_informer(cancel, task).await;
}

/// Fault 5: the watch connection is blackholed (no bytes, no FIN, no RST)
/// while new connections work. A watch silent for longer than its
/// timeoutSeconds (at most 2 x 300 s) plus a margin must be abandoned and
/// the informer must recover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_watch_is_abandoned() {
    let seed = seed("stalled_watch_is_abandoned");
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp.create_namespace("fault-stall").await.expect("namespace");
    let proxy = FaultProxy::for_url(&cp.server_url()).await.expect("proxy");
    // The reflector abandons a watch silent for longer than its idle limit
    // (default: the server-side timeout + 30 s, i.e. 5.5-10.5 min); a short
    // limit keeps the test quick.
    let informer =
        SharedIndexInformer::<ConfigMap>::builder(proxy.client(cp.config()).expect("client"))
            .namespace(&ns)
            .watch_idle_timeout(Duration::from_secs(5))
            .build();
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone()).expect("handler");
    let (cancel, task) = spawn_informer(&informer);
    synced(&informer, Duration::from_secs(30)).await;
    let accepted = proxy.stats().accepted;
    proxy.blackhole_open();
    let done = Driver::start(
        cp.client().expect("client"),
        &ns,
        "c",
        seed,
        100,
        Duration::from_millis(10),
    )
    .finish()
    .await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    let out = converge(&informer, &rec, &api, &done, CONVERGE).await;
    assert!(
        proxy.stats().accepted > accepted,
        "no new connection after the blackhole"
    );
    report("stalled_watch_is_abandoned", 1, &done, &out);
    stop_informer(cancel, task).await;
}

/// Fault 3: while the informer is cut off, objects are created and
/// deleted, the apiserver restarts (emptying its watch cache) and etcd is
/// compacted past the informer's resourceVersion: the re-watch gets
/// 410 Gone, the informer relists, and the deletes of the gap arrive as
/// tombstones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_while_disconnected() {
    let seed = seed("compaction_while_disconnected");
    let ops = if full() { 400 } else { 150 };
    let cp = ControlPlane::start().await.expect("control plane");
    let Proxied {
        ns,
        proxy,
        informer,
        rec,
        cancel,
        task,
    } = proxied(&cp, "fault-compact").await;

    // phase 1: connected churn, so the informer knows some keys
    let before = Driver::start(
        cp.client().expect("client"),
        &ns,
        "before",
        seed,
        ops / 2,
        Duration::ZERO,
    )
    .finish()
    .await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    converge(&informer, &rec, &api, &before, CONVERGE).await;
    let known: std::collections::BTreeSet<String> = informer
        .indexer()
        .list()
        .iter()
        .map(|o| o.key().to_string())
        .collect();

    // phase 2: disconnected; delete the known keys, create new ones
    proxy.refuse(true);
    proxy.cut_all();
    let mut gap_deleted = std::collections::BTreeSet::new();
    for key in &known {
        let name = key.rsplit('/').next().unwrap_or_default();
        if api
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .is_ok()
        {
            gap_deleted.insert(key.clone());
        }
    }
    let during = Driver::start(
        cp.client().expect("client"),
        &ns,
        "gap",
        seed ^ 0x5eed,
        ops / 2,
        Duration::ZERO,
    )
    .finish()
    .await;
    cp.restart_apiserver().await.expect("restart");
    let compacted = cp.compact_etcd().await.expect("compact");
    eprintln!("compacted etcd at revision {compacted}");
    proxy.refuse(false);

    let mut done = during;
    done.deleted.extend(gap_deleted.iter().cloned());
    done.ok += before.ok;
    done.deleted.extend(before.deleted.iter().cloned());
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    let out = converge(&informer, &rec, &api, &done, CONVERGE).await;
    // the gap's deletes were never seen as events: only a relist can
    // deliver them, as tombstones
    let events = rec.all();
    for key in &gap_deleted {
        let last = events.iter().rev().find(|e| &e.key == key);
        assert!(
            last.is_some_and(|e| e.kind == "delete" && e.tombstone),
            "{key} was deleted during the gap; expected a tombstone, got {last:?}"
        );
    }
    assert!(!gap_deleted.is_empty(), "no delete during the gap");
    report("compaction_while_disconnected", 1, &done, &out);
    stop_informer(cancel, task).await;
}
