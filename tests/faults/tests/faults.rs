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

/// A watch event line (newline-terminated).
fn frame(v: serde_json::Value) -> Vec<u8> {
    let mut b = serde_json::to_vec(&v).expect("json");
    b.push(b'\n');
    b
}

/// Fault 6: malformed frames and objects injected into the live watch
/// stream (the proxy in HTTP mode writes them between two real events):
/// lines that are not JSON, truncated JSON, a JSON value that is not an
/// event, an unknown event type, an object without metadata, an object
/// without a name, objects of another kind (a Secret, a Pod) in the
/// watched namespace, and one event larger than the reflector's limit
/// (128 MiB). Each must be reported to
/// the watch-error handler and skipped (the huge one ends the watch: the
/// reflector re-lists); the informer keeps going and nothing else is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_watch_frames() {
    let seed = seed("malformed_watch_frames");
    let mut rng = StdRng::seed_from_u64(seed);
    let (rounds, ops) = if full() { (6, 600) } else { (2, 200) };
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp
        .create_namespace("fault-malformed")
        .await
        .expect("namespace");
    let proxy = FaultProxy::start_http(cp.config()).await.expect("proxy");
    let informer =
        SharedIndexInformer::<ConfigMap>::builder(proxy.client(cp.config()).expect("client"))
            .namespace(&ns)
            .build();
    let errors = ErrorCounts::default();
    informer
        .set_watch_error_handler(errors.handler())
        .expect("error handler");
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone()).expect("handler");
    let (cancel, task) = spawn_informer(&informer);
    synced(&informer, Duration::from_secs(30)).await;

    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let meta =
        |name: &str| serde_json::json!({ "name": name, "namespace": ns, "resourceVersion": "1" });
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("not json", b"this is not json\n".to_vec()),
        (
            "truncated",
            br#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"na"#
                .iter()
                .copied()
                .chain([b'\n'])
                .collect(),
        ),
        ("not an event", b"[1,2,3]\n".to_vec()),
        (
            "unknown type",
            frame(
                serde_json::json!({ "type": "EXPLODED", "object": { "kind": "ConfigMap", "apiVersion": "v1", "metadata": meta("bad-type") } }),
            ),
        ),
        ("no object", frame(serde_json::json!({ "type": "ADDED" }))),
        (
            "no metadata",
            frame(
                serde_json::json!({ "type": "ADDED", "object": { "kind": "ConfigMap", "apiVersion": "v1", "data": { "a": "b" } } }),
            ),
        ),
        (
            "no name",
            frame(
                serde_json::json!({ "type": "MODIFIED", "object": { "kind": "ConfigMap", "apiVersion": "v1", "metadata": { "namespace": ns, "resourceVersion": "5" } } }),
            ),
        ),
        (
            "wrong kind (Secret)",
            frame(
                serde_json::json!({ "type": "ADDED", "object": { "kind": "Secret", "apiVersion": "v1", "metadata": meta("intruder-secret") } }),
            ),
        ),
        (
            "wrong kind (Pod)",
            frame(
                serde_json::json!({ "type": "ADDED", "object": { "kind": "Pod", "apiVersion": "v1", "metadata": meta("intruder-pod") } }),
            ),
        ),
        (
            "wrong apiVersion",
            frame(
                serde_json::json!({ "type": "ADDED", "object": { "kind": "ConfigMap", "apiVersion": "v9", "metadata": meta("intruder-v9") } }),
            ),
        ),
    ];

    let driver = Driver::start(
        cp.client().expect("client"),
        &ns,
        "c",
        seed,
        ops,
        Duration::from_millis(20),
    );
    let mut injected = 0u64;
    for _ in 0..rounds {
        // a seeded order, one at a time, between the driver's events
        let mut order: Vec<usize> = (0..bad.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        for i in order {
            tokio::time::sleep(Duration::from_millis(rng.random_range(20..200))).await;
            assert!(proxy.inject_watch(&path, bad[i].1.clone()));
            injected += 1;
        }
    }
    eventually(
        "every injection was written into a watch",
        Duration::from_secs(60),
        || proxy.stats().injected >= injected,
    )
    .await;
    eventually(
        "every injection was reported",
        Duration::from_secs(30),
        || errors.get("bad_event") >= injected,
    )
    .await;
    {
        // one event over the reflector's max_event_size: the framer gives
        // up, the watch ends and the reflector lists again
        let limit = kcache_reflector::DEFAULT_MAX_FRAME;
        let mut big = Vec::with_capacity(limit + 4096);
        big.extend_from_slice(
            format!(
                r#"{{"type":"ADDED","object":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"huge","namespace":"{ns}","resourceVersion":"1"}},"data":{{"x":""#
            )
            .as_bytes(),
        );
        big.resize(limit + 1024, b'x');
        big.extend_from_slice(b"\"}}}\n");
        let before = proxy.stats().injected;
        let started = std::time::Instant::now();
        assert!(proxy.inject_watch(&path, big));
        injected += 1;
        eventually(
            "the huge event was written",
            Duration::from_secs(60),
            || proxy.stats().injected > before,
        )
        .await;
        eventually(
            "the huge event was reported",
            Duration::from_secs(60),
            || errors.get("event_too_large") >= 1,
        )
        .await;
        eprintln!(
            "huge event ({} MiB) reported after {:.1}s",
            (limit + 1024) >> 20,
            started.elapsed().as_secs_f64()
        );
    }
    let done = driver.stop().await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    let out = converge(&informer, &rec, &api, &done, CONVERGE).await;
    assert_eq!(
        errors.get("bad_event"),
        injected - 1,
        "every malformed line reported exactly once: {:?}",
        errors.all()
    );
    for name in [
        "intruder-secret",
        "intruder-pod",
        "intruder-v9",
        "bad-type",
        "huge",
    ] {
        let key = format!("{ns}/{name}");
        assert!(
            rec.all().iter().all(|e| e.key != key),
            "the handler was notified about the injected {key}"
        );
    }
    eprintln!(
        "malformed_watch_frames: watch errors reported {:?}",
        errors.all()
    );
    report("malformed_watch_frames", injected, &done, &out);
    stop_informer(cancel, task).await;
}

