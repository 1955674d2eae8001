//! Readiness ([`Health`]) and (feature `prometheus`) the HTTP endpoint:
//! `/metrics`, `/healthz` and `/readyz`, nothing else.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kcache_lease::{LeaderElector, LeaderStatus};
use parking_lot::Mutex;

#[cfg(feature = "prometheus")]
mod endpoint;
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use endpoint::{HEADER_READ_TIMEOUT, MAX_CONNECTION_AGE, MAX_CONNECTIONS, MetricsServer};

/// Readiness of one controller: caches synced and, with leader election,
/// the candidate leading or standing by. Cheap to clone.
#[derive(Clone, Default)]
pub struct Health {
    inner: Arc<HealthInner>,
}

#[derive(Default)]
struct HealthInner {
    name: Mutex<String>,
    synced: AtomicBool,
    stopped: AtomicBool,
    leader: Mutex<Option<Arc<LeaderElector>>>,
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ready, reason) = self.readiness();
        f.debug_struct("Health")
            .field("ready", &ready)
            .field("reason", &reason)
            .finish()
    }
}

impl Health {
    /// A health state for the controller `name` (not ready yet).
    pub fn new(name: impl Into<String>) -> Self {
        let h = Self::default();
        *h.inner.name.lock() = name.into();
        h
    }
    pub(crate) fn set_name(&self, name: &str) {
        *self.inner.name.lock() = name.to_owned();
    }
    pub(crate) fn set_synced(&self, synced: bool) {
        self.inner.synced.store(synced, Ordering::SeqCst);
    }
    pub(crate) fn set_stopped(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
    }
    pub(crate) fn set_leader(&self, elector: Arc<LeaderElector>) {
        *self.inner.leader.lock() = Some(elector);
    }

    /// Whether the controller is ready, and why not.
    pub fn readiness(&self) -> (bool, String) {
        let name = self.inner.name.lock().clone();
        if self.inner.stopped.load(Ordering::SeqCst) {
            return (false, format!("{name}: stopped"));
        }
        if !self.inner.synced.load(Ordering::SeqCst) {
            return (false, format!("{name}: caches not synced"));
        }
        if let Some(elector) = &*self.inner.leader.lock() {
            // A candidate that cannot read or write its Lease (RBAC, a
            // missing namespace, an unreachable apiserver) would stand by
            // for ever: not ready once that lasted a lease duration.
            let lease_duration = elector.config().timings.lease_duration;
            if let Some((since, error)) = elector.failing_since()
                && since.elapsed() >= lease_duration
            {
                return (
                    false,
                    format!(
                        "{name}: leader election failing for {}s: {error}",
                        since.elapsed().as_secs()
                    ),
                );
            }
            return match elector.status() {
                LeaderStatus::Leading => (true, format!("{name}: ok (leading)")),
                LeaderStatus::StandingBy { .. } => (true, format!("{name}: ok (standing by)")),
                LeaderStatus::NotStarted => (false, format!("{name}: leader election not started")),
                LeaderStatus::Stopped => (false, format!("{name}: leader election stopped")),
            };
        }
        (true, format!("{name}: ok"))
    }
}
