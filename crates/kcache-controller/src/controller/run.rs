//! The run path of [`Controller::run`]: preparing the queue, registering
//! the sources, starting the informers, waiting for the caches, the
//! workers in the run mode (with sharded informers too), and the cleanup.

use std::sync::Arc;
use std::time::Duration;

use kcache_informer::{HasSynced, SharedIndexInformer, SharedInformerFactory};
use kcache_lease::shard::ShardError;
use kube::Resource;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::Controller;
#[cfg(feature = "prometheus")]
use super::MetricsBind;
use crate::consistency::{GateMetrics, StaleGate};
use crate::error::{ControllerError, UnsyncedInformer};
use crate::metrics::ControllerMetricsProvider;
#[cfg(feature = "prometheus")]
use crate::metrics::MetricsRegistry;
use crate::queued::KeyQueue;
use crate::reconciler::Reconciler;
use crate::run_mode::{RunMode, shard_metrics};
use crate::server::Health;
#[cfg(feature = "prometheus")]
use crate::server::MetricsServer;
use crate::shard_informers::{AttachAll, Caches, Follower};
use crate::source::{Enqueuer, PrimaryHandler, SourceHandle, source_handle};
use crate::worker::{Primary, Shared, WorkerMetrics};

impl<K> Controller<K>
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// Runs the controller until shutdown: registers the event handlers,
    /// starts the informers, waits for the caches, (with leader election:
    /// waits for the lease), runs the workers; at shutdown stops taking
    /// keys, lets running reconciles finish within the graceful timeout,
    /// shuts the queue down, releases the lease and stops the endpoint.
    ///
    /// Returns [`ControllerError::LeadershipLost`] when the lease was lost
    /// (the workers were stopped; a process usually exits then, as
    /// client-go's controllers do). The factory's informers keep running:
    /// call `factory.shutdown()` when everything is done.
    pub async fn run<R, C>(self, reconciler: R, ctx: Arc<C>) -> Result<(), ControllerError>
    where
        R: Reconciler<K, C>,
        C: Send + Sync + 'static,
    {
        let mut run = self.prepare()?;
        if run.controller.shard_field.is_some() {
            return run.run_with_sharded_informers(reconciler, ctx).await;
        }
        if !run.controller.config.warm_standby
            && let RunMode::LeaderElected(cfg, lock) = &run.controller.mode
            && !wait_for_lease(&run.name, cfg, lock, &run.controller.handle.stop).await?
        {
            // stopped while standing by: nothing was started
            run.queue.shut_down();
            run.controller.handle.health.set_stopped();
            return Ok(());
        }
        let handles = run.register_sources()?;
        run.attach_informer_metrics(&handles);
        let mut cleanup = Cleanup {
            primary: start_informers(&run.controller.factory, &run.controller.primary),
            ..Cleanup::default()
        };
        if let Err(e) = run.start_observability(&mut cleanup).await {
            cleanup.run(handles, &run.queue).await;
            return Err(e);
        }
        let health = run.controller.handle.health.clone();
        let synced: Vec<&dyn HasSynced> = handles.iter().map(|h| &*h.synced).collect();
        let timeout = run.controller.config.cache_sync_timeout;
        let waited = wait_for_sync(
            &run.name,
            &run.controller.handle.stop,
            &health,
            &synced,
            timeout,
        )
        .await;
        drop(synced);
        if !matches!(waited, Synced::Yes) {
            health.set_stopped();
            let unsynced = handles
                .iter()
                .filter(|h| !h.synced.has_synced())
                .map(|h| {
                    let s = (h.probe)();
                    UnsyncedInformer {
                        informer: s.name,
                        last_error: s.last_error,
                    }
                })
                .collect();
            cleanup.run(handles, &run.queue).await;
            return match waited {
                Synced::TimedOut(timeout) => {
                    let e = ControllerError::CacheSyncTimeout { timeout, unsynced };
                    tracing::warn!(controller = %run.name, error = %e, "giving up");
                    Err(e)
                }
                _ => Ok(()),
            };
        }
        let queue = run.queue.clone();
        let name = run.name.clone();
        let result = run.run_mode(reconciler, ctx).await;
        health.set_stopped();
        cleanup.run(handles, &queue).await;
        tracing::info!(controller = %name, "controller stopped");
        result
    }

    /// The metrics the run records into: an endpoint without a registry
    /// gets a new one, and a registry is the provider unless one was given.
    #[cfg(feature = "prometheus")]
    fn settle_metrics(&mut self) {
        if self.registry.is_none() && self.metrics_bind.is_some() {
            self.registry = Some(MetricsRegistry::new());
        }
        if self.metrics.is_none() {
            self.metrics = self
                .registry
                .clone()
                .map(|r| Arc::new(r) as Arc<dyn ControllerMetricsProvider>);
        }
    }

    /// Without the `prometheus` feature the metrics are the provider given,
    /// if any.
    #[cfg(not(feature = "prometheus"))]
    fn settle_metrics(&mut self) {}

    /// Step 1: validates the run mode, names the controller, builds the
    /// queue and the enqueuer.
    fn prepare(mut self) -> Result<Running<K>, ControllerError> {
        if self.conflicting_modes {
            return Err(ShardError::WithLeaderElection.into());
        }
        self.mode.validate()?;
        self.validate_shard_field()?;
        let name = self
            .config
            .name
            .clone()
            .unwrap_or_else(|| self.primary_kind.to_lowercase());
        self.handle.health.set_name(&name);
        self.settle_metrics();
        let mut qb = crate::queued::builder().name(name.clone());
        if let Some(rl) = &self.config.rate_limiter {
            qb = qb.rate_limiter(crate::queued::ByKey(rl.clone()));
        }
        if let Some(p) = self.metrics.as_ref().and_then(|m| m.workqueue_provider()) {
            qb = qb.metrics(p);
        }
        let queue = qb.build()?;
        self.handle.ledger.configure(
            &name,
            &self.config.consistency,
            &self.primary_group,
            &self.primary_kind,
            self.primary_namespaced,
        );
        let mut enq = Enqueuer::new(queue.clone(), self.config.initial_list_priority)
            .with_shard(self.mode.shard().cloned())
            .with_ledger(self.handle.ledger.clone());
        if matches!(self.mode, RunMode::LeaderElected(..)) && !self.config.full_resync_on_takeover {
            // a standby queues only what changes; the initial list's keys
            // are not queued (lifted when it leads: see run_leader_elected)
            enq = enq.quiet_initial(Arc::new(std::sync::atomic::AtomicBool::new(true)));
        }
        let _ = self.handle.enqueuer.set(enq.clone());
        Ok(Running {
            name,
            queue,
            enq,
            controller: self,
        })
    }
}