/// A handler that records every notification, then panics on some (chosen
/// by the seed and the resourceVersion).
struct Panicky {
    rec: Recorder,
    seed: u64,
    panics: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Panicky {
    fn maybe_panic(&self, rv: u64) {
        if (rv ^ self.seed).is_multiple_of(4) {
            self.panics
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            panic!("injected handler panic at rv {rv}");
        }
    }
}

fn rv(o: &kcache_core::CachedObject<ConfigMap>) -> u64 {
    o.resource_version()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

impl kcache_informer::ResourceEventHandler<ConfigMap> for Panicky {
    fn on_add(&self, o: &kcache_core::CachedObject<ConfigMap>, initial: bool) {
        self.rec.on_add(o, initial);
        self.maybe_panic(rv(o));
    }
    fn on_update(
        &self,
        old: &kcache_core::CachedObject<ConfigMap>,
        o: &kcache_core::CachedObject<ConfigMap>,
    ) {
        self.rec.on_update(old, o);
        self.maybe_panic(rv(o));
    }
    fn on_delete(&self, o: &kcache_core::ObjectOrTombstone<ConfigMap>) {
        self.rec.on_delete(o);
        self.maybe_panic(rv(o.object()));
    }
}

/// A handler that records every notification and blocks for `block` on
/// every `every`-th one (the first included).
struct Blocking {
    rec: Recorder,
    block: Duration,
    every: u64,
    calls: std::sync::atomic::AtomicU64,
}

impl Blocking {
    fn maybe_block(&self) {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n.is_multiple_of(self.every) {
            std::thread::sleep(self.block);
        }
    }
}

impl kcache_informer::ResourceEventHandler<ConfigMap> for Blocking {
    fn on_add(&self, o: &kcache_core::CachedObject<ConfigMap>, initial: bool) {
        self.rec.on_add(o, initial);
        self.maybe_block();
    }
    fn on_update(
        &self,
        old: &kcache_core::CachedObject<ConfigMap>,
        o: &kcache_core::CachedObject<ConfigMap>,
    ) {
        self.rec.on_update(old, o);
        self.maybe_block();
    }
    fn on_delete(&self, o: &kcache_core::ObjectOrTombstone<ConfigMap>) {
        self.rec.on_delete(o);
        self.maybe_block();
    }
}

/// Fault 7: on one informer under churn, a handler that panics on about a
/// quarter of its events and a handler that blocks for seconds, beside a
/// plain one. The cache and the plain handler keep pace (converged while
/// the blocked handler still has a backlog); every panic is caught and
/// counted, and the panicking handler keeps receiving later events (its
/// view, notifications recorded before each panic, equals the LIST); the
/// blocked handler catches up and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_panics_and_blocks() {
    let seed = seed("handler_panics_and_blocks");
    let (ops, block, every) = if full() {
        (600, Duration::from_secs(3), 150)
    } else {
        (200, Duration::from_secs(2), 60)
    };
    // the injected panics are expected: keep their messages and backtraces
    // out of the output (other panics still go to the default hook)
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let injected = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.starts_with("injected handler panic"));
        if !injected {
            default_hook(info);
        }
    }));
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp
        .create_namespace("fault-handlers")
        .await
        .expect("namespace");
    let informer = SharedIndexInformer::<ConfigMap>::builder(cp.client().expect("client"))
        .namespace(&ns)
        .build();
    let rec = Recorder::default();
    let panicky = Panicky {
        rec: Recorder::default(),
        seed,
        panics: Default::default(),
    };
    let (panicky_rec, panicky_count) = (panicky.rec.clone(), panicky.panics.clone());
    let blocking = Blocking {
        rec: Recorder::default(),
        block,
        every,
        calls: Default::default(),
    };
    let blocking_rec = blocking.rec.clone();
    let panicky_reg = informer.add_event_handler(panicky).expect("handler");
    let blocking_reg = informer.add_event_handler(blocking).expect("handler");
    informer.add_event_handler(rec.clone()).expect("handler");
    let (cancel, task) = spawn_informer(&informer);
    synced(&informer, Duration::from_secs(30)).await;

    let done = Driver::start(
        cp.client().expect("client"),
        &ns,
        "c",
        seed,
        ops,
        Duration::from_millis(10),
    )
    .finish()
    .await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().expect("client"), &ns);
    let out = converge(&informer, &rec, &api, &done, CONVERGE).await;
    let blocked_backlog = blocking_reg.backlog();
    let blocked_seen = blocking_rec.all().len();
    eprintln!(
        "handler_panics_and_blocks: cache and plain handler converged {:.1}s after the driver \
         stopped; the blocking handler had seen {blocked_seen} of {} events, backlog {blocked_backlog}",
        out.converged_in.as_secs_f64(),
        out.events
    );
    assert!(
        blocked_seen < out.events,
        "the blocking handler was not behind: the fault did not bite"
    );
    let want = server_state(&api).await;
    view_converges("panicking handler", &want, Duration::from_secs(30), || {
        panicky_rec.all()
    })
    .await;
    let panics = panicky_count.load(std::sync::atomic::Ordering::SeqCst);
    assert!(panics > 0, "the handler never panicked");
    assert_eq!(
        panicky_reg.panics(),
        panics,
        "every panic is counted on the registration"
    );
    // later events after the first panic reached it
    assert!(panicky_rec.all().len() as u64 > panics);
    let drain = block * (1 + out.events as u32 / every as u32) + Duration::from_secs(30);
    let caught_up = view_converges("blocking handler", &want, drain, || blocking_rec.all()).await;
    eprintln!(
        "handler_panics_and_blocks: {panics} panics caught, the blocking handler caught up \
         {:.1}s later",
        caught_up.as_secs_f64()
    );
    assert_eq!(blocking_reg.backlog(), 0);
    report(
        "handler_panics_and_blocks",
        panics + (out.events as u64).div_ceil(every),
        &done,
        &out,
    );
    stop_informer(cancel, task).await;
}

