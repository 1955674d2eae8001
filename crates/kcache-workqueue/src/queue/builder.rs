//! Building a queue: [`WorkQueueBuilder`] (name, rate limiter, metrics,
//! priority aging) and the metrics updater task that a named queue with
//! metrics runs.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};
use std::time::Duration;

use foldhash::fast::RandomState;
use tokio::sync::Notify;
use tokio::time::{Instant, MissedTickBehavior};

use super::inbox::Inbox;
use super::inner::Inner;
use super::lock::QueueLock;
use super::queues::Queues;
use super::state::{GROUP, MergeFn, State};
use super::{
    DEFAULT_PRIORITY_AGING, DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD, FAR_FUTURE, QueueItem, WorkQueue,
};
use crate::error::BuildError;
use crate::metrics::{QueueMetrics, WorkQueueMetricsProvider};
use crate::rate_limiter::{RateLimiter, default_controller_rate_limiter};
use crate::ready::ReadyQueue;
use crate::slab::Slab;
use crate::table::ItemTable;
use crate::waiters::Waiters;

/// Configures a [`WorkQueue`].
///
/// ```
/// use std::time::Duration;
/// use kcache_workqueue::{WorkQueue, default_item_based_rate_limiter};
///
/// let queue: WorkQueue<String> = WorkQueue::builder()
///     .rate_limiter(default_item_based_rate_limiter())
///     .priority_aging(Duration::from_millis(500))
///     .build()
///     .unwrap();
/// assert!(queue.is_empty());
/// ```
pub struct WorkQueueBuilder<T> {
    name: Option<String>,
    limiter: Option<Box<dyn RateLimiter<T>>>,
    pub(super) metrics: Option<Arc<dyn WorkQueueMetricsProvider>>,
    aging: Option<Duration>,
    update_period: Duration,
    merge: Option<MergeFn<T>>,
}

impl<T> fmt::Debug for WorkQueueBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueueBuilder")
            .field("name", &self.name)
            .field("custom_rate_limiter", &self.limiter.is_some())
            .field("metrics", &self.metrics.is_some())
            .field("aging", &self.aging)
            .field("update_period", &self.update_period)
            .field("merge", &self.merge.is_some())
            .finish()
    }
}

/// The defaults: unnamed, [`default_controller_rate_limiter`], priority
/// aging of [`DEFAULT_PRIORITY_AGING`], no metrics.
impl<T> Default for WorkQueueBuilder<T> {
    fn default() -> Self {
        Self {
            name: None,
            limiter: None,
            metrics: None,
            aging: Some(DEFAULT_PRIORITY_AGING),
            update_period: DEFAULT_UNFINISHED_WORK_UPDATE_PERIOD,
            merge: None,
        }
    }
}

