//! Index functions.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use kcache_core::{BoxError, CachedObject};
use serde::de::DeserializeOwned;

/// Name of the built-in namespace index (client-go's `NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";

type IndexFn<K> = dyn Fn(&CachedObject<K>) -> Result<Vec<String>, BoxError> + Send + Sync;

/// A named index's function: the values an object is indexed under.
///
/// Functions over metadata or declared field paths ([`meta_namespace_index_func`],
/// [`label_index_func`], [`owner_uid_index_func`], [`field_index_func`], or
/// [`IndexFunc::new`] over `CachedObject` accessors) cost no typed decode.
/// [`IndexFunc::typed`] decodes the object into `K` on every call and is
/// much slower: prefer metadata or field paths.
pub struct IndexFunc<K>(Arc<IndexFn<K>>);

impl<K> Clone for IndexFunc<K> {
    fn clone(&self) -> Self {
        IndexFunc(self.0.clone())
    }
}

impl<K> fmt::Debug for IndexFunc<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IndexFunc")
    }
}

impl<K: 'static> IndexFunc<K> {
    /// An index function over the cached object (metadata, field paths).
    pub fn new<F>(f: F) -> Self
    where
        F: Fn(&CachedObject<K>) -> Result<Vec<String>, BoxError> + Send + Sync + 'static,
    {
        IndexFunc(Arc::new(f))
    }

    /// An index function over the typed object. Each call does a full decode
    /// of the object's JSON into `K`: documented as the slow path. A decode
    /// failure is an index-function error (the write fails, the store is
    /// unchanged).
    pub fn typed<F>(f: F) -> Self
    where
        K: DeserializeOwned,
        F: Fn(&K) -> Result<Vec<String>, BoxError> + Send + Sync + 'static,
    {
        IndexFunc(Arc::new(move |obj: &CachedObject<K>| {
            let typed = obj.decode()?;
            f(&typed)
        }))
    }
}

impl<K> IndexFunc<K> {
    /// Applies the function.
    pub fn call(&self, obj: &CachedObject<K>) -> Result<Vec<String>, BoxError> {
        (self.0)(obj)
    }
}

/// Named index functions (client-go's `Indexers`).
pub type Indexers<K> = HashMap<String, IndexFunc<K>>;

/// Indexes by namespace: `[namespace]`, `[""]` for cluster-scoped objects
/// (client-go's `MetaNamespaceIndexFunc`).
pub fn meta_namespace_index_func<K: 'static>() -> IndexFunc<K> {
    IndexFunc::new(|o: &CachedObject<K>| Ok(vec![o.namespace().unwrap_or("").to_owned()]))
}

/// Indexes by the value of label `key` (no value when the label is absent).
pub fn label_index_func<K: 'static>(key: impl Into<String>) -> IndexFunc<K> {
    let key = key.into();
    IndexFunc::new(move |o: &CachedObject<K>| {
        Ok(o.labels()
            .get(&key)
            .map(str::to_owned)
            .into_iter()
            .collect())
    })
}

/// Indexes by the UIDs of every owner reference.
pub fn owner_uid_index_func<K: 'static>() -> IndexFunc<K> {
    IndexFunc::new(|o: &CachedObject<K>| {
        Ok(o.meta()
            .owner_references()
            .iter()
            .map(|r| r.uid.clone())
            .collect())
    })
}

/// Indexes by the value of a JSON field path declared when the objects were
/// built (see `kcache_core::FieldPaths`); no value when absent or null.
///
/// An object built without declaring `path` makes the write fail with an
/// index-function error, so a misconfiguration is loud.
pub fn field_index_func<K: 'static>(path: impl Into<String>) -> IndexFunc<K> {
    let path = path.into();
    IndexFunc::new(move |o: &CachedObject<K>| {
        let declared = o.field_paths().and_then(|p| p.position(&path));
        match declared {
            Some(i) => Ok(o.field_at(i).map(str::to_owned).into_iter().collect()),
            None => Err(
                format!("field path {path:?} was not declared when the object was built").into(),
            ),
        }
    })
}

/// Values of one object for every index, in index order.
pub(crate) type Values = Box<[Box<[String]>]>;
