//! Informers against a real kube-apiserver + etcd (kcache-envtest).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kcache_testing::builders::{config_map, crd};
use kcache_testing::envtest::{TestNamespace, create, merge_patch, namespace};
use kcache_testing::eventually;
use kcache_testing::state::{cache_state, server_state};
use support::{Recorder, Seen, spawn_run};

use k8s_openapi::api::core::v1::ConfigMap;
use kcache_envtest::ControlPlane;
use kcache_informer::{
    ResourceEventHandlerFuncs, SharedIndexInformer, SharedInformerFactory, wait_for_cache_sync,
};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use serde_json::json;

#[tokio::test]
async fn typed_informer_follows_create_update_delete() {
    let TestNamespace { cp, ns, .. } = namespace("inf-typed").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    create(&api, &config_map("before").data("v", "1").build()).await;

    let informer = SharedIndexInformer::<ConfigMap>::builder(cp.client().unwrap())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let rec = Recorder::default();
    let reg = informer.add_event_handler(rec.clone()).unwrap();
    let (cancel, task) = spawn_run(&informer);
    assert!(wait_for_cache_sync(&cancel, &[&informer, &reg]).await);
    assert_eq!(rec.keys("add"), BTreeSet::from([format!("{ns}/before")]));

    create(&api, &config_map("a").data("v", "1").build()).await;
    let patched = merge_patch(&api, "a", json!({"data": {"v": "2"}})).await;
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    let want_rv = patched.metadata.resource_version.unwrap();
    eventually("update and delete seen", Duration::from_secs(30), || {
        rec.all()
            .iter()
            .any(|e| e.kind == "update" && e.rv == want_rv)
            && rec.keys("delete").contains(&format!("{ns}/before"))
    })
    .await;
    // per key, in order: add a, update a
    let a: Vec<_> = rec
        .all()
        .into_iter()
        .filter(|e| e.key == format!("{ns}/a"))
        .map(|e| e.kind)
        .collect();
    assert_eq!(a, ["add", "update"]);
    assert_eq!(
        cache_state(&informer.indexer().list()),
        server_state(&api).await
    );
    let typed: ConfigMap = informer
        .lister()
        .namespaced(&ns)
        .get("a")
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(typed.data.unwrap()["v"], "2");
    cancel.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn dynamic_informer_for_a_crd() {
    let TestNamespace { cp, ns, .. } = namespace("inf-dyn").await;
    let schema = json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
    cp.install_crds(&[crd("informer.kcache.io", "Gadget", "gadgets", schema)])
        .await
        .unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("informer.kcache.io", "v1", "Gadget"),
        "gadgets",
    );
    let factory = SharedInformerFactory::builder(cp.client().unwrap())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let informer = factory.dynamic_informer(&ar);
    assert_eq!(informer.name(), factory.dynamic_informer(&ar).name());
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone()).unwrap();
    factory.start();
    assert!(factory.wait_for_cache_sync().await.values().all(|ok| *ok));

    let api: Api<DynamicObject> = Api::namespaced_with(cp.client().unwrap(), &ns, &ar);
    let g: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "informer.kcache.io/v1", "kind": "Gadget",
        "metadata": { "name": "g1" }, "spec": { "size": 1 }
    }))
    .unwrap();
    create(&api, &g).await;
    merge_patch(&api, "g1", json!({"spec": {"size": 2}})).await;
    eventually("update seen", Duration::from_secs(30), || {
        rec.keys("update").contains(&format!("{ns}/g1"))
    })
    .await;
    let cached = informer.lister().namespaced(&ns).get("g1").unwrap();
    assert_eq!(cached.decode().unwrap().data["spec"]["size"], 2);
    api.delete("g1", &DeleteParams::default()).await.unwrap();
    eventually("delete seen", Duration::from_secs(30), || {
        rec.keys("delete").contains(&format!("{ns}/g1"))
    })
    .await;
    assert!(informer.indexer().is_empty());
    factory.shutdown().await;
    assert!(informer.is_stopped());
}

