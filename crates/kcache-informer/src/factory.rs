//! The shared informer factory: one informer per resource type for a whole
//! program.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::{Client, Resource};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::InformerError;
use kcache_deltafifo::TransformFunc;

use crate::informer::{InformerConfig, SharedIndexInformer};
use crate::metrics::InformerMetricsProvider;
use crate::snapshot::SnapshotOptions;
use kcache_core::ShardSelector;
use kcache_core::sync::lock;
use kcache_reflector::ReflectorMetricsProvider;

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum InformerKey {
    Typed(TypeId),
    Dynamic {
        group: String,
        version: String,
        plural: String,
    },
}

/// A resource as the factory's snapshot choice names it: API group
/// (`""` for the core group), version, plural.
type Gvr = (String, String, String);

fn gvr_of<K: Resource>(dyntype: &K::DynamicType) -> Gvr {
    (
        K::group(dyntype).into_owned(),
        K::version(dyntype).into_owned(),
        K::plural(dyntype).into_owned(),
    )
}

fn gvr_of_resource(r: &ApiResource) -> Gvr {
    (r.group.clone(), r.version.clone(), r.plural.clone())
}

/// core/v1 secrets: never persisted unless named.
fn is_secrets(gvr: &Gvr) -> bool {
    gvr.0.is_empty() && gvr.1 == "v1" && gvr.2 == "secrets"
}

/// What the factory needs of an informer without knowing its type.
trait ErasedInformer: Send + Sync {
    fn name(&self) -> String;
    fn has_synced(&self) -> bool;
    fn try_start(&self, token: CancellationToken) -> Option<JoinHandle<Result<(), InformerError>>>;
}

impl<K> ErasedInformer for SharedIndexInformer<K>
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    fn name(&self) -> String {
        SharedIndexInformer::name(self).to_string()
    }
    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
    fn try_start(&self, token: CancellationToken) -> Option<JoinHandle<Result<(), InformerError>>> {
        SharedIndexInformer::try_start(self, token)
    }
}

struct Entry {
    any: Box<dyn Any + Send + Sync>,
    erased: Arc<dyn ErasedInformer>,
    started: bool,
}

#[derive(Clone)]
struct Config {
    /// Every informer's config (its `name` is not used: each informer is
    /// named after its resource).
    informers: InformerConfig,
    /// Set by [`SharedInformerFactory::with_shard_selector`]: applied after
    /// the config's shard selector.
    shard_selector: Option<ShardSelector>,
    reflector_metrics: Option<Arc<dyn ReflectorMetricsProvider>>,
    metrics: Option<Arc<dyn InformerMetricsProvider>>,
    resync_for: HashMap<TypeId, Duration>,
    transforms: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
    transform_ids: HashMap<TypeId, String>,
    /// Resources named with `snapshot_for*`: persisted even if Secrets.
    snapshot_named: HashSet<Gvr>,
    /// Resources named with `skip_snapshot_for*`: never persisted.
    snapshot_skipped: HashSet<Gvr>,
}

impl Config {
    /// Whether the informer of `gvr` persists snapshots: snapshots are on,
    /// it is not skipped, and it is not core/v1 secrets unless named.
    fn snapshots_for(&self, gvr: &Gvr) -> Option<&SnapshotOptions> {
        let options = self.informers.snapshot.as_ref()?;
        if self.snapshot_skipped.contains(gvr) {
            return None;
        }
        if is_secrets(gvr) && !self.snapshot_named.contains(gvr) {
            tracing::info!(
                resource = "secrets",
                "no snapshots for the Secrets informer: they would hold every Secret on disk; name the type with snapshot_for::<Secret>() to persist them"
            );
            return None;
        }
        Some(options)
    }
}

struct Inner {
    client: Client,
    config: Config,
    informers: Mutex<HashMap<InformerKey, Entry>>,
    /// The runs this factory started (and owns), each with its error
    /// logged when it ends.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    cancel: CancellationToken,
}

