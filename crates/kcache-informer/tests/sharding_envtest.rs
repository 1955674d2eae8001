//! Server-side sharded list and watch (KEP-5866) through the informer,
//! against a real kube-apiserver + etcd (kcache-envtest): three informers,
//! one per third of the hash space, once with the apiserver's
//! `ShardedListAndWatch` gate on (the apiserver filters) and once with it
//! off (it ignores the selector; the reflector filters). Each cache must
//! hold exactly its share, the shares must be disjoint and cover
//! everything, through the initial list and live watch events, and the
//! two runs must cache the same objects.
//!
//! Run with `--nocapture` for the figures (objects and bytes received per
//! informer).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kcache_core::{ShardField, ShardSelector};
use kcache_envtest::ControlPlane;
use kcache_informer::SharedIndexInformer;
use kcache_reflector::{ShardFilterMode, WatchConfig};
use kcache_testing::envtest::counting_client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const LABEL: &str = "kcache-shard-informer-test";
/// Namespaces (fixed names: the same on both control planes, so the
/// namespace shards hold the same keys).
const NAMESPACES: usize = 30;
const PER_NAMESPACE: usize = 20;
/// Deadline of one wait (a failure, not a measurement).
const DEADLINE: Duration = Duration::from_secs(120);

/// One object as the apiserver lists it.
#[derive(Debug, Clone)]
struct Obj {
    key: String,
    namespace: String,
    uid: String,
}

impl Obj {
    fn field(&self, field: ShardField) -> &str {
        match field {
            ShardField::Uid => &self.uid,
            _ => &self.namespace,
        }
    }
}

/// The `i`-th namespace. The number comes first: FNV-1a carries a name's
/// last bytes into the high bits of the hash only through carries, so
/// names that differ only at the end (`shard-00`, `shard-01`...) hash
/// into one narrow band and would all land in one contiguous third.
fn namespace(i: usize) -> String {
    format!("s{i:02}-shardtest")
}

fn config_map(name: &str, run: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { LABEL: run } },
        "data": { "payload": "x".repeat(256) }
    }))
    .unwrap()
}

