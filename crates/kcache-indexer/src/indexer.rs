//! The thread-safe indexed store.

use std::collections::HashSet;
use std::sync::Arc;

use dashmap::DashMap;
use kcache_core::{
    BoxError, CachedObject, KeyError, KeyFunc, KeyListerGetter, ObjectOrTombstone, Store,
    StoreError, deletion_handling_key, meta_namespace_key,
};
use parking_lot::{Mutex, RwLock};

use crate::index::{IndexFunc, Indexers, NAMESPACE_INDEX, meta_namespace_index_func};

/// Error from an index query or from [`Indexer::add_indexers`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// No index of that name is registered.
    #[error("index with name {0} does not exist")]
    UnknownIndex(String),
    /// [`Indexer::add_indexers`] was given names that already exist.
    #[error("indexer conflict: {0:?}")]
    Conflict(Vec<String>),
    /// An index function failed on an object; nothing was changed.
    #[error("index function {index:?} failed for key {key:?}: {source}")]
    Func {
        /// The index name.
        index: String,
        /// The object's key.
        key: String,
        /// The function's error.
        #[source]
        source: BoxError,
    },
}

/// Values of one object for every index, in index order.
type Values = Arc<[Box<[String]>]>;

struct Entry<K> {
    obj: CachedObject<K>,
    values: Values,
}

struct Slot<K> {
    name: String,
    func: IndexFunc<K>,
    /// index value -> keys
    map: DashMap<String, HashSet<Arc<str>>>,
}

struct State<K> {
    items: DashMap<Arc<str>, Entry<K>>,
    slots: Vec<Slot<K>>,
}

impl<K> State<K> {
    fn empty(defs: Vec<(String, IndexFunc<K>)>) -> Self {
        State {
            items: DashMap::new(),
            slots: defs
                .into_iter()
                .map(|(name, func)| Slot {
                    name,
                    func,
                    map: DashMap::new(),
                })
                .collect(),
        }
    }

    fn defs(&self) -> Vec<(String, IndexFunc<K>)> {
        self.slots
            .iter()
            .map(|s| (s.name.clone(), s.func.clone()))
            .collect()
    }

    fn slot(&self, name: &str) -> Result<(usize, &Slot<K>), IndexError> {
        self.slots
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name)
            .ok_or_else(|| IndexError::UnknownIndex(name.to_owned()))
    }

    fn compute(&self, obj: &CachedObject<K>, key: &str) -> Result<Values, IndexError> {
        self.slots
            .iter()
            .map(|s| compute_one(s, obj, key))
            .collect::<Result<Vec<_>, _>>()
            .map(Into::into)
    }

    /// Inserts or replaces `key`. Never holds two map guards at once.
    fn put(&self, key: &str, obj: CachedObject<K>, values: Values) {
        let arc_key: Arc<str> = match self.items.get(key) {
            Some(r) => r.key().clone(),
            None => Arc::from(key),
        };
        let old = self.items.insert(
            arc_key.clone(),
            Entry {
                obj,
                values: values.clone(),
            },
        );
        for (i, slot) in self.slots.iter().enumerate() {
            let new_vals = &values[i];
            let old_vals: &[String] = old.as_ref().map_or(&[], |e| &e.values[i]);
            if old_vals == &new_vals[..] {
                continue;
            }
            for v in old_vals {
                if !new_vals.contains(v) {
                    remove_from(&slot.map, v, &arc_key);
                }
            }
            for v in new_vals.iter() {
                if !old_vals.contains(v) {
                    slot.map
                        .entry(v.clone())
                        .or_default()
                        .insert(arc_key.clone());
                }
            }
        }
    }

    fn remove(&self, key: &str) -> Option<CachedObject<K>> {
        let (arc_key, entry) = self.items.remove(key)?;
        for (i, slot) in self.slots.iter().enumerate() {
            for v in entry.values[i].iter() {
                remove_from(&slot.map, v, &arc_key);
            }
        }
        Some(entry.obj)
    }
}

fn compute_one<K>(
    s: &Slot<K>,
    obj: &CachedObject<K>,
    key: &str,
) -> Result<Box<[String]>, IndexError> {
    let mut v = s.func.call(obj).map_err(|source| IndexError::Func {
        index: s.name.clone(),
        key: key.to_owned(),
        source,
    })?;
    v.sort_unstable();
    v.dedup();
    Ok(v.into_boxed_slice())
}

