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
//!
//! A delete is recorded by the deleted object's uid: a DELETE is answered
//! with a `Status` or with the object as it was (its last version, not the
//! deletion's, which only the watch's DELETED event carries). It reads as
//! gone while the store still holds that uid under the key: until the
//! deletion arrives, or the key holds another object (a re-creation).

use std::collections::HashMap;
use std::sync::Arc;

use kcache_core::{CachedObject, ResourceVersion, StoreError};
use parking_lot::RwLockUpgradableReadGuard;

use crate::indexer::{IndexError, Indexer, State, Values, store_err};

/// Most own writes an indexer holds; past it a new one is not recorded
/// (reads then show the store as the watch left it: never wrong, possibly
/// stale, which the controller's stale-cache gate covers).
pub const MAX_OWN_WRITES: usize = 65_536;

/// One own write.
pub(crate) enum OwnWrite<K> {
    /// What a create, update or patch returned, at `rv`.
    Written {
        obj: CachedObject<K>,
        rv: ResourceVersion,
        /// `obj`'s index values, in index order.
        values: Values,
    },
    /// A delete of the object with this uid.
    Deleted { uid: Arc<str> },
}

impl<K> OwnWrite<K> {
    /// What reads show: the object written, or nothing.
    pub(crate) fn object(&self) -> Option<&CachedObject<K>> {
        match self {
            OwnWrite::Written { obj, .. } => Some(obj),
            OwnWrite::Deleted { .. } => None,
        }
    }

    /// The written object's values of index `i`.
    pub(crate) fn index_values(&self, i: usize) -> Option<&[String]> {
        match self {
            OwnWrite::Written { values, .. } => values.get(i).map(|v| &v[..]),
            OwnWrite::Deleted { .. } => None,
        }
    }

    /// Whether a store now holding the key as `stored` has caught up with
    /// this own write: the same version or a newer one; for a delete, an
    /// object with another uid (a re-creation).
    fn settled_by_write(&self, stored: &CachedObject<K>) -> bool {
        match self {
            OwnWrite::Written { rv, .. } => caught_up(stored.resource_version(), rv),
            OwnWrite::Deleted { uid } => stored.uid() != Some(uid),
        }
    }

    /// Whether the deletion of the object with `uid` (`None`: a relist's
    /// tombstone) settles this own write: a newer deletion than a write,
    /// the deletion of the very object deleted, or any tombstone.
    fn settled_by_delete(&self, rv: Option<&str>, uid: Option<&str>, tombstone: bool) -> bool {
        if tombstone {
            return true;
        }
        match self {
            OwnWrite::Written { rv: own, .. } => caught_up(rv, own),
            OwnWrite::Deleted { uid: own } => uid.is_none_or(|u| u == &**own),
        }
    }
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

    /// The store now holds `stored` under `key`: the own write of `key` is
    /// no longer needed if the store caught up with it (returned, for the
    /// caller to drop outside the lock).
    pub(crate) fn settle_write(
        &mut self,
        key: &str,
        stored: &CachedObject<K>,
    ) -> Option<OwnWrite<K>> {
        if self.map.is_empty() {
            return None;
        }
        match self.map.get(key) {
            Some(w) if w.settled_by_write(stored) => self.map.remove(key),
            _ => None,
        }
    }

    /// The store no longer holds `key`: deleted at `rv`, the object with
    /// `uid` (or, `tombstone`, a relist no longer lists it).
    pub(crate) fn settle_delete(
        &mut self,
        key: &str,
        rv: Option<&str>,
        uid: Option<&str>,
        tombstone: bool,
    ) -> Option<OwnWrite<K>> {
        if self.map.is_empty() {
            return None;
        }
        match self.map.get(key) {
            Some(w) if w.settled_by_delete(rv, uid, tombstone) => self.map.remove(key),
            _ => None,
        }
    }

    /// The store holds everything up to `rv` (a relist's, or its
    /// freshness), `held` giving what it holds under a key: a write at or
    /// before `rv` is settled, and a delete once the store no longer holds
    /// its object. Returned, for the caller to drop outside the lock.
    pub(crate) fn settle_through<'a>(
        &mut self,
        rv: &ResourceVersion,
        held: impl Fn(&str) -> Option<&'a CachedObject<K>>,
    ) -> Vec<OwnWrite<K>>
    where
        K: 'a,
    {
        if self.map.is_empty() {
            return Vec::new();
        }
        let passed: Vec<Arc<str>> = self
            .map
            .iter()
            .filter(|(k, w)| match w {
                OwnWrite::Written { rv: own, .. } => rv.is_at_least(own).unwrap_or(true),
                OwnWrite::Deleted { .. } => held(k).is_none_or(|o| w.settled_by_write(o)),
            })
            .map(|(k, _)| k.clone())
            .collect();
        passed.iter().filter_map(|k| self.map.remove(k)).collect()
    }
}

impl<K> State<K> {
    /// Settles the own writes a relist (the store rebuilt as `self`, at
    /// list version `rv`) has caught up with.
    pub(crate) fn settle_own_through(&mut self, rv: &ResourceVersion) -> Vec<OwnWrite<K>> {
        let State { own, items, .. } = self;
        own.settle_through(rv, |k| items.get(k).map(|e| &e.obj))
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
        if let Some(OwnWrite::Written { rv: own, .. }) = st.own.get(&key)
            && own.is_at_least(&rv).unwrap_or(false)
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
        st.own.insert(key, OwnWrite::Written { obj, rv, values });
        Ok(true)
    }

    /// Shows `key` as deleted (a delete of this process removed the object
    /// with `uid`) to the reads that include own writes, until the watch
    /// delivers the deletion (or another object under `key`: a
    /// re-creation). Returns whether it was recorded: not when the store
    /// does not hold that object under `key` (already gone, or re-created).
    pub fn record_own_delete(&self, key: &str, uid: &str) -> bool {
        let mut st = self.state.write();
        let key: Arc<str> = match st.items.get_key_value(key) {
            Some((k, e)) if e.obj.uid() == Some(uid) => k.clone(),
            _ => return false,
        };
        if st.own.len() >= MAX_OWN_WRITES && !st.own.contains(&key) {
            return false;
        }
        let replaced = st.own.map.insert(
            key,
            OwnWrite::Deleted {
                uid: Arc::from(uid),
            },
        );
        drop(st);
        drop(replaced);
        true
    }

    /// Forgets every own write the store has caught up with at its
    /// freshness `rv`: writes at or before `rv` (the store holds that
    /// version of the object, a newer one, or, for an object outside the
    /// informer's selectors, never will), and deletes whose object the
    /// store no longer holds. Returns how many were forgotten.
    pub fn forget_own_writes_through(&self, rv: &ResourceVersion) -> usize {
        if self.state.read().own.is_empty() {
            return 0;
        }
        let settled = self.state.write().settle_own_through(rv);
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
            return w.object().cloned();
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
        out.extend(st.own.iter().filter_map(|(_, w)| w.object().cloned()));
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
            let obj = w.object()?;
            w.index_values(i)
                .is_some_and(|vals| vals.iter().any(|v| v == value))
                .then(|| obj.clone())
        }));
        Ok(out)
    }
}
