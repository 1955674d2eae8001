//! client-go's DeltaFIFO: per-key ordered deltas.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use kcache_core::{
    CachedObject, DeletedFinalStateUnknown, ObjectOrTombstone, ResourceVersion, StoreError,
};
use parking_lot::Mutex;

use crate::delta::{Delta, DeltaType, Deltas, FifoOptions, PopError};
use crate::freshness::{Watermark, object_rv};
use crate::shared::{Bookkeeping, Core, impl_common, log_if_slow};

struct State<K> {
    items: HashMap<String, Vec<Delta<K>>>,
    /// Queued keys in pop order, each with the sequence number of its
    /// oldest delta (a key is queued at its first delta, so the numbers
    /// grow along the queue).
    queue: VecDeque<(String, u64)>,
    book: Bookkeeping,
    watermark: Watermark,
}

/// A drained queue keeps at most this much capacity: a burst (the initial
/// list of 100k objects) otherwise leaves its tables allocated for the
/// life of the informer.
const DRAINED_CAPACITY: usize = 1024;

impl<K> State<K> {
    /// The smallest sequence number of a delta not processed yet: the
    /// oldest delta of the first queued key.
    fn done_through(&self) -> u64 {
        self.queue
            .front()
            .map_or(self.watermark.pushed(), |(_, seq)| *seq)
    }

    fn shrink_if_drained(&mut self) {
        if self.queue.is_empty() && self.queue.capacity() > 4 * DRAINED_CAPACITY {
            self.queue.shrink_to(DRAINED_CAPACITY);
            self.items.shrink_to(DRAINED_CAPACITY);
        }
    }
}

/// A queue of per-key delta lists (client-go's `DeltaFIFO`).
///
/// * A key is queued once, at its first delta; later deltas join its list in
///   place, so keys leave in first-enqueue order.
/// * `delete` of a key that is neither queued nor known is dropped.
/// * Two trailing `Deleted` deltas collapse into one (the older, unless the
///   older is a tombstone).
/// * `replace` appends `Replaced` (or `Sync`) for each listed object, then a
///   `Deleted` tombstone for each queued key not listed (carrying the newest
///   queued object) and for each known key not listed with nothing pending.
/// * `resync` appends `Sync` for known keys with nothing pending.
/// * `has_synced` turns true once the first `replace`'s items (tombstones
///   included) have all been popped, or at once after an
///   `add`/`update`/`delete` that came before any `replace`.
///
/// ```
/// use kcache_core::{CachedObject, ReflectorStore};
/// use kcache_deltafifo::{DeltaFifo, DeltaType, FifoOptions, Queue};
///
/// # futures::executor::block_on(async {
/// let fifo = DeltaFifo::<serde_json::Value>::new(FifoOptions::new());
/// let obj = |v: u32| CachedObject::from_bytes(format!(
///     r#"{{"metadata":{{"name":"a","namespace":"ns","resourceVersion":"{v}"}}}}"#)).unwrap();
/// fifo.add(obj(1))?;
/// fifo.update(obj(2))?;
/// let kinds = fifo.pop(|deltas, _initial| {
///     Ok::<_, std::convert::Infallible>(deltas.iter().map(|d| d.kind).collect::<Vec<_>>())
/// }).await?;
/// assert_eq!(kinds, [DeltaType::Added, DeltaType::Updated]);
/// assert!(fifo.has_synced());
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct DeltaFifo<K> {
    state: Mutex<State<K>>,
    core: Core<K>,
    emit_replaced: bool,
}

/// Collapses two trailing `Deleted` deltas: keep the older unless it is a tombstone.
fn dedup_deltas<K>(deltas: &mut Vec<Delta<K>>) {
    let n = deltas.len();
    if n < 2 {
        return;
    }
    if deltas[n - 1].kind == DeltaType::Deleted && deltas[n - 2].kind == DeltaType::Deleted {
        let newer = deltas.pop();
        if deltas[n - 2].object.is_tombstone()
            && let Some(newer) = newer
        {
            deltas[n - 2] = newer;
        }
    }
}

