//! A controller that never acts on a cache older than its own writes.
//!
//! The classic controller bug: a reconcile creates a child (or writes
//! status), the next reconcile of the same key runs before the watch has
//! delivered that write, reads the stale cache and acts again (a second
//! child, an `AlreadyExists` loop, a status written back to an old value).
//! A controller's [`fenced_client`](crate::ControllerHandle::fenced_client)
//! records every write it makes (create, update, patch, status, delete):
//! the resourceVersion the apiserver answered, against the primary key the
//! reconcile was for (and the written object's own key, or its controlling
//! owner's, when those are primaries), and the object itself. With that:
//!
//! * **the stale-cache gate** ([`Consistency::stale_cache_gate`], on by
//!   default): before a worker starts key K, if a write recorded for K is
//!   newer than the cache of the written type
//!   ([`SharedIndexInformer::last_store_sync_resource_version`](kcache_informer::SharedIndexInformer::last_store_sync_resource_version)),
//!   the reconcile is deferred without holding a worker and queued again
//!   when the informer has caught up (woken by it, not polled); after
//!   [`Consistency::max_stale_wait`] it runs anyway and a WARN says how far
//!   behind the watch is. `kcache_controller_stale_reconciles_deferred_total`
//!   counts deferrals, `kcache_controller_stale_reconcile_wait_seconds`
//!   their waits.
//! * **read your own writes** ([`Consistency::read_own_writes`], on by
//!   default): the [`Request`](crate::Request)'s object and every read
//!   through a [`Lister`](kcache_informer::SharedIndexInformer::lister) of the controller's
//!   caches (`informer.lister()`, get, list, by index) show what a write
//!   returned until the watch delivers that version or a newer one; a
//!   deleted object reads as gone until its deletion arrives.
//! * **skipping own events** ([`Consistency::skip_own_events`], off by
//!   default): a watch event whose resourceVersion is exactly the one this
//!   controller's write produced does not queue a reconcile (the reconcile
//!   that wrote it knew the result), also when a relist delivers it; any
//!   other version (someone else's change) always does.
//!
//! resourceVersions are compared as KEP-5504 defines them; on an apiserver
//! whose versions do not compare, the gate turns itself off and says so
//! once. What the gate does not cover (writes by other clients or other
//! replicas, writes from tasks the reconcile spawned) is in
//! [controller.md](https://github.com/kcache/kcache/blob/main/docs/controller.md#consistency).

mod client;
mod gate;
mod ledger;
#[cfg(test)]
mod tests;
mod type_cache;
mod wanted;
mod write;

use std::time::Duration;

pub(crate) use client::{current_key, reconciling, record_response};
pub(crate) use gate::{Admission, GateMetrics, StaleGate};
pub(crate) use ledger::WriteLedger;
pub(crate) use type_cache::TypeCache;

/// The default bound of the stale-cache gate: how long a reconcile waits
/// at most for the cache to catch up with the controller's own write.
pub const DEFAULT_MAX_STALE_WAIT: Duration = Duration::from_secs(10);

/// How a controller keeps its reconciles from acting on caches older than
/// its own writes (see the [module](self) docs). Plain data, part of
/// [`Config`](crate::Config).
///
/// ```
/// use std::time::Duration;
/// use kcache_controller::{Config, Consistency};
///
/// let config = Config {
///     consistency: Consistency {
///         max_stale_wait: Duration::from_secs(3),
///         skip_own_events: true,
///         ..Consistency::default()
///     },
///     ..Config::default()
/// };
/// assert!(config.consistency.stale_cache_gate);
/// assert!(!Consistency::off().read_own_writes);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consistency {
    /// Defer a reconcile while a write recorded for its key is newer than
    /// the written type's cache (default `true`).
    pub stale_cache_gate: bool,
    /// How long the gate defers a reconcile at most before it runs anyway
    /// with a WARN (default [`DEFAULT_MAX_STALE_WAIT`], 10 s).
    pub max_stale_wait: Duration,
    /// Reads from the caches (the request's object, listers) show what the
    /// controller's writes returned until the watch delivers them (default
    /// `true`).
    pub read_own_writes: bool,
    /// A watch event of exactly the version this controller's write
    /// produced queues no reconcile (default `false`). Also when a relist
    /// delivers that version, and when a resync (a relist's, or a periodic
    /// one) comes while the primary's latest version is still the
    /// controller's own write: the reconcile that wrote it knew the result.
    pub skip_own_events: bool,
}

impl Default for Consistency {
    fn default() -> Self {
        Consistency {
            stale_cache_gate: true,
            max_stale_wait: DEFAULT_MAX_STALE_WAIT,
            read_own_writes: true,
            skip_own_events: false,
        }
    }
}

impl Consistency {
    /// Nothing recorded: reconciles read the caches as the watches left
    /// them (kcache before issue 30, client-go's controllers before 1.36).
    pub fn off() -> Self {
        Consistency {
            stale_cache_gate: false,
            read_own_writes: false,
            skip_own_events: false,
            ..Consistency::default()
        }
    }

    /// Whether any of it needs the writes recorded.
    pub(crate) fn records_writes(&self) -> bool {
        self.stale_cache_gate || self.read_own_writes || self.skip_own_events
    }
}
