//! client-go's RealFIFO (the default informer queue since 1.33): one entry per event.

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
    items: VecDeque<(String, Delta<K>)>,
    populated: bool,
    initial_population_count: usize,
    synced: bool,
    closed: bool,
}

/// A queue that delivers every event in order, one [`Delta`] per pop, with
/// no per-key coalescing (client-go's `RealFIFO`, non-atomic mode).
///
/// * `add`, `update` and `delete` each append one entry (`delete` is never
///   dropped).
/// * `replace` first appends a `Deleted` tombstone for each queued key not
///   in the list whose last queued event is not already a deletion
///   (carrying that last object), then for each known key neither listed
///   nor queued (carrying the known object), then a `Replaced` entry per
///   listed object.
/// * `resync` appends `Sync` for each known key with no queued entry.
/// * `has_synced` turns true once every entry queued at the first `replace`
///   (everything in the queue then) has been popped and processed, or at
///   once after an `add`/`update`/`delete` that came before any `replace`.
/// * The transform runs once per object, never on tombstones or `Sync`.
///
/// ```
/// use kcache_core::CachedObject;
/// use kcache_deltafifo::{DeltaType, FifoOptions, RealFifo};
///
/// # futures::executor::block_on(async {
/// let fifo = RealFifo::<serde_json::Value>::new(FifoOptions::new());
/// let obj = CachedObject::from_bytes(&br#"{"metadata":{"name":"a"}}"#[..])?;
/// fifo.add(obj.clone())?;
/// fifo.update(obj)?;
/// for expected in [DeltaType::Added, DeltaType::Updated] {
///     let kind = fifo.pop(|d, _| Ok::<_, std::convert::Infallible>(d[0].kind)).await?;
///     assert_eq!(kind, expected); // one event per pop
/// }
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct RealFifo<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    synced_notify: Notify,
    key_func: Arc<dyn KeyFunc<K>>,
    known: Option<Arc<dyn KeyListerGetter<K>>>,
    transformer: Option<TransformFunc<K>>,
}

