//! The stale-cache gate: before a worker starts a key, a write recorded
//! for it that its type's cache has not caught up with defers the
//! reconcile until the cache has (woken by the informer), at most
//! [`Consistency::max_stale_wait`](super::Consistency::max_stale_wait).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ledger::{Freshness, WriteLedger};
use super::type_cache::TypeCache;
use super::wanted::Wanted;
use crate::metrics::ControllerMetricsProvider;
use crate::reconciler::Trigger;
use crate::source::Enqueuer;
use kcache_core::metrics::{CounterMetric, HistogramMetric};

/// The least time between two "ran on a stale cache" warnings of one
/// controller (the ones in between are counted in the next).
const WARN_EVERY: Duration = Duration::from_secs(30);

/// A reconcile deferred by the gate.
struct Deferral {
    since: Instant,
    /// The trigger of the reconcile that was deferred (given back when the
    /// key is queued again).
    trigger: Trigger,
    /// A waiter task is watching the cache for it.
    waiting: bool,
}

/// What the worker does with the key it took.
pub(crate) enum Admission {
    /// Reconcile now.
    Run,
    /// Deferred: mark the key done; it is queued again when the cache has
    /// caught up (or the bound has passed).
    Deferred,
}

/// The gate's metrics.
pub(crate) struct GateMetrics {
    deferred: Box<dyn CounterMetric>,
    wait: Box<dyn HistogramMetric>,
}

impl GateMetrics {
    pub(crate) fn new(m: &dyn ControllerMetricsProvider, controller: &str) -> Self {
        GateMetrics {
            deferred: m.new_stale_reconciles_deferred_metric(controller),
            wait: m.new_stale_reconcile_wait_metric(controller),
        }
    }
}

struct Warnings {
    last: Option<Instant>,
    suppressed: u64,
}

/// The gate of one controller's workers.
pub(crate) struct StaleGate {
    ledger: Arc<WriteLedger>,
    enq: Enqueuer,
    max_wait: Duration,
    deferred: Arc<Mutex<HashMap<String, Deferral>>>,
    /// Ends the waiter tasks (the workers stopped).
    stop: CancellationToken,
    metrics: Option<GateMetrics>,
    warnings: Mutex<Warnings>,
}

impl Drop for StaleGate {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl StaleGate {
    pub(crate) fn new(
        ledger: Arc<WriteLedger>,
        enq: Enqueuer,
        max_wait: Duration,
        metrics: Option<GateMetrics>,
    ) -> Self {
        StaleGate {
            ledger,
            enq,
            max_wait,
            deferred: Arc::default(),
            stop: CancellationToken::new(),
            metrics,
            warnings: Mutex::new(Warnings {
                last: None,
                suppressed: 0,
            }),
        }
    }

    /// Stops the waiters (the workers are stopping).
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Whether the reconcile of `key` (queued for `trigger`) may start now.
    pub(crate) fn admit(&self, key: &str, trigger: &Trigger) -> Admission {
        let (cache, wanted) = match self.ledger.check(key) {
            Freshness::Fresh => {
                if let Some(d) = self.take(key) {
                    self.observe(d.since.elapsed());
                }
                return Admission::Run;
            }
            Freshness::Stale { cache, wanted } => (cache, wanted),
        };
        let now = Instant::now();
        let mut deferred = self.deferred.lock();
        match deferred.get_mut(key) {
            Some(d) if now >= d.since + self.max_wait => {
                let waited = now - d.since;
                deferred.remove(key);
                drop(deferred);
                self.observe(waited);
                self.warn_gave_up(key, &cache, &wanted, waited);
                Admission::Run
            }
            Some(d) => {
                if !d.waiting {
                    d.waiting = true;
                    let deadline = d.since + self.max_wait;
                    drop(deferred);
                    self.spawn_waiter(key, cache, wanted, deadline);
                }
                Admission::Deferred
            }
            None => {
                deferred.insert(
                    key.to_owned(),
                    Deferral {
                        since: now,
                        trigger: trigger.clone(),
                        waiting: true,
                    },
                );
                drop(deferred);
                if let Some(m) = &self.metrics {
                    m.deferred.inc();
                }
                tracing::debug!(controller = %self.ledger.name(), key, informer = %cache.informer, %wanted, "reconcile deferred: the cache has not caught up with this controller's write");
                self.spawn_waiter(key, cache, wanted, now + self.max_wait);
                Admission::Deferred
            }
        }
    }

    fn take(&self, key: &str) -> Option<Deferral> {
        let mut deferred = self.deferred.lock();
        if deferred.is_empty() {
            return None;
        }
        deferred.remove(key)
    }

    fn observe(&self, waited: Duration) {
        if let Some(m) = &self.metrics {
            m.wait.observe(waited.as_secs_f64());
        }
    }

    /// Queues `key` again once `cache` has caught up with `wanted`, or at
    /// `deadline`.
    fn spawn_waiter(&self, key: &str, cache: Arc<TypeCache>, wanted: Wanted, deadline: Instant) {
        let (key, enq, deferred, stop) = (
            key.to_owned(),
            self.enq.clone(),
            self.deferred.clone(),
            self.stop.clone(),
        );
        tokio::spawn(async move {
            // woken by the informer: its freshness moves once it has
            // processed an event (a deletion included)
            let caught_up = cache
                .freshness
                .wait_until(|_| cache.has_caught_up(&wanted).unwrap_or(true));
            tokio::select! {
                _ = caught_up => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = stop.cancelled() => return,
            }
            let trigger = deferred.lock().get_mut(&key).map(|d| {
                d.waiting = false;
                d.trigger.clone()
            });
            if let Some(trigger) = trigger {
                enq.enqueue(key, trigger, false);
            }
        });
    }

    fn warn_gave_up(&self, key: &str, cache: &TypeCache, wanted: &Wanted, waited: Duration) {
        let suppressed = {
            let mut w = self.warnings.lock();
            let now = Instant::now();
            if w.last.is_some_and(|t| now < t + WARN_EVERY) {
                w.suppressed += 1;
                return;
            }
            w.last = Some(now);
            std::mem::take(&mut w.suppressed)
        };
        let reached = cache.freshness.resource_version();
        let behind = reached
            .as_ref()
            .zip(wanted.version())
            .and_then(|(r, w)| w.distance_from(r));
        tracing::warn!(
            controller = %self.ledger.name(),
            key,
            informer = %cache.informer,
            wanted = %wanted,
            reached = %reached.as_ref().map_or_else(|| "nothing".to_owned(), ToString::to_string),
            behind_writes = behind,
            waited = ?waited,
            more_since_last_warning = suppressed,
            "reconciling on a stale cache: the {} cache has not caught up with this controller's write after {:?} ({} writes behind); its watch is behind (delayed events, an overloaded apiserver?)",
            cache.kind,
            waited,
            behind.map_or_else(|| "unknown".to_owned(), |b| b.to_string()),
        );
    }
}
