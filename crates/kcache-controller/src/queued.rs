//! What the controller's work queue holds: a key with the [`Trigger`] of
//! its next reconcile ([`QueuedKey`], equal by key, so the queue
//! deduplicates keys as client-go's does), the queue's merge of a second
//! add into a waiting one, and the user's rate limiter applied by key.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kcache_workqueue::{RateLimiter, WorkQueue, WorkQueueBuilder};

use crate::reconciler::Trigger;

/// A key queued for reconcile, with what explains its next reconcile.
/// Equal (and hashed) by key alone: the trigger rides along.
#[derive(Debug, Clone)]
pub(crate) struct QueuedKey {
    pub(crate) key: String,
    pub(crate) trigger: Trigger,
}

impl QueuedKey {
    pub(crate) fn new(key: impl Into<String>, trigger: Trigger) -> Self {
        QueuedKey {
            key: key.into(),
            trigger,
        }
    }
}

impl PartialEq for QueuedKey {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for QueuedKey {}

impl Hash for QueuedKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

/// The controller's work queue.
pub(crate) type KeyQueue = WorkQueue<QueuedKey>;

/// No change behind it: a requeue, a retry, the initial list, a resync.
fn is_weak(t: &Trigger) -> bool {
    matches!(
        t,
        Trigger::Requeue | Trigger::Retry | Trigger::InitialList | Trigger::Resync
    )
}

/// A second add of a queued key: while the key waits, its first trigger
/// stays, unless it is a weak one and the new one is a change (the better
/// explanation of the next reconcile); once the key was handed out, the
/// new add's trigger is its next one.
fn merge(held: &mut QueuedKey, added: QueuedKey, waiting: bool) -> QueuedKey {
    if !waiting || (is_weak(&held.trigger) && !is_weak(&added.trigger)) {
        std::mem::replace(held, added)
    } else {
        added
    }
}

/// A builder of the controller's queue (triggers merged as above).
pub(crate) fn builder() -> WorkQueueBuilder<QueuedKey> {
    WorkQueue::builder().merge(merge)
}

/// A rate limiter of keys ([`Config::rate_limiter`](crate::Config::rate_limiter))
/// as a rate limiter of queued keys.
pub(crate) struct ByKey(pub(crate) Arc<dyn RateLimiter<String>>);

impl RateLimiter<QueuedKey> for ByKey {
    fn when(&self, item: &QueuedKey) -> Duration {
        self.0.when(&item.key)
    }
    fn forget(&self, item: &QueuedKey) {
        self.0.forget(&item.key)
    }
    fn num_requeues(&self, item: &QueuedKey) -> u32 {
        self.0.num_requeues(&item.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_queue_carries_the_trigger_of_the_next_reconcile() {
        let q = builder().strict_priority().build().unwrap();
        q.add(QueuedKey::new("ns/a", Trigger::Requeue));
        // a change while a requeue waits explains the reconcile better
        q.add(QueuedKey::new("ns/a", Trigger::Updated));
        // a weak trigger does not replace a change
        q.add(QueuedKey::new("ns/a", Trigger::Resync));
        // nor does a second change replace the first
        q.add(QueuedKey::new("ns/a", Trigger::Deleted));
        assert_eq!(q.len(), 1);
        let got = q.get().await.unwrap();
        assert_eq!(got.trigger, Trigger::Updated);
        // added while processing: the next round's trigger, weak or not
        q.add(QueuedKey::new("ns/a", Trigger::Retry));
        q.done(&got);
        assert_eq!(q.get().await.unwrap().trigger, Trigger::Retry);
    }

    #[test]
    fn the_rate_limiter_counts_by_key() {
        let rl = ByKey(Arc::new(kcache_workqueue::default_controller_rate_limiter()));
        rl.when(&QueuedKey::new("ns/a", Trigger::Retry));
        rl.when(&QueuedKey::new("ns/a", Trigger::Updated));
        assert_eq!(rl.num_requeues(&QueuedKey::new("ns/a", Trigger::Manual)), 2);
        rl.forget(&QueuedKey::new("ns/a", Trigger::Manual));
        assert_eq!(rl.num_requeues(&QueuedKey::new("ns/a", Trigger::Manual)), 0);
    }
}
