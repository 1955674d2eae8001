//! Shared index informers: client-go's `SharedIndexInformer` and
//! `SharedInformerFactory` for Rust.
//!
//! A [`SharedIndexInformer`] runs one reflector (list + watch, from
//! `kcache-reflector`), one FIFO (`kcache-deltafifo`) and one indexed cache
//! (`kcache-indexer`) for a resource type, and fans every change out to any
//! number of handlers. Each handler has its own listener: an unbounded
//! buffer (starting at 1024 notifications, doubling) and a thread of its
//! own, so a slow or stuck handler never delays the others, the cache or the
//! watch. A handler that panics is caught, logged with the object's key and
//! counted; it keeps receiving later events.
//!
//! Handlers receive [`CachedObject`](kcache_core::CachedObject)s: reference
//! counted, with metadata at hand; nothing on the informer's path decodes
//! the typed object unless a handler calls `decode()`.
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kcache_informer::{ResourceEventHandlerFuncs, SharedIndexInformer, wait_for_cache_sync};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let informer = SharedIndexInformer::<ConfigMap>::builder(client)
//!     .namespace("default")
//!     .build();
//! let registration = informer.add_event_handler(
//!     ResourceEventHandlerFuncs::new()
//!         .add_func(|cm, initial| println!("add {} (initial list: {initial})", cm.key()))
//!         .update_func(|_old, new| println!("update {}", new.key()))
//!         .delete_func(|cm| println!("delete {}", cm.key())),
//! )?;
//! let cancel = CancellationToken::new();
//! let run = tokio::spawn({
//!     let (informer, cancel) = (informer.clone(), cancel.clone());
//!     async move { informer.run(cancel).await }
//! });
//! wait_for_cache_sync(&cancel, &[&informer, &registration]).await;
//! let cached = informer.lister().namespaced("default").get("my-config")?;
//! let typed: ConfigMap = cached.decode()?; // decode only when needed
//! # let _ = typed;
//! cancel.cancel();
//! run.await??;
//! # Ok(())
//! # }
//! ```
//!
//! Handlers are synchronous (like client-go's) and run on their listener's
//! thread: keep them quick, typically computing a key and adding it to a
//! work queue.

mod error;
mod factory;
mod handler;
mod informer;
mod listener;
mod processor;
#[cfg(feature = "prometheus")]
pub mod prometheus;

pub use error::InformerError;
pub use factory::{SharedInformerFactory, SharedInformerFactoryBuilder};
pub use handler::{FilteringResourceEventHandler, ResourceEventHandler, ResourceEventHandlerFuncs};
pub use informer::{
    FifoKind, HasSynced, ListOptions, ResourceEventHandlerRegistration, SharedIndexInformer,
    SharedIndexInformerBuilder, TransformFunc, WatchErrorHandler, strip_managed_fields,
    wait_for_cache_sync,
};
