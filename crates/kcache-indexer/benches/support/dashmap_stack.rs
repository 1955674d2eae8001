//! Bench-only: the indexer as it was before issue 17 (DashMap items and
//! index maps, a writer mutex, `RwLock<Arc<State>>` swapped by `replace` and
//! `add_indexers`), kept verbatim except for the parts the benchmark does
//! not call, so `benches/store.rs` can compare it with the shipped
//! `RwLock<HashMap>` indexer. Not part of the library.

use std::collections::HashSet;
use std::sync::Arc;

use dashmap::DashMap;
use kcache_core::{
    BoxError, CachedObject, KeyFunc, ObjectOrTombstone, StoreError, deletion_handling_key,
};
use parking_lot::{Mutex, RwLock};

use kcache_indexer::{IndexFunc, Indexers};

/// Error from an index query.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// No index of that name is registered.
    #[error("index with name {0} does not exist")]
    UnknownIndex(String),
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

/// The pre-issue-17 indexer (see the module doc).
pub struct Indexer<K> {
    state: RwLock<Arc<State<K>>>,
    write: Mutex<()>,
    key_func: Arc<dyn KeyFunc<K>>,
    rv: Mutex<String>,
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