/// One [`SharedIndexInformer`] per resource type, shared by every part of a
/// program that asks for it (client-go's `SharedInformerFactory`): watching
/// a type twice costs one watch and one cache.
///
/// ```no_run
/// # async fn run(client: kube::Client) {
/// use k8s_openapi::api::core::v1::{ConfigMap, Pod};
/// use kcache_informer::{InformerConfig, SharedInformerFactory};
///
/// let mut config = InformerConfig::default();
/// config.watch.namespace = Some("prod".into());
/// config.watch.object_options.strip_managed_fields = true;
/// let factory = SharedInformerFactory::builder(client).config(config).build();
/// let pods = factory.informer::<Pod>();
/// let same_pods = factory.informer::<Pod>(); // the same informer
/// let config_maps = factory.informer::<ConfigMap>();
/// factory.start();
/// let synced = factory.wait_for_cache_sync().await;
/// assert!(synced.values().all(|ok| *ok));
/// # let _ = (pods, same_pods, config_maps);
/// factory.shutdown().await;
/// # }
/// ```
#[derive(Clone)]
pub struct SharedInformerFactory {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = lock(&self.inner.informers)
            .values()
            .map(|e| e.erased.name())
            .collect();
        f.debug_struct("SharedInformerFactory")
            .field("informers", &names)
            .finish_non_exhaustive()
    }
}

/// Configures a [`SharedInformerFactory`].
pub struct SharedInformerFactoryBuilder {
    client: Client,
    config: Config,
}

impl SharedInformerFactoryBuilder {
    /// What every informer of the factory does (default:
    /// [`InformerConfig::default`]): namespace and selectors
    /// ([`InformerConfig::watch`]), resync, warm restarts (a folder: one
    /// file per informer, Secrets left out unless named with
    /// [`snapshot_for`](Self::snapshot_for)), shutdown timeout, background
    /// compression. Its `name` is not used: each informer is named after
    /// its resource.
    pub fn config(mut self, config: InformerConfig) -> Self {
        self.config.informers = config;
        self
    }
    /// The resync period of the informer for `K`.
    pub fn resync_for<K: 'static>(mut self, period: Duration) -> Self {
        self.config.resync_for.insert(TypeId::of::<K>(), period);
        self
    }
    /// Every informer's reflector reports its metrics here.
    pub fn reflector_metrics(mut self, provider: Arc<dyn ReflectorMetricsProvider>) -> Self {
        self.config.reflector_metrics = Some(provider);
        self
    }
    /// Every informer (and its handlers) reports its metrics here (see
    /// [`metrics`](crate::metrics)).
    pub fn metrics(mut self, provider: Arc<dyn InformerMetricsProvider>) -> Self {
        self.config.metrics = Some(provider);
        self
    }
    /// A transform for the informer of `K`.
    pub fn transform_for<K: 'static>(mut self, transform: TransformFunc<K>) -> Self {
        self.config
            .transforms
            .insert(TypeId::of::<K>(), Arc::new(transform));
        self
    }
    /// The id of the transform of `K`'s informer, recorded in its snapshots
    /// (see [`SnapshotOptions::transform_id`]); needed for warm restarts of
    /// an informer with a transform.
    pub fn transform_id_for<K: 'static>(mut self, id: impl Into<String>) -> Self {
        self.config
            .transform_ids
            .insert(TypeId::of::<K>(), id.into());
        self
    }
    /// Persist `K`'s informer too, when snapshots are on: needed only for
    /// core/v1 Secrets, which are otherwise left out (the snapshot then
    /// holds every Secret the informer caches, in plain JSON, in a 0600
    /// file: put the folder on a volume only the controller can read).
    /// Names the resource (group, version, plural): covers
    /// `PartialObjectMeta<K>` and a dynamic informer of it as well.
    pub fn snapshot_for<K>(mut self) -> Self
    where
        K: Resource,
        K::DynamicType: Default,
    {
        let gvr = gvr_of::<K>(&K::DynamicType::default());
        self.config.snapshot_skipped.remove(&gvr);
        self.config.snapshot_named.insert(gvr);
        self
    }
    /// [`snapshot_for`](Self::snapshot_for) for a resource known at run
    /// time.
    pub fn snapshot_for_resource(mut self, resource: &ApiResource) -> Self {
        let gvr = gvr_of_resource(resource);
        self.config.snapshot_skipped.remove(&gvr);
        self.config.snapshot_named.insert(gvr);
        self
    }
    /// Never persist `K`'s informer (nor `PartialObjectMeta<K>`'s).
    pub fn skip_snapshot_for<K>(mut self) -> Self
    where
        K: Resource,
        K::DynamicType: Default,
    {
        let gvr = gvr_of::<K>(&K::DynamicType::default());
        self.config.snapshot_named.remove(&gvr);
        self.config.snapshot_skipped.insert(gvr);
        self
    }
    /// [`skip_snapshot_for`](Self::skip_snapshot_for) for a resource known
    /// at run time.
    pub fn skip_snapshot_for_resource(mut self, resource: &ApiResource) -> Self {
        let gvr = gvr_of_resource(resource);
        self.config.snapshot_named.remove(&gvr);
        self.config.snapshot_skipped.insert(gvr);
        self
    }
    /// Builds the factory.
    pub fn build(self) -> SharedInformerFactory {
        SharedInformerFactory {
            inner: Arc::new(Inner {
                client: self.client,
                config: self.config,
                informers: Mutex::new(HashMap::new()),
                tasks: Mutex::new(Vec::new()),
                cancel: CancellationToken::new(),
            }),
        }
    }
}

