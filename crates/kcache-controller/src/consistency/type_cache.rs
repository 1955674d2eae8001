//! One cached type of a controller (its primary, an owned or a watched
//! type) as the write ledger sees it: the informer's freshness and
//! own-writes overlay, and the versions of the controller's own writes to
//! it (for skipping their events).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use kcache_core::{IncomparableResourceVersion, Metadata, ResourceVersion, StoreError};
use kcache_deltafifo::StoreFreshness;
use kcache_informer::SharedIndexInformer;
use kube::Resource;
use parking_lot::Mutex;

use super::wanted::Wanted;
use crate::source::owner_key;

/// Most object versions kept for skipping own events, per type.
const MAX_OWN_VERSIONS: usize = 65_536;

type RecordWrite = Box<dyn Fn(Bytes) -> Result<bool, StoreError> + Send + Sync>;
type RecordDelete = Box<dyn Fn(&str, &str) -> bool + Send + Sync>;
type WouldCache = Box<dyn Fn(&Metadata) -> Option<bool> + Send + Sync>;
type Holds = Box<dyn Fn(&str, &str) -> bool + Send + Sync>;
type CachedOwner = Box<dyn Fn(&str, &str, &str, bool) -> Option<String> + Send + Sync>;

/// The last own write to an object, while no other version has been seen.
enum Own {
    /// A write that returned this version.
    Version(ResourceVersion),
    /// A delete of the object with this uid.
    Deleted(Arc<str>),
}

/// One cached type of a controller.
pub(crate) struct TypeCache {
    pub(crate) kind: String,
    /// The resource (plural), as a `Status` answer to a DELETE names it.
    pub(crate) plural: String,
    pub(crate) informer: String,
    pub(crate) freshness: StoreFreshness,
    record_write: RecordWrite,
    record_delete: RecordDelete,
    would_cache: WouldCache,
    /// Whether the cache holds the object with that uid under that key.
    holds: Holds,
    /// The controlling owner's key of the cached object under a key, when
    /// the owner is of that group and kind.
    cached_owner: CachedOwner,
    own_versions: Mutex<HashMap<String, Own>>,
}

impl TypeCache {
    /// The type cache of `informer`, objects of `kind` (resource `plural`).
    pub(crate) fn of<K>(informer: &SharedIndexInformer<K>, kind: &str, plural: &str) -> Arc<Self>
    where
        K: Resource + Send + Sync + 'static,
        K::DynamicType: Clone + Send + Sync + 'static,
    {
        let (w, d, c) = (informer.clone(), informer.clone(), informer.clone());
        let (held, owned) = (informer.indexer().clone(), informer.indexer().clone());
        Arc::new(TypeCache {
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            informer: informer.name().to_owned(),
            freshness: informer.freshness(),
            record_write: Box::new(move |body| w.record_own_write(body)),
            record_delete: Box::new(move |key, uid| d.record_own_delete(key, uid)),
            would_cache: Box::new(move |meta| c.would_cache(meta)),
            holds: Box::new(move |key, uid| {
                held.get_by_key(key).is_some_and(|o| o.uid() == Some(uid))
            }),
            cached_owner: Box::new(move |key, group, kind, namespaced| {
                let obj = owned.get_by_key(key)?;
                owner_key(obj.meta(), group, kind, namespaced)
            }),
            own_versions: Mutex::new(HashMap::new()),
        })
    }

    /// Shows what a write returned to the informer's listers.
    pub(crate) fn record_write(&self, body: Bytes) -> Result<bool, StoreError> {
        (self.record_write)(body)
    }

    /// Shows the object `uid` under `key` as deleted to the listers.
    pub(crate) fn record_delete(&self, key: &str, uid: &str) -> bool {
        (self.record_delete)(key, uid)
    }

    /// Whether the informer caches objects like `meta` (`None`: cannot tell).
    pub(crate) fn would_cache(&self, meta: &Metadata) -> Option<bool> {
        (self.would_cache)(meta)
    }

    /// The controlling owner (of `group`/`kind`) of the object cached
    /// under `key`.
    pub(crate) fn cached_owner(
        &self,
        key: &str,
        group: &str,
        kind: &str,
        namespaced: bool,
    ) -> Option<String> {
        (self.cached_owner)(key, group, kind, namespaced)
    }

    /// Whether the cache has caught up with `wanted`.
    pub(crate) fn has_caught_up(
        &self,
        wanted: &Wanted,
    ) -> Result<bool, IncomparableResourceVersion> {
        match wanted {
            Wanted::Version(rv) => self.freshness.has_reached(rv),
            // the deletion's version is unknown (a DELETE is answered with a
            // Status or the object as it was; only the watch's DELETED event
            // carries it): caught up once the cache no longer holds the object
            Wanted::Deletion { key, uid } => Ok(!(self.holds)(key, uid)),
        }
    }

    /// Whether an add or update event of the object `key` (with `uid`) at
    /// `rv` is the result of this controller's own write: its version is
    /// exactly the one the write returned. A relist that delivers that
    /// version again is still its own; another version (someone else's
    /// change, a re-creation) forgets it.
    pub(crate) fn is_own_event(&self, key: &str, rv: Option<&str>, uid: Option<&str>) -> bool {
        let mut own = self.own_versions.lock();
        if own.is_empty() {
            return false;
        }
        match (own.get(key), rv) {
            (Some(Own::Version(v)), Some(rv)) if *v == ResourceVersion::new(rv) => true,
            // a version of the object deleted, from before the delete
            (Some(Own::Deleted(deleted)), _) if uid == Some(&**deleted) => false,
            (Some(_), _) => {
                own.remove(key);
                false
            }
            (None, _) => false,
        }
    }

    /// The deletion of the object `key` with `uid` (a DELETED event, or a
    /// relist's tombstone: the watch missed it): the controller's own
    /// doing when its last write to the object was that delete. Forgets
    /// the key either way.
    pub(crate) fn is_own_deletion(&self, key: &str, uid: Option<&str>) -> bool {
        let mut own = self.own_versions.lock();
        if own.is_empty() {
            return false;
        }
        match own.remove(key) {
            Some(Own::Deleted(deleted)) => uid.is_none_or(|u| u == &*deleted),
            _ => false,
        }
    }

    /// Notes an own write to `key` that returned `rv`.
    pub(crate) fn note_own_write(&self, key: &str, rv: ResourceVersion) {
        self.note(key, Own::Version(rv));
    }

    /// Notes an own delete of the object `key` with `uid`.
    pub(crate) fn note_own_delete(&self, key: &str, uid: &str) {
        self.note(key, Own::Deleted(Arc::from(uid)));
    }

    fn note(&self, key: &str, v: Own) {
        let mut own = self.own_versions.lock();
        if own.len() >= MAX_OWN_VERSIONS && !own.contains_key(key) {
            return;
        }
        own.insert(key.to_owned(), v);
    }
}
