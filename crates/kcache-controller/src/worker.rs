//! The workers: each takes a key from the queue, reconciles it (the
//! process loop: decode from the cache, call the reconciler, requeue or
//! retry), and marks it done; and how they stop (graceful timeout, lease
//! loss).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use kcache_lease::{LeaderElector, Shard};
use kube::Resource;
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::action::Action;
use crate::config::Config;
use crate::consistency::{Admission, StaleGate, WriteLedger};
use crate::metrics::ControllerMetricsProvider;
use crate::queued::{KeyQueue, QueuedKey};
use crate::reconciler::{Reconciler, Request, Trigger};
use crate::retry::describe;
use crate::shard_informers::Caches;
use crate::source::Enqueuer;
use kcache_core::metrics::{CounterMetric, GaugeMetric, HistogramMetric};

/// The reconcile metrics of one controller.
pub(crate) struct WorkerMetrics {
    pub(crate) success: Box<dyn CounterMetric>,
    pub(crate) requeue_after: Box<dyn CounterMetric>,
    pub(crate) error: Box<dyn CounterMetric>,
    pub(crate) errors: Box<dyn CounterMetric>,
    pub(crate) panics: Box<dyn CounterMetric>,
    pub(crate) terminal: Box<dyn CounterMetric>,
    pub(crate) timeouts: Box<dyn CounterMetric>,
    pub(crate) time: Box<dyn HistogramMetric>,
    pub(crate) active: Box<dyn GaugeMetric>,
}

impl WorkerMetrics {
    /// The reconcile metrics of controller `name` (and its worker count).
    pub(crate) fn new(m: &dyn ControllerMetricsProvider, name: &str, workers: usize) -> Self {
        m.new_max_concurrent_reconciles_metric(name)
            .set(workers as f64);
        Self {
            success: m.new_reconcile_total_metric(name, "success"),
            requeue_after: m.new_reconcile_total_metric(name, "requeue_after"),
            error: m.new_reconcile_total_metric(name, "error"),
            errors: m.new_reconcile_errors_metric(name),
            panics: m.new_reconcile_panics_metric(name),
            terminal: m.new_terminal_reconcile_errors_metric(name),
            timeouts: m.new_reconcile_timeouts_metric(name),
            time: m.new_reconcile_time_metric(name),
            active: m.new_active_workers_metric(name),
        }
    }
}

/// What every worker of a controller shares: the queue, the cache, the
/// reconciler.
pub(crate) struct Shared<K: Resource, C, R> {
    pub(crate) name: String,
    pub(crate) queue: KeyQueue,
    pub(crate) enq: Enqueuer,
    pub(crate) primary: Caches<K>,
    pub(crate) reconciler: R,
    pub(crate) ctx: Arc<C>,
    pub(crate) metrics: Option<WorkerMetrics>,
    pub(crate) shard: Option<Shard>,
    /// Under leader election: the elector, whose renew deadline every
    /// reconcile checks on the clock.
    pub(crate) lease: Option<Arc<LeaderElector>>,
    /// What the controller's writes returned.
    pub(crate) ledger: Arc<WriteLedger>,
    /// The stale-cache gate (none when turned off).
    pub(crate) gate: Option<StaleGate>,
    /// The request's object includes the controller's own writes.
    pub(crate) read_own_writes: bool,
    /// [`Config::reconcile_timeout`].
    pub(crate) reconcile_timeout: Option<Duration>,
}

/// Counts a running reconcile in `controller_runtime_active_workers` for
/// as long as it lives.
struct ActiveGuard<'a>(&'a dyn GaugeMetric);

