//! Shared test helpers: a recording store, a running reflector that
//! records what its watch error handler saw.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kcache_core::{CachedObject, ObjectOptions, ObjectOrTombstone, ReflectorStore, StoreError};
use kcache_reflector::{
    BackoffConfig, BadEventKind, ErrorReason, Reflector, ReflectorBuilder, ReflectorError,
    WatchConfig,
};
use kcache_testing::fake::{End, Fake, Recorded, Reply, bookmark, error_event, ev};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One error the watch error handler saw.
#[derive(Debug, Clone)]
pub struct SeenError {
    pub reason: ErrorReason,
    pub message: String,
    pub bad_kind: Option<BadEventKind>,
    pub shard_rejected: bool,
}

/// A reflector running on a task, and what its handler saw.
pub struct Running<K: 'static> {
    pub reflector: Arc<Reflector<K>>,
    pub cancel: CancellationToken,
    pub task: JoinHandle<()>,
    errors: Arc<Mutex<Vec<SeenError>>>,
}

impl<K: 'static> Running<K> {
    /// Cancels the reflector and waits (up to 10 s) for it to stop.
    pub async fn stop(self) {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the reflector did not stop")
            .unwrap();
    }
    pub fn errors(&self) -> Vec<SeenError> {
        self.errors.lock().clone()
    }
    /// (reason, display) of every error.
    pub fn seen(&self) -> Vec<(ErrorReason, String)> {
        self.errors()
            .into_iter()
            .map(|e| (e.reason, e.message))
            .collect()
    }
    pub fn reasons(&self) -> Vec<ErrorReason> {
        self.errors().iter().map(|e| e.reason).collect()
    }
    pub fn messages(&self) -> Vec<String> {
        self.errors().into_iter().map(|e| e.message).collect()
    }
    pub fn bad_kinds(&self) -> Vec<BadEventKind> {
        self.errors().iter().filter_map(|e| e.bad_kind).collect()
    }
}

/// Builds the reflector with a recording watch error handler and runs it.
pub fn start<K: kube::Resource + 'static>(b: ReflectorBuilder<K>) -> Running<K> {
    let errors: Arc<Mutex<Vec<SeenError>>> = Arc::default();
    let e2 = errors.clone();
    let reflector = Arc::new(
        b.watch_error_handler(move |e: &ReflectorError| {
            e2.lock().push(SeenError {
                reason: e.reason(),
                message: kcache_core::ErrorChain(e).to_string(),
                bad_kind: match e {
                    ReflectorError::BadEvent { source, .. } => Some(source.kind),
                    _ => None,
                },
                shard_rejected: matches!(e, ReflectorError::ShardSelectorRejected { .. }),
            });
        })
        .build(),
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (r, c) = (reflector.clone(), cancel.clone());
        async move { r.run(c).await }
    });
    Running {
        reflector,
        cancel,
        task,
        errors,
    }
}

/// The tests' usual list options: namespace `ns`, list + watch (no
/// streaming list).
pub fn opts() -> WatchConfig {
    WatchConfig {
        namespace: Some("ns".into()),
        use_watch_list: false,
        ..WatchConfig::default()
    }
}

/// [`opts`] with streaming lists.
pub fn wl_opts() -> WatchConfig {
    WatchConfig {
        use_watch_list: true,
        ..opts()
    }
}

/// `options`, with managedFields cut from the cached objects.
pub fn cutting_managed_fields(options: WatchConfig) -> WatchConfig {
    WatchConfig {
        object_options: ObjectOptions {
            strip_managed_fields: true,
            ..ObjectOptions::default()
        },
        ..options
    }
}

/// A scripted fake apiserver answering as `script` says, and the reflector
/// `builder` makes for it over a new recording store, running: the start
/// of every scripted test.
pub fn serve<K: kube::Resource + 'static>(
    builder: impl FnOnce(&Fake, &Arc<RecordingStore<K>>) -> ReflectorBuilder<K>,
    script: impl FnMut(&Recorded) -> Reply + Send + 'static,
) -> (Fake, Arc<RecordingStore<K>>, Running<K>) {
    let fake = Fake::new(script);
    let store = Arc::new(RecordingStore::default());
    let run = start(builder(&fake, &store));
    (fake, store, run)
}

