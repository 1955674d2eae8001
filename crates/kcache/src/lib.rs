//! **kcache**: Kubernetes client-go's informer and controller machinery,
//! rebuilt in Rust on the `kube` crates.
//!
//! **New here?** The [getting-started guide](https://github.com/kcache/kcache/blob/main/docs/getting-started.md)
//! shows what goes in `Cargo.toml` (this crate, `kube`, and the
//! k8s-openapi version feature your binary picks), a complete small
//! operator with its RBAC and Deployment, and recipes. Coming from
//! kube-runtime? See [from kube-runtime](https://github.com/kcache/kcache/blob/main/docs/from-kube-runtime.md).
//!
//! This umbrella crate re-exports the layers, each also usable alone:
//!
//! | module | crate | what it is |
//! |---|---|---|
//! | [`core`] | `kcache-core` | the cached object (wire bytes + metadata, typed on demand), keys, selectors, tombstones, the `ReflectorStore` trait |
//! | [`indexer`] | `kcache-indexer` | thread-safe store with named indexes, listers |
//! | [`deltafifo`] | `kcache-deltafifo` | DeltaFIFO and RealFIFO |
//! | [`reflector`] | `kcache-reflector` | list + watch into a store, with client-go's recovery rules |
//! | [`informer`] | `kcache-informer` | shared index informers, per-handler listeners, factory |
//! | [`workqueue`] | `kcache-workqueue` | dedup, delaying, rate-limited, priority queues; rate limiters |
//! | [`lease`] | `kcache-lease` | leader election and shard membership on Leases |
//! | [`controller`] | `kcache-controller` | reconcile loop, owns/watches, events, finalizers, metrics, health; composes `kcache-lease` |
//!
//! The [`prelude`] brings in what a controller author uses every day.
//!
//! ```
//! use kcache::prelude::*;
//!
//! // Objects are bytes + metadata; the typed value is decoded on demand.
//! let cm: CachedObject<k8s_openapi::api::core::v1::ConfigMap> = CachedObject::from_bytes(
//!     &br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","labels":{"app":"web"}},"data":{"k":"v"}}"#[..],
//! )?;
//! assert_eq!(cm.key(), "ns/a");
//! assert!(Selector::parse("app=web")?.matches(cm.labels()));
//! assert_eq!(cm.decode()?.data.unwrap()["k"], "v");
//!
//! // A work queue with client-go's default controller rate limiter.
//! let queue: WorkQueue<String> = WorkQueue::new();
//! queue.add(cm.key().to_string());
//! assert_eq!(queue.len(), 1);
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

// docs.rs (rustdoc --cfg docsrs, nightly): items behind a feature carry a
// badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use kcache_controller as controller;
pub use kcache_core as core;
pub use kcache_deltafifo as deltafifo;
pub use kcache_indexer as indexer;
pub use kcache_informer as informer;
pub use kcache_lease as lease;
pub use kcache_reflector as reflector;
pub use kcache_workqueue as workqueue;

/// What a controller author uses every day.
pub mod prelude {
    pub use kcache_controller::KubeMembershipStore;
    #[cfg(feature = "prometheus")]
    pub use kcache_controller::MetricsRegistry;
    pub use kcache_controller::events::{Event, Recorder, Reporter};
    pub use kcache_controller::finalizer::{self, FinalizerEvent, finalizer};
    pub use kcache_controller::{
        Action, Config, Controller, ControllerError, ControllerHandle, Predicate, PredicateEvent,
        Reconciler, Request, TerminalError, Trigger,
    };
    pub use kcache_core::{
        CachedObject, DeletedFinalStateUnknown, Metadata, ObjectOptions, ObjectOrTombstone,
        Selector, StringMap, meta_namespace_key, split_meta_namespace_key,
    };
    pub use kcache_indexer::{IndexFunc, Indexer, Indexers, Lister};
    pub use kcache_informer::{
        InformerConfig, ResourceEventHandler, ResourceEventHandlerFuncs, SharedIndexInformer,
        SharedInformerFactory, wait_for_cache_sync,
    };
    pub use kcache_lease::shard::ShardConfig;
    pub use kcache_lease::{KubeLeaseLock, LeaderElectionConfig};
    pub use kcache_reflector::WatchConfig;
    pub use kcache_workqueue::{AddOpts, RateLimiter, WorkQueue, default_controller_rate_limiter};
}