/// A controller between [`Controller::run`]'s steps: the controller as
/// built (its metrics provider settled by [`Controller::prepare`]), with
/// its name, queue and enqueuer.
struct Running<K: Resource> {
    name: String,
    queue: KeyQueue,
    enq: Enqueuer,
    controller: Controller<K>,
}

impl<K> Running<K>
where
    K: Primary,
{
    /// Step 2: the event handlers on the primary, owned and watched
    /// informers (removed again if one fails).
    fn register_sources(&mut self) -> Result<Vec<SourceHandle>, ControllerError> {
        let mut handles = Vec::new();
        let primary = PrimaryHandler {
            enq: self.enq.for_type(
                &self.controller.primary,
                &self.controller.primary_group,
                &self.controller.primary_kind,
                &self.controller.primary_plural,
            ),
            predicate: self.controller.primary_predicate.take(),
        };
        let registered = self
            .controller
            .primary
            .add_event_handler(primary)
            .map(|reg| source_handle(&self.controller.primary, reg))
            .map_err(ControllerError::from);
        let all = std::iter::once(registered).chain(
            std::mem::take(&mut self.controller.sources)
                .into_iter()
                .map(|s| {
                    s(&self.controller.factory, self.enq.clone()).map_err(ControllerError::from)
                }),
        );
        for h in all {
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    for h in handles {
                        (h.remove)();
                    }
                    self.queue.shut_down();
                    return Err(e);
                }
            }
        }
        Ok(handles)
    }

    /// Step 2b: the informers' and their reflectors' metrics (before the
    /// informers start: a started reflector keeps the provider it had).
    fn attach_informer_metrics(&self, handles: &[SourceHandle]) {
        let Some(m) = &self.controller.metrics else {
            return;
        };
        let Some(informer) = m.informer_provider() else {
            return;
        };
        let reflector = m.reflector_provider();
        for h in handles {
            (h.attach_metrics)(informer.clone(), reflector.clone());
        }
    }

    /// Step 4: the shard metrics, the endpoint, and the task that turns a
    /// shutdown future into the stop signal.
    async fn start_observability(&mut self, cleanup: &mut Cleanup) -> Result<(), ControllerError> {
        let caches = self.caches();
        self.start_observability_with(cleanup, &caches).await
    }

    async fn start_observability_with(
        &mut self,
        cleanup: &mut Cleanup,
        caches: &Caches<K>,
    ) -> Result<(), ControllerError> {
        if let (Some(m), Some(s)) = (&self.controller.metrics, self.controller.mode.shard())
            && let Some(id) = shard_metrics(m.as_ref(), s, &self.name, caches)
        {
            cleanup.shard_refresher = Some((m.clone(), id));
        }
        #[cfg(feature = "prometheus")]
        if let Some(bind) = self.controller.metrics_bind.take() {
            let registry = self.controller.registry.clone().unwrap_or_default();
            let health = vec![self.controller.handle.health.clone()];
            let served = match bind {
                MetricsBind::Addr(addr) => MetricsServer::bind(addr, registry, health).await,
                MetricsBind::Listener(l) => MetricsServer::serve(l, registry, health),
            };
            cleanup.server = Some(served.map_err(ControllerError::MetricsServer)?);
        }
        let shutdown = std::mem::take(&mut self.controller.shutdown);
        cleanup.watcher = (!shutdown.is_empty()).then(|| {
            let stop = self.controller.handle.stop.clone();
            tokio::spawn(async move {
                let any = futures::future::select_all(shutdown);
                tokio::select! {
                    _ = any => stop.cancel(),
                    _ = stop.cancelled() => {}
                }
            })
        });
        Ok(())
    }

    /// The caches the workers read: the primary, or with sharded
    /// informers the current range's primary.
    fn caches(&self) -> Caches<K> {
        match self.controller.shard_field {
            Some(field) => Caches::sharded(field),
            None => Caches::fixed(self.controller.primary.clone()),
        }
    }

    /// [`Controller::run`] with sharded informers: joins the group at
    /// once (there is no cache before the first view), follows the view
    /// with informer sets, runs the workers on the current set.
    async fn run_with_sharded_informers<R, C>(
        mut self,
        reconciler: R,
        ctx: Arc<C>,
    ) -> Result<(), ControllerError>
    where
        R: Reconciler<K, C>,
        C: Send + Sync + 'static,
    {
        let (Some(field), Some(shard), Some(primary_of)) = (
            self.controller.shard_field,
            self.controller.mode.shard().cloned(),
            self.controller.primary_of.clone(),
        ) else {
            unreachable!("validated in prepare")
        };
        let caches = Caches::<K>::sharded(field);
        shard.set_placement(caches.placement());
        let mut cleanup = Cleanup::default();
        if let Err(e) = self.start_observability_with(&mut cleanup, &caches).await {
            cleanup.run(Vec::new(), &self.queue).await;
            return Err(e);
        }
        let attach: Option<AttachAll> = self.controller.metrics.as_ref().and_then(|m| {
            let informer = m.informer_provider()?;
            let reflector = m.reflector_provider();
            Some(Arc::new(move |handles: &[SourceHandle]| {
                for h in handles {
                    (h.attach_metrics)(informer.clone(), reflector.clone());
                }
            }) as Arc<dyn Fn(&[SourceHandle]) + Send + Sync>)
        });
        let health = self.controller.handle.health.clone();
        let follower = Follower {
            name: self.name.clone(),
            field,
            shard: shard.clone(),
            base: self.controller.factory.clone(),
            primary_of,
            primary_predicate: self.controller.primary_predicate.take(),
            sources: std::mem::take(&mut self.controller.sources),
            enq: self.enq.clone(),
            primary_group: self.controller.primary_group.clone(),
            primary_kind: self.controller.primary_kind.clone(),
            primary_plural: self.controller.primary_plural.clone(),
            caches: caches.clone(),
            handle_factory: self.controller.handle.factory.clone(),
            attach,
            on_first_sync: {
                let (health, name) = (health.clone(), self.name.clone());
                Box::new(move || {
                    health.set_synced(true);
                    tracing::info!(controller = %name, "caches synced");
                })
            },
        };
        let follow_stop = CancellationToken::new();
        let follow_task = tokio::spawn(follower.run(follow_stop.clone()));
        tracing::info!(controller = %self.name, %field, "sharded informers: joining the shard group before caching");
        let queue = self.queue.clone();
        let name = self.name.clone();
        let result = self.run_mode_with(reconciler, ctx, caches).await;
        health.set_stopped();
        follow_stop.cancel();
        let _ = follow_task.await;
        cleanup.run(Vec::new(), &queue).await;
        tracing::info!(controller = %name, "controller stopped");
        result
    }

    /// Step 6: the workers, in the run mode.
    async fn run_mode<R, C>(self, reconciler: R, ctx: Arc<C>) -> Result<(), ControllerError>
    where
        R: Reconciler<K, C>,
        C: Send + Sync + 'static,
    {
        let caches = self.caches();
        self.run_mode_with(reconciler, ctx, caches).await
    }

    async fn run_mode_with<R, C>(
        self,
        reconciler: R,
        ctx: Arc<C>,
        caches: Caches<K>,
    ) -> Result<(), ControllerError>
    where
        R: Reconciler<K, C>,
        C: Send + Sync + 'static,
    {
        let elector = self.controller.mode.elector()?;
        if let Some(e) = &elector {
            let _ = self.controller.handle.lease.set(e.clone());
        }
        let consistency = &self.controller.config.consistency;
        let ledger = self.controller.handle.ledger.clone();
        let gate = consistency.stale_cache_gate.then(|| {
            StaleGate::new(
                ledger.clone(),
                self.enq.clone(),
                consistency.max_stale_wait,
                self.controller
                    .metrics
                    .as_ref()
                    .map(|m| GateMetrics::new(m.as_ref(), &self.name)),
            )
        });
        let read_own_writes = consistency.read_own_writes;
        let shared = Arc::new(Shared {
            ledger,
            gate,
            read_own_writes,
            reconcile_timeout: self.controller.config.reconcile_timeout,
            lease: elector.clone(),
            metrics: self.controller.metrics.as_ref().map(|m| {
                WorkerMetrics::new(
                    m.as_ref(),
                    &self.name,
                    self.controller.config.workers.max(1),
                )
            }),
            name: self.name,
            queue: self.queue,
            enq: self.enq,
            primary: caches,
            reconciler,
            ctx,
            shard: self.controller.mode.shard().cloned(),
        });
        let stop = self.controller.handle.stop.clone();
        let health = self.controller.handle.health.clone();
        self.controller
            .mode
            .run(
                &shared,
                &self.controller.config,
                &stop,
                &health,
                self.controller.metrics.as_deref(),
                elector,
            )
            .await
    }
}

