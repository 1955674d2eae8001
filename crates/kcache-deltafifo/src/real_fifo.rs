//! client-go's RealFIFO (the default informer queue since 1.33): one entry per event.

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
    items: VecDeque<(String, Delta<K>)>,
    book: Bookkeeping,
    watermark: Watermark,
}

impl<K> State<K> {
    /// The sequence number of the oldest entry not processed yet: entries
    /// are popped in push order, so the queued ones are the last pushed.
    fn done_through(&self) -> u64 {
        self.watermark.pushed() - self.items.len() as u64
    }
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
/// use kcache_core::{CachedObject, ReflectorStore};
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
    core: Core<K>,
}

impl<K: 'static> RealFifo<K> {
    /// A RealFIFO with the given options (`emit_delta_type_replaced` is
    /// ignored: relisted objects are always `Replaced`).
    pub fn new(options: FifoOptions<K>) -> Self {
        RealFifo {
            state: Mutex::new(State {
                items: VecDeque::new(),
                book: Bookkeeping::default(),
                watermark: Watermark::default(),
            }),
            core: Core::new(options),
        }
    }
}

impl<K> RealFifo<K> {
    /// Appends a `kind` entry for `obj` under its key `key`, transformed
    /// unless `skip_transform`.
    fn push(
        &self,
        st: &mut State<K>,
        key: String,
        kind: DeltaType,
        skip_transform: bool,
        obj: ObjectOrTombstone<K>,
    ) -> Result<(), StoreError> {
        let obj = self.core.transform(&key, obj, skip_transform)?;
        st.watermark.next_seq();
        st.items.push_back((key, Delta { kind, object: obj }));
        self.core.wake_pops();
        Ok(())
    }

    /// Marks `rv` after everything queued now (see [`StoreFreshness`](crate::StoreFreshness)).
    fn mark(&self, st: &mut State<K>, rv: ResourceVersion) {
        let done = st.done_through();
        st.watermark.mark(rv, done, &self.core.freshness);
    }

    fn write(&self, kind: DeltaType, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
        let mut st = self.state.lock();
        self.core.note_write(&mut st.book);
        let key = self.core.key_of(&obj)?;
        let rv = object_rv(&obj);
        self.push(&mut st, key, kind, false, obj)?;
        if let Some(rv) = rv {
            self.mark(&mut st, rv);
        }
        Ok(())
    }

    /// A watch bookmark: once everything queued before it is processed, the
    /// store is at `resource_version`.
    pub(crate) fn bookmark(&self, resource_version: &str) {
        let mut st = self.state.lock();
        self.mark(&mut st, ResourceVersion::new(resource_version));
    }

    /// Appends an `Added` entry.
    pub(crate) fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.write(DeltaType::Added, obj.into())
    }

    /// Appends an `Updated` entry.
    pub(crate) fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.write(DeltaType::Updated, obj.into())
    }

    /// Appends a `Deleted` entry.
    pub(crate) fn delete(&self, obj: impl Into<ObjectOrTombstone<K>>) -> Result<(), StoreError> {
        self.write(DeltaType::Deleted, obj.into())
    }

    /// Relist: tombstones for what vanished, then `Replaced` per object.
    pub(crate) fn replace(
        &self,
        list: Vec<CachedObject<K>>,
        resource_version: impl Into<String>,
    ) -> Result<(), StoreError> {
        let list_rv = ResourceVersion::new(&resource_version.into());
        let mut st = self.state.lock();
        // each key is computed once, and owned once (by its queue entry)
        let mut keyed: Vec<(String, ObjectOrTombstone<K>)> = Vec::with_capacity(list.len());
        for item in list {
            let item = ObjectOrTombstone::Object(item);
            keyed.push((self.core.key_of(&item)?, item));
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
        self.core.for_each_known(
            "replace (no tombstone needed)",
            |k| new_keys.contains(k) || queued.contains(k),
            |key, obj| {
                tombstones.push(DeletedFinalStateUnknown { key, obj });
                Ok(())
            },
        )?;
        drop(new_keys);
        for t in tombstones {
            self.push(&mut st, t.key.clone(), DeltaType::Deleted, true, t.into())?;
        }
        for (key, item) in keyed {
            // An item the reflector reused from the known objects went
            // through the transform already: do not transform it again.
            let reused = self.core.transformer.is_some()
                && self.core.known.as_ref().is_some_and(|k| {
                    k.get_by_key(item.object().key())
                        .is_some_and(|h| h.ptr_eq(item.object()))
                });
            self.push(&mut st, key, DeltaType::Replaced, reused, item)?;
        }
        let count = st.items.len();
        self.core.note_replace(&mut st.book, || count);
        self.mark(&mut st, list_rv);
        Ok(())
    }

    /// The known object under `key`, for a relist to reuse (see
    /// [`ReflectorStore::cached`](kcache_core::ReflectorStore::cached)); `None` without known objects. Queued entries are
    /// not searched. `key` is an object's [`CachedObject::key`]; with a
    /// custom key function whose keys differ, nothing is found.
    ///
    /// Such an object handed back to [`replace`](Self::replace) is not
    /// transformed again.
    pub(crate) fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        self.core.known.as_ref().and_then(|k| k.get_by_key(key))
    }

    /// Appends `Sync` for each known object with no queued entry (no-op
    /// without known objects). The transform is not applied.
    pub(crate) fn resync(&self) -> Result<(), StoreError> {
        if self.core.known.is_none() {
            return Ok(());
        }
        let mut st = self.state.lock();
        let queued: HashSet<String> = st.items.iter().map(|(k, _)| k.clone()).collect();
        self.core.for_each_known(
            "resync",
            |k| queued.contains(k),
            |_, obj| {
                let obj = ObjectOrTombstone::Object(obj);
                let key = self.core.key_of(&obj)?;
                self.push(&mut st, key, DeltaType::Sync, true, obj)
            },
        )
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
        self.core
            .pop_loop(|| {
                let mut st = self.state.lock();
                let Some((key, delta)) = st.items.pop_front() else {
                    return st.book.closed.then_some(Err(PopError::Closed));
                };
                let is_in_initial_list = !st.book.synced;
                let Some(process) = process.take() else {
                    return Some(Err(PopError::Closed));
                };
                let depth = st.items.len();
                let started = Instant::now();
                let result = process(Deltas::from(vec![delta]), is_in_initial_list);
                log_if_slow("RealFIFO", &key, depth, started);
                self.core.note_popped(&mut st.book);
                let done = st.done_through();
                let State { watermark, .. } = &mut *st;
                watermark.advance(done, &self.core.freshness);
                Some(result.map_err(PopError::Process))
            })
            .await
    }

    /// Number of queued entries.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().items.len()
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

impl_common!(RealFifo, has_synced: "Whether the initial list has been fully popped and processed.");
