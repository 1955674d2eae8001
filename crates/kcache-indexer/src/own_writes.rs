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

use kcache_core::{CachedObject, ResourceVersion};

use crate::index::Values;

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
pub(crate) fn caught_up(stored: Option<&str>, own: &ResourceVersion) -> bool {
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

    /// Records `w` under `key`; the write it replaces (for the caller to
    /// drop outside the lock).
    pub(crate) fn insert(&mut self, key: Arc<str>, w: OwnWrite<K>) -> Option<OwnWrite<K>> {
        self.map.insert(key, w)
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
