//! Sharded controllers against the local control plane: replicas of the
//! sample controller (each with its own client, informers and identity)
//! share 600 Foos through membership Leases. Every reconcile is recorded
//! (who, which key, when), and a reconcile that starts while another
//! replica reconciles the same key is a violation.
//!
//! One test, in phases: three replicas split the Foos, each reconciled by
//! exactly one replica; a fourth joins and about a quarter of the keys move
//! to it (and only to it); one replica is killed without releasing its
//! Lease and its keys are taken over about one lease duration later; the
//! Foos converge after every step.

// The custom resource of k8s.io/sample-controller is called Foo.
#![allow(clippy::disallowed_names)]

mod common;
use common::{foo, wait_until};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kcache_controller::KubeMembershipStore;
use kcache_controller::{
    Action, Config, Controller, ControllerError, ControllerHandle, MetricsRegistry, Request,
    Trigger,
};
use kcache_envtest::ControlPlane;
use kcache_informer::SharedInformerFactory;
use kcache_lease::shard::{GROUP_LABEL, Shard, ShardConfig, View};
use kcache_lease::shard::{ShardConfigError, ShardError};
use kcache_lease::{KubeLeaseLock, LeaderElectionConfig};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use sample_controller::simulator::{self, build_simulator};
use sample_controller::{Context, Foo, build_controller, reconcile};
use tokio::task::JoinHandle;

const GROUP: &str = "foo-shards";
const LEASE: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(500);
const FOOS: usize = 600;

#[derive(Default)]
struct Log {
    /// who reconciles what now, and overlaps
    reconciling: common::Reconciling,
    /// (start, replica, key) of every reconcile
    starts: Mutex<Vec<(Instant, String, String)>>,
    /// (replica, key) -> trigger of its first reconcile by that replica
    first_trigger: Mutex<HashMap<(String, String), Trigger>>,
}

impl Log {
    fn begin(&self, id: &str, key: &str, trigger: &Trigger) {
        self.first_trigger
            .lock()
            .entry((id.to_owned(), key.to_owned()))
            .or_insert_with(|| trigger.clone());
        self.starts
            .lock()
            .push((Instant::now(), id.to_owned(), key.to_owned()));
        self.reconciling.begin(id, key);
    }
    fn end(&self, id: &str, key: &str) {
        self.reconciling.end(id, key);
    }
    /// key -> replicas that reconciled it since `since`.
    fn by_key(&self, since: Instant) -> BTreeMap<String, BTreeSet<String>> {
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (at, id, key) in self.starts.lock().iter() {
            if *at >= since {
                m.entry(key.clone()).or_default().insert(id.clone());
            }
        }
        m
    }
    /// key -> first reconcile by a replica other than `not` since `since`.
    fn first_since(&self, since: Instant, not: &str) -> HashMap<String, Instant> {
        let mut m = HashMap::new();
        for (at, id, key) in self.starts.lock().iter() {
            if *at >= since && id != not {
                m.entry(key.clone()).or_insert(*at);
            }
        }
        m
    }
}

/// Ends a recorded reconcile even when its future is dropped.
struct Recorded {
    log: Arc<Log>,
    id: String,
    key: String,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.log.end(&self.id, &self.key);
    }
}

struct Replica {
    id: String,
    factory: SharedInformerFactory,
    handle: ControllerHandle,
    shard: Shard,
    task: JoinHandle<Result<(), ControllerError>>,
}

impl Replica {
    async fn stop(self) {
        self.handle.stop();
        self.task.await.expect("task").expect("controller");
        self.factory.shutdown().await;
    }
}

async fn start_replica(
    cp: &ControlPlane,
    ns: &str,
    id: &str,
    log: &Arc<Log>,
    release_on_stop: bool,
    metrics: Option<MetricsRegistry>,
) -> Replica {
    let client = cp.client().expect("client");
    let factory = SharedInformerFactory::builder(client.clone())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.into()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let (controller, ctx) =
        build_controller(&factory, client.clone(), Config::default().workers(4));
    let config = ShardConfig::new(GROUP, id)
        .replicas_hint(3)
        .lease_duration(LEASE)
        .renew_deadline(RENEW)
        .retry_period(RETRY)
        .release_on_stop(release_on_stop);
    let mut controller = controller.sharded(config, KubeMembershipStore::new(client, ns));
    if let Some(m) = metrics {
        controller = controller.metrics(m);
    }
    let shard = controller.shard().expect("sharded").clone();
    let handle = controller.handle();
    let (log2, id2) = (log.clone(), id.to_owned());
    let task = tokio::spawn(controller.run(
        move |req: Request<Foo>, ctx: Arc<Context>| {
            let (log, id) = (log2.clone(), id2.clone());
            async move {
                log.begin(&id, &req.key, &req.trigger);
                let _recorded = Recorded {
                    log,
                    id,
                    key: req.key.clone(),
                };
                reconcile(req, ctx).await
            }
        },
        ctx,
    ));
    Replica {
        id: id.to_owned(),
        factory,
        handle,
        shard,
        task,
    }
}