impl<'a> ActiveGuard<'a> {
    fn new(g: &'a dyn GaugeMetric) -> Self {
        g.inc();
        Self(g)
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

enum Outcome {
    Done(Action),
    /// The error as one log line, and whether it is terminal.
    Failed(String, bool),
    Panicked(String),
    /// Ran past the reconcile timeout (cancelled and dropped).
    TimedOut(Duration),
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

/// What running a controller needs of its primary type `K`: what
/// [`Controller::run`](crate::Controller::run) asks for, in one name for
/// the crate's own steps (Rust has no trait aliases).
pub(crate) trait Primary:
    Resource<DynamicType: Clone + Send + Sync + 'static> + DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Primary for K where
    K: Resource<DynamicType: Clone + Send + Sync + 'static>
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

impl<K, C, R> Shared<K, C, R>
where
    K: Primary,
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
{
    async fn process(&self, queued: &QueuedKey, cancellation: CancellationToken) {
        let (key, trigger) = (queued.key.as_str(), queued.trigger.clone());
        if let Some(gate) = &self.gate
            && matches!(gate.admit(key, &trigger), Admission::Deferred)
        {
            return;
        }
        let retries = self.queue.num_requeues(queued);
        let span = tracing::info_span!(
            "reconcile",
            controller = %self.name,
            key = %key,
            trigger = %trigger,
            retries,
        );
        async move {
            let started = Instant::now();
            // Decremented on drop too: a reconcile dropped at shutdown or
            // after a lost lease leaves the gauge right.
            let _active = self
                .metrics
                .as_ref()
                .map(|m| ActiveGuard::new(m.active.as_ref()));
            let outcome = self
                .reconcile_cached(key, trigger, retries, cancellation)
                .await;
            let elapsed = started.elapsed();
            if let Some(m) = &self.metrics {
                m.time.observe(elapsed.as_secs_f64());
            }
            self.record_outcome(queued, outcome, elapsed);
        }
        .instrument(span)
        .await
    }

    /// Reconciles `key` with the primary's cached object (decoded), under
    /// the ledger, within the reconcile timeout, a panic caught: how the
    /// reconcile ended.
    async fn reconcile_cached(
        &self,
        key: &str,
        trigger: Trigger,
        retries: u32,
        cancellation: CancellationToken,
    ) -> Outcome {
        let cached = self.primary.current().and_then(|set| {
            let indexer = set.primary.indexer();
            if self.read_own_writes {
                indexer.get_including_own_writes(key)
            } else {
                indexer.get_by_key(key)
            }
        });
        let decoded = match &cached {
            Some(c) => c.decode().map(Some),
            None => Ok(None),
        };
        match decoded {
            // The same cached object fails the same way on a retry: it
            // is reconciled again when it changes.
            Err(e) => Outcome::Failed(format!("decoding the cached object: {e}"), true),
            Ok(object) => {
                let fire = cancellation.clone();
                let req = Request::new(key, object).with_details(
                    cached,
                    trigger,
                    retries,
                    cancellation,
                    self.lease.clone(),
                );
                // Creating the future is inside the guard too: a
                // hand-written reconciler may panic before returning it.
                let fut = crate::consistency::reconciling(&self.ledger, key, async {
                    self.reconciler.reconcile(req, self.ctx.clone()).await
                });
                let guarded = AssertUnwindSafe(fut).catch_unwind();
                let result = match self.reconcile_timeout {
                    None => Some(guarded.await),
                    Some(limit) => tokio::time::timeout(limit, guarded).await.ok(),
                };
                match result {
                    Some(Ok(Ok(action))) => Outcome::Done(action),
                    Some(Ok(Err(e))) => {
                        Outcome::Failed(describe(&e), self.reconciler.is_terminal(&e))
                    }
                    Some(Err(p)) => Outcome::Panicked(panic_message(&*p)),
                    None => {
                        // the reconcile's own tasks see the cancellation;
                        // its future was dropped by the timeout
                        fire.cancel();
                        Outcome::TimedOut(self.reconcile_timeout.unwrap_or_default())
                    }
                }
            }
        }
    }

    /// Acts on how a reconcile of `key` ended: forgets the key's failures
    /// or retries it with backoff, requeues it as asked, logs it (in the
    /// reconcile's span) and counts it.
    fn record_outcome(&self, queued: &QueuedKey, outcome: Outcome, elapsed: Duration) {
        let key = &queued.key;
        match outcome {
            Outcome::Done(action) => {
                self.queue.forget(queued);
                match action.requeue_duration() {
                    Some(d) => {
                        tracing::debug!(?elapsed, requeue_after = ?d, "reconciled");
                        if let Some(m) = &self.metrics {
                            m.requeue_after.inc();
                        }
                        self.enq.requeue_after(key.to_owned(), d);
                    }
                    None => {
                        tracing::debug!(?elapsed, "reconciled");
                        if let Some(m) = &self.metrics {
                            m.success.inc();
                        }
                    }
                }
            }
            Outcome::Failed(e, true) => {
                // Retrying cannot fix it: the next change reconciles
                // the key again, with a fresh backoff.
                self.queue.forget(queued);
                tracing::warn!(error = %e, ?elapsed, "reconcile failed with a terminal error: not retried");
                if let Some(m) = &self.metrics {
                    m.error.inc();
                    m.errors.inc();
                    m.terminal.inc();
                }
            }
            Outcome::Failed(e, false) => {
                let retry_in = self.enq.retry(key.to_owned());
                tracing::warn!(error = %e, ?elapsed, retry_in = ?retry_in.unwrap_or_default(), "reconcile failed; retrying with backoff");
                if let Some(m) = &self.metrics {
                    m.error.inc();
                    m.errors.inc();
                }
            }
            Outcome::TimedOut(limit) => {
                let retry_in = self.enq.retry(key.to_owned());
                tracing::warn!(timeout = ?limit, retry_in = ?retry_in.unwrap_or_default(), "reconcile ran past the controller's reconcile timeout: cancelled, retrying with backoff (raise Config::reconcile_timeout if this reconcile is expected to take this long)");
                if let Some(m) = &self.metrics {
                    m.error.inc();
                    m.errors.inc();
                    m.timeouts.inc();
                }
            }
            Outcome::Panicked(msg) => {
                let retry_in = self.enq.retry(key.to_owned());
                tracing::error!(panic = %msg, ?elapsed, retry_in = ?retry_in.unwrap_or_default(), "reconcile panicked; retrying with backoff");
                if let Some(m) = &self.metrics {
                    m.error.inc();
                    m.errors.inc();
                    m.panics.inc();
                }
            }
        }
    }
}

/// The running workers.
pub(crate) struct Workers {
    set: JoinSet<()>,
    /// Stops taking keys.
    stop: CancellationToken,
    /// The parent of every running reconcile's [`Request::cancellation`].
    cancel: CancellationToken,
}

pub(crate) fn start_workers<K, C, R>(shared: &Arc<Shared<K, C, R>>, n: usize) -> Workers
where
    K: Primary,
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
{
    let stop = CancellationToken::new();
    let cancel = CancellationToken::new();
    let mut set = JoinSet::new();
    for _ in 0..n.max(1) {
        let shared = shared.clone();
        let (stop, cancel) = (stop.clone(), cancel.clone());
        set.spawn(async move {
            loop {
                let key = tokio::select! {
                    biased;
                    _ = stop.cancelled() => return,
                    k = shared.queue.get() => match k {
                        Some(k) => k,
                        None => return,
                    },
                };
                // Sharded informers: a key is reconciled only from a cache
                // that holds its range (a gained key waits for the new
                // informers; it is queued again when they go live).
                let covered = shared
                    .primary
                    .current()
                    .is_some_and(|set| shared.primary.covers(&set, &key.key));
                if !covered {
                    shared.queue.forget(&key);
                    shared.queue.done(&key);
                    tracing::debug!(controller = %shared.name, key = %key.key, "not in this replica's cached ranges: dropped");
                    continue;
                }
                // Sharded: a key is reconciled only while this replica owns
                // it; the guard tells a release to wait for the reconcile.
                let guard = match &shared.shard {
                    None => None,
                    Some(s) => match s.try_begin(&key.key) {
                        Some(g) => Some(g),
                        None => {
                            shared.queue.forget(&key);
                            shared.queue.done(&key);
                            tracing::debug!(controller = %shared.name, key = %key.key, "not owned by this shard: dropped");
                            continue;
                        }
                    },
                };
                // Under a lease, checked on the clock too: a process that
                // resumes after a pause must not start work before its
                // election task has noticed the lost lease.
                if shared.lease.as_ref().is_some_and(|e| !e.may_act()) {
                    shared.queue.done(&key);
                    tracing::debug!(controller = %shared.name, key = %key.key, "past the renew deadline: not starting the reconcile");
                    return;
                }
                shared.process(&key, cancel.child_token()).await;
                drop(guard);
                shared.queue.done(&key);
            }
        });
    }
    Workers { set, stop, cancel }
}

/// The lease a leader-elected controller's workers run under.
pub(crate) struct LeaseGuard<'a> {
    /// Cancelled when leadership is lost.
    pub(crate) lost: &'a CancellationToken,
    pub(crate) elector: &'a LeaderElector,
}

impl LeaseGuard<'_> {
    /// When running reconciles are dropped after a loss: halfway between
    /// the loss (the renew deadline after the last successful renewal) and
    /// the instant a standby may take over (a lease duration after it),
    /// so that none still runs then, with room for this process's
    /// scheduling and clock.
    fn abandon_at(&self) -> Instant {
        let c = self.elector.config();
        let margin = c
            .timings
            .lease_duration
            .saturating_sub(c.timings.renew_deadline)
            / 2;
        self.elector
            .lease_expiry()
            .map_or_else(Instant::now, |expiry| expiry - margin)
    }
}

impl Workers {
    /// Stops the workers: no new key is taken, running reconciles are
    /// told through their cancellation token (at once; with
    /// `drain_on_shutdown`, the ready keys are reconciled first and the
    /// token fires at the graceful timeout) and get the graceful timeout
    /// to return; then they are dropped. Under a lease, a loss (before or
    /// during this wait) cancels them at once and shortens the wait to
    /// [`LeaseGuard::abandon_at`].
    pub(crate) async fn stop<K: Resource, C, R>(
        mut self,
        shared: &Shared<K, C, R>,
        config: &Config,
        lease: Option<LeaseGuard<'_>>,
    ) {
        if let Some(gate) = &shared.gate {
            gate.stop();
        }
        let mut lost = lease.as_ref().is_some_and(|l| l.lost.is_cancelled());
        if config.drain_on_shutdown && !lost {
            shared.queue.shut_down();
        } else {
            self.stop.cancel();
            self.cancel.cancel();
        }
        let running = shared.queue.processing_len();
        if running > 0 {
            tracing::info!(controller = %shared.name, running, lost_leadership = lost, "waiting for running reconciles to finish");
        }
        let mut deadline = Instant::now() + config.graceful_shutdown_timeout;
        if lost && let Some(l) = &lease {
            deadline = deadline.min(l.abandon_at());
        }
        let never = CancellationToken::new();
        let lost_token = lease.as_ref().map_or(&never, |l| l.lost);
        let finished = loop {
            tokio::select! {
                biased;
                _ = lost_token.cancelled(), if !lost => {
                    lost = true;
                    self.stop.cancel();
                    self.cancel.cancel();
                    if let Some(l) = &lease {
                        deadline = deadline.min(l.abandon_at());
                    }
                    tracing::warn!(controller = %shared.name, "leadership lost while reconciles were finishing: cancelling them");
                }
                next = self.set.join_next() => if next.is_none() { break true },
                _ = tokio::time::sleep_until(deadline) => break false,
            }
        };
        if !finished {
            let still = shared.queue.processing_len();
            if lost {
                tracing::warn!(
                    controller = %shared.name,
                    running = still,
                    "leadership lost: dropping the reconciles still running before a standby can take over"
                );
            } else {
                tracing::warn!(
                    controller = %shared.name,
                    running = still,
                    timeout = ?config.graceful_shutdown_timeout,
                    "reconciles still running after the graceful shutdown timeout: dropping them"
                );
            }
            self.cancel.cancel();
            self.set.shutdown().await;
        }
        shared.queue.shut_down();
    }
}
