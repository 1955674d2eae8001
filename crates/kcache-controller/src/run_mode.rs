//! How a controller runs: plain (every replica works every key), leader
//! elected (only the lease holder works), or sharded (each replica works
//! the keys it owns).

use std::sync::Arc;

use kcache_lease::shard::{Shard, ShardHooks, ShardMetrics};
use kcache_lease::{LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock};
use kube::Resource;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::ControllerError;
use crate::metrics::ControllerMetricsProvider;
use crate::reconciler::{Reconciler, Trigger};
use crate::server::Health;
use crate::shard_informers::Caches;
use crate::worker::{LeaseGuard, Primary, Shared, start_workers};
use kcache_core::metrics::SettableGaugeMetric;

/// The run mode chosen on the builder.
pub(crate) enum RunMode {
    /// Every replica works every key.
    Plain,
    /// Only the holder of the lease works.
    LeaderElected(LeaderElectionConfig, Arc<dyn LeaseLock>),
    /// Each replica works the keys it owns in its shard group.
    Sharded(Shard),
}

impl RunMode {
    /// Checks the mode's configuration before anything starts.
    pub(crate) fn validate(&self) -> Result<(), ControllerError> {
        match self {
            RunMode::Plain => Ok(()),
            RunMode::LeaderElected(cfg, _) => Ok(cfg.validate()?),
            RunMode::Sharded(s) => Ok(s
                .config()
                .validate()
                .map_err(kcache_lease::ShardError::from)?),
        }
    }

    /// The shard, when sharded.
    pub(crate) fn shard(&self) -> Option<&Shard> {
        match self {
            RunMode::Sharded(s) => Some(s),
            _ => None,
        }
    }

    /// The elector of a leader-elected controller (built here, once), for
    /// the workers to check the lease on the clock.
    pub(crate) fn elector(&self) -> Result<Option<Arc<LeaderElector>>, ControllerError> {
        match self {
            RunMode::LeaderElected(cfg, lock) => Ok(Some(Arc::new(LeaderElector::new(
                cfg.clone(),
                lock.clone(),
            )?))),
            _ => Ok(None),
        }
    }

    /// Runs the workers in this mode until `stop` (or, under a lease, until
    /// leadership or membership ends). `elector` is [`elector`](Self::elector)'s.
    pub(crate) async fn run<K, C, R>(
        self,
        shared: &Arc<Shared<K, C, R>>,
        config: &Config,
        stop: &CancellationToken,
        health: &Health,
        metrics: Option<&dyn ControllerMetricsProvider>,
        elector: Option<Arc<LeaderElector>>,
    ) -> Result<(), ControllerError>
    where
        K: Primary,
        C: Send + Sync + 'static,
        R: Reconciler<K, C>,
    {
        match self {
            RunMode::Plain => {
                let workers = start_workers(shared, config.workers);
                stop.cancelled().await;
                workers.stop(shared, config, None).await;
                Ok(())
            }
            RunMode::LeaderElected(..) => {
                let Some(elector) = elector else {
                    unreachable!("a leader-elected controller has an elector")
                };
                health.set_leader(elector.clone());
                let leader_gauge = metrics.map(|m| {
                    elector.set_error_counter(m.new_leader_errors_metric(&shared.name));
                    m.new_leader_status_metric(&shared.name)
                });
                run_leader_elected(shared, config, stop, elector, leader_gauge).await
            }
            RunMode::Sharded(shard) => run_sharded(&shard, shared, config, stop).await,
        }
    }
}

/// Records the shard metrics of controller `name` in `m`; returns the id of
/// the refresher that counts owned keys at scrape time (none when `m` is
/// never scraped).
pub(crate) fn shard_metrics<K>(
    m: &dyn ControllerMetricsProvider,
    shard: &Shard,
    name: &str,
    primary: &Caches<K>,
) -> Option<u64>
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let group = shard.config().group.clone();
    shard.set_metrics(ShardMetrics {
        members: m.new_shard_members_metric(name, &group),
        gained: m.new_shard_handovers_metric(name, &group, "gained"),
        released: m.new_shard_handovers_metric(name, &group, "released"),
    });
    let owned = m.new_shard_owned_keys_metric(name, &group);
    let (shard, primary) = (shard.clone(), primary.clone());
    m.add_refresher(Box::new(move || {
        let n = primary.keys().iter().filter(|k| shard.owns(k)).count();
        owned.set(n as f64);
    }))
}