/// Creates `count` ConfigMaps named `<prefix>-<i>` in each namespace, 32
/// requests in flight.
async fn create(client: &Client, prefix: &str, count: usize, run: &str) {
    let jobs: Vec<(String, String)> = (0..NAMESPACES)
        .flat_map(|n| (0..count).map(move |i| (namespace(n), format!("{prefix}-{i:03}"))))
        .collect();
    let done = futures::stream::iter(jobs)
        .map(|(ns, name)| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
            async move {
                api.create(&PostParams::default(), &config_map(&name, run))
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>();
    tokio::time::timeout(DEADLINE * 2, done)
        .await
        .expect("creating the ConfigMaps in time")
        .unwrap();
}

/// Every ConfigMap of the run, as the apiserver lists it (no shard selector).
async fn list_all(client: &Client, run: &str) -> BTreeMap<String, Obj> {
    let api: Api<ConfigMap> = Api::all(client.clone());
    let lp = ListParams::default().labels(&format!("{LABEL}={run}"));
    let list = tokio::time::timeout(DEADLINE, api.list(&lp))
        .await
        .unwrap()
        .unwrap();
    list.items
        .iter()
        .map(|cm| {
            let ns = cm.namespace().unwrap();
            let o = Obj {
                key: format!("{ns}/{}", cm.name_any()),
                namespace: ns,
                uid: cm.uid().unwrap(),
            };
            (o.key.clone(), o)
        })
        .collect()
}

struct Member {
    informer: SharedIndexInformer<ConfigMap>,
    bytes: Arc<AtomicU64>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), kcache_informer::InformerError>>,
}

impl Member {
    fn start(
        cp: &ControlPlane,
        run: &str,
        selector: Option<ShardSelector>,
        use_watch_list: bool,
    ) -> Member {
        let (client, bytes) = counting_client(cp.config()).expect("a counting client");
        let informer = SharedIndexInformer::<ConfigMap>::builder(client)
            .config(kcache_informer::InformerConfig {
                watch: WatchConfig {
                    label_selector: Some(format!("{LABEL}={run}")),
                    use_watch_list,
                    shard_selector: selector,
                    ..WatchConfig::default()
                },
                ..kcache_informer::InformerConfig::default()
            })
            .build();
        let cancel = CancellationToken::new();
        let task = tokio::spawn({
            let informer = informer.clone();
            let cancel = cancel.clone();
            async move { informer.run(cancel).await }
        });
        Member {
            informer,
            bytes,
            cancel,
            task,
        }
    }

    fn keys(&self) -> BTreeSet<String> {
        self.informer.indexer().list_keys().into_iter().collect()
    }

    async fn stop(self) {
        self.cancel.cancel();
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("the informer stops")
            .unwrap()
            .unwrap();
    }
}

/// The keys of `all` whose field hashes into `sel` (the client-side function).
fn share(all: &BTreeMap<String, Obj>, sel: &ShardSelector) -> BTreeSet<String> {
    all.values()
        .filter(|o| sel.matches_value(o.field(sel.field())))
        .map(|o| o.key.clone())
        .collect()
}

/// Waits until every member's cache is exactly its share of `all`.
async fn converge(members: &[Member], selectors: &[ShardSelector], all: &BTreeMap<String, Obj>) {
    let expected: Vec<BTreeSet<String>> = selectors.iter().map(|s| share(all, s)).collect();
    let wait = async {
        loop {
            if members
                .iter()
                .zip(&expected)
                .all(|(m, e)| m.informer.has_synced() && m.keys() == *e)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    if tokio::time::timeout(DEADLINE, wait).await.is_err() {
        for (i, (m, e)) in members.iter().zip(&expected).enumerate() {
            let got = m.keys();
            let extra: Vec<_> = got.difference(e).take(5).collect();
            let missing: Vec<_> = e.difference(&got).take(5).collect();
            eprintln!(
                "member {i} ({}): synced {}, {} cached, {} expected; extra {extra:?}, missing {missing:?}; last error {:?}",
                selectors[i],
                m.informer.has_synced(),
                got.len(),
                e.len(),
                m.informer.last_error()
            );
        }
        panic!("the caches did not converge to their shares within {DEADLINE:?}");
    }
}

fn check_partition(what: &str, caches: &[BTreeSet<String>], all: &BTreeMap<String, Obj>) {
    let total: usize = caches.iter().map(BTreeSet::len).sum();
    let union: BTreeSet<String> = caches.iter().flatten().cloned().collect();
    assert_eq!(total, union.len(), "{what}: the shares overlap");
    assert_eq!(
        union,
        all.keys().cloned().collect::<BTreeSet<_>>(),
        "{what}: the shares do not cover everything"
    );
}

/// What one control plane's run produced, per field: each member's cache.
type Caches = BTreeMap<&'static str, Vec<BTreeSet<String>>>;

/// Creates the objects, runs 3 sharded informers per field (plus one
/// unsharded, for the bytes), checks the caches through the initial list
/// and live changes; returns the caches and prints the bytes.
async fn run_plane(gate: bool) -> Caches {
    let cp = ControlPlane::builder()
        .sharded_list_and_watch(gate)
        .start()
        .await
        .unwrap();
    let client = cp.client().unwrap();
    let run = "r1";
    for i in 0..NAMESPACES {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": namespace(i)}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    create(&client, "cm", PER_NAMESPACE, run).await;
    let mut all = list_all(&client, run).await;
    assert_eq!(all.len(), NAMESPACES * PER_NAMESPACE);

    let expect_mode = if gate {
        ShardFilterMode::Server
    } else {
        ShardFilterMode::Client
    };
    // uid: streaming lists (the default); namespace: paged lists, whose
    // pages echo the selector when the gate is on
    let plans = [
        ("uid", ShardField::Uid, true),
        ("namespace", ShardField::Namespace, false),
    ];
    let reference = Member::start(&cp, run, None, true);
    let mut runs = Vec::new();
    for (name, field, watch_list) in plans {
        let selectors = ShardSelector::contiguous(field, 3).unwrap();
        let members: Vec<Member> = selectors
            .iter()
            .map(|s| Member::start(&cp, run, Some(s.clone()), watch_list))
            .collect();
        converge(&members, &selectors, &all).await;
        runs.push((name, selectors, members));
    }
    // live changes: new objects in every namespace, some deleted
    create(&client, "live", 2, run).await;
    for n in (0..NAMESPACES).step_by(3) {
        Api::<ConfigMap>::namespaced(client.clone(), &namespace(n))
            .delete("cm-000", &DeleteParams::default())
            .await
            .unwrap();
    }
    all = list_all(&client, run).await;
    assert_eq!(all.len(), NAMESPACES * (PER_NAMESPACE + 2) - NAMESPACES / 3);
    let wait_ref = async {
        while reference.keys().len() != all.len() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait_ref).await.unwrap();
    let unsharded = reference.bytes.load(Ordering::Relaxed);
    let mut caches = Caches::new();
    for (name, selectors, members) in runs {
        converge(&members, &selectors, &all).await;
        let got: Vec<BTreeSet<String>> = members.iter().map(Member::keys).collect();
        check_partition(&format!("gate {gate}, {name}"), &got, &all);
        for (i, m) in members.iter().enumerate() {
            assert_eq!(
                m.informer.shard_filter_mode(),
                Some(expect_mode),
                "gate {gate}, {name} member {i}"
            );
            let b = m.bytes.load(Ordering::Relaxed);
            println!(
                "gate {}: {name} member {i}: {} objects cached, {} bytes received ({:.2} of the unsharded informer's {unsharded})",
                if gate { "on " } else { "off" },
                got[i].len(),
                b,
                b as f64 / unsharded as f64
            );
            if gate {
                // its share of the objects (plus request overheads)
                let fraction = got[i].len() as f64 / all.len() as f64;
                assert!(
                    (b as f64) < (fraction + 0.1) * unsharded as f64,
                    "{name} member {i}: {b} bytes of {unsharded} for {fraction:.2} of the objects"
                );
            } else {
                assert!(
                    (b as f64) > 0.8 * unsharded as f64,
                    "{name} member {i}: {b} bytes of {unsharded}"
                );
            }
        }
        caches.insert(name, got);
        for m in members {
            m.stop().await;
        }
    }
    reference.stop().await;
    caches
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_side_fallback_caches_the_same_share() {
    let on = run_plane(true).await;
    let off = run_plane(false).await;
    // the namespaces (and so the keys) are the same on both control
    // planes: the namespace shards must hold the same keys; uids differ
    // between the planes, and each plane's uid shards were checked against
    // the client-side hash of its own objects
    assert_eq!(
        on["namespace"], off["namespace"],
        "gate on and gate off cache the same namespace shares"
    );
    let sizes = |c: &Caches, f: &str| c[f].iter().map(BTreeSet::len).collect::<Vec<_>>();
    println!(
        "namespace shares (gate on = gate off): {:?}; uid shares: gate on {:?}, gate off {:?}",
        sizes(&on, "namespace"),
        sizes(&on, "uid"),
        sizes(&off, "uid")
    );
}
