//! The local control plane of kcache-envtest, set up for one test.
//!
//! [`namespace`] shares one kube-apiserver + etcd per test binary
//! ([`ControlPlane::shared`], started from the binaries named by
//! `KCACHE_KUBE_APISERVER` and `KCACHE_ETCD`), creates a fresh namespace
//! and returns an admin client: the set-up every envtest test starts with.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::BodyExt as _;

use kcache_envtest::ControlPlane;
use kube::Client;
use kube::client::{ClientBuilder, DynBody};
use parking_lot::Mutex;

/// A fresh namespace on the shared control plane.
pub struct TestNamespace {
    /// The control plane (shared by the tests of this binary).
    pub cp: &'static ControlPlane,
    /// The namespace's name (`<prefix>-<random>`).
    pub ns: String,
    /// An admin client.
    pub client: Client,
}

/// Starts (or shares) the control plane of this test binary and creates a
/// namespace named from `prefix`. Panics with the reason if it cannot.
pub async fn namespace(prefix: &str) -> TestNamespace {
    let cp = ControlPlane::shared()
        .await
        .unwrap_or_else(|e| panic!("the shared control plane did not start: {e}"));
    let ns = cp
        .create_namespace(prefix)
        .await
        .unwrap_or_else(|e| panic!("namespace {prefix}-*: {e}"));
    let client = cp
        .client()
        .unwrap_or_else(|e| panic!("an admin client: {e}"));
    TestNamespace { cp, ns, client }
}

/// Creates `obj` through `api`; returns what the server stored. Panics
/// naming the object if the server refuses.
pub async fn create<K>(api: &kube::Api<K>, obj: &K) -> K
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.create(&kube::api::PostParams::default(), obj)
        .await
        .unwrap_or_else(|e| panic!("create of {:?}: {e}", obj.meta().name))
}

/// Applies a JSON merge patch to the object `name`; returns the patched
/// object. Panics naming the object if the server refuses.
pub async fn merge_patch<K>(api: &kube::Api<K>, name: &str, patch: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::PatchParams::default();
    api.patch(name, &params, &kube::api::Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("merge patch of {name}: {e}"))
}

/// The requests a [`recording_client`] sent, as `METHOD URI`, in order.
pub type RequestLog = Arc<Mutex<Vec<String>>>;

/// A client for `config` that passes every request through `f` before
/// sending it (to record or rewrite it).
pub fn client_with_request_hook(
    config: kube::Config,
    f: impl Fn(&mut http::Request<kube::client::Body>) + Clone + Send + Sync + 'static,
) -> Client {
    ClientBuilder::try_from(config)
        .expect("a client from the control plane's config")
        .with_layer(&tower::util::MapRequestLayer::new(
            move |mut req: http::Request<kube::client::Body>| {
                f(&mut req);
                req
            },
        ))
        .build()
}

/// A client for `config` that counts the response body bytes it receives
/// (what a sharded replica's share of the traffic is measured in).
pub fn counting_client(config: kube::Config) -> Result<(Client, Arc<AtomicU64>), kube::Error> {
    let bytes = Arc::new(AtomicU64::new(0));
    let counter = bytes.clone();
    let client = ClientBuilder::try_from(config)?
        .with_layer(&tower::util::MapResponseLayer::new(
            move |resp: http::Response<Box<DynBody>>| {
                let counter = counter.clone();
                resp.map(move |body| {
                    Box::new(body.map_frame(move |f| {
                        if let Some(d) = f.data_ref() {
                            counter.fetch_add(d.len() as u64, Ordering::Relaxed);
                        }
                        f
                    })) as Box<DynBody>
                })
            },
        ))
        .build();
    Ok((client, bytes))
}

/// A client for `config` that records every request it sends (`METHOD URI`).
pub fn recording_client(config: kube::Config) -> (Client, RequestLog) {
    let log: RequestLog = Arc::default();
    let l2 = log.clone();
    let client = client_with_request_hook(config, move |req| {
        l2.lock().push(format!("{} {}", req.method(), req.uri()))
    });
    (client, log)
}
