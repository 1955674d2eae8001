//! Controller errors.

use kcache_lease::LeaderElectionConfigError;

/// Why a controller could not run, or why it stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// The leader election settings are invalid.
    #[error("invalid leader election configuration: {0}")]
    LeaderElection(#[from] LeaderElectionConfigError),
    /// The work queue could not be built.
    #[error("building the work queue: {0}")]
    Queue(#[from] kcache_workqueue::BuildError),
    /// An event handler could not be registered.
    #[error("registering an event handler: {0}")]
    Informer(#[from] kcache_informer::InformerError),
    /// The metrics endpoint could not be served.
    #[error("serving metrics: {0}")]
    MetricsServer(#[source] std::io::Error),
    /// This replica lost the lease; its workers were stopped.
    #[error("leader election lost")]
    LeadershipLost,
    /// Sharding is misconfigured, or this replica's membership failed; its
    /// workers were stopped.
    #[error("sharding: {0}")]
    Shard(#[from] kcache_lease::ShardError),
    /// The caches did not sync in time (see
    /// [`Config::cache_sync_timeout`](crate::Config::cache_sync_timeout)).
    #[error(
        "the caches did not sync within {timeout:?}: {}; check that the apiserver is reachable and that the controller may list and watch these resources",
        describe_unsynced(unsynced)
    )]
    CacheSyncTimeout {
        /// The timeout that passed.
        timeout: std::time::Duration,
        /// The informers that had not synced.
        unsynced: Vec<UnsyncedInformer>,
    },
}

/// An informer that had not synced when the cache-sync timeout passed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnsyncedInformer {
    /// The informer's name (its resource, e.g. `configmaps`).
    pub informer: String,
    /// The last error its reflector reported, if any.
    pub last_error: Option<String>,
}

fn describe_unsynced(unsynced: &[UnsyncedInformer]) -> String {
    let parts: Vec<String> = unsynced
        .iter()
        .map(|u| match &u.last_error {
            Some(e) => format!("{} (last error: {e})", u.informer),
            None => format!("{} (no error reported: still listing)", u.informer),
        })
        .collect();
    parts.join("; ")
}
