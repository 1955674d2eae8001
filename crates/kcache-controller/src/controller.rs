//! The controller: builder, event mapping, workers, shutdown.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt as _;
use kcache_core::{CachedObject, Metadata, ObjectOrTombstone};
use kcache_informer::{
    HasSynced, InformerError, ResourceEventHandler, ResourceEventHandlerRegistration,
    SharedIndexInformer, SharedInformerFactory,
};
use kcache_workqueue::{AddOpts, RateLimiter, WorkQueue};
use kube::Resource;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::action::Action;
use crate::error::ControllerError;
use crate::leader::{LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock};
use crate::metrics::{MetricsRegistry, label};
use crate::predicate::{Predicate, PredicateEvent};
use crate::reconciler::{Reconciler, Request, Trigger};
use crate::server::{Health, MetricsServer};
use crate::shard::{MembershipStore, Shard, ShardConfig, ShardError, ShardHooks, ShardMetrics};

/// The priority of keys queued from an informer's initial list: below live
/// changes (priority 0), so that a restart's full list does not delay them
/// (controller-runtime's `LowPriority`).
pub const INITIAL_LIST_PRIORITY: i32 = -100;

/// The default time running reconciles get to finish at shutdown.
pub const DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Controller settings (see also the builder methods on [`Controller`]).
#[derive(Clone)]
pub struct Config {
    name: Option<String>,
    workers: usize,
    graceful_shutdown_timeout: Duration,
    drain_on_shutdown: bool,
    initial_list_priority: i32,
    rate_limiter: Option<Arc<dyn RateLimiter<String>>>,
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
        }
    }
}

impl Config {
    /// The controller's name: metrics label, queue name, logs (default: the
    /// primary kind, lower case).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    /// Number of concurrent reconciles (default 1; 0 counts as 1).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }
    /// How long running reconciles get to finish at shutdown (default
    /// 30 s); after that they are dropped.
    pub fn graceful_shutdown_timeout(mut self, d: Duration) -> Self {
        self.graceful_shutdown_timeout = d;
        self
    }
    /// At shutdown, also reconcile the keys already queued and ready
    /// (within the graceful timeout) instead of leaving them (default:
    /// only running reconciles finish).
    pub fn drain_on_shutdown(mut self, drain: bool) -> Self {
        self.drain_on_shutdown = drain;
        self
    }
    /// The queue priority of keys from initial lists (default
    /// [`INITIAL_LIST_PRIORITY`]).
    pub fn initial_list_priority(mut self, priority: i32) -> Self {
        self.initial_list_priority = priority;
        self
    }
    /// The rate limiter for failed keys (default: client-go's
    /// `DefaultControllerRateLimiter`: per-key exponential 5 ms .. 1000 s,
    /// max-of an overall 10 qps / 100 burst bucket).
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<String> + 'static) -> Self {
        self.rate_limiter = Some(Arc::new(limiter));
        self
    }
}

/// Queues keys with their trigger.
#[derive(Clone)]
pub(crate) struct Enqueuer {
    queue: WorkQueue<String>,
    triggers: Arc<Mutex<HashMap<String, Trigger>>>,
    low_priority: i32,
    /// Sharded: keys this replica does not own are not queued.
    shard: Option<Shard>,
}

impl Enqueuer {
    pub(crate) fn new(queue: WorkQueue<String>, low_priority: i32) -> Self {
        Self {
            queue,
            triggers: Arc::new(Mutex::new(HashMap::new())),
            low_priority,
            shard: None,
        }
    }

    pub(crate) fn with_shard(mut self, shard: Option<Shard>) -> Self {
        self.shard = shard;
        self
    }

    fn note(&self, key: &str, trigger: Trigger) -> bool {
        if self.queue.shutting_down() {
            return false;
        }
        if self.shard.as_ref().is_some_and(|s| !s.owns(key)) {
            return false;
        }
        let own = |t: &Trigger| matches!(t, Trigger::Requeue | Trigger::Retry);
        let new_is_own = own(&trigger);
        self.triggers
            .lock()
            .entry(key.to_owned())
            .and_modify(|t| {
                // A change that comes while a requeue or retry waits is the
                // better explanation of the next reconcile.
                if own(t) && !new_is_own {
                    *t = trigger.clone();
                }
            })
            .or_insert(trigger);
        true
    }

    pub(crate) fn enqueue(&self, key: String, trigger: Trigger, initial: bool) {
        if !self.note(&key, trigger) {
            return;
        }
        if initial {
            self.queue
                .add_with_opts(key, AddOpts::priority(self.low_priority));
        } else {
            self.queue.add(key);
        }
    }

    fn requeue_after(&self, key: String, after: Duration) {
        if self.note(&key, Trigger::Requeue) {
            self.queue.add_after(key, after);
        }
    }

    fn retry(&self, key: String) {
        if self.note(&key, Trigger::Retry) {
            self.queue.add_rate_limited(key);
        }
    }

    fn take_trigger(&self, key: &str) -> Option<Trigger> {
        self.triggers.lock().remove(key)
    }
}

/// The key of the object that controls `meta` (its `controller: true`
/// ownerReference), when that owner is of `owner_kind` in `owner_group`
/// (the version is ignored, like controller-runtime). Owner references are
/// namespace-local: a namespaced owner's key is `<child namespace>/<owner
/// name>`; a cluster-scoped owner's key is its name.
pub fn owner_key(
    meta: &Metadata,
    owner_group: &str,
    owner_kind: &str,
    owner_namespaced: bool,
) -> Option<String> {
    let r = meta.controller_ref()?;
    let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if r.kind != owner_kind || group != owner_group || r.name.is_empty() {
        return None;
    }
    match (owner_namespaced, meta.namespace()) {
        (true, Some(ns)) => Some(format!("{ns}/{}", r.name)),
        (true, None) => None,
        (false, _) => Some(r.name.clone()),
    }
}

fn passes(p: &Option<Predicate>, ev: PredicateEvent<'_>) -> bool {
    p.as_ref().is_none_or(|p| p.evaluate(&ev))
}

pub(crate) struct PrimaryHandler {
    pub(crate) enq: Enqueuer,
    pub(crate) predicate: Option<Predicate>,
}