impl<K: 'static> DeltaFifo<K> {
    /// A DeltaFIFO with the given options.
    pub fn new(options: FifoOptions<K>) -> Self {
        DeltaFifo {
            state: Mutex::new(State {
                items: HashMap::new(),
                queue: VecDeque::new(),
                book: Bookkeeping::default(),
                watermark: Watermark::default(),
            }),
            emit_replaced: options.emit_delta_type_replaced,
            core: Core::new(options),
        }
    }
}

impl<K> DeltaFifo<K> {
    /// The key of an object, or a tombstone's recorded key.
    pub fn key_of(&self, obj: &ObjectOrTombstone<K>) -> Result<String, kcache_core::KeyError> {
        self.core.key_of(obj)
    }

    /// Appends a `kind` delta for `obj` to the list of its key `id`
    /// (queuing the key if it has none), transformed unless `internal` is
    /// `Sync` (a resync, or a relisted object this queue already holds).
    fn queue(
        &self,
        st: &mut State<K>,
        id: String,
        kind: DeltaType,
        internal: DeltaType,
        obj: ObjectOrTombstone<K>,
    ) -> Result<(), StoreError> {
        let obj = self.core.transform(&id, obj, internal == DeltaType::Sync)?;
        let delta = Delta { kind, object: obj };
        let seq = st.watermark.next_seq();
        match st.items.get_mut(&id) {
            Some(deltas) => {
                deltas.push(delta);
                dedup_deltas(deltas);
            }
            None => {
                st.items.insert(id.clone(), vec![delta]);
                st.queue.push_back((id, seq));
            }
        }
        self.core.wake_pops();
        Ok(())
    }

    /// Marks `rv` after everything queued now (see [`StoreFreshness`](crate::StoreFreshness)).
    fn mark(&self, st: &mut State<K>, rv: ResourceVersion) {
        let done = st.done_through();
        st.watermark.mark(rv, done, &self.core.freshness);
    }

    /// A watch bookmark: once everything queued before it is processed, the
    /// store is at `resource_version`.
    pub(crate) fn bookmark(&self, resource_version: &str) {
        let mut st = self.state.lock();
        self.mark(&mut st, ResourceVersion::new(resource_version));
    }

    /// Queues a `Deleted` delta carrying a tombstone of `obj` under `key`.
    fn queue_tombstone(
        &self,
        st: &mut State<K>,
        key: String,
        obj: CachedObject<K>,
    ) -> Result<(), StoreError> {
        let tomb = DeletedFinalStateUnknown {
            key: key.clone(),
            obj,
        };
        let kind = DeltaType::Deleted;
        self.queue(st, key, kind, kind, tomb.into())
    }

