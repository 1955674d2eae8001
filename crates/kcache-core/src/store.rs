//! The store sink the reflector writes into, and the key lister/getter the
//! FIFOs read known objects from.

use crate::key::{BoxError, KeyError};
use crate::object::CachedObject;
use crate::tombstone::ObjectOrTombstone;

/// Error from a [`ReflectorStore`] write.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The key function failed.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// An index function failed; the store was left unchanged.
    #[error("index function {index:?} failed for key {key:?}: {source}")]
    IndexFunc {
        /// The index name.
        index: String,
        /// The key of the object being written.
        key: String,
        /// The index function's error.
        #[source]
        source: BoxError,
    },
    /// A transform function failed; nothing was queued.
    #[error("transform failed for key {key:?}: {source}")]
    Transform {
        /// The key of the object being transformed.
        key: String,
        /// The transform function's error.
        #[source]
        source: BoxError,
    },
    /// Any other failure of a store implementation.
    #[error(transparent)]
    Other(BoxError),
}

/// The sink a reflector writes into: the DeltaFIFO, the RealFIFO, an
/// indexer, or a test double.
///
/// Every method is synchronous and must not block for long: a reflector
/// calls them once per watch event. Object-safe: use as `Arc<dyn ReflectorStore<K>>`.
pub trait ReflectorStore<K>: Send + Sync {
    /// An object was added.
    fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError>;
    /// An object was updated.
    fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError>;
    /// An object (or a tombstone) was deleted.
    fn delete(&self, obj: ObjectOrTombstone<K>) -> Result<(), StoreError>;
    /// The complete current list, as of `resource_version`, replaces everything.
    fn replace(
        &self,
        items: Vec<CachedObject<K>>,
        resource_version: String,
    ) -> Result<(), StoreError>;
    /// Periodic resync (see each implementation).
    fn resync(&self) -> Result<(), StoreError>;
    /// A watch bookmark moved the resource version. Default: no-op.
    fn bookmark(&self, resource_version: &str) -> Result<(), StoreError> {
        let _ = resource_version;
        Ok(())
    }
    /// The resource version the store last synced to, if it tracks one.
    /// Default: `None`.
    fn last_store_sync_resource_version(&self) -> Option<String> {
        None
    }
    /// An object the store already holds under `key` (the object's
    /// [`CachedObject::key`]), so that a relist can reuse it instead of
    /// keeping a second copy of an unchanged object.
    ///
    /// The caller decides whether the held object is the same as the one it
    /// just decoded (the reflector requires the same `metadata.uid` and
    /// `metadata.resourceVersion`), so an implementation may return any
    /// object it holds under that key, or `None`. An object returned here
    /// and handed back to [`replace`](Self::replace) must be accepted as
    /// is: it already went through whatever the store does to new objects
    /// (e.g. a transform). Must be cheap (a lookup), as it is called once
    /// per listed object. Default: `None` (no reuse).
    fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        let _ = key;
        None
    }
}

/// What the FIFOs need from the cache downstream of them ("known objects"):
/// its keys and the object under a key. The indexer implements it.
pub trait KeyListerGetter<K>: Send + Sync {
    /// All keys currently held.
    fn list_keys(&self) -> Vec<String>;
    /// The object under `key`, if any.
    fn get_by_key(&self, key: &str) -> Option<CachedObject<K>>;
}
