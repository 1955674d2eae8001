//! What a cache should equal: `namespace/name` (or `name`) -> resourceVersion
//! maps of the server's objects and of cached objects.

use std::collections::BTreeMap;
use std::fmt::Debug;

use kcache_core::CachedObject;
use kube::Resource;
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;

/// The key a cache gives an object: `namespace/name`, or `name` for a
/// cluster-scoped one (client-go's `MetaNamespaceKeyFunc`).
pub fn key_of<K: Resource>(obj: &K) -> String {
    let m = obj.meta();
    let name = m.name.as_deref().unwrap_or_default();
    match m.namespace.as_deref() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// Key -> resourceVersion of every object a fresh list returns now.
/// Panics if the list fails.
pub async fn server_state<K>(api: &Api<K>) -> BTreeMap<String, String>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing the server's state: {e}"))
        .items
        .iter()
        .map(|o| {
            let rv = o.meta().resource_version.clone().unwrap_or_default();
            (key_of(o), rv)
        })
        .collect()
}

/// Key -> resourceVersion of cached objects (an indexer's `list()`).
pub fn cache_state<K>(objects: &[CachedObject<K>]) -> BTreeMap<String, String> {
    objects
        .iter()
        .map(|o| {
            let rv = o.resource_version().unwrap_or_default().to_owned();
            (o.key().to_owned(), rv)
        })
        .collect()
}
