//! The thread-safe indexed store.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use kcache_core::{
    BoxError, CachedObject, KeyError, KeyFunc, KeyListerGetter, ObjectOrTombstone, ReflectorStore,
    ResourceVersion, StoreError, deletion_handling_key, meta_namespace_key,
};
use parking_lot::{RwLock, RwLockUpgradableReadGuard};

use crate::index::{IndexFunc, Indexers, NAMESPACE_INDEX, Values, meta_namespace_index_func};
use crate::own_writes::{OwnWrite, OwnWrites};

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
    #[error("index function {index:?} failed for key {key:?}; nothing was changed")]
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

pub(crate) struct Entry<K> {
    pub(crate) obj: CachedObject<K>,
    pub(crate) values: Values,
    /// The store's [epoch](Indexer::epoch) when `obj` was written, or
    /// [`SETTLED`].
    epoch: u32,
}

/// The epoch of an entry that background compression need not look at
/// again: its object is compressed, or does not shrink.
const SETTLED: u32 = u32::MAX;

/// What [`Indexer::quiet_objects`] found in one bounded scan.
#[doc(hidden)] // the informer's background compression
#[derive(Debug)]
pub struct QuietScan<K> {
    /// The quiet objects found, with the keys they are stored under.
    pub objects: Vec<(Arc<str>, CachedObject<K>)>,
    /// Where the next scan of this round starts; `None` once the scan
    /// reached the end of the store.
    pub next: Option<usize>,
}

/// One object to swap for its twin in [`Indexer::swap_if_same`].
#[doc(hidden)] // the informer's background compression
#[derive(Debug)]
pub struct Swap<K> {
    /// The key the object is stored under (as [`QuietScan`] gives it).
    pub key: Arc<str>,
    /// The object the store must still hold under `key`: the very same
    /// allocation ([`CachedObject::ptr_eq`]), not merely an equal object.
    pub expected: CachedObject<K>,
    /// What replaces it: an object with the same key, metadata and bytes
    /// (e.g. [`CachedObject::compressed_with`]); `None` leaves `expected`
    /// in place and marks it settled (not worth compressing).
    pub twin: Option<CachedObject<K>>,
}

pub(crate) struct Slot<K> {
    pub(crate) name: String,
    func: IndexFunc<K>,
    /// index value -> keys
    pub(crate) map: HashMap<String, HashSet<Arc<str>>>,
}

/// Everything the lock protects: objects, indexes and the resource version
/// change together, so a reader sees either all of a write or none of it.
pub(crate) struct State<K> {
    pub(crate) items: HashMap<Arc<str>, Entry<K>>,
    pub(crate) slots: Vec<Slot<K>>,
    rv: String,
    /// What this process's own writes returned, shown to the reads that
    /// ask for them until the store holds that version (see
    /// [`Indexer::record_own_write`]).
    pub(crate) own: OwnWrites<K>,
}

impl<K> State<K> {
    fn empty(defs: Vec<(String, IndexFunc<K>)>) -> Self {
        State {
            items: HashMap::new(),
            slots: defs
                .into_iter()
                .map(|(name, func)| Slot {
                    name,
                    func,
                    map: HashMap::new(),
                })
                .collect(),
            rv: String::new(),
            own: OwnWrites::default(),
        }
    }

    fn defs(&self) -> Vec<(String, IndexFunc<K>)> {
        self.slots
            .iter()
            .map(|s| (s.name.clone(), s.func.clone()))
            .collect()
    }

