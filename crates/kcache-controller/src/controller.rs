//! The controller: builder, event mapping, workers, shutdown.

use std::any::TypeId;
use std::fmt;
use std::future::Future;
#[cfg(feature = "prometheus")]
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kcache_core::{CachedObject, ShardField, ShardSelector};
use kcache_informer::{HasSynced, SharedIndexInformer, SharedInformerFactory};
use kcache_lease::shard::{MembershipStore, Shard, ShardConfig, ShardError};
use kcache_lease::{LeaderElectionConfig, LeaderElector, LeaseLock};
use kcache_workqueue::{RateLimiter, WorkQueue};
use kube::Resource;
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::consistency::{Consistency, GateMetrics, StaleGate, WriteLedger};
use crate::error::{ControllerError, UnsyncedInformer};
use crate::metrics::MetricsProvider;
#[cfg(feature = "prometheus")]
use crate::metrics::MetricsRegistry;
use crate::predicate::Predicate;
use crate::reconciler::{Reconciler, Trigger};
use crate::run_mode::{RunMode, shard_metrics};
use crate::server::Health;
#[cfg(feature = "prometheus")]
use crate::server::MetricsServer;
use crate::shard_informers::{AttachAll, Caches, Follower, PrimaryOf};
use crate::source::{
    Enqueuer, Mapper, OwnedHandler, PrimaryHandler, SourceFn, SourceHandle, WatchHandler, source,
    source_handle,
};
use crate::worker::{Primary, Shared, WorkerMetrics};

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
/// [`Controller::new`] whole (like kube-runtime's `watcher::Config`); see
/// also the builder methods on [`Controller`].
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
    /// [`ControllerError::CacheSyncTimeout`], naming the informers that did
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

type ShutdownFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

#[cfg(feature = "prometheus")]
enum MetricsBind {
    Addr(SocketAddr),
    Listener(std::net::TcpListener),
}

/// A handle on a controller: queue a key by hand, stop it, check health.
#[derive(Clone)]
pub struct ControllerHandle {
    enqueuer: Arc<OnceLock<Enqueuer>>,
    stop: CancellationToken,
    health: Health,
    /// Set by `leader_election`.
    leader_elected: Arc<AtomicBool>,
    /// The elector, once `run` created it.
    lease: Arc<OnceLock<Arc<LeaderElector>>>,
    /// The factory whose informers the controller caches with now (with
    /// sharded informers: the current ranges' factory).
    factory: Arc<RwLock<SharedInformerFactory>>,
    /// What the controller's writes returned (see [`Consistency`]).
    pub(crate) ledger: Arc<WriteLedger>,
}

impl fmt::Debug for ControllerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerHandle")
            .field("running", &self.enqueuer.get().is_some())
            .field("stopped", &self.stop.is_cancelled())
            .finish()
    }
}

impl ControllerHandle {
    /// Queues `key` for a reconcile; `false` when the controller is not
    /// running (not started yet, or stopping).
    pub fn enqueue(&self, key: impl Into<String>) -> bool {
        match self.enqueuer.get() {
            Some(e) if !e.queue.shutting_down() => {
                e.enqueue(key.into(), Trigger::Manual, false);
                true
            }
            _ => false,
        }
    }
    /// The informer of `C` the controller caches with now: its factory's;
    /// with [`shard_informers`](Controller::shard_informers), the informer
    /// of the replica's current hash ranges (it changes when the ranges
    /// move: ask again in every reconcile rather than keeping it).
    pub fn informer<C>(&self) -> SharedIndexInformer<C>
    where
        C: Resource + Send + Sync + 'static,
        C::DynamicType: Default + Clone + Send + Sync + 'static,
    {
        let factory = self.factory.read().clone();
        factory.informer::<C>()
    }

    /// The shard selector of the controller's current informers (`None`
    /// unless they are sharded and have synced once).
    pub fn shard_selector(&self) -> Option<ShardSelector> {
        self.factory.read().shard_selector().cloned()
    }

    /// Starts a graceful shutdown.
    pub fn stop(&self) {
        self.stop.cancel();
    }
    /// The controller's readiness.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Whether this replica may act now: always without leader election;
    /// with it, only while it leads and its renew deadline has not passed
    /// on this process's clock (see [`LeaderElector::may_act`]).
    pub fn may_act(&self) -> bool {
        if !self.leader_elected.load(Ordering::SeqCst) {
            return true;
        }
        self.lease.get().is_some_and(|e| e.may_act())
    }

