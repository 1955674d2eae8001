//! The [`Indexer`]'s side of read-your-own-writes: recording what this
//! process's writes returned, forgetting what the store caught up with,
//! and the reads that include them (the overlay itself is
//! [`OwnWrites`](crate::own_writes::OwnWrites)).

use std::sync::Arc;

use kcache_core::{CachedObject, ResourceVersion, StoreError};
use parking_lot::RwLockUpgradableReadGuard;

use crate::indexer::{IndexError, Indexer, State, store_err};
use crate::own_writes::{MAX_OWN_WRITES, OwnWrite, caught_up};

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
        let replaced = st.own.insert(
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
    pub(crate) fn list_including_own_writes(&self) -> Vec<CachedObject<K>> {
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
    pub(crate) fn by_index_including_own_writes(
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