impl<T: QueueItem> WorkQueueBuilder<T> {
    /// Names the queue: the value of the metrics' `name` label. Only a
    /// named queue (with a provider) reports metrics.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.name = (!name.is_empty()).then_some(name);
        self
    }

    /// The rate limiter of [`WorkQueue::add_rate_limited`].
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<T> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// Where a named queue reports its metrics.
    pub fn metrics(mut self, provider: impl WorkQueueMetricsProvider + 'static) -> Self {
        self.metrics = Some(Arc::new(provider));
        self
    }

    /// Every `interval` an item waits (from its ready time) is worth one
    /// priority level, so that lower priorities never starve. See the
    /// [crate documentation](crate#priorities).
    pub fn priority_aging(mut self, interval: Duration) -> Self {
        self.aging = Some(interval);
        self
    }

    /// Strict priorities: a lower priority item is handed out only when no
    /// higher priority item is ready (it can starve).
    pub fn strict_priority(mut self) -> Self {
        self.aging = None;
        self
    }

    /// How an add of an item equal to one the queue holds (waiting, or
    /// being processed) combines with the held copy, for items that carry
    /// more than their identity (a key with the reason it was queued, equal
    /// by key): `merge(held, added, waiting)` updates `held` and returns
    /// what to drop. `waiting` is false when `held` was handed out by
    /// [`get`](WorkQueue::get) and not added since: `held` is then what the
    /// next `get` hands out, so the added item usually replaces it.
    /// Without a merge the queue keeps the held copy (client-go's
    /// deduplication).
    ///
    /// `merge` runs under the queue's lock: keep it quick and do not call
    /// the queue from it. What it returns is dropped once the lock is
    /// released.
    ///
    /// ```
    /// use kcache_workqueue::WorkQueue;
    ///
    /// #[derive(Debug, Clone)]
    /// struct Request { key: String, reasons: Vec<&'static str> }
    /// impl PartialEq for Request {
    ///     fn eq(&self, other: &Self) -> bool { self.key == other.key }
    /// }
    /// impl Eq for Request {}
    /// impl std::hash::Hash for Request {
    ///     fn hash<H: std::hash::Hasher>(&self, h: &mut H) { self.key.hash(h) }
    /// }
    ///
    /// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # rt.block_on(async {
    /// let queue: WorkQueue<Request> = WorkQueue::builder()
    ///     .merge(|held: &mut Request, mut added: Request, waiting| {
    ///         if waiting {
    ///             held.reasons.append(&mut added.reasons);
    ///             added
    ///         } else {
    ///             std::mem::replace(held, added)
    ///         }
    ///     })
    ///     .build()
    ///     .unwrap();
    /// let req = |r| Request { key: "ns/a".into(), reasons: vec![r] };
    /// queue.add(req("added"));
    /// queue.add(req("updated"));
    /// assert_eq!(queue.len(), 1);
    /// let got = queue.get().await.unwrap();
    /// assert_eq!(got.reasons, ["added", "updated"]);
    /// queue.add(req("deleted")); // while processing: the next round's
    /// queue.done(&got);
    /// assert_eq!(queue.get().await.unwrap().reasons, ["deleted"]);
    /// # });
    /// ```
    pub fn merge(mut self, merge: impl Fn(&mut T, T, bool) -> T + Send + Sync + 'static) -> Self {
        self.merge = Some(Box::new(merge));
        self
    }

    /// How often the unfinished-work gauges are recomputed (default 500 ms).
    pub fn unfinished_work_update_period(mut self, period: Duration) -> Self {
        self.update_period = period;
        self
    }

    /// Builds the queue. A named queue with metrics starts its metrics
    /// updater task, which needs a tokio runtime; it ends when the queue
    /// shuts down or is dropped.
    pub fn build(self) -> Result<WorkQueue<T>, BuildError> {
        if self.aging == Some(Duration::ZERO) {
            return Err(BuildError::ZeroAgingInterval);
        }
        if self.update_period.is_zero() {
            return Err(BuildError::ZeroUpdatePeriod);
        }
        let provider = match (&self.name, &self.metrics) {
            (Some(_), Some(p)) if p.enabled() => Some(Arc::clone(p)),
            _ => None,
        };
        let runtime = match provider {
            Some(_) => {
                Some(tokio::runtime::Handle::try_current().map_err(|_| BuildError::NoRuntime)?)
            }
            None => None,
        };
        let period = self.update_period.min(FAR_FUTURE);
        let queue = self.build_with(provider);
        if let Some(rt) = runtime {
            let weak = Arc::downgrade(&queue.inner);
            let stop = Arc::clone(&queue.inner.stop);
            // Created here so that ticks count from the queue's creation.
            let ticker = {
                let _guard = rt.enter();
                let mut ticker = tokio::time::interval_at(
                    Instant::now()
                        .checked_add(period)
                        .unwrap_or_else(Instant::now),
                    period,
                );
                ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
                ticker
            };
            rt.spawn(metrics_loop(weak, stop, ticker));
        }
        Ok(queue)
    }

    /// Builds without metrics (cannot fail).
    pub(super) fn build_unnamed(self) -> WorkQueue<T> {
        self.build_with(None)
    }

    pub(super) fn build_with(
        self,
        provider: Option<Arc<dyn WorkQueueMetricsProvider>>,
    ) -> WorkQueue<T> {
        let name = self.name;
        let (metrics, retries) = match (&provider, &name) {
            (Some(p), Some(n)) => (
                Some(QueueMetrics::new(p.as_ref(), n)),
                Some(p.new_retries_metric(n)),
            ),
            _ => (None, None),
        };
        let limiter = self
            .limiter
            .unwrap_or_else(|| Box::new(default_controller_rate_limiter()));
        let aging_nanos = self.aging.map(|a| a.as_nanos() as i128);
        let use_inbox = metrics.is_none();
        WorkQueue {
            inner: Arc::new(Inner {
                state: QueueLock::new(State {
                    items: ItemTable::default(),
                    hasher: RandomState::default(),
                    spare: Vec::new(),
                    spare_dones: Vec::new(),
                    drained_signal: false,
                    tags: Vec::new(),
                    unlinked: Vec::with_capacity(GROUP),
                    merge: self.merge,
                    q: Queues {
                        ready: ReadyQueue::new(aging_nanos.is_none()),
                        delayed: BTreeMap::new(),
                        slots: Slab::default(),
                        free: Vec::new(),
                        seq: 0,
                        parked: 0,
                        processing: 0,
                        aging_nanos,
                        epoch: Instant::now(),
                        metrics,
                    },
                    waiters: Waiters::default(),
                    shutting_down: false,
                    drain: false,
                }),
                inbox: Inbox::new(),
                use_inbox,
                shutting_down: AtomicBool::new(false),
                drained: Notify::new(),
                stop: Arc::new(Notify::new()),
                limiter,
                retries,
                name,
            }),
        }
    }
}

/// Recomputes the unfinished-work gauges (and moves due delayed items, so
/// that the depth gauge is current even while every worker is busy) until
/// the queue shuts down or is dropped.
async fn metrics_loop<T: QueueItem>(
    weak: Weak<Inner<T>>,
    stop: Arc<Notify>,
    mut ticker: tokio::time::Interval,
) {
    loop {
        tokio::select! {
            _ = stop.notified() => return,
            _ = ticker.tick() => {}
        }
        let Some(inner) = weak.upgrade() else {
            return;
        };
        if !inner.metrics_tick() {
            return;
        }
    }
}
