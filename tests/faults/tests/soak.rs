//! Load and soak (issue 9): N ConfigMaps (100,000 by default) synced by an
//! informer, then changes at a target rate (1,000/s) for M minutes (10),
//! against a local control plane of its own. Reported: initial sync time,
//! the achieved change rate, RSS samples and their slope (MB/min, least
//! squares over the change phase), listener backlogs during the run and
//! after catch-up, and the event lag (the time the handler sees a change
//! minus the time the driver's write returned; a handler that saw it first
//! counts 0) p50/p99/max. At the end the cache must equal a fresh LIST.
//!
//! Not part of the quick suite: `#[ignore]`, run by `cargo xtask e2e
//! --soak` (release build), or:
//!
//! ```text
//! KCACHE_SOAK_OBJECTS=100000 KCACHE_SOAK_RATE=1000 KCACHE_SOAK_MINUTES=10 \
//!   cargo test --release -p kcache-fault-suite --test soak -- --ignored --nocapture
//! ```
//!
//! RSS is the test process's: informer, cache and handler, plus the
//! driver's client and tasks (bounded: at most 64 writes in flight).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kcache_core::{CachedObject, ObjectOrTombstone};
use kcache_envtest::ControlPlane;
use kcache_informer::{ResourceEventHandler, SharedIndexInformer, wait_for_cache_sync};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::*;
use tokio::sync::Semaphore;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_mb() -> f64 {
    kcache_testing::proc_status_kib("VmRSS") as f64 / 1024.0
}

/// Least-squares slope of (minutes, MB).
fn slope(samples: &[(f64, f64)]) -> f64 {
    let n = samples.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = samples.iter().map(|s| s.0).sum::<f64>() / n;
    let my = samples.iter().map(|s| s.1).sum::<f64>() / n;
    let num: f64 = samples.iter().map(|s| (s.0 - mx) * (s.1 - my)).sum();
    let den: f64 = samples.iter().map(|s| (s.0 - mx) * (s.0 - mx)).sum();
    if den == 0.0 { 0.0 } else { num / den }
}

/// Matches writes and notifications by (key, resourceVersion): whichever
/// comes second records the lag.
///
/// Lags go into a fixed histogram (100 µs buckets up to 60 s), so that
/// recording them does not grow the process's memory.
#[derive(Clone)]
struct Lag {
    pending: Arc<Mutex<Pending>>,
    buckets: Arc<Mutex<Vec<u64>>>,
    seen: Arc<AtomicU64>,
}

/// (key, resourceVersion) -> (seen by the handler first?, when).
type Pending = HashMap<(String, u64), (bool, Instant)>;

const BUCKET_US: u64 = 100;
const BUCKETS: usize = 600_000;

impl Default for Lag {
    fn default() -> Self {
        Lag {
            pending: Arc::default(),
            buckets: Arc::new(Mutex::new(vec![0; BUCKETS + 1])),
            seen: Arc::default(),
        }
    }
}

impl Lag {
    /// `from_handler`: the handler saw it (else: the write returned).
    fn mark(&self, key: String, rv: u64, from_handler: bool) {
        let now = Instant::now();
        let mut p = self.pending.lock().expect("lag lock");
        match p.remove(&(key.clone(), rv)) {
            Some((other_is_handler, t)) if other_is_handler != from_handler => {
                drop(p);
                let lag = if from_handler {
                    now.saturating_duration_since(t)
                } else {
                    Duration::ZERO // the handler saw it before the write returned
                };
                let i = ((lag.as_micros() as u64) / BUCKET_US).min(BUCKETS as u64) as usize;
                self.buckets.lock().expect("lag lock")[i] += 1;
            }
            _ => {
                p.insert((key, rv), (from_handler, now));
            }
        }
    }
    /// The upper bound of the bucket holding the q-quantile.
    fn percentile(&self, q: f64) -> Duration {
        let b = self.buckets.lock().expect("lag lock");
        let total: u64 = b.iter().sum();
        if total == 0 {
            return Duration::ZERO;
        }
        let rank = ((total as f64 * q).ceil() as u64).max(1);
        let mut acc = 0;
        for (i, n) in b.iter().enumerate() {
            acc += n;
            if acc >= rank {
                return Duration::from_micros((i as u64 + 1) * BUCKET_US);
            }
        }
        Duration::from_micros((BUCKETS as u64 + 1) * BUCKET_US)
    }
    fn count(&self) -> u64 {
        self.buckets.lock().expect("lag lock").iter().sum()
    }
    /// Writes whose notification has not arrived yet (or notifications
    /// whose write has not returned).
    fn unmatched(&self) -> usize {
        self.pending.lock().expect("lag lock").len()
    }
}