// ---------------------------------------------------------------- fault 8

/// One leader-election candidate: a `fault-elector` child process behind a
/// proxy of its own.
struct Candidate {
    identity: String,
    log: std::path::PathBuf,
    proxy: FaultProxy,
    child: std::process::Child,
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A leadership term of one candidate, from its own log.
#[derive(Debug, Clone)]
struct Term {
    identity: String,
    first_act: u128,
    last_act: u128,
}

/// Parses a candidate's log into its terms (a term with no act is
/// dropped: it never acted).
fn terms_of(identity: &str, log: &std::path::Path) -> Vec<Term> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut terms = Vec::new();
    let mut cur: Option<Term> = None;
    for line in text.lines() {
        let mut it = line.split(' ');
        let (Some(what), Some(ts)) = (it.next(), it.next().and_then(|t| t.parse::<u128>().ok()))
        else {
            continue; // a line cut by SIGKILL
        };
        match what {
            "lead" => {
                terms.extend(cur.take());
                let _ = ts;
                cur = Some(Term {
                    identity: identity.to_owned(),
                    first_act: 0,
                    last_act: 0,
                });
            }
            "act" => {
                if let Some(t) = cur.as_mut() {
                    if t.first_act == 0 {
                        t.first_act = ts;
                    }
                    t.last_act = ts;
                }
            }
            "stop" | "lost" | "start" => terms.extend(cur.take()),
            _ => {}
        }
    }
    terms.extend(cur);
    terms.retain(|t| t.first_act != 0);
    terms
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Fault 8: leader election between candidate processes (3 at a time,
/// each behind its own proxy) on a Lease of the real apiserver. The leader
/// is killed with SIGKILL, or partitioned from the apiserver (its proxy
/// refuses and resets, or stalls every connection) and healed after a
/// takeover; seeded order. Checked from the candidates' own logs (each act
/// stamped): at most one candidate acts at a time (the acting intervals of
/// all terms never overlap), and after each fault a new leader acts within
/// lease duration + 2 jittered retry periods + 2 s. Settings: 4 s lease,
/// 3 s renew deadline, 1 s retry period (valid by client-go's rules, with
/// a margin of only one retry period).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_kill_and_partition() {
    let seed = seed("leader_election_kill_and_partition");
    let mut rng = StdRng::seed_from_u64(seed);
    let rounds = if full() { 6 } else { 2 };
    let (lease_ms, renew_ms, retry_ms) = (4000u64, 3000u64, 1000u64);
    let takeover_bound =
        Duration::from_millis(lease_ms + 2 * retry_ms * 22 / 10) + Duration::from_secs(2);
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp
        .create_namespace("fault-leader")
        .await
        .expect("namespace");
    let dir =
        std::env::temp_dir().join(format!("kcache-fault-leader-{}-{seed}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("log dir");
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let lease_name = "fault-leader";
    let spawn = |identity: String| {
        let dir = dir.clone();
        let kubeconfig = kubeconfig.clone();
        let ns = ns.clone();
        async move {
            let proxy = FaultProxy::for_url(&cp.server_url()).await.expect("proxy");
            let log = dir.join(format!("{identity}.log"));
            let child = std::process::Command::new(env!("CARGO_BIN_EXE_fault-elector"))
                .arg(&kubeconfig)
                .arg(proxy.url())
                .arg(&ns)
                .arg(lease_name)
                .arg(&identity)
                .arg(&log)
                .args([
                    lease_ms.to_string(),
                    renew_ms.to_string(),
                    retry_ms.to_string(),
                ])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn fault-elector");
            Candidate {
                identity,
                log,
                proxy,
                child,
            }
        }
    };
    let mut candidates = Vec::new();
    let mut next_id = 0;
    for _ in 0..3 {
        candidates.push(spawn(format!("cand-{next_id}")).await);
        next_id += 1;
    }
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(cp.client().expect("client"), &ns);
    let acting = |c: &Candidate| {
        terms_of(&c.identity, &c.log)
            .last()
            .is_some_and(|t| unix_nanos().saturating_sub(t.last_act) < 200_000_000)
    };
    // the candidate acting now (exactly one), waiting up to `within`
    async fn leader_index(
        candidates: &[Candidate],
        acting: &dyn Fn(&Candidate) -> bool,
        within: Duration,
        not: Option<&str>,
    ) -> usize {
        let start = std::time::Instant::now();
        loop {
            let now: Vec<usize> = (0..candidates.len())
                .filter(|&i| acting(&candidates[i]))
                .filter(|&i| Some(candidates[i].identity.as_str()) != not)
                .collect();
            if now.len() == 1 {
                return now[0];
            }
            assert!(
                start.elapsed() < within,
                "no single acting leader within {within:?} (acting: {now:?})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut i = leader_index(&candidates, &acting, Duration::from_secs(30), None).await;
    let mut takeovers = Vec::new();
    let mut kinds = Vec::new();
    for round in 0..rounds {
        // let the leader renew a few times first
        tokio::time::sleep(Duration::from_millis(rng.random_range(1500..3000))).await;
        let old = candidates[i].identity.clone();
        let kind = if round % 2 == 0 { "kill" } else { "partition" };
        let kind = if full() && rng.random_bool(0.5) {
            if kind == "kill" { "partition" } else { "kill" }
        } else {
            kind
        };
        let stall = rng.random_bool(0.5);
        let t0 = unix_nanos();
        match kind {
            "kill" => {
                candidates[i].child.kill().expect("SIGKILL");
                let _ = candidates[i].child.wait();
            }
            _ => {
                if stall {
                    candidates[i].proxy.stall(true);
                } else {
                    candidates[i].proxy.refuse(true);
                    candidates[i].proxy.cut_all();
                }
            }
        }
        let j = leader_index(
            &candidates,
            &acting,
            takeover_bound + Duration::from_secs(5),
            Some(&old),
        )
        .await;
        let new = &candidates[j];
        let first = terms_of(&new.identity, &new.log)
            .last()
            .map_or(0, |t| t.first_act);
        let takeover = Duration::from_nanos(first.saturating_sub(t0) as u64);
        let label = match kind {
            "kill" => "SIGKILL".to_owned(),
            _ if stall => "partition (stall)".to_owned(),
            _ => "partition (refuse + reset)".to_owned(),
        };
        eprintln!(
            "round {round}: {label} of {old}: {} acts {:.2}s later",
            new.identity,
            takeover.as_secs_f64()
        );
        assert!(
            takeover <= takeover_bound,
            "{label}: takeover took {takeover:?} (bound {takeover_bound:?})"
        );
        takeovers.push(takeover);
        kinds.push(label);
        if kind == "kill" {
            candidates.remove(i);
            candidates.push(spawn(format!("cand-{next_id}")).await);
            next_id += 1;
        } else {
            // heal: the old leader rejoins as a standby
            let p = &candidates[i].proxy;
            p.heal();
            p.stall(false);
            p.cut_all();
        }
        i = leader_index(&candidates, &acting, Duration::from_secs(10), None).await;
        let holder = leases
            .get(lease_name)
            .await
            .ok()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity);
        assert_eq!(
            holder.as_deref(),
            Some(candidates[i].identity.as_str()),
            "the acting candidate holds the Lease"
        );
    }
    // the healed ex-leaders stand by for a while without acting
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(candidates);
    // every log written so far, killed candidates' included
    let mut terms: Vec<Term> = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("log dir").flatten() {
        let path = entry.path();
        let identity = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        terms.extend(terms_of(&identity, &path));
    }
    terms.sort_by_key(|t| t.first_act);
    let mut min_gap = u128::MAX;
    let mut acts_end = 0u128;
    let mut prev: Option<&Term> = None;
    for t in &terms {
        if let Some(p) = prev {
            assert!(
                t.first_act > acts_end,
                "two leaders acted at once: {} ({p:?}) and {} ({t:?}) overlap by {:.3}s",
                p.identity,
                t.identity,
                (acts_end - t.first_act) as f64 / 1e9
            );
            min_gap = min_gap.min(t.first_act - acts_end);
        }
        acts_end = acts_end.max(t.last_act);
        prev = Some(t);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        terms.len() > rounds,
        "{} terms for {rounds} faults",
        terms.len()
    );
    let max = takeovers.iter().max().copied().unwrap_or_default();
    eprintln!(
        "RESULT leader_election_kill_and_partition: faults injected {rounds} ({}), terms {}, \
         overlapping terms 0, smallest gap between two leaders' acts {:.2}s, takeover max {:.2}s \
         (bound {:.1}s)",
        kinds.join(", "),
        terms.len(),
        min_gap as f64 / 1e9,
        max.as_secs_f64(),
        takeover_bound.as_secs_f64()
    );
}

// ---------------------------------------------------------------- fault 9

mod fault9 {
    #![allow(clippy::disallowed_names)] // the custom resource is called Foo

    use std::collections::{BTreeMap, BTreeSet};
    use std::time::{Duration, Instant};

    use k8s_openapi::api::apps::v1::Deployment;
    use kcache_controller::{Config, ControllerHandle};
    use kcache_envtest::ControlPlane;
    use kcache_envtest::proxy::FaultProxy;
    use kcache_informer::SharedInformerFactory;
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
    use kube::{Client, ResourceExt};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use sample_controller::simulator::{self, build_simulator};
    use sample_controller::{Foo, FooSpec, build_controller, crds, reconcile};

    use crate::support::{full, seed};

    struct Running {
        factory: SharedInformerFactory,
        handles: Vec<ControllerHandle>,
        tasks: Vec<tokio::task::JoinHandle<()>>,
    }

    fn start(client: &Client, ns: &str) -> Running {
        let factory = SharedInformerFactory::builder(client.clone())
            .namespace(ns)
            .build();
        let (controller, ctx) =
            build_controller(&factory, client.clone(), Config::default().workers(4));
        let (sim, sim_ctx) = build_simulator(&factory, client.clone());
        let handles = vec![controller.handle(), sim.handle()];
        let tasks = vec![
            tokio::spawn(async move { controller.run(reconcile, ctx).await.expect("controller") }),
            tokio::spawn(async move {
                sim.run(simulator::reconcile, sim_ctx)
                    .await
                    .expect("simulator")
            }),
        ];
        Running {
            factory,
            handles,
            tasks,
        }
    }

    #[derive(Default, Debug)]
    struct FooDriverReport {
        ok: u64,
        failed: u64,
        /// Foos whose delete was accepted.
        deleted: BTreeSet<String>,
    }

    /// Creates, updates (replicas) and deletes Foos, seeded; names never
    /// reused; each Foo's Deployment is `<foo>-dep`.
    async fn drive(api: Api<Foo>, seed: u64, ops: u64) -> FooDriverReport {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut live: Vec<String> = Vec::new();
        let mut next = 0u64;
        let mut r = FooDriverReport::default();
        for _ in 0..ops {
            let roll: f64 = rng.random();
            let res = if live.len() < 10 || roll < 0.4 {
                let name = format!("foo{next}");
                next += 1;
                let foo = Foo::new(
                    &name,
                    FooSpec {
                        deployment_name: format!("{name}-dep"),
                        replicas: Some(rng.random_range(1..4)),
                    },
                );
                let res = api.create(&PostParams::default(), &foo).await;
                if res.is_ok() {
                    live.push(name);
                }
                res.map(|_| ())
            } else {
                let idx = rng.random_range(0..live.len());
                if roll < 0.75 {
                    let patch =
                        serde_json::json!({ "spec": { "replicas": rng.random_range(1..6) } });
                    api.patch(&live[idx], &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(|_| ())
                } else {
                    let name = live.swap_remove(idx);
                    let res = api.delete(&name, &DeleteParams::default()).await;
                    if res.is_ok() {
                        r.deleted.insert(name);
                    }
                    res.map(|_| ())
                }
            };
            match res {
                Ok(()) => r.ok += 1,
                Err(_) => r.failed += 1,
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..10))).await;
        }
        r
    }

    /// What the sample controller guarantees once quiet: every live Foo has
    /// exactly its Deployment (name from its spec, controlled by it, with
    /// its replicas) and no other Deployment exists; every deleted Foo is
    /// gone (its finalizer ran) and so is its Deployment.
    async fn state(client: &Client, ns: &str, deleted: &BTreeSet<String>) -> Result<usize, String> {
        let foos: Api<Foo> = Api::namespaced(client.clone(), ns);
        let deps: Api<Deployment> = Api::namespaced(client.clone(), ns);
        let foo_list = foos
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let dep_list = deps
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let mut deps_by_name: BTreeMap<String, &Deployment> =
            dep_list.items.iter().map(|d| (d.name_any(), d)).collect();
        let mut bad = Vec::new();
        for f in &foo_list.items {
            let name = f.name_any();
            if deleted.contains(&name) || f.metadata.deletion_timestamp.is_some() {
                bad.push(format!(
                    "{name}: deleted but still there (finalizer not done)"
                ));
                continue;
            }
            let Some(d) = deps_by_name.remove(&f.spec.deployment_name) else {
                bad.push(format!("{name}: no deployment"));
                continue;
            };
            let owner = d
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid.clone());
            if owner.as_deref() != f.metadata.uid.as_deref() {
                bad.push(format!("{name}: deployment not controlled by it"));
            }
            let want = f.spec.replicas.unwrap_or(1);
            if d.spec.replicas != Some(want) {
                bad.push(format!("{name}: replicas != {want}"));
            }
        }
        for (name, _) in deps_by_name {
            bad.push(format!("deployment {name} has no live Foo (leaked)"));
        }
        if bad.is_empty() {
            Ok(foo_list.items.len())
        } else {
            bad.truncate(20);
            Err(bad.join("; "))
        }
    }

    /// Fault 9: the sample controller (and the Deployment status simulator)
    /// behind the proxy while a driver creates, updates and deletes Foos
    /// (200 operations; 1,000 in the full form) and faults 1-3 happen:
    /// connection resets, an apiserver restart, and a disconnection during
    /// which etcd is compacted past the controller's resourceVersions
    /// (410 Gone, relist). Then: every live Foo has exactly its Deployment,
    /// no Deployment is left without its Foo, every deleted Foo is gone.
    /// The control plane has no garbage collector: Deployments are deleted
    /// by the controller's finalizer, not by ownerReferences.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sample_controller_under_churn() {
        let seed = seed("fault9::sample_controller_under_churn");
        let mut rng = StdRng::seed_from_u64(seed);
        let ops = if full() { 1000 } else { 200 };
        let cp = ControlPlane::start().await.expect("control plane");
        let crds: Vec<_> = crds().into_iter().map(|(_, c)| c).collect();
        cp.install_crds(&crds).await.expect("CRD");
        let ns = cp
            .create_namespace("fault-sample")
            .await
            .expect("namespace");
        let proxy = FaultProxy::for_url(&cp.server_url()).await.expect("proxy");
        let client = proxy.client(cp.config()).expect("client");
        let running = start(&client, &ns);
        let direct = cp.client().expect("client");
        let driver = tokio::spawn(drive(Api::namespaced(direct.clone(), &ns), seed, ops));

        // faults 1-3, seeded times, while the driver runs
        let mut injected = Vec::new();
        let plan = ["cut", "cut", "restart", "compaction", "cut"];
        for what in plan {
            tokio::time::sleep(Duration::from_millis(rng.random_range(500..1500))).await;
            match what {
                "cut" => proxy.cut_all(),
                "restart" => cp.restart_apiserver().await.expect("restart"),
                _ => {
                    proxy.refuse(true);
                    proxy.cut_all();
                    tokio::time::sleep(Duration::from_millis(rng.random_range(1000..3000))).await;
                    cp.restart_apiserver().await.expect("restart");
                    let rev = cp.compact_etcd().await.expect("compact");
                    eprintln!("compacted etcd at revision {rev} while disconnected");
                    proxy.refuse(false);
                }
            }
            injected.push(what);
        }
        let done = driver.await.expect("driver");
        eprintln!(
            "sample_controller_under_churn: driver ops ok {} failed {}, {} Foos deleted; \
             faults {injected:?}",
            done.ok,
            done.failed,
            done.deleted.len()
        );
        let started = Instant::now();
        let within = Duration::from_secs(180);
        let live = loop {
            match state(&direct, &ns, &done.deleted).await {
                Ok(n) => break n,
                Err(why) if started.elapsed() > within => {
                    panic!("the sample controller did not converge within {within:?}: {why}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        };
        eprintln!(
            "RESULT sample_controller_under_churn: faults injected {} ({}), driver ops ok {} \
             failed {}, live Foos {live} each with exactly its Deployment, deleted Foos {} \
             (Deployments gone), leaked 0, converged in {:.1}s",
            injected.len(),
            injected.join(", "),
            done.ok,
            done.failed,
            done.deleted.len(),
            started.elapsed().as_secs_f64()
        );
        for h in &running.handles {
            h.stop();
        }
        for t in running.tasks {
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .expect("the controller stopped")
                .expect("controller task");
        }
        running.factory.shutdown().await;
    }
}
