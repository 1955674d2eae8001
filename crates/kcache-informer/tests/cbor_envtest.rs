//! CBOR (KEP-4222) end to end against a real kube-apiserver + etcd with
//! the feature gate `CBORServingAndStorage` on: informers of a custom
//! resource with the default wire format (CBOR for custom resources) next
//! to informers with JSON forced, through a paged list, a list at
//! resourceVersion "0", a streaming list (its initial-events-end bookmark
//! in CBOR), live watch events and a 410 (an `ERROR` event whose Status is
//! CBOR); and, on an apiserver without the gate, the fallback to JSON.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kcache_core::{CachedObject, Format};
use kcache_envtest::ControlPlane;
use kcache_informer::SharedIndexInformer;
use kcache_reflector::WatchConfig;
use kcache_reflector::{ErrorReason, WireFormat};
use kcache_testing::builders::crd;
use kcache_testing::envtest::{client_with_request_hook, namespace};
use kcache_testing::eventually_async;
use kcache_testing::logs::LogBuffer;
use kcache_testing::state::server_state;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};
use support::{record_watch_errors, spawn_run};
use tokio_util::sync::CancellationToken;

/// The namespace prefix of cbor_informer_equals_json_informer, whose log
/// lines cbor_gate_off_falls_back_to_json leaves out.
const OTHER_TEST_NAMESPACE: &str = "cbor-informer";

fn widget_resource() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

async fn install_widgets(cp: &ControlPlane) {
    let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    cp.install_crds(&[crd("example.com", "Widget", "widgets", schema)])
        .await
        .unwrap();
}

/// A GitOps-style record: a spec with parameters written by one field
/// manager, a status with resources and history written by another.
fn widget(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "labels": {"app": "web", "team": "platform"},
                     "annotations": {"note": "\"quoted\" ünïcode ✓"},
                     "finalizers": ["example.com/keep"]},
        "spec": {
            "source": {"repoURL": "https://git.example.com/apps.git", "revision": "main",
                       "path": format!("apps/{name}")},
            "replicas": 3, "weight": 0.25, "ratio": 1.5, "big": 9_007_199_254_740_993_i64,
            "negative": -42, "enabled": true, "nothing": null,
            "parameters": [{"name": "image.tag", "value": "v1.2.3"},
                           {"name": "empty", "value": ""}],
        }
    }))
    .unwrap()
}

fn widget_status(round: u32) -> Value {
    json!({"status": {
        "sync": {"status": "Synced", "revision": format!("abc{round}")},
        "health": {"status": "Healthy"},
        "resources": (0..6).map(|i| json!({"kind": "Deployment", "name": format!("r{i}"),
                                          "status": "Synced", "health": {"status": "Healthy"}}))
                           .collect::<Vec<_>>(),
        "history": (0..round).map(|i| json!({"id": i, "revision": format!("abc{i}"),
                                             "deployedAt": "2026-12-06T12:00:00Z"}))
                             .collect::<Vec<_>>(),
    }})
}

/// The typed view an operator would decode a Widget into.
#[derive(Debug, PartialEq, Deserialize)]
struct Widget {
    spec: WidgetSpec,
    #[serde(default)]
    status: Option<Value>,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WidgetSpec {
    source: BTreeMap<String, String>,
    replicas: i32,
    weight: f64,
    ratio: f32,
    big: i64,
    negative: i64,
    enabled: bool,
    parameters: Vec<BTreeMap<String, String>>,
}

/// How the informers get their initial state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A consistent list from etcd, 2 items a page.
    Paged,
    /// resourceVersion "0", served whole by the watch cache.
    Rv0,
    /// A streaming list.
    Streaming,
}

