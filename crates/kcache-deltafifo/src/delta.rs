//! Deltas, the queue trait and the shared option and error types.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use futures::future::BoxFuture;
use kcache_core::{
    BoxError, CachedObject, KeyFunc, KeyListerGetter, ObjectOrTombstone, ReflectorStore,
};

/// The kind of change a [`Delta`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// The watch reported a new object.
    Added,
    /// The watch reported a change.
    Updated,
    /// The object was deleted; the delta may carry a tombstone.
    Deleted,
    /// The object was in a relist (`replace`), with `emit_delta_type_replaced`
    /// on (always, for the [`RealFifo`](crate::RealFifo)).
    Replaced,
    /// The object was in a relist without `emit_delta_type_replaced`, or a
    /// periodic resync re-delivered it.
    Sync,
}

impl fmt::Display for DeltaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeltaType::Added => "Added",
            DeltaType::Updated => "Updated",
            DeltaType::Deleted => "Deleted",
            DeltaType::Replaced => "Replaced",
            DeltaType::Sync => "Sync",
        })
    }
}

/// One change to one object.
pub struct Delta<K> {
    /// What happened.
    pub kind: DeltaType,
    /// The object after the change; for `Deleted`, the object or a tombstone.
    pub object: ObjectOrTombstone<K>,
}

impl<K> Delta<K> {
    /// A delta carrying a real object.
    pub fn new(kind: DeltaType, object: impl Into<ObjectOrTombstone<K>>) -> Self {
        Delta {
            kind,
            object: object.into(),
        }
    }
}

/// The deltas of one key, oldest first, as handed to a pop's `process`.
pub struct Deltas<K>(Vec<Delta<K>>);

// Manual impls: no bounds on `K` (it is only a marker).
impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        Delta {
            kind: self.kind,
            object: self.object.clone(),
        }
    }
}
impl<K> PartialEq for Delta<K> {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.object == other.object
    }
}
impl<K> Eq for Delta<K> {}
impl<K> fmt::Debug for Delta<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delta")
            .field("kind", &self.kind)
            .field("object", &self.object)
            .finish()
    }
}
impl<K> Clone for Deltas<K> {
    fn clone(&self) -> Self {
        Deltas(self.0.clone())
    }
}
impl<K> PartialEq for Deltas<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl<K> Eq for Deltas<K> {}
impl<K> fmt::Debug for Deltas<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

impl<K> Deltas<K> {
    /// The oldest delta.
    pub fn oldest(&self) -> Option<&Delta<K>> {
        self.0.first()
    }
    /// The newest delta.
    pub fn newest(&self) -> Option<&Delta<K>> {
        self.0.last()
    }
    /// The deltas as a vector.
    pub fn into_vec(self) -> Vec<Delta<K>> {
        self.0
    }
}

impl<K> Deref for Deltas<K> {
    type Target = [Delta<K>];
    fn deref(&self) -> &[Delta<K>] {
        &self.0
    }
}

impl<K> From<Vec<Delta<K>>> for Deltas<K> {
    fn from(v: Vec<Delta<K>>) -> Self {
        Deltas(v)
    }
}