    /// Queues an `Added` delta.
    pub(crate) fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.write(DeltaType::Added, obj)
    }

    /// Queues an `Updated` delta.
    pub(crate) fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.write(DeltaType::Updated, obj)
    }

    fn write(&self, kind: DeltaType, obj: CachedObject<K>) -> Result<(), StoreError> {
        let mut st = self.state.lock();
        self.core.note_write(&mut st.book);
        let obj = ObjectOrTombstone::Object(obj);
        let id = self.key_of(&obj)?;
        let rv = object_rv(&obj);
        self.queue(&mut st, id, kind, kind, obj)?;
        if let Some(rv) = rv {
            self.mark(&mut st, rv);
        }
        Ok(())
    }

    /// Queues a `Deleted` delta, unless the key is neither queued nor
    /// known (without known objects: unless it is not queued).
    pub(crate) fn delete(&self, obj: impl Into<ObjectOrTombstone<K>>) -> Result<(), StoreError> {
        let obj = obj.into();
        let id = self.key_of(&obj)?;
        let mut st = self.state.lock();
        self.core.note_write(&mut st.book);
        let queued = st.items.contains_key(&id);
        let known = match &self.core.known {
            Some(k) => k.get_by_key(&id).is_some(),
            None => false,
        };
        let rv = object_rv(&obj);
        if queued || known {
            self.queue(&mut st, id, DeltaType::Deleted, DeltaType::Deleted, obj)?;
        }
        // dropped or queued, the store is at the deletion's version once
        // what came before it is processed
        if let Some(rv) = rv {
            self.mark(&mut st, rv);
        }
        Ok(())
    }

    /// Replaces the whole content after a relist. See the type docs for the
    /// deltas it queues. `resource_version` is not used by the DeltaFifo.
    pub(crate) fn replace(
        &self,
        list: Vec<CachedObject<K>>,
        resource_version: impl Into<String>,
    ) -> Result<(), StoreError> {
        let list_rv = ResourceVersion::new(&resource_version.into());
        let mut st = self.state.lock();
        let action = if self.emit_replaced {
            DeltaType::Replaced
        } else {
            DeltaType::Sync
        };
        let mut keys: HashSet<String> = HashSet::with_capacity(list.len());
        for item in list {
            // An item the reflector reused from this queue or the known
            // objects went through the transform already: do not transform
            // it again (a transform need not be idempotent).
            let internal = match &self.core.transformer {
                Some(_) if self.holds(&st, &item) => DeltaType::Sync,
                _ => DeltaType::Replaced,
            };
            let item = ObjectOrTombstone::Object(item);
            let id = self.key_of(&item)?;
            keys.insert(id.clone());
            self.queue(&mut st, id, action, internal, item)?;
        }

        // Queued keys not in the list: tombstone with the newest queued object.
        let mut queued_deletions = 0usize;
        let queued: Vec<String> = st
            .queue
            .iter()
            .filter(|(k, _)| !keys.contains(k))
            .map(|(k, _)| k.clone())
            .collect();
        for k in queued {
            let newest = st
                .items
                .get(&k)
                .and_then(|d| d.last())
                .map(|d| d.object.object().clone());
            let Some(obj) = newest else { continue };
            queued_deletions += 1;
            self.queue_tombstone(&mut st, k, obj)?;
        }

        // Known keys not in the list with nothing pending: tombstone with the known object.
        self.core.for_each_known(
            "replace (no tombstone needed)",
            |k| keys.contains(k),
            |key, obj| {
                if st.items.get(&key).is_some_and(|d| !d.is_empty()) {
                    return Ok(());
                }
                queued_deletions += 1;
                self.queue_tombstone(&mut st, key, obj)
            },
        )?;

        let count = keys.len() + queued_deletions;
        self.core.note_replace(&mut st.book, || count);
        self.mark(&mut st, list_rv);
        Ok(())
    }

    /// The object held under `key`: the newest queued object unless the
    /// newest delta is a deletion, else the known object (client-go's
    /// "known objects", usually the informer's indexer).
    fn held(&self, st: &State<K>, key: &str) -> Option<CachedObject<K>> {
        if let Some(newest) = st.items.get(key).and_then(|d| d.last()) {
            return match (&newest.kind, &newest.object) {
                (DeltaType::Deleted, _) | (_, ObjectOrTombstone::Tombstone(_)) => None,
                (_, ObjectOrTombstone::Object(o)) => Some(o.clone()),
            };
        }
        self.core.known.as_ref().and_then(|k| k.get_by_key(key))
    }

    /// Whether `obj` is the very object (same allocation) held under its key.
    fn holds(&self, st: &State<K>, obj: &CachedObject<K>) -> bool {
        self.held(st, obj.key()).is_some_and(|h| h.ptr_eq(obj))
    }

    /// An object this queue already holds under `key`, for a relist to
    /// reuse (see [`ReflectorStore::cached`](kcache_core::ReflectorStore::cached)): the newest queued object for the key
    /// (none if that is a deletion), else the known object under the key.
    /// `key` is an object's [`CachedObject::key`]; with a custom key
    /// function whose keys differ, nothing is found.
    ///
    /// Such an object handed back to [`replace`](Self::replace) is not
    /// transformed again.
    pub(crate) fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        let st = self.state.lock();
        self.held(&st, key)
    }

    /// Queues `Sync` for every known object whose key has nothing pending
    /// (no-op without known objects). The transform is not applied.
    pub(crate) fn resync(&self) -> Result<(), StoreError> {
        if self.core.known.is_none() {
            return Ok(());
        }
        let mut st = self.state.lock();
        self.core.for_each_known(
            "resync",
            |_| false,
            |_, obj| {
                let obj = ObjectOrTombstone::Object(obj);
                let id = self.key_of(&obj)?;
                if st.items.get(&id).is_some_and(|d| !d.is_empty()) {
                    return Ok(());
                }
                self.queue(&mut st, id, DeltaType::Sync, DeltaType::Sync, obj)
            },
        )
    }

    /// Pops the next key's deltas and hands them to `process` with whether
    /// they belong to the initial list. Waits (asynchronously) while the
    /// queue is empty; returns [`PopError::Closed`] once closed and empty.
    ///
    /// `process` runs under the queue's lock (as in client-go), so the next
    /// item cannot be popped before it returns; keep it quick and do not
    /// call back into this queue from it. A `process` error is returned as
    /// [`PopError::Process`]; the item is not requeued.
    pub async fn pop<F, T, E>(&self, process: F) -> Result<T, PopError<E>>
    where
        F: FnOnce(Deltas<K>, bool) -> Result<T, E>,
    {
        let mut process = Some(process);
        self.core
            .pop_loop(|| {
                let mut st = self.state.lock();
                while let Some((id, _)) = st.queue.pop_front() {
                    let is_in_initial_list = !st.book.synced;
                    self.core.note_popped(&mut st.book);
                    let Some(deltas) = st.items.remove(&id) else {
                        tracing::error!(key = %id, "item was queued but has no deltas; ignoring");
                        continue;
                    };
                    st.shrink_if_drained();
                    let Some(process) = process.take() else {
                        return Some(Err(PopError::Closed));
                    };
                    let depth = st.queue.len();
                    let started = Instant::now();
                    let result = process(Deltas::from(deltas), is_in_initial_list);
                    log_if_slow("DeltaFIFO", &id, depth, started);
                    let done = st.done_through();
                    let State { watermark, .. } = &mut *st;
                    watermark.advance(done, &self.core.freshness);
                    return Some(result.map_err(PopError::Process));
                }
                st.book.closed.then_some(Err(PopError::Closed))
            })
            .await
    }

    /// Queued keys, in pop order.
    pub fn list_keys(&self) -> Vec<String> {
        self.state
            .lock()
            .queue
            .iter()
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The deltas queued for `key`.
    pub fn get_by_key(&self, key: &str) -> Option<Deltas<K>> {
        self.state
            .lock()
            .items
            .get(key)
            .map(|d| Deltas::from(d.clone()))
    }

    /// Number of queued keys.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().queue.len()
    }
}

impl_common!(DeltaFifo, has_synced: "Whether the initial list has been fully popped (see the type docs).");

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drained_queue_gives_back_the_room_of_a_burst() {
        let fifo: DeltaFifo<serde_json::Value> = DeltaFifo::new(FifoOptions::default());
        let items: Vec<CachedObject<serde_json::Value>> = (0..20_000)
            .map(|i| {
                CachedObject::from_bytes(
                    format!(r#"{{"metadata":{{"name":"o{i}"}}}}"#).into_bytes(),
                )
                .unwrap()
            })
            .collect();
        fifo.replace(items, "1").unwrap();
        assert!(fifo.state.lock().queue.capacity() >= 20_000);
        for _ in 0..20_000 {
            fifo.pop(|_, _| Ok::<_, ()>(())).await.unwrap();
        }
        let st = fifo.state.lock();
        assert!(
            st.queue.capacity() <= 4 * DRAINED_CAPACITY,
            "{}",
            st.queue.capacity()
        );
        assert!(
            st.items.capacity() <= 4 * DRAINED_CAPACITY,
            "{}",
            st.items.capacity()
        );
    }
}
