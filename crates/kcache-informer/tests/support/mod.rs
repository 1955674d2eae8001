//! A small stateful fake apiserver for ConfigMaps behind
//! `kube::Client::new(service, "default")`: list (unpaged) and watch from a
//! resourceVersion, with knobs to cut watches, fail lists and expire old
//! resourceVersions (410).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use http_body::Frame;
use http_body_util::StreamBody;
use kcache_informer::{ListOptions, SharedIndexInformer};
use kube::Client;
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub use k8s_openapi::api::core::v1::ConfigMap;

type RespBody = StreamBody<BoxStream<'static, Result<Frame<Bytes>, io::Error>>>;

#[derive(Default)]
struct State {
    rv: u64,
    objects: BTreeMap<String, Value>,
    log: Vec<(u64, String)>,
    watchers: Vec<mpsc::UnboundedSender<Bytes>>,
    lists: usize,
    watches: usize,
    fail_lists: usize,
    /// Watches from a resourceVersion below this get 410 Gone.
    oldest_rv: u64,
    /// The `Accept` header of every request.
    accepts: Vec<Option<String>>,
}

/// The fake apiserver. Cheap to clone.
#[derive(Clone)]
pub struct FakeApi {
    pub client: Client,
    state: Arc<Mutex<State>>,
}

fn line(kind: &str, obj: &Value) -> String {
    format!("{}\n", json!({ "type": kind, "object": obj }))
}

fn body(chunks: Vec<Bytes>) -> RespBody {
    StreamBody::new(stream::iter(chunks.into_iter().map(|b| Ok(Frame::data(b)))).boxed())
}

