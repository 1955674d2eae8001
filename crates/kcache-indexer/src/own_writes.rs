//! Read your own writes: what this process's writes returned, shown to the
//! reads that ask for it (the [`Lister`](crate::Lister)s) until the watch
//! delivers that version of the object, or a newer one.
//!
//! A controller that creates a child and reconciles again before the
//! watch has delivered it would read "no child" from the store and create
//! it twice. kcache-controller records the object each write returned
//! here ([`Indexer::record_own_write`], [`Indexer::record_own_delete`]);
//! the store's own content stays what the watch delivered (the informer's
//! handlers, its relist tombstones and its snapshots see only that), and
//! an entry goes away as soon as the store holds the same version or a
//! newer one, a relist lists the object at or past it, or the store's
//! freshness passes it ([`Indexer::forget_own_writes_through`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::sync::Arc;

use kcache_core::{CachedObject, ResourceVersion, StoreError};
use parking_lot::RwLockUpgradableReadGuard;

use crate::indexer::{IndexError, Indexer, Values, store_err};

/// Most own writes an indexer holds; past it a new one is not recorded
/// (reads then show the store as the watch left it: never wrong, possibly
/// stale, which the controller's stale-cache gate covers).
pub const MAX_OWN_WRITES: usize = 65_536;

/// One own write: the object it returned (`None`: deleted) at `rv`.
pub(crate) struct OwnWrite<K> {
    pub(crate) obj: Option<CachedObject<K>>,
    pub(crate) rv: ResourceVersion,
    /// `obj`'s index values, in index order (empty for a delete).
    pub(crate) values: Values,
}

/// The own writes of one store, by key.
pub(crate) struct OwnWrites<K> {
    map: HashMap<Arc<str>, OwnWrite<K>>,
}

impl<K> Default for OwnWrites<K> {
    fn default() -> Self {
        OwnWrites {
            map: HashMap::new(),
        }
    }
}

/// Whether a store holding `stored` (a version, or none given) has caught
/// up to an own write at `own`: the same version or a newer one. Versions
/// that do not compare count as caught up: the watch's state wins.
fn caught_up(stored: Option<&str>, own: &ResourceVersion) -> bool {
    stored.is_none_or(|s| ResourceVersion::new(s).is_at_least(own).unwrap_or(true))
}

impl<K> OwnWrites<K> {
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn get(&self, key: &str) -> Option<&OwnWrite<K>> {
        self.map.get(key)
    }

    pub(crate) fn contains(&self, key: &str) -> bool {
        !self.map.is_empty() && self.map.contains_key(key)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &OwnWrite<K>)> {
        self.map.iter()
    }

    pub(crate) fn insert(&mut self, key: Arc<str>, w: OwnWrite<K>) {
        self.map.insert(key, w);
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<OwnWrite<K>> {
        if self.map.is_empty() {
            return None;
        }
        self.map.remove(key)
    }

    /// The store now holds `key` at `stored`: the own write of `key` is no
    /// longer needed if the store caught up with it (returned, for the
    /// caller to drop outside the lock).
    pub(crate) fn settle(&mut self, key: &str, stored: Option<&str>) -> Option<OwnWrite<K>> {
        if self.map.is_empty() {
            return None;
        }
        match self.map.get(key) {
            Some(w) if caught_up(stored, &w.rv) => self.map.remove(key),
            _ => None,
        }
    }

    /// The store holds everything up to `rv`: every own write at or before
    /// it is settled (returned, for the caller to drop outside the lock).
    pub(crate) fn settle_through(&mut self, rv: &ResourceVersion) -> Vec<OwnWrite<K>> {
        if self.map.is_empty() {
            return Vec::new();
        }
        let passed: Vec<Arc<str>> = self
            .map
            .iter()
            .filter(|(_, w)| rv.is_at_least(&w.rv).unwrap_or(true))
            .map(|(k, _)| k.clone())
            .collect();
        passed.iter().filter_map(|k| self.map.remove(k)).collect()
    }
}

impl<K> Indexer<K> {
    /// Shows `obj`, the object a write of this process returned, to the
    /// reads that include own writes ([`Lister`](crate::Lister),
    /// [`get_including_own_writes`](Self::get_including_own_writes)) until
    /// the store holds its resourceVersion or a newer one. The store's own
    /// content, its indexes and everything fed from it are unchanged.
    ///
    /// Returns whether it was recorded: not when the store already holds
    /// that version or a newer one (the watch was first), when a newer own
    /// write is recorded, when `obj` carries no resourceVersion, or when
    /// [`MAX_OWN_WRITES`] are held. An index function failing on `obj` is
    /// an error and nothing is recorded.
    ///
    /// ```
    /// use kcache_core::CachedObject;
    /// use kcache_indexer::{Indexer, Lister};
    /// use std::sync::Arc;
    ///
    /// let cm = |rv: &str, v: &str| CachedObject::<serde_json::Value>::from_bytes(format!(
    ///     r#"{{"metadata":{{"name":"a","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"v":"{v}"}}}}"#)).unwrap();
    /// let idx = Arc::new(Indexer::new());
    /// idx.add(cm("10", "old"))?;
    /// assert!(idx.record_own_write(cm("12", "mine"))?); // what our update returned
    /// let lister = Lister::new(idx.clone());
    /// assert_eq!(lister.get_by_key("ns/a")?.resource_version(), Some("12"));
    /// assert_eq!(idx.get_by_key("ns/a").unwrap().resource_version(), Some("10")); // the store: the watch's
    /// idx.update(cm("12", "mine"))?; // the watch delivers it
    /// assert_eq!(idx.own_writes(), 0);
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_own_write(&self, obj: CachedObject<K>) -> Result<bool, StoreError> {
        let key = self.key_func.key(&obj)?;
        let Some(rv) = obj.resource_version().map(ResourceVersion::new) else {
            return Ok(false);
        };
        let st = self.state.upgradable_read();
        if let Some(e) = st.items.get(key.as_str())
            && caught_up(e.obj.resource_version(), &rv)
        {
            return Ok(false);
        }
        if let Some(w) = st.own.get(&key)
            && w.rv.is_at_least(&rv).unwrap_or(false)
        {
            return Ok(false);
        }
        if st.own.len() >= MAX_OWN_WRITES && !st.own.contains(&key) {
            return Ok(false);
        }
        let values = st.compute(&obj, &key).map_err(store_err)?;
        let mut st = RwLockUpgradableReadGuard::upgrade(st);
        let key: Arc<str> = st
            .items
            .get_key_value(key.as_str())
            .map_or_else(|| Arc::from(key.as_str()), |(k, _)| k.clone());
        st.own.insert(
            key,
            OwnWrite {
                obj: Some(obj),
                rv,
                values,
            },
        );
        Ok(true)
    }

