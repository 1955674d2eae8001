//! Protobuf end to end against a real kube-apiserver + etcd
//! (kcache-envtest): informers with the default wire format (protobuf for
//! built-in types) next to informers with JSON forced, over the same
//! objects, through a paged list, a list at resourceVersion "0" (served
//! whole from the watch cache), a streaming list, and live watch events.

mod support;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kcache_core::{CachedObject, Format};
use kcache_envtest::ControlPlane;
use kcache_informer::SharedIndexInformer;
use kcache_reflector::WireFormat;
use kcache_testing::envtest::{TestNamespace, client_with_request_hook, create, namespace};
use kcache_testing::eventually_async;
use kcache_testing::state::server_state;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::{record_watch_errors, spawn_run};
use tokio_util::sync::CancellationToken;

/// How the informers get their initial state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A list without resourceVersion (a consistent read from etcd),
    /// 2 items a page: `continue` tokens.
    Paged,
    /// client-go's first list: resourceVersion "0", served whole by the
    /// watch cache.
    Rv0,
    /// A streaming list (`sendInitialEvents=true`).
    Streaming,
}

/// A client that records every request URI; in `Paged` mode it drops
/// `resourceVersion=0` from lists, so that they are consistent reads from
/// etcd, which the apiserver pages.
fn client(cp: &ControlPlane, mode: Mode) -> (Client, Arc<Mutex<Vec<String>>>) {
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let l2 = log.clone();
    let client = client_with_request_hook(cp.config(), move |req| {
        let uri = req.uri().to_string();
        if mode == Mode::Paged && !uri.contains("watch=true") {
            let fixed = uri
                .replace("resourceVersion=0&", "")
                .replace("&resourceVersion=0", "");
            *req.uri_mut() = fixed.parse().unwrap();
        }
        l2.lock().unwrap().push(req.uri().to_string());
    });
    (client, log)
}

/// An informer of one wire format, running.
struct Running<K: Resource + 'static> {
    informer: SharedIndexInformer<K>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), kcache_informer::InformerError>>,
    errors: Arc<Mutex<Vec<String>>>,
    uris: Arc<Mutex<Vec<String>>>,
}

fn start<K>(
    cp: &ControlPlane,
    ns: &str,
    mode: Mode,
    format: WireFormat,
    dyntype: K::DynamicType,
) -> Running<K>
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let (client, uris) = client(cp, mode);
    let (handler, errors) = record_watch_errors(|e| e.to_string());
    let informer = SharedIndexInformer::<K>::builder_with(client, dyntype)
        .config(support::format_test_config(
            ns,
            mode == Mode::Streaming,
            mode == Mode::Paged,
            format,
        ))
        .watch_error_handler(handler)
        .build();
    let (cancel, task) = spawn_run(&informer);
    Running {
        informer,
        cancel,
        task,
        errors,
        uris,
    }
}

impl<K: Resource + 'static> Running<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    fn state(&self) -> BTreeMap<String, String> {
        self.informer
            .indexer()
            .list()
            .iter()
            .map(|o| (o.key().to_owned(), o.resource_version().unwrap().to_owned()))
            .collect()
    }
    async fn stop(self) {
        self.cancel.cancel();
        self.task.await.unwrap().unwrap();
        let errors = self.errors.lock().unwrap().clone();
        assert!(errors.is_empty(), "{errors:#?}");
    }
}

