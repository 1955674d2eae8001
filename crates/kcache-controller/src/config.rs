//! [`Config`]: a controller's settings, as plain data, and their defaults.
//!
//! A module of its own, below [`controller`](crate::controller), the run
//! modes and the workers, which all read it (no module circle).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kcache_workqueue::RateLimiter;

use crate::consistency::Consistency;

/// The priority of keys queued from an informer's initial list: below live
/// changes (priority 0), so that a restart's full list does not delay them
/// (controller-runtime's `LowPriority`).
pub const INITIAL_LIST_PRIORITY: i32 = -100;

/// The default time running reconciles get to finish at shutdown.
pub const DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// The default time `run` waits for the caches to sync (controller-runtime's
/// `CacheSyncTimeout`).
pub const DEFAULT_CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// Controller settings: plain data, built once and handed to
/// [`Controller::new`](crate::Controller::new) whole (like kube-runtime's `watcher::Config`); see
/// also the builder methods on [`Controller`](crate::Controller).
///
/// ```
/// use std::time::Duration;
/// use kcache_controller::Config;
///
/// let config = Config {
///     drain_on_shutdown: true,
///     cache_sync_timeout: Some(Duration::from_secs(30)),
///     ..Config::default().name("foos").workers(4)
/// };
/// assert_eq!(config.workers, 4);
/// ```
#[derive(Clone)]
pub struct Config {
    /// The controller's name: metrics label, queue name, logs (default
    /// `None`: the primary kind, lower case).
    pub name: Option<String>,
    /// Number of concurrent reconciles (default 1; 0 counts as 1).
    pub workers: usize,
    /// How long running reconciles get to finish at shutdown (default
    /// [`DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT`], 30 s); after that they are
    /// dropped.
    pub graceful_shutdown_timeout: Duration,
    /// At shutdown, also reconcile the keys already queued and ready
    /// (within the graceful timeout) instead of leaving them (default
    /// `false`: only running reconciles finish).
    pub drain_on_shutdown: bool,
    /// The queue priority of keys from initial lists (default
    /// [`INITIAL_LIST_PRIORITY`]).
    pub initial_list_priority: i32,
    /// The rate limiter for failed keys (default `None`: client-go's
    /// `DefaultControllerRateLimiter`: per-key exponential 5 ms .. 1000 s,
    /// max-of an overall 10 qps / 100 burst bucket).
    pub rate_limiter: Option<Arc<dyn RateLimiter<String>>>,
    /// How long `run` waits for the caches to sync before it fails with
    /// [`ControllerError::CacheSyncTimeout`](crate::ControllerError::CacheSyncTimeout), naming the informers that did
    /// not sync and the last error of each (default
    /// [`DEFAULT_CACHE_SYNC_TIMEOUT`], controller-runtime's; `None` waits
    /// for ever).
    pub cache_sync_timeout: Option<Duration>,
    /// Never acting on a cache older than the controller's own writes: the
    /// stale-cache gate, read-your-own-writes, skipping own events (see
    /// [`Consistency`]; default: gate and own reads on).
    pub consistency: Consistency,
    /// How long one reconcile may run (default `None`: no limit, as in
    /// controller-runtime, whose `ReconciliationTimeout` is off by
    /// default). A reconcile still running then has its
    /// [`Request::cancellation`](crate::Request::cancellation) fired and is
    /// dropped; the key is retried with the rate limiter's backoff, counted
    /// in `kcache_controller_reconcile_timeouts_total` and as a reconcile
    /// error, and logged as a WARN naming the timeout.
    pub reconcile_timeout: Option<Duration>,
    /// Under leader election, what a standby reconciles when it takes
    /// over. A standby is warm: its informers list, watch and sync while
    /// another replica leads, and its handlers queue keys, but its workers
    /// start only when it leads. With `true` (the default, as
    /// controller-runtime's `EnableWarmup`) it then reconciles every key
    /// of the initial list (at [`initial_list_priority`](Self::initial_list_priority))
    /// and, first, every key that changed while it stood by; with `false`
    /// only the keys that changed while it stood by (a faster takeover on
    /// a large cluster, for a reconciler that trusts the last leader's
    /// work: a key the last leader left failing is reconciled again at its
    /// next change or resync).
    pub full_resync_on_takeover: bool,
    /// Under leader election, whether a standby runs its informers while
    /// another replica leads (default `true`: a warm standby, see
    /// [`full_resync_on_takeover`](Self::full_resync_on_takeover)). With
    /// `false` (a small cluster, or a process that cannot afford a second
    /// copy of the cache) the controller first wins the lease, then
    /// registers its handlers, starts its informers and waits for them,
    /// then starts its workers: nothing is cached or watched while
    /// standing by, and the takeover waits for a full list.
    pub warm_standby: bool,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("name", &self.name)
            .field("workers", &self.workers)
            .field("graceful_shutdown_timeout", &self.graceful_shutdown_timeout)
            .field("drain_on_shutdown", &self.drain_on_shutdown)
            .field("initial_list_priority", &self.initial_list_priority)
            .field("custom_rate_limiter", &self.rate_limiter.is_some())
            .field("cache_sync_timeout", &self.cache_sync_timeout)
            .field("consistency", &self.consistency)
            .field("reconcile_timeout", &self.reconcile_timeout)
            .field("full_resync_on_takeover", &self.full_resync_on_takeover)
            .field("warm_standby", &self.warm_standby)
            .finish()
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: None,
            workers: 1,
            graceful_shutdown_timeout: DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT,
            drain_on_shutdown: false,
            initial_list_priority: INITIAL_LIST_PRIORITY,
            rate_limiter: None,
            cache_sync_timeout: Some(DEFAULT_CACHE_SYNC_TIMEOUT),
            consistency: Consistency::default(),
            reconcile_timeout: None,
            full_resync_on_takeover: true,
            warm_standby: true,
        }
    }
}

impl Config {
    /// Sets [`name`](Self::name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    /// Sets [`workers`](Self::workers) (0 counts as 1).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }
}
