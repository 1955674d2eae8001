//! Sharded informers against the local control plane (gate
//! `ShardedListAndWatch` on): replicas of the sample controller, each
//! listing and watching only the namespaces whose FNV-1a hash falls in its
//! slots, on a control plane of their own (so that the bytes counted are
//! theirs alone).
//!
//! Namespace names start with a hex number derived from a counter: FNV-1a
//! spreads names that differ only at their end into a narrow band of the
//! hash space (see docs/sharding.md).

// The custom resource of k8s.io/sample-controller is called Foo.
#![allow(clippy::disallowed_names)]

mod common;
use common::{foo, wait_until};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kcache_controller::{Action, Request, SHARD_SLOTS};
use kcache_core::{ShardField, ShardSelector};
use kcache_core::{ShardSlots, shard_hash};
use kcache_envtest::ControlPlane;
use kcache_informer::SharedInformerFactory;
use kcache_lease::shard::View;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use sample_controller::simulator::{self, build_simulator};
use sample_controller::{
    Context, Error, Foo, Replica, ReplicaConfig, Sharding, reconcile, start_replica,
};

/// One control plane at a time: the two tests each start their own.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const LEASE: Duration = Duration::from_secs(4);

/// The `i`-th namespace prefix: 4 hex digits that differ from the first
/// character on.
fn ns_prefix(i: usize) -> String {
    format!("{:04x}", ((i as u32).wrapping_mul(0x9e37_79b1)) >> 16)
}

/// Creates `namespaces` namespaces and `per` Foos in each; returns the
/// wanted replicas by key.
async fn create_foos(
    cp: &ControlPlane,
    namespaces: usize,
    per: usize,
) -> (Vec<String>, BTreeMap<String, i32>) {
    let client = cp.client().expect("client");
    let mut names = Vec::new();
    for i in 0..namespaces {
        names.push(cp.create_namespace(&ns_prefix(i)).await.expect("namespace"));
    }
    let want: BTreeMap<String, i32> = names
        .iter()
        .flat_map(|ns| (0..per).map(move |i| (format!("{ns}/foo-{i:03}"), 1 + (i % 3) as i32)))
        .collect();
    let creates = want.iter().map(|(key, replicas)| {
        let (ns, name) = key.split_once('/').unwrap();
        let api: Api<Foo> = Api::namespaced(client.clone(), ns);
        let f = foo(name, *replicas);
        async move { api.create(&PostParams::default(), &f).await }
    });
    common::all_succeed("create foos", 32, creates).await;
    (names, want)
}

/// Every Foo has its Deployment with the wanted replicas and reports them
/// available (`simulated`: the Deployment simulator runs) or 0.
async fn converged(
    client: &Client,
    want: &BTreeMap<String, i32>,
    simulated: bool,
) -> Result<(), String> {
    let foos = Api::<Foo>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let deps = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let deps = by_key(&deps.items);
    let foos = by_key(&foos.items);
    let mut bad = Vec::new();
    for (key, replicas) in want {
        let Some(f) = foos.get(key) else {
            bad.push(format!("{key}: no foo"));
            continue;
        };
        let ns = key.split_once('/').unwrap().0;
        match deps.get(&format!("{ns}/{}", f.spec.deployment_name)) {
            Some(d) if d.spec.replicas == Some(*replicas) => {}
            Some(_) => bad.push(format!("{key}: deployment replicas")),
            None => bad.push(format!("{key}: no deployment")),
        }
        let available = if simulated { *replicas } else { 0 };
        if f.status.as_ref().map(|s| s.available_replicas) != Some(available) {
            bad.push(format!("{key}: status {:?}", f.status));
        }
    }
    common::converged(bad)
}