/// Step 3: starts the factory's informers, and claims the primary
/// informer if nobody runs it yet (one given to `for_informer`, not from
/// the factory). Returns the primary's run when this controller owns it
/// (stopped at the end of `run`), `None` when the factory or someone else
/// runs it: a controller never stops an informer it did not start.
fn start_informers<K>(
    factory: &SharedInformerFactory,
    primary: &SharedIndexInformer<K>,
) -> Option<(CancellationToken, tokio::task::JoinHandle<()>)>
where
    K: Primary,
{
    factory.start();
    // Not a child of `stop`: the cache stays live while running reconciles
    // finish.
    let token = CancellationToken::new();
    let task = primary.try_start(token.clone())?;
    let informer = primary.name().to_owned();
    let task = tokio::spawn(async move {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(%informer, error = %kcache_core::ErrorChain(&e), "the primary informer did not run")
            }
            Err(e) => tracing::warn!(%informer, error = %e, "the primary informer's task failed"),
        }
    });
    Some((token, task))
}

/// How waiting for the caches ended.
enum Synced {
    Yes,
    Stopped,
    TimedOut(Duration),
}

/// Step 5: waits until every source has synced, the controller is stopped,
/// or `timeout` passed.
async fn wait_for_sync(
    name: &str,
    stop: &CancellationToken,
    health: &Health,
    synced: &[&dyn HasSynced],
    timeout: Option<Duration>,
) -> Synced {
    tracing::info!(controller = %name, "waiting for caches to sync");
    let wait = kcache_informer::wait_for_cache_sync(stop, synced);
    let done = match timeout {
        None => wait.await,
        Some(t) => match tokio::time::timeout(t, wait).await {
            Ok(done) => done,
            Err(_) => return Synced::TimedOut(t),
        },
    };
    if !done {
        tracing::info!(controller = %name, "stopped before the caches synced");
        return Synced::Stopped;
    }
    health.set_synced(true);
    tracing::info!(controller = %name, "caches synced");
    Synced::Yes
}

