//! A stateful ConfigMap apiserver on the scripted fake: list (unpaged) and
//! watch from a resourceVersion, with knobs to cut watches, fail lists and
//! expire old resourceVersions (410).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Fake, Recorded, Reply, error_event, status};

#[derive(Default)]
struct State {
    rv: u64,
    objects: BTreeMap<String, Value>,
    log: Vec<(u64, String)>,
    watchers: Vec<mpsc::UnboundedSender<Bytes>>,
    fail_lists: usize,
    /// Watches from a resourceVersion below this get 410 Gone.
    oldest_rv: u64,
}

impl State {
    fn answer(&mut self, r: &Recorded) -> Reply {
        if r.is_watch() {
            let from: u64 = r.rv().and_then(|v| v.parse().ok()).unwrap_or(0);
            if from < self.oldest_rv {
                return Reply::Stream(vec![error_event(410, "Expired")], super::End::Close);
            }
            let (tx, rx) = mpsc::unbounded_channel();
            for (_, l) in self.log.iter().filter(|(rv, _)| *rv > from) {
                let _ = tx.send(Bytes::from(l.clone()));
            }
            self.watchers.push(tx);
            Reply::Channel(rx)
        } else if self.fail_lists > 0 {
            self.fail_lists -= 1;
            status(500, "InternalError", "injected failure")
        } else {
            let list = json!({
                "kind": "ConfigMapList", "apiVersion": "v1",
                "metadata": { "resourceVersion": self.rv.to_string() },
                "items": self.objects.values().cloned().collect::<Vec<_>>(),
            });
            Reply::Json(200, list.to_string())
        }
    }
}

/// The stateful fake apiserver. Cheap to clone.
#[derive(Clone)]
pub struct FakeApi {
    /// A client talking to this fake.
    pub client: kube::Client,
    fake: Arc<Fake>,
    state: Arc<Mutex<State>>,
}

fn line(kind: &str, obj: &Value) -> String {
    format!("{}\n", json!({ "type": kind, "object": obj }))
}

impl Default for FakeApi {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeApi {
    /// An empty fake at resourceVersion 0.
    pub fn new() -> Self {
        let state: Arc<Mutex<State>> = Arc::default();
        let st = state.clone();
        let fake = Fake::new(move |r| st.lock().answer(r));
        FakeApi {
            client: fake.client.clone(),
            fake: Arc::new(fake),
            state,
        }
    }

    fn emit(&self, kind: &str, obj: Value) -> u64 {
        let mut s = self.state.lock();
        let l = line(kind, &obj);
        let rv = s.rv;
        s.log.push((rv, l.clone()));
        s.watchers
            .retain(|w| w.send(Bytes::from(l.clone())).is_ok());
        rv
    }

    fn write(&self, kind: &str, ns: &str, name: &str, data: &str) -> u64 {
        let obj = {
            let mut s = self.state.lock();
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
            let mut s = self.state.lock();
            let Some(mut obj) = s.objects.remove(&format!("{ns}/{name}")) else {
                return;
            };
            s.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            obj
        };
        self.emit("DELETED", obj);
    }

    /// `writes_elsewhere` writes to other resources happen (the
    /// resourceVersion moves on by that much), then every open watch gets a
    /// BOOKMARK at the new resourceVersion, as the apiserver sends one
    /// periodically. Returns the bookmark's resourceVersion.
    pub fn bookmark(&self, writes_elsewhere: u64) -> u64 {
        let mut s = self.state.lock();
        s.rv += writes_elsewhere;
        let l = format!("{}\n", super::bookmark(&s.rv.to_string(), false));
        let rv = s.rv;
        s.watchers
            .retain(|w| w.send(Bytes::from(l.clone())).is_ok());
        rv
    }

    /// The resourceVersion of the last write.
    pub fn resource_version(&self) -> u64 {
        self.state.lock().rv
    }

    /// Silent changes: applied to the state without telling open watches
    /// (as if they happened while the client was disconnected).
    pub fn silently<R>(&self, f: impl FnOnce(&FakeApi) -> R) -> R {
        let watchers = std::mem::take(&mut self.state.lock().watchers);
        let r = f(self);
        self.state.lock().watchers = watchers;
        r
    }

    /// Ends every open watch stream (clean end of stream).
    pub fn close_watches(&self) {
        self.state.lock().watchers.clear();
    }

    /// Every watch from an older resourceVersion than the current one is
    /// answered 410 Gone from now on, and open watches end.
    pub fn expire_old_resource_versions(&self) {
        let mut s = self.state.lock();
        s.oldest_rv = s.rv;
        s.log.clear();
        s.watchers.clear();
    }

    /// The next `n` lists fail with 500.
    pub fn fail_lists(&self, n: usize) {
        self.state.lock().fail_lists = n;
    }

    /// The `Accept` header of every request so far, in order.
    pub fn accept_headers(&self) -> Vec<Option<String>> {
        self.fake
            .requests()
            .iter()
            .map(|r| r.header("accept").map(str::to_owned))
            .collect()
    }

    /// How many lists were received.
    pub fn lists(&self) -> usize {
        self.fake.lists().len()
    }

    /// How many watches were received.
    pub fn watches(&self) -> usize {
        self.fake.watches().len()
    }

    /// Keys and resourceVersions of what the fake holds now.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        self.state
            .lock()
            .objects
            .iter()
            .map(|(k, v)| {
                let rv = v["metadata"]["resourceVersion"].as_str().unwrap_or("");
                (k.clone(), rv.to_string())
            })
            .collect()
    }
}