impl<K: 'static> ResourceEventHandler<K> for PrimaryHandler {
    fn on_add(&self, obj: &CachedObject<K>, initial: bool) {
        if passes(&self.predicate, PredicateEvent::Create(obj.meta())) {
            let trigger = if initial {
                Trigger::InitialList
            } else {
                Trigger::Added
            };
            self.enq.enqueue(obj.key().to_owned(), trigger, initial);
        }
    }
    fn on_update(&self, old: &CachedObject<K>, new: &CachedObject<K>) {
        let ev = PredicateEvent::Update {
            old: old.meta(),
            new: new.meta(),
        };
        if passes(&self.predicate, ev) {
            let trigger = if old.resource_version() == new.resource_version() {
                Trigger::Resync
            } else {
                Trigger::Updated
            };
            self.enq.enqueue(new.key().to_owned(), trigger, false);
        }
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<K>) {
        if passes(&self.predicate, PredicateEvent::Delete(obj.object().meta())) {
            self.enq
                .enqueue(obj.key().to_owned(), Trigger::Deleted, false);
        }
    }
}

pub(crate) struct OwnedHandler {
    pub(crate) enq: Enqueuer,
    pub(crate) owner_group: String,
    pub(crate) owner_kind: String,
    pub(crate) owner_namespaced: bool,
    pub(crate) kind: String,
    pub(crate) predicate: Option<Predicate>,
}

impl OwnedHandler {
    fn send(&self, meta: &Metadata, child_key: &str, initial: bool) {
        if let Some(key) = owner_key(
            meta,
            &self.owner_group,
            &self.owner_kind,
            self.owner_namespaced,
        ) {
            let trigger = Trigger::Owned {
                kind: self.kind.clone(),
                key: child_key.to_owned(),
            };
            self.enq.enqueue(key, trigger, initial);
        }
    }
}

impl<K: 'static> ResourceEventHandler<K> for OwnedHandler {
    fn on_add(&self, obj: &CachedObject<K>, initial: bool) {
        if passes(&self.predicate, PredicateEvent::Create(obj.meta())) {
            self.send(obj.meta(), obj.key(), initial);
        }
    }
    fn on_update(&self, old: &CachedObject<K>, new: &CachedObject<K>) {
        // A resync of an owned object says nothing new about its owner.
        if old.resource_version() == new.resource_version() {
            return;
        }
        let ev = PredicateEvent::Update {
            old: old.meta(),
            new: new.meta(),
        };
        if passes(&self.predicate, ev) {
            // Both owners: a changed controller reference concerns the old
            // owner too.
            self.send(new.meta(), new.key(), false);
            if old.meta().controller_ref() != new.meta().controller_ref() {
                self.send(old.meta(), old.key(), false);
            }
        }
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<K>) {
        if passes(&self.predicate, PredicateEvent::Delete(obj.object().meta())) {
            self.send(obj.object().meta(), obj.key(), false);
        }
    }
}

type Mapper<O> = Arc<dyn Fn(&CachedObject<O>) -> Vec<String> + Send + Sync>;

pub(crate) struct WatchHandler<O> {
    pub(crate) enq: Enqueuer,
    pub(crate) mapper: Mapper<O>,
    pub(crate) kind: String,
    pub(crate) predicate: Option<Predicate>,
}

impl<O> WatchHandler<O> {
    fn send(&self, obj: &CachedObject<O>, initial: bool, seen: &mut Vec<String>) {
        for key in (self.mapper)(obj) {
            if seen.contains(&key) {
                continue;
            }
            seen.push(key.clone());
            let trigger = Trigger::Watched {
                kind: self.kind.clone(),
                key: obj.key().to_owned(),
            };
            self.enq.enqueue(key, trigger, initial);
        }
    }
}

impl<O: 'static> ResourceEventHandler<O> for WatchHandler<O> {
    fn on_add(&self, obj: &CachedObject<O>, initial: bool) {
        if passes(&self.predicate, PredicateEvent::Create(obj.meta())) {
            self.send(obj, initial, &mut Vec::new());
        }
    }
    fn on_update(&self, old: &CachedObject<O>, new: &CachedObject<O>) {
        if old.resource_version() == new.resource_version() {
            return;
        }
        let ev = PredicateEvent::Update {
            old: old.meta(),
            new: new.meta(),
        };
        if passes(&self.predicate, ev) {
            let mut seen = Vec::new();
            self.send(new, false, &mut seen);
            self.send(old, false, &mut seen);
        }
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<O>) {
        if passes(&self.predicate, PredicateEvent::Delete(obj.object().meta())) {
            self.send(obj.object(), false, &mut Vec::new());
        }
    }
}

/// What the controller keeps of a registered source.
struct SourceHandle {
    synced: Box<dyn HasSynced>,
    remove: Box<dyn FnOnce() + Send>,
    probe: Probe,
}

type Probe = Arc<dyn Fn() -> (String, bool, usize, usize) + Send + Sync>;

type SourceFn = Box<dyn FnOnce(Enqueuer) -> Result<SourceHandle, InformerError> + Send>;

fn probe_of<K>(informer: &SharedIndexInformer<K>) -> Probe
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let informer = informer.clone();
    Arc::new(move || {
        let backlog = informer.listener_backlogs().iter().map(|(_, n)| n).sum();
        (
            informer.name().to_owned(),
            informer.has_synced(),
            informer.indexer().len(),
            backlog,
        )
    })
}

fn source_handle<K>(
    informer: &SharedIndexInformer<K>,
    registration: ResourceEventHandlerRegistration<K>,
) -> SourceHandle
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let registration = Arc::new(registration);
    let remove = {
        let informer = informer.clone();
        let registration = registration.clone();
        Box::new(move || informer.remove_event_handler(&registration)) as Box<dyn FnOnce() + Send>
    };
    SourceHandle {
        synced: Box::new(ArcSynced(registration)),
        remove,
        probe: probe_of(informer),
    }
}

struct ArcSynced<K: Resource>(Arc<ResourceEventHandlerRegistration<K>>);

impl<K: Resource + 'static> HasSynced for ArcSynced<K> {
    fn has_synced(&self) -> bool {
        self.0.has_synced()
    }
}

type ShutdownFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

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
    /// Starts a graceful shutdown.
    pub fn stop(&self) {
        self.stop.cancel();
    }
    /// The controller's readiness.
    pub fn health(&self) -> Health {
        self.health.clone()
    }
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
    primary_predicate: Option<Predicate>,
    sources: Vec<SourceFn>,
    leader: Option<(LeaderElectionConfig, Arc<dyn LeaseLock>)>,
    shard: Option<Shard>,
    metrics: Option<MetricsRegistry>,
    metrics_bind: Option<MetricsBind>,
    shutdown: Vec<ShutdownFuture>,
    handle: ControllerHandle,
}

impl<K: Resource> fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("config", &self.config)
            .field("sources", &self.sources.len())
            .field("leader_election", &self.leader.as_ref().map(|(c, _)| c))
            .field("shard", &self.shard)
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
        Self::for_informer(
            factory,
            factory.informer::<K>(),
            &K::DynamicType::default(),
            config,
        )
        .cluster_scoped(!namespaced)
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
            primary_predicate: None,
            sources: Vec::new(),
            leader: None,
            shard: None,
            metrics: None,
            metrics_bind: None,
            shutdown: Vec::new(),
            handle: ControllerHandle {
                enqueuer: Arc::new(OnceLock::new()),
                stop: CancellationToken::new(),
                health: Health::default(),
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
        let informer = self.factory.informer::<C>();
        let owner_group = self.primary_group.clone();
        let owner_kind = self.primary_kind.clone();
        let kind = C::kind(&C::DynamicType::default()).into_owned();
        let owner_namespaced = self.primary_namespaced;
        let predicate = predicate.into();
        self.sources.push(Box::new(move |enq| {
            let handler = OwnedHandler {
                enq,
                owner_group,
                owner_kind,
                owner_namespaced,
                kind,
                predicate,
            };
            let reg = informer.add_event_handler(handler)?;
            Ok(source_handle(&informer, reg))
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
        let informer = self.factory.informer::<O>();
        let kind = O::kind(&O::DynamicType::default()).into_owned();
        let predicate = predicate.into();
        let mapper: Mapper<O> = Arc::new(mapper);
        self.sources.push(Box::new(move |enq| {
            let handler = WatchHandler {
                enq,
                mapper,
                kind,
                predicate,
            };
            let reg = informer.add_event_handler(handler)?;
            Ok(source_handle(&informer, reg))
        }));
        self
    }

    /// Runs the workers only while this replica holds the lease (see
    /// [`leader`](crate::leader)). Informers run and caches stay warm on
    /// standbys, so a takeover starts reconciling at once.
    pub fn leader_election(
        mut self,
        config: LeaderElectionConfig,
        lock: impl LeaseLock + 'static,
    ) -> Self {
        self.leader = Some((config, Arc::new(lock)));
        self
    }

    /// Runs as one replica of the shard group `config.group`: every
    /// replica is active and reconciles only the keys it owns, handed over
    /// through membership Leases in `store` so that a key is never
    /// reconciled by two replicas at once (see [`shard`](crate::shard)).
    /// Keys it does not own are not queued (also through
    /// [`ControllerHandle::enqueue`]) and are dropped when they come out of
    /// the queue; keys it gains are queued from the cache (trigger
    /// [`Trigger::Handover`]). The replica joins the group once its caches
    /// have synced. Cannot be combined with
    /// [`leader_election`](Self::leader_election).
    pub fn sharded(mut self, config: ShardConfig, store: impl MembershipStore) -> Self {
        self.shard = Some(Shard::new(config, store));
        self
    }

    /// The shard membership of a [`sharded`](Self::sharded) controller:
    /// its state and the keys it owns.
    pub fn shard(&self) -> Option<&Shard> {
        self.shard.as_ref()
    }

    /// Records reconcile, workqueue, informer and leader metrics in
    /// `registry`.
    pub fn metrics(mut self, registry: MetricsRegistry) -> Self {
        self.metrics = Some(registry);
        self
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `addr` while running
    /// (with a new registry unless [`metrics`](Self::metrics) gave one).
    pub fn serve_metrics(mut self, addr: SocketAddr) -> Self {
        self.metrics_bind = Some(MetricsBind::Addr(addr));
        self
    }

    /// Like [`serve_metrics`](Self::serve_metrics), on a listener already
    /// bound (e.g. to port 0, to learn the port first).
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
        let Controller {
            config,
            factory,
            primary,
            primary_namespaced: _,
            primary_group: _,
            primary_kind,
            primary_predicate,
            sources,
            leader,
            shard,
            metrics,
            metrics_bind,
            shutdown,
            handle,
        } = self;
        if let Some((cfg, _)) = &leader {
            cfg.validate()?;
        }
        if let Some(s) = &shard {
            if leader.is_some() {
                return Err(ShardError::WithLeaderElection.into());
            }
            s.config().validate().map_err(ShardError::from)?;
        }
        let name = config
            .name
            .clone()
            .unwrap_or_else(|| primary_kind.to_lowercase());
        handle.health.set_name(&name);

        let metrics = match (&metrics, &metrics_bind) {
            (None, Some(_)) => Some(MetricsRegistry::new()),
            _ => metrics,
        };
        let mut qb = WorkQueue::<String>::builder().name(name.clone());
        if let Some(rl) = &config.rate_limiter {
            qb = qb.rate_limiter(rl.clone());
        }
        if let Some(m) = &metrics {
            qb = qb.metrics(m.workqueue_provider());
        }
        let queue = qb.build()?;
        let enq =
            Enqueuer::new(queue.clone(), config.initial_list_priority).with_shard(shard.clone());
        let _ = handle.enqueuer.set(enq.clone());

        let stop = handle.stop.clone();

        // Event handlers, then the informers.
        let mut handles: Vec<SourceHandle> = Vec::new();
        let mut cleanup = Cleanup::default();
        let reg = primary.add_event_handler(PrimaryHandler {
            enq: enq.clone(),
            predicate: primary_predicate,
        })?;
        handles.push(source_handle(&primary, reg));
        for s in sources {
            match s(enq.clone()) {
                Ok(h) => handles.push(h),
                Err(e) => {
                    for h in handles {
                        (h.remove)();
                    }
                    queue.shut_down();
                    return Err(e.into());
                }
            }
        }
        // The factory runs its informers; a primary nobody runs yet (one
        // given to `for_informer`, not from the factory) is claimed and run
        // by this controller, and only then stopped by it.
        factory.start();
        // Not a child of `stop`: the cache stays live while running
        // reconciles finish.
        let token = CancellationToken::new();
        if let Some(task) = primary.try_start(token.clone()) {
            let informer = primary.name().to_owned();
            cleanup.primary = Some((
                token,
                tokio::spawn(async move {
                    match task.await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(%informer, error = %e, "the primary informer did not run")
                        }
                        Err(e) => {
                            tracing::warn!(%informer, error = %e, "the primary informer's task failed")
                        }
                    }
                }),
            ));
        }

        // Metrics and the endpoint.
        let worker_metrics = metrics.as_ref().map(|m| {
            let f = m.families();
            let l = label("controller", &name);
            let result = |r: &str| {
                f.reconcile_total
                    .get_or_create(&vec![
                        ("controller".to_owned(), name.clone()),
                        ("result".to_owned(), r.to_owned()),
                    ])
                    .clone()
            };
            f.max_concurrent
                .get_or_create(&l)
                .set(i64::try_from(config.workers).unwrap_or(i64::MAX));
            WorkerMetrics {
                success: result("success"),
                requeue_after: result("requeue_after"),
                error: result("error"),
                errors: f.reconcile_errors.get_or_create(&l).clone(),
                panics: f.reconcile_panics.get_or_create(&l).clone(),
                time: f.reconcile_time.get_or_create(&l).clone(),
                active: f.active_workers.get_or_create(&l).clone(),
            }
        });
        if let Some(m) = &metrics {
            let probes: Vec<Probe> = handles.iter().map(|h| h.probe.clone()).collect();
            let f = m.families().clone();
            let id = m.add_refresher(move || {
                for p in &probes {
                    let (name, synced, objects, backlog) = p();
                    let l = label("informer", &name);
                    f.informer_synced.get_or_create(&l).set(i64::from(synced));
                    f.informer_objects
                        .get_or_create(&l)
                        .set(i64::try_from(objects).unwrap_or(i64::MAX));
                    f.informer_backlog
                        .get_or_create(&l)
                        .set(i64::try_from(backlog).unwrap_or(i64::MAX));
                }
            });
            cleanup.refresher = Some((m.clone(), id));
        }
        if let (Some(m), Some(s)) = (&metrics, &shard) {
            cleanup.shard_refresher = Some((m.clone(), shard_metrics(m, s, &name, &primary)));
        }
        let server = match metrics_bind {
            None => None,
            Some(bind) => {
                let registry = metrics.clone().unwrap_or_default();
                let served = match bind {
                    MetricsBind::Addr(addr) => {
                        MetricsServer::bind(addr, registry, vec![handle.health.clone()]).await
                    }
                    MetricsBind::Listener(l) => {
                        MetricsServer::serve(l, registry, vec![handle.health.clone()])
                    }
                };
                match served {
                    Ok(s) => Some(s),
                    Err(e) => {
                        cleanup.run(handles, &queue).await;
                        return Err(ControllerError::MetricsServer(e));
                    }
                }
            }
        };
        cleanup.server = server;

        // The stop signal: the handle, or any shutdown future.
        let watcher = (!shutdown.is_empty()).then(|| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let any = futures::future::select_all(shutdown);
                tokio::select! {
                    _ = any => stop.cancel(),
                    _ = stop.cancelled() => {}
                }
            })
        });
        cleanup.watcher = watcher;

        // Caches.
        tracing::info!(controller = %name, "waiting for caches to sync");
        let synced = {
            let hs: Vec<&dyn HasSynced> = handles.iter().map(|h| &*h.synced).collect();
            kcache_informer::wait_for_cache_sync(&stop, &hs).await
        };
        if !synced {
            tracing::info!(controller = %name, "stopped before the caches synced");
            handle.health.set_stopped();
            cleanup.run(handles, &queue).await;
            return Ok(());
        }
        handle.health.set_synced(true);
        tracing::info!(controller = %name, "caches synced");

        let shared = Arc::new(Shared {
            name: name.clone(),
            queue: queue.clone(),
            enq,
            primary,
            reconciler,
            ctx,
            metrics: worker_metrics,
            shard: shard.clone(),
        });
        let mut result = Ok(());
        match leader {
            None if shard.is_some() => {
                if let Some(s) = &shard {
                    result = run_sharded(s, &shared, &config, &stop).await;
                }
            }
            None => {
                let workers = start_workers(&shared, config.workers);
                stop.cancelled().await;
                workers.stop(&shared, &config, None).await;
            }
            Some((le_config, lock)) => {
                let elector = Arc::new(LeaderElector::new(le_config, lock)?);
                handle.health.set_leader(elector.clone());
                let leader_gauge: Option<Gauge> = metrics.as_ref().map(|m| {
                    let f = m.families();
                    elector.set_error_counter(
                        f.leader_errors.get_or_create(&label("name", &name)).clone(),
                    );
                    f.leader.get_or_create(&label("name", &name)).clone()
                });
                result = run_leader_elected(&shared, &config, &stop, elector, leader_gauge).await;
            }
        }
        handle.health.set_stopped();
        cleanup.run(handles, &queue).await;
        tracing::info!(controller = %name, "controller stopped");
        result
    }
}

