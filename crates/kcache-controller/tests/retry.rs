//! Retry control on an in-process fake apiserver and tokio's paused clock:
//! terminal errors are counted and not retried, a retried failure logs when
//! it comes back, and a controller whose caches never sync fails with the
//! informers that did not sync and the last error of each. Its own test
//! binary: it captures the logs with a thread-local subscriber.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kcache_controller::{
    Action, Config, Controller, ControllerError, MetricsRegistry, Request, TerminalError,
};
use kcache_informer::SharedInformerFactory;
use kcache_testing::fake::{End, Fake, Reply, cm_items, list_json, status};
use kcache_testing::logs::LogBuffer;
use parking_lot::Mutex;
use serde_json::json;

/// A client that lists the ConfigMaps `names` (`undecodable`: its data is
/// not a string map) and holds watches open; with `lists_fail`, every
/// request fails with 500.
fn client(names: &[&str], lists_fail: bool) -> kube::Client {
    let mut items = cm_items(names);
    for (item, name) in items.iter_mut().zip(names) {
        item["data"] = if *name == "undecodable" {
            json!({"k": 1})
        } else {
            json!({})
        };
    }
    let list = list_json("100", "", items);
    Fake::new(move |r| {
        if lists_fail {
            status(500, "InternalError", "etcdserver: leader changed")
        } else if r.is_watch() {
            Reply::Chunks(vec![], End::Hang)
        } else {
            Reply::Json(200, list.clone())
        }
    })
    .client
}

fn counter(registry: &MetricsRegistry, family: &str) -> f64 {
    registry
        .encode()
        .lines()
        .find(|l| l.starts_with(family))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

type Attempts = Arc<Mutex<HashMap<String, usize>>>;

#[tokio::test(start_paused = true)]
async fn terminal_errors_are_not_retried() {
    let (logs, _guard) = LogBuffer::set_default(tracing::Level::INFO);
    let factory =
        SharedInformerFactory::builder(client(&["invalid", "flaky", "undecodable"], false))
            .config(kcache_informer::InformerConfig {
                watch: kcache_reflector::WatchConfig {
                    use_watch_list: false,
                    ..kcache_reflector::WatchConfig::default()
                },
                ..kcache_informer::InformerConfig::default()
            })
            .build();
    let registry = MetricsRegistry::new();
    let ctl = Controller::<ConfigMap>::new(&factory, Config::default().name("cm"))
        .metrics(registry.clone());
    let handle = ctl.handle();
    let attempts: Attempts = Arc::default();
    let run = tokio::spawn(ctl.run(
        |req: Request<ConfigMap>, attempts: Attempts| async move {
            *attempts.lock().entry(req.name.clone()).or_default() += 1;
            let err: Box<dyn std::error::Error + Send + Sync> = if req.name == "invalid" {
                TerminalError::new("spec.replicas must not be negative").into()
            } else {
                "the apiserver is busy".into()
            };
            Err::<Action, _>(err)
        },
        attempts.clone(),
    ));
    // An hour of paused time: the flaky key is retried with growing delays
    // (5 ms doubling), the terminal one never again.
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_secs(36)).await;
        std::thread::sleep(Duration::from_millis(1));
    }
    handle.stop();
    run.await.unwrap().unwrap();
    factory.shutdown().await;
    let attempts = attempts.lock().clone();
    assert_eq!(attempts["invalid"], 1, "a terminal error is not retried");
    assert!(
        !attempts.contains_key("undecodable"),
        "an object that does not decode never reaches the reconciler"
    );
    assert!(
        attempts["flaky"] >= 10,
        "a plain error is retried: {attempts:?}"
    );
    assert_eq!(
        counter(
            &registry,
            "controller_runtime_terminal_reconcile_errors_total{controller=\"cm\"}"
        ),
        2.0,
        "the terminal error and the decode failure"
    );
    let text = logs.text();
    let terminal = logs.lines_with(&["terminal error: not retried"]);
    assert_eq!(terminal.len(), 2, "{text}");
    assert!(
        terminal
            .iter()
            .any(|l| l.contains("spec.replicas must not be negative")),
        "{text}"
    );
    assert!(
        terminal
            .iter()
            .any(|l| l.contains("decoding the cached object")),
        "{text}"
    );
    // every retried failure says when it comes back
    let retried = logs.lines_with(&["retrying with backoff"]);
    assert!(!retried.is_empty());
    assert!(retried[0].contains("retry_in=5ms"), "{}", retried[0]);
    assert!(retried[1].contains("retry_in=10ms"), "{}", retried[1]);
}

