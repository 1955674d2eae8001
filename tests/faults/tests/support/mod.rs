//! The fault suite's harness: seeds, the churn driver, the recording
//! handler, the HTTP fault layer and the convergence check.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_core::{CachedObject, ObjectOrTombstone};
use kcache_informer::{ResourceEventHandler, SharedIndexInformer};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::client::{Body, ClientBuilder, DynBody};
use kube::{Client, Config};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The seed of a fault: `KCACHE_FAULT_SEED` or a random one, printed with
/// the replay command (test output is shown when the test fails).
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("KCACHE_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!(
        "fault {test}: seed {seed}; replay with: \
         KCACHE_FAULT_SEED={seed} cargo test -p kcache-fault-suite --test faults -- --exact {test}"
    );
    seed
}

/// Whether the full (slower) form was asked for (`KCACHE_FAULT_FULL=1`).
pub fn full() -> bool {
    std::env::var("KCACHE_FAULT_FULL").is_ok_and(|v| v == "1")
}

fn cm(name: &str, v: u64) -> ConfigMap {
    serde_json::from_value(json!({ "metadata": { "name": name }, "data": { "v": v.to_string() } }))
        .expect("a valid ConfigMap")
}

// ---------------------------------------------------------------- recorder

/// One notification.
#[derive(Clone, Debug)]
pub struct Seen {
    /// add, update or delete.
    pub kind: &'static str,
    /// namespace/name.
    pub key: String,
    /// resourceVersion of the (new) object.
    pub rv: u64,
    /// A delete delivered as a tombstone (DeletedFinalStateUnknown).
    pub tombstone: bool,
}

/// Records every notification and flags updates that go backwards.
#[derive(Clone, Default)]
pub struct Recorder {
    events: Arc<Mutex<Vec<Seen>>>,
}

fn rv_of<K>(o: &CachedObject<K>) -> u64 {
    o.resource_version()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

impl Recorder {
    /// Records one notification.
    pub fn push(&self, s: Seen) {
        self.events.lock().expect("recorder lock").push(s);
    }
    /// Every notification so far.
    pub fn all(&self) -> Vec<Seen> {
        self.events.lock().expect("recorder lock").clone()
    }
}

impl<K: 'static> ResourceEventHandler<K> for Recorder {
    fn on_add(&self, o: &CachedObject<K>, _initial: bool) {
        self.push(Seen {
            kind: "add",
            key: o.key().to_string(),
            rv: rv_of(o),
            tombstone: false,
        });
    }
    fn on_update(&self, _old: &CachedObject<K>, o: &CachedObject<K>) {
        self.push(Seen {
            kind: "update",
            key: o.key().to_string(),
            rv: rv_of(o),
            tombstone: false,
        });
    }
    fn on_delete(&self, o: &ObjectOrTombstone<K>) {
        self.push(Seen {
            kind: "delete",
            key: o.key().to_string(),
            rv: rv_of(o.object()),
            tombstone: o.is_tombstone(),
        });
    }
}

// ------------------------------------------------------------------ driver

/// What the driver did.
#[derive(Debug, Default)]
pub struct DriverReport {
    /// Operations that succeeded.
    pub ok: u64,
    /// Operations that failed (apiserver down, ...).
    pub failed: u64,
    /// Keys deleted by a successful delete.
    pub deleted: BTreeSet<String>,
}

/// Creates, updates and deletes ConfigMaps in `ns` with a seeded RNG until
/// `ops` operations were attempted or `stop` is cancelled. Names are never
/// reused, so a deleted key never comes back.
pub struct Driver {
    stop: CancellationToken,
    task: JoinHandle<DriverReport>,
}

impl Driver {
    /// Starts the driver with its own direct client (not through the proxy).
    /// Its names are `<prefix><n>`: give each driver of a namespace its own
    /// prefix.
    pub fn start(
        client: Client,
        ns: &str,
        prefix: &str,
        seed: u64,
        ops: u64,
        pace: Duration,
    ) -> Driver {
        let api: Api<ConfigMap> = Api::namespaced(client, ns);
        let stop = CancellationToken::new();
        let (ns, prefix) = (ns.to_owned(), prefix.to_owned());
        let task = tokio::spawn(drive(api, ns, prefix, seed, ops, pace, stop.clone()));
        Driver { stop, task }
    }