/// Registers the shard metrics of controller `name`; returns the id of the
/// refresher that counts owned keys at scrape time.
fn shard_metrics<K>(
    m: &MetricsRegistry,
    shard: &Shard,
    name: &str,
    primary: &SharedIndexInformer<K>,
) -> u64
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let f = m.families();
    let labels = vec![
        ("controller".to_owned(), name.to_owned()),
        ("group".to_owned(), shard.config().group.clone()),
    ];
    let direction = |d: &str| {
        let mut l = labels.clone();
        l.push(("direction".to_owned(), d.to_owned()));
        f.shard_handovers.get_or_create(&l).clone()
    };
    shard.set_metrics(ShardMetrics {
        members: f.shard_members.get_or_create(&labels).clone(),
        gained: direction("gained"),
        released: direction("released"),
    });
    let owned = f.shard_owned_keys.get_or_create(&labels).clone();
    let (shard, primary) = (shard.clone(), primary.clone());
    m.add_refresher(move || {
        let n = primary
            .indexer()
            .list_keys()
            .iter()
            .filter(|k| shard.owns(k))
            .count();
        owned.set(i64::try_from(n).unwrap_or(i64::MAX));
    })
}

/// Runs the workers while this replica holds the lease, until `stop` or
/// until leadership is lost. The election is cancelled (and the lease
/// released, with `release_on_cancel`) only after the workers have
/// stopped: a standby never acts while a reconcile of this replica still
/// runs. On a loss, running reconciles are cancelled at once and dropped
/// before the lease can be taken over (see [`Workers::stop`]).
async fn run_leader_elected<K, C, R>(
    shared: &Arc<Shared<K, C, R>>,
    config: &Config,
    stop: &CancellationToken,
    elector: Arc<LeaderElector>,
    leader_gauge: Option<Gauge>,
) -> Result<(), ControllerError>
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
{
    // Not a child of `stop`: cancelled once the workers are done.
    let election = CancellationToken::new();
    let (lead_tx, lead_rx) = tokio::sync::oneshot::channel::<CancellationToken>();
    let mut elector_task = tokio::spawn({
        let (elector, election) = (elector.clone(), election.clone());
        let name = shared.name.clone();
        async move {
            let callbacks = LeaderCallbacks {
                on_started_leading: Box::new(move |t| {
                    let _ = lead_tx.send(t);
                }),
                on_stopped_leading: Box::new(move || {
                    tracing::info!(controller = %name, "stopped leading");
                }),
                on_new_leader: None,
            };
            elector.run(election, callbacks).await
        }
    });
    let leading = tokio::select! {
        _ = stop.cancelled() => None,
        t = lead_rx => t.ok(),
    };
    if let Some(leading) = leading {
        tracing::info!(controller = %shared.name, "leading: starting workers");
        if let Some(g) = &leader_gauge {
            g.set(1);
        }
        let workers = start_workers(shared, config.workers);
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = leading.cancelled() => {}
        }
        let lease = LeaseGuard {
            lost: &leading,
            elector: &elector,
        };
        workers.stop(shared, config, Some(lease)).await;
        if let Some(g) = &leader_gauge {
            g.set(0);
        }
    }
    election.cancel();
    let lost = match (&mut elector_task).await {
        Ok(lost) => lost,
        Err(e) => {
            tracing::warn!(controller = %shared.name, error = %e, "the leader election task failed");
            false
        }
    };
    if lost {
        Err(ControllerError::LeadershipLost)
    } else {
        Ok(())
    }
}