    /// `client`, fenced by this controller's lease and recording its
    /// writes. Give it to the reconciler for its writes.
    ///
    /// Fenced: its writes (POST, PUT, PATCH, DELETE) are not sent, and
    /// fail with [`NotLeading`], while this replica may not act
    /// ([`may_act`](Self::may_act)); reads always pass. A leader that lost
    /// its lease (cut off, or paused and resumed after a standby took
    /// over) then cannot write, even from a reconcile that ignores its
    /// cancellation. A write already sent is not recalled: keep writes
    /// guarded by the apiserver's preconditions (resourceVersion, uid).
    /// Without leader election the fence lets everything through.
    ///
    /// Recording: while the controller runs, what each successful write
    /// returned is recorded for the reconcile it was made in (and for the
    /// written object, or its controlling owner, when that is a primary),
    /// so that the next reconcile of that key waits for the caches to
    /// catch up and reads the written objects back (see [`Consistency`]).
    /// Writes from a task the reconcile spawned are recorded for the
    /// written object only.
    pub fn fenced_client(&self, client: kube::Client) -> kube::Client {
        let namespace = client.default_namespace().to_owned();
        let handle = self.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (client, handle) = (client.clone(), handle.clone());
            async move {
                let method = req.method().clone();
                let write = !matches!(
                    method,
                    http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
                );
                if write && !handle.may_act() {
                    return Err(kube::Error::Service(Box::new(NotLeading {
                        path: req.uri().path().to_owned(),
                        method,
                    })));
                }
                if !write || !handle.ledger.recording() {
                    return client.send(req).await;
                }
                // read on this task (the reconcile's), before the request
                let reconciling = crate::consistency::current_key(&handle.ledger);
                let path = req.uri().path().to_owned();
                let response = client.send(req).await?;
                crate::consistency::record_response(
                    &handle.ledger,
                    reconciling,
                    &method,
                    &path,
                    response,
                )
                .await
            }
        });
        kube::Client::new(service, namespace)
    }
}

/// A write refused by a [`ControllerHandle::fenced_client`]: this replica
/// does not lead (or its lease may already have been taken over).
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: {method} {path}: this replica is not the leader (or its renew deadline passed), so another replica may be acting"
)]
pub struct NotLeading {
    /// The request's method.
    pub method: http::Method,
    /// The request's path.
    pub path: String,
}

/// A controller for the primary resource `K`: client-go's sample-controller
/// loop, controller-runtime's builder. See the [crate docs](crate) for an
/// example.
pub struct Controller<K: Resource> {
    config: Config,
    factory: SharedInformerFactory,
    primary: SharedIndexInformer<K>,
    primary_namespaced: bool,
    primary_group: String,
    primary_kind: String,
    /// The primary's resource (plural), as a `Status` answer names it.
    primary_plural: String,
    primary_predicate: Option<Predicate>,
    sources: Vec<SourceFn>,
    /// Builds the primary informer of a factory (typed controllers only).
    primary_of: Option<PrimaryOf<K>>,
    /// Set by `shard_informers`.
    shard_field: Option<ShardField>,
    mode: RunMode,
    /// Set when both leader election and sharding were asked for.
    conflicting_modes: bool,
    metrics: Option<Arc<dyn MetricsProvider>>,
    #[cfg(feature = "prometheus")]
    registry: Option<MetricsRegistry>,
    #[cfg(feature = "prometheus")]
    metrics_bind: Option<MetricsBind>,
    shutdown: Vec<ShutdownFuture>,
    handle: ControllerHandle,
}

impl<K: Resource> fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("config", &self.config)
            .field("sources", &self.sources.len())
            .field(
                "leader_election",
                &matches!(self.mode, RunMode::LeaderElected(..)),
            )
            .field("shard", &self.mode.shard())
            .finish_non_exhaustive()
    }
}

impl<K> Controller<K>
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Send + Sync + 'static,
{
    /// A controller for `K`, with informers from `factory` (shared: a type
    /// watched by several controllers costs one watch).
    pub fn new(factory: &SharedInformerFactory, config: Config) -> Self
    where
        K::Scope: 'static,
    {
        let namespaced =
            TypeId::of::<K::Scope>() != TypeId::of::<k8s_openapi::ClusterResourceScope>();
        let mut c = Self::for_informer(
            factory,
            factory.informer::<K>(),
            &K::DynamicType::default(),
            config,
        )
        .cluster_scoped(!namespaced);
        c.primary_of = Some(Arc::new(|f: &SharedInformerFactory| f.informer::<K>()));
        c
    }
}

