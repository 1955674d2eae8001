//! The protocol against the in-memory store on tokio's paused clock:
//! replicas with simulated workers that try random keys, a global record
//! of who works what, and membership changes (join, kill, partition,
//! graceful leave, restart). The invariant checked throughout: a key is
//! never worked by two replicas at once.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::testing::InMemoryMembershipStore;

const LEASE: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_millis(500);

fn cfg(id: &str) -> ShardConfig {
    ShardConfig::new("group-a", id)
        .lease_duration(LEASE)
        .renew_deadline(RENEW)
        .retry_period(RETRY)
}

#[derive(Clone)]
struct Sim {
    store: InMemoryMembershipStore,
    keys: Arc<Vec<String>>,
    /// key -> replicas working it now (a replica's own workers may
    /// overlap in this simulation; a controller's queue prevents that)
    active: Arc<Mutex<HashMap<String, Vec<String>>>>,
    violations: Arc<Mutex<Vec<String>>>,
    /// key -> replicas that worked it, in order (deduplicated runs)
    history: Arc<Mutex<HashMap<String, Vec<String>>>>,
    seed: Arc<AtomicUsize>,
}

struct Replica {
    id: String,
    shard: Shard,
    store: InMemoryMembershipStore,
    stop: CancellationToken,
    run: JoinHandle<Result<(), ShardError>>,
    workers_stop: CancellationToken,
    workers: Vec<JoinHandle<()>>,
    gained: Arc<AtomicUsize>,
}

impl Replica {
    /// A crash: nothing more runs, the Lease stays.
    async fn kill(self, sim: &Sim) {
        self.run.abort();
        let _ = self.run.await;
        self.workers_stop.cancel();
        for w in self.workers {
            w.abort();
            let _ = w.await;
        }
        for v in sim.active.lock().values_mut() {
            v.retain(|r| *r != self.id);
        }
    }

    /// A graceful stop: workers first, then the membership.
    async fn stop(self) -> Result<(), ShardError> {
        self.workers_stop.cancel();
        for w in self.workers {
            let _ = w.await;
        }
        self.stop.cancel();
        self.run.await.expect("run task")
    }
}

impl Sim {
    fn new(n: usize) -> Self {
        Self {
            store: InMemoryMembershipStore::new(),
            keys: Arc::new((0..n).map(|i| format!("ns/key-{i}")).collect()),
            active: Arc::default(),
            violations: Arc::default(),
            history: Arc::default(),
            seed: Arc::new(AtomicUsize::new(1)),
        }
    }

    fn start(&self, config: ShardConfig) -> Replica {
        self.start_on(config, self.store.partitioned())
    }

