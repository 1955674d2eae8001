//! Listers: read-only, selector-aware views over an [`Indexer`], which
//! include this process's own writes until the watch delivers them (see
//! [`Indexer::record_own_write`]).

use crate::indexer::IndexError;

use std::sync::Arc;

use kcache_core::{CachedObject, DecodeError, Selector};
use serde::de::DeserializeOwned;

use crate::index::NAMESPACE_INDEX;
use crate::indexer::Indexer;

/// A `get` that found nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object {key:?} not found")]
pub struct NotFound {
    /// The key that was looked up (`namespace/name` or `name`).
    pub key: String,
}

/// A typed `get` that failed: nothing under the key, or the cached bytes did
/// not decode to `K`.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// Nothing is cached under the key.
    #[error(transparent)]
    NotFound(#[from] NotFound),
    /// The cached object did not decode to the requested type.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

fn decode_all<K: DeserializeOwned>(objs: Vec<CachedObject<K>>) -> Result<Vec<K>, DecodeError> {
    objs.iter().map(CachedObject::decode).collect()
}

/// Objects of the store matching `selector` (client-go's `ListAll`):
/// [`Selector::nothing`] gives none, [`Selector::everything`] gives all.
/// Own writes not delivered yet are included.
pub fn list_all<K>(indexer: &Indexer<K>, selector: &Selector) -> Vec<CachedObject<K>> {
    if selector.is_nothing() {
        return Vec::new();
    }
    let mut all = indexer.list_including_own_writes();
    if !selector.is_everything() {
        all.retain(|o| selector.matches(o.labels()));
    }
    all
}

/// Objects of `namespace` matching `selector` (client-go's
/// `ListAllByNamespace`): `""` means every namespace; uses the
/// [`NAMESPACE_INDEX`] when registered, else scans. Own writes not
/// delivered yet are included.
pub fn list_all_by_namespace<K>(
    indexer: &Indexer<K>,
    namespace: &str,
    selector: &Selector,
) -> Vec<CachedObject<K>> {
    if selector.is_nothing() {
        return Vec::new();
    }
    if namespace.is_empty() {
        return list_all(indexer, selector);
    }
    let mut items = match indexer.by_index_including_own_writes(NAMESPACE_INDEX, namespace) {
        Ok(items) => items,
        Err(_) => {
            let mut all = indexer.list_including_own_writes();
            all.retain(|o| o.namespace() == Some(namespace));
            all
        }
    };
    if !selector.is_everything() {
        items.retain(|o| selector.matches(o.labels()));
    }
    items
}

/// A lister over an [`Indexer`]: list by label selector, get by name or
/// key, read an index, or narrow to one namespace.
///
/// Every read includes this process's own writes that the watch has not
/// delivered yet ([`Indexer::record_own_write`]: kcache-controller records
/// what each write of a reconcile returned), so a reconcile reads the child
/// it just created, the status it just wrote, and not the object it just
/// deleted. The indexer's own reads (`Indexer::get_by_key`...) show only
/// what the watch delivered.
///
/// ```
/// use std::sync::Arc;
/// use kcache_core::{CachedObject, Selector};
/// use kcache_indexer::{Indexer, Lister};
///
/// let idx = Arc::new(Indexer::<serde_json::Value>::new());
/// idx.add(CachedObject::from_bytes(&br#"{"metadata":{"name":"a","namespace":"ns","labels":{"app":"web"}}}"#[..])?)?;
/// let lister = Lister::new(idx);
/// assert_eq!(lister.list(&"app=web".parse()?).len(), 1);
/// assert_eq!(lister.namespaced("ns").get("a")?.name(), "a");
/// assert!(lister.namespaced("other").get("a").is_err());
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub struct Lister<K> {
    indexer: Arc<Indexer<K>>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Lister {
            indexer: self.indexer.clone(),
        }
    }
}

impl<K> Lister<K> {
    /// A lister reading `indexer`.
    pub fn new(indexer: Arc<Indexer<K>>) -> Self {
        Lister { indexer }
    }
    /// The underlying indexer.
    pub fn indexer(&self) -> &Arc<Indexer<K>> {
        &self.indexer
    }
    /// Objects of every namespace matching `selector`.
    pub fn list(&self, selector: &Selector) -> Vec<CachedObject<K>> {
        list_all(&self.indexer, selector)
    }
    /// A cluster-scoped object by name (key `name`).
    pub fn get(&self, name: &str) -> Result<CachedObject<K>, NotFound> {
        self.get_by_key(name)
    }
    /// The object under `key` (`namespace/name`, or `name`).
    pub fn get_by_key(&self, key: &str) -> Result<CachedObject<K>, NotFound> {
        self.indexer
            .get_including_own_writes(key)
            .ok_or_else(|| NotFound {
                key: key.to_owned(),
            })
    }
    /// Objects whose index `name` contains `value`.
    pub fn by_index(&self, name: &str, value: &str) -> Result<Vec<CachedObject<K>>, IndexError> {
        self.indexer.by_index_including_own_writes(name, value)
    }
    /// A view of one namespace.
    pub fn namespaced(&self, namespace: impl Into<String>) -> NamespacedLister<K> {
        NamespacedLister {
            indexer: self.indexer.clone(),
            namespace: namespace.into(),
        }
    }
}

impl<K: DeserializeOwned> Lister<K> {
    /// [`Lister::get`], decoded to `K` (a full typed decode: prefer the
    /// cached object's metadata where it is enough).
    pub fn get_decoded(&self, name: &str) -> Result<K, GetError> {
        Ok(self.get(name)?.decode()?)
    }
    /// [`Lister::list`], each object decoded to `K`.
    pub fn list_decoded(&self, selector: &Selector) -> Result<Vec<K>, DecodeError> {
        decode_all(self.list(selector))
    }
}

/// A lister restricted to one namespace.
pub struct NamespacedLister<K> {
    indexer: Arc<Indexer<K>>,
    namespace: String,
}

impl<K> Clone for NamespacedLister<K> {
    fn clone(&self) -> Self {
        NamespacedLister {
            indexer: self.indexer.clone(),
            namespace: self.namespace.clone(),
        }
    }
}

impl<K> NamespacedLister<K> {
    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// Objects of this namespace matching `selector`.
    pub fn list(&self, selector: &Selector) -> Vec<CachedObject<K>> {
        list_all_by_namespace(&self.indexer, &self.namespace, selector)
    }
    /// The object `namespace/name`.
    pub fn get(&self, name: &str) -> Result<CachedObject<K>, NotFound> {
        let key = format!("{}/{}", self.namespace, name);
        self.indexer
            .get_including_own_writes(&key)
            .ok_or(NotFound { key })
    }
}

impl<K: DeserializeOwned> NamespacedLister<K> {
    /// [`NamespacedLister::get`], decoded to `K`.
    pub fn get_decoded(&self, name: &str) -> Result<K, GetError> {
        Ok(self.get(name)?.decode()?)
    }
    /// [`NamespacedLister::list`], each object decoded to `K`.
    pub fn list_decoded(&self, selector: &Selector) -> Result<Vec<K>, DecodeError> {
        decode_all(self.list(selector))
    }
}
