//! Delta handling: how popped deltas reach the indexer and the handlers
//! (client-go's `processDeltas`), and [`ResyncGate`], the store the
//! reflector writes into.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use kcache_core::sync::lock;
use kcache_core::{
    BoxError, CachedObject, ErrorChain, ObjectOrTombstone, ReflectorStore, StoreError,
};
use kcache_deltafifo::{DeltaType, Deltas, Queue};
use kube::Resource;

use super::Inner;
use crate::listener::Notification;
use crate::snapshot::PushTracker;

impl<K: Resource + 'static> Inner<K> {
    /// client-go's processDeltas, under `block_deltas`.
    pub(super) fn handle_deltas(
        &self,
        deltas: Deltas<K>,
        is_in_initial_list: bool,
    ) -> Result<(), BoxError> {
        let _block = lock(&self.block_deltas);
        let started = std::time::Instant::now();
        let mut last_rv = None;
        for delta in deltas.into_vec() {
            if let Some(rv) = delta.object.object().resource_version() {
                last_rv = crate::metrics::resource_version_gauge(rv);
            }
            match delta.kind {
                DeltaType::Sync | DeltaType::Replaced | DeltaType::Added | DeltaType::Updated => {
                    let obj = delta.object.into_object();
                    let old = self.indexer.get_by_key(obj.key());
                    match old {
                        Some(old) => {
                            if let Err(e) = self.indexer.update(obj.clone()) {
                                self.store_failed(&obj, e);
                                continue;
                            }
                            let is_sync = old.resource_version() == obj.resource_version();
                            self.processor
                                .distribute(&Notification::Update { old, new: obj }, is_sync);
                        }
                        None => {
                            if let Err(e) = self.indexer.add(obj.clone()) {
                                self.store_failed(&obj, e);
                                continue;
                            }
                            self.processor.distribute(
                                &Notification::Add {
                                    obj,
                                    is_in_initial_list,
                                },
                                false,
                            );
                        }
                    }
                }
                DeltaType::Deleted => {
                    let obj: ObjectOrTombstone<K> = delta.object;
                    if let Err(e) = self.indexer.delete(obj.clone()) {
                        self.store_failed(obj.object(), e);
                        continue;
                    }
                    self.processor
                        .distribute(&Notification::Delete { obj }, false);
                }
            }
        }
        if let Some(m) = self.metrics() {
            m.processing_latency
                .observe(started.elapsed().as_secs_f64());
            if let Some(rv) = last_rv {
                m.store_resource_version.set(rv);
            }
        }
        Ok(())
    }

    fn store_failed(&self, obj: &CachedObject<K>, e: StoreError) {
        tracing::error!(
            informer = %self.name,
            key = %obj.key(),
            error = %ErrorChain(&e),
            "writing to the cache failed; the change is skipped"
        );
    }
}

/// The store the reflector writes into: the queue, with `resync` passed on
/// only when some handler's resync is due (client-go's `ShouldResync`).
///
/// With snapshots, it also records the resourceVersion of the last change
/// queued, under the tracker's lock, and notes a relist of a warm start.
pub(super) struct ResyncGate<K: Resource> {
    pub(super) queue: Arc<dyn Queue<K>>,
    pub(super) informer: Weak<Inner<K>>,
    pub(super) tracker: Option<Arc<PushTracker>>,
}

impl<K: Resource> ResyncGate<K> {
    fn tracked(
        &self,
        rv: Option<&str>,
        push: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let Some(t) = &self.tracker else {
            return push();
        };
        let mut last = lock(&t.last_rv);
        let r = push();
        if let Some(rv) = rv {
            last.clear();
            last.push_str(rv);
        }
        r
    }
}

impl<K: Resource + 'static> ReflectorStore<K> for ResyncGate<K> {
    fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        let keep = obj.clone();
        self.tracked(keep.resource_version(), || self.queue.add(obj))
    }
    fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        let keep = obj.clone();
        self.tracked(keep.resource_version(), || self.queue.update(obj))
    }
    fn delete(&self, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
        let keep = obj.object().clone();
        self.tracked(keep.resource_version(), || self.queue.delete(obj))
    }
    fn replace(&self, items: Vec<CachedObject<K>>, rv: String) -> Result<(), StoreError> {
        if let Some(i) = self.informer.upgrade()
            && !i.current.load(Ordering::Acquire)
        {
            let mut st = lock(&i.snapshot_status);
            if !st.resume_relisted {
                st.resume_relisted = true;
                tracing::info!(informer = %i.name, "warm start: the snapshot's resourceVersion is too old; relisted");
                i.snapshot_changed(&st);
            }
        }
        let keep = rv.clone();
        self.tracked(Some(&keep), || self.queue.replace(items, rv))
    }
    fn resync(&self) -> Result<(), StoreError> {
        let due = self
            .informer
            .upgrade()
            .is_some_and(|i| i.processor.should_resync());
        if due { self.queue.resync() } else { Ok(()) }
    }
    fn bookmark(&self, rv: &str) -> Result<(), StoreError> {
        self.tracked(Some(rv), || self.queue.bookmark(rv))
    }
    fn last_store_sync_resource_version(&self) -> Option<String> {
        self.queue.last_store_sync_resource_version()
    }
    fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        // what the queue holds (queued or in the indexer): a relist reuses
        // unchanged objects instead of holding a second copy of the cache
        self.queue.cached(key)
    }
}