#[tokio::test(start_paused = true)]
async fn cache_sync_timeout_names_the_informers() {
    let factory = SharedInformerFactory::builder(client(&[], true))
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let ctl = Controller::<ConfigMap>::new(
        &factory,
        Config {
            cache_sync_timeout: Some(Duration::from_secs(30)),
            ..Config::default().name("cm")
        },
    )
    .owns::<Secret>();
    let started = tokio::time::Instant::now();
    let run =
        tokio::spawn(ctl.run(
            |_req: Request<ConfigMap>, _: Arc<()>| async move {
                Ok::<_, io::Error>(Action::await_change())
            },
            Arc::new(()),
        ));
    let mut waited = 0;
    let err = loop {
        if run.is_finished() {
            break run.await.unwrap().expect_err("the caches never sync");
        }
        waited += 1;
        assert!(
            waited < 3000,
            "run did not give up within 5 minutes of paused time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(started.elapsed().as_secs(), 30);
    let ControllerError::CacheSyncTimeout { unsynced, .. } = &err else {
        panic!("{err:?}");
    };
    let names: Vec<&str> = unsynced.iter().map(|u| u.informer.as_str()).collect();
    assert_eq!(names, ["configmaps", "secrets"]);
    for u in unsynced {
        let last = u.last_error.as_deref().unwrap_or_default();
        assert!(last.contains("etcdserver: leader changed"), "{u:?}");
    }
    let text = err.to_string();
    assert!(
        text.contains("did not sync within 30s")
            && text.contains("configmaps (last error:")
            && text.contains("secrets (last error:"),
        "{text}"
    );
    factory.shutdown().await;
}

/// A provider of the controller's metrics that is not Prometheus: counts
/// by name in a map.
#[derive(Clone, Default)]
struct MapProvider(Arc<Mutex<HashMap<String, f64>>>);

struct MapMetric(Arc<Mutex<HashMap<String, f64>>>, String);

impl kcache_core::metrics::CounterMetric for MapMetric {
    fn inc_by(&self, n: u64) {
        *self.0.lock().entry(self.1.clone()).or_default() += n as f64;
    }
}
impl kcache_core::metrics::SettableGaugeMetric for MapMetric {
    fn set(&self, value: f64) {
        self.0.lock().insert(self.1.clone(), value);
    }
}

impl MapProvider {
    fn metric(&self, name: String) -> Box<MapMetric> {
        Box::new(MapMetric(self.0.clone(), name))
    }
}

impl kcache_controller::ControllerMetricsProvider for MapProvider {
    fn new_reconcile_total_metric(
        &self,
        c: &str,
        result: &str,
    ) -> Box<dyn kcache_core::metrics::CounterMetric> {
        self.metric(format!("{c}/reconcile/{result}"))
    }
    fn new_reconcile_errors_metric(&self, c: &str) -> Box<dyn kcache_core::metrics::CounterMetric> {
        self.metric(format!("{c}/errors"))
    }
    fn new_reconcile_panics_metric(&self, c: &str) -> Box<dyn kcache_core::metrics::CounterMetric> {
        self.metric(format!("{c}/panics"))
    }
    fn new_terminal_reconcile_errors_metric(
        &self,
        c: &str,
    ) -> Box<dyn kcache_core::metrics::CounterMetric> {
        self.metric(format!("{c}/terminal"))
    }
    fn new_reconcile_time_metric(&self, _: &str) -> Box<dyn kcache_core::metrics::HistogramMetric> {
        Box::new(kcache_core::metrics::NoopMetric)
    }
    fn new_active_workers_metric(&self, _: &str) -> Box<dyn kcache_core::metrics::GaugeMetric> {
        Box::new(kcache_core::metrics::NoopMetric)
    }
    fn new_max_concurrent_reconciles_metric(
        &self,
        c: &str,
    ) -> Box<dyn kcache_core::metrics::SettableGaugeMetric> {
        self.metric(format!("{c}/max_concurrent"))
    }
    fn new_leader_status_metric(
        &self,
        _: &str,
    ) -> Box<dyn kcache_core::metrics::SettableGaugeMetric> {
        Box::new(kcache_core::metrics::NoopMetric)
    }
    fn new_leader_errors_metric(&self, _: &str) -> Box<dyn kcache_core::metrics::CounterMetric> {
        Box::new(kcache_core::metrics::NoopMetric)
    }
    fn new_shard_members_metric(
        &self,
        _: &str,
        _: &str,
    ) -> Box<dyn kcache_core::metrics::SettableGaugeMetric> {
        Box::new(kcache_core::metrics::NoopMetric)
    }
    fn new_shard_owned_keys_metric(
        &self,
        _: &str,
        _: &str,
    ) -> Box<dyn kcache_core::metrics::SettableGaugeMetric> {
        Box::new(kcache_core::metrics::NoopMetric)
    }
    fn new_shard_handovers_metric(
        &self,
        _: &str,
        _: &str,
        _: &str,
    ) -> Box<dyn kcache_core::metrics::CounterMetric> {
        Box::new(kcache_core::metrics::NoopMetric)
    }
}

#[tokio::test(start_paused = true)]
async fn a_metrics_provider_of_your_own_records_reconciles() {
    let factory = SharedInformerFactory::builder(client(&["ok", "invalid"], false))
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let provider = MapProvider::default();
    let ctl = Controller::<ConfigMap>::new(&factory, Config::default().name("cm").workers(3))
        .metrics_provider(Arc::new(provider.clone()));
    let handle = ctl.handle();
    let run = tokio::spawn(ctl.run(
        |req: Request<ConfigMap>, _: Arc<()>| async move {
            if req.name == "invalid" {
                let e: Box<dyn std::error::Error + Send + Sync> =
                    TerminalError::new("spec.replicas must not be negative").into();
                return Err(e);
            }
            Ok(Action::await_change())
        },
        Arc::new(()),
    ));
    for _ in 0..100 {
        if provider.0.lock().get("cm/reconcile/error") == Some(&1.0)
            && provider.0.lock().get("cm/reconcile/success") == Some(&1.0)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::thread::sleep(Duration::from_millis(1));
    }
    handle.stop();
    run.await.unwrap().unwrap();
    factory.shutdown().await;
    let m = provider.0.lock().clone();
    assert_eq!(m.get("cm/reconcile/success"), Some(&1.0), "{m:?}");
    assert_eq!(m.get("cm/reconcile/error"), Some(&1.0), "{m:?}");
    assert_eq!(m.get("cm/errors"), Some(&1.0), "{m:?}");
    assert_eq!(m.get("cm/terminal"), Some(&1.0), "{m:?}");
    assert_eq!(m.get("cm/max_concurrent"), Some(&3.0), "{m:?}");
}

/// `Config::reconcile_timeout`: a reconcile running past it has its
/// cancellation fired, is dropped, and its key is retried with the rate
/// limiter's backoff (5 ms, then 10 ms: the failure count grows); each
/// timeout is counted and logged; a reconcile within the limit is untouched.
#[tokio::test(start_paused = true)]
async fn reconcile_timeout_cancels_and_retries() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (logs, _guard) = LogBuffer::set_default(tracing::Level::INFO);
    let factory = SharedInformerFactory::builder(client(&["slow", "quick"], false))
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let registry = MetricsRegistry::new();
    let config = Config {
        reconcile_timeout: Some(Duration::from_secs(2)),
        // one worker each: the gaps below are the timeout and the backoff only
        ..Config::default().name("cm").workers(2)
    };
    let ctl = Controller::<ConfigMap>::new(&factory, config).metrics(registry.clone());
    let handle = ctl.handle();
    #[derive(Default)]
    struct Seen {
        /// (retries the request carried, when it started) per attempt of `slow`
        slow: Mutex<Vec<(u32, tokio::time::Instant)>>,
        quick: AtomicUsize,
        cancelled: AtomicUsize,
    }
    let seen = Arc::new(Seen::default());
    let run = tokio::spawn(ctl.run(
        |req: Request<ConfigMap>, seen: Arc<Seen>| async move {
            if req.name == "quick" {
                // within the limit: not cancelled
                tokio::time::sleep(Duration::from_secs(1)).await;
                seen.quick.fetch_add(1, Ordering::SeqCst);
                return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Action::await_change());
            }
            let attempt = {
                let mut slow = seen.slow.lock();
                slow.push((req.retries, tokio::time::Instant::now()));
                slow.len()
            };
            let token = req.cancellation.clone();
            let watcher = seen.clone();
            tokio::spawn(async move {
                token.cancelled().await;
                watcher.cancelled.fetch_add(1, Ordering::SeqCst);
            });
            if attempt <= 2 {
                // hangs: only the timeout ends it
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            Ok(Action::await_change())
        },
        seen.clone(),
    ));
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::thread::sleep(Duration::from_millis(1));
    }
    // (read before the stop, which cancels every request's token)
    let cancelled = seen.cancelled.load(Ordering::SeqCst);
    handle.stop();
    run.await.unwrap().unwrap();
    factory.shutdown().await;
    let slow = seen.slow.lock().clone();
    assert_eq!(
        slow.len(),
        3,
        "two timed-out attempts, then one that returns: {slow:?}"
    );
    assert_eq!(
        slow.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
        [0, 1, 2],
        "each timeout is a failure: the count grows"
    );
    // retried after the timeout plus the backoff (5 ms, then 10 ms)
    let gap = |i: usize| slow[i + 1].1 - slow[i].1;
    assert_eq!(gap(0), Duration::from_secs(2) + Duration::from_millis(5));
    assert_eq!(gap(1), Duration::from_secs(2) + Duration::from_millis(10));
    assert_eq!(
        cancelled, 2,
        "each timed-out reconcile's cancellation fired"
    );
    assert_eq!(
        seen.quick.load(Ordering::SeqCst),
        1,
        "a reconcile within the limit runs to its end"
    );
    assert_eq!(
        counter(
            &registry,
            "kcache_controller_reconcile_timeouts_total{controller=\"cm\"}"
        ),
        2.0
    );
    assert_eq!(
        counter(
            &registry,
            "controller_runtime_reconcile_errors_total{controller=\"cm\"}"
        ),
        2.0
    );
    let timeouts = logs.lines_with(&["reconcile timeout"]);
    assert_eq!(timeouts.len(), 2, "{}", logs.text());
    assert!(timeouts[0].contains("timeout=2s"), "{}", timeouts[0]);
}

