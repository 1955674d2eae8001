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
}