/// Runs the workers of a sharded replica with its membership until `stop`
/// (or until the membership fails), then stops the workers before the
/// membership, so that a key is released only after its reconcile ended.
async fn run_sharded<K, C, R>(
    shard: &Shard,
    shared: &Arc<Shared<K, C, R>>,
    config: &Config,
    stop: &CancellationToken,
) -> Result<(), ControllerError>
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
{
    let hooks = ShardHooks {
        keys: {
            let primary = shared.primary.clone();
            Box::new(move || primary.indexer().list_keys())
        },
        gained: {
            let enq = shared.enq.clone();
            Box::new(move |keys| {
                for k in keys {
                    enq.enqueue(k, Trigger::Handover, false);
                }
            })
        },
    };
    let shard_stop = CancellationToken::new();
    let mut task = tokio::spawn({
        let (shard, shard_stop) = (shard.clone(), shard_stop.clone());
        async move { shard.run(shard_stop, hooks).await }
    });
    tracing::info!(controller = %shared.name, group = %shard.config().group, identity = %shard.config().identity, "sharded: starting workers");
    let workers = start_workers(shared, config.workers);
    let ended = tokio::select! {
        _ = stop.cancelled() => None,
        r = &mut task => Some(r),
    };
    workers.stop(shared, config, None).await;
    let outcome = match ended {
        Some(r) => r,
        None => {
            shard_stop.cancel();
            task.await
        }
    };
    match outcome {
        Ok(r) => r.map_err(ControllerError::from),
        Err(e) => {
            tracing::error!(controller = %shared.name, error = %e, "the shard membership task failed");
            Ok(())
        }
    }
}

#[derive(Default)]
struct Cleanup {
    primary: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
    refresher: Option<(MetricsRegistry, u64)>,
    shard_refresher: Option<(MetricsRegistry, u64)>,
    server: Option<MetricsServer>,
    watcher: Option<tokio::task::JoinHandle<()>>,
}

