//! One replica of the sample controller, sharded or not, with its own
//! client (counting the bytes it receives), informers and identity: what
//! the sharding tests and `cargo xtask shard-table` start several of.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::Deployment;
use kcache_controller::{Config, KubeMembershipStore, Reconciler};
use kcache_core::ShardField;
use kcache_informer::{InformerConfig, SharedInformerFactory};
use kcache_lease::shard::Shard;
use kcache_lease::shard::ShardConfig;

use crate::{Context, Foo, Running, build_controller};

/// How a replica shares the Foos with the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharding {
    /// Not sharded: it reconciles everything.
    None,
    /// Keys hashed on the client: every replica caches everything.
    Keys,
    /// Sharded informers on this field: each replica caches its share.
    Informers(ShardField),
}

/// A replica's settings.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// The identity in the shard group (e.g. the pod name).
    pub identity: String,
    /// Watch only this namespace (`None`: all namespaces).
    pub namespace: Option<String>,
    /// Where the membership Leases live.
    pub lease_namespace: String,
    /// The shard group.
    pub group: String,
    /// How it shares the work.
    pub sharding: Sharding,
    /// The replicas expected at startup.
    pub replicas_hint: usize,
    /// Lease duration, renew deadline, retry period.
    pub timings: (Duration, Duration, Duration),
    /// Release the membership Lease at a graceful stop (`false`: it
    /// expires, as when the process is killed).
    pub release_on_stop: bool,
    /// Concurrent reconciles.
    pub workers: usize,
}

impl ReplicaConfig {
    /// Defaults: all namespaces, group `foo-shards`, sharded informers on
    /// the namespace, 3 replicas expected, 4 s / 3 s / 0.5 s, release on
    /// stop, 4 workers.
    pub fn new(identity: impl Into<String>, lease_namespace: impl Into<String>) -> Self {
        Self {
            identity: identity.into(),
            namespace: None,
            lease_namespace: lease_namespace.into(),
            group: "foo-shards".to_owned(),
            sharding: Sharding::Informers(ShardField::Namespace),
            replicas_hint: 3,
            timings: (
                Duration::from_secs(4),
                Duration::from_secs(3),
                Duration::from_millis(500),
            ),
            release_on_stop: true,
            workers: 4,
        }
    }
}

/// A running replica.
pub struct Replica {
    /// Its identity.
    pub identity: String,
    /// Its shard membership, when sharded.
    pub shard: Option<Shard>,
    /// Its controller: informer factory, handle, context.
    pub controller: Running,
    bytes: Arc<AtomicU64>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Replica {
    /// Response body bytes its client received so far.
    pub fn bytes_received(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    /// The keys of the Foos in its cache now.
    pub fn cached_foos(&self) -> Vec<String> {
        self.controller
            .handle
            .informer::<Foo>()
            .indexer()
            .list_keys()
    }
    /// The keys of the Deployments in its cache now.
    pub fn cached_deployments(&self) -> Vec<String> {
        let deployments = self.controller.handle.informer::<Deployment>();
        deployments.indexer().list_keys()
    }
    /// Whether the controller task ended.
    pub fn finished(&self) -> bool {
        self.controller.finished()
    }
    /// Stops it (gracefully: running reconciles finish; its Lease is
    /// released if `release_on_stop`): [`Running::stop`].
    pub async fn stop(self) -> anyhow::Result<()> {
        let identity = self.identity;
        self.controller
            .stop()
            .await
            .with_context(|| format!("replica {identity}"))
    }
}

/// A client that counts the response body bytes it receives (kcache-testing's).
pub use kcache_testing::envtest::counting_client;

/// Starts a replica of the Foo controller on `kube_config` (its own
/// client, counting bytes), reconciling with `reconciler` (e.g.
/// [`reconcile`](crate::reconcile), or a wrapper that records calls).
pub fn start_replica<R>(
    kube_config: kube::Config,
    config: ReplicaConfig,
    reconciler: R,
) -> Result<Replica, kube::Error>
where
    R: Reconciler<Foo, Context>,
{
    let (client, bytes) = counting_client(kube_config)?;
    let mut informers = InformerConfig::default();
    informers.watch.namespace = config.namespace.clone();
    informers.watch.object_options.strip_managed_fields = true;
    let factory = SharedInformerFactory::builder(client.clone())
        .config(informers)
        .build();
    let (mut controller, ctx) = build_controller(
        &factory,
        client.clone(),
        Config::default().workers(config.workers),
    );
    let (lease, renew, retry) = config.timings;
    let shard_config = ShardConfig::new(&config.group, &config.identity)
        .replicas_hint(config.replicas_hint)
        .lease_duration(lease)
        .renew_deadline(renew)
        .retry_period(retry)
        .release_on_stop(config.release_on_stop);
    let store = || KubeMembershipStore::new(client.clone(), &config.lease_namespace);
    match config.sharding {
        Sharding::None => {}
        Sharding::Keys => controller = controller.sharded(shard_config, store()),
        Sharding::Informers(field) => {
            controller = controller
                .sharded(shard_config, store())
                .shard_informers(field);
        }
    }
    let shard = controller.shard().cloned();
    Ok(Replica {
        identity: config.identity,
        shard,
        controller: Running::spawn(factory, controller, ctx, reconciler),
        bytes,
    })
}
