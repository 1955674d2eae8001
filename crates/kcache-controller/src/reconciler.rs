//! The reconciler: what a controller runs for each key.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use kcache_core::CachedObject;
use tokio_util::sync::CancellationToken;

use kcache_lease::LeaderElector;

use crate::action::Action;

/// Why a key was queued (the first cause since it was last handed out).
/// Shown in the reconcile's tracing span.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trigger {
    /// The object was in the informer's initial list (or a late handler's
    /// replay of the cache).
    InitialList,
    /// The object was added.
    Added,
    /// The object changed.
    Updated,
    /// A periodic resync (the object did not change).
    Resync,
    /// The object was deleted.
    Deleted,
    /// An object it controls (through its `controller: true`
    /// ownerReference) changed.
    Owned {
        /// Kind of the owned object.
        kind: String,
        /// Key of the owned object.
        key: String,
    },
    /// A watched object mapped to it changed.
    Watched {
        /// Kind of the watched object.
        kind: String,
        /// Key of the watched object.
        key: String,
    },
    /// The previous reconcile asked for it ([`Action::requeue_after`]).
    Requeue,
    /// The previous reconcile failed; retried through the rate limiter.
    Retry,
    /// Queued by hand through [`ControllerHandle::enqueue`](crate::ControllerHandle::enqueue).
    Manual,
    /// This replica of a sharded controller gained the key in a handover
    /// (see [`shard`](kcache_lease::shard)).
    Handover,
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::InitialList => f.write_str("initial list"),
            Trigger::Added => f.write_str("added"),
            Trigger::Updated => f.write_str("updated"),
            Trigger::Resync => f.write_str("resync"),
            Trigger::Deleted => f.write_str("deleted"),
            Trigger::Owned { kind, key } => write!(f, "owned {kind} {key}"),
            Trigger::Watched { kind, key } => write!(f, "watched {kind} {key}"),
            Trigger::Requeue => f.write_str("requeue"),
            Trigger::Retry => f.write_str("retry"),
            Trigger::Manual => f.write_str("manual"),
            Trigger::Handover => f.write_str("shard handover"),
        }
    }
}

/// One reconcile request: the key, the object as the informer's cache holds
/// it (decoded for this reconcile only), and why it was queued.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Request<K> {
    /// The object's key: `namespace/name`, or `name` for cluster-scoped
    /// objects.
    pub key: String,
    /// The namespace part of the key (`None` for cluster-scoped objects).
    pub namespace: Option<String>,
    /// The name part of the key.
    pub name: String,
    /// The object, decoded from the cache; `None` when the cache does not
    /// hold it (it was deleted).
    pub object: Option<K>,
    /// The cached object (bytes + metadata) the typed object was decoded
    /// from.
    pub cached: Option<CachedObject<K>>,
    /// Why the key was queued.
    pub trigger: Trigger,
    /// How many times this key has been retried through the rate limiter
    /// since its last success.
    pub retries: u32,
    /// Cancelled when this reconcile should stop: at shutdown (at once, or
    /// when the graceful timeout runs out with
    /// [`Config::drain_on_shutdown`](crate::Config::drain_on_shutdown)),
    /// and at once when this replica loses its leadership. A reconcile
    /// that is still running a short while later is dropped at its next
    /// `.await` (see [`Request::cancelled`]).
    pub cancellation: CancellationToken,
    /// Under leader election: the elector, whose renew deadline is checked
    /// on the clock by [`is_cancelled`](Self::is_cancelled) and
    /// [`cancelled`](Self::cancelled).
    lease: Option<Arc<LeaderElector>>,
}

impl<K> Request<K> {
    /// A request built by hand (for unit tests of reconcilers).
    pub fn new(key: impl Into<String>, object: Option<K>) -> Self {
        let key = key.into();
        let (namespace, name) = split_key(&key);
        Self {
            key,
            namespace,
            name,
            object,
            cached: None,
            trigger: Trigger::Manual,
            retries: 0,
            cancellation: CancellationToken::new(),
            lease: None,
        }
    }

    /// Completes when the reconcile should stop (see
    /// [`cancellation`](Self::cancellation)). The rule a reconciler
    /// follows under leader election: check it between steps (or race
    /// long waits against it with `tokio::select!`), and keep the work
    /// after a check shorter than the lease duration minus the renew
    /// deadline (5 s with the defaults): once leadership is lost, a
    /// reconcile that has not returned by half of that time is dropped, so
    /// that no reconcile still runs when a standby may take over.
    ///
    /// ```
    /// # use kcache_controller::{Action, Request};
    /// # use k8s_openapi::api::core::v1::ConfigMap;
    /// # async fn step(_: &str) {}
    /// async fn reconcile(req: Request<ConfigMap>) -> Result<Action, std::io::Error> {
    ///     for part in ["a", "b", "c"] {
    ///         tokio::select! {
    ///             _ = req.cancelled() => return Ok(Action::requeue_after(std::time::Duration::ZERO)),
    ///             _ = step(part) => {}
    ///         }
    ///     }
    ///     Ok(Action::await_change())
    /// }
    /// ```
    pub async fn cancelled(&self) {
        let lease_gone = async {
            let Some(elector) = &self.lease else {
                return std::future::pending::<()>().await;
            };
            // The deadline moves with every renewal: sleep to the current
            // one, then look again.
            while let Some(deadline) = elector.acting_deadline() {
                if tokio::time::Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep_until(deadline).await;
            }
        };
        tokio::select! {
            _ = self.cancellation.cancelled() => {}
            _ = lease_gone => {}
        }
    }