impl Cleanup {
    async fn run(self, handles: Vec<SourceHandle>, queue: &WorkQueue<String>) {
        queue.shut_down();
        for h in handles {
            (h.remove)();
        }
        if let Some((m, id)) = self.refresher {
            m.remove_refresher(id);
        }
        if let Some((m, id)) = self.shard_refresher {
            m.remove_refresher(id);
        }
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

struct WorkerMetrics {
    success: Counter,
    requeue_after: Counter,
    error: Counter,
    errors: Counter,
    panics: Counter,
    time: Histogram,
    active: Gauge,
}

struct Shared<K: Resource, C, R> {
    name: String,
    queue: WorkQueue<String>,
    enq: Enqueuer,
    primary: SharedIndexInformer<K>,
    reconciler: R,
    ctx: Arc<C>,
    metrics: Option<WorkerMetrics>,
    shard: Option<Shard>,
}

/// Counts a running reconcile in `controller_runtime_active_workers` for
/// as long as it lives.
struct ActiveGuard(Gauge);

impl ActiveGuard {
    fn new(g: &Gauge) -> Self {
        g.inc();
        Self(g.clone())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

enum Outcome {
    Done(Action),
    Failed(String),
    Panicked(String),
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

impl<K, C, R> Shared<K, C, R>
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
{
    async fn process(&self, key: &str, cancellation: CancellationToken) {
        let trigger = self.enq.take_trigger(key).unwrap_or(Trigger::Manual);
        let retries = self.queue.num_requeues(&key.to_owned());
        let span = tracing::info_span!(
            "reconcile",
            controller = %self.name,
            key = %key,
            trigger = %trigger,
            retries,
        );
        async move {
            let started = Instant::now();
            // Decremented on drop too: a reconcile dropped at shutdown or
            // after a lost lease leaves the gauge right.
            let _active = self.metrics.as_ref().map(|m| ActiveGuard::new(&m.active));
            let cached = self.primary.indexer().get_by_key(key);
            let decoded = match &cached {
                Some(c) => c.decode().map(Some),
                None => Ok(None),
            };
            let outcome = match decoded {
                Err(e) => Outcome::Failed(format!("decoding the cached object: {e}")),
                Ok(object) => {
                    let req = Request::new(key, object).with_details(
                        cached,
                        trigger,
                        retries,
                        cancellation,
                    );
                    // Creating the future is inside the guard too: a
                    // hand-written reconciler may panic before returning it.
                    let fut = async { self.reconciler.reconcile(req, self.ctx.clone()).await };
                    match AssertUnwindSafe(fut).catch_unwind().await {
                        Ok(Ok(action)) => Outcome::Done(action),
                        Ok(Err(e)) => Outcome::Failed(e.to_string()),
                        Err(p) => Outcome::Panicked(panic_message(&*p)),
                    }
                }
            };
            let elapsed = started.elapsed();
            if let Some(m) = &self.metrics {
                m.time.observe(elapsed.as_secs_f64());
            }
            match outcome {
                Outcome::Done(action) => {
                    self.queue.forget(&key.to_owned());
                    match action.requeue_duration() {
                        Some(d) => {
                            tracing::debug!(?elapsed, requeue_after = ?d, "reconciled");
                            if let Some(m) = &self.metrics {
                                m.requeue_after.inc();
                            }
                            self.enq.requeue_after(key.to_owned(), d);
                        }
                        None => {
                            tracing::debug!(?elapsed, "reconciled");
                            if let Some(m) = &self.metrics {
                                m.success.inc();
                            }
                        }
                    }
                }
                Outcome::Failed(e) => {
                    tracing::warn!(error = %e, ?elapsed, "reconcile failed; retrying with backoff");
                    if let Some(m) = &self.metrics {
                        m.error.inc();
                        m.errors.inc();
                    }
                    self.enq.retry(key.to_owned());
                }
                Outcome::Panicked(msg) => {
                    tracing::error!(panic = %msg, ?elapsed, "reconcile panicked; retrying with backoff");
                    if let Some(m) = &self.metrics {
                        m.error.inc();
                        m.errors.inc();
                        m.panics.inc();
                    }
                    self.enq.retry(key.to_owned());
                }
            }
        }
        .instrument(span)
        .await
    }
}

struct Workers {
    set: JoinSet<()>,
    /// Stops taking keys.
    stop: CancellationToken,
    /// The parent of every running reconcile's [`Request::cancellation`].
    cancel: CancellationToken,
}

fn start_workers<K, C, R>(shared: &Arc<Shared<K, C, R>>, n: usize) -> Workers
where
    K: Resource + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
    C: Send + Sync + 'static,
    R: Reconciler<K, C>,
{
    let stop = CancellationToken::new();
    let cancel = CancellationToken::new();
    let mut set = JoinSet::new();
    for _ in 0..n.max(1) {
        let shared = shared.clone();
        let (stop, cancel) = (stop.clone(), cancel.clone());
        set.spawn(async move {
            loop {
                let key = tokio::select! {
                    biased;
                    _ = stop.cancelled() => return,
                    k = shared.queue.get() => match k {
                        Some(k) => k,
                        None => return,
                    },
                };
                // Sharded: a key is reconciled only while this replica owns
                // it; the guard tells a release to wait for the reconcile.
                let guard = match &shared.shard {
                    None => None,
                    Some(s) => match s.try_begin(&key) {
                        Some(g) => Some(g),
                        None => {
                            shared.enq.take_trigger(&key);
                            shared.queue.forget(&key);
                            shared.queue.done(&key);
                            tracing::debug!(controller = %shared.name, key = %key, "not owned by this shard: dropped");
                            continue;
                        }
                    },
                };
                shared.process(&key, cancel.child_token()).await;
                drop(guard);
                shared.queue.done(&key);
            }
        });
    }
    Workers { set, stop, cancel }
}

/// The lease a leader-elected controller's workers run under.
struct LeaseGuard<'a> {
    /// Cancelled when leadership is lost.
    lost: &'a CancellationToken,
    elector: &'a LeaderElector,
}

impl LeaseGuard<'_> {
    /// When running reconciles are dropped after a loss: halfway between
    /// the loss (the renew deadline after the last successful renewal) and
    /// the instant a standby may take over (a lease duration after it),
    /// so that none still runs then, with room for this process's
    /// scheduling and clock.
    fn abandon_at(&self) -> Instant {
        let c = self.elector.config();
        let margin = c.lease_duration.saturating_sub(c.renew_deadline) / 2;
        self.elector
            .lease_expiry()
            .map_or_else(Instant::now, |expiry| expiry - margin)
    }
}

impl Workers {
    /// Stops the workers: no new key is taken, running reconciles are
    /// told through their cancellation token (at once; with
    /// `drain_on_shutdown`, the ready keys are reconciled first and the
    /// token fires at the graceful timeout) and get the graceful timeout
    /// to return; then they are dropped. Under a lease, a loss (before or
    /// during this wait) cancels them at once and shortens the wait to
    /// [`LeaseGuard::abandon_at`].
    async fn stop<K: Resource, C, R>(
        mut self,
        shared: &Shared<K, C, R>,
        config: &Config,
        lease: Option<LeaseGuard<'_>>,
    ) {
        let mut lost = lease.as_ref().is_some_and(|l| l.lost.is_cancelled());
        if config.drain_on_shutdown && !lost {
            shared.queue.shut_down();
        } else {
            self.stop.cancel();
            self.cancel.cancel();
        }
        let running = shared.queue.processing_len();
        if running > 0 {
            tracing::info!(controller = %shared.name, running, lost_leadership = lost, "waiting for running reconciles to finish");
        }
        let mut deadline = Instant::now() + config.graceful_shutdown_timeout;
        if lost && let Some(l) = &lease {
            deadline = deadline.min(l.abandon_at());
        }
        let never = CancellationToken::new();
        let lost_token = lease.as_ref().map_or(&never, |l| l.lost);
        let finished = loop {
            tokio::select! {
                biased;
                _ = lost_token.cancelled(), if !lost => {
                    lost = true;
                    self.stop.cancel();
                    self.cancel.cancel();
                    if let Some(l) = &lease {
                        deadline = deadline.min(l.abandon_at());
                    }
                    tracing::warn!(controller = %shared.name, "leadership lost while reconciles were finishing: cancelling them");
                }
                next = self.set.join_next() => if next.is_none() { break true },
                _ = tokio::time::sleep_until(deadline) => break false,
            }
        };
        if !finished {
            let still = shared.queue.processing_len();
            if lost {
                tracing::warn!(
                    controller = %shared.name,
                    running = still,
                    "leadership lost: dropping the reconciles still running before a standby can take over"
                );
            } else {
                tracing::warn!(
                    controller = %shared.name,
                    running = still,
                    timeout = ?config.graceful_shutdown_timeout,
                    "reconciles still running after the graceful shutdown timeout: dropping them"
                );
            }
            self.cancel.cancel();
            self.set.shutdown().await;
        }
        shared.queue.shut_down();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Obj = serde_json::Value;

    fn obj(v: serde_json::Value) -> CachedObject<Obj> {
        CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
    }

    fn child(
        ns: &str,
        name: &str,
        rv: &str,
        owner: Option<(&str, &str, &str, bool)>,
    ) -> CachedObject<Obj> {
        let refs: Vec<serde_json::Value> = owner
            .into_iter()
            .map(|(api, kind, name, controller)| {
                json!({"apiVersion": api, "kind": kind, "name": name, "uid": "u1", "controller": controller})
            })
            .collect();
        obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "ownerReferences": refs}}))
    }