/// The top-level value without `apiVersion` and `kind`: the apiserver's
/// JSON list items lack them, protobuf objects (like watch events in
/// both formats) carry them.
fn without_type(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

/// The same object cached from protobuf and from JSON: the same key,
/// metadata and value.
fn same_object<K>(pb: &CachedObject<K>, js: &CachedObject<K>, typed: bool)
where
    K: DeserializeOwned + PartialEq + Debug,
{
    let key = pb.key();
    assert_eq!(
        pb.format(),
        Format::Protobuf,
        "{key}: the apiserver answered protobuf"
    );
    assert_eq!(js.format(), Format::Json, "{key}");
    assert_eq!(pb.key(), js.key());
    let (a, b) = (pb.meta(), js.meta());
    assert_eq!(a.name(), b.name(), "{key}");
    assert_eq!(a.namespace(), b.namespace(), "{key}");
    assert_eq!(a.uid(), b.uid(), "{key}");
    assert_eq!(a.resource_version(), b.resource_version(), "{key}");
    assert_eq!(a.generation(), b.generation(), "{key}");
    assert_eq!(a.labels(), b.labels(), "{key}");
    assert_eq!(a.annotations(), b.annotations(), "{key}");
    assert_eq!(a.owner_references(), b.owner_references(), "{key}");
    assert_eq!(a.finalizers(), b.finalizers(), "{key}");
    assert_eq!(a.deletion_timestamp(), b.deletion_timestamp(), "{key}");
    assert!(a.kind().is_some() && a.api_version().is_some(), "{key}");
    if b.kind().is_some() {
        assert_eq!(
            (a.kind(), a.api_version()),
            (b.kind(), b.api_version()),
            "{key}"
        );
    }
    if typed {
        assert_eq!(
            pb.decode().unwrap(),
            js.decode().unwrap(),
            "{key}: typed value"
        );
    }
    let pv: Value = pb.cast::<Value>().decode().unwrap();
    let jv: Value = js.cast::<Value>().decode().unwrap();
    assert!(
        pv.get("metadata")
            .and_then(|m| m.get("managedFields"))
            .is_some(),
        "{key}: managedFields are kept"
    );
    assert_eq!(
        without_type(pv.clone()),
        without_type(jv.clone()),
        "{key}: value"
    );
    if jv.get("kind").is_some() {
        assert_eq!(pv["kind"], jv["kind"]);
        assert_eq!(pv["apiVersion"], jv["apiVersion"]);
    }
    // the JSON transcoded from protobuf is the same value too
    let transcoded: Value = serde_json::from_slice(&pb.json().unwrap()).unwrap();
    assert_eq!(transcoded, pv, "{key}: transcoded");
}

/// A protobuf informer and a JSON informer of one type.
struct Pair<K: Resource + 'static> {
    pb: Running<K>,
    js: Running<K>,
    typed: bool,
}

impl<K> Pair<K>
where
    K: Resource + DeserializeOwned + PartialEq + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    fn start(
        cp: &ControlPlane,
        ns: &str,
        mode: Mode,
        dyntype: K::DynamicType,
        typed: bool,
    ) -> Self {
        Pair {
            pb: start(cp, ns, mode, WireFormat::Auto, dyntype.clone()),
            js: start(cp, ns, mode, WireFormat::Json, dyntype),
            typed,
        }
    }

    /// Waits until both caches hold `want` (key -> resourceVersion), then
    /// compares them object by object.
    async fn check(&self, what: &str, want: &BTreeMap<String, String>) {
        eventually_async(what, Duration::from_secs(60), async || {
            self.pb.state() == *want && self.js.state() == *want
        })
        .await;
        for o in self.pb.informer.indexer().list() {
            let j = self.js.informer.indexer().get_by_key(o.key()).unwrap();
            same_object(&o, &j, self.typed);
        }
    }

    async fn stop(self) -> (Vec<String>, Vec<String>) {
        let uris = (
            self.pb.uris.lock().unwrap().clone(),
            self.js.uris.lock().unwrap().clone(),
        );
        self.pb.stop().await;
        self.js.stop().await;
        uris
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web", "tier": "fe"},
                     "annotations": {"kcache.io/note": "protobuf"}},
        "spec": {"containers": [{
            "name": "web", "image": "nginx:1.27",
            "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"memory": "128Mi"}},
            "env": [{"name": "A", "value": "1"}],
            "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
            "livenessProbe": {"tcpSocket": {"port": 80}}
        }],
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 30}],
        "terminationGracePeriodSeconds": 10}
    }))
    .unwrap()
}

/// What a kubelet writes: a second field manager, times, an IP.
fn pod_status() -> Value {
    json!({"status": {
        "phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
        "hostIP": "192.168.0.7", "qosClass": "Burstable",
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "Ready", "status": "True",
                        "lastTransitionTime": "2026-01-01T00:00:01Z"}],
        "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
            "image": "nginx:1.27", "imageID": "docker-pullable://nginx@sha256:abc",
            "containerID": "containerd://0123", "started": true,
            "state": {"running": {"startedAt": "2026-01-01T00:00:02Z"}}}]
    }})
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "data": {"a": "b", "json": "{\"x\": [1, 2]}", "empty": ""},
        "binaryData": {"bin": "AAH/"}
    }))
    .unwrap()
}

