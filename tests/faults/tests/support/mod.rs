//! The fault suite's harness: seeds, the churn driver, the recording
//! handler, the HTTP fault layer and the convergence check.

#![allow(dead_code)]

use kcache_testing::builders::config_map;
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

/// [`seed`], and an RNG seeded with it.
pub fn seeded(test: &str) -> (u64, StdRng) {
    let seed = seed(test);
    (seed, StdRng::seed_from_u64(seed))
}

/// Whether the full (slower) form was asked for (`KCACHE_FAULT_FULL=1`).
pub fn full() -> bool {
    std::env::var("KCACHE_FAULT_FULL").is_ok_and(|v| v == "1")
}

// ---------------------------------------------------------------- recorder

/// One notification.
#[derive(Clone, Debug)]
pub struct Seen {
    /// add, update or delete.
    pub kind: &'static str,
    /// namespace/name.
    pub key: String,
    /// metadata.uid of the (new) object; of the last known state for a
    /// delete.
    pub uid: String,
    /// resourceVersion of the (new) object.
    pub rv: u64,
    /// An update's old resourceVersion (0 for add and delete).
    pub old_rv: u64,
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

fn uid_of<K>(o: &CachedObject<K>) -> String {
    o.uid().unwrap_or_default().to_owned()
}

impl<K: 'static> ResourceEventHandler<K> for Recorder {
    fn on_add(&self, o: &CachedObject<K>, _initial: bool) {
        self.push(Seen {
            kind: "add",
            key: o.key().to_string(),
            uid: uid_of(o),
            rv: rv_of(o),
            old_rv: 0,
            tombstone: false,
        });
    }
    fn on_update(&self, old: &CachedObject<K>, o: &CachedObject<K>) {
        self.push(Seen {
            kind: "update",
            key: o.key().to_string(),
            uid: uid_of(o),
            rv: rv_of(o),
            old_rv: rv_of(old),
            tombstone: false,
        });
    }
    fn on_delete(&self, o: &ObjectOrTombstone<K>) {
        self.push(Seen {
            kind: "delete",
            key: o.key().to_string(),
            uid: uid_of(o.object()),
            rv: rv_of(o.object()),
            old_rv: 0,
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
    let mix = Mix {
        min_live: 5,
        create: 0.35,
    };
    let mut report = churn(&api, &prefix, mix, seed, ops, pace, &stop).await;
    // keys, not names
    report.deleted = report
        .deleted
        .iter()
        .map(|name| format!("{ns}/{name}"))
        .collect();
    report
}

/// The operations of a churn driver on one kind of object.
pub trait Churn {
    /// Creates the object `name` (in operation `i`).
    fn create(
        &self,
        name: &str,
        i: u64,
        rng: &mut StdRng,
    ) -> impl Future<Output = kube::Result<()>> + Send;
    /// Changes the object `name` (in operation `i`).
    fn update(
        &self,
        name: &str,
        i: u64,
        rng: &mut StdRng,
    ) -> impl Future<Output = kube::Result<()>> + Send;
    /// Deletes the object `name`.
    fn delete(&self, name: &str) -> impl Future<Output = kube::Result<()>> + Send;
}

impl Churn for Api<ConfigMap> {
    async fn create(&self, name: &str, i: u64, _: &mut StdRng) -> kube::Result<()> {
        let cm = config_map(name).data("v", &i.to_string()).build();
        Api::create(self, &PostParams::default(), &cm)
            .await
            .map(|_| ())
    }
    async fn update(&self, name: &str, i: u64, _: &mut StdRng) -> kube::Result<()> {
        let patch = Patch::Merge(json!({ "data": { "v": i.to_string() } }));
        Api::patch(self, name, &PatchParams::default(), &patch)
            .await
            .map(|_| ())
    }
    async fn delete(&self, name: &str) -> kube::Result<()> {
        Api::delete(self, name, &DeleteParams::default())
            .await
            .map(|_| ())
    }
}

/// How a churn driver picks its operations.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// While fewer objects live, it creates.
    pub min_live: usize,
    /// Otherwise it creates with this probability, updates up to 0.75
    /// and deletes above.
    pub create: f64,
}

/// Attempts `ops` seeded operations on `target` until `stop` is
/// cancelled, each followed by a pause of 0 to `pace` (none if zero).
/// Objects are named `<prefix><n>`; names are never reused, so a deleted
/// object never comes back. The report's `deleted` holds names.
pub async fn churn<C: Churn>(
    target: &C,
    prefix: &str,
    mix: Mix,
    seed: u64,
    ops: u64,
    pace: Duration,
    stop: &CancellationToken,
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
        let res = if live.len() < mix.min_live || roll < mix.create {
            let name = format!("{prefix}{next}");
            next += 1;
            let r = target.create(&name, i, &mut rng).await;
            if r.is_ok() {
                live.push(name);
            }
            r
        } else {
            let idx = rng.random_range(0..live.len());
            if roll < 0.75 {
                target.update(&live[idx], i, &mut rng).await
            } else {
                let name = live.swap_remove(idx);
                let r = target.delete(&name).await;
                // a failed delete may still have happened: the final LIST
                // is the truth; only successful deletes are listed here
                if r.is_ok() {
                    report.deleted.insert(name);
                }
                r
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
    lists: AtomicU64,
    list_continues: AtomicU64,
    watches: AtomicU64,
    streaming_lists: AtomicU64,
}

/// The kinds of requests a [`HttpFaults`] layer saw (answered or
/// forwarded), from their query strings: which list path the reflector
/// took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestKinds {
    /// GET without `watch`: LIST pages.
    pub lists: u64,
    /// Of those, pages after the first (`continue=` set).
    pub list_continues: u64,
    /// Watches (`watch=true`/`watch=1`).
    pub watches: u64,
    /// Of those, streaming lists (`sendInitialEvents=true`).
    pub streaming_lists: u64,
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
    /// The kinds of requests seen so far.
    pub fn kinds(&self) -> RequestKinds {
        let f = &self.inner;
        RequestKinds {
            lists: f.lists.load(Ordering::SeqCst),
            list_continues: f.list_continues.load(Ordering::SeqCst),
            watches: f.watches.load(Ordering::SeqCst),
            streaming_lists: f.streaming_lists.load(Ordering::SeqCst),
        }
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
        if req.method() == http::Method::GET {
            let query = req.uri().query().unwrap_or_default();
            let param = |name: &str| {
                query
                    .split('&')
                    .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
                    .filter(|v| !v.is_empty())
            };
            if matches!(param("watch"), Some("true" | "1")) {
                f.watches.fetch_add(1, Ordering::SeqCst);
                if param("sendInitialEvents") == Some("true") {
                    f.streaming_lists.fetch_add(1, Ordering::SeqCst);
                }
            } else {
                f.lists.fetch_add(1, Ordering::SeqCst);
                if param("continue").is_some() {
                    f.list_continues.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
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

/// The outcome of [`converge`]. Every count is computed from what the
/// informer and the handler did; the check fails unless `lost`, `stale`,
/// `duplicates` and `resurrections` are 0.
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
    /// Keys the handler or the cache got wrong at the end: held but gone
    /// from the LIST, missing, or at another resourceVersion; plus keys
    /// the driver deleted whose last notification is not a delete.
    pub lost: usize,
    /// Updates that went backwards in resourceVersion.
    pub stale: usize,
    /// Notifications delivered twice (see [`NotificationChecks`]).
    pub duplicates: usize,
    /// Adds or updates of an object (uid) after its delete.
    pub resurrections: usize,
    /// Sync notifications (unchanged objects told again after a relist).
    pub syncs: usize,
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

/// The keys on which `have` differs from `want`: missing, extra, or at
/// another resourceVersion.
pub fn differences(want: &BTreeMap<String, u64>, have: &BTreeMap<String, u64>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, rv) in want {
        match have.get(k) {
            None => out.push(format!("{k}: missing (rv {rv})")),
            Some(h) if h != rv => out.push(format!("{k}: rv {h}, LIST {rv}")),
            Some(_) => {}
        }
    }
    for k in have.keys().filter(|k| !want.contains_key(*k)) {
        out.push(format!("{k}: held but gone from the LIST (no delete)"));
    }
    out
}

/// What is wrong in a handler's sequence of notifications, whatever the
/// final state.
#[derive(Debug, Default)]
pub struct NotificationChecks {
    /// Updates that went backwards in resourceVersion for a key.
    pub stale: Vec<String>,
    /// The same change delivered twice: an update from another
    /// resourceVersion to the one the handler already holds for that key,
    /// or an add of a key it holds (no delete in between). An update whose
    /// old and new resourceVersions are equal is a sync notification, not
    /// a duplicate: after a relist client-go (and kcache) tell every
    /// handler that has not asked for resyncs of each unchanged object
    /// this way (`isSync`; a handler compares the resourceVersions).
    pub duplicates: Vec<String>,
    /// Sync notifications (updates with an unchanged resourceVersion).
    pub syncs: usize,
    /// An add or update of an object (uid) after a delete of that uid.
    /// Names are never reused by the drivers, so any such notification is
    /// an object brought back from the dead.
    pub resurrections: Vec<String>,
}

impl NotificationChecks {
    /// Runs every check over `events`, in delivery order.
    pub fn of(events: &[Seen]) -> NotificationChecks {
        let mut out = NotificationChecks::default();
        let mut held: BTreeMap<&str, u64> = BTreeMap::new();
        let mut deleted: BTreeMap<&str, &str> = BTreeMap::new();
        for (i, e) in events.iter().enumerate() {
            if e.kind == "delete" {
                held.remove(e.key.as_str());
                if !e.uid.is_empty() {
                    deleted.insert(&e.uid, &e.key);
                }
                continue;
            }
            if let Some(key) = deleted.get(e.uid.as_str()) {
                out.resurrections.push(format!(
                    "notification {i}: {} of {} (uid {}, rv {}) after its delete (as {key})",
                    e.kind, e.key, e.uid, e.rv
                ));
            }
            match (e.kind, held.get(e.key.as_str())) {
                ("add", Some(prev)) => out.duplicates.push(format!(
                    "notification {i}: add of {} at rv {} while the handler holds rv {prev}",
                    e.key, e.rv
                )),
                ("update", Some(_)) if e.old_rv == e.rv => out.syncs += 1,
                ("update", Some(prev)) if e.rv == *prev => out.duplicates.push(format!(
                    "notification {i}: update of {} from rv {} to rv {} delivered again",
                    e.key, e.old_rv, e.rv
                )),
                ("update", Some(prev)) if e.rv < *prev => out.stale.push(format!(
                    "notification {i}: update of {} to rv {} after rv {prev}",
                    e.key, e.rv
                )),
                _ => {}
            }
            held.insert(&e.key, e.rv);
        }
        out
    }

    /// Panics with the details unless every check passed.
    pub fn assert_clean(&self, what: &str) {
        assert!(
            self.stale.is_empty(),
            "{what}: {} updates went backwards: {:?}",
            self.stale.len(),
            first(&self.stale)
        );
        assert!(
            self.duplicates.is_empty(),
            "{what}: {} duplicate notifications: {:?}",
            self.duplicates.len(),
            first(&self.duplicates)
        );
        assert!(
            self.resurrections.is_empty(),
            "{what}: {} notifications of deleted objects (resurrections): {:?}",
            self.resurrections.len(),
            first(&self.resurrections)
        );
    }
}

fn first(v: &[String]) -> &[String] {
    &v[..v.len().min(10)]
}

/// After the driver stopped: within `within`, the informer's cache equals a
/// fresh LIST (keys and resourceVersions) and so does the handler's view
/// (every key it saw that is gone got a delete or tombstone); no update went
/// backwards, no notification was delivered twice, no deleted object came
/// back. Panics with the details (and the seed printed earlier).
pub async fn converge(
    informer: &SharedIndexInformer<ConfigMap>,
    rec: &Recorder,
    api: &Api<ConfigMap>,
    driver: &DriverReport,
    within: Duration,
) -> Outcome {
    let started = Instant::now();
    let want = server_state(api).await;
    loop {
        let cache = cache_state(informer);
        let view = handler_view(&rec.all());
        if cache == want && view == want {
            break;
        }
        if started.elapsed() > within {
            let in_cache = differences(&want, &cache);
            let in_view = differences(&want, &view);
            panic!(
                "no convergence after {within:?}: cache {} keys, LIST {} keys; \
                 lost {} (cache {}, handler {}); cache vs LIST: {:?}; handler vs LIST: {:?}",
                cache.len(),
                want.len(),
                in_cache.len() + in_view.len(),
                in_cache.len(),
                in_view.len(),
                first(&in_cache),
                first(&in_view),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let converged_in = started.elapsed();
    // the final figures, computed from one snapshot of the notifications
    let events = rec.all();
    let mut wrong = differences(&want, &cache_state(informer));
    wrong.extend(differences(&want, &handler_view(&events)));
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
            if e.kind != "delete" {
                wrong.push(format!(
                    "{key} was deleted but its last notification is {e:?}"
                ));
                continue;
            }
            deletes += 1;
            if e.tombstone {
                tombstones += 1;
            }
        }
    }
    let checks = NotificationChecks::of(&events);
    let out = Outcome {
        events: events.len(),
        keys: want.len(),
        deletes,
        tombstones,
        lost: wrong.len(),
        stale: checks.stale.len(),
        duplicates: checks.duplicates.len(),
        resurrections: checks.resurrections.len(),
        syncs: checks.syncs,
        converged_in,
    };
    assert!(
        wrong.is_empty(),
        "lost {}: {:?}",
        wrong.len(),
        first(&wrong)
    );
    checks.assert_clean("handler");
    out
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

/// One line of results, printed for docs/reliability.md. `injected` is
/// what the injector measured (proxy, HTTP layer, control plane), never a
/// planned count.
pub fn report(fault: &str, injected: u64, driver: &DriverReport, o: &Outcome) {
    eprintln!(
        "RESULT {fault}: faults injected {injected}, driver ops ok {} failed {}, events {}, \
         keys compared {}, deletes delivered {} (tombstones {}), lost {}, stale {}, \
         duplicates {}, resurrections {}, sync updates {}, converged in {:.1}s",
        driver.ok,
        driver.failed,
        o.events,
        o.keys,
        o.deletes,
        o.tombstones,
        o.lost,
        o.stale,
        o.duplicates,
        o.resurrections,
        o.syncs,
        o.converged_in.as_secs_f64()
    );
}

/// Counts the reports of the watch-error handler by reason label and,
/// as a reflector metrics provider, the reflector's
/// `reflector_errors_total{reason}` and `reflector_watch_events_total`.
#[derive(Clone, Default)]
pub struct ErrorCounts {
    counts: Arc<Mutex<BTreeMap<&'static str, u64>>>,
    metric: Arc<Mutex<BTreeMap<&'static str, u64>>>,
    watch_events: Arc<AtomicU64>,
}

/// `reflector_watch_events_total` of [`ErrorCounts`].
struct EventCounter(Arc<AtomicU64>);

impl kcache_core::metrics::CounterMetric for EventCounter {
    fn inc_by(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

/// One `reflector_errors_total{reason}` counter of [`ErrorCounts`].
struct ReasonCounter {
    counts: Arc<Mutex<BTreeMap<&'static str, u64>>>,
    reason: &'static str,
}

impl kcache_core::metrics::CounterMetric for ReasonCounter {
    fn inc_by(&self, n: u64) {
        *self
            .counts
            .lock()
            .expect("error metric lock")
            .entry(self.reason)
            .or_default() += n;
    }
}

/// Every error the reflector met, by reason: also the ones no watch-error
/// handler hears of, such as a list refused with 410 Gone that the
/// reflector retries at once from the newest state (as client-go does).
impl kcache_reflector::ReflectorMetricsProvider for ErrorCounts {
    fn new_events_metric(&self, _name: &str) -> Box<dyn kcache_core::metrics::CounterMetric> {
        Box::new(EventCounter(self.watch_events.clone()))
    }
    fn new_errors_metric(
        &self,
        _name: &str,
        reason: kcache_reflector::ErrorReason,
    ) -> Box<dyn kcache_core::metrics::CounterMetric> {
        Box::new(ReasonCounter {
            counts: self.metric.clone(),
            reason: reason.as_str(),
        })
    }
}

impl ErrorCounts {
    /// A watch-error handler that counts into `self`.
    pub fn handler(&self) -> kcache_reflector::WatchErrorHandler {
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
    /// The reflector's `reflector_watch_events_total` so far (when given
    /// to the informer as its reflector metrics provider).
    pub fn watch_events(&self) -> u64 {
        self.watch_events.load(Ordering::Relaxed)
    }
    /// The reflector's `reflector_errors_total{reason}` so far (when
    /// given to the informer as its reflector metrics provider).
    pub fn metric(&self, reason: &str) -> u64 {
        self.metric
            .lock()
            .expect("error metric lock")
            .get(reason)
            .copied()
            .unwrap_or(0)
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
            NotificationChecks::of(&ev).assert_clean(what);
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