/// The initial events of a streaming list: `objects` as ADDED events,
/// then the end bookmark at `rv`.
pub fn initial_events(objects: Vec<serde_json::Value>, rv: &str) -> Vec<String> {
    let mut lines: Vec<String> = objects.into_iter().map(|o| ev("ADDED", o)).collect();
    lines.push(bookmark(rv, true));
    lines
}

/// A streaming list that delivers `objects` and its end bookmark at `rv`,
/// then stays open.
pub fn streaming_list(objects: Vec<serde_json::Value>, rv: &str) -> Reply {
    Reply::Stream(initial_events(objects, rv), End::Hang)
}

/// A streaming list that delivers `objects` and its end bookmark at `rv`,
/// then expires (an ERROR event with a 410 Status) and ends.
pub fn expiring_streaming_list(objects: Vec<serde_json::Value>, rv: &str) -> Reply {
    let mut lines = initial_events(objects, rv);
    lines.push(error_event(410, "Expired"));
    Reply::Stream(lines, End::Close)
}

/// A watch that ends at once with a 410 `Expired` ERROR event.
pub fn expired() -> Reply {
    Reply::Stream(vec![error_event(410, "Expired")], End::Close)
}

/// A response body the test writes as it goes: the sender, and the reply
/// streaming what is sent (the body ends when the sender is dropped).
pub fn live_body() -> (mpsc::UnboundedSender<Bytes>, LiveBody) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, LiveBody(Mutex::new(Some(rx))))
}

/// The reply side of [`live_body`], for the one request that gets it.
pub struct LiveBody(Mutex<Option<mpsc::UnboundedReceiver<Bytes>>>);

impl LiveBody {
    /// The reply streaming the body (only once).
    pub fn take(&self) -> Reply {
        Reply::Channel(
            self.0
                .lock()
                .take()
                .expect("a live body answers one request"),
        )
    }
}

/// A metadata-only ConfigMap.
pub type Meta = kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::ConfigMap>;

/// A metadata-only ConfigMap reflector on `client` (namespace `ns`, list
/// then watch), and its recording store.
pub fn meta_reflector(
    client: &kube::Client,
) -> (Arc<RecordingStore<Meta>>, ReflectorBuilder<Meta>) {
    let store = Arc::new(RecordingStore::<Meta>::default());
    let builder = Reflector::<Meta>::builder(client.clone(), store.clone()).config(opts());
    (store, builder)
}

/// A reflector of the custom resource `widgets.example.com/v1` as
/// `DynamicObject`s on `client` (list options still default), and its
/// recording store.
pub fn widget_reflector(
    client: &kube::Client,
) -> (
    Arc<RecordingStore<DynamicObject>>,
    ReflectorBuilder<DynamicObject>,
) {
    let store = Arc::new(RecordingStore::<DynamicObject>::default());
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let builder = Reflector::<DynamicObject>::builder_with(client.clone(), store.clone(), ar);
    (store, builder)
}

/// The JSON of a `PartialObjectMetadataList` at `rv`.
pub fn meta_list(rv: &str, items: Vec<serde_json::Value>) -> String {
    serde_json::json!({"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":rv},"items":items}).to_string()
}

/// Backoff without jitter: deterministic retry times.
pub fn no_jitter() -> BackoffConfig {
    BackoffConfig {
        jitter: 0.0,
        ..Default::default()
    }
}

/// One call the reflector made on the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Add(String, String),
    Update(String, String),
    Delete(String, String),
    /// keys (sorted) and the resource version
    Replace(Vec<String>, String),
    Resync,
    Bookmark(String),
}

/// Records every call; the current state (key -> rv) is derived from them.
pub struct RecordingStore<K> {
    calls: Mutex<Vec<Call>>,
    objects: Mutex<std::collections::BTreeMap<String, CachedObject<K>>>,
    count: watch::Sender<usize>,
    pub fail_adds: std::sync::atomic::AtomicBool,
    pub fail_replace: std::sync::atomic::AtomicUsize,
}