fn secret(name: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": name, "finalizers": ["kcache.io/keep"]},
        "type": "Opaque",
        "data": {"password": "c2VjcmV0AP8="},
        "stringData": {"user": "admin"}
    }))
    .unwrap()
}

fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {"cpu": "1.5", "memory": "1Gi"}}}]}
            }
        }
    }))
    .unwrap()
}

/// Pods, ConfigMaps, Secrets and Deployments (and Deployments through
/// `DynamicObject`) through a paged list, a list at resourceVersion "0", a
/// streaming list, and live watch events (create, update, status written by
/// a second field manager, delete): the cache of an informer on protobuf
/// (the default for built-in types) holds protobuf objects, and each one
/// has the key, metadata, typed value and JSON value of the same object in
/// the cache of an informer with JSON forced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_list_watch_and_streaming_list_on_the_local_apiserver() {
    let TestNamespace { cp, ns, .. } = namespace("protobuf").await;
    let admin = cp.client().unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let deploys: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let kubelet = PatchParams {
        field_manager: Some("kubelet".into()),
        ..Default::default()
    };
    // `name` as a Pod (with a status written by a second field manager),
    // a ConfigMap, a Secret and a Deployment
    let create_each = async |name: &str| {
        create(&pods, &pod(name)).await;
        pods.patch_status(name, &kubelet, &Patch::Merge(pod_status()))
            .await
            .unwrap();
        create(&cms, &config_map(name)).await;
        create(&secrets, &secret(name)).await;
        create(&deploys, &deployment(name)).await;
    };
    for i in 0..5 {
        create_each(&format!("seed-{i}")).await;
    }
    let deploy_ar = ApiResource::erase::<Deployment>(&());
    for mode in [Mode::Paged, Mode::Rv0, Mode::Streaming] {
        let p = Pair::<Pod>::start(cp, &ns, mode, (), true);
        let c = Pair::<ConfigMap>::start(cp, &ns, mode, (), true);
        let s = Pair::<Secret>::start(cp, &ns, mode, (), true);
        let d = Pair::<Deployment>::start(cp, &ns, mode, (), true);
        let dynamic = Pair::<DynamicObject>::start(cp, &ns, mode, deploy_ar.clone(), false);
        // every informer's cache against a fresh list
        let check = async |when: &str| {
            let what = format!("{mode:?}: {when}");
            p.check(&what, &server_state(&pods).await).await;
            c.check(&what, &server_state(&cms).await).await;
            s.check(&what, &server_state(&secrets).await).await;
            d.check(&what, &server_state(&deploys).await).await;
            dynamic.check(&what, &server_state(&deploys).await).await;
        };
        check("initial state").await;

        // live events: create, update, status by a second manager, delete
        let live = format!("live-{mode:?}").to_lowercase();
        let gone = format!("gone-{mode:?}").to_lowercase();
        create_each(&live).await;
        create(&pods, &pod(&gone)).await;
        create(&cms, &config_map(&gone)).await;
        create(&deploys, &deployment(&gone)).await;
        let label = Patch::Merge(json!({"metadata": {"labels": {"changed": "yes"}}}));
        cms.patch(&live, &PatchParams::default(), &label)
            .await
            .unwrap();
        secrets
            .patch(&live, &PatchParams::default(), &label)
            .await
            .unwrap();
        deploys
            .patch(&live, &PatchParams::default(), &label)
            .await
            .unwrap();
        pods.delete(&gone, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
        cms.delete(&gone, &DeleteParams::default()).await.unwrap();
        deploys
            .delete(&gone, &DeleteParams::default())
            .await
            .unwrap();
        check("after live events").await;

        // the initial state came the intended way
        let (pb_uris, js_uris) = p.stop().await;
        for uris in [&pb_uris, &js_uris] {
            let first = &uris[0];
            match mode {
                Mode::Paged => {
                    assert!(!first.contains("resourceVersion=0"), "{uris:#?}");
                    assert!(uris[1].contains("continue="), "paged: {uris:#?}");
                }
                Mode::Rv0 => {
                    assert!(first.contains("resourceVersion=0"), "{uris:#?}");
                    assert!(uris[1].contains("watch=true"), "one page: {uris:#?}");
                }
                Mode::Streaming => {
                    assert!(first.contains("sendInitialEvents=true"), "{uris:#?}");
                }
            }
        }
        c.stop().await;
        s.stop().await;
        d.stop().await;
        dynamic.stop().await;
    }
}