/// Runs the workers while this replica holds the lease, until `stop` or
/// until leadership is lost. The election is cancelled (and the lease
/// released, with `release_on_cancel`) only after the workers have
/// stopped: a standby never acts while a reconcile of this replica still
/// runs. On a loss, running reconciles are cancelled at once and dropped
/// before the lease can be taken over (see [`Workers::stop`]).
async fn run_leader_elected<K, C, R>(
    shared: &Arc<Shared<K, C, R>>,
    config: &Config,
    stop: &CancellationToken,
    elector: Arc<LeaderElector>,
    leader_gauge: Option<Box<dyn SettableGaugeMetric>>,
) -> Result<(), ControllerError>
where
    K: Primary,
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
{
    // Not a child of `stop`: cancelled once the workers are done.
    let election = CancellationToken::new();
    let (lead_tx, lead_rx) = tokio::sync::oneshot::channel::<CancellationToken>();
    let mut elector_task = tokio::spawn({
        let (elector, election) = (elector.clone(), election.clone());
        let name = shared.name.clone();
        async move {
            let callbacks = LeaderCallbacks {
                on_started_leading: Box::new(move |t| {
                    let _ = lead_tx.send(t);
                }),
                on_stopped_leading: Box::new(move || {
                    tracing::info!(controller = %name, "stopped leading");
                }),
                on_new_leader: None,
            };
            elector.run(election, callbacks).await
        }
    });
    let leading = tokio::select! {
        _ = stop.cancelled() => None,
        t = lead_rx => t.ok(),
    };
    if let Some(leading) = leading {
        tracing::info!(controller = %shared.name, queued = shared.queue.len(), "leading: starting workers");
        shared.enq.end_quiet();
        if let Some(g) = &leader_gauge {
            g.set(1.0);
        }
        let workers = start_workers(shared, config.workers);
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = leading.cancelled() => {}
        }
        let lease = LeaseGuard {
            lost: &leading,
            elector: &elector,
        };
        workers.stop(shared, config, Some(lease)).await;
        if let Some(g) = &leader_gauge {
            g.set(0.0);
        }
    }
    election.cancel();
    let lost = match (&mut elector_task).await {
        Ok(lost) => lost,
        Err(e) => {
            tracing::warn!(controller = %shared.name, error = %e, "the leader election task failed");
            false
        }
    };
    if lost {
        Err(ControllerError::LeadershipLost)
    } else {
        Ok(())
    }
}

/// Runs the workers of a sharded replica with its membership until `stop`
/// (or until the membership fails), then stops the workers before the
/// membership, so that a key is released only after its reconcile ended.
async fn run_sharded<K, C, R>(
    shard: &Shard,
    shared: &Arc<Shared<K, C, R>>,
    config: &Config,
    stop: &CancellationToken,
) -> Result<(), ControllerError>
where
    K: Primary,
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
{
    let hooks = ShardHooks {
        keys: {
            let primary = shared.primary.clone();
            Box::new(move || primary.keys())
        },
        gained: {
            let enq = shared.enq.clone();
            Box::new(move |keys| {
                for k in keys {
                    enq.enqueue(k, Trigger::Handover, false);
                }
            })
        },
    };
    let shard_stop = CancellationToken::new();
    let mut task = tokio::spawn({
        let (shard, shard_stop) = (shard.clone(), shard_stop.clone());
        async move { shard.run(shard_stop, hooks).await }
    });
    tracing::info!(controller = %shared.name, group = %shard.config().group, identity = %shard.config().identity, "sharded: starting workers");
    let workers = start_workers(shared, config.workers);
    let ended = tokio::select! {
        _ = stop.cancelled() => None,
        r = &mut task => Some(r),
    };
    workers.stop(shared, config, None).await;
    let outcome = match ended {
        Some(r) => r,
        None => {
            shard_stop.cancel();
            task.await
        }
    };
    match outcome {
        Ok(r) => r.map_err(ControllerError::from),
        Err(e) => {
            tracing::error!(controller = %shared.name, error = %e, "the shard membership task failed");
            Ok(())
        }
    }
}
