//! Tombstones: deletions whose final state the watch did not deliver.

use crate::object::CachedObject;

/// Placed in a `Deleted` delta when an object was deleted while the watch
/// was disconnected: a relist (`replace`) no longer contains a key the cache
/// or the queue knows, so the deletion is inferred. `obj` is the last state
/// known to kcache, which may be stale.
///
/// Unlike client-go (where `Obj` may be nil), `obj` is always present: a key
/// whose object cannot be found any more produces no tombstone, as there is
/// nothing left to delete.
pub struct DeletedFinalStateUnknown<K> {
    /// The key of the deleted object.
    pub key: String,
    /// The last known state of the object.
    pub obj: CachedObject<K>,
}

/// What a `Deleted` delta and a delete handler carry: the deleted object as
/// the watch reported it, or a [`DeletedFinalStateUnknown`] tombstone.
pub enum ObjectOrTombstone<K> {
    /// A real object.
    Object(CachedObject<K>),
    /// A tombstone for an inferred deletion.
    Tombstone(DeletedFinalStateUnknown<K>),
}

impl<K> ObjectOrTombstone<K> {
    /// The object, or the tombstone's last known state.
    pub fn object(&self) -> &CachedObject<K> {
        match self {
            ObjectOrTombstone::Object(o) => o,
            ObjectOrTombstone::Tombstone(t) => &t.obj,
        }
    }
    /// Consumes self, giving the object or the tombstone's last known state.
    pub fn into_object(self) -> CachedObject<K> {
        match self {
            ObjectOrTombstone::Object(o) => o,
            ObjectOrTombstone::Tombstone(t) => t.obj,
        }
    }
    /// Whether this is a tombstone.
    pub fn is_tombstone(&self) -> bool {
        matches!(self, ObjectOrTombstone::Tombstone(_))
    }
    /// The tombstone, if this is one.
    pub fn as_tombstone(&self) -> Option<&DeletedFinalStateUnknown<K>> {
        match self {
            ObjectOrTombstone::Tombstone(t) => Some(t),
            ObjectOrTombstone::Object(_) => None,
        }
    }
    /// The default key: a tombstone's recorded key, else the object's key.
    pub fn key(&self) -> &str {
        match self {
            ObjectOrTombstone::Object(o) => o.key(),
            ObjectOrTombstone::Tombstone(t) => &t.key,
        }
    }
}

impl<K> From<CachedObject<K>> for ObjectOrTombstone<K> {
    fn from(o: CachedObject<K>) -> Self {
        ObjectOrTombstone::Object(o)
    }
}

impl<K> From<DeletedFinalStateUnknown<K>> for ObjectOrTombstone<K> {
    fn from(t: DeletedFinalStateUnknown<K>) -> Self {
        ObjectOrTombstone::Tombstone(t)
    }
}

// Manual impls: no bounds on `K` (it is only a marker).
impl<K> Clone for DeletedFinalStateUnknown<K> {
    fn clone(&self) -> Self {
        DeletedFinalStateUnknown {
            key: self.key.clone(),
            obj: self.obj.clone(),
        }
    }
}
impl<K> PartialEq for DeletedFinalStateUnknown<K> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.obj == other.obj
    }
}
impl<K> Eq for DeletedFinalStateUnknown<K> {}
impl<K> std::fmt::Debug for DeletedFinalStateUnknown<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeletedFinalStateUnknown")
            .field("key", &self.key)
            .field("obj", &self.obj)
            .finish()
    }
}
impl<K> Clone for ObjectOrTombstone<K> {
    fn clone(&self) -> Self {
        match self {
            ObjectOrTombstone::Object(o) => ObjectOrTombstone::Object(o.clone()),
            ObjectOrTombstone::Tombstone(t) => ObjectOrTombstone::Tombstone(t.clone()),
        }
    }
}
impl<K> PartialEq for ObjectOrTombstone<K> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ObjectOrTombstone::Object(a), ObjectOrTombstone::Object(b)) => a == b,
            (ObjectOrTombstone::Tombstone(a), ObjectOrTombstone::Tombstone(b)) => a == b,
            _ => false,
        }
    }
}
impl<K> Eq for ObjectOrTombstone<K> {}
impl<K> std::fmt::Debug for ObjectOrTombstone<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectOrTombstone::Object(o) => f.debug_tuple("Object").field(o).finish(),
            ObjectOrTombstone::Tombstone(t) => f.debug_tuple("Tombstone").field(t).finish(),
        }
    }
}