impl FakeApi {
    pub fn new() -> Self {
        let state: Arc<Mutex<State>> = Arc::default();
        let st = state.clone();
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let query: BTreeMap<String, String> = req
                .uri()
                .query()
                .unwrap_or("")
                .split('&')
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            st.lock().unwrap().accepts.push(
                req.headers()
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
            );
            let resp = if query.get("watch").map(String::as_str) == Some("true") {
                let from: u64 = query
                    .get("resourceVersion")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let mut s = st.lock().unwrap();
                s.watches += 1;
                if from < s.oldest_rv {
                    let status = json!({"kind":"Status","apiVersion":"v1","status":"Failure",
                        "message":"too old resource version","reason":"Expired","code":410});
                    http::Response::builder()
                        .status(200)
                        .body(body(vec![Bytes::from(line("ERROR", &status))]))
                } else {
                    let backlog: Vec<Bytes> = s
                        .log
                        .iter()
                        .filter(|(rv, _)| *rv > from)
                        .map(|(_, l)| Bytes::from(l.clone()))
                        .collect();
                    let (tx, mut rx) = mpsc::unbounded_channel();
                    for b in backlog {
                        let _ = tx.send(b);
                    }
                    s.watchers.push(tx);
                    let live = stream::poll_fn(move |cx| rx.poll_recv(cx))
                        .map(|b| Ok::<_, io::Error>(Frame::data(b)));
                    http::Response::builder()
                        .status(200)
                        .body(StreamBody::new(live.boxed()))
                }
            } else {
                let mut s = st.lock().unwrap();
                s.lists += 1;
                if s.fail_lists > 0 {
                    s.fail_lists -= 1;
                    let status = json!({"kind":"Status","apiVersion":"v1","status":"Failure",
                        "message":"injected failure","reason":"InternalError","code":500});
                    http::Response::builder()
                        .status(500)
                        .header("content-type", "application/json")
                        .body(body(vec![Bytes::from(status.to_string())]))
                } else {
                    let list = json!({
                        "kind": "ConfigMapList", "apiVersion": "v1",
                        "metadata": { "resourceVersion": s.rv.to_string() },
                        "items": s.objects.values().cloned().collect::<Vec<_>>(),
                    });
                    http::Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(body(vec![Bytes::from(list.to_string())]))
                }
            };
            async move { resp.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>) }
        });
        FakeApi {
            client: Client::new(svc, "default"),
            state,
        }
    }

    fn emit(&self, kind: &str, obj: Value) -> u64 {
        let mut s = self.state.lock().unwrap();
        let l = line(kind, &obj);
        let rv = s.rv;
        s.log.push((rv, l.clone()));
        s.watchers
            .retain(|w| w.send(Bytes::from(l.clone())).is_ok());
        rv
    }

    fn write(&self, kind: &str, ns: &str, name: &str, data: &str) -> u64 {
        let obj = {
            let mut s = self.state.lock().unwrap();
            s.rv += 1;
            let key = format!("{ns}/{name}");
            let uid = s
                .objects
                .get(&key)
                .and_then(|o| o["metadata"]["uid"].as_str().map(str::to_string))
                .unwrap_or_else(|| format!("uid-{}", s.rv));
            let obj = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": name, "namespace": ns, "uid": uid,
                              "resourceVersion": s.rv.to_string(),
                              "labels": { "app": "test" },
                              "managedFields": [{"manager": "fake", "operation": "Update"}] },
                "data": { "v": data }
            });
            s.objects.insert(key, obj.clone());
            obj
        };
        self.emit(kind, obj)
    }

    /// Creates a ConfigMap; returns its resourceVersion.
    pub fn create(&self, ns: &str, name: &str, data: &str) -> u64 {
        self.write("ADDED", ns, name, data)
    }

    /// Updates a ConfigMap; returns its resourceVersion.
    pub fn update(&self, ns: &str, name: &str, data: &str) -> u64 {
        self.write("MODIFIED", ns, name, data)
    }

    /// Deletes a ConfigMap (no-op if missing).
    pub fn delete(&self, ns: &str, name: &str) {
        let obj = {
            let mut s = self.state.lock().unwrap();
            let Some(mut obj) = s.objects.remove(&format!("{ns}/{name}")) else {
                return;
            };
            s.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            obj
        };
        self.emit("DELETED", obj);
    }

    /// Silent changes: applied to the state without telling open watches
    /// (as if they happened while the client was disconnected).
    pub fn silently<R>(&self, f: impl FnOnce(&FakeApi) -> R) -> R {
        let watchers = std::mem::take(&mut self.state.lock().unwrap().watchers);
        let r = f(self);
        let mut s = self.state.lock().unwrap();
        s.watchers = watchers;
        r
    }

    /// Ends every open watch stream (clean end of stream).
    pub fn close_watches(&self) {
        self.state.lock().unwrap().watchers.clear();
    }

    /// Every watch from an older resourceVersion than the current one is
    /// answered 410 Gone from now on, and open watches end.
    pub fn expire_old_resource_versions(&self) {
        let mut s = self.state.lock().unwrap();
        s.oldest_rv = s.rv;
        s.log.clear();
        s.watchers.clear();
    }

    /// The next `n` lists fail with 500.
    pub fn fail_lists(&self, n: usize) {
        self.state.lock().unwrap().fail_lists = n;
    }

    /// The `Accept` header of every request so far, in order.
    pub fn accept_headers(&self) -> Vec<Option<String>> {
        self.state.lock().unwrap().accepts.clone()
    }

    pub fn lists(&self) -> usize {
        self.state.lock().unwrap().lists
    }

    pub fn watches(&self) -> usize {
        self.state.lock().unwrap().watches
    }

    /// Keys and resourceVersions of what the fake holds now.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        self.state
            .lock()
            .unwrap()
            .objects
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect()
    }

    /// An informer on this fake (classic list + watch: the fake does not
    /// stream lists).
    pub fn informer(&self) -> kcache_informer::SharedIndexInformerBuilder<ConfigMap> {
        SharedIndexInformer::<ConfigMap>::builder(self.client.clone()).list_options(ListOptions {
            use_watch_list: false,
            ..ListOptions::default()
        })
    }
}

/// Polls `cond` every 10 ms for up to 10 s.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// Events at WARN or above, as "LEVEL message field=value ...", captured on
/// the current thread (a current-thread tokio test runs its spawned tasks
/// here too) while the guard lives.
pub struct Logs {
    events: Arc<Mutex<Vec<String>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Logs {
    pub fn capture() -> Logs {
        let events: Arc<Mutex<Vec<String>>> = Arc::default();
        let guard = tracing::subscriber::set_default(WarnCapture(events.clone()));
        Logs {
            events,
            _guard: guard,
        }
    }

    /// Every captured event.
    pub fn all(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    /// The captured events at this level.
    pub fn at(&self, level: tracing::Level) -> Vec<String> {
        let prefix = format!("{level} ");
        self.all()
            .into_iter()
            .filter(|e| e.starts_with(&prefix))
            .collect()
    }
}

struct WarnCapture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        use std::fmt::Write;
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

impl tracing::Subscriber for WarnCapture {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut f = Fields(e.metadata().level().to_string());
        e.record(&mut f);
        self.0.lock().unwrap().push(f.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