impl<K> Controller<K>
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// A controller whose primary informer is given: a `DynamicObject`
    /// informer (`factory.dynamic_informer(&api_resource)`, with the
    /// `ApiResource` as `dyntype`), or an informer with its own indexes or
    /// selectors. Owned and watched types still come from `factory`. An
    /// informer nobody started is run by the controller (and stopped with
    /// it). The primary is taken as namespaced: call
    /// [`cluster_scoped`](Self::cluster_scoped) for a cluster-scoped one.
    pub fn for_informer(
        factory: &SharedInformerFactory,
        informer: SharedIndexInformer<K>,
        dyntype: &K::DynamicType,
        config: Config,
    ) -> Self {
        Self {
            config,
            factory: factory.clone(),
            primary: informer,
            primary_namespaced: true,
            primary_group: K::group(dyntype).into_owned(),
            primary_kind: K::kind(dyntype).into_owned(),
            primary_plural: K::plural(dyntype).into_owned(),
            primary_predicate: None,
            sources: Vec::new(),
            primary_of: None,
            shard_field: None,
            mode: RunMode::Plain,
            conflicting_modes: false,
            metrics: None,
            #[cfg(feature = "prometheus")]
            registry: None,
            #[cfg(feature = "prometheus")]
            metrics_bind: None,
            shutdown: Vec::new(),
            handle: ControllerHandle {
                enqueuer: Arc::new(OnceLock::new()),
                stop: CancellationToken::new(),
                health: Health::default(),
                leader_elected: Arc::new(AtomicBool::new(false)),
                lease: Arc::new(OnceLock::new()),
                factory: Arc::new(RwLock::new(factory.clone())),
                ledger: Arc::default(),
            },
        }
    }

    /// Whether the primary resource is cluster-scoped (keys are names, and
    /// owned objects map to `name` rather than `namespace/name`). Set
    /// before [`owns`](Self::owns).
    pub fn cluster_scoped(mut self, cluster_scoped: bool) -> Self {
        self.primary_namespaced = !cluster_scoped;
        self
    }

    /// The primary informer (its lister is the reconciler's cache).
    pub fn primary(&self) -> &SharedIndexInformer<K> {
        &self.primary
    }

    /// A handle to queue keys and stop the controller.
    pub fn handle(&self) -> ControllerHandle {
        self.handle.clone()
    }

    /// Number of concurrent reconciles.
    pub fn workers(mut self, n: usize) -> Self {
        self.config = self.config.workers(n);
        self
    }

    /// Filters the primary's events (see [`Predicate`]). Called twice, both
    /// must pass.
    pub fn with_predicate(mut self, predicate: Predicate) -> Self {
        self.primary_predicate = Some(match self.primary_predicate.take() {
            Some(p) => p.and(predicate),
            None => predicate,
        });
        self
    }

    /// Reconciles the owner when an object of type `C` that it controls
    /// changes: the child's `controller: true` ownerReference must name the
    /// primary's group and kind.
    pub fn owns<C>(self) -> Self
    where
        C: Resource + Send + Sync + 'static,
        C::DynamicType: Default + Clone + Send + Sync + 'static,
    {
        self.owns_with::<C>(None)
    }

    /// [`owns`](Self::owns) with a predicate on the child's events.
    pub fn owns_with<C>(mut self, predicate: impl Into<Option<Predicate>>) -> Self
    where
        C: Resource + Send + Sync + 'static,
        C::DynamicType: Default + Clone + Send + Sync + 'static,
    {
        // created now: the factory starts it with the others
        let _ = self.factory.informer::<C>();
        let owner_group = self.primary_group.clone();
        let owner_kind = self.primary_kind.clone();
        let kind = C::kind(&C::DynamicType::default()).into_owned();
        let owner_namespaced = self.primary_namespaced;
        let predicate = predicate.into();
        self.sources.push(source::<C, _>(move |enq| OwnedHandler {
            enq,
            owner_group: owner_group.clone(),
            owner_kind: owner_kind.clone(),
            owner_namespaced,
            kind: kind.clone(),
            predicate: predicate.clone(),
        }));
        self
    }

    /// Reconciles the primary objects whose keys `mapper` returns when an
    /// object of type `O` changes (on an update, both the old and the new
    /// state are mapped).
    pub fn watches<O>(
        self,
        mapper: impl Fn(&CachedObject<O>) -> Vec<String> + Send + Sync + 'static,
    ) -> Self
    where
        O: Resource + Send + Sync + 'static,
        O::DynamicType: Default + Clone + Send + Sync + 'static,
    {
        self.watches_with::<O>(mapper, None)
    }

    /// [`watches`](Self::watches) with a predicate on the watched events.
    pub fn watches_with<O>(
        mut self,
        mapper: impl Fn(&CachedObject<O>) -> Vec<String> + Send + Sync + 'static,
        predicate: impl Into<Option<Predicate>>,
    ) -> Self
    where
        O: Resource + Send + Sync + 'static,
        O::DynamicType: Default + Clone + Send + Sync + 'static,
    {
        let _ = self.factory.informer::<O>();
        let kind = O::kind(&O::DynamicType::default()).into_owned();
        let predicate = predicate.into();
        let mapper: Mapper<O> = Arc::new(mapper);
        self.sources.push(source::<O, _>(move |enq| WatchHandler {
            enq,
            mapper: mapper.clone(),
            kind: kind.clone(),
            predicate: predicate.clone(),
        }));
        self
    }

    /// Runs the workers only while this replica holds the lease (see
    /// [`leader_election`](crate::lease::leader_election)). Informers run and caches stay warm on
    /// standbys, so a takeover starts reconciling at once.
    pub fn leader_election(
        mut self,
        config: LeaderElectionConfig,
        lock: impl LeaseLock + 'static,
    ) -> Self {
        self.handle.leader_elected.store(true, Ordering::SeqCst);
        self.conflicting_modes |= matches!(self.mode, RunMode::Sharded(_));
        self.mode = RunMode::LeaderElected(config, Arc::new(lock));
        self
    }

    /// Runs as one replica of the shard group `config.group`: every
    /// replica is active and reconciles only the keys it owns, handed over
    /// through membership Leases in `store` so that a key is never
    /// reconciled by two replicas at once (see [`shard`](crate::lease::shard)).
    /// Keys it does not own are not queued (also through
    /// [`ControllerHandle::enqueue`]) and are dropped when they come out of
    /// the queue; keys it gains are queued from the cache (trigger
    /// [`Trigger::Handover`]). The replica joins the group once its caches
    /// have synced. Cannot be combined with
    /// [`leader_election`](Self::leader_election).
    pub fn sharded(mut self, config: ShardConfig, store: impl MembershipStore) -> Self {
        self.conflicting_modes |= matches!(self.mode, RunMode::LeaderElected(..));
        self.mode = RunMode::Sharded(Shard::new(config, store));
        self
    }

    /// Makes a [`sharded`](Self::sharded) controller's informers list and
    /// watch only its share, with the apiserver's shard selector on
    /// `field` (Kubernetes 1.36+, feature gate `ShardedListAndWatch`; on an
    /// apiserver without it, each informer filters on the client and the
    /// cache holds the same share, see
    /// [`ShardFilterMode`](kcache_informer::ShardFilterMode)). The hash
    /// space is cut into [`SHARD_SLOTS`](crate::SHARD_SLOTS) slots spread
    /// over the group's members by rendezvous hashing, and a key belongs
    /// to the member owning the slot of its object's `field` hash, so the
    /// replica that caches an object reconciles it. When the members
    /// change, the replica builds informers for its new ranges while the
    /// old ones serve the keys it keeps, switches once they have synced
    /// and it acknowledged the new view, queues the keys it gained
    /// (trigger [`Trigger::Handover`]) and drops the old informers: an
    /// object that left its ranges leaves its cache without a delete
    /// event. Read owned and watched objects through
    /// [`ControllerHandle::informer`], which follows the switch.
    ///
    /// `field`: [`ShardField::Namespace`] when the controller
    /// [`owns`](Self::owns) or [`watches`](Self::watches) other objects
    /// (parent and children share a namespace), [`ShardField::Uid`] (even
    /// spread) when it has only a primary. `run` fails with
    /// [`ControllerError::ShardField`] before anything starts for uid
    /// with owned or watched sources, namespace with a cluster-scoped
    /// primary, a controller that is not [`sharded`](Self::sharded), or
    /// one built with [`for_informer`](Self::for_informer). Without this,
    /// a sharded controller hashes keys and every replica caches
    /// everything (for clusters without the feature gate).
    pub fn shard_informers(mut self, field: ShardField) -> Self {
        self.shard_field = Some(field);
        self
    }

    /// Checks [`shard_informers`](Self::shard_informers)' field against
    /// the controller's sources and primary.
    fn validate_shard_field(&self) -> Result<(), ControllerError> {
        let Some(field) = self.shard_field else {
            return Ok(());
        };
        let reason = if self.mode.shard().is_none() {
            Some("sharded informers need a sharded controller: call `sharded` too")
        } else if self.primary_of.is_none() {
            Some(
                "the primary informer was given to `for_informer`: build the controller with `Controller::new` so that each range gets its own primary informer",
            )
        } else if field == ShardField::Uid && !self.sources.is_empty() {
            Some(
                "owned and watched objects have uids of their own, so a child would be cached by another replica than its parent: shard on metadata.namespace (parent and children share a namespace)",
            )
        } else if field == ShardField::Namespace && !self.primary_namespaced {
            Some(
                "the primary is cluster-scoped: every object hashes the empty namespace and one replica would cache them all; shard on metadata.uid, or hash keys (`sharded` without `shard_informers`)",
            )
        } else {
            None
        };
        match reason {
            Some(reason) => Err(ControllerError::ShardField { field, reason }),
            None => Ok(()),
        }
    }

    /// The shard membership of a [`sharded`](Self::sharded) controller:
    /// its state and the keys it owns.
    pub fn shard(&self) -> Option<&Shard> {
        self.mode.shard()
    }

    /// Records reconcile, workqueue, informer, reflector and leader
    /// metrics in `registry` (the one [`serve_metrics`](Self::serve_metrics)
    /// serves).
    #[cfg(feature = "prometheus")]
    #[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
    pub fn metrics(mut self, registry: MetricsRegistry) -> Self {
        self.metrics = Some(Arc::new(registry.clone()));
        self.registry = Some(registry);
        self
    }

    /// Records this controller's metrics, and its queue's, informers' and
    /// reflectors' (the providers `provider` hands out), in `provider`:
    /// metrics without Prometheus, or into another system. Replaces
    /// [`metrics`](Self::metrics)' registry as the recorder (not as the
    /// registry served).
    pub fn metrics_provider(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.metrics = Some(provider);
        self
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `addr` while running
    /// (with a new registry unless [`metrics`](Self::metrics) gave one).
    #[cfg(feature = "prometheus")]
    #[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
    pub fn serve_metrics(mut self, addr: SocketAddr) -> Self {
        self.metrics_bind = Some(MetricsBind::Addr(addr));
        self
    }

    /// Like [`serve_metrics`](Self::serve_metrics), on a listener already
    /// bound (e.g. to port 0, to learn the port first).
    #[cfg(feature = "prometheus")]
    #[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
    pub fn serve_metrics_on(mut self, listener: std::net::TcpListener) -> Self {
        self.metrics_bind = Some(MetricsBind::Listener(listener));
        self
    }

    /// Shuts down gracefully when `signal` completes.
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown.push(Box::pin(signal));
        self
    }

    /// Shuts down gracefully on Ctrl-C (SIGINT) or SIGTERM.
    pub fn shutdown_on_signal(self) -> Self {
        self.shutdown_on(async {
            #[cfg(unix)]
            {
                use tokio::signal::unix::{SignalKind, signal};
                match signal(SignalKind::terminate()) {
                    Ok(mut term) => {
                        tokio::select! {
                            _ = tokio::signal::ctrl_c() => {}
                            _ = term.recv() => {}
                        }
                    }
                    Err(_) => {
                        let _ = tokio::signal::ctrl_c().await;
                    }
                }
            }
            #[cfg(not(unix))]
            {
                let _ = tokio::signal::ctrl_c().await;
            }
            tracing::info!("shutdown signal received");
        })
    }

    /// Runs the controller until shutdown: registers the event handlers,
    /// starts the informers, waits for the caches, (with leader election:
    /// waits for the lease), runs the workers; at shutdown stops taking
    /// keys, lets running reconciles finish within the graceful timeout,
    /// shuts the queue down, releases the lease and stops the endpoint.
    ///
    /// Returns [`ControllerError::LeadershipLost`] when the lease was lost
    /// (the workers were stopped; a process usually exits then, as
    /// client-go's controllers do). The factory's informers keep running:
    /// call `factory.shutdown()` when everything is done.
    pub async fn run<R, C>(self, reconciler: R, ctx: Arc<C>) -> Result<(), ControllerError>
    where
        R: Reconciler<K, C>,
        C: Send + Sync + 'static,
    {
        let mut run = self.prepare()?;
        if run.controller.shard_field.is_some() {
            return run.run_with_sharded_informers(reconciler, ctx).await;
        }
        let handles = run.register_sources()?;
        run.attach_informer_metrics(&handles);
        let mut cleanup = Cleanup {
            primary: start_informers(&run.controller.factory, &run.controller.primary),
            ..Cleanup::default()
        };
        if let Err(e) = run.start_observability(&mut cleanup).await {
            cleanup.run(handles, &run.queue).await;
            return Err(e);
        }
        let health = run.controller.handle.health.clone();
        let synced: Vec<&dyn HasSynced> = handles.iter().map(|h| &*h.synced).collect();
        let timeout = run.controller.config.cache_sync_timeout;
        let waited = wait_for_sync(
            &run.name,
            &run.controller.handle.stop,
            &health,
            &synced,
            timeout,
        )
        .await;
        drop(synced);
        if !matches!(waited, Synced::Yes) {
            health.set_stopped();
            let unsynced = handles
                .iter()
                .filter(|h| !h.synced.has_synced())
                .map(|h| {
                    let s = (h.probe)();
                    UnsyncedInformer {
                        informer: s.name,
                        last_error: s.last_error,
                    }
                })
                .collect();
            cleanup.run(handles, &run.queue).await;
            return match waited {
                Synced::TimedOut(timeout) => {
                    let e = ControllerError::CacheSyncTimeout { timeout, unsynced };
                    tracing::warn!(controller = %run.name, error = %e, "giving up");
                    Err(e)
                }
                _ => Ok(()),
            };
        }
        let queue = run.queue.clone();
        let name = run.name.clone();
        let result = run.run_mode(reconciler, ctx).await;
        health.set_stopped();
        cleanup.run(handles, &queue).await;
        tracing::info!(controller = %name, "controller stopped");
        result
    }

    /// The metrics the run records into: an endpoint without a registry
    /// gets a new one, and a registry is the provider unless one was given.
    #[cfg(feature = "prometheus")]
    fn settle_metrics(&mut self) {
        if self.registry.is_none() && self.metrics_bind.is_some() {
            self.registry = Some(MetricsRegistry::new());
        }
        if self.metrics.is_none() {
            self.metrics = self
                .registry
                .clone()
                .map(|r| Arc::new(r) as Arc<dyn MetricsProvider>);
        }
    }

    /// Without the `prometheus` feature the metrics are the provider given,
    /// if any.
    #[cfg(not(feature = "prometheus"))]
    fn settle_metrics(&mut self) {}

    /// Step 1: validates the run mode, names the controller, builds the
    /// queue and the enqueuer.
    fn prepare(mut self) -> Result<Running<K>, ControllerError> {
        if self.conflicting_modes {
            return Err(ShardError::WithLeaderElection.into());
        }
        self.mode.validate()?;
        self.validate_shard_field()?;
        let name = self
            .config
            .name
            .clone()
            .unwrap_or_else(|| self.primary_kind.to_lowercase());
        self.handle.health.set_name(&name);
        self.settle_metrics();
        let mut qb = WorkQueue::<String>::builder().name(name.clone());
        if let Some(rl) = &self.config.rate_limiter {
            qb = qb.rate_limiter(rl.clone());
        }
        if let Some(p) = self.metrics.as_ref().and_then(|m| m.workqueue_provider()) {
            qb = qb.metrics(p);
        }
        let queue = qb.build()?;
        self.handle.ledger.configure(
            &name,
            &self.config.consistency,
            &self.primary_group,
            &self.primary_kind,
            self.primary_namespaced,
        );
        let enq = Enqueuer::new(queue.clone(), self.config.initial_list_priority)
            .with_shard(self.mode.shard().cloned())
            .with_ledger(self.handle.ledger.clone());
        let _ = self.handle.enqueuer.set(enq.clone());
        Ok(Running {
            name,
            queue,
            enq,
            controller: self,
        })
    }
}