    pub(crate) fn slot(&self, name: &str) -> Result<(usize, &Slot<K>), IndexError> {
        self.slots
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name)
            .ok_or_else(|| IndexError::UnknownIndex(name.to_owned()))
    }

    pub(crate) fn compute(&self, obj: &CachedObject<K>, key: &str) -> Result<Values, IndexError> {
        // Exact capacity: `into_boxed_slice` must not shrink (a realloc per
        // write fragments glibc's heap and cost ~2x on updates).
        let mut values = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            values.push(compute_one(s, obj, key)?);
        }
        Ok(values.into_boxed_slice())
    }

    fn set_rv(&mut self, obj: &CachedObject<K>) {
        if let Some(rv) = obj.resource_version() {
            self.rv.clear();
            self.rv.push_str(rv);
        }
    }

    /// Inserts or replaces `key`, returning the entry it replaced (for the
    /// caller to drop after releasing the lock).
    fn put(
        &mut self,
        key: &str,
        obj: CachedObject<K>,
        values: Values,
        epoch: u32,
    ) -> Option<Entry<K>> {
        let State { items, slots, .. } = self;
        let (arc_key, old_values, epoch) = match items.get_key_value(key) {
            // the same object again (a resync): it was not changed
            Some((k, e)) if e.obj.ptr_eq(&obj) => (k.clone(), Some(&e.values), e.epoch),
            Some((k, e)) => (k.clone(), Some(&e.values), epoch),
            None => (Arc::from(key), None, epoch),
        };
        let epoch = if obj.is_compressed() { SETTLED } else { epoch };
        for (i, slot) in slots.iter_mut().enumerate() {
            let new_vals = &values[i];
            let old_vals: &[String] = old_values.map_or(&[], |v| &v[i]);
            if old_vals == &new_vals[..] {
                continue;
            }
            for v in old_vals {
                if !new_vals.contains(v) {
                    remove_from(&mut slot.map, v, &arc_key);
                }
            }
            for v in new_vals.iter() {
                if !old_vals.contains(v) {
                    match slot.map.get_mut(v.as_str()) {
                        Some(set) => {
                            set.insert(arc_key.clone());
                        }
                        None => {
                            slot.map.insert(v.clone(), HashSet::from([arc_key.clone()]));
                        }
                    }
                }
            }
        }
        items.insert(arc_key, Entry { obj, values, epoch })
    }

    fn remove(&mut self, key: &str) -> Option<Entry<K>> {
        let (arc_key, entry) = self.items.remove_entry(key)?;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            for v in entry.values[i].iter() {
                remove_from(&mut slot.map, v, &arc_key);
            }
        }
        Some(entry)
    }

    pub(crate) fn collect_objects(&self, i: usize, value: &str) -> Vec<CachedObject<K>> {
        let Some(set) = self.slots[i].map.get(value) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(set.len());
        out.extend(
            set.iter()
                .filter_map(|k| self.items.get(k).map(|e| e.obj.clone())),
        );
        out
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

fn remove_from(map: &mut HashMap<String, HashSet<Arc<str>>>, value: &str, key: &str) {
    if let Some(set) = map.get_mut(value) {
        set.remove(key);
        if set.is_empty() {
            map.remove(value);
        }
    }
}

pub(crate) fn store_err(e: IndexError) -> StoreError {
    match e {
        IndexError::Func { index, key, source } => StoreError::IndexFunc { index, key, source },
        other => StoreError::Other(Box::new(other)),
    }
}

/// A thread-safe store of [`CachedObject`]s with named indexes (client-go's
/// `Indexer` over a `threadSafeMap`): one `parking_lot::RwLock` around the
/// objects, the index maps and the resource version.
///
/// * Every write is atomic for readers: a reader sees an object together
///   with all its index entries, or neither (no reader ever finds an object
///   under an index value it does not have).
/// * Writers are serialized. A write computes the index values while readers
///   still read (an upgradable read lock), then takes the write lock only to
///   change the maps; index maintenance removes a key from the values it no
///   longer has, adds it to its new ones, and drops empty value sets.
/// * A failing index function fails the write and leaves the store unchanged.
/// * [`replace`](Self::replace) and [`add_indexers`](Self::add_indexers)
///   build the new content while readers read the old, then swap it in at
///   once.
/// * Reads copy out under the read lock (cheap `Arc` clones) and sort or
///   convert after releasing it.
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
    pub(crate) state: RwLock<State<K>>,
    pub(crate) key_func: Arc<dyn KeyFunc<K>>,
    /// Stamped on every object written (see [`Indexer::epoch`]).
    epoch: AtomicU32,
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
            state: RwLock::new(State::empty(defs)),
            key_func,
            epoch: AtomicU32::new(0),
        }
    }

    /// The key of `obj` under this store's key function.
    pub fn key_of(&self, obj: &CachedObject<K>) -> Result<String, KeyError> {
        self.key_func.key(obj)
    }

    /// Adds or replaces an object (upsert, like client-go).
    pub fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.update(obj)
    }

    /// Updates (or adds) an object, moving its key between index values.
    pub fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        let key = self.key_func.key(&obj)?;
        let st = self.state.upgradable_read();
        let values = st.compute(&obj, &key).map_err(store_err)?;
        let mut st = RwLockUpgradableReadGuard::upgrade(st);
        st.set_rv(&obj);
        let settled = st.own.settle_write(&key, &obj);
        let old = st.put(&key, obj, values, self.epoch());
        drop(st);
        drop(old);
        drop(settled);
        Ok(())
    }

    /// Deletes an object, or the key of a tombstone. Deleting a missing key is a no-op.
    pub fn delete(&self, obj: impl Into<ObjectOrTombstone<K>>) -> Result<(), StoreError> {
        let obj = obj.into();
        let key = deletion_handling_key(&*self.key_func, &obj)?;
        let mut st = self.state.write();
        let settled = match &obj {
            ObjectOrTombstone::Object(o) => {
                st.set_rv(o);
                st.own
                    .settle_delete(&key, o.resource_version(), o.uid(), false)
            }
            // a relist no longer lists it: whatever this process wrote is gone
            ObjectOrTombstone::Tombstone(_) => st.own.settle_delete(&key, None, None, true),
        };
        let old = st.remove(&key);
        drop(st);
        drop(old);
        drop(settled);
        Ok(())
    }

    /// Deletes the object under `key`, returning it. A missing key is a no-op.
    pub fn delete_by_key(&self, key: &str) -> Option<CachedObject<K>> {
        let old = self.state.write().remove(key);
        old.map(|e| e.obj)
    }

    /// The stored object with the same key as `obj`.
    pub fn get(&self, obj: &CachedObject<K>) -> Result<Option<CachedObject<K>>, KeyError> {
        let key = self.key_func.key(obj)?;
        Ok(self.get_by_key(&key))
    }

    /// The stored object under `key`.
    pub fn get_by_key(&self, key: &str) -> Option<CachedObject<K>> {
        self.state.read().items.get(key).map(|e| e.obj.clone())
    }

    /// Every stored object (in no particular order).
    pub fn list(&self) -> Vec<CachedObject<K>> {
        let st = self.state.read();
        let mut out = Vec::with_capacity(st.items.len());
        out.extend(st.items.values().map(|e| e.obj.clone()));
        out
    }

    /// Every stored key (in no particular order).
    pub fn list_keys(&self) -> Vec<String> {
        let keys: Vec<Arc<str>> = {
            let st = self.state.read();
            st.items.keys().cloned().collect()
        };
        keys.iter().map(|k| k.to_string()).collect()
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.state.read().items.len()
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
        let st = self.state.upgradable_read();
        let mut next = State::empty(st.defs());
        next.items.reserve(items.len());
        let epoch = self.epoch();
        for obj in items {
            let key = self.key_func.key(&obj)?;
            let values = next.compute(&obj, &key).map_err(store_err)?;
            let epoch = match st.items.get(key.as_str()) {
                // unchanged by the relist: as quiet as before
                Some(e) if e.obj.ptr_eq(&obj) => e.epoch,
                _ => epoch,
            };
            next.put(&key, obj, values, epoch);
        }
        next.rv = resource_version.into();
        let mut st = RwLockUpgradableReadGuard::upgrade(st);
        // own writes newer than the list stay shown
        next.own = std::mem::take(&mut st.own);
        let list_rv = ResourceVersion::new(&next.rv);
        let settled = next.settle_own_through(&list_rv);
        let old = std::mem::replace(&mut *st, next);
        drop(settled);
        drop(st);
        drop(old);
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
        let st = self.state.read();
        let (i, slot) = st.slot(name)?;
        let values = compute_one(slot, obj, obj.key())?;
        if let [only] = &values[..] {
            return Ok(st.collect_objects(i, only));
        }
        let mut seen: HashSet<&Arc<str>> = HashSet::new();
        let mut out = Vec::new();
        for v in values.iter() {
            if let Some(set) = slot.map.get(v.as_str()) {
                for k in set.iter() {
                    if seen.insert(k)
                        && let Some(e) = st.items.get(k)
                    {
                        out.push(e.obj.clone());
                    }
                }
            }
        }
        Ok(out)
    }

    /// Objects whose index `name` contains `value` (empty for an unknown value).
    pub fn by_index(&self, name: &str, value: &str) -> Result<Vec<CachedObject<K>>, IndexError> {
        let st = self.state.read();
        let (i, _) = st.slot(name)?;
        Ok(st.collect_objects(i, value))
    }

    /// Keys whose index `name` contains `value`, sorted.
    pub fn index_keys(&self, name: &str, value: &str) -> Result<Vec<String>, IndexError> {
        let mut keys: Vec<Arc<str>> = {
            let st = self.state.read();
            let (_, slot) = st.slot(name)?;
            slot.map
                .get(value)
                .map_or_else(Vec::new, |set| set.iter().cloned().collect())
        };
        keys.sort_unstable();
        Ok(keys.iter().map(|k| k.to_string()).collect())
    }

    /// The distinct values of index `name`, sorted (empty for an unknown index).
    pub fn list_index_func_values(&self, name: &str) -> Vec<String> {
        let mut v: Vec<String> = {
            let st = self.state.read();
            let Ok((_, slot)) = st.slot(name) else {
                return Vec::new();
            };
            slot.map.keys().cloned().collect()
        };
        v.sort_unstable();
        v
    }

    /// The registered index functions.
    pub fn get_indexers(&self) -> Indexers<K> {
        self.state.read().defs().into_iter().collect()
    }

    /// Registers more indexes, indexing the objects already stored. A name
    /// already registered is a [`IndexError::Conflict`]; a failing function
    /// is an [`IndexError::Func`]; in both cases nothing changes.
    pub fn add_indexers(&self, indexers: Indexers<K>) -> Result<(), IndexError> {
        let cur = self.state.upgradable_read();
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
        let mut next = State::empty(defs);
        next.items.reserve(cur.items.len());
        next.rv = cur.rv.clone();
        // own writes get the new indexes' values too
        for (key, w) in cur.own.iter() {
            let w = match w {
                OwnWrite::Written { obj, rv, .. } => OwnWrite::Written {
                    values: next.compute(obj, key)?,
                    obj: obj.clone(),
                    rv: rv.clone(),
                },
                OwnWrite::Deleted { uid } => OwnWrite::Deleted { uid: uid.clone() },
            };
            next.own.insert(key.clone(), w);
        }
        // Old indexes keep their positions: reuse their values, compute the new ones.
        for (key, e) in cur.items.iter() {
            let mut values = Vec::with_capacity(next.slots.len());
            values.extend_from_slice(&e.values);
            for slot in &next.slots[old_len..] {
                values.push(compute_one(slot, &e.obj, key)?);
            }
            next.put(key, e.obj.clone(), values.into(), e.epoch);
        }
        let mut st = RwLockUpgradableReadGuard::upgrade(cur);
        let old = std::mem::replace(&mut *st, next);
        drop(st);
        drop(old);
        Ok(())
    }

    /// The store's write epoch: a counter that only
    /// [`advance_epoch`](Self::advance_epoch) moves (nothing else does), stamped
    /// on every object written (added, updated, replaced) so that
    /// [`quiet_objects`](Self::quiet_objects) can find the objects not
    /// written since a given epoch. An informer's background compression
    /// advances it on each of its ticks; without one it stays 0.
    #[doc(hidden)] // the informer's background compression
    pub fn epoch(&self) -> u32 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// Moves the [epoch](Self::epoch) on by one and returns the new value
    /// (it stops short of `u32::MAX`: at one tick a second, in 136 years).
    #[doc(hidden)] // the informer's background compression
    pub fn advance_epoch(&self) -> u32 {
        let next = self.epoch().saturating_add(1).min(SETTLED - 1);
        self.epoch.store(next, Ordering::Relaxed);
        next
    }

    /// Up to `max_scan` stored objects, from position `from` of the
    /// store's (unspecified, but stable while nothing is added or removed)
    /// order, and of those the plain objects last written at or before
    /// epoch `written_by` (not compressed, not marked settled by
    /// [`swap_if_same`](Self::swap_if_same)). Holds the read lock for that
    /// one bounded scan; a round over the store is a series of scans
    /// following [`QuietScan::next`]. Writes between two scans may make a
    /// round skip or repeat a few objects: the next round finds them.
    #[doc(hidden)] // the informer's background compression
    pub fn quiet_objects(&self, written_by: u32, from: usize, max_scan: usize) -> QuietScan<K> {
        let st = self.state.read();
        let mut objects = Vec::new();
        let mut scanned = 0;
        for (k, e) in st.items.iter().skip(from).take(max_scan) {
            scanned += 1;
            if e.epoch <= written_by {
                objects.push((k.clone(), e.obj.clone()));
            }
        }
        let end = from + scanned;
        QuietScan {
            objects,
            next: (scanned == max_scan && end < st.items.len()).then_some(end),
        }
    }

    /// Swaps each object for its twin, atomically for readers, where the
    /// store still holds that very object (pointer equality) under its
    /// key; an object written meanwhile (or deleted) is left alone, so a
    /// stale twin never replaces a newer object. The index values are kept
    /// as they are (a twin has the same metadata and bytes, so every index
    /// function gives the same values), the resource version does not
    /// change, and nothing is notified: handlers see no event. Each
    /// swapped, or marked settled (`twin: None`), object is never returned
    /// by [`quiet_objects`](Self::quiet_objects) again until it is written.
    ///
    /// Takes the write lock once for the whole batch (a few hundred
    /// pointer swaps); the replaced objects are dropped after it is
    /// released. Returns, for each swap in order, whether the store still
    /// held `expected` (and now holds the twin, or marked it settled).
    #[doc(hidden)] // the informer's background compression
    pub fn swap_if_same(&self, swaps: Vec<Swap<K>>) -> Vec<bool> {
        let mut replaced = Vec::with_capacity(swaps.len());
        let mut applied = Vec::with_capacity(swaps.len());
        {
            let mut st = self.state.write();
            for swap in &swaps {
                if let Some(twin) = &swap.twin
                    && twin.key() != swap.expected.key()
                {
                    // not a twin: never stored under another's key
                    applied.push(false);
                    continue;
                }
                let held = match st.items.get_mut(&*swap.key) {
                    Some(e) if e.obj.ptr_eq(&swap.expected) => e,
                    _ => {
                        applied.push(false);
                        continue;
                    }
                };
                held.epoch = SETTLED;
                if let Some(twin) = &swap.twin {
                    replaced.push(std::mem::replace(&mut held.obj, twin.clone()));
                }
                applied.push(true);
            }
        }
        drop(replaced);
        drop(swaps);
        applied
    }

    /// Records a watch bookmark's resource version.
    pub fn bookmark(&self, resource_version: &str) {
        let mut st = self.state.write();
        st.rv.clear();
        st.rv.push_str(resource_version);
    }

    /// The resource version of the last write, replace or bookmark.
    pub fn last_store_sync_resource_version(&self) -> Option<String> {
        let st = self.state.read();
        (!st.rv.is_empty()).then(|| st.rv.clone())
    }
}

impl<K: 'static> ReflectorStore<K> for Indexer<K> {
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
