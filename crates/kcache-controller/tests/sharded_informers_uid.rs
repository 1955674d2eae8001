//! Sharded informers on `metadata.uid` (a controller with only a primary)
//! against the local control plane: three replicas, 300 ConfigMaps; each
//! replica caches the ConfigMaps whose uid hash is in its slots and
//! reconciles exactly those.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{
    Action, Config, Controller, ControllerHandle, KubeMembershipStore, Request,
};
use kcache_core::ShardField;
use kcache_core::shard_hash;
use kcache_envtest::ControlPlane;
use kcache_informer::SharedInformerFactory;
use kcache_lease::shard::ShardConfig;
use kube::api::{Api, PostParams};
use parking_lot::Mutex;

const CONFIG_MAPS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uid_sharded_replicas_cache_and_reconcile_only_their_share() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp.create_namespace("uid-shards").await.expect("namespace");
    let client = cp.client().expect("client");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    futures::stream::iter(0..CONFIG_MAPS)
        .map(|i| {
            let api = api.clone();
            let cm: ConfigMap = serde_json::from_value(
                serde_json::json!({"metadata": {"name": format!("cm-{i:03}")}}),
            )
            .unwrap();
            async move { api.create(&PostParams::default(), &cm).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("create");

    // replica -> keys it reconciled
    let seen: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>> = Arc::default();
    let mut replicas: Vec<(String, SharedInformerFactory, ControllerHandle, _)> = Vec::new();
    for id in ["u1", "u2", "u3"] {
        let factory = SharedInformerFactory::builder(client.clone())
            .config(kcache_informer::InformerConfig {
                watch: kcache_reflector::WatchConfig {
                    namespace: Some(ns.clone()),
                    ..kcache_reflector::WatchConfig::default()
                },
                ..kcache_informer::InformerConfig::default()
            })
            .build();
        let shard = ShardConfig::new("cm-uid-shards", id)
            .replicas_hint(3)
            .lease_duration(Duration::from_secs(4))
            .renew_deadline(Duration::from_secs(3))
            .retry_period(Duration::from_millis(500));
        let controller = Controller::<ConfigMap>::new(&factory, Config::default().workers(2))
            .sharded(shard, KubeMembershipStore::new(client.clone(), &ns))
            .shard_informers(ShardField::Uid);
        let handle = controller.handle();
        let (seen, me) = (seen.clone(), id.to_owned());
        let task = tokio::spawn(controller.run(
            move |req: Request<ConfigMap>, _ctx: Arc<()>| {
                let (seen, me) = (seen.clone(), me.clone());
                async move {
                    // a reconcile without its object would show as a key
                    // prefixed with "gone:"
                    let key = match req.object {
                        Some(_) => req.key.clone(),
                        None => format!("gone:{}", req.key),
                    };
                    seen.lock().entry(me).or_default().insert(key);
                    Ok::<_, std::io::Error>(Action::await_change())
                }
            },
            Arc::new(()),
        ));
        replicas.push((id.to_owned(), factory, handle, task));
    }

    let started = Instant::now();
    loop {
        let n: usize = seen.lock().values().map(BTreeSet::len).sum();
        if n >= CONFIG_MAPS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{n} of {CONFIG_MAPS} reconciled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = seen.lock().clone();
    let mut all = BTreeSet::new();
    for (id, _, handle, _) in &replicas {
        let selector = handle.shard_selector().expect("sharded informers");
        assert_eq!(selector.field(), ShardField::Uid);
        let informer = handle.informer::<ConfigMap>();
        let cached: BTreeSet<String> = informer.indexer().list_keys().into_iter().collect();
        for k in &cached {
            let obj = informer.indexer().get_by_key(k).unwrap();
            assert!(
                selector.contains(shard_hash(obj.uid().unwrap().as_bytes())),
                "{id}: caches {k} outside its ranges"
            );
        }
        let mine = seen.get(id).cloned().unwrap_or_default();
        assert_eq!(mine, cached, "{id}: reconciled exactly what it caches");
        for k in cached {
            assert!(all.insert(k.clone()), "{k} cached twice");
        }
        eprintln!("{id}: {} config maps", mine.len());
    }
    assert_eq!(all.len(), CONFIG_MAPS, "the shares cover everything");
    for (_, factory, handle, task) in replicas {
        handle.stop();
        task.await.unwrap().unwrap();
        factory.shutdown().await;
    }
}