/// A controller between [`Controller::run`]'s steps: the controller as
/// built (its metrics provider settled by [`Controller::prepare`]), with
/// its name, queue and enqueuer.
struct Running<K: Resource> {
    name: String,
    queue: WorkQueue<String>,
    enq: Enqueuer,
    controller: Controller<K>,
}

impl<K> Running<K>
where
    K: Primary,
{
    /// Step 2: the event handlers on the primary, owned and watched
    /// informers (removed again if one fails).
    fn register_sources(&mut self) -> Result<Vec<SourceHandle>, ControllerError> {
        let mut handles = Vec::new();
        let primary = PrimaryHandler {
            enq: self.enq.for_type(
                &self.controller.primary,
                &self.controller.primary_group,
                &self.controller.primary_kind,
                &self.controller.primary_plural,
            ),
            predicate: self.controller.primary_predicate.take(),
        };
        let registered = self
            .controller
            .primary
            .add_event_handler(primary)
            .map(|reg| source_handle(&self.controller.primary, reg))
            .map_err(ControllerError::from);
        let all = std::iter::once(registered).chain(
            std::mem::take(&mut self.controller.sources)
                .into_iter()
                .map(|s| {
                    s(&self.controller.factory, self.enq.clone()).map_err(ControllerError::from)
                }),
        );
        for h in all {
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    for h in handles {
                        (h.remove)();
                    }
                    self.queue.shut_down();
                    return Err(e);
                }
            }
        }
        Ok(handles)
    }

    /// Step 2b: the informers' and their reflectors' metrics (before the
    /// informers start: a started reflector keeps the provider it had).
    fn attach_informer_metrics(&self, handles: &[SourceHandle]) {
        let Some(m) = &self.controller.metrics else {
            return;
        };
        let Some(informer) = m.informer_provider() else {
            return;
        };
        let reflector = m.reflector_provider();
        for h in handles {
            (h.attach_metrics)(informer.clone(), reflector.clone());
        }
    }

    /// Step 4: the shard metrics, the endpoint, and the task that turns a
    /// shutdown future into the stop signal.
    async fn start_observability(&mut self, cleanup: &mut Cleanup) -> Result<(), ControllerError> {
        let caches = self.caches();
        self.start_observability_with(cleanup, &caches).await
    }

    async fn start_observability_with(
        &mut self,
        cleanup: &mut Cleanup,
        caches: &Caches<K>,
    ) -> Result<(), ControllerError> {
        if let (Some(m), Some(s)) = (&self.controller.metrics, self.controller.mode.shard())
            && let Some(id) = shard_metrics(m.as_ref(), s, &self.name, caches)
        {
            cleanup.shard_refresher = Some((m.clone(), id));
        }
        #[cfg(feature = "prometheus")]
        if let Some(bind) = self.controller.metrics_bind.take() {
            let registry = self.controller.registry.clone().unwrap_or_default();
            let health = vec![self.controller.handle.health.clone()];
            let served = match bind {
                MetricsBind::Addr(addr) => MetricsServer::bind(addr, registry, health).await,
                MetricsBind::Listener(l) => MetricsServer::serve(l, registry, health),
            };
            cleanup.server = Some(served.map_err(ControllerError::MetricsServer)?);
        }
        let shutdown = std::mem::take(&mut self.controller.shutdown);
        cleanup.watcher = (!shutdown.is_empty()).then(|| {
            let stop = self.controller.handle.stop.clone();
            tokio::spawn(async move {
                let any = futures::future::select_all(shutdown);
                tokio::select! {
                    _ = any => stop.cancel(),
                    _ = stop.cancelled() => {}
                }
            })
        });
        Ok(())
    }

    /// The caches the workers read: the primary, or with sharded
    /// informers the current range's primary.
    fn caches(&self) -> Caches<K> {
        match self.controller.shard_field {
            Some(field) => Caches::sharded(field),
            None => Caches::fixed(self.controller.primary.clone()),
        }
    }

    /// [`Controller::run`] with sharded informers: joins the group at
    /// once (there is no cache before the first view), follows the view
    /// with informer sets, runs the workers on the current set.
    async fn run_with_sharded_informers<R, C>(
        mut self,
        reconciler: R,
        ctx: Arc<C>,
    ) -> Result<(), ControllerError>
    where
        R: Reconciler<K, C>,
        C: Send + Sync + 'static,
    {
        let (Some(field), Some(shard), Some(primary_of)) = (
            self.controller.shard_field,
            self.controller.mode.shard().cloned(),
            self.controller.primary_of.clone(),
        ) else {
            unreachable!("validated in prepare")
        };
        let caches = Caches::<K>::sharded(field);
        shard.set_placement(caches.placement());
        let mut cleanup = Cleanup::default();
        if let Err(e) = self.start_observability_with(&mut cleanup, &caches).await {
            cleanup.run(Vec::new(), &self.queue).await;
            return Err(e);
        }
        let attach: Option<AttachAll> = self.controller.metrics.as_ref().and_then(|m| {
            let informer = m.informer_provider()?;
            let reflector = m.reflector_provider();
            Some(Arc::new(move |handles: &[SourceHandle]| {
                for h in handles {
                    (h.attach_metrics)(informer.clone(), reflector.clone());
                }
            }) as Arc<dyn Fn(&[SourceHandle]) + Send + Sync>)
        });
        let health = self.controller.handle.health.clone();
        let follower = Follower {
            name: self.name.clone(),
            field,
            shard: shard.clone(),
            base: self.controller.factory.clone(),
            primary_of,
            primary_predicate: self.controller.primary_predicate.take(),
            sources: std::mem::take(&mut self.controller.sources),
            enq: self.enq.clone(),
            primary_group: self.controller.primary_group.clone(),
            primary_kind: self.controller.primary_kind.clone(),
            primary_plural: self.controller.primary_plural.clone(),
            caches: caches.clone(),
            handle_factory: self.controller.handle.factory.clone(),
            attach,
            on_first_sync: {
                let (health, name) = (health.clone(), self.name.clone());
                Box::new(move || {
                    health.set_synced(true);
                    tracing::info!(controller = %name, "caches synced");
                })
            },
        };
        let follow_stop = CancellationToken::new();
        let follow_task = tokio::spawn(follower.run(follow_stop.clone()));
        tracing::info!(controller = %self.name, %field, "sharded informers: joining the shard group before caching");
        let queue = self.queue.clone();
        let name = self.name.clone();
        let result = self.run_mode_with(reconciler, ctx, caches).await;
        health.set_stopped();
        follow_stop.cancel();
        let _ = follow_task.await;
        cleanup.run(Vec::new(), &queue).await;
        tracing::info!(controller = %name, "controller stopped");
        result
    }

    /// Step 6: the workers, in the run mode.
    async fn run_mode<R, C>(self, reconciler: R, ctx: Arc<C>) -> Result<(), ControllerError>
    where
        R: Reconciler<K, C>,
        C: Send + Sync + 'static,
    {
        let caches = self.caches();
        self.run_mode_with(reconciler, ctx, caches).await
    }

    async fn run_mode_with<R, C>(
        self,
        reconciler: R,
        ctx: Arc<C>,
        caches: Caches<K>,
    ) -> Result<(), ControllerError>
    where
        R: Reconciler<K, C>,
        C: Send + Sync + 'static,
    {
        let elector = self.controller.mode.elector()?;
        if let Some(e) = &elector {
            let _ = self.controller.handle.lease.set(e.clone());
        }
        let consistency = &self.controller.config.consistency;
        let ledger = self.controller.handle.ledger.clone();
        let gate = consistency.stale_cache_gate.then(|| {
            StaleGate::new(
                ledger.clone(),
                self.enq.clone(),
                consistency.max_stale_wait,
                self.controller
                    .metrics
                    .as_ref()
                    .map(|m| GateMetrics::new(m.as_ref(), &self.name)),
            )
        });
        let read_own_writes = consistency.read_own_writes;
        let shared = Arc::new(Shared {
            ledger,
            gate,
            read_own_writes,
            reconcile_timeout: self.controller.config.reconcile_timeout,
            lease: elector.clone(),
            metrics: self.controller.metrics.as_ref().map(|m| {
                WorkerMetrics::new(
                    m.as_ref(),
                    &self.name,
                    self.controller.config.workers.max(1),
                )
            }),
            name: self.name,
            queue: self.queue,
            enq: self.enq,
            primary: caches,
            reconciler,
            ctx,
            shard: self.controller.mode.shard().cloned(),
        });
        let stop = self.controller.handle.stop.clone();
        let health = self.controller.handle.health.clone();
        self.controller
            .mode
            .run(
                &shared,
                &self.controller.config,
                &stop,
                &health,
                self.controller.metrics.as_deref(),
                elector,
            )
            .await
    }
}