/// A client recording every request URI (and, in `Paged` mode, dropping
/// `resourceVersion=0` from lists so that the apiserver pages them); while
/// `old_rv` is set, plain watches ask for resourceVersion "1" (compacted:
/// the apiserver ends them with a 410 `ERROR` event).
fn client(cp: &ControlPlane, mode: Mode, old_rv: Arc<AtomicBool>) -> Client {
    client_with_request_hook(cp.config(), move |req| {
        let uri = req.uri().to_string();
        let watch = uri.contains("watch=true");
        let mut fixed = uri.clone();
        if mode == Mode::Paged && !watch {
            fixed = fixed
                .replace("resourceVersion=0&", "")
                .replace("&resourceVersion=0", "");
        }
        if watch && !uri.contains("sendInitialEvents") && old_rv.load(Ordering::SeqCst) {
            let (path, query) = fixed.split_once('?').unwrap();
            let query: Vec<String> = query
                .split('&')
                .map(|p| {
                    if p.starts_with("resourceVersion=") {
                        "resourceVersion=1".to_owned()
                    } else {
                        p.to_owned()
                    }
                })
                .collect();
            fixed = format!("{path}?{}", query.join("&"));
        }
        *req.uri_mut() = fixed.parse().unwrap();
    })
}

struct Running {
    informer: SharedIndexInformer<DynamicObject>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), kcache_informer::InformerError>>,
    errors: Arc<Mutex<Vec<(ErrorReason, String)>>>,
}

fn start(
    cp: &ControlPlane,
    ns: &str,
    mode: Mode,
    format: WireFormat,
) -> (Running, Arc<AtomicBool>) {
    let old_rv = Arc::new(AtomicBool::new(false));
    let (handler, errors) = record_watch_errors(|e| (e.reason(), e.to_string()));
    let informer = SharedIndexInformer::<DynamicObject>::builder_with(
        client(cp, mode, old_rv.clone()),
        widget_resource(),
    )
    .config(support::format_test_config(
        ns,
        mode == Mode::Streaming,
        mode == Mode::Paged,
        format,
    ))
    .watch_error_handler(handler)
    .build();
    let (cancel, task) = spawn_run(&informer);
    (
        Running {
            informer,
            cancel,
            task,
            errors,
        },
        old_rv,
    )
}

impl Running {
    fn state(&self) -> BTreeMap<String, String> {
        self.informer
            .indexer()
            .list()
            .iter()
            .map(|o| (o.key().to_owned(), o.resource_version().unwrap().to_owned()))
            .collect()
    }

    fn reasons(&self) -> Vec<ErrorReason> {
        self.errors.lock().unwrap().iter().map(|e| e.0).collect()
    }

    async fn stop(self, allowed: &[ErrorReason]) {
        self.cancel.cancel();
        self.task.await.unwrap().unwrap();
        let errors = self.errors.lock().unwrap().clone();
        let unexpected: Vec<_> = errors
            .iter()
            .filter(|(r, _)| !allowed.contains(r))
            .collect();
        assert!(unexpected.is_empty(), "{unexpected:#?}");
    }
}

/// The same object cached from CBOR and from JSON: the same key, metadata,
/// dynamic value, typed value and JSON.
fn same_object(cbor: &CachedObject<DynamicObject>, js: &CachedObject<DynamicObject>) {
    let key = cbor.key();
    assert_eq!(
        cbor.format(),
        Format::Cbor,
        "{key}: the apiserver answered CBOR"
    );
    assert_eq!(js.format(), Format::Json, "{key}");
    assert_eq!(cbor.meta(), js.meta(), "{key}: metadata");
    assert_eq!(
        serde_json::to_value(cbor.decode().unwrap()).unwrap(),
        serde_json::to_value(js.decode().unwrap()).unwrap(),
        "{key}: DynamicObject"
    );
    let (cv, jv): (Value, Value) = (
        cbor.cast::<Value>().decode().unwrap(),
        js.cast::<Value>().decode().unwrap(),
    );
    assert_eq!(cv, jv, "{key}: value");
    assert!(
        cv["metadata"].get("managedFields").is_some(),
        "{key}: managedFields are kept"
    );
    let (ct, jt): (Widget, Widget) = (
        cbor.cast::<Widget>().decode().unwrap(),
        js.cast::<Widget>().decode().unwrap(),
    );
    assert_eq!(ct, jt, "{key}: typed");
    assert_eq!(
        ct.spec.big, 9_007_199_254_740_993,
        "{key}: a 64-bit integer"
    );
    let transcoded: Value = serde_json::from_slice(&cbor.json().unwrap()).unwrap();
    assert_eq!(transcoded, jv, "{key}: transcoded JSON");
}