/// Only failures advance a key's backoff: a key whose object changes while
/// it waits out a backoff is reconciled at the change (not at the end of
/// the backoff), its request carries the failures so far (the change added
/// none), the pending retry does not run again after it, and a success
/// resets the count (the next failure waits 5 ms again).
#[tokio::test(start_paused = true)]
async fn event_requeue_does_not_advance_backoff() {
    use kcache_controller::Trigger;
    use kcache_testing::fake::{cm, ev};
    use tokio::time::Instant;
    let (fake, tx) = Fake::serving_with_watch(list_json("100", "", cm_items(&["flaky"])));
    let factory = SharedInformerFactory::builder(fake.client)
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let ctl = Controller::<ConfigMap>::new(&factory, Config::default().name("cm"));
    let handle = ctl.handle();
    type Seen = Arc<Mutex<Vec<(u32, Instant, Trigger)>>>;
    let seen: Seen = Arc::default();
    let run = tokio::spawn(ctl.run(
        |req: Request<ConfigMap>, seen: Seen| async move {
            let attempt = {
                let mut s = seen.lock();
                s.push((req.retries, Instant::now(), req.trigger.clone()));
                s.len()
            };
            // attempts 1-4 and 6 fail; 5 and 7 succeed
            if attempt <= 4 || attempt == 6 {
                Err::<Action, Box<dyn std::error::Error + Send + Sync>>(
                    "the apiserver is busy".into(),
                )
            } else {
                Ok(Action::await_change())
            }
        },
        seen.clone(),
    ));
    let send = |rv: &str| {
        let line = format!("{}\n", ev("MODIFIED", cm("flaky", rv)));
        tx.send(bytes::Bytes::from(line)).unwrap();
        Instant::now()
    };
    let settle = |ms: u64| async move {
        for _ in 0..ms {
            tokio::time::sleep(Duration::from_millis(1)).await;
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    // four failures: retries at +5, +15, +35 ms; the next is due at +75 ms
    let mut waited = 0;
    while seen.lock().len() < 4 && waited < 5_000 {
        settle(1).await;
        waited += 1;
    }
    assert_eq!(seen.lock().len(), 4, "four attempts: {:?}", seen.lock());
    let fourth = seen.lock()[3].1;
    // the change comes 10 ms into the 40 ms backoff
    tokio::time::sleep_until(fourth + Duration::from_millis(10)).await;
    let changed = send("200");
    settle(200).await;
    {
        let s = seen.lock();
        assert_eq!(
            s.len(),
            5,
            "the change reconciled once, the pending retry not again: {s:?}"
        );
        let (retries, at, trigger) = &s[4];
        assert_eq!(*retries, 4, "the change added no failure");
        assert!(
            *at - changed < Duration::from_millis(5),
            "reconciled at the change, not at the backoff's end: {:?}",
            *at - changed
        );
        assert_eq!(*trigger, Trigger::Updated);
    }
    // a success reset the count: the next failure retries after 5 ms
    let changed = send("300");
    settle(200).await;
    let s = seen.lock().clone();
    assert_eq!(s.len(), 7, "{s:?}");
    assert_eq!(s[5].0, 0, "the count reset on success");
    assert!(s[5].1 - changed < Duration::from_millis(5));
    assert_eq!(s[6].0, 1);
    assert_eq!(s[6].1 - s[5].1, Duration::from_millis(5), "a fresh backoff");
    handle.stop();
    run.await.unwrap().unwrap();
    factory.shutdown().await;
}
