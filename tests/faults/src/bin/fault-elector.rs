//! A leader-election candidate for fault 8 (`leader_election_kill_and_partition`
//! in `tests/faults/tests/faults.rs`), run as a child process so that the
//! test can SIGKILL it.
//!
//! ```text
//! fault-elector <kubeconfig> <server-url> <namespace> <lease> <identity> <log>
//!               <lease-ms> <renew-ms> <retry-ms>
//! ```
//!
//! It connects to `server-url` (normally a fault proxy) with the
//! kubeconfig's credentials, runs a [`LeaderElector`] on the Lease
//! `namespace/lease`, and while it leads "acts" every 20 ms, each time
//! after checking both its leading token and, on the clock, that its renew
//! deadline has not passed ([`LeaderElector::lease_expiry`] minus lease
//! duration minus renew deadline): the token alone is cancelled by the
//! elector's task, which after a pause (SIGSTOP) may run after this one. Each act, and
//! each change of state, is appended to `log` as `<what> <unix nanos>`
//! (`start`, `lead`, `act`, `stop` when the leading token is cancelled,
//! `lost` when the election ended because renewals failed). `lost` is
//! written once the acting task has stopped (or after 1 s if it has not),
//! so every `act` of a term comes before its `lost`: an `act` after it is
//! a candidate acting without leading. After a loss it stands by again with
//! the same identity.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kcache_fault_suite::StampLog;
use kcache_lease::{KubeLeaseLock, LeaderCallbacks};
use kcache_lease::{LeaderElectionConfig, LeaderElector};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

fn ms(arg: Option<String>) -> Result<Duration, String> {
    arg.and_then(|a| a.parse().ok())
        .map(Duration::from_millis)
        .ok_or_else(|| "a duration in milliseconds".to_owned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mut next = |what: &str| args.next().ok_or_else(|| format!("missing {what}"));
    let kubeconfig = next("kubeconfig")?;
    let server = next("server url")?;
    let namespace = next("namespace")?;
    let lease = next("lease")?;
    let identity = next("identity")?;
    let log_path = next("log")?;
    let lease_duration = ms(next("lease ms").ok())?;
    let renew_deadline = ms(next("renew ms").ok())?;
    let retry_period = ms(next("retry ms").ok())?;

    let kc = Kubeconfig::read_from(&kubeconfig).map_err(|e| e.to_string())?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    config.cluster_url = server.parse().map_err(|e| format!("{e}"))?;
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let log = StampLog::open(&log_path).map_err(|e| e.to_string())?;
    log.note("start", "");
    let lock = Arc::new(KubeLeaseLock::new(client, &namespace, &lease));
    let config = LeaderElectionConfig::new(identity)
        .lease_duration(lease_duration)
        .renew_deadline(renew_deadline)
        .retry_period(retry_period);
    let cancel = CancellationToken::new();
    // a leader acts only before its renew deadline: the last successful
    // lease write started less than the renew deadline ago
    let margin = lease_duration.saturating_sub(renew_deadline);
    loop {
        let elector =
            Arc::new(LeaderElector::new(config.clone(), lock.clone()).map_err(|e| e.to_string())?);
        let guard = elector.clone();
        let acting = log.clone();
        let task: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>> = Arc::default();
        let slot = task.clone();
        let lost = elector
            .run(
                cancel.clone(),
                LeaderCallbacks {
                    on_started_leading: Box::new(move |token| {
                        let acts = tokio::spawn(async move {
                            acting.note("lead", "");
                            loop {
                                // The token is cancelled by the elector's
                                // own task, which may run after this one
                                // (after a pause every expired timer fires at
                                // once): the lease is also checked on the
                                // clock before each act.
                                let in_time = guard.lease_expiry().is_some_and(|expiry| {
                                    tokio::time::Instant::now() + margin < expiry
                                });
                                if token.is_cancelled() || !in_time {
                                    acting.note("stop", "");
                                    return;
                                }
                                acting.note("act", "");
                                tokio::select! {
                                    _ = token.cancelled() => {}
                                    _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                                }
                            }
                        });
                        *slot
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(acts);
                    }),
                    ..LeaderCallbacks::default()
                },
            )
            .await;
        let acts = task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(acts) = acts {
            // bounded: an acting task that ignores its token keeps going,
            // and its later acts then show up after `lost`
            let _ = tokio::time::timeout(Duration::from_secs(1), acts).await;
        }
        if lost {
            log.note("lost", "");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