    fn enqueuer() -> (Enqueuer, WorkQueue<String>) {
        let q: WorkQueue<String> = WorkQueue::builder().strict_priority().build().unwrap();
        (Enqueuer::new(q.clone(), INITIAL_LIST_PRIORITY), q)
    }

    async fn drain(q: &WorkQueue<String>) -> Vec<String> {
        let mut out = Vec::new();
        while !q.is_empty() {
            let k = q.get().await.unwrap();
            q.done(&k);
            out.push(k);
        }
        out
    }

    #[test]
    fn owner_key_follows_the_controller_reference() {
        let c = child(
            "ns1",
            "web",
            "1",
            Some(("samplecontroller.k8s.io/v1alpha1", "Foo", "foo-a", true)),
        );
        assert_eq!(
            owner_key(c.meta(), "samplecontroller.k8s.io", "Foo", true).as_deref(),
            Some("ns1/foo-a")
        );
        // the version does not matter, the group and kind do
        let c2 = child(
            "ns1",
            "web",
            "1",
            Some(("samplecontroller.k8s.io/v1", "Foo", "foo-a", true)),
        );
        assert!(owner_key(c2.meta(), "samplecontroller.k8s.io", "Foo", true).is_some());
        assert!(owner_key(c.meta(), "other.io", "Foo", true).is_none());
        assert!(owner_key(c.meta(), "samplecontroller.k8s.io", "Bar", true).is_none());
        // a cluster-scoped owner is keyed by name
        assert_eq!(
            owner_key(c.meta(), "samplecontroller.k8s.io", "Foo", false).as_deref(),
            Some("foo-a")
        );
        // not a controller reference
        let c3 = child(
            "ns1",
            "web",
            "1",
            Some(("samplecontroller.k8s.io/v1alpha1", "Foo", "foo-a", false)),
        );
        assert!(owner_key(c3.meta(), "samplecontroller.k8s.io", "Foo", true).is_none());
        // core group owner ("v1")
        let c4 = child("ns1", "web", "1", Some(("v1", "ConfigMap", "cm", true)));
        assert_eq!(
            owner_key(c4.meta(), "", "ConfigMap", true).as_deref(),
            Some("ns1/cm")
        );
        let none = child("ns1", "web", "1", None);
        assert!(owner_key(none.meta(), "", "ConfigMap", true).is_none());
    }

    #[tokio::test]
    async fn owned_events_enqueue_the_owner() {
        let (enq, q) = enqueuer();
        let h = OwnedHandler {
            enq: enq.clone(),
            owner_group: "samplecontroller.k8s.io".into(),
            owner_kind: "Foo".into(),
            owner_namespaced: true,
            kind: "Deployment".into(),
            predicate: None,
        };
        let a = child(
            "ns",
            "d1",
            "1",
            Some(("samplecontroller.k8s.io/v1alpha1", "Foo", "foo-a", true)),
        );
        let a2 = child(
            "ns",
            "d1",
            "2",
            Some(("samplecontroller.k8s.io/v1alpha1", "Foo", "foo-a", true)),
        );
        let b = child(
            "ns",
            "d1",
            "3",
            Some(("samplecontroller.k8s.io/v1alpha1", "Foo", "foo-b", true)),
        );
        let stranger = child("ns", "d2", "1", None);
        ResourceEventHandler::<Obj>::on_add(&h, &a, false);
        ResourceEventHandler::<Obj>::on_add(&h, &stranger, false);
        assert_eq!(drain(&q).await, ["ns/foo-a"]);
        assert_eq!(
            enq.take_trigger("ns/foo-a"),
            Some(Trigger::Owned {
                kind: "Deployment".into(),
                key: "ns/d1".into()
            })
        );
        // a resync (same resourceVersion) is ignored
        ResourceEventHandler::<Obj>::on_update(&h, &a, &a);
        assert!(q.is_empty());
        ResourceEventHandler::<Obj>::on_update(&h, &a, &a2);
        assert_eq!(drain(&q).await, ["ns/foo-a"]);
        // a changed controller: both owners
        ResourceEventHandler::<Obj>::on_update(&h, &a2, &b);
        let mut got = drain(&q).await;
        got.sort();
        assert_eq!(got, ["ns/foo-a", "ns/foo-b"]);
        ResourceEventHandler::<Obj>::on_delete(&h, &ObjectOrTombstone::Object(b.clone()));
        assert_eq!(drain(&q).await, ["ns/foo-b"]);
    }