fn remove_from(map: &DashMap<String, HashSet<Arc<str>>>, value: &str, key: &str) {
    let now_empty = match map.get_mut(value) {
        Some(mut set) => {
            set.remove(key);
            set.is_empty()
        }
        None => false,
    };
    if now_empty {
        map.remove_if(value, |_, s| s.is_empty());
    }
}

fn store_err(e: IndexError) -> StoreError {
    match e {
        IndexError::Func { index, key, source } => StoreError::IndexFunc { index, key, source },
        other => StoreError::Other(Box::new(other)),
    }
}

/// A thread-safe store of [`CachedObject`]s with named indexes (client-go's
/// `Indexer` over a `threadSafeMap`), on `dashmap`.
///
/// * Readers never block each other and only contend with writers per shard.
/// * Writers are serialized; index maintenance removes a key from the values
///   it no longer has, adds it to its new ones, and drops empty value sets.
/// * A failing index function fails the write and leaves the store unchanged.
/// * Reads through an index filter on the object's current values, so a
///   reader never sees an object under a value it does not have at the time
///   of the read (during a concurrent update it may miss the object for that
///   instant instead).
/// * [`replace`](Self::replace) and [`add_indexers`](Self::add_indexers)
///   build a new state and swap it in atomically.
///
/// ```
/// use kcache_core::{CachedObject, Selector};
/// use kcache_indexer::{Indexer, NAMESPACE_INDEX};
///
/// let idx: Indexer<serde_json::Value> = Indexer::new();
/// for (ns, name) in [("a", "x"), ("a", "y"), ("b", "z")] {
///     let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"{ns}"}}}}"#);
///     idx.add(CachedObject::from_bytes(json)?)?;
/// }
/// assert_eq!(idx.index_keys(NAMESPACE_INDEX, "a")?, ["a/x", "a/y"]);
/// assert_eq!(idx.get_by_key("b/z").unwrap().name(), "z");
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub struct Indexer<K> {
    state: RwLock<Arc<State<K>>>,
    write: Mutex<()>,
    key_func: Arc<dyn KeyFunc<K>>,
    rv: Mutex<String>,
}

impl<K: 'static> Default for Indexer<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: 'static> Indexer<K> {
    /// A store keyed by `namespace/name` with the built-in
    /// [`NAMESPACE_INDEX`] (`meta_namespace_index_func`).
    pub fn new() -> Self {
        let mut indexers = Indexers::new();
        indexers.insert(NAMESPACE_INDEX.to_owned(), meta_namespace_index_func());
        Self::with_indexers(Arc::new(meta_namespace_key::<K>), indexers)
    }
}

impl<K> Indexer<K> {
    /// A store with a custom key function and exactly these indexers.
    pub fn with_indexers(key_func: Arc<dyn KeyFunc<K>>, indexers: Indexers<K>) -> Self {
        let mut defs: Vec<_> = indexers.into_iter().collect();
        defs.sort_by(|a, b| a.0.cmp(&b.0));
        Indexer {
            state: RwLock::new(Arc::new(State::empty(defs))),
            write: Mutex::new(()),
            key_func,
            rv: Mutex::new(String::new()),
        }
    }

    fn current(&self) -> Arc<State<K>> {
        self.state.read().clone()
    }

    /// The key of `obj` under this store's key function.
    pub fn key_of(&self, obj: &CachedObject<K>) -> Result<String, KeyError> {
        self.key_func.key(obj)
    }

    fn set_rv(&self, obj: &CachedObject<K>) {
        if let Some(rv) = obj.resource_version() {
            let mut cur = self.rv.lock();
            cur.clear();
            cur.push_str(rv);
        }
    }

