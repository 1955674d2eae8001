//! The builder side of [`Controller`]: construction, sources (owned and
//! watched types, predicates), run modes (leader election, sharding),
//! metrics and shutdown signals.

use std::any::TypeId;
use std::future::Future;
#[cfg(feature = "prometheus")]
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use kcache_core::{CachedObject, ShardField};
use kcache_informer::{SharedIndexInformer, SharedInformerFactory};
use kcache_lease::shard::{MembershipStore, Shard, ShardConfig};
use kcache_lease::{LeaderElectionConfig, LeaseLock};
use kube::Resource;
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

#[cfg(feature = "prometheus")]
use super::MetricsBind;
use super::{Controller, ControllerHandle};
use crate::config::Config;
use crate::error::ControllerError;
use crate::metrics::ControllerMetricsProvider;
#[cfg(feature = "prometheus")]
use crate::metrics::MetricsRegistry;
use crate::predicate::Predicate;
use crate::run_mode::RunMode;
use crate::server::Health;
use crate::source::{Mapper, OwnedHandler, WatchHandler, source};

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
    /// [`leader_election`](kcache_lease::leader_election)). Informers run and caches stay warm on
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
    /// reconciled by two replicas at once (see [`shard`](kcache_lease::shard)).
    /// Keys it does not own are not queued (also through
    /// [`ControllerHandle::enqueue`]) and are dropped when they come out of
    /// the queue; keys it gains are queued from the cache (trigger
    /// [`Trigger::Handover`](crate::Trigger::Handover)). The replica joins the group once its caches
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
    /// [`ShardFilterMode`](kcache_reflector::ShardFilterMode)). The hash
    /// space is cut into [`SHARD_SLOTS`](crate::SHARD_SLOTS) slots spread
    /// over the group's members by rendezvous hashing, and a key belongs
    /// to the member owning the slot of its object's `field` hash, so the
    /// replica that caches an object reconciles it. When the members
    /// change, the replica builds informers for its new ranges while the
    /// old ones serve the keys it keeps, switches once they have synced
    /// and it acknowledged the new view, queues the keys it gained
    /// (trigger [`Trigger::Handover`](crate::Trigger::Handover)) and drops the old informers: an
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
    pub(super) fn validate_shard_field(&self) -> Result<(), ControllerError> {
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
    pub fn metrics_provider(mut self, provider: Arc<dyn ControllerMetricsProvider>) -> Self {
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
}
