//! What a reconcile asks for next.

use std::time::Duration;

/// The outcome of a successful reconcile: reconcile again after a while, or
/// only when something changes.
///
/// After a success the key's rate-limiter history is forgotten either way;
/// a reconcile that fails returns an error instead, and the key comes back
/// through the rate limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile the object again after `duration` (even if nothing
    /// changes). A change in the meantime reconciles it earlier; the earlier
    /// time wins.
    pub fn requeue_after(duration: Duration) -> Self {
        Self {
            requeue_after: Some(duration),
        }
    }

    /// Reconcile the object again only when one of the watched objects
    /// changes.
    pub fn await_change() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// The requested delay, if any.
    pub fn requeue_duration(&self) -> Option<Duration> {
        self.requeue_after
    }
}

impl Default for Action {
    fn default() -> Self {
        Self::await_change()
    }
}