/// Step 3: starts the factory's informers, and claims the primary
/// informer if nobody runs it yet (one given to `for_informer`, not from
/// the factory). Returns the primary's run when this controller owns it
/// (stopped at the end of `run`), `None` when the factory or someone else
/// runs it: a controller never stops an informer it did not start.
fn start_informers<K>(
    factory: &SharedInformerFactory,
    primary: &SharedIndexInformer<K>,
) -> Option<(CancellationToken, tokio::task::JoinHandle<()>)>
where
    K: Primary,
{
    factory.start();
    // Not a child of `stop`: the cache stays live while running reconciles
    // finish.
    let token = CancellationToken::new();
    let task = primary.try_start(token.clone())?;
    let informer = primary.name().to_owned();
    let task = tokio::spawn(async move {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(%informer, error = %kcache_core::ErrorChain(&e), "the primary informer did not run")
            }
            Err(e) => tracing::warn!(%informer, error = %e, "the primary informer's task failed"),
        }
    });
    Some((token, task))
}

/// How waiting for the caches ended.
enum Synced {
    Yes,
    Stopped,
    TimedOut(Duration),
}

/// Step 5: waits until every source has synced, the controller is stopped,
/// or `timeout` passed.
async fn wait_for_sync(
    name: &str,
    stop: &CancellationToken,
    health: &Health,
    synced: &[&dyn HasSynced],
    timeout: Option<Duration>,
) -> Synced {
    tracing::info!(controller = %name, "waiting for caches to sync");
    let wait = kcache_informer::wait_for_cache_sync(stop, synced);
    let done = match timeout {
        None => wait.await,
        Some(t) => match tokio::time::timeout(t, wait).await {
            Ok(done) => done,
            Err(_) => return Synced::TimedOut(t),
        },
    };
    if !done {
        tracing::info!(controller = %name, "stopped before the caches synced");
        return Synced::Stopped;
    }
    health.set_synced(true);
    tracing::info!(controller = %name, "caches synced");
    Synced::Yes
}

#[derive(Default)]
struct Cleanup {
    primary: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
    shard_refresher: Option<(Arc<dyn MetricsProvider>, u64)>,
    #[cfg(feature = "prometheus")]
    server: Option<MetricsServer>,
    watcher: Option<tokio::task::JoinHandle<()>>,
}

impl Cleanup {
    async fn run(self, handles: Vec<SourceHandle>, queue: &WorkQueue<String>) {
        queue.shut_down();
        for h in handles {
            (h.remove)();
        }
        if let Some((m, id)) = self.shard_refresher {
            m.remove_refresher(id);
        }
        #[cfg(feature = "prometheus")]
        if let Some(s) = self.server {
            s.shutdown().await;
        }
        if let Some(w) = self.watcher {
            w.abort();
            let _ = w.await;
        }
        if let Some((token, task)) = self.primary {
            token.cancel();
            let _ = task.await;
        }
    }
}
