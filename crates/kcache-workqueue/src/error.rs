//! Errors of this crate.

/// Why a [`WorkQueueBuilder`](crate::WorkQueueBuilder) could not build a queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A named queue with a metrics provider runs a small task that updates
    /// the unfinished-work gauges; it must be built inside a tokio runtime.
    #[error(
        "a named queue with metrics must be built inside a tokio runtime (it runs a metrics updater task)"
    )]
    NoRuntime,
    /// The aging interval of the priority rule was zero.
    #[error("the priority aging interval must be greater than zero")]
    ZeroAgingInterval,
    /// The unfinished-work metrics update period was zero.
    #[error("the unfinished-work update period must be greater than zero")]
    ZeroUpdatePeriod,
}

/// Why a rate limiter could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RateLimiterError {
    /// The rate was not a positive finite number of tokens per second, or
    /// one token would take longer than `Duration::MAX`.
    #[error("invalid rate {0} (must be a positive, finite number of tokens per second)")]
    InvalidQps(f64),
    /// The burst size was zero.
    #[error("the burst size must be at least 1")]
    ZeroBurst,
}
