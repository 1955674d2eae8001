//! client-go's DeltaFIFO: per-key ordered deltas.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use kcache_core::{
    BoxError, CachedObject, DeletedFinalStateUnknown, KeyFunc, KeyListerGetter, ObjectOrTombstone,
    ReflectorStore, StoreError, deletion_handling_key, meta_namespace_key,
};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::delta::{
    Delta, DeltaType, Deltas, FifoOptions, PopError, ProcessFn, Queue, TransformFunc,
};

struct State<K> {
    items: HashMap<String, Vec<Delta<K>>>,
    queue: VecDeque<String>,
    populated: bool,
    initial_population_count: usize,
    synced: bool,
    closed: bool,
}

/// A drained queue keeps at most this much capacity: a burst (the initial
/// list of 100k objects) otherwise leaves its tables allocated for the
/// life of the informer.
const DRAINED_CAPACITY: usize = 1024;

impl<K> State<K> {
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
/// use kcache_core::CachedObject;
/// use kcache_deltafifo::{DeltaFifo, DeltaType, FifoOptions};
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
    notify: Notify,
    synced_notify: Notify,
    key_func: Arc<dyn KeyFunc<K>>,
    known: Option<Arc<dyn KeyListerGetter<K>>>,
    emit_replaced: bool,
    transformer: Option<TransformFunc<K>>,
}

/// Like client-go's pop trace: warn when an item took long to process
/// while others were waiting (slow event handlers block the queue).
pub(crate) fn log_if_slow(queue: &str, key: &str, depth: usize, started: Instant) {
    let took = started.elapsed();
    if depth > 10 && took > std::time::Duration::from_millis(100) {
        tracing::warn!(
            queue,
            key,
            depth,
            ?took,
            "slow processing of a popped item is blocking the queue"
        );
    }
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
                populated: false,
                initial_population_count: 0,
                synced: false,
                closed: false,
            }),
            notify: Notify::new(),
            synced_notify: Notify::new(),
            key_func: options
                .key_function
                .unwrap_or_else(|| Arc::new(meta_namespace_key::<K>)),
            known: options.known_objects,
            emit_replaced: options.emit_delta_type_replaced,
            transformer: options.transformer,
        }
    }
}

impl<K> DeltaFifo<K> {
    /// The key of an object, or a tombstone's recorded key.
    pub fn key_of(&self, obj: &ObjectOrTombstone<K>) -> Result<String, kcache_core::KeyError> {
        deletion_handling_key(&*self.key_func, obj)
    }

    fn check_synced(&self, st: &mut State<K>) {
        if !st.synced && st.populated && st.initial_population_count == 0 {
            st.synced = true;
            self.synced_notify.notify_waiters();
        }
    }

    fn queue_action(
        &self,
        st: &mut State<K>,
        kind: DeltaType,
        internal: DeltaType,
        obj: ObjectOrTombstone<K>,
    ) -> Result<(), StoreError> {
        let id = self.key_of(&obj)?;
        self.queue_keyed(st, id, kind, internal, obj)
    }

    /// [`queue_action`](Self::queue_action) with the key already known.
    fn queue_keyed(
        &self,
        st: &mut State<K>,
        id: String,
        kind: DeltaType,
        internal: DeltaType,
        obj: ObjectOrTombstone<K>,
    ) -> Result<(), StoreError> {
        let obj = match (obj, &self.transformer) {
            (ObjectOrTombstone::Object(o), Some(t)) if internal != DeltaType::Sync => {
                ObjectOrTombstone::Object(t(o).map_err(|source| StoreError::Transform {
                    key: id.clone(),
                    source,
                })?)
            }
            (obj, _) => obj,
        };
        let delta = Delta { kind, object: obj };
        match st.items.get_mut(&id) {
            Some(deltas) => {
                deltas.push(delta);
                dedup_deltas(deltas);
            }
            None => {
                st.items.insert(id.clone(), vec![delta]);
                st.queue.push_back(id);
            }
        }
        self.notify.notify_waiters();
        Ok(())
    }