    /// Adds or replaces an object (upsert, like client-go).
    pub fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.update(obj)
    }

    /// Updates (or adds) an object, moving its key between index values.
    pub fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        let key = self.key_func.key(&obj)?;
        let _w = self.write.lock();
        let st = self.current();
        let values = st.compute(&obj, &key).map_err(store_err)?;
        self.set_rv(&obj);
        st.put(&key, obj, values);
        Ok(())
    }

    /// Deletes an object, or the key of a tombstone. Deleting a missing key is a no-op.
    pub fn delete(&self, obj: impl Into<ObjectOrTombstone<K>>) -> Result<(), StoreError> {
        let obj = obj.into();
        let key = deletion_handling_key(&*self.key_func, &obj)?;
        let _w = self.write.lock();
        if let ObjectOrTombstone::Object(o) = &obj {
            self.set_rv(o);
        }
        self.current().remove(&key);
        Ok(())
    }

    /// Deletes the object under `key`, returning it. A missing key is a no-op.
    pub fn delete_by_key(&self, key: &str) -> Option<CachedObject<K>> {
        let _w = self.write.lock();
        self.current().remove(key)
    }

    /// The stored object with the same key as `obj`.
    pub fn get(&self, obj: &CachedObject<K>) -> Result<Option<CachedObject<K>>, KeyError> {
        let key = self.key_func.key(obj)?;
        Ok(self.get_by_key(&key))
    }

    /// The stored object under `key`.
    pub fn get_by_key(&self, key: &str) -> Option<CachedObject<K>> {
        self.current().items.get(key).map(|e| e.obj.clone())
    }

    /// Every stored object (in no particular order).
    pub fn list(&self) -> Vec<CachedObject<K>> {
        let st = self.current();
        let mut out = Vec::with_capacity(st.items.len());
        out.extend(st.items.iter().map(|e| e.obj.clone()));
        out
    }

    /// Every stored key (in no particular order).
    pub fn list_keys(&self) -> Vec<String> {
        let st = self.current();
        let mut out = Vec::with_capacity(st.items.len());
        out.extend(st.items.iter().map(|e| e.key().to_string()));
        out
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.current().items.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces the whole content with `items` and rebuilds every index.
    /// Atomic for readers; on a key or index function error nothing changes.
    pub fn replace(
        &self,
        items: Vec<CachedObject<K>>,
        resource_version: impl Into<String>,
    ) -> Result<(), StoreError> {
        let _w = self.write.lock();
        let next = State::empty(self.current().defs());
        for obj in items {
            let key = self.key_func.key(&obj)?;
            let values = next.compute(&obj, &key).map_err(store_err)?;
            next.put(&key, obj, values);
        }
        *self.state.write() = Arc::new(next);
        *self.rv.lock() = resource_version.into();
        Ok(())
    }

    /// No-op (client-go's `Resync` on a store).
    pub fn resync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Objects sharing at least one value of index `name` with `obj`.
    pub fn index(
        &self,
        name: &str,
        obj: &CachedObject<K>,
    ) -> Result<Vec<CachedObject<K>>, IndexError> {
        let st = self.current();
        let (i, slot) = st.slot(name)?;
        let values = compute_one(slot, obj, obj.key())?;
        if let [only] = &values[..] {
            return Ok(collect_objects(&st, i, only));
        }
        let mut seen: HashSet<Arc<str>> = HashSet::new();
        let mut out = Vec::new();
        for v in values.iter() {
            if let Some(set) = slot.map.get(v.as_str()) {
                for k in set.iter() {
                    if seen.contains(k) {
                        continue;
                    }
                    if let Some(e) = st.items.get(k)
                        && values.iter().any(|v| e.values[i].contains(v))
                    {
                        seen.insert(k.clone());
                        out.push(e.obj.clone());
                    }
                }
            }
        }
        Ok(out)
    }

    /// Objects whose index `name` contains `value` (empty for an unknown value).
    pub fn by_index(&self, name: &str, value: &str) -> Result<Vec<CachedObject<K>>, IndexError> {
        let st = self.current();
        let (i, _) = st.slot(name)?;
        Ok(collect_objects(&st, i, value))
    }

    /// Keys whose index `name` contains `value`, sorted.
    pub fn index_keys(&self, name: &str, value: &str) -> Result<Vec<String>, IndexError> {
        let st = self.current();
        let (i, slot) = st.slot(name)?;
        let mut keys: Vec<String> = match slot.map.get(value) {
            Some(set) => set
                .iter()
                .filter(|k| {
                    st.items
                        .get(&***k)
                        .is_some_and(|e| e.values[i].iter().any(|v| v == value))
                })
                .map(|k| k.to_string())
                .collect(),
            None => Vec::new(),
        };
        keys.sort_unstable();
        Ok(keys)
    }

    /// The distinct values of index `name`, sorted (empty for an unknown index).
    pub fn list_index_func_values(&self, name: &str) -> Vec<String> {
        let st = self.current();
        let Ok((_, slot)) = st.slot(name) else {
            return Vec::new();
        };
        let mut v: Vec<String> = slot
            .map
            .iter()
            .filter(|e| !e.value().is_empty())
            .map(|e| e.key().clone())
            .collect();
        v.sort_unstable();
        v
    }

    /// The registered index functions.
    pub fn get_indexers(&self) -> Indexers<K> {
        self.current().defs().into_iter().collect()
    }

    /// Registers more indexes, indexing the objects already stored. A name
    /// already registered is a [`IndexError::Conflict`]; a failing function
    /// is an [`IndexError::Func`]; in both cases nothing changes.
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError> {
        let _w = self.write.lock();
        let cur = self.current();
        let mut conflicts: Vec<String> = indexers
            .keys()
            .filter(|n| cur.slots.iter().any(|s| &s.name == *n))
            .cloned()
            .collect();
        if !conflicts.is_empty() {
            conflicts.sort();
            return Err(IndexError::Conflict(conflicts));
        }
        let mut defs = cur.defs();
        let old_len = defs.len();
        let mut added: Vec<_> = indexers.into_iter().collect();
        added.sort_by(|a, b| a.0.cmp(&b.0));
        defs.extend(added);
        let next = State::empty(defs);
        // Old indexes keep their positions: reuse their values, compute the new ones.
        for e in cur.items.iter() {
            let mut values: Vec<Box<[String]>> = e.values.to_vec();
            for slot in &next.slots[old_len..] {
                values.push(compute_one(slot, &e.obj, e.key())?);
            }
            next.put(e.key(), e.obj.clone(), values.into());
        }
        *self.state.write() = Arc::new(next);
        Ok(())
    }

    /// Records a watch bookmark's resource version.
    pub fn bookmark(&self, resource_version: &str) {
        *self.rv.lock() = resource_version.to_owned();
    }

    /// The resource version of the last write, replace or bookmark.
    pub fn last_store_sync_resource_version(&self) -> Option<String> {
        let rv = self.rv.lock();
        (!rv.is_empty()).then(|| rv.clone())
    }
}

