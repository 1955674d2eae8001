//! What the DeltaFIFO and the RealFIFO share: the key function, the known
//! objects and the transform, the "synced" bookkeeping of the initial list,
//! the wake-ups of waiting pops, the synced/close accessors and the
//! `ReflectorStore`/`Queue` impls.
//! Each queue keeps its own item storage and its own pop/replace rules.

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kcache_core::{
    CachedObject, KeyError, KeyFunc, KeyListerGetter, ObjectOrTombstone, StoreError,
    deletion_handling_key, meta_namespace_key,
};
use tokio::sync::Notify;

use crate::delta::{FifoOptions, TransformFunc};
use crate::freshness::StoreFreshness;

/// The initial-list bookkeeping of a queue, kept under the queue's lock.
#[derive(Default)]
pub(crate) struct Bookkeeping {
    /// A write or a `replace` happened.
    pub(crate) populated: bool,
    /// Items of the first `replace` not yet popped.
    pub(crate) initial_population_count: usize,
    /// The initial list has been popped (or a write came before any list).
    pub(crate) synced: bool,
    /// `close` was called.
    pub(crate) closed: bool,
}

/// The configuration and the wake-ups both queues hold.
pub(crate) struct Core<K> {
    /// Wakes waiting pops (a new item, or close).
    notify: Notify,
    /// Wakes `wait_synced`.
    synced_notify: Notify,
    key_func: Arc<dyn KeyFunc<K>>,
    /// client-go's "known objects" (usually the informer's indexer).
    pub(crate) known: Option<Arc<dyn KeyListerGetter<K>>>,
    pub(crate) transformer: Option<TransformFunc<K>>,
    /// What the store behind this queue has caught up to.
    pub(crate) freshness: StoreFreshness,
}

impl<K: 'static> Core<K> {
    /// From the options (`emit_delta_type_replaced` is the caller's).
    pub(crate) fn new(options: FifoOptions<K>) -> Self {
        Core {
            notify: Notify::new(),
            synced_notify: Notify::new(),
            key_func: options
                .key_function
                .unwrap_or_else(|| Arc::new(meta_namespace_key::<K>)),
            known: options.known_objects,
            transformer: options.transformer,
            freshness: options.freshness.unwrap_or_default(),
        }
    }
}

impl<K> Core<K> {
    /// The key of an object, or a tombstone's recorded key.
    pub(crate) fn key_of(&self, obj: &ObjectOrTombstone<K>) -> Result<String, KeyError> {
        deletion_handling_key(&*self.key_func, obj)
    }

    /// Turns `synced` on once the queue is populated and the initial list
    /// is all popped, and wakes `wait_synced`.
    pub(crate) fn check_synced(&self, b: &mut Bookkeeping) {
        if !b.synced && b.populated && b.initial_population_count == 0 {
            b.synced = true;
            self.synced_notify.notify_waiters();
        }
    }

    /// An `add`/`update`/`delete`: a write before any `replace` syncs at once.
    pub(crate) fn note_write(&self, b: &mut Bookkeeping) {
        b.populated = true;
        self.check_synced(b);
    }

    /// After a `replace`: if it is the first write, the initial list is
    /// the `count` items queued.
    pub(crate) fn note_replace(&self, b: &mut Bookkeeping, count: impl FnOnce() -> usize) {
        if !b.populated {
            b.populated = true;
            b.initial_population_count = count();
            self.check_synced(b);
        }
    }

    /// One more item popped: counts it off the initial list.
    pub(crate) fn note_popped(&self, b: &mut Bookkeeping) {
        if b.initial_population_count > 0 {
            b.initial_population_count -= 1;
            self.check_synced(b);
        }
    }

    /// `obj` through the transform, unless `skip` or a tombstone.
    pub(crate) fn transform(
        &self,
        key: &str,
        obj: ObjectOrTombstone<K>,
        skip: bool,
    ) -> Result<ObjectOrTombstone<K>, StoreError> {
        Ok(match (obj, &self.transformer) {
            (ObjectOrTombstone::Object(o), Some(t)) if !skip => {
                ObjectOrTombstone::Object(t(o).map_err(|source| StoreError::Transform {
                    key: key.to_owned(),
                    source,
                })?)
            }
            (obj, _) => obj,
        })
    }

    /// Wakes every waiting pop (an item was queued, or the queue closed).
    pub(crate) fn wake_pops(&self) {
        self.notify.notify_waiters();
    }

    /// Calls `attempt` (which takes the queue's lock) until it returns an
    /// outcome, waiting for a wake-up between calls; no wake-up is lost
    /// between an attempt and the wait.
    pub(crate) async fn pop_loop<T>(&self, attempt: impl FnMut() -> Option<T>) -> T {
        wait_until(&self.notify, attempt).await
    }