impl<K> IntoIterator for Deltas<K> {
    type Item = Delta<K>;
    type IntoIter = std::vec::IntoIter<Delta<K>>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a, K> IntoIterator for &'a Deltas<K> {
    type Item = &'a Delta<K>;
    type IntoIter = std::slice::Iter<'a, Delta<K>>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Error from a pop.
#[derive(Debug, thiserror::Error)]
pub enum PopError<E> {
    /// The queue is closed and empty (client-go's `ErrFIFOClosed`).
    #[error("DeltaFIFO: manipulating with closed queue")]
    Closed,
    /// The `process` function failed; the item was still removed.
    #[error("processing popped item failed: {0}")]
    Process(E),
}

/// A transform applied to each object once, before it is queued (e.g. to
/// strip managedFields). Never applied to tombstones or to `Sync` deltas of
/// objects already in the cache.
pub type TransformFunc<K> =
    Arc<dyn Fn(CachedObject<K>) -> Result<CachedObject<K>, BoxError> + Send + Sync>;

/// The boxed `process` function taken by [`Queue::pop`].
pub type ProcessFn<'a, K> = Box<dyn FnOnce(Deltas<K>, bool) -> Result<(), BoxError> + Send + 'a>;

/// Options shared by [`DeltaFifo`](crate::DeltaFifo) and
/// [`RealFifo`](crate::RealFifo).
pub struct FifoOptions<K> {
    /// Key function; default `meta_namespace_key`.
    pub key_function: Option<Arc<dyn KeyFunc<K>>>,
    /// The downstream cache (normally the indexer): used by `delete`,
    /// `replace` (tombstones for vanished objects) and `resync`.
    pub known_objects: Option<Arc<dyn KeyListerGetter<K>>>,
    /// Emit `Replaced` instead of `Sync` for relisted objects (DeltaFifo
    /// only; informers set it).
    pub emit_delta_type_replaced: bool,
    /// Transform applied once per object before it is queued.
    pub transformer: Option<TransformFunc<K>>,
    /// Where the queue publishes what the store behind it has caught up to
    /// (default: a handle of its own, see [`Queue::freshness`]).
    pub freshness: Option<crate::StoreFreshness>,
}

impl<K> Default for FifoOptions<K> {
    fn default() -> Self {
        FifoOptions {
            key_function: None,
            known_objects: None,
            emit_delta_type_replaced: false,
            transformer: None,
            freshness: None,
        }
    }
}

impl<K> Clone for FifoOptions<K> {
    fn clone(&self) -> Self {
        FifoOptions {
            key_function: self.key_function.clone(),
            known_objects: self.known_objects.clone(),
            emit_delta_type_replaced: self.emit_delta_type_replaced,
            transformer: self.transformer.clone(),
            freshness: self.freshness.clone(),
        }
    }
}

impl<K> FifoOptions<K> {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the key function.
    pub fn key_function(mut self, f: Arc<dyn KeyFunc<K>>) -> Self {
        self.key_function = Some(f);
        self
    }
    /// Sets the known objects (normally the informer's indexer).
    pub fn known_objects(mut self, known: Arc<dyn KeyListerGetter<K>>) -> Self {
        self.known_objects = Some(known);
        self
    }
    /// Emit `Replaced` instead of `Sync` on relist.
    pub fn emit_delta_type_replaced(mut self, emit: bool) -> Self {
        self.emit_delta_type_replaced = emit;
        self
    }
    /// Sets the transform.
    pub fn transformer(mut self, t: TransformFunc<K>) -> Self {
        self.transformer = Some(t);
        self
    }
    /// Publishes the store's freshness on `freshness` (an informer hands
    /// out one handle for all the queues of its runs).
    pub fn freshness(mut self, freshness: crate::StoreFreshness) -> Self {
        self.freshness = Some(freshness);
        self
    }
}

/// What an informer needs from its queue: a [`ReflectorStore`] sink for the
/// reflector, plus an async `pop`. Implemented by
/// [`DeltaFifo`](crate::DeltaFifo) and [`RealFifo`](crate::RealFifo);
/// object-safe (`Arc<dyn Queue<K>>`).
///
/// `pop` waits (without blocking a thread) until an item is queued, then
/// calls `process` with the item's deltas and whether the item belongs to
/// the initial list (the queue had not synced yet), holding the queue's
/// lock so the next item cannot be popped before this one is processed.
/// `process` must therefore be quick and must not call back into the queue.
pub trait Queue<K>: ReflectorStore<K> {
    /// Pops the next item and processes it; [`PopError::Closed`] once the
    /// queue is closed and empty.
    fn pop<'a>(
        &'a self,
        process: ProcessFn<'a, K>,
    ) -> BoxFuture<'a, Result<(), PopError<BoxError>>>;
    /// Whether the first `replace`'s items have all been popped (or a
    /// write came before any `replace`).
    fn has_synced(&self) -> bool;
    /// What the store fed by this queue's pops has caught up to: the
    /// resourceVersion of the newest event, bookmark or relist whose items
    /// (and everything queued before them) have been popped and processed.
    fn freshness(&self) -> crate::StoreFreshness;
    /// Closes the queue: every waiting `pop` wakes; pops drain what is
    /// left and then return [`PopError::Closed`].
    fn close(&self);
    /// Whether `close` was called.
    fn is_closed(&self) -> bool;
    /// Number of queued items (keys for the DeltaFifo, events for the RealFifo).
    fn len(&self) -> usize;
    /// Whether nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