impl<K: 'static> RealFifo<K> {
    /// A RealFIFO with the given options (`emit_delta_type_replaced` is
    /// ignored: relisted objects are always `Replaced`).
    pub fn new(options: FifoOptions<K>) -> Self {
        RealFifo {
            state: Mutex::new(State {
                items: VecDeque::new(),
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
            transformer: options.transformer,
        }
    }
}

impl<K> RealFifo<K> {
    fn key_of(&self, obj: &ObjectOrTombstone<K>) -> Result<String, kcache_core::KeyError> {
        deletion_handling_key(&*self.key_func, obj)
    }

    fn check_synced(&self, st: &mut State<K>) {
        if !st.synced && st.populated && st.initial_population_count == 0 {
            st.synced = true;
            self.synced_notify.notify_waiters();
        }
    }

    fn push(
        &self,
        st: &mut State<K>,
        kind: DeltaType,
        skip_transform: bool,
        obj: ObjectOrTombstone<K>,
    ) -> Result<(), StoreError> {
        let key = self.key_of(&obj)?;
        self.push_keyed(st, key, kind, skip_transform, obj)
    }

    /// [`push`](Self::push) with the key already known.
    fn push_keyed(
        &self,
        st: &mut State<K>,
        key: String,
        kind: DeltaType,
        skip_transform: bool,
        obj: ObjectOrTombstone<K>,
    ) -> Result<(), StoreError> {
        let obj = match (obj, &self.transformer) {
            (ObjectOrTombstone::Object(o), Some(t)) if !skip_transform => {
                ObjectOrTombstone::Object(t(o).map_err(|source| StoreError::Transform {
                    key: key.clone(),
                    source,
                })?)
            }
            (obj, _) => obj,
        };
        st.items.push_back((key, Delta { kind, object: obj }));
        self.notify.notify_waiters();
        Ok(())
    }

    fn write(&self, kind: DeltaType, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
        let mut st = self.state.lock();
        st.populated = true;
        self.check_synced(&mut st);
        self.push(&mut st, kind, false, obj)
    }

    /// Appends an `Added` entry.
    pub fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.write(DeltaType::Added, obj.into())
    }

    /// Appends an `Updated` entry.
    pub fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.write(DeltaType::Updated, obj.into())
    }

    /// Appends a `Deleted` entry.
    pub fn delete(&self, obj: impl Into<ObjectOrTombstone<K>>) -> Result<(), StoreError> {
        self.write(DeltaType::Deleted, obj.into())
    }

    /// Relist: tombstones for what vanished, then `Replaced` per object.
    pub fn replace(
        &self,
        list: Vec<CachedObject<K>>,
        resource_version: impl Into<String>,
    ) -> Result<(), StoreError> {
        let _ = resource_version.into();
        let mut st = self.state.lock();
        // each key is computed once, and owned once (by its queue entry)
        let mut keyed: Vec<(String, ObjectOrTombstone<K>)> = Vec::with_capacity(list.len());
        for item in list {
            let item = ObjectOrTombstone::Object(item);
            keyed.push((self.key_of(&item)?, item));
        }
        let new_keys: HashSet<&str> = keyed.iter().map(|(k, _)| k.as_str()).collect();
        // Last queued entry per key, keys in first-queued order.
        let mut order: Vec<&str> = Vec::new();
        let mut last: HashMap<&str, &Delta<K>> = HashMap::new();
        for (k, d) in &st.items {
            if last.insert(k.as_str(), d).is_none() {
                order.push(k.as_str());
            }
        }
        let mut tombstones: Vec<DeletedFinalStateUnknown<K>> = Vec::new();
        for k in &order {
            if new_keys.contains(*k) {
                continue;
            }
            let Some(d) = last.get(k) else { continue };
            if d.kind == DeltaType::Deleted {
                continue;
            }
            tombstones.push(DeletedFinalStateUnknown {
                key: (*k).to_owned(),
                obj: d.object.object().clone(),
            });
        }
        let queued: HashSet<String> = order.iter().map(|k| (*k).to_owned()).collect();
        drop(last);
        if let Some(known) = &self.known {
            for k in known.list_keys() {
                if new_keys.contains(k.as_str()) || queued.contains(&k) {
                    continue;
                }
                let Some(obj) = known.get_by_key(&k) else {
                    tracing::debug!(key = %k, "key vanished from known objects during replace; no tombstone needed");
                    continue;
                };
                tombstones.push(DeletedFinalStateUnknown { key: k, obj });
            }
        }
        drop(new_keys);
        for t in tombstones {
            self.push(&mut st, DeltaType::Deleted, true, t.into())?;
        }
        for (key, item) in keyed {
            // An item the reflector reused from the known objects went
            // through the transform already: do not transform it again.
            let reused = self.transformer.is_some()
                && self.known.as_ref().is_some_and(|k| {
                    k.get_by_key(item.object().key())
                        .is_some_and(|h| h.ptr_eq(item.object()))
                });
            self.push_keyed(&mut st, key, DeltaType::Replaced, reused, item)?;
        }
        if !st.populated {
            st.populated = true;
            st.initial_population_count = st.items.len();
            self.check_synced(&mut st);
        }
        Ok(())
    }

    /// The known object under `key`, for a relist to reuse (see
    /// [`ReflectorStore::cached`]); `None` without known objects. Queued entries are
    /// not searched. `key` is an object's [`CachedObject::key`]; with a
    /// custom key function whose keys differ, nothing is found.
    ///
    /// Such an object handed back to [`replace`](Self::replace) is not
    /// transformed again.
    pub fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        self.known.as_ref().and_then(|k| k.get_by_key(key))
    }

    /// Appends `Sync` for each known object with no queued entry (no-op
    /// without known objects). The transform is not applied.
    pub fn resync(&self) -> Result<(), StoreError> {
        let Some(known) = &self.known else {
            return Ok(());
        };
        let mut st = self.state.lock();
        let queued: HashSet<String> = st.items.iter().map(|(k, _)| k.clone()).collect();
        for k in known.list_keys() {
            if queued.contains(&k) {
                continue;
            }
            let Some(obj) = known.get_by_key(&k) else {
                tracing::debug!(key = %k, "key vanished from known objects during resync");
                continue;
            };
            self.push(&mut st, DeltaType::Sync, true, obj.into())?;
        }
        Ok(())
    }

    /// Pops the oldest entry and hands it (as a one-delta [`Deltas`]) to
    /// `process`, under the queue's lock; the initial-list count drops after
    /// `process` returns. Waits while empty; [`PopError::Closed`] once
    /// closed and empty.
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
                if let Some((key, delta)) = st.items.pop_front() {
                    let is_in_initial_list = !st.synced;
                    let Some(process) = process.take() else {
                        return Err(PopError::Closed);
                    };
                    let depth = st.items.len();
                    let started = Instant::now();
                    let result = process(Deltas::from(vec![delta]), is_in_initial_list);
                    crate::delta_fifo::log_if_slow("RealFIFO", &key, depth, started);
                    if st.initial_population_count > 0 {
                        st.initial_population_count -= 1;
                        self.check_synced(&mut st);
                    }
                    return result.map_err(PopError::Process);
                }
                if st.closed {
                    return Err(PopError::Closed);
                }
            }
            notified.await;
        }
    }

    /// Whether the initial list has been fully popped and processed.
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

    /// Number of queued entries.
    pub fn len(&self) -> usize {
        self.state.lock().items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys of the queued entries, in pop order (a key may repeat).
    pub fn list_keys(&self) -> Vec<String> {
        self.state
            .lock()
            .items
            .iter()
            .map(|(k, _)| k.clone())
            .collect()
    }
}

impl<K: 'static> ReflectorStore<K> for RealFifo<K> {
    fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        RealFifo::add(self, obj)
    }
    fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        RealFifo::update(self, obj)
    }
    fn delete(&self, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
        RealFifo::delete(self, obj)
    }
    fn replace(
        &self,
        items: Vec<CachedObject<K>>,
        resource_version: String,
    ) -> Result<(), StoreError> {
        RealFifo::replace(self, items, resource_version)
    }
    fn resync(&self) -> Result<(), StoreError> {
        RealFifo::resync(self)
    }
    fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        RealFifo::cached(self, key)
    }
}

impl<K: 'static> Queue<K> for RealFifo<K> {
    fn pop<'a>(
        &'a self,
        process: ProcessFn<'a, K>,
    ) -> BoxFuture<'a, Result<(), PopError<BoxError>>> {
        Box::pin(RealFifo::pop(self, process))
    }
    fn has_synced(&self) -> bool {
        RealFifo::has_synced(self)
    }
    fn close(&self) {
        RealFifo::close(self)
    }
    fn is_closed(&self) -> bool {
        RealFifo::is_closed(self)
    }
    fn len(&self) -> usize {
        RealFifo::len(self)
    }
}
