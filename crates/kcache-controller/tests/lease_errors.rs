//! A standby that cannot read its Lease is loud: one WARN with what to
//! fix (not one per attempt), a metric, and `/readyz` 503 once it lasted a
//! lease duration. Its own test binary: it captures the logs with a
//! thread-local subscriber, which other tests running in parallel in the
//! same binary would disturb (tracing caches per-callsite interest
//! process-wide).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{Action, Config, Controller, MetricsRegistry, Request};
use kcache_informer::SharedInformerFactory;
use kcache_lease::{LeaderElectionConfig, LeaseLock};
use kcache_lease::{LeaderElectionRecord, LeaseError};
use kcache_testing::fake::{Fake, cm_items, list_json};
use kcache_testing::logs::LogBuffer;

/// A lease lock whose every request is refused by RBAC.
struct Forbidden;

#[async_trait]
impl LeaseLock for Forbidden {
    async fn get(&self) -> Result<Option<(LeaderElectionRecord, String)>, LeaseError> {
        Err(LeaseError::Forbidden {
            verb: "get",
            lease: self.describe(),
            message: "leases.coordination.k8s.io \"cm\" is forbidden".into(),
        })
    }
    async fn create(&self, _: &LeaderElectionRecord) -> Result<String, LeaseError> {
        unreachable!("get never succeeds")
    }
    async fn update(&self, _: &LeaderElectionRecord, _: &str) -> Result<String, LeaseError> {
        unreachable!("get never succeeds")
    }
    fn describe(&self) -> String {
        "kube-system/cm".into()
    }
}

#[tokio::test(start_paused = true)]
async fn lease_errors_are_warned_and_fail_readiness() {
    let (logs, _guard) = LogBuffer::set_default(tracing::Level::INFO);

    // one ConfigMap listed, every watch held open, silent
    let list = list_json("100", "", cm_items(&["a"]));
    let factory = SharedInformerFactory::builder(Fake::serving(list).client)
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
        .metrics(registry.clone())
        .leader_election(
            // client-go's documented defaults: 15 s lease, 10 s renew
            // deadline, 2 s retry period.
            LeaderElectionConfig::new("leader"),
            Forbidden,
        );
    let handle = ctl.handle();
    let run =
        tokio::spawn(ctl.run(
            |_req: Request<ConfigMap>, _: Arc<()>| async move {
                Ok::<_, io::Error>(Action::await_change())
            },
            Arc::new(()),
        ));
    // Synced and standing by: ready, until the failures lasted a lease
    // duration.
    // (the informer's listener threads run on the real clock: wait for
    // them without letting the paused clock run ahead)
    for _ in 0..1000 {
        if handle.health().readiness().0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (ready, reason) = handle.health().readiness();
    assert!(ready, "{reason}\n{}", logs.text());
    assert!(reason.contains("standing by"), "{reason}");
    tokio::time::sleep(Duration::from_secs(16)).await;
    let (ready, reason) = handle.health().readiness();
    assert!(
        !ready,
        "a candidate that cannot read its lease is ready: {reason}"
    );
    assert!(
        reason.contains("leader election failing") && reason.contains("forbidden to get"),
        "{reason}"
    );
    assert!(
        reason.contains("leases.coordination.k8s.io") && reason.contains("Role"),
        "the reason says what to fix: {reason}"
    );
    let metrics = registry.encode();
    let errors = metrics
        .lines()
        .find(|l| l.starts_with("kcache_leader_election_errors_total{"))
        .unwrap_or_default()
        .to_owned();
    let count: f64 = errors
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    // a retry every 2 s with jitter over the 16 s, from whenever the
    // elector started (the readiness wait above advances the paused clock
    // by a varying amount under load): at least 3 failures, usually 4 to 8
    assert!(count >= 3.0, "failures counted: {errors:?}");

    // One WARN for the lasting failure (not one per attempt), with the fix.
    let text = logs.text();
    let warns = logs.lines_with(&["WARN", "the lease get failed"]);
    assert_eq!(warns.len(), 1, "{text}");
    assert!(
        warns[0].contains("grant the controller's service account"),
        "{}",
        warns[0]
    );
    assert!(!text.contains("ERROR"), "{text}");
    // ... and it is repeated while it lasts, once a minute.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let again = logs.lines_with(&["WARN", "the lease get failed"]).len();
    assert_eq!(again, 2);
    handle.stop();
    run.await.unwrap().unwrap();
    factory.shutdown().await;
}
