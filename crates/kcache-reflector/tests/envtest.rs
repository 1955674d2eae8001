//! The reflector against a real kube-apiserver + etcd (kcache-envtest).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Call, RecordingStore, start};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kcache_envtest::ControlPlane;
use kcache_reflector::{ErrorReason, Reflector, WatchConfig};
use kcache_testing::builders::{config_map, crd};
use kcache_testing::envtest::{
    TestNamespace, client_with_request_hook, create, namespace, recording_client,
};
use kcache_testing::eventually_async;
use kcache_testing::state::server_state;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::core::PartialObjectMeta;
use serde_json::json;

/// Only namespace `ns`, the rest default.
fn in_ns(ns: &str) -> WatchConfig {
    WatchConfig {
        namespace: Some(ns.to_owned()),
        ..WatchConfig::default()
    }
}

/// ConfigMaps through a streaming list: the reflector sent
/// `sendInitialEvents=true&resourceVersionMatch=NotOlderThan`, got the
/// initial events and the end bookmark (one `replace`, no list request),
/// then saw create/update/delete in order on the same stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_maps_streaming_list_then_events_in_order() {
    let TestNamespace { cp, ns, .. } = namespace("refl-cm").await;
    let admin = cp.client().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(admin, &ns);
    for n in ["pre-1", "pre-2"] {
        create(&api, &config_map(n).data("k", "0").build()).await;
    }
    let (client, log) = recording_client(cp.config());
    let store = Arc::new(RecordingStore::<ConfigMap>::default());
    let run = start(Reflector::<ConfigMap>::builder(client, store.clone()).config(in_ns(&ns)));
    let calls = store.wait_calls(1).await;
    match &calls[0] {
        Call::Replace(keys, rv) => {
            assert_eq!(keys, &[format!("{ns}/pre-1"), format!("{ns}/pre-2")]);
            assert!(!rv.is_empty());
        }
        c => panic!("{c:?}"),
    }
    eventually_async("has_synced", Duration::from_secs(5), async || {
        run.reflector.has_synced()
    })
    .await;

    let created = create(&api, &config_map("a").data("k", "1").build()).await;
    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "2".to_string())].into());
    let updated = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let key = format!("{ns}/a");
    let calls = store
        .wait_until(Duration::from_secs(30), |c| {
            c.iter()
                .any(|c| matches!(c, Call::Delete(k, _) if *k == key))
        })
        .await;
    let after: Vec<_> = calls[1..]
        .iter()
        .filter(|c| !matches!(c, Call::Bookmark(_)))
        .cloned()
        .collect();
    assert_eq!(
        after[0],
        Call::Add(
            key.clone(),
            created.metadata.resource_version.clone().unwrap()
        )
    );
    assert_eq!(
        after[1],
        Call::Update(
            key.clone(),
            updated.metadata.resource_version.clone().unwrap()
        )
    );
    assert!(matches!(&after[2], Call::Delete(k, _) if *k == key));
    let typed = store
        .object(&format!("{ns}/pre-1"))
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(typed.data.unwrap()["k"], "0");

    let uris = log.lock().clone();
    assert_eq!(uris.len(), 1, "one streaming watch, no list: {uris:#?}");
    assert!(uris[0].contains("watch=true"), "{}", uris[0]);
    assert!(uris[0].contains("sendInitialEvents=true"), "{}", uris[0]);
    assert!(
        uris[0].contains("resourceVersionMatch=NotOlderThan"),
        "{}",
        uris[0]
    );
    assert!(uris[0].contains("allowWatchBookmarks=true"), "{}", uris[0]);
    assert!(run.reasons().is_empty(), "{:?}", run.seen());
    run.stop().await;
}

/// The same with classic list + watch (streaming off): a paged list at "0",
/// then a watch from the list's RV.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_maps_list_then_watch() {
    let TestNamespace { cp, ns, .. } = namespace("refl-lw").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    for i in 0..7 {
        create(&api, &config_map(&format!("c{i}")).data("k", "0").build()).await;
    }
    let (client, log) = recording_client(cp.config());
    let store = Arc::new(RecordingStore::<ConfigMap>::default());
    let run = start(
        Reflector::<ConfigMap>::builder(client, store.clone()).config(WatchConfig {
            use_watch_list: false,
            page_size: 3,
            ..in_ns(&ns)
        }),
    );
    let calls = store.wait_calls(1).await;
    assert!(matches!(&calls[0], Call::Replace(k, _) if k.len() == 7));
    create(&api, &config_map("late").data("k", "1").build()).await;
    let key = format!("{ns}/late");
    store
        .wait_until(Duration::from_secs(30), |c| {
            c.iter().any(|c| matches!(c, Call::Add(k, _) if *k == key))
        })
        .await;
    let uris = log.lock().clone();
    // the list at "0" is served by the watch cache, which ignores the limit
    assert!(
        uris[0].contains("limit=3") && uris[0].contains("resourceVersion=0"),
        "{uris:#?}"
    );
    assert!(!uris[0].contains("watch=true"), "{uris:#?}");
    assert!(uris[1].contains("watch=true"), "{uris:#?}");
    assert!(!uris[1].contains("sendInitialEvents"), "{uris:#?}");
    assert_eq!(store.state(), server_state(&api).await);
    run.stop().await;
}