    /// Shows `key` as deleted (by a delete of this process that the
    /// apiserver answered at `rv`) to the reads that include own writes,
    /// until the watch delivers the deletion (or a newer version, a
    /// re-creation). Returns whether it was recorded: not when the store
    /// holds no object under `key` (already gone) or holds one at `rv` or
    /// newer.
    pub fn record_own_delete(&self, key: &str, rv: ResourceVersion) -> bool {
        let mut st = self.state.write();
        let stored = st.items.get_key_value(key).map(|(k, e)| (k.clone(), e));
        let key: Arc<str> = match stored {
            None => return false,
            // stored at the delete's version or newer: re-created since
            Some((_, e))
                if e.obj
                    .resource_version()
                    .is_some_and(|s| ResourceVersion::new(s).is_at_least(&rv).unwrap_or(false)) =>
            {
                return false;
            }
            Some((k, _)) => k,
        };
        if st.own.len() >= MAX_OWN_WRITES && !st.own.contains(&key) {
            return false;
        }
        let replaced = match st.own.map.entry(key) {
            MapEntry::Occupied(mut o) => {
                if o.get().rv.is_at_least(&rv).unwrap_or(false) {
                    return false;
                }
                Some(std::mem::replace(
                    o.get_mut(),
                    OwnWrite {
                        obj: None,
                        rv,
                        values: Box::default(),
                    },
                ))
            }
            MapEntry::Vacant(v) => {
                v.insert(OwnWrite {
                    obj: None,
                    rv,
                    values: Box::default(),
                });
                None
            }
        };
        drop(st);
        drop(replaced);
        true
    }

    /// Forgets every own write at or before `rv`: the store has caught up
    /// to `rv` (the informer's freshness), so it holds that version of the
    /// object, a newer one, or (a write to an object outside the informer's
    /// selectors) will never hold it. Returns how many were forgotten.
    pub fn forget_own_writes_through(&self, rv: &ResourceVersion) -> usize {
        if self.state.read().own.is_empty() {
            return 0;
        }
        let settled = self.state.write().own.settle_through(rv);
        settled.len()
    }

    /// Own writes held (not yet delivered by the watch).
    pub fn own_writes(&self) -> usize {
        self.state.read().own.len()
    }

    /// The object under `key` as this process last saw it: its own write
    /// when the watch has not delivered that yet (`None` for an own delete),
    /// else the stored object.
    pub fn get_including_own_writes(&self, key: &str) -> Option<CachedObject<K>> {
        let st = self.state.read();
        if let Some(w) = st.own.get(key) {
            return w.obj.clone();
        }
        st.items.get(key).map(|e| e.obj.clone())
    }

    /// Every object, own writes included (see
    /// [`get_including_own_writes`](Self::get_including_own_writes)).
    pub fn list_including_own_writes(&self) -> Vec<CachedObject<K>> {
        let st = self.state.read();
        if st.own.is_empty() {
            let mut out = Vec::with_capacity(st.items.len());
            out.extend(st.items.values().map(|e| e.obj.clone()));
            return out;
        }
        let mut out = Vec::with_capacity(st.items.len() + st.own.len());
        out.extend(
            st.items
                .iter()
                .filter(|(k, _)| !st.own.contains(k))
                .map(|(_, e)| e.obj.clone()),
        );
        out.extend(st.own.iter().filter_map(|(_, w)| w.obj.clone()));
        out
    }

    /// Objects whose index `name` contains `value`, own writes included
    /// (an own write is indexed by what it returned).
    pub fn by_index_including_own_writes(
        &self,
        name: &str,
        value: &str,
    ) -> Result<Vec<CachedObject<K>>, IndexError> {
        let st = self.state.read();
        let (i, slot) = st.slot(name)?;
        if st.own.is_empty() {
            return Ok(st.collect_objects(i, value));
        }
        let mut out: Vec<CachedObject<K>> = match slot.map.get(value) {
            Some(set) => set
                .iter()
                .filter(|k| !st.own.contains(k))
                .filter_map(|k| st.items.get(k).map(|e| e.obj.clone()))
                .collect(),
            None => Vec::new(),
        };
        out.extend(st.own.iter().filter_map(|(_, w)| {
            let obj = w.obj.as_ref()?;
            w.values
                .get(i)
                .is_some_and(|vals| vals.iter().any(|v| v == value))
                .then(|| obj.clone())
        }));
        Ok(out)
    }
}