async fn eventually_converged(
    client: &Client,
    want: &BTreeMap<String, i32>,
    simulated: bool,
    what: &str,
) -> Duration {
    let started = Instant::now();
    loop {
        match converged(client, want, simulated).await {
            Ok(()) => {
                let took = started.elapsed();
                eprintln!("{what}: converged in {took:?}");
                return took;
            }
            Err(why) if started.elapsed() > Duration::from_secs(150) => {
                panic!("{what}: not converged after 150 s: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// `member`'s selector in the view of `members`.
fn expected_selector(members: &[&str], member: &str) -> ShardSelector {
    let slots = ShardSlots::new(SHARD_SLOTS).unwrap();
    let view = View::new(members.iter().copied());
    slots
        .selector(ShardField::Namespace, view.slots_of(member, slots))
        .unwrap()
}

/// Every replica settled on `members` and caches with its selector.
fn switched(replicas: &[&Replica], members: &[&str]) -> Result<(), String> {
    for r in replicas {
        let st = r.shard.as_ref().unwrap().status();
        if !st.settled() || st.members != members {
            return Err(format!("{}: {st:?}", r.identity));
        }
        let want = expected_selector(members, &r.identity);
        if r.controller.handle.shard_selector().as_ref() != Some(&want) {
            return Err(format!("{}: not switched to its ranges yet", r.identity));
        }
    }
    Ok(())
}

fn ns_of(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

/// Checks that each replica caches exactly its share of `keys` (Foos) and
/// of the Deployments; the shares are disjoint and cover everything.
fn check_shares(replicas: &[&Replica], keys: &BTreeSet<String>) {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for r in replicas {
        let selector = r.controller.handle.shard_selector().expect("sharded");
        let foos = r.cached_foos();
        let deps = r.cached_deployments();
        for k in foos.iter().chain(deps.iter()) {
            assert!(
                selector.contains(shard_hash(ns_of(k).as_bytes())),
                "{}: caches {k}, outside its ranges",
                r.identity
            );
        }
        let mine: BTreeSet<&String> = keys
            .iter()
            .filter(|k| selector.contains(shard_hash(ns_of(k).as_bytes())))
            .collect();
        let cached: BTreeSet<&String> = foos.iter().filter(|k| keys.contains(*k)).collect();
        assert_eq!(cached, mine, "{}: caches exactly its Foos", r.identity);
        assert_eq!(
            deps.len(),
            cached.len(),
            "{}: one Deployment per Foo",
            r.identity
        );
        for k in foos {
            if let Some(other) = seen.insert(k.clone(), r.identity.clone()) {
                panic!("{k} cached by {other} and {}", r.identity);
            }
        }
    }
    let covered: BTreeSet<&String> = seen.keys().collect();
    let all: BTreeSet<&String> = keys.iter().collect();
    assert_eq!(covered, all, "the shares cover every Foo");
}

/// `objects` by `namespace/name`.
fn by_key<K: ResourceExt>(objects: &[K]) -> HashMap<String, &K> {
    objects
        .iter()
        .map(|o| {
            let key = format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
            (key, o)
        })
        .collect()
}

/// A control plane of this test's own with the sample's CRDs, and an
/// admin client.
async fn own_control_plane() -> (ControlPlane, Client) {
    let cp = ControlPlane::start().await.expect("control plane");
    common::install_sample_crds(&cp).await;
    let client = cp.client().expect("client");
    (cp, client)
}

fn replica_config(id: &str, sharding: Sharding, hint: usize) -> ReplicaConfig {
    let mut c = ReplicaConfig::new(id, "default");
    c.sharding = sharding;
    c.replicas_hint = hint;
    c
}

/// Replicas `ids`, of a group of three sharded on the namespace with
/// sharded informers, running the sample's reconcile.
fn start_namespace_sharded(cp: &ControlPlane, ids: &[&str]) -> Vec<Replica> {
    ids.iter()
        .map(|id| {
            let config = replica_config(id, Sharding::Informers(ShardField::Namespace), 3);
            start_replica(cp.config(), config, reconcile).unwrap()
        })
        .collect()
}

struct Simulator {
    factory: SharedInformerFactory,
    handle: kcache_controller::ControllerHandle,
    task: tokio::task::JoinHandle<Result<(), kcache_controller::ControllerError>>,
}

fn start_simulator(client: &Client) -> Simulator {
    let factory = SharedInformerFactory::new(client.clone());
    let (sim, ctx) = build_simulator(&factory, client.clone());
    let handle = sim.handle();
    let task = tokio::spawn(sim.run(simulator::reconcile, ctx));
    Simulator {
        factory,
        handle,
        task,
    }
}

impl Simulator {
    async fn stop(self) {
        self.handle.stop();
        self.task.await.unwrap().unwrap();
        self.factory.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_sharded_replicas_each_cache_only_their_share() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let (cp, client) = own_control_plane().await;
    let (_, want) = create_foos(&cp, 100, 30).await;
    let keys: BTreeSet<String> = want.keys().cloned().collect();
    eprintln!("{} foos created in {:?}", keys.len(), started.elapsed());

    // 1. Three sharded replicas converge the 3,000 Foos (without the
    // Deployment simulator: fewer writes, the Foos report 0 available).
    let ids = ["a1", "a2", "a3"];
    let first = start_namespace_sharded(&cp, &ids);
    eventually_converged(&client, &want, false, "3,000 foos on 3 sharded replicas").await;
    {
        let refs: Vec<&Replica> = first.iter().collect();
        wait_until("the replicas switched", Duration::from_secs(20), || {
            switched(&refs, &ids)
        })
        .await;
        check_shares(&refs, &keys);
    }
    for r in first {
        r.stop().await.unwrap();
    }

    // 2. On the converged state: three fresh sharded replicas and one
    // unsharded reference, each with its own byte-counting client.
    let ids = ["b1", "b2", "b3"];
    let reference = start_replica(
        cp.config(),
        replica_config("reference", Sharding::None, 1),
        reconcile,
    )
    .unwrap();
    let replicas = start_namespace_sharded(&cp, &ids);
    let refs: Vec<&Replica> = replicas.iter().collect();
    wait_until("the replicas switched", Duration::from_secs(60), || {
        switched(&refs, &ids)
    })
    .await;
    wait_until("the reference synced", Duration::from_secs(60), || {
        let n = reference.cached_foos().len();
        (n == keys.len()).then_some(()).ok_or(format!("{n} foos"))
    })
    .await;
    // let the initial reconciles (no writes: converged) end
    tokio::time::sleep(Duration::from_secs(3)).await;
    check_shares(&refs, &keys);
    let total = reference.bytes_received() as f64;
    let mut shares = Vec::new();
    for r in &refs {
        let b = r.bytes_received() as f64;
        let ratio = b / (total / 3.0);
        shares.push(format!(
            "{}: {} foos, {} deployments, {:.0} bytes ({ratio:.2} of a third)",
            r.identity,
            r.cached_foos().len(),
            r.cached_deployments().len(),
            b
        ));
        // An unsharded replica receives every Foo: 3 thirds or more. A
        // sharded one receives its share (namespaces hash unevenly: up to
        // about 1.3 of a third here), plus what it listed while it saw
        // fewer members than three before it settled (with two members,
        // half: 1.5 of a third). CI once measured 1.51 with the old bound
        // of 1.5; 2.5 still fails an unsharded replica by a wide margin.
        assert!(
            ratio < 2.5,
            "{}: {ratio:.2} of a third of {total}",
            r.identity
        );
    }
    eprintln!("unsharded reference: {total:.0} bytes; {shares:?}");
    for r in replicas {
        r.stop().await.unwrap();
    }
    reference.stop().await.unwrap();
    eprintln!("test took {:?}", started.elapsed());
}

/// (start, end, replica, key) of a reconcile.
type Span = (Instant, Option<Instant>, String, String);

#[derive(Default)]
struct Log {
    /// who reconciles what now, and overlaps
    reconciling: common::Reconciling,
    /// reconciles that saw no object (the delete path)
    deleted: Mutex<Vec<String>>,
    /// reconciles that ran while the replica did not cache their range
    uncached: Mutex<Vec<String>>,
    /// (start, end, replica, key)
    spans: Mutex<Vec<Span>>,
}

impl Log {
    fn begin(&self, id: &str, key: &str) -> usize {
        self.reconciling.begin(id, key);
        let mut spans = self.spans.lock();
        spans.push((Instant::now(), None, id.to_owned(), key.to_owned()));
        spans.len() - 1
    }
    fn end(&self, i: usize, id: &str, key: &str) {
        self.reconciling.end(id, key);
        if let Some(s) = self.spans.lock().get_mut(i) {
            s.1 = Some(Instant::now());
        }
    }
    /// Overlapping reconciles of one key by two replicas, from the spans.
    fn overlaps(&self) -> Vec<String> {
        let spans = self.spans.lock();
        let mut by_key: HashMap<&str, Vec<(Instant, Instant, &str)>> = HashMap::new();
        for (s, e, id, key) in spans.iter() {
            by_key
                .entry(key)
                .or_default()
                .push((*s, e.unwrap_or_else(Instant::now), id));
        }
        let mut out = Vec::new();
        for (key, mut v) in by_key {
            v.sort();
            for w in v.windows(2) {
                if w[1].0 < w[0].1 && w[0].2 != w[1].2 {
                    out.push(format!("{key}: {} and {}", w[0].2, w[1].2));
                }
            }
        }
        out
    }
}

struct Recorded {
    log: Arc<Log>,
    i: usize,
    id: String,
    key: String,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.log.end(self.i, &self.id, &self.key);
    }
}

type Reconcile = Arc<
    dyn Fn(Request<Foo>, Arc<Context>) -> futures::future::BoxFuture<'static, Result<Action, Error>>
        + Send
        + Sync,
>;

fn recording(
    log: &Arc<Log>,
    id: &str,
) -> impl Fn(Request<Foo>, Arc<Context>) -> futures::future::BoxFuture<'static, Result<Action, Error>>
+ Send
+ Sync
+ 'static {
    let (log, id) = (log.clone(), id.to_owned());
    let inner: Reconcile = Arc::new(|req, ctx| Box::pin(reconcile(req, ctx)));
    move |req: Request<Foo>, ctx: Arc<Context>| {
        let (log, id, inner) = (log.clone(), id.clone(), inner.clone());
        Box::pin(async move {
            let i = log.begin(&id, &req.key);
            let _recorded = Recorded {
                log: log.clone(),
                i,
                id: id.clone(),
                key: req.key.clone(),
            };
            if req.object.is_none() {
                log.deleted.lock().push(format!("{id}: {}", req.key));
            }
            // the replica's caches hold the key's range for the whole
            // reconcile (checked at both ends)
            let cached = |ctx: &Context| {
                ctx.handle
                    .shard_selector()
                    .is_some_and(|s| s.contains(shard_hash(ns_of(&req.key).as_bytes())))
            };
            if !cached(&ctx) {
                log.uncached
                    .lock()
                    .push(format!("{id}: {} started", req.key));
            }
            // a tenth of the Foos reconcile slowly: a handover then has
            // to wait for them
            if req.key.ends_with("foo-000") {
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
            let key = req.key.clone();
            let r = inner(req, ctx.clone()).await;
            if !ctx
                .handle
                .shard_selector()
                .is_some_and(|s| s.contains(shard_hash(ns_of(&key).as_bytes())))
            {
                log.uncached.lock().push(format!("{id}: {key} ended"));
            }
            r
        })
    }
}

async fn set_replicas(
    client: &Client,
    want: &mut BTreeMap<String, i32>,
    every: usize,
    shift: usize,
) {
    let mut changed = Vec::new();
    for (i, (key, v)) in want.iter_mut().enumerate() {
        if i % every == 0 {
            *v = 1 + ((i + shift) % 3) as i32;
            changed.push((key.clone(), *v));
        }
    }
    let updates = changed.into_iter().map(|(key, replicas)| {
        let (ns, name) = key.split_once('/').unwrap();
        let api: Api<Foo> = Api::namespaced(client.clone(), ns);
        let name = name.to_owned();
        async move { common::patch_replicas(&api, &name, replicas).await }
    });
    common::all_succeed("update foos", 16, updates).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_ranges_hand_over_without_double_reconcile() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let (cp, client) = own_control_plane().await;
    let (_, mut want) = create_foos(&cp, 60, 10).await;
    let keys: BTreeSet<String> = want.keys().cloned().collect();
    let log = Arc::new(Log::default());
    let sim = start_simulator(&client);
    let start = |id: &str, release: bool| {
        let mut c = replica_config(id, Sharding::Informers(ShardField::Namespace), 3);
        c.release_on_stop = release;
        start_replica(cp.config(), c, recording(&log, id)).unwrap()
    };
    let r1 = start("r1", true);
    let r2 = start("r2", true);
    let r3 = start("r3", false);
    eventually_converged(&client, &want, true, "600 foos on 3 replicas").await;
    wait_until("three replicas switched", Duration::from_secs(30), || {
        switched(&[&r1, &r2, &r3], &["r1", "r2", "r3"])
    })
    .await;

    // a fourth replica joins; every third Foo changes meanwhile
    let joined = Instant::now();
    let r4 = start("r4", true);
    set_replicas(&client, &mut want, 3, 1).await;
    wait_until("four replicas switched", Duration::from_secs(30), || {
        switched(&[&r1, &r2, &r3, &r4], &["r1", "r2", "r3", "r4"])
    })
    .await;
    eprintln!("r4 joined: ranges switched after {:?}", joined.elapsed());
    eventually_converged(&client, &want, true, "after the join").await;
    check_shares(&[&r1, &r2, &r3, &r4], &keys);

    // r3 is killed: its Lease expires, its ranges move
    let killed = Instant::now();
    r3.stop().await.unwrap();
    set_replicas(&client, &mut want, 3, 2).await;
    wait_until(
        "three replicas switched again",
        Duration::from_secs(30),
        || switched(&[&r1, &r2, &r4], &["r1", "r2", "r4"]),
    )
    .await;
    eprintln!(
        "r3 killed: ranges switched after {:?} (lease {LEASE:?})",
        killed.elapsed()
    );
    eventually_converged(&client, &want, true, "after the kill").await;
    check_shares(&[&r1, &r2, &r4], &keys);

    assert_eq!(
        log.reconciling.violations.lock().clone(),
        Vec::<String>::new()
    );
    assert_eq!(log.overlaps(), Vec::<String>::new());
    assert_eq!(
        log.uncached.lock().clone(),
        Vec::<String>::new(),
        "reconciled while the key's range was not cached"
    );
    assert_eq!(
        log.deleted.lock().clone(),
        Vec::<String>::new(),
        "a live Foo was reconciled as deleted"
    );
    for r in [&r1, &r2, &r4] {
        assert_eq!(
            r.controller
                .context
                .orphans_deleted
                .load(std::sync::atomic::Ordering::Relaxed),
            0,
            "{}",
            r.identity
        );
    }
    let deps = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(deps.items.len(), keys.len(), "no Deployment was cleaned up");
    eprintln!("{} reconciles, none overlapping", log.spans.lock().len());
    for r in [r1, r2, r4] {
        r.stop().await.unwrap();
    }
    sim.stop().await;
    eprintln!("test took {:?}", started.elapsed());
}