impl SharedInformerFactory {
    /// A factory with no namespace restriction and no resync.
    pub fn new(client: Client) -> Self {
        Self::builder(client).build()
    }

    /// A builder for a factory.
    pub fn builder(client: Client) -> SharedInformerFactoryBuilder {
        SharedInformerFactoryBuilder {
            client,
            config: Config {
                informers: InformerConfig::default(),
                shard_selector: None,
                reflector_metrics: None,
                metrics: None,
                resync_for: HashMap::new(),
                transforms: HashMap::new(),
                transform_ids: HashMap::new(),
                snapshot_named: HashSet::new(),
                snapshot_skipped: HashSet::new(),
            },
        }
    }

    /// A new factory with this one's client and settings whose informers
    /// all list and watch only `selector`'s share (in place of the
    /// config's [`WatchConfig::shard_selector`](kcache_reflector::WatchConfig::shard_selector)). It has informers of its own (none yet), started and shut
    /// down on their own: a sharded controller builds one per set of hash
    /// ranges and drops the old one when its ranges change.
    pub fn with_shard_selector(&self, selector: ShardSelector) -> SharedInformerFactory {
        let mut config = self.inner.config.clone();
        config.shard_selector = Some(selector);
        SharedInformerFactory {
            inner: Arc::new(Inner {
                client: self.inner.client.clone(),
                config,
                informers: Mutex::new(HashMap::new()),
                tasks: Mutex::new(Vec::new()),
                cancel: CancellationToken::new(),
            }),
        }
    }

    /// The shard selector given to [`with_shard_selector`](Self::with_shard_selector).
    pub fn shard_selector(&self) -> Option<&ShardSelector> {
        self.inner.config.shard_selector.as_ref()
    }

    /// The informer for the typed resource `K` (created on first use).
    pub fn informer<K>(&self) -> SharedIndexInformer<K>
    where
        K: Resource + Send + Sync + 'static,
        K::DynamicType: Default + Clone + Send + Sync + 'static,
    {
        self.get_or_create(
            InformerKey::Typed(TypeId::of::<K>()),
            K::DynamicType::default(),
        )
    }

    /// The metadata-only informer for `K`: caches `PartialObjectMeta<K>`
    /// (the server sends only metadata).
    pub fn metadata_informer<K>(&self) -> SharedIndexInformer<PartialObjectMeta<K>>
    where
        K: Resource + Send + Sync + 'static,
        K::DynamicType: Default + Clone + Send + Sync + 'static,
    {
        self.informer::<PartialObjectMeta<K>>()
    }

    /// The informer for a resource known at run time (e.g. a CRD without a
    /// Rust type), caching `DynamicObject`s.
    pub fn dynamic_informer(&self, resource: &ApiResource) -> SharedIndexInformer<DynamicObject> {
        self.get_or_create(
            InformerKey::Dynamic {
                group: resource.group.clone(),
                version: resource.version.clone(),
                plural: resource.plural.clone(),
            },
            resource.clone(),
        )
    }