/// Metadata-only (`PartialObjectMeta<ConfigMap>`), streaming list and
/// classic list + watch: the server's PartialObjectMetadata objects and
/// bookmarks are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_config_maps() {
    let TestNamespace { cp, ns, .. } = namespace("refl-meta").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    create(&api, &config_map("m1").data("k", "0").build()).await;
    type Meta = PartialObjectMeta<ConfigMap>;
    for streaming in [true, false] {
        let store = Arc::new(RecordingStore::<Meta>::default());
        let run = start(
            Reflector::<Meta>::builder(cp.client().unwrap(), store.clone()).config(WatchConfig {
                use_watch_list: streaming,
                ..in_ns(&ns)
            }),
        );
        let calls = store.wait_calls(1).await;
        assert!(
            matches!(&calls[0], Call::Replace(k, _) if !k.is_empty()),
            "{calls:?}"
        );
        let name = format!("m-{streaming}");
        create(&api, &config_map(&name).data("k", "1").build()).await;
        let key = format!("{ns}/{name}");
        store
            .wait_until(Duration::from_secs(30), |c| {
                c.iter().any(|c| matches!(c, Call::Add(k, _) if *k == key))
            })
            .await;
        let m = store.object(&key).unwrap();
        assert!(!String::from_utf8_lossy(m.bytes()).contains("\"data\""));
        let typed = m.decode().unwrap();
        assert_eq!(typed.metadata.name.as_deref(), Some(name.as_str()));
        assert!(run.reasons().is_empty(), "{:?}", run.seen());
        run.stop().await;
    }
}

fn widget_crd() -> CustomResourceDefinition {
    let size =
        json!({ "spec": { "type": "object", "properties": { "size": { "type": "integer" } } } });
    crd(
        "reflector.kcache.io",
        "Gizmo",
        "gizmos",
        json!({ "type": "object", "properties": size }),
    )
}

/// A CRD through `DynamicObject` + `ApiResource`, with a label selector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resource_as_dynamic_object() {
    let TestNamespace { cp, ns, .. } = namespace("refl-crd").await;
    cp.install_crds(&[widget_crd()]).await.unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("reflector.kcache.io", "v1", "Gizmo"),
        "gizmos",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client().unwrap(), &ns, &ar);
    let gizmo = |name: &str, team: &str, size: i64| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "reflector.kcache.io/v1", "kind": "Gizmo",
            "metadata": { "name": name, "labels": { "team": team } },
            "spec": { "size": size }
        }))
        .unwrap()
    };
    create(&api, &gizmo("g1", "red", 1)).await;
    create(&api, &gizmo("g2", "blue", 2)).await;
    let store = Arc::new(RecordingStore::<DynamicObject>::default());
    let run = start(
        Reflector::<DynamicObject>::builder_with(cp.client().unwrap(), store.clone(), ar.clone())
            .config(WatchConfig {
                label_selector: Some("team=red".into()),
                ..in_ns(&ns)
            }),
    );
    let calls = store.wait_calls(1).await;
    assert_eq!(
        calls[0],
        Call::Replace(
            vec![format!("{ns}/g1")],
            match &calls[0] {
                Call::Replace(_, rv) => rv.clone(),
                _ => unreachable!(),
            }
        )
    );
    create(&api, &gizmo("g3", "red", 3)).await;
    create(&api, &gizmo("g4", "blue", 4)).await;
    let key = format!("{ns}/g3");
    store
        .wait_until(Duration::from_secs(30), |c| {
            c.iter().any(|c| matches!(c, Call::Add(k, _) if *k == key))
        })
        .await;
    let g3 = store.object(&key).unwrap().decode().unwrap();
    assert_eq!(g3.data["spec"]["size"], 3);
    assert!(store.object(&format!("{ns}/g4")).is_none());
    assert!(run.reasons().is_empty(), "{:?}", run.seen());
    run.stop().await;
}

