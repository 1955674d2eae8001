//! Thread-safe store of cached Kubernetes objects with named indexes, and
//! listers: client-go's `Indexer`, `ThreadSafeStore` and listers, on
//! one `parking_lot::RwLock`.
//!
//! ```
//! use std::sync::Arc;
//! use kcache_core::{CachedObject, FieldPaths, ObjectOptions};
//! use kcache_indexer::{Indexer, Indexers, Lister, field_index_func, label_index_func};
//!
//! let idx = Arc::new(Indexer::<serde_json::Value>::new()); // with the "namespace" index
//! let mut more = Indexers::new();
//! more.insert("by-node".to_string(), field_index_func("/spec/nodeName"));
//! more.insert("by-app".to_string(), label_index_func("app"));
//! idx.add_indexers(more)?;
//!
//! let opts = ObjectOptions { field_paths: Some(FieldPaths::new(["/spec/nodeName"])?), ..ObjectOptions::default() };
//! let pod = br#"{"metadata":{"name":"p","namespace":"ns","labels":{"app":"web"}},"spec":{"nodeName":"n1"}}"#;
//! idx.add(CachedObject::from_bytes_with(&pod[..], &opts)?)?;
//!
//! assert_eq!(idx.index_keys("by-node", "n1")?, ["ns/p"]);
//! assert_eq!(idx.by_index("by-app", "web")?.len(), 1);
//! assert!(idx.by_index("nope", "x").is_err()); // unknown index: typed error
//! let lister = Lister::new(idx.clone());
//! assert_eq!(lister.namespaced("ns").list(&"app=web".parse()?).len(), 1);
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

// docs.rs (rustdoc --cfg docsrs, nightly): items behind a feature carry a
// badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod index;
mod indexer;
mod lister;
mod own_reads;
mod own_writes;

pub use index::{
    IndexFunc, Indexers, NAMESPACE_INDEX, field_index_func, label_index_func,
    meta_namespace_index_func, owner_uid_index_func,
};
pub use indexer::{IndexError, Indexer, QuietScan, Swap};
pub use lister::{GetError, Lister, NamespacedLister, NotFound, list_all, list_all_by_namespace};
pub use own_writes::MAX_OWN_WRITES;