async fn check(cbor: &Running, js: &Running, what: &str, want: &BTreeMap<String, String>) {
    eventually_async(what, Duration::from_secs(60), async || {
        cbor.state() == *want && js.state() == *want
    })
    .await;
    for o in cbor.informer.indexer().list() {
        let j = js.informer.indexer().get_by_key(o.key()).unwrap();
        same_object(&o, &j);
    }
}

/// Widgets through a paged list, a list at resourceVersion "0", a
/// streaming list (ended by a CBOR bookmark), live events (create, update
/// by a second field manager, delete) and a 410 from a compacted
/// resourceVersion (a CBOR `ERROR` event, then a relist): the cache of an
/// informer on CBOR holds CBOR objects, each equal (key, metadata, dynamic,
/// typed and JSON values) to the same object in the cache of an informer
/// with JSON forced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cbor_informer_equals_json_informer() {
    let cp = ControlPlane::builder()
        .cbor_serving_and_storage(true)
        .start()
        .await
        .unwrap();
    install_widgets(&cp).await;
    let ns = cp.create_namespace(OTHER_TEST_NAMESPACE).await.unwrap();
    let api: Api<DynamicObject> =
        Api::namespaced_with(cp.client().unwrap(), &ns, &widget_resource());
    let controller = PatchParams {
        field_manager: Some("gitops-controller".into()),
        ..Default::default()
    };
    let create = async |name: &str, round: u32| {
        api.create(&PostParams::default(), &widget(name))
            .await
            .unwrap();
        api.patch(name, &controller, &Patch::Merge(widget_status(round)))
            .await
            .unwrap();
    };
    for i in 0..5 {
        create(&format!("seed-{i}"), i).await;
    }
    for mode in [Mode::Paged, Mode::Rv0, Mode::Streaming] {
        let (cbor, cbor_old_rv) = start(&cp, &ns, mode, WireFormat::Auto);
        let (js, _) = start(&cp, &ns, mode, WireFormat::Json);
        check(
            &cbor,
            &js,
            &format!("{mode:?}: initial"),
            &server_state(&api).await,
        )
        .await;

        let live = format!("live-{mode:?}").to_lowercase();
        create(&live, 3).await;
        api.patch(&live, &controller, &Patch::Merge(widget_status(4)))
            .await
            .unwrap();
        api.delete("seed-0", &DeleteParams::default())
            .await
            .unwrap();
        // finalizers keep it: remove them to let it go
        api.patch(
            "seed-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
        check(
            &cbor,
            &js,
            &format!("{mode:?}: live"),
            &server_state(&api).await,
        )
        .await;
        create("seed-0", 0).await;

        if mode == Mode::Rv0 {
            // 410: compact etcd, then make the CBOR informer's next watch
            // ask for a compacted resourceVersion
            cp.compact_etcd().await.unwrap();
            cbor_old_rv.store(true, Ordering::SeqCst);
            cp.restart_apiserver().await.unwrap();
            let api: Api<DynamicObject> =
                Api::namespaced_with(cp.client().unwrap(), &ns, &widget_resource());
            eventually_async("a 410 in CBOR", Duration::from_secs(90), async || {
                cbor.reasons().contains(&ErrorReason::Expired)
            })
            .await;
            cbor_old_rv.store(false, Ordering::SeqCst);
            api.create(&PostParams::default(), &widget("after-410"))
                .await
                .unwrap();
            check(&cbor, &js, "after 410", &server_state(&api).await).await;
            api.delete("after-410", &DeleteParams::default())
                .await
                .unwrap();
            api.patch(
                "after-410",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        }
        // a restart and a 410 are errors the reflector recovers from
        let allowed = [
            ErrorReason::Expired,
            ErrorReason::Transport,
            ErrorReason::Body,
            ErrorReason::VeryShortWatch,
            ErrorReason::Api,
            ErrorReason::Timeout,
            ErrorReason::WatchStalled,
        ];
        let allowed: &[ErrorReason] = if mode == Mode::Rv0 { &allowed } else { &[] };
        cbor.stop(allowed).await;
        js.stop(allowed).await;
    }
}

/// An apiserver without `CBORServingAndStorage`: the default informer of a
/// custom resource asks for CBOR, is answered JSON, says so once (one INFO
/// line for the process, however many reflectors see it) and asks for JSON
/// from then on; its cache equals a JSON informer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cbor_gate_off_falls_back_to_json() {
    let logs = LogBuffer::set_global(tracing::Level::INFO);
    let t = namespace("cbor-off").await;
    install_widgets(t.cp).await;
    let api: Api<DynamicObject> =
        Api::namespaced_with(t.cp.client().unwrap(), &t.ns, &widget_resource());
    for i in 0..3 {
        api.create(&PostParams::default(), &widget(&format!("w-{i}")))
            .await
            .unwrap();
    }
    let accepts: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let a2 = accepts.clone();
    let recording = client_with_request_hook(t.cp.config(), move |req| {
        if req.uri().path().contains("widgets") {
            let accept = req
                .headers()
                .get(http::header::ACCEPT)
                .map(|v| v.to_str().unwrap().to_owned());
            a2.lock().unwrap().push(accept);
        }
    });
    let informer = |client: Client, format| {
        SharedIndexInformer::<DynamicObject>::builder_with(client, widget_resource())
            .config(kcache_informer::InformerConfig {
                watch: WatchConfig {
                    namespace: Some(t.ns.clone()),
                    use_watch_list: false,
                    wire_format: format,
                    ..WatchConfig::default()
                },
                ..kcache_informer::InformerConfig::default()
            })
            .build()
    };
    let auto = informer(recording, WireFormat::Auto);
    let second = informer(t.cp.client().unwrap(), WireFormat::Auto);
    let js = informer(t.cp.client().unwrap(), WireFormat::Json);
    let runs = [&auto, &second, &js].map(spawn_run);
    let want = server_state(&api).await;
    let state = |i: &SharedIndexInformer<DynamicObject>| -> BTreeMap<String, String> {
        i.indexer()
            .list()
            .iter()
            .map(|o| (o.key().to_owned(), o.resource_version().unwrap().to_owned()))
            .collect()
    };
    eventually_async("synced", Duration::from_secs(60), async || {
        state(&auto) == want && state(&second) == want && state(&js) == want
    })
    .await;
    // a live event through the watch, which asks for JSON
    api.create(&PostParams::default(), &widget("live"))
        .await
        .unwrap();
    let want = server_state(&api).await;
    eventually_async("live event", Duration::from_secs(60), async || {
        state(&auto) == want && state(&js) == want
    })
    .await;
    for o in auto.indexer().list() {
        assert_eq!(o.format(), Format::Json, "{}", o.key());
        let j = js.indexer().get_by_key(o.key()).unwrap();
        assert_eq!(o.bytes(), j.bytes(), "{}: the same JSON", o.key());
    }
    let accepts = accepts.lock().unwrap().clone();
    assert_eq!(
        accepts[0].as_deref(),
        Some("application/cbor, application/json"),
        "{accepts:?}"
    );
    assert!(
        accepts[1..]
            .iter()
            .all(|a| a.as_deref() != Some("application/cbor, application/json")),
        "no CBOR after the JSON answer: {accepts:?}"
    );
    let lines = logs.lines_with(&["answered JSON to a request preferring Cbor"]);
    assert_eq!(
        lines.len(),
        1,
        "one INFO line for two reflectors: {lines:#?}"
    );
    assert!(lines[0].contains("INFO"), "{lines:?}");
    assert!(
        lines[0].contains("CBORServingAndStorage"),
        "says what to turn on: {lines:?}"
    );
    // kcache's own lines (the control plane's start polls through
    // kube_client, which logs its connection errors). The subscriber is
    // global, so it also hears cbor_informer_equals_json_informer running
    // beside this test, whose apiserver restart is meant to make its
    // reflectors WARN: leave out the lines about its namespace.
    let ours = |level: &str| -> Vec<String> {
        logs.lines_with(&[level, "kcache"])
            .into_iter()
            .filter(|l| !l.contains(OTHER_TEST_NAMESPACE))
            .collect()
    };
    assert!(
        ours("ERROR").is_empty() && ours("WARN").is_empty(),
        "{}",
        logs.text()
    );
    for (cancel, task) in runs {
        cancel.cancel();
        task.await.unwrap().unwrap();
    }
}