    fn start_on(&self, config: ShardConfig, store: InMemoryMembershipStore) -> Replica {
        let id = config.identity.clone();
        let shard = Shard::new(config, store.clone());
        let gained = Arc::new(AtomicUsize::new(0));
        let hooks = ShardHooks {
            keys: {
                let keys = self.keys.clone();
                Box::new(move || keys.to_vec())
            },
            gained: {
                let gained = gained.clone();
                Box::new(move |ks| {
                    gained.fetch_add(ks.len(), Ordering::SeqCst);
                })
            },
        };
        let stop = CancellationToken::new();
        let run = tokio::spawn({
            let (shard, stop) = (shard.clone(), stop.clone());
            async move { shard.run(stop, hooks).await }
        });
        let workers_stop = CancellationToken::new();
        let workers = (0..4)
            .map(|_| {
                let (sim, shard, id, ws) = (
                    self.clone(),
                    shard.clone(),
                    id.clone(),
                    workers_stop.clone(),
                );
                let seed = self.seed.fetch_add(1, Ordering::SeqCst) as u64;
                tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(seed);
                    while !ws.is_cancelled() {
                        let k = &sim.keys[rng.random_range(0..sim.keys.len())];
                        let Some(guard) = shard.try_begin(k) else {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            continue;
                        };
                        {
                            let mut active = sim.active.lock();
                            let v = active.entry(k.clone()).or_default();
                            if let Some(other) = v.iter().find(|r| **r != id) {
                                sim.violations
                                    .lock()
                                    .push(format!("{k}: {id} started while {other} works it"));
                            }
                            v.push(id.clone());
                        }
                        {
                            let mut h = sim.history.lock();
                            let v = h.entry(k.clone()).or_default();
                            if v.last() != Some(&id) {
                                v.push(id.clone());
                            }
                        }
                        let hold = rng.random_range(1..300);
                        tokio::time::sleep(Duration::from_millis(hold)).await;
                        if let Some(v) = sim.active.lock().get_mut(k)
                            && let Some(i) = v.iter().position(|r| *r == id)
                        {
                            v.remove(i);
                        }
                        drop(guard);
                    }
                })
            })
            .collect();
        Replica {
            id,
            shard,
            store,
            stop,
            run,
            workers_stop,
            workers,
            gained,
        }
    }

    /// Starts one replica per identity, with this replicas hint.
    fn start_all(&self, ids: &[&str], replicas_hint: usize) -> Vec<Replica> {
        ids.iter()
            .map(|id| self.start(cfg(id).replicas_hint(replicas_hint)))
            .collect()
    }

    /// A group over `keys` keys of one replica per identity (hinted at
    /// their number), once (at most 10 s) every key has one owner.
    async fn settled(keys: usize, ids: &[&str]) -> (Sim, Vec<Replica>) {
        let sim = Sim::new(keys);
        let rs = sim.start_all(ids, ids.len());
        sim.settle(&rs, Duration::from_secs(10)).await;
        (sim, rs)
    }

    /// Asserts that no key was ever worked by two replicas at once.
    fn assert_no_violations(&self) {
        assert_eq!(*self.violations.lock(), Vec::<String>::new());
    }

    /// Asserts no violation, and stops every replica.
    async fn finish(&self, replicas: Vec<Replica>) {
        self.assert_no_violations();
        stop_all(replicas).await;
    }

    /// key -> replicas that may work it now.
    fn owners<R: Borrow<Replica>>(&self, replicas: &[R]) -> BTreeMap<String, Vec<String>> {
        self.keys
            .iter()
            .map(|k| {
                let o = replicas
                    .iter()
                    .map(Borrow::borrow)
                    .filter(|r: &&Replica| r.shard.owns(k))
                    .map(|r| r.id.clone())
                    .collect();
                (k.clone(), o)
            })
            .collect()
    }

    /// Waits until every key is owned by exactly one of `replicas`.
    async fn settle<R: Borrow<Replica>>(&self, replicas: &[R], limit: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let owners = self.owners(replicas);
            let settled = replicas.iter().all(|r| r.borrow().shard.status().settled());
            if settled && owners.values().all(|o| o.len() == 1) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < limit,
                "not settled after {limit:?}: {} keys without a single owner; statuses {:?}",
                owners.values().filter(|o| o.len() != 1).count(),
                replicas
                    .iter()
                    .map(|r| r.borrow().shard.status())
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Stops each replica gracefully, in order.
async fn stop_all(replicas: Vec<Replica>) {
    for r in replicas {
        r.stop().await.unwrap();
    }
}

fn counts(owners: &BTreeMap<String, Vec<String>>) -> BTreeMap<String, usize> {
    let mut c = BTreeMap::new();
    for o in owners.values() {
        for r in o {
            *c.entry(r.clone()).or_default() += 1;
        }
    }
    c
}

#[test]
fn config_validation_and_lease_names() {
    assert_eq!(cfg("a").validate(), Ok(()));
    assert!(matches!(
        ShardConfig::new("bad group", "a").validate(),
        Err(ShardConfigError::InvalidGroup(_))
    ));
    assert!(matches!(
        ShardConfig::new("-x", "a").validate(),
        Err(ShardConfigError::InvalidGroup(_))
    ));
    assert!(matches!(
        ShardConfig::new("g".repeat(64), "a").validate(),
        Err(ShardConfigError::InvalidGroup(_))
    ));
    assert_eq!(
        ShardConfig::new("g", "").validate(),
        Err(ShardConfigError::EmptyIdentity)
    );
    let e = cfg("a")
        .renew_deadline(LEASE)
        .validate()
        .expect_err("renew deadline = lease duration");
    assert!(
        e.to_string()
            .contains("leaseDuration (4s) must be greater than renewDeadline"),
        "{e}"
    );
    assert!(
        cfg("a")
            .retry_period(Duration::from_millis(2500))
            .validate()
            .is_err()
    );
    assert!(cfg("a").retry_period(Duration::ZERO).validate().is_err());
    // DNS-safe, distinct for identities that sanitize alike
    let a = ShardConfig::new("Foo_Group", "Pod_A").lease_name();
    let b = ShardConfig::new("Foo_Group", "pod-a").lease_name();
    assert!(a.starts_with("foo-group-pod-a-"), "{a}");
    assert_ne!(a, b);
    assert!(
        a.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    );
    // rounded up: peers never see a shorter lease than the holder assumes
    let secs = |ms| {
        cfg("a")
            .lease_duration(Duration::from_millis(ms))
            .timings
            .lease_seconds()
    };
    assert_eq!(secs(4500), 5);
    assert_eq!(secs(4000), 4);
    assert_eq!(secs(10), 1);
    let long = ShardConfig::new("g", "x".repeat(400)).lease_name();
    assert!(long.len() <= 253, "{}", long.len());
}

#[tokio::test(start_paused = true)]
async fn three_replicas_split_the_keys_and_settle() {
    let sim = Sim::new(600);
    let rs = sim.start_all(&["r1", "r2", "r3"], 3);
    let refs: Vec<&Replica> = rs.iter().collect();
    let took = sim.settle(&refs, Duration::from_secs(10)).await;
    assert!(took < Duration::from_secs(3), "settled in {took:?}");
    // run a while: nothing moves, nobody overlaps
    tokio::time::sleep(Duration::from_secs(20)).await;
    let owners = sim.owners(&refs);
    assert!(owners.values().all(|o| o.len() == 1));
    let c = counts(&owners);
    for r in &rs {
        let n = c[&r.id];
        assert!((150..=250).contains(&n), "{} owns {n} of 600", r.id);
        let st = r.shard.status();
        assert!(st.settled(), "{st:?}");
        assert_eq!(st.members, ["r1", "r2", "r3"]);
        assert_eq!(r.gained.load(Ordering::SeqCst), n, "gained keys reported");
    }
    // every key was worked by one replica only
    assert!(
        sim.history.lock().values().all(|h| h.len() == 1),
        "a key moved in a stable group"
    );
    // the hint avoided a first-comer taking everything: no releases at all
    sim.assert_no_violations();
    // the Leases show the acknowledged view
    for rec in sim.store.records("group-a").values() {
        assert_eq!(
            rec.acked.as_deref(),
            Some(&["r1".to_owned(), "r2".to_owned(), "r3".to_owned()][..])
        );
        assert_eq!(rec.lease_duration_seconds, 4);
    }
    stop_all(rs).await;
    let records = sim.store.records("group-a");
    assert_eq!(records.len(), 3);
    assert!(
        records
            .values()
            .all(|r| r.identity.is_empty() && r.acked.is_none()),
        "leases released: {records:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_killed_replicas_keys_move_after_its_lease_expires_and_never_overlap() {
    let (sim, mut rs) = Sim::settled(600, &["r1", "r2", "r3"]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = sim.owners(&rs);
    let dead = rs.remove(2);
    let dead_id = dead.id.clone();
    let dead_keys: Vec<String> = before
        .iter()
        .filter(|(_, o)| o[0] == dead_id)
        .map(|(k, _)| k.clone())
        .collect();
    let killed = Instant::now();
    dead.kill(&sim).await;
    // before the lease can have expired nobody takes its keys
    tokio::time::sleep(LEASE - Duration::from_millis(600)).await;
    let mid = sim.owners(&rs);
    assert!(
        dead_keys.iter().all(|k| mid[k].is_empty()),
        "a dead replica's key was taken before its lease expired"
    );
    // the survivors kept theirs all along
    for (k, o) in &before {
        if o[0] != dead_id {
            assert_eq!(&mid[k], o, "{k} moved between live replicas");
        }
    }
    sim.settle(&rs, Duration::from_secs(20)).await;
    let took = killed.elapsed();
    assert!(
        took >= LEASE && took <= LEASE + 3 * RETRY,
        "taken over {took:?} after the kill"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    sim.assert_no_violations();
    // its Lease is deleted once expired for two lease durations
    tokio::time::sleep(LEASE * 2).await;
    assert_eq!(sim.store.records("group-a").len(), 2);
    stop_all(rs).await;
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_replica_stops_before_its_keys_move_and_rejoins() {
    let (sim, rs) = Sim::settled(300, &["r1", "r2", "r3"]).await;
    let cut = Instant::now();
    // r3 keeps running its workers but cannot reach the store
    rs[2].store.set_failing(true);
    tokio::time::sleep(RENEW + RETRY).await;
    assert!(!rs[2].shard.status().active);
    assert!(sim.keys.iter().all(|k| !rs[2].shard.owns(k)));
    sim.settle(&[&rs[0], &rs[1]], Duration::from_secs(20)).await;
    assert!(cut.elapsed() >= LEASE, "moved after {:?}", cut.elapsed());
    // back: it rejoins and takes a share again, without overlap
    rs[2].store.set_failing(false);
    sim.settle(&rs, Duration::from_secs(30)).await;
    let c = counts(&sim.owners(&rs));
    assert!(c.get("r3").copied().unwrap_or(0) > 50, "{c:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    sim.finish(rs).await;
}

#[tokio::test(start_paused = true)]
async fn a_fourth_replica_takes_about_a_quarter_and_only_from_the_others() {
    let sim = Sim::new(400);
    // The old members notice changes only every 2.5 s (no watch): the
    // newcomer must wait for their acknowledgements before starting keys.
    let slow = |id: &str| {
        cfg(id)
            .replicas_hint(3)
            .renew_deadline(Duration::from_millis(3500))
            .retry_period(Duration::from_millis(2500))
    };
    let mut rs: Vec<Replica> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| sim.start_on(slow(id), sim.store.partitioned().without_watch()))
        .collect();
    sim.settle(&rs, Duration::from_secs(10)).await;
    let before = sim.owners(&rs);
    let joined = Instant::now();
    rs.push(sim.start(cfg("r4")));
    let took = sim.settle(&rs, Duration::from_secs(10)).await;
    assert!(took < Duration::from_secs(6), "{took:?}");
    let _ = joined;
    let after = sim.owners(&rs);
    let moved: Vec<&String> = before.keys().filter(|k| before[*k] != after[*k]).collect();
    assert!(moved.iter().all(|k| after[*k] == ["r4"]), "moved elsewhere");
    let frac = moved.len() as f64 / 400.0;
    assert!((0.18..=0.32).contains(&frac), "moved {frac}");
    assert_eq!(rs[3].gained.load(Ordering::SeqCst), moved.len());
    tokio::time::sleep(Duration::from_secs(3)).await;
    sim.finish(rs).await;
}

#[tokio::test(start_paused = true)]
async fn a_graceful_stop_hands_over_at_once() {
    let (sim, mut rs) = Sim::settled(300, &["r1", "r2"]).await;
    let stopped = Instant::now();
    rs.remove(1).stop().await.unwrap();
    sim.settle(&[&rs[0]], Duration::from_secs(10)).await;
    assert!(
        stopped.elapsed() < LEASE / 2,
        "took {:?}",
        stopped.elapsed()
    );
    sim.assert_no_violations();
    rs.remove(0).stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_restarted_identity_waits_for_its_old_lease_and_a_stolen_lease_is_an_error() {
    let sim = Sim::new(100);
    let a = sim.start(cfg("a"));
    sim.settle(&[&a], Duration::from_secs(5)).await;
    // a second process with the same identity waits while the first lives
    let twin = sim.start(cfg("a"));
    tokio::time::sleep(LEASE * 2).await;
    assert!(!twin.shard.status().active);
    sim.assert_no_violations();
    // the first crashes: the twin takes over once the old Lease expired
    let killed = Instant::now();
    a.kill(&sim).await;
    sim.settle(&[&twin], Duration::from_secs(20)).await;
    assert!(killed.elapsed() >= LEASE, "{:?}", killed.elapsed());

    // someone else writes our Lease: run stops with DuplicateIdentity
    let name = twin.shard.lease_name().to_owned();
    let list = sim.store.list("group-a").await.unwrap();
    let m = list.iter().find(|m| m.name == name).unwrap();
    let mut stolen = m.record.clone();
    stolen.instance = "someone-else".into();
    sim.store
        .update("group-a", &name, &stolen, &m.resource_version)
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), twin.run)
        .await
        .expect("run ends")
        .expect("task");
    let e = r.expect_err("duplicate identity");
    assert!(matches!(e, ShardError::DuplicateIdentity { .. }), "{e}");
    assert!(e.to_string().contains("unique identity"), "{e}");
    assert!(sim.keys.iter().all(|k| !twin.shard.owns(k)));
    twin.workers_stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn random_membership_churn_never_overlaps_and_settles() {
    let sim = Sim::new(400);
    let mut rng = StdRng::seed_from_u64(7);
    let mut rs: Vec<Replica> = Vec::new();
    let mut next = 0;
    for _ in 0..40 {
        match rng.random_range(0..10) {
            0..=3 if rs.len() < 6 => {
                next += 1;
                rs.push(sim.start(cfg(&format!("c{next}"))));
            }
            4..=5 if rs.len() > 1 => {
                let i = rng.random_range(0..rs.len());
                rs.remove(i).kill(&sim).await;
            }
            6 if rs.len() > 1 => {
                let i = rng.random_range(0..rs.len());
                rs.remove(i).stop().await.unwrap();
            }
            7 if !rs.is_empty() => {
                let i = rng.random_range(0..rs.len());
                let failing = rng.random_bool(0.5);
                rs[i].store.set_failing(failing);
            }
            _ => {}
        }
        let pause = rng.random_range(100..3000);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    for r in &rs {
        r.store.set_failing(false);
    }
    sim.settle(&rs, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.assert_no_violations();
    assert!(
        sim.history.lock().values().any(|h| h.len() > 1),
        "keys moved during the churn"
    );
    stop_all(rs).await;
}

fn quiet_hooks(keys: Arc<Vec<String>>) -> ShardHooks {
    ShardHooks {
        keys: Box::new(move || keys.to_vec()),
        gained: Box::new(|_| {}),
    }
}

#[tokio::test(start_paused = true)]
async fn a_running_reconcile_of_a_released_key_delays_the_handover() {
    let store = InMemoryMembershipStore::new();
    let keys: Arc<Vec<String>> = Arc::new((0..200).map(|i| format!("ns/k{i}")).collect());
    let r1 = Shard::new(cfg("r1"), store.clone());
    let stop1 = CancellationToken::new();
    let t1 = tokio::spawn({
        let (s, stop, hooks) = (r1.clone(), stop1.clone(), quiet_hooks(keys.clone()));
        async move { s.run(stop, hooks).await }
    });
    while !r1.status().settled() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(keys.iter().all(|k| r1.owns(k)), "alone, r1 owns everything");
    // r1 works a key that r2 will own, for a long time
    let theirs = keys
        .iter()
        .find(|k| View::new(["r1", "r2"]).owned_by(k, "r2"))
        .unwrap()
        .clone();
    let guard = r1.try_begin(&theirs).expect("r1 may work it");
    let r2 = Shard::new(cfg("r2"), store.clone());
    let stop2 = CancellationToken::new();
    let t2 = tokio::spawn({
        let (s, stop, hooks) = (r2.clone(), stop2.clone(), quiet_hooks(keys.clone()));
        async move { s.run(stop, hooks).await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    // r1 stopped starting r2's keys but has not acknowledged the new view
    let st = r1.status();
    assert_eq!(st.members, ["r1"], "{st:?}");
    assert_eq!(
        st.pending.as_deref(),
        Some(&["r1".to_owned(), "r2".to_owned()][..])
    );
    assert!(!r1.owns(&theirs) && r1.try_begin(&theirs).is_none());
    assert!(!r2.owns(&theirs), "r2 starts a key r1 still works");
    assert!(
        keys.iter().all(|k| !r2.owns(k)),
        "r2 waits for r1's acknowledgement"
    );
    // r1's own keys keep going meanwhile
    let mine = keys
        .iter()
        .find(|k| View::new(["r1", "r2"]).owned_by(k, "r1"))
        .unwrap();
    assert!(r1.owns(mine));
    let released = Instant::now();
    drop(guard);
    while !(r1.status().settled() && r2.status().settled()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(released.elapsed() < RETRY * 2, "{:?}", released.elapsed());
    assert!(r2.owns(&theirs) && !r1.owns(&theirs));
    stop1.cancel();
    stop2.cancel();
    t1.await.unwrap().unwrap();
    t2.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn unanswered_writes_stop_the_replica_safely_and_it_recovers() {
    let (sim, rs) = Sim::settled(300, &["r1", "r2", "r3"]).await;
    let before = sim.owners(&rs);
    // r1's renewals land but it never learns it: it stops at its renew
    // deadline; the others see it renewing, so its keys stay unworked
    rs[0].store.set_losing_answers(true);
    tokio::time::sleep(RENEW + RETRY * 2).await;
    assert!(!rs[0].shard.status().active);
    let mid = sim.owners(&rs);
    for (k, o) in &before {
        if o[0] == "r1" {
            assert!(mid[k].is_empty(), "{k} owned by {:?}", mid[k]);
        } else {
            assert_eq!(&mid[k], o);
        }
    }
    // answers again: r1 works its keys again
    rs[0].store.set_losing_answers(false);
    sim.settle(&rs, Duration::from_secs(10)).await;
    assert_eq!(sim.owners(&rs), before);
    // a replica whose requests hang still stops promptly
    rs[1].store.set_losing_answers(true);
    let mut rs = rs;
    let r2 = rs.remove(1);
    let stopping = Instant::now();
    r2.stop().await.unwrap();
    assert!(stopping.elapsed() <= RETRY * 3, "{:?}", stopping.elapsed());
    sim.finish(rs).await;
}

#[tokio::test(start_paused = true)]
async fn a_lease_deleted_by_hand_still_counts_until_it_expires() {
    let (sim, rs) = Sim::settled(300, &["r1", "r2", "r3"]).await;
    let before = sim.owners(&rs);
    // r3 is cut off and its Lease deleted by hand: r3 keeps working until
    // its renew deadline, so the others must not take its keys before the
    // Lease would have expired
    rs[2].store.set_failing(true);
    let name = rs[2].shard.lease_name().to_owned();
    let m = sim
        .store
        .list("group-a")
        .await
        .unwrap()
        .into_iter()
        .find(|m| m.name == name)
        .unwrap();
    sim.store
        .delete("group-a", &name, &m.resource_version)
        .await
        .unwrap();
    let deleted = Instant::now();
    tokio::time::sleep(RENEW).await;
    let mid = sim.owners(&[&rs[0], &rs[1]]);
    for (k, o) in &before {
        if o[0] == "r3" {
            assert!(
                mid[k].is_empty(),
                "{k} taken {:?} after the deletion",
                deleted.elapsed()
            );
        }
    }
    sim.settle(&[&rs[0], &rs[1]], Duration::from_secs(20)).await;
    assert!(
        deleted.elapsed() >= LEASE - RETRY,
        "{:?}",
        deleted.elapsed()
    );
    // back, r3 creates its Lease again and rejoins
    rs[2].store.set_failing(false);
    sim.settle(&rs, Duration::from_secs(20)).await;
    assert_eq!(sim.owners(&rs), before);
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.finish(rs).await;
    // released Leases are deleted a lease duration later by a member that
    // is still running: here nobody is left, so they stay
    assert_eq!(sim.store.records("group-a").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn released_leases_are_deleted_by_the_remaining_members() {
    let (sim, mut rs) = Sim::settled(100, &["r1", "r2"]).await;
    rs.remove(1).stop().await.unwrap();
    assert_eq!(sim.store.records("group-a").len(), 2);
    tokio::time::sleep(LEASE + RETRY * 3).await;
    let left: Vec<String> = sim
        .store
        .records("group-a")
        .values()
        .map(|r| r.identity.clone())
        .collect();
    assert_eq!(left, ["r1"]);
    rs.remove(0).stop().await.unwrap();
}