fn collect_objects<K>(st: &State<K>, i: usize, value: &str) -> Vec<CachedObject<K>> {
    let Some(set) = st.slots[i].map.get(value) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(set.len());
    for k in set.iter() {
        if let Some(e) = st.items.get(k)
            && e.values[i].iter().any(|v| v == value)
        {
            out.push(e.obj.clone());
        }
    }
    out
}

impl<K: 'static> Store<K> for Indexer<K> {
    fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        Indexer::add(self, obj)
    }
    fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        Indexer::update(self, obj)
    }
    fn delete(&self, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
        Indexer::delete(self, obj)
    }
    fn replace(
        &self,
        items: Vec<CachedObject<K>>,
        resource_version: String,
    ) -> Result<(), StoreError> {
        Indexer::replace(self, items, resource_version)
    }
    fn resync(&self) -> Result<(), StoreError> {
        Ok(())
    }
    fn bookmark(&self, resource_version: &str) -> Result<(), StoreError> {
        Indexer::bookmark(self, resource_version);
        Ok(())
    }
    fn last_store_sync_resource_version(&self) -> Option<String> {
        Indexer::last_store_sync_resource_version(self)
    }
    /// The object held under `key`: a reflector writing straight into an
    /// indexer reuses it on a relist when its uid and resourceVersion are
    /// unchanged.
    fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        Indexer::get_by_key(self, key)
    }
}

impl<K: 'static> KeyListerGetter<K> for Indexer<K> {
    fn list_keys(&self) -> Vec<String> {
        Indexer::list_keys(self)
    }
    fn get_by_key(&self, key: &str) -> Option<CachedObject<K>> {
        Indexer::get_by_key(self, key)
    }
}