/// A user without RBAC: 403 reported to the handler, backed off (no hot loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_user_is_reported_and_backed_off() {
    let TestNamespace { cp, ns, .. } = namespace("refl-rbac").await;
    let nobody = cp.client_for_user("nobody", &[]).await.unwrap();
    let store = Arc::new(RecordingStore::<ConfigMap>::default());
    let run = start(Reflector::<ConfigMap>::builder(nobody, store.clone()).config(in_ns(&ns)));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let seen = run.seen();
    // backoff: attempts at ~0, ~0.8-1.6, ~2.4-4.8 (+ up to 6.4 more) s
    assert!((2..=4).contains(&seen.len()), "{seen:#?}");
    assert!(
        seen.iter()
            .all(|(r, m)| *r == ErrorReason::Forbidden && m.contains("403")),
        "{seen:#?}"
    );
    assert!(store.calls().is_empty());
    assert!(!run.reflector.has_synced());
    run.stop().await;
}

/// A client whose plain watches (no `sendInitialEvents`) ask for
/// resourceVersion "1" while `old_rv` is set: a watch from a compacted,
/// too-old RV, answered by the real server with 410.
fn client_with_old_rv_switch(cp: &ControlPlane) -> (Client, Arc<AtomicBool>) {
    let old_rv = Arc::new(AtomicBool::new(false));
    let flag = old_rv.clone();
    let client = client_with_request_hook(cp.config(), move |req| {
        let uri = req.uri().to_string();
        if uri.contains("watch=true")
            && !uri.contains("sendInitialEvents")
            && flag.load(Ordering::SeqCst)
        {
            let (path, query) = uri.split_once('?').unwrap();
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
            *req.uri_mut() = format!("{path}?{}", query.join("&")).parse().unwrap();
            eprintln!("rewrote a watch to {}", req.uri());
        }
    });
    (client, old_rv)
}

/// Waits (90 s at most) until `store` holds what a fresh list of `api`
/// returns.
async fn store_equals_a_fresh_list(
    what: &str,
    store: &RecordingStore<ConfigMap>,
    api: &Api<ConfigMap>,
) {
    let want = server_state(api).await;
    eventually_async(what, Duration::from_secs(90), async || {
        store.state() == want
    })
    .await;
}

/// How many `Replace` calls (relists) `store` has seen.
fn replaces(store: &RecordingStore<ConfigMap>) -> usize {
    store
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Replace(..)))
        .count()
}

/// A private control plane: an apiserver restart, then etcd compaction +
/// a watch from a too-old RV (410 -> relist); the store ends equal to a
/// fresh list each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovers_from_apiserver_restart_and_gone() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kcache_reflector=debug")
        .with_test_writer()
        .try_init();
    let cp = ControlPlane::start().await.unwrap();
    let ns = cp.create_namespace("refl-restart").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    for n in ["a", "b", "c"] {
        create(&api, &config_map(n).data("k", "0").build()).await;
    }
    let store = Arc::new(RecordingStore::<ConfigMap>::default());
    let (client, old_rv) = client_with_old_rv_switch(&cp);
    let run = start(
        Reflector::<ConfigMap>::builder(client, store.clone()).config(WatchConfig {
            use_watch_list: false,
            ..in_ns(&ns)
        }),
    );
    store.wait_calls(1).await;

    // 1. restart: the watch breaks, the reflector reconnects (rewatch or
    //    relist, depending on how the connection failed)
    cp.restart_apiserver().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    api.delete("a", &DeleteParams::default()).await.unwrap();
    create(&api, &config_map("d").data("k", "1").build()).await;
    store_equals_a_fresh_list("store equals a fresh list after the restart", &store, &api).await;

    // 2. compact etcd, then the next watch asks for a compacted RV: the
    //    server answers 410 and the reflector relists
    let replaces_before = replaces(&store);
    cp.compact_etcd().await.unwrap();
    old_rv.store(true, Ordering::SeqCst);
    cp.restart_apiserver().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    create(&api, &config_map("e").data("k", "2").build()).await;
    eventually_async("a 410 was seen", Duration::from_secs(90), async || {
        run.reasons().contains(&ErrorReason::Expired)
    })
    .await;
    old_rv.store(false, Ordering::SeqCst);
    store_equals_a_fresh_list("store equals a fresh list after 410", &store, &api).await;
    let replaces_after = replaces(&store);
    assert!(
        replaces_after > replaces_before,
        "410 leads to a relist: {:#?}",
        store.calls()
    );
    run.stop().await;
}