    /// Queues an `Added` delta.
    pub fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        let mut st = self.state.lock();
        st.populated = true;
        self.check_synced(&mut st);
        self.queue_action(&mut st, DeltaType::Added, DeltaType::Added, obj.into())
    }

    /// Queues an `Updated` delta.
    pub fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        let mut st = self.state.lock();
        st.populated = true;
        self.check_synced(&mut st);
        self.queue_action(&mut st, DeltaType::Updated, DeltaType::Updated, obj.into())
    }

    /// Queues a `Deleted` delta, unless the key is neither queued nor
    /// known (without known objects: unless it is not queued).
    pub fn delete(&self, obj: impl Into<ObjectOrTombstone<K>>) -> Result<(), StoreError> {
        let obj = obj.into();
        let id = self.key_of(&obj)?;
        let mut st = self.state.lock();
        st.populated = true;
        self.check_synced(&mut st);
        let queued = st.items.contains_key(&id);
        let known = match &self.known {
            Some(k) => k.get_by_key(&id).is_some(),
            None => false,
        };
        if !queued && !known {
            return Ok(());
        }
        self.queue_action(&mut st, DeltaType::Deleted, DeltaType::Deleted, obj)
    }

    /// Replaces the whole content after a relist. See the type docs for the
    /// deltas it queues. `resource_version` is not used by the DeltaFifo.
    pub fn replace(
        &self,
        list: Vec<CachedObject<K>>,
        resource_version: impl Into<String>,
    ) -> Result<(), StoreError> {
        let _ = resource_version.into();
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
            let internal = match &self.transformer {
                Some(_) if self.holds(&st, &item) => DeltaType::Sync,
                _ => DeltaType::Replaced,
            };
            let item = ObjectOrTombstone::Object(item);
            let id = self.key_of(&item)?;
            keys.insert(id.clone());
            self.queue_keyed(&mut st, id, action, internal, item)?;
        }

        // Queued keys not in the list: tombstone with the newest queued object.
        let mut queued_deletions = 0usize;
        let queued: Vec<String> = st
            .queue
            .iter()
            .filter(|k| !keys.contains(*k))
            .cloned()
            .collect();
        for k in queued {
            let newest = st
                .items
                .get(&k)
                .and_then(|d| d.last())
                .map(|d| d.object.object().clone());
            let Some(obj) = newest else { continue };
            queued_deletions += 1;
            let tomb = DeletedFinalStateUnknown { key: k, obj };
            self.queue_action(&mut st, DeltaType::Deleted, DeltaType::Deleted, tomb.into())?;
        }

        // Known keys not in the list with nothing pending: tombstone with the known object.
        if let Some(known) = &self.known {
            for k in known.list_keys() {
                if keys.contains(&k) || st.items.get(&k).is_some_and(|d| !d.is_empty()) {
                    continue;
                }
                let Some(obj) = known.get_by_key(&k) else {
                    tracing::debug!(key = %k, "key vanished from known objects during replace; no tombstone needed");
                    continue;
                };
                queued_deletions += 1;
                let tomb = DeletedFinalStateUnknown { key: k, obj };
                self.queue_action(&mut st, DeltaType::Deleted, DeltaType::Deleted, tomb.into())?;
            }
        }

        if !st.populated {
            st.populated = true;
            st.initial_population_count = keys.len() + queued_deletions;
            self.check_synced(&mut st);
        }
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
        self.known.as_ref().and_then(|k| k.get_by_key(key))
    }

    /// Whether `obj` is the very object (same allocation) held under its key.
    fn holds(&self, st: &State<K>, obj: &CachedObject<K>) -> bool {
        self.held(st, obj.key()).is_some_and(|h| h.ptr_eq(obj))
    }

    /// An object this queue already holds under `key`, for a relist to
    /// reuse (see [`ReflectorStore::cached`]): the newest queued object for the key
    /// (none if that is a deletion), else the known object under the key.
    /// `key` is an object's [`CachedObject::key`]; with a custom key
    /// function whose keys differ, nothing is found.
    ///
    /// Such an object handed back to [`replace`](Self::replace) is not
    /// transformed again.
    pub fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        let st = self.state.lock();
        self.held(&st, key)
    }

    /// Queues `Sync` for every known object whose key has nothing pending
    /// (no-op without known objects). The transform is not applied.
    pub fn resync(&self) -> Result<(), StoreError> {
        let Some(known) = &self.known else {
            return Ok(());
        };
        let mut st = self.state.lock();
        for k in known.list_keys() {
            let Some(obj) = known.get_by_key(&k) else {
                tracing::debug!(key = %k, "key vanished from known objects during resync");
                continue;
            };
            let obj = ObjectOrTombstone::Object(obj);
            let id = self.key_of(&obj)?;
            if st.items.get(&id).is_some_and(|d| !d.is_empty()) {
                continue;
            }
            self.queue_action(&mut st, DeltaType::Sync, DeltaType::Sync, obj)?;
        }
        Ok(())
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
        loop {
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            {
                let mut st = self.state.lock();
                while let Some(id) = st.queue.pop_front() {
                    let is_in_initial_list = !st.synced;
                    if st.initial_population_count > 0 {
                        st.initial_population_count -= 1;
                        self.check_synced(&mut st);
                    }
                    let Some(deltas) = st.items.remove(&id) else {
                        tracing::error!(key = %id, "item was queued but has no deltas; ignoring");
                        continue;
                    };
                    st.shrink_if_drained();
                    let Some(process) = process.take() else {
                        return Err(PopError::Closed);
                    };
                    let depth = st.queue.len();
                    let started = Instant::now();
                    let result = process(Deltas::from(deltas), is_in_initial_list);
                    log_if_slow("DeltaFIFO", &id, depth, started);
                    return result.map_err(PopError::Process);
                }
                if st.closed {
                    return Err(PopError::Closed);
                }
            }
            notified.await;
        }
    }

    /// Whether the initial list has been fully popped (see the type docs).
    pub fn has_synced(&self) -> bool {
        self.state.lock().synced
    }

    /// Waits until [`has_synced`](Self::has_synced) is true.
    pub async fn wait_synced(&self) {
        loop {
            let mut notified = pin!(self.synced_notify.notified());
            notified.as_mut().enable();
            if self.has_synced() {
                return;
            }
            notified.await;
        }
    }

    /// Closes the queue and wakes every waiting pop.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// Whether the queue was closed.
    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Queued keys, in pop order.
    pub fn list_keys(&self) -> Vec<String> {
        self.state.lock().queue.iter().cloned().collect()
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
    pub fn len(&self) -> usize {
        self.state.lock().queue.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: 'static> ReflectorStore<K> for DeltaFifo<K> {
    fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        DeltaFifo::add(self, obj)
    }
    fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        DeltaFifo::update(self, obj)
    }
    fn delete(&self, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
        DeltaFifo::delete(self, obj)
    }
    fn replace(
        &self,
        items: Vec<CachedObject<K>>,
        resource_version: String,
    ) -> Result<(), StoreError> {
        DeltaFifo::replace(self, items, resource_version)
    }
    fn resync(&self) -> Result<(), StoreError> {
        DeltaFifo::resync(self)
    }
    fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        DeltaFifo::cached(self, key)
    }
}

impl<K: 'static> Queue<K> for DeltaFifo<K> {
    fn pop<'a>(
        &'a self,
        process: ProcessFn<'a, K>,
    ) -> BoxFuture<'a, Result<(), PopError<BoxError>>> {
        Box::pin(DeltaFifo::pop(self, process))
    }
    fn has_synced(&self) -> bool {
        DeltaFifo::has_synced(self)
    }
    fn close(&self) {
        DeltaFifo::close(self)
    }
    fn is_closed(&self) -> bool {
        DeltaFifo::is_closed(self)
    }
    fn len(&self) -> usize {
        DeltaFifo::len(self)
    }
}

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