#[derive(Default)]
struct Cleanup {
    primary: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
    shard_refresher: Option<(Arc<dyn ControllerMetricsProvider>, u64)>,
    #[cfg(feature = "prometheus")]
    server: Option<MetricsServer>,
    watcher: Option<tokio::task::JoinHandle<()>>,
}

impl Cleanup {
    async fn run(self, handles: Vec<SourceHandle>, queue: &KeyQueue) {
        queue.shut_down();
        for h in handles {
            (h.remove)();
        }
        if let Some((m, id)) = self.shard_refresher {
            m.remove_refresher(id);
        }
        #[cfg(feature = "prometheus")]
        if let Some(s) = self.server {
            s.shutdown().await;
        }
        if let Some(w) = self.watcher {
            w.abort();
            let _ = w.await;
        }
        if let Some((token, task)) = self.primary {
            token.cancel();
            let _ = task.await;
        }
    }
}

/// A cold standby ([`Config::warm_standby`] off): holds the lease before
/// anything starts, with a bare elector that does not release it when it
/// stops (the controller's own elector, the same identity, renews it from
/// then on). `false` when `stop` came first.
///
/// [`Config::warm_standby`]: crate::Config::warm_standby
async fn wait_for_lease(
    name: &str,
    config: &kcache_lease::LeaderElectionConfig,
    lock: &Arc<dyn kcache_lease::LeaseLock>,
    stop: &CancellationToken,
) -> Result<bool, ControllerError> {
    let elector =
        kcache_lease::LeaderElector::new(config.clone().release_on_cancel(false), lock.clone())?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let election = CancellationToken::new();
    let task = tokio::spawn({
        let election = election.clone();
        async move {
            let callbacks = kcache_lease::LeaderCallbacks {
                on_started_leading: Box::new(move |_| {
                    let _ = tx.send(());
                }),
                ..kcache_lease::LeaderCallbacks::default()
            };
            elector.run(election, callbacks).await
        }
    });
    tracing::info!(controller = %name, "cold standby: waiting for the lease before starting the informers");
    let leading = tokio::select! {
        _ = stop.cancelled() => false,
        r = rx => r.is_ok(),
    };
    election.cancel();
    let _ = task.await;
    Ok(leading)
}
