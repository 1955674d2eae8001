//! Warm standby under leader election, on an in-process fake apiserver, the
//! in-memory lease store and tokio's paused clock: a standby's informers
//! run and sync while another replica leads, its handlers queue keys, its
//! workers never run before it leads; when the leader dies (its process
//! gone: no renewal, no release) the standby takes the lease when it
//! expires and reconciles at once, the changes it saw while standing by
//! first.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{Action, Config, Controller, Request, Trigger};
use kcache_informer::SharedInformerFactory;
use kcache_lease::testing::InMemoryLeaseLock;
use kcache_lease::{JITTER_FACTOR, LeaderElectionConfig, LeaseTimings};
use kcache_testing::fake::{Fake, cm, cm_items, ev, list_json};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::time::Instant;

const NAMES: &[&str] = &["a", "b", "c", "d", "e"];

/// A factory listing the ConfigMaps [`NAMES`]; its first watch is fed by
/// the returned sender (the others hang).
fn factory() -> (SharedInformerFactory, mpsc::UnboundedSender<Bytes>) {
    let (fake, tx) = Fake::serving_with_watch(list_json("100", "", cm_items(NAMES)));
    let factory = SharedInformerFactory::builder(fake.client)
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    (factory, tx)
}

/// What one replica reconciled: key, trigger, when.
type Log = Arc<Mutex<Vec<(String, Trigger, Instant)>>>;

struct Replica {
    factory: SharedInformerFactory,
    watch: mpsc::UnboundedSender<Bytes>,
    handle: kcache_controller::ControllerHandle,
    run: tokio::task::JoinHandle<Result<(), kcache_controller::ControllerError>>,
    log: Log,
}

/// Starts replica `id` competing for `lock` with `config`.
fn replica(id: &str, lock: impl kcache_lease::LeaseLock + 'static, config: Config) -> Replica {
    let (factory, watch) = factory();
    let ctl = Controller::<ConfigMap>::new(&factory, config.name("cm"))
        .leader_election(LeaderElectionConfig::new(id), lock);
    let handle = ctl.handle();
    let log: Log = Arc::default();
    let run = tokio::spawn(ctl.run(
        |req: Request<ConfigMap>, log: Log| async move {
            log.lock()
                .push((req.name.clone(), req.trigger.clone(), Instant::now()));
            Ok::<_, io::Error>(Action::await_change())
        },
        log.clone(),
    ));
    Replica {
        factory,
        watch,
        handle,
        run,
        log,
    }
}

