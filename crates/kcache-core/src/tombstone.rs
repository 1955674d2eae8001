//! Tombstones: deletions whose final state the watch did not deliver.

use educe::Educe;

use crate::object::CachedObject;

/// Placed in a `Deleted` delta when an object was deleted while the watch
/// was disconnected: a relist (`replace`) no longer contains a key the cache
/// or the queue knows, so the deletion is inferred. `obj` is the last state
/// known to kcache, which may be stale.
///
/// Unlike client-go (where `Obj` may be nil), `obj` is always present: a key
/// whose object cannot be found any more produces no tombstone, as there is
/// nothing left to delete.
// No bounds on `K` (it is only a marker).
#[derive(Educe)]
#[educe(Clone, PartialEq, Eq, Debug)]
pub struct DeletedFinalStateUnknown<K> {
    /// The key of the deleted object.
    pub key: String,
    /// The last known state of the object.
    pub obj: CachedObject<K>,
}

/// What a `Deleted` delta and a delete handler carry: the deleted object as
/// the watch reported it, or a [`DeletedFinalStateUnknown`] tombstone.
#[derive(Educe)]
#[educe(Clone, PartialEq, Eq, Debug)]
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