fn settled(replicas: &[&Replica], members: &[&str]) -> Result<(), String> {
    for r in replicas {
        let st = r.shard.status();
        if !st.settled() || st.members != members {
            return Err(format!("{st:?}"));
        }
    }
    Ok(())
}

async fn converged(client: &Client, ns: &str, want: &BTreeMap<String, i32>) -> Result<(), String> {
    let foos = Api::<Foo>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let deps = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let deps: HashMap<String, &Deployment> = deps.items.iter().map(|d| (d.name_any(), d)).collect();
    let foos: HashMap<String, &Foo> = foos.items.iter().map(|f| (f.name_any(), f)).collect();
    let mut bad = Vec::new();
    for (name, replicas) in want {
        let Some(f) = foos.get(name) else {
            bad.push(format!("{name}: no foo"));
            continue;
        };
        match deps.get(&f.spec.deployment_name) {
            Some(d) if d.spec.replicas == Some(*replicas) => {}
            Some(_) => bad.push(format!("{name}: deployment replicas")),
            None => bad.push(format!("{name}: no deployment")),
        }
        if f.status.as_ref().map(|s| s.available_replicas) != Some(*replicas) {
            bad.push(format!("{name}: status {:?}", f.status));
        }
    }
    common::converged(bad)
}

async fn eventually_converged(client: &Client, ns: &str, want: &BTreeMap<String, i32>, what: &str) {
    let started = Instant::now();
    loop {
        match converged(client, ns, want).await {
            Ok(()) => {
                eprintln!("{what}: converged in {:?}", started.elapsed());
                return;
            }
            Err(why) if started.elapsed() > Duration::from_secs(60) => {
                panic!("{what}: not converged after 60 s: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn set_replicas(client: &Client, ns: &str, want: &BTreeMap<String, i32>) {
    let foos: Api<Foo> = Api::namespaced(client.clone(), ns);
    let updates = want.iter().map(|(name, replicas)| {
        let foos = foos.clone();
        async move { common::patch_replicas(&foos, name, *replicas).await }
    });
    common::all_succeed("update foos", 16, updates).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replicas_split_hand_over_and_converge() {
    let test_started = Instant::now();
    let cp = ControlPlane::shared().await.expect("control plane");
    common::install_sample_crds(cp).await;
    let ns = cp.create_namespace("shards").await.expect("namespace");
    let client = cp.client().expect("client");
    let log = Arc::new(Log::default());

    // The Deployment stand-in, unsharded, on its own factory.
    let sim_factory = SharedInformerFactory::builder(client.clone())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let (sim, sim_ctx) = build_simulator(&sim_factory, client.clone());
    let sim_handle = sim.handle();
    let sim_task = tokio::spawn(sim.run(simulator::reconcile, sim_ctx));

    // 1. Three replicas split 600 Foos; r3 will be killed (no release).
    let metrics = MetricsRegistry::new();
    let r1 = start_replica(cp, &ns, "r1", &log, true, Some(metrics.clone())).await;
    let r2 = start_replica(cp, &ns, "r2", &log, true, None).await;
    let r3 = start_replica(cp, &ns, "r3", &log, false, None).await;
    wait_until("three replicas settle", Duration::from_secs(30), || {
        settled(&[&r1, &r2, &r3], &["r1", "r2", "r3"])
    })
    .await;
    let leases = Api::<Lease>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={GROUP}")))
        .await
        .unwrap();
    assert_eq!(leases.items.len(), 3, "one membership lease per replica");

    let mut want: BTreeMap<String, i32> = (0..FOOS)
        .map(|i| (format!("foo-{i:03}"), 1 + (i % 3) as i32))
        .collect();
    let foos: Api<Foo> = Api::namespaced(client.clone(), &ns);
    let creates = want.iter().map(|(name, replicas)| {
        let foos = foos.clone();
        let f = foo(name, *replicas);
        async move { foos.create(&PostParams::default(), &f).await }
    });
    common::all_succeed("create foos", 16, creates).await;
    eventually_converged(&client, &ns, &want, "600 foos on 3 replicas").await;

    let phase1 = log.by_key(test_started);
    assert_eq!(phase1.len(), FOOS, "every foo reconciled");
    let three = View::new(["r1", "r2", "r3"]);
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for (key, who) in &phase1 {
        assert_eq!(who.len(), 1, "{key} reconciled by {who:?}");
        let id = who.iter().next().unwrap().clone();
        assert_eq!(
            three.owner(key),
            Some(id.as_str()),
            "{key}: not its hash owner"
        );
        owner.insert(key.clone(), id);
    }
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for id in owner.values() {
        *per.entry(id).or_default() += 1;
    }
    eprintln!("3 replicas: keys per replica {per:?}");
    for n in per.values() {
        assert!((120..=280).contains(n), "uneven split {per:?}");
    }

    // 2. A fourth replica joins: about a quarter of the keys move to it,
    // each reconciled once by its new owner (queued from its cache).
    let joined = Instant::now();
    let r4 = start_replica(cp, &ns, "r4", &log, true, None).await;
    wait_until("four replicas settle", Duration::from_secs(30), || {
        settled(&[&r1, &r2, &r3, &r4], &["r1", "r2", "r3", "r4"])
    })
    .await;
    eprintln!("r4 joined and settled in {:?}", joined.elapsed());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let since_join = log.by_key(joined);
    let moved: BTreeSet<String> = since_join
        .iter()
        .filter(|(_, who)| who.contains("r4"))
        .map(|(k, _)| k.clone())
        .collect();
    for (key, who) in &since_join {
        for id in who {
            assert!(
                id == "r4" || owner[key] == *id,
                "{key} reconciled by {id} after the join, owned by {}",
                owner[key]
            );
        }
    }
    let four = View::new(["r1", "r2", "r3", "r4"]);
    let expected: BTreeSet<String> = owner
        .keys()
        .filter(|k| four.owned_by(k, "r4"))
        .cloned()
        .collect();
    assert_eq!(moved, expected, "r4 reconciled exactly the keys it gained");
    for k in &moved {
        assert_eq!(
            log.first_trigger.lock()[&("r4".to_owned(), k.clone())],
            Trigger::Handover,
            "{k}: queued from r4's cache when gained"
        );
    }
    let frac = moved.len() as f64 / FOOS as f64;
    eprintln!(
        "r4 joined: {} keys moved ({:.1}%)",
        moved.len(),
        frac * 100.0
    );
    assert!((0.15..=0.35).contains(&frac), "moved {frac}");
    for k in &moved {
        owner.insert(k.clone(), "r4".to_owned());
    }
    let text = metrics.encode();
    assert!(
        text.contains(r#"kcache_shard_members{controller="foo-controller",group="foo-shards"} 4"#),
        "{text}"
    );
    assert!(
        text.contains(r#"kcache_shard_handovers_total{controller="foo-controller",group="foo-shards",direction="released"}"#),
        "{text}"
    );
    let r1_owned = owner.values().filter(|o| *o == "r1").count();
    assert!(
        text.contains(&format!(
            r#"kcache_shard_owned_keys{{controller="foo-controller",group="foo-shards"}} {r1_owned}"#
        )),
        "r1 owns {r1_owned}: {text}"
    );

    // 3. r3 is killed: it stops without releasing its Lease. Its keys are
    // taken over once the Lease expired, each by its new hash owner.
    let r3_keys: Vec<String> = owner
        .iter()
        .filter(|(_, o)| *o == "r3")
        .map(|(k, _)| k.clone())
        .collect();
    let killed = Instant::now();
    r3.stop().await;
    let survivors = View::new(["r1", "r2", "r4"]);
    wait_until("r3's keys taken over", Duration::from_secs(20), || {
        let first = log.first_since(killed, "r3");
        let missing = r3_keys.iter().filter(|k| !first.contains_key(*k)).count();
        if missing == 0 {
            Ok(())
        } else {
            Err(format!(
                "{missing} of {} keys not reconciled yet",
                r3_keys.len()
            ))
        }
    })
    .await;
    let first = log.first_since(killed, "r3");
    let earliest = r3_keys.iter().map(|k| first[k]).min().unwrap() - killed;
    let latest = r3_keys.iter().map(|k| first[k]).max().unwrap() - killed;
    eprintln!(
        "r3 killed: its {} keys taken over between {earliest:?} and {latest:?} after the kill (lease {LEASE:?})",
        r3_keys.len()
    );
    assert!(
        earliest >= LEASE - RETRY * 2,
        "taken over before the lease expired: {earliest:?}"
    );
    assert!(
        latest <= LEASE + Duration::from_secs(3),
        "taken over after {latest:?}"
    );
    let after_kill = log.by_key(killed);
    for (key, who) in &after_kill {
        // (r3 itself may finish a reconcile while it stops)
        for id in who.iter().filter(|id| *id != "r3") {
            let expected = if owner[key] == "r3" {
                survivors.owner(key).unwrap().to_owned()
            } else {
                owner[key].clone()
            };
            assert_eq!(*id, expected, "{key} reconciled by {id} after the kill");
        }
    }
    for k in &r3_keys {
        owner.insert(k.clone(), survivors.owner(k).unwrap().to_owned());
    }
    wait_until(
        "three replicas settle again",
        Duration::from_secs(20),
        || settled(&[&r1, &r2, &r4], &["r1", "r2", "r4"]),
    )
    .await;

    // 4. Everything still converges: change every third Foo.
    let updated = Instant::now();
    let mut changed = BTreeMap::new();
    for (i, (name, v)) in want.iter_mut().enumerate() {
        if i % 3 == 0 {
            *v = 1 + ((i + 1) % 3) as i32;
            changed.insert(name.clone(), *v);
        }
    }
    set_replicas(&client, &ns, &changed).await;
    eventually_converged(&client, &ns, &want, "200 foos updated on r1, r2, r4").await;
    let last = log.by_key(updated);
    for name in changed.keys() {
        assert!(
            last.contains_key(&format!("{ns}/{name}")),
            "{name} not reconciled"
        );
    }
    for (key, who) in &last {
        assert_eq!(who.len(), 1, "{key}: {who:?}");
        assert_eq!(who.first(), Some(&owner[key]), "{key}");
    }

    assert_eq!(
        log.reconciling.violations.lock().clone(),
        Vec::<String>::new()
    );
    let reconciles = log.starts.lock().len();
    eprintln!("{reconciles} reconciles, no key reconciled by two replicas at once");

    for r in [r1, r2, r4] {
        let id = r.id.clone();
        r.stop().await;
        eprintln!("{id} stopped");
    }
    sim_handle.stop();
    sim_task.await.unwrap().unwrap();
    sim_factory.shutdown().await;
    // the stopped replicas released their Leases (no holder); r3's expired
    // one is left unless a member deleted it (two lease durations after
    // its last renewal)
    let left: Vec<String> = Api::<Lease>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={GROUP}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|l| l.spec.as_ref()?.holder_identity.clone())
        .collect();
    assert_eq!(
        left.iter().filter(|h| h.is_empty()).count(),
        3,
        "released: {left:?}"
    );
    assert!(
        left.iter().all(|h| h.is_empty() || h == "r3"),
        "left behind: {left:?}"
    );
    eprintln!("sharding test took {:?}", test_started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharding_misuse_and_a_stolen_lease_stop_the_controller_with_an_error() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp.create_namespace("shard-err").await.expect("namespace");
    let client = cp.client().expect("client");
    let factory = SharedInformerFactory::builder(client.clone())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let store = || KubeMembershipStore::new(client.clone(), &ns);
    let noop = |_req: Request<ConfigMap>, _ctx: Arc<()>| async {
        Ok::<_, std::io::Error>(Action::await_change())
    };
    let fast = |id: &str| {
        ShardConfig::new("cm-shards", id)
            .lease_duration(LEASE)
            .renew_deadline(RENEW)
            .retry_period(RETRY)
    };

    // sharded and leader-elected at once
    let e = Controller::<ConfigMap>::new(&factory, Config::default())
        .sharded(fast("a"), store())
        .leader_election(
            LeaderElectionConfig::new("a"),
            KubeLeaseLock::new(client.clone(), &ns, "le"),
        )
        .run(noop, Arc::new(()))
        .await
        .expect_err("sharding and leader election");
    assert!(
        matches!(e, ControllerError::Shard(ShardError::WithLeaderElection)),
        "{e}"
    );
    // an invalid configuration
    let e = Controller::<ConfigMap>::new(&factory, Config::default())
        .sharded(fast("a").renew_deadline(LEASE), store())
        .run(noop, Arc::new(()))
        .await
        .expect_err("invalid timings");
    assert!(
        matches!(
            e,
            ControllerError::Shard(ShardError::Config(ShardConfigError::Timings { .. }))
        ),
        "{e}"
    );

    // a running replica whose Lease is taken by another process stops
    let controller = Controller::<ConfigMap>::new(&factory, Config::default().name("cm"))
        .sharded(fast("a"), store());
    let shard = controller.shard().unwrap().clone();
    let task = tokio::spawn(controller.run(noop, Arc::new(())));
    wait_until("the replica settles", Duration::from_secs(20), || {
        let st = shard.status();
        if st.settled() {
            Ok(())
        } else {
            Err(format!("{st:?}"))
        }
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let patch = serde_json::json!({"metadata": {"annotations": {
        kcache_lease::shard::INSTANCE_ANNOTATION: "another-process"
    }}});
    leases
        .patch(
            shard.lease_name(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run returns")
        .expect("task");
    let e = r.expect_err("duplicate identity");
    assert!(
        matches!(
            e,
            ControllerError::Shard(ShardError::DuplicateIdentity { .. })
        ),
        "{e}"
    );
    assert!(
        kcache_core::ErrorChain(&e)
            .to_string()
            .contains("unique identity"),
        "{e}"
    );
    factory.shutdown().await;
}