    /// Whether the reconcile should stop (see
    /// [`cancellation`](Self::cancellation)). Under leader election this
    /// also looks at the clock: true once this replica's renew deadline has
    /// passed, even before the election task cancelled the token (a process
    /// resumed after a pause runs its tasks in any order).
    pub fn is_cancelled(&self) -> bool {
        self.cancellation.is_cancelled() || self.lease.as_ref().is_some_and(|e| !e.may_act())
    }

    /// Sets the cached object, trigger and retry count (used by the
    /// controller).
    pub(crate) fn with_details(
        mut self,
        cached: Option<CachedObject<K>>,
        trigger: Trigger,
        retries: u32,
        cancellation: CancellationToken,
        lease: Option<Arc<LeaderElector>>,
    ) -> Self {
        self.cached = cached;
        self.trigger = trigger;
        self.retries = retries;
        self.cancellation = cancellation;
        self.lease = lease;
        self
    }
}

pub(crate) fn split_key(key: &str) -> (Option<String>, String) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns.to_owned()), name.to_owned()),
        None => (None, key.to_owned()),
    }
}

/// Reconciles one object: reads the desired state from the object (and
/// other caches), changes the world to match, returns an [`Action`] or an
/// error.
///
/// An error sends the key back through the rate limiter (exponential
/// backoff per key); a success forgets its backoff. A panic is caught and
/// counted as an error. The same key is never reconciled by two workers at
/// once.
///
/// Any `Fn(Request<K>, Arc<C>) -> impl Future<Output = Result<Action, E>>`
/// is a reconciler, so a closure or an `async fn` works:
///
/// ```
/// use std::sync::Arc;
/// use kcache_controller::{Action, Request};
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// struct Ctx;
///
/// async fn reconcile(req: Request<ConfigMap>, _ctx: Arc<Ctx>) -> Result<Action, std::io::Error> {
///     match req.object {
///         Some(cm) => println!("{} has {} keys", req.key, cm.data.map_or(0, |d| d.len())),
///         None => println!("{} is gone", req.key),
///     }
///     Ok(Action::await_change())
/// }
/// # fn check<R: kcache_controller::Reconciler<ConfigMap, Ctx>>(_: R) {}
/// # check(reconcile);
/// ```
///
/// A type with state of its own implements the trait with a plain
/// `async fn` (no `#[async_trait]`); the controller is generic over the
/// reconciler, so nothing is boxed:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use kcache_controller::{Action, Reconciler, Request};
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// struct Ctx;
///
/// #[derive(Default)]
/// struct Counting {
///     seen: AtomicU64,
/// }
///
/// impl Reconciler<ConfigMap, Ctx> for Counting {
///     type Error = std::io::Error;
///
///     async fn reconcile(
///         &self,
///         req: Request<ConfigMap>,
///         _ctx: Arc<Ctx>,
///     ) -> Result<Action, Self::Error> {
///         let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
///         println!("reconcile #{n}: {}", req.key);
///         Ok(Action::await_change())
///     }
/// }
/// # fn check<R: Reconciler<ConfigMap, Ctx>>(_: R) {}
/// # check(Counting::default());
/// ```
pub trait Reconciler<K, C>: Send + Sync + 'static
where
    K: Send + 'static,
    C: Send + Sync + 'static,
{
    /// The reconcile error (logged, counted, retried).
    type Error: fmt::Display + fmt::Debug + Send + 'static;

    /// Reconciles one object.
    ///
    /// An implementation may write `async fn reconcile(..)`: the future it
    /// returns must be `Send`, as workers run on a multi-threaded runtime.
    fn reconcile(
        &self,
        request: Request<K>,
        ctx: Arc<C>,
    ) -> impl Future<Output = Result<Action, Self::Error>> + Send;

    /// Whether `error` is terminal: counted and logged but not retried
    /// (see [`TerminalError`](crate::TerminalError)). The default
    /// recognizes a `TerminalError`, also inside a boxed error's chain;
    /// override it for an error type of your own.
    fn is_terminal(&self, error: &Self::Error) -> bool {
        crate::retry::is_terminal_error(error)
    }
}

impl<K, C, F, Fut, E> Reconciler<K, C> for F
where
    K: Send + 'static,
    C: Send + Sync + 'static,
    F: Fn(Request<K>, Arc<C>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: fmt::Display + fmt::Debug + Send + 'static,
{
    type Error = E;

    fn reconcile(
        &self,
        request: Request<K>,
        ctx: Arc<C>,
    ) -> impl Future<Output = Result<Action, E>> + Send {
        (self)(request, ctx)
    }
}