    /// Stops the driver and returns what it did.
    pub async fn stop(self) -> DriverReport {
        self.stop.cancel();
        self.task.await.expect("the driver panicked")
    }

    /// Waits until the driver finished its operations.
    pub async fn finish(self) -> DriverReport {
        self.task.await.expect("the driver panicked")
    }
}

async fn drive(
    api: Api<ConfigMap>,
    ns: String,
    prefix: String,
    seed: u64,
    ops: u64,
    pace: Duration,
    stop: CancellationToken,
) -> DriverReport {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut live: Vec<String> = Vec::new();
    let mut next = 0u64;
    let mut report = DriverReport::default();
    for i in 0..ops {
        if stop.is_cancelled() {
            break;
        }
        let roll: f64 = rng.random();
        let res = if live.len() < 5 || roll < 0.35 {
            let name = format!("{prefix}{next}");
            next += 1;
            let r = api.create(&PostParams::default(), &cm(&name, i)).await;
            if r.is_ok() {
                live.push(name);
            }
            r.map(|_| ())
        } else {
            let idx = rng.random_range(0..live.len());
            if roll < 0.75 {
                api.patch(
                    &live[idx],
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "data": { "v": i.to_string() } })),
                )
                .await
                .map(|_| ())
            } else {
                let name = live.swap_remove(idx);
                let r = api.delete(&name, &DeleteParams::default()).await;
                // a failed delete may still have happened: the final LIST
                // is the truth; only successful deletes are listed here
                if r.is_ok() {
                    report.deleted.insert(format!("{ns}/{name}"));
                }
                r.map(|_| ())
            }
        };
        match res {
            Ok(()) => report.ok += 1,
            Err(_) => report.failed += 1,
        }
        if !pace.is_zero() {
            let jitter = rng.random_range(0..=pace.as_millis() as u64);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(jitter)) => {}
                _ = stop.cancelled() => break,
            }
        }
    }
    report
}

// ------------------------------------------------------------- HTTP faults

/// HTTP faults injected by a client layer: the next requests are answered
/// with a status instead of reaching the apiserver; every request is
/// counted.
#[derive(Clone, Default)]
pub struct HttpFaults {
    inner: Arc<HttpFaultsInner>,
}

#[derive(Default)]
struct HttpFaultsInner {
    requests: AtomicU64,
    injected: AtomicU64,
    status: AtomicU64,
    storm: AtomicBool,
}

impl HttpFaults {
    /// Answers every request with `status` until [`HttpFaults::calm`].
    pub fn storm(&self, status: u16) {
        self.inner.status.store(status as u64, Ordering::SeqCst);
        self.inner.storm.store(true, Ordering::SeqCst);
    }
    /// Ends the storm.
    pub fn calm(&self) {
        self.inner.storm.store(false, Ordering::SeqCst);
    }
    /// Requests seen so far (answered or forwarded).
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::SeqCst)
    }
    /// Requests answered with an injected status.
    pub fn injected(&self) -> u64 {
        self.inner.injected.load(Ordering::SeqCst)
    }

    /// A client for `config` with this fault layer outermost (above kube's
    /// own retry layer, so every injected answer reaches the reflector).
    pub fn client(&self, config: Config) -> Client {
        ClientBuilder::try_from(config)
            .expect("client builder")
            .with_layer(&FaultLayer(self.clone()))
            .build()
    }
}

#[derive(Clone)]
struct FaultLayer(HttpFaults);

impl<S> tower::Layer<S> for FaultLayer {
    type Service = FaultService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        FaultService {
            inner,
            faults: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct FaultService<S> {
    inner: S,
    faults: HttpFaults,
}

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<Body>> for FaultService<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Box<DynBody>>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Box<DynBody>>;
    type Error = S::Error;
    type Future = BoxFut<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let f = &self.faults.inner;
        f.requests.fetch_add(1, Ordering::SeqCst);
        if f.storm.load(Ordering::SeqCst) {
            f.injected.fetch_add(1, Ordering::SeqCst);
            let status = f.status.load(Ordering::SeqCst) as u16;
            let (reason, message) = if status == 429 {
                ("TooManyRequests", "injected: too many requests")
            } else {
                ("InternalError", "injected: internal error")
            };
            let body = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": message, "reason": reason,
                "details": { "retryAfterSeconds": 1 }, "code": status
            })
            .to_string();
            let body: Box<DynBody> = Box::new(
                http_body_util::Full::new(Bytes::from(body)).map_err(|never| match never {}),
            );
            let resp = http::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .header("retry-after", "1")
                .body(body)
                .expect("a valid response");
            return Box::pin(async move { Ok(resp) });
        }
        Box::pin(self.inner.call(req))
    }
}

