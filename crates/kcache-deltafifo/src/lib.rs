//! DeltaFIFO and RealFIFO: the queues between a reflector and an informer,
//! with client-go's semantics (per-key ordered deltas, tombstones for
//! deletions missed while disconnected, "synced" tracking of the initial
//! list).
//!
//! Both queues implement [`kcache_core::ReflectorStore`] (what the reflector writes
//! into) and [`Queue`] (what the informer pops from), so an informer can use
//! either through `Arc<dyn Queue<K>>`.
//!
//! ```
//! use std::sync::Arc;
//! use kcache_core::{CachedObject, ReflectorStore};
//! use kcache_deltafifo::{DeltaFifo, DeltaType, FifoOptions, Queue};
//!
//! # futures::executor::block_on(async {
//! let queue: Arc<dyn Queue<serde_json::Value>> =
//!     Arc::new(DeltaFifo::new(FifoOptions::new().emit_delta_type_replaced(true)));
//! let pod = |name: &str| CachedObject::from_bytes(format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#)).unwrap();
//! queue.replace(vec![pod("a"), pod("b")], "100".to_string())?; // the reflector's first list
//! assert!(!queue.has_synced());
//! for _ in 0..2 {
//!     queue.pop(Box::new(|deltas, in_initial_list| {
//!         assert!(in_initial_list);
//!         assert_eq!(deltas.newest().unwrap().kind, DeltaType::Replaced);
//!         Ok(())
//!     })).await?;
//! }
//! assert!(queue.has_synced());
//! queue.close();
//! assert!(queue.pop(Box::new(|_, _| Ok(()))).await.is_err()); // closed and empty
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

// docs.rs (rustdoc --cfg docsrs, nightly): items behind a feature carry a
// badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod delta;
mod delta_fifo;
mod freshness;
mod real_fifo;
mod shared;

pub use delta::{Delta, DeltaType, Deltas, FifoOptions, PopError, ProcessFn, Queue, TransformFunc};
pub use delta_fifo::DeltaFifo;
pub use freshness::StoreFreshness;
pub use real_fifo::RealFifo;