    fn get_or_create<K>(&self, key: InformerKey, dyntype: K::DynamicType) -> SharedIndexInformer<K>
    where
        K: Resource + Send + Sync + 'static,
        K::DynamicType: Clone + Send + Sync + 'static,
    {
        let mut informers = lock(&self.inner.informers);
        if let Some(entry) = informers.get(&key)
            && let Some(informer) = entry.any.downcast_ref::<SharedIndexInformer<K>>()
        {
            return informer.clone();
        }
        let cfg = &self.inner.config;
        let mut config = cfg.informers.clone();
        config.name = None;
        if let Some(selector) = &cfg.shard_selector {
            config.watch.shard_selector = Some(selector.clone());
        }
        if let Some(period) = cfg.resync_for.get(&TypeId::of::<K>()) {
            config.resync_period = *period;
        }
        let gvr = gvr_of::<K>(&dyntype);
        config.snapshot = cfg.snapshots_for(&gvr).map(|s| {
            let s = s.clone().into_dir();
            match cfg.transform_ids.get(&TypeId::of::<K>()) {
                Some(id) => s.transform_id(id.clone()),
                None => s,
            }
        });
        let mut builder =
            SharedIndexInformer::<K>::builder_with(self.inner.client.clone(), dyntype)
                .config(config);
        if let Some(m) = &cfg.reflector_metrics {
            builder = builder.reflector_metrics(m.clone());
        }
        if let Some(m) = &cfg.metrics {
            builder = builder.metrics(m.clone());
        }
        if let Some(t) = cfg
            .transforms
            .get(&TypeId::of::<K>())
            .and_then(|t| t.downcast_ref::<TransformFunc<K>>())
        {
            builder = builder.transform(t.clone());
        }
        let informer = builder.build();
        informers.insert(
            key,
            Entry {
                any: Box::new(informer.clone()),
                erased: Arc::new(informer.clone()),
                started: false,
            },
        );
        informer
    }

    /// Starts every informer created so far that has not started yet (call
    /// again after creating more). Needs a tokio runtime.
    ///
    /// Each start is an atomic claim
    /// ([`SharedIndexInformer::try_start`]): when this returns, every
    /// informer of the factory reports
    /// [`has_started`](SharedIndexInformer::has_started), and one that
    /// somebody else had started already is left to its owner (this
    /// factory's [`shutdown`](Self::shutdown) does not stop it).
    pub fn start(&self) {
        if self.inner.cancel.is_cancelled() {
            tracing::warn!("start after shutdown: the factory's informers stay stopped");
            return;
        }
        let mut informers = lock(&self.inner.informers);
        let mut tasks = lock(&self.inner.tasks);
        for entry in informers.values_mut().filter(|e| !e.started) {
            entry.started = true;
            match entry.erased.try_start(self.inner.cancel.child_token()) {
                Some(run) => {
                    let name = entry.erased.name();
                    tasks.push(tokio::spawn(async move {
                        match run.await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => {
                                tracing::error!(informer = %name, error = %kcache_core::ErrorChain(&e), "informer did not run");
                            }
                            Err(e) => {
                                tracing::error!(informer = %name, error = %e, "informer task failed");
                            }
                        }
                    }));
                }
                None => tracing::debug!(
                    informer = %entry.erased.name(),
                    "informer already started by its own caller; the factory leaves it to that caller"
                ),
            }
        }
    }

    /// Waits until every started informer has synced, or the factory shuts
    /// down; returns each informer's result by name.
    pub async fn wait_for_cache_sync(&self) -> BTreeMap<String, bool> {
        let started: Vec<Arc<dyn ErasedInformer>> = lock(&self.inner.informers)
            .values()
            .filter(|e| e.started)
            .map(|e| e.erased.clone())
            .collect();
        loop {
            if started.iter().all(|i| i.has_synced()) || self.inner.cancel.is_cancelled() {
                return started.iter().map(|i| (i.name(), i.has_synced())).collect();
            }
            tokio::select! {
                _ = self.inner.cancel.cancelled() => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }

    /// Stops every informer this factory started and waits until all of
    /// them have stopped (each waits at most the handler shutdown timeout
    /// for its handlers).
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        let tasks: Vec<JoinHandle<()>> = lock(&self.inner.tasks).drain(..).collect();
        for t in tasks {
            let _ = t.await;
        }
    }
}