// ------------------------------------------------------------- the check

/// The outcome of [`converge`].
#[derive(Debug)]
pub struct Outcome {
    /// Notifications received.
    pub events: usize,
    /// Keys compared (cache vs LIST).
    pub keys: usize,
    /// Deletes expected (keys the handler saw that are gone) and delivered.
    pub deletes: usize,
    /// Of those, delivered as tombstones.
    pub tombstones: usize,
    /// Time from the driver's stop to convergence.
    pub converged_in: Duration,
}

/// Fresh LIST: key -> resourceVersion.
pub async fn server_state(api: &Api<ConfigMap>) -> BTreeMap<String, u64> {
    let list = loop {
        match api.list(&ListParams::default()).await {
            Ok(l) => break l,
            Err(e) => {
                eprintln!("list failed (retrying): {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    list.items
        .into_iter()
        .map(|c| {
            let m = c.metadata;
            (
                format!(
                    "{}/{}",
                    m.namespace.unwrap_or_default(),
                    m.name.unwrap_or_default()
                ),
                m.resource_version.and_then(|r| r.parse().ok()).unwrap_or(0),
            )
        })
        .collect()
}

fn cache_state(i: &SharedIndexInformer<ConfigMap>) -> BTreeMap<String, u64> {
    i.indexer()
        .list()
        .iter()
        .map(|o| (o.key().to_string(), rv_of(o)))
        .collect()
}

/// The handler's view: replaying its notifications, key -> last rv.
pub fn handler_view(events: &[Seen]) -> BTreeMap<String, u64> {
    let mut view = BTreeMap::new();
    for e in events {
        match e.kind {
            "delete" => {
                view.remove(&e.key);
            }
            _ => {
                view.insert(e.key.clone(), e.rv);
            }
        }
    }
    view
}

/// Updates that went backwards in resourceVersion for a key.
pub fn stale_updates(events: &[Seen]) -> Vec<String> {
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    let mut bad = Vec::new();
    for e in events {
        match e.kind {
            "update" => {
                if let Some(prev) = last.get(e.key.as_str())
                    && e.rv < *prev
                {
                    bad.push(format!(
                        "{}: update to rv {} after rv {}",
                        e.key, e.rv, prev
                    ));
                }
                last.insert(&e.key, e.rv);
            }
            "add" => {
                last.insert(&e.key, e.rv);
            }
            _ => {
                last.remove(e.key.as_str());
            }
        }
    }
    bad
}

/// After the driver stopped: within `within`, the informer's cache equals a
/// fresh LIST (keys and resourceVersions) and so does the handler's view
/// (every key it saw that is gone got a delete or tombstone); no update went
/// backwards. Panics with the details (and the seed printed earlier).
pub async fn converge(
    informer: &SharedIndexInformer<ConfigMap>,
    rec: &Recorder,
    api: &Api<ConfigMap>,
    driver: &DriverReport,
    within: Duration,
) -> Outcome {
    let started = Instant::now();
    let want = server_state(api).await;
    let mut cache;
    let mut view;
    loop {
        cache = cache_state(informer);
        view = handler_view(&rec.all());
        if cache == want && view == want {
            break;
        }
        if started.elapsed() > within {
            let missing: Vec<_> = want.keys().filter(|k| !cache.contains_key(*k)).collect();
            let extra: Vec<_> = cache.keys().filter(|k| !want.contains_key(*k)).collect();
            let stale: Vec<_> = want
                .iter()
                .filter(|(k, rv)| cache.get(*k).is_some_and(|c| c != *rv))
                .collect();
            let lost_deletes: Vec<_> = view.keys().filter(|k| !want.contains_key(*k)).collect();
            panic!(
                "no convergence after {within:?}: cache {} keys, LIST {} keys; \
                 missing from cache {missing:?}; extra in cache {extra:?}; \
                 stale rv in cache {stale:?}; handler never got a delete for {lost_deletes:?}; \
                 handler view == LIST: {}",
                cache.len(),
                want.len(),
                view == want
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = rec.all();
    let stale = stale_updates(&events);
    assert!(stale.is_empty(), "updates went backwards: {stale:?}");
    // every key deleted by the driver that the handler ever saw got a
    // delete (or tombstone) as its last notification
    let mut last: BTreeMap<&str, &Seen> = BTreeMap::new();
    for e in &events {
        last.insert(&e.key, e);
    }
    let mut deletes = 0;
    let mut tombstones = 0;
    for key in &driver.deleted {
        if let Some(e) = last.get(key.as_str()) {
            assert_eq!(
                e.kind, "delete",
                "{key} was deleted but its last notification is {e:?}"
            );
            deletes += 1;
            if e.tombstone {
                tombstones += 1;
            }
        }
    }
    Outcome {
        events: events.len(),
        keys: want.len(),
        deletes,
        tombstones,
        converged_in: started.elapsed(),
    }
}

/// Runs an informer until cancelled; the join handle yields its result.
pub fn spawn_informer(
    i: &SharedIndexInformer<ConfigMap>,
) -> (CancellationToken, JoinHandle<Result<(), String>>) {
    let cancel = CancellationToken::new();
    let (i, c) = (i.clone(), cancel.clone());
    let task = tokio::spawn(async move { i.run(c).await.map_err(|e| e.to_string()) });
    (cancel, task)
}

/// Stops the informer and checks that it ended cleanly (no panic, no error).
pub async fn stop_informer(cancel: CancellationToken, task: JoinHandle<Result<(), String>>) {
    cancel.cancel();
    let res = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the informer did not stop within 10 s");
    match res {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("the informer ended with an error: {e}"),
        Err(e) => panic!("the informer task panicked: {e}"),
    }
}

/// Waits for `cond` up to `within`.
pub async fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One line of results, printed for docs/reliability.md.
pub fn report(fault: &str, injected: u64, driver: &DriverReport, o: &Outcome) {
    eprintln!(
        "RESULT {fault}: faults injected {injected}, driver ops ok {} failed {}, events {}, \
         keys compared {}, deletes delivered {} (tombstones {}), lost 0, stale 0, converged in {:.1}s",
        driver.ok,
        driver.failed,
        o.events,
        o.keys,
        o.deletes,
        o.tombstones,
        o.converged_in.as_secs_f64()
    );
}

/// Counts the reports of the watch-error handler by reason label.
#[derive(Clone, Default)]
pub struct ErrorCounts {
    counts: Arc<Mutex<BTreeMap<&'static str, u64>>>,
}

impl ErrorCounts {
    /// A watch-error handler that counts into `self`.
    pub fn handler(&self) -> kcache_informer::WatchErrorHandler {
        let counts = self.counts.clone();
        Arc::new(move |e: &kcache_reflector::ReflectorError| {
            *counts
                .lock()
                .expect("error counts lock")
                .entry(e.reason().as_str())
                .or_default() += 1;
        })
    }
    /// Reports with this reason label so far.
    pub fn get(&self, reason: &str) -> u64 {
        self.counts
            .lock()
            .expect("error counts lock")
            .get(reason)
            .copied()
            .unwrap_or(0)
    }
    /// Every count.
    pub fn all(&self) -> BTreeMap<&'static str, u64> {
        self.counts.lock().expect("error counts lock").clone()
    }
}

/// Waits until the handler view of `events()` equals `want` (every live key
/// at its latest resourceVersion, every gone key deleted), up to `within`.
pub async fn view_converges(
    what: &str,
    want: &BTreeMap<String, u64>,
    within: Duration,
    events: impl Fn() -> Vec<Seen>,
) -> Duration {
    let start = Instant::now();
    loop {
        let ev = events();
        let view = handler_view(&ev);
        if &view == want {
            let stale = stale_updates(&ev);
            assert!(
                stale.is_empty(),
                "{what}: updates went backwards: {stale:?}"
            );
            return start.elapsed();
        }
        if start.elapsed() > within {
            let missing: Vec<_> = want.keys().filter(|k| !view.contains_key(*k)).collect();
            let extra: Vec<_> = view.keys().filter(|k| !want.contains_key(*k)).collect();
            let stale: Vec<_> = want
                .iter()
                .filter(|(k, rv)| view.get(*k).is_some_and(|v| v != *rv))
                .collect();
            panic!(
                "{what}: handler view != LIST after {within:?}: missing {missing:?}, \
                 never deleted {extra:?}, stale {stale:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