#[tokio::test]
async fn metadata_only_informer_caches_no_data() {
    let TestNamespace { cp, ns, .. } = namespace("inf-meta").await;
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    create(&api, &config_map("m").data("v", "secret-ish").build()).await;
    let factory = SharedInformerFactory::builder(cp.client().unwrap())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let informer = factory.metadata_informer::<ConfigMap>();
    factory.start();
    assert!(factory.wait_for_cache_sync().await.values().all(|ok| *ok));
    let cached = informer.indexer().get_by_key(&format!("{ns}/m")).unwrap();
    let text = String::from_utf8_lossy(cached.bytes()).to_string();
    assert!(text.contains("PartialObjectMetadata"), "{text}");
    assert!(
        !text.contains("secret-ish"),
        "data must not be cached: {text}"
    );
    let meta: PartialObjectMeta<ConfigMap> = cached.decode().unwrap();
    assert_eq!(meta.metadata.name.as_deref(), Some("m"));
    api.delete("m", &DeleteParams::default()).await.unwrap();
    eventually("deleted from the cache", Duration::from_secs(30), || {
        informer.indexer().is_empty()
    })
    .await;
    factory.shutdown().await;
}

#[tokio::test]
async fn slow_handler_does_not_hold_back_a_fast_one_and_late_handler_gets_the_cache() {
    let TestNamespace { cp, ns, .. } = namespace("inf-slow").await;
    let informer = SharedIndexInformer::<ConfigMap>::builder(cp.client().unwrap())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let fast = Recorder::default();
    informer.add_event_handler(fast.clone()).unwrap();
    let slow_reg = informer
        .add_event_handler(
            ResourceEventHandlerFuncs::new()
                .add_func(|_, _| std::thread::sleep(Duration::from_millis(100))),
        )
        .unwrap();
    let (cancel, task) = spawn_run(&informer);
    assert!(wait_for_cache_sync(&cancel, &[&informer]).await);
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    for i in 0..60 {
        create(&api, &config_map(&format!("c{i}")).data("v", "1").build()).await;
    }
    eventually("fast handler saw all 60", Duration::from_secs(30), || {
        fast.keys("add").len() == 60
    })
    .await;
    // the slow one (100 ms per event) cannot have finished 60 events yet
    assert!(
        slow_reg.delivered() < 60,
        "slow handler delivered {}",
        slow_reg.delivered()
    );
    assert!(slow_reg.backlog() > 0);

    let late = Recorder::default();
    let late_reg = informer.add_event_handler(late.clone()).unwrap();
    eventually("late handler synced", Duration::from_secs(30), || {
        late_reg.has_synced()
    })
    .await;
    assert_eq!(late.keys("add").len(), 60);
    cancel.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn apiserver_restart_converges_and_every_delete_is_delivered() {
    let cp = ControlPlane::start().await.unwrap();
    let ns = cp.create_namespace("inf-restart").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    for i in 0..20 {
        create(&api, &config_map(&format!("c{i}")).data("v", "1").build()).await;
    }
    let informer = SharedIndexInformer::<ConfigMap>::builder(cp.client().unwrap())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone()).unwrap();
    let (cancel, task) = spawn_run(&informer);
    assert!(wait_for_cache_sync(&cancel, &[&informer]).await);

    cp.restart_apiserver().await.unwrap();
    // Changes right after the restart, while the informer may still be
    // reconnecting (or relisting after 410).
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    let mut deleted = BTreeSet::new();
    for i in 0..5 {
        api.delete(&format!("c{i}"), &DeleteParams::default())
            .await
            .unwrap();
        deleted.insert(format!("{ns}/c{i}"));
        merge_patch(&api, &format!("c{}", i + 5), json!({"data": {"v": "2"}})).await;
        create(&api, &config_map(&format!("n{i}")).data("v", "1").build()).await;
    }
    let want = server_state(&api).await;
    eventually("cache equals a fresh list", Duration::from_secs(30), || {
        cache_state(&informer.indexer().list()) == want
    })
    .await;
    eventually("every delete delivered", Duration::from_secs(30), || {
        deleted.is_subset(&rec.keys("delete"))
    })
    .await;
    // no update went backwards in resourceVersion for a key
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for Seen { kind, key, rv, .. } in rec.all() {
        if kind == "update" {
            let rv: u64 = rv.parse().unwrap();
            if let Some(prev) = last.get(&key) {
                assert!(rv >= *prev, "{key}: {rv} after {prev}");
            }
            last.insert(key, rv);
        } else if kind == "add" {
            last.insert(key, rv.parse().unwrap());
        }
    }
    cancel.cancel();
    task.await.unwrap().unwrap();
}