    /// Waits until `synced` returns true.
    pub(crate) async fn wait_synced(&self, synced: impl Fn() -> bool) {
        wait_until(&self.synced_notify, || synced().then_some(())).await
    }

    /// Each known object as (key, object), for `replace` and `resync`
    /// (`during` names which in a log line); keys for which `skip` is true
    /// are passed over before the object is looked up. No-op without known
    /// objects.
    pub(crate) fn for_each_known(
        &self,
        during: &str,
        skip: impl Fn(&str) -> bool,
        mut each: impl FnMut(String, CachedObject<K>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let Some(known) = &self.known else {
            return Ok(());
        };
        for k in known.list_keys() {
            if skip(&k) {
                continue;
            }
            let Some(obj) = known.get_by_key(&k) else {
                tracing::debug!(key = %k, "key vanished from known objects during {during}");
                continue;
            };
            each(k, obj)?;
        }
        Ok(())
    }
}

async fn wait_until<T>(notify: &Notify, mut attempt: impl FnMut() -> Option<T>) -> T {
    loop {
        let mut notified = pin!(notify.notified());
        notified.as_mut().enable();
        if let Some(out) = attempt() {
            return out;
        }
        notified.await;
    }
}

/// Like client-go's pop trace: warn when an item took long to process
/// while others were waiting (slow event handlers block the queue).
pub(crate) fn log_if_slow(queue: &str, key: &str, depth: usize, started: Instant) {
    let took = started.elapsed();
    if depth > 10 && took > Duration::from_millis(100) {
        tracing::warn!(
            queue,
            key,
            depth,
            ?took,
            "slow processing of a popped item is blocking the queue"
        );
    }
}

/// For a FIFO type (with `state.book: Bookkeeping`, `core: Core` and
/// `len`): the inherent `has_synced`, `wait_synced`, `close`, `is_closed`
/// (its doc given), and `ReflectorStore`
/// and `Queue` delegating to the inherent methods of the same names.
macro_rules! impl_common {
    ($fifo:ident, has_synced: $synced_doc:literal) => {
        impl<K> $fifo<K> {
            #[doc = $synced_doc]
            pub(crate) fn has_synced(&self) -> bool {
                self.state.lock().book.synced
            }

            /// What the store behind this queue has caught up to (client-go's
            /// `LastStoreSyncResourceVersion`): moved by events, bookmarks and
            /// relists once everything queued before them was popped and
            /// processed.
            pub fn freshness(&self) -> &$crate::StoreFreshness {
                &self.core.freshness
            }

            /// Waits until the initial list is popped ([`Queue::has_synced`](crate::Queue::has_synced)).
            pub async fn wait_synced(&self) {
                self.core.wait_synced(|| self.has_synced()).await
            }

            /// Closes the queue and wakes every waiting pop.
            pub(crate) fn close(&self) {
                self.state.lock().book.closed = true;
                self.core.wake_pops();
            }

            /// Whether the queue was closed.
            pub(crate) fn is_closed(&self) -> bool {
                self.state.lock().book.closed
            }
        }

        impl<K: 'static> kcache_core::ReflectorStore<K> for $fifo<K> {
            fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
                $fifo::add(self, obj)
            }
            fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
                $fifo::update(self, obj)
            }
            fn delete(&self, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
                $fifo::delete(self, obj)
            }
            fn replace(
                &self,
                items: Vec<CachedObject<K>>,
                resource_version: String,
            ) -> Result<(), StoreError> {
                $fifo::replace(self, items, resource_version)
            }
            fn resync(&self) -> Result<(), StoreError> {
                $fifo::resync(self)
            }
            fn cached(&self, key: &str) -> Option<CachedObject<K>> {
                $fifo::cached(self, key)
            }
            fn bookmark(&self, resource_version: &str) -> Result<(), StoreError> {
                $fifo::bookmark(self, resource_version);
                Ok(())
            }
            fn last_store_sync_resource_version(&self) -> Option<String> {
                self.core
                    .freshness
                    .resource_version()
                    .map(|rv| rv.to_string())
            }
        }

        impl<K: 'static> $crate::Queue<K> for $fifo<K> {
            fn pop<'a>(
                &'a self,
                process: $crate::ProcessFn<'a, K>,
            ) -> futures::future::BoxFuture<'a, Result<(), $crate::PopError<kcache_core::BoxError>>>
            {
                Box::pin($fifo::pop(self, process))
            }
            fn has_synced(&self) -> bool {
                $fifo::has_synced(self)
            }
            fn freshness(&self) -> $crate::StoreFreshness {
                self.core.freshness.clone()
            }
            fn close(&self) {
                $fifo::close(self)
            }
            fn is_closed(&self) -> bool {
                $fifo::is_closed(self)
            }
            fn len(&self) -> usize {
                $fifo::len(self)
            }
        }
    };
}
pub(crate) use impl_common;