fn rv_of(o: &CachedObject<ConfigMap>) -> u64 {
    o.resource_version()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

impl ResourceEventHandler<ConfigMap> for Lag {
    fn on_add(&self, o: &CachedObject<ConfigMap>, initial: bool) {
        self.seen.fetch_add(1, Ordering::Relaxed);
        if !initial {
            self.mark(o.key().to_string(), rv_of(o), true);
        }
    }
    fn on_update(&self, _old: &CachedObject<ConfigMap>, o: &CachedObject<ConfigMap>) {
        self.seen.fetch_add(1, Ordering::Relaxed);
        self.mark(o.key().to_string(), rv_of(o), true);
    }
    fn on_delete(&self, _o: &ObjectOrTombstone<ConfigMap>) {
        self.seen.fetch_add(1, Ordering::Relaxed);
    }
}

fn cm(name: &str, v: u64) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": { "app": "soak" } },
        "data": { "v": v.to_string(), "pad": "x".repeat(256) }
    }))
    .expect("a valid ConfigMap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: minutes long; run by cargo xtask e2e --soak"]
async fn soak() {
    let seed = env_u64("KCACHE_FAULT_SEED", rand::random());
    eprintln!("soak: seed {seed} (KCACHE_FAULT_SEED)");
    let objects = env_u64("KCACHE_SOAK_OBJECTS", 100_000);
    let rate = env_u64("KCACHE_SOAK_RATE", 1000).max(1);
    let minutes = env_u64("KCACHE_SOAK_MINUTES", 10);
    let seconds = env_u64("KCACHE_SOAK_SECONDS", minutes * 60);
    let cp = ControlPlane::start().await.expect("control plane");
    let ns = cp.create_namespace("soak").await.expect("namespace");
    let client = cp.client().expect("client");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // 1. N objects
    let started = Instant::now();
    let sem = Arc::new(Semaphore::new(64));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..objects {
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        let api = api.clone();
        tasks.spawn(async move {
            let name = format!("cm{i}");
            for _ in 0..5 {
                match api.create(&PostParams::default(), &cm(&name, 0)).await {
                    Ok(_) => break,
                    Err(kube::Error::Api(s)) if s.code == 409 => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    eprintln!(
        "soak: created {objects} ConfigMaps in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // 2. informer sync
    let rss_before = rss_mb();
    let informer = SharedIndexInformer::<ConfigMap>::builder(client.clone())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let lag = Lag::default();
    let reg = informer.add_event_handler(lag.clone()).expect("handler");
    let (cancel, task) = spawn_informer(&informer);
    let started = Instant::now();
    let sync_cancel = tokio_util::sync::CancellationToken::new();
    let synced = tokio::time::timeout(
        Duration::from_secs(900),
        wait_for_cache_sync(&sync_cancel, &[&informer, &reg]),
    )
    .await;
    assert!(matches!(synced, Ok(true)), "no sync within 900 s");
    let sync_time = started.elapsed();
    let rss_synced = rss_mb();
    eprintln!(
        "soak: informer synced {} objects in {:.1}s; RSS {rss_before:.0} MB before, {rss_synced:.0} MB synced",
        informer.indexer().list().len(),
        sync_time.as_secs_f64()
    );

    // 3. changes at `rate` for `seconds`
    let mut rng = StdRng::seed_from_u64(seed);
    // 10 ms ticks, rate/100 writes per tick (a 1 ms timer cannot keep 1,000/s)
    let period = Duration::from_millis(10);
    let per_tick = rate as f64 / 100.0;
    let mut due = 0.0f64;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut samples: Vec<(f64, f64)> = Vec::new();
    let mut backlog_max = 0usize;
    let mut next_sample = Instant::now();
    let phase = Instant::now();
    let mut sent = 0u64;
    let mut skipped = 0u64;
    while phase.elapsed() < Duration::from_secs(seconds) {
        tick.tick().await;
        if Instant::now() >= next_sample {
            let backlog: usize = informer.listener_backlogs().iter().map(|b| b.1).sum();
            backlog_max = backlog_max.max(backlog);
            let m = phase.elapsed().as_secs_f64() / 60.0;
            let rss = rss_mb();
            samples.push((m, rss));
            eprintln!(
                "soak: t={:.1} min, RSS {rss:.0} MB, writes ok {} failed {}, events {}, backlog {backlog}, unmatched {}, lag p50 {:?} p99 {:?}",
                m,
                ok.load(Ordering::Relaxed),
                failed.load(Ordering::Relaxed),
                lag.seen.load(Ordering::Relaxed),
                lag.unmatched(),
                lag.percentile(0.5),
                lag.percentile(0.99)
            );
            next_sample += Duration::from_secs(10);
        }
        due += per_tick;
        while due >= 1.0 {
            due -= 1.0;
            let Ok(permit) = sem.clone().try_acquire_owned() else {
                skipped += 1; // 64 writes in flight: the server is behind
                continue;
            };
            sent += 1;
            let i = rng.random_range(0..objects);
            let (api, ok, failed, lag) = (api.clone(), ok.clone(), failed.clone(), lag.clone());
            tokio::spawn(async move {
                let name = format!("cm{i}");
                let patch = serde_json::json!({ "data": { "v": sent.to_string() } });
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(o) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        let rv = o
                            .metadata
                            .resource_version
                            .and_then(|r| r.parse().ok())
                            .unwrap_or(0);
                        lag.mark(
                            format!("{}/{name}", o.metadata.namespace.unwrap_or_default()),
                            rv,
                            false,
                        );
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                drop(permit);
            });
        }
    }
    let _ = sem.acquire_many(64).await;
    let elapsed = phase.elapsed();
    let writes = ok.load(Ordering::Relaxed);

    // 4. catch-up, then the standard check
    let catch_up = Instant::now();
    let api_check: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let want = server_state(&api_check).await;
    loop {
        let cache: std::collections::BTreeMap<String, u64> = informer
            .indexer()
            .list()
            .iter()
            .map(|o| (o.key().to_string(), rv_of(o)))
            .collect();
        let backlog: usize = informer.listener_backlogs().iter().map(|b| b.1).sum();
        if cache == want && backlog == 0 {
            break;
        }
        assert!(
            catch_up.elapsed() < Duration::from_secs(300),
            "no catch-up within 300 s: cache {} keys vs LIST {}, backlog {backlog}",
            cache.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let backlog_after: Vec<(String, usize)> = informer.listener_backlogs();
    let rss_end = rss_mb();
    let s = slope(&samples);
    let rss_min = samples.iter().map(|s| s.1).fold(f64::MAX, f64::min);
    let rss_max = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    eprintln!(
        "RESULT soak: objects {objects}, initial sync {:.1}s, RSS synced {rss_synced:.0} MB; \
         changes {writes} ok / {} failed in {:.0}s = {:.0}/s (target {rate}/s, {skipped} writes skipped at 64 in flight); \
         RSS {rss_min:.0}-{rss_max:.0} MB during, {rss_end:.0} MB after, slope {s:+.2} MB/min over {} samples; \
         listener backlog max {backlog_max} during, {backlog_after:?} after catch-up ({:.1}s); \
         event lag p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} changes (100 µs buckets, upper bounds); \
         unmatched writes {}; cache == LIST ({} keys, same RVs)",
        sync_time.as_secs_f64(),
        failed.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        writes as f64 / elapsed.as_secs_f64(),
        samples.len(),
        catch_up.elapsed().as_secs_f64(),
        lag.percentile(0.5).as_secs_f64() * 1e3,
        lag.percentile(0.99).as_secs_f64() * 1e3,
        lag.percentile(1.0).as_secs_f64() * 1e3,
        lag.count(),
        lag.unmatched(),
        want.len()
    );
    stop_informer(cancel, task).await;
}