impl<K> Default for RecordingStore<K> {
    fn default() -> Self {
        RecordingStore {
            calls: Mutex::new(Vec::new()),
            objects: Mutex::new(Default::default()),
            count: watch::channel(0).0,
            fail_adds: Default::default(),
            fail_replace: Default::default(),
        }
    }
}

fn rv<K>(o: &CachedObject<K>) -> String {
    o.resource_version().unwrap_or("").to_owned()
}

impl<K> RecordingStore<K> {
    fn push(&self, c: Call) {
        let n = {
            let mut calls = self.calls.lock();
            calls.push(c);
            calls.len()
        };
        self.count.send_replace(n);
    }
    /// Stores `obj` and records the call `call(key, rv)`.
    fn put(&self, obj: CachedObject<K>, call: fn(String, String) -> Call) {
        let (key, rv) = (obj.key().to_owned(), rv(&obj));
        self.objects.lock().insert(key.clone(), obj);
        self.push(call(key, rv));
    }
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }
    /// Waits until at least `n` calls were made (real or virtual time, 600 s).
    pub async fn wait_calls(&self, n: usize) -> Vec<Call> {
        let reached = kcache_testing::count_reaches(&self.count, n, Duration::from_secs(600)).await;
        let calls = self.calls();
        assert!(
            reached,
            "timed out waiting for {n} store calls; got {calls:#?}"
        );
        calls
    }
    /// Waits for as many calls as `want` has and asserts they are `want`
    /// (and no more).
    pub async fn expect_calls(&self, want: &[Call]) {
        assert_eq!(self.wait_calls(want.len()).await, want);
    }
    /// Waits until `pred` holds for the calls.
    pub async fn wait_until(&self, timeout: Duration, pred: impl Fn(&[Call]) -> bool) -> Vec<Call> {
        let mut rx = self.count.subscribe();
        let r = tokio::time::timeout(timeout, rx.wait_for(|_| pred(&self.calls.lock()))).await;
        assert!(r.is_ok(), "condition not met; calls: {:#?}", self.calls());
        self.calls()
    }
    /// key -> resourceVersion of the current content.
    pub fn state(&self) -> std::collections::BTreeMap<String, String> {
        self.objects
            .lock()
            .iter()
            .map(|(k, o)| (k.clone(), rv(o)))
            .collect()
    }
    pub fn object(&self, key: &str) -> Option<CachedObject<K>> {
        self.objects.lock().get(key).cloned()
    }
}

impl<K> ReflectorStore<K> for RecordingStore<K> {
    fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        if self.fail_adds.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Other("add refused by the test".into()));
        }
        self.put(obj, Call::Add);
        Ok(())
    }
    fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.put(obj, Call::Update);
        Ok(())
    }
    fn delete(&self, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
        self.objects.lock().remove(obj.key());
        self.push(Call::Delete(obj.key().to_owned(), rv(obj.object())));
        Ok(())
    }
    fn replace(
        &self,
        items: Vec<CachedObject<K>>,
        resource_version: String,
    ) -> Result<(), StoreError> {
        if self.fail_replace.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            self.fail_replace
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            return Err(StoreError::Other("replace refused by the test".into()));
        }
        let mut keys: Vec<String> = items.iter().map(|o| o.key().to_owned()).collect();
        keys.sort();
        {
            let mut objs = self.objects.lock();
            objs.clear();
            for o in items {
                objs.insert(o.key().to_owned(), o);
            }
        }
        self.push(Call::Replace(keys, resource_version));
        Ok(())
    }
    fn resync(&self) -> Result<(), StoreError> {
        self.push(Call::Resync);
        Ok(())
    }
    fn bookmark(&self, resource_version: &str) -> Result<(), StoreError> {
        self.push(Call::Bookmark(resource_version.to_owned()));
        Ok(())
    }
    fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        self.objects.lock().get(key).cloned()
    }
}