async fn settle(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
        // real time for the listener threads, which the paused clock does
        // not wait for (100 us per step failed once with the machine busy)
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn holder(lock: &InMemoryLeaseLock) -> String {
    lock.record().map(|r| r.holder_identity).unwrap_or_default()
}

/// Worst case from a leader's death to a standby's acquire, with the
/// default timings (15 s + 2 x 4.4 s): the leader's last renewal is seen
/// at the standby's next attempt (up to a jittered retry period after it),
/// the lease expires a lease duration after that sighting, and the standby
/// tries again within another jittered retry period.
fn takeover_within() -> Duration {
    let t = LeaseTimings::default();
    let jittered_retry = t.retry_period.mul_f64(1.0 + JITTER_FACTOR);
    t.lease_duration + 2 * jittered_retry
}

/// Waits (on the paused clock, 1 ms steps) until `id` holds `lock`;
/// returns when it was first seen holding it. Panics after twice
/// [`takeover_within`].
async fn until_holder(lock: &InMemoryLeaseLock, id: &str) -> Instant {
    let give_up = Instant::now() + 2 * takeover_within();
    while Instant::now() < give_up {
        if holder(lock) == id {
            return Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!(
        "{id} did not take the lease within {:?}",
        2 * takeover_within()
    );
}

/// The leader dies as a SIGKILL would have it: no more renewals (its lease
/// requests fail), no release, its workers and informers gone.
async fn kill(r: Replica, lock: &kcache_lease::testing::FlakyLeaseLock) {
    lock.set_failing(true);
    r.run.abort();
    let _ = r.run.await;
    r.factory.shutdown().await;
}

/// The standby's informer lists and syncs while the leader lives, and its
/// workers do not run; after the leader is killed, the standby acquires
/// the lease when it expires and its first reconcile starts within 50 ms
/// of the acquire (the cache is synced and the keys are queued already).
#[tokio::test(start_paused = true)]
async fn standby_is_synced_before_it_leads() {
    let lock = InMemoryLeaseLock::new();
    let leader_lock = lock.handle();
    let leader = replica("leader", leader_lock.clone(), Config::default());
    settle(Duration::from_secs(1)).await;
    assert_eq!(holder(&lock), "leader");
    let standby = replica("standby", lock.clone(), Config::default());
    settle(Duration::from_secs(20)).await;
    assert!(
        standby.handle.informer::<ConfigMap>().has_synced(),
        "the standby's cache synced while the other replica leads"
    );
    assert_eq!(
        standby
            .handle
            .informer::<ConfigMap>()
            .indexer()
            .list()
            .len(),
        NAMES.len()
    );
    assert!(standby.log.lock().is_empty(), "a standby reconciled");
    assert_eq!(leader.log.lock().len(), NAMES.len());

    let killed = Instant::now();
    kill(leader, &leader_lock).await;
    let acquired = until_holder(&lock, "standby").await;
    assert!(
        acquired - killed <= takeover_within(),
        "{:?}",
        acquired - killed
    );
    settle(Duration::from_millis(200)).await;
    let log = standby.log.lock().clone();
    assert_eq!(
        log.len(),
        NAMES.len(),
        "every key reconciled on takeover: {log:?}"
    );
    let first = log[0].2;
    assert!(
        first - acquired <= Duration::from_millis(50),
        "acquire to first reconcile: {:?}",
        first - acquired
    );
    standby.handle.stop();
    standby.run.await.unwrap().unwrap();
    standby.factory.shutdown().await;
}

/// A standby never reconciles while another replica holds the lease, for
/// as long as that lasts, though its handlers see every change.
#[tokio::test(start_paused = true)]
async fn no_reconcile_before_leading() {
    let lock = InMemoryLeaseLock::new();
    let leader = replica("leader", lock.clone(), Config::default());
    settle(Duration::from_secs(1)).await;
    let standby = replica("standby", lock.clone(), Config::default());
    for i in 0..20 {
        let line = format!("{}\n", ev("MODIFIED", cm("c", &(200 + i).to_string())));
        standby.watch.send(Bytes::from(line)).unwrap();
        settle(Duration::from_secs(10)).await;
    }
    assert_eq!(holder(&lock), "leader");
    assert!(standby.handle.informer::<ConfigMap>().has_synced());
    assert!(standby.log.lock().is_empty(), "{:?}", standby.log.lock());
    for r in [leader, standby] {
        r.handle.stop();
        r.run.await.unwrap().unwrap();
        r.factory.shutdown().await;
    }
}

/// What changed while a replica stood by is reconciled first when it takes
/// over (a live change outranks the initial list); with
/// `Config::full_resync_on_takeover` off, only what changed is.
#[tokio::test(start_paused = true)]
async fn changes_while_standing_by_are_reconciled_on_takeover() {
    for full_resync in [true, false] {
        let lock = InMemoryLeaseLock::new();
        let leader_lock = lock.handle();
        let leader = replica("leader", leader_lock.clone(), Config::default());
        settle(Duration::from_secs(1)).await;
        let config = Config {
            full_resync_on_takeover: full_resync,
            ..Config::default()
        };
        let standby = replica("standby", lock.clone(), config);
        settle(Duration::from_secs(5)).await;
        let line = format!("{}\n", ev("MODIFIED", cm("c", "200")));
        standby.watch.send(Bytes::from(line)).unwrap();
        settle(Duration::from_secs(1)).await;
        assert!(standby.log.lock().is_empty());
        kill(leader, &leader_lock).await;
        until_holder(&lock, "standby").await;
        settle(Duration::from_millis(500)).await;
        let log = standby.log.lock().clone();
        assert_eq!(log[0].0, "c", "the change first: {log:?}");
        assert_eq!(log[0].1, Trigger::Updated);
        if full_resync {
            let mut keys: Vec<_> = log.iter().map(|(k, _, _)| k.as_str()).collect();
            keys.sort_unstable();
            assert_eq!(keys, NAMES, "every key on takeover");
        } else {
            assert_eq!(log.len(), 1, "only what changed: {log:?}");
        }
        standby.handle.stop();
        standby.run.await.unwrap().unwrap();
        standby.factory.shutdown().await;
    }
}

/// `Config::warm_standby` off: a cold standby does not start its informers
/// while another replica leads (its cache never syncs), and
/// after the leader is killed it takes the lease, then starts its
/// informers and reconciles every key.
#[tokio::test(start_paused = true)]
async fn cold_standby_starts_its_informers_only_when_leading() {
    let lock = InMemoryLeaseLock::new();
    let leader_lock = lock.handle();
    let leader = replica("leader", leader_lock.clone(), Config::default());
    settle(Duration::from_secs(1)).await;
    let config = Config {
        warm_standby: false,
        ..Config::default()
    };
    let (factory, watch) = factory();
    let ctl = Controller::<ConfigMap>::new(&factory, config.name("cm"))
        .leader_election(LeaderElectionConfig::new("standby"), lock.clone());
    let handle = ctl.handle();
    let log: Log = Arc::default();
    let run = tokio::spawn(ctl.run(
        |req: Request<ConfigMap>, log: Log| async move {
            log.lock()
                .push((req.name.clone(), req.trigger.clone(), Instant::now()));
            Ok::<_, io::Error>(Action::await_change())
        },
        log.clone(),
    ));
    settle(Duration::from_secs(30)).await;
    assert!(
        !handle.informer::<ConfigMap>().has_synced(),
        "a cold standby started its informers"
    );
    assert!(log.lock().is_empty());
    kill(leader, &leader_lock).await;
    until_holder(&lock, "standby").await;
    settle(Duration::from_secs(2)).await;
    assert!(handle.informer::<ConfigMap>().has_synced());
    assert_eq!(log.lock().len(), NAMES.len(), "{:?}", log.lock());
    handle.stop();
    run.await.unwrap().unwrap();
    drop(watch);
    factory.shutdown().await;
}