    #[tokio::test]
    async fn watched_events_go_through_the_mapper() {
        let (enq, q) = enqueuer();
        let h = WatchHandler::<Obj> {
            enq,
            mapper: Arc::new(|o: &CachedObject<Obj>| {
                o.labels()
                    .get("app")
                    .map(|a| {
                        vec![
                            format!("{}/{a}", o.namespace().unwrap_or_default()),
                            "other/x".to_owned(),
                        ]
                    })
                    .unwrap_or_default()
            }),
            kind: "ConfigMap".into(),
            predicate: None,
        };
        let cm = |rv: &str, app: &str| {
            obj(
                json!({"metadata": {"name": "cm", "namespace": "ns", "resourceVersion": rv, "labels": {"app": app}}}),
            )
        };
        ResourceEventHandler::<Obj>::on_add(&h, &cm("1", "web"), false);
        let mut got = drain(&q).await;
        got.sort();
        assert_eq!(got, ["ns/web", "other/x"]);
        // update: old and new mapped, duplicates once
        ResourceEventHandler::<Obj>::on_update(&h, &cm("1", "web"), &cm("2", "api"));
        let mut got = drain(&q).await;
        got.sort();
        assert_eq!(got, ["ns/api", "ns/web", "other/x"]);
    }

    #[tokio::test]
    async fn primary_events_pass_the_predicate_and_initial_list_is_low_priority() {
        let (enq, q) = enqueuer();
        let h = PrimaryHandler {
            enq: enq.clone(),
            predicate: Some(Predicate::generation_changed()),
        };
        let foo = |name: &str, rv: &str, generation: i64| {
            obj(
                json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "generation": generation}}),
            )
        };
        ResourceEventHandler::<Obj>::on_add(&h, &foo("old", "1", 1), true);
        ResourceEventHandler::<Obj>::on_add(&h, &foo("live", "2", 1), false);
        // live changes first, then the initial list
        assert_eq!(drain(&q).await, ["ns/live", "ns/old"]);
        assert_eq!(enq.take_trigger("ns/old"), Some(Trigger::InitialList));
        assert_eq!(enq.take_trigger("ns/live"), Some(Trigger::Added));
        // status-only update (same generation) filtered; spec change passes
        ResourceEventHandler::<Obj>::on_update(&h, &foo("a", "3", 1), &foo("a", "4", 1));
        assert!(q.is_empty());
        ResourceEventHandler::<Obj>::on_update(&h, &foo("a", "4", 1), &foo("a", "5", 2));
        assert_eq!(drain(&q).await, ["ns/a"]);
        assert_eq!(enq.take_trigger("ns/a"), Some(Trigger::Updated));
        ResourceEventHandler::<Obj>::on_delete(&h, &ObjectOrTombstone::Object(foo("a", "5", 2)));
        assert_eq!(drain(&q).await, ["ns/a"]);
        assert_eq!(enq.take_trigger("ns/a"), Some(Trigger::Deleted));
    }

    #[tokio::test]
    async fn a_live_change_replaces_a_requeue_as_trigger() {
        let (enq, _q) = enqueuer();
        enq.requeue_after("ns/a".into(), Duration::from_secs(60));
        enq.enqueue("ns/a".into(), Trigger::Updated, false);
        enq.retry("ns/a".into());
        assert_eq!(enq.take_trigger("ns/a"), Some(Trigger::Updated));
        enq.enqueue("ns/b".into(), Trigger::Added, false);
        enq.enqueue("ns/b".into(), Trigger::Updated, false);
        assert_eq!(
            enq.take_trigger("ns/b"),
            Some(Trigger::Added),
            "the first cause stays"
        );
    }

    #[test]
    fn predicates_and_combinators() {
        let m = |rv: &str, generation: i64, label: &str, ann: &str| {
            obj(
                json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv,
                "generation": generation, "labels": {"l": label}, "annotations": {"a": ann}}}),
            )
        };
        let base = m("1", 1, "x", "x");
        fn update<'a>(
            old: &'a CachedObject<Obj>,
            new: &'a CachedObject<Obj>,
        ) -> PredicateEvent<'a> {
            PredicateEvent::Update {
                old: old.meta(),
                new: new.meta(),
            }
        }
        let gen2 = m("2", 2, "x", "x");
        let label = m("2", 1, "y", "x");
        let ann = m("2", 1, "x", "y");
        let resync = m("1", 1, "x", "x");
        let g = Predicate::generation_changed();
        let l = Predicate::labels_changed();
        let a = Predicate::annotations_changed();
        let rv = Predicate::resource_version_changed();
        assert!(g.evaluate(&update(&base, &gen2)) && !g.evaluate(&update(&base, &label)));
        assert!(l.evaluate(&update(&base, &label)) && !l.evaluate(&update(&base, &gen2)));
        assert!(a.evaluate(&update(&base, &ann)) && !a.evaluate(&update(&base, &label)));
        assert!(rv.evaluate(&update(&base, &ann)) && !rv.evaluate(&update(&base, &resync)));
        // creates and deletes pass the update predicates
        assert!(g.evaluate(&PredicateEvent::Create(base.meta())));
        assert!(g.evaluate(&PredicateEvent::Delete(base.meta())));
        let either = g.clone() | l.clone();
        assert!(
            either.evaluate(&update(&base, &gen2))
                && either.evaluate(&update(&base, &label))
                && !either.evaluate(&update(&base, &ann))
        );
        let both = g.clone() & rv.clone();
        assert!(both.evaluate(&update(&base, &gen2)) && !both.evaluate(&update(&base, &label)));
        let not_g = !g.clone();
        assert!(not_g.evaluate(&update(&base, &label)) && !not_g.evaluate(&update(&base, &gen2)));
        assert!(
            !not_g.evaluate(&PredicateEvent::Create(base.meta())),
            "not negates creates too"
        );
        assert!(Predicate::all([g.clone(), rv.clone()]).evaluate(&update(&base, &gen2)));
        assert!(!Predicate::any(Vec::new()).evaluate(&update(&base, &gen2)));
        assert!(Predicate::all(Vec::new()).evaluate(&update(&base, &gen2)));
        assert_eq!(either.name(), "(generation_changed or labels_changed)");
    }
}
