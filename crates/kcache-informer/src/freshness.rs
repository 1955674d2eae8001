//! How fresh an informer's cache is (client-go 1.36's
//! `LastStoreSyncResourceVersion`), waiting for a given version, and this
//! process's own writes shown to its listers until the watch delivers them.

use std::time::Duration;

use bytes::Bytes;
use kcache_core::sync::lock;
use kcache_core::{
    CachedObject, IncomparableResourceVersion, Metadata, ResourceVersion, Selector, StoreError,
};
use kcache_deltafifo::StoreFreshness;
use kube::Resource;

use crate::informer::SharedIndexInformer;

/// Waiting for the cache to reach a resourceVersion failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FreshnessError {
    /// The cache did not reach the version in time: its watch is behind
    /// (events delayed, a slow or overloaded apiserver, a watch being
    /// re-established), or the object is outside what it watches.
    #[error(
        "the cache of informer {informer:?} did not reach resourceVersion {wanted} within {waited:?} (it is at {}{}): its watch is behind",
        reached.as_ref().map_or_else(|| "nothing yet".to_owned(), ToString::to_string),
        behind.map_or_else(String::new, |n| format!(", {n} writes behind"))
    )]
    TimedOut {
        /// The informer's name.
        informer: String,
        /// The version waited for.
        wanted: ResourceVersion,
        /// The version the cache had reached.
        reached: Option<ResourceVersion>,
        /// How far behind (writes to etcd in between), when both versions
        /// are integers.
        behind: Option<u64>,
        /// How long it waited.
        waited: Duration,
    },
    /// The versions cannot be ordered (see [`ResourceVersion`]).
    #[error(transparent)]
    Incomparable(#[from] IncomparableResourceVersion),
}

impl<K: Resource + 'static> SharedIndexInformer<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// The resourceVersion the cache has caught up to (client-go's
    /// `LastStoreSyncResourceVersion`): that of the newest event, bookmark
    /// or relist whose changes, and everything before them, are in the
    /// indexer. `None` before the first list has been processed. Unlike
    /// [`last_sync_resource_version`](Self::last_sync_resource_version)
    /// (what the reflector has received), it moves only once the change is
    /// readable from the cache.
    pub fn last_store_sync_resource_version(&self) -> Option<ResourceVersion> {
        self.inner.freshness.resource_version()
    }

    /// The handle on the cache's freshness, to read or wait on without the
    /// informer's type (one per informer, the same for every clone).
    pub fn freshness(&self) -> StoreFreshness {
        self.inner.freshness.clone()
    }

    /// Waits until the cache has caught up to `rv` (at most `timeout`;
    /// cancelled by dropping the future). Returns at once when it already
    /// has.
    ///
    /// ```no_run
    /// # async fn f(informer: kcache_informer::SharedIndexInformer<k8s_openapi::api::core::v1::ConfigMap>) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// // after a write that the apiserver answered at resourceVersion 4711:
    /// informer.wait_for_resource_version("4711", Duration::from_secs(5)).await?;
    /// // the cache (and every lister of it) now shows that write
    /// # Ok(()) }
    /// ```
    pub async fn wait_for_resource_version(
        &self,
        rv: &str,
        timeout: Duration,
    ) -> Result<(), FreshnessError> {
        let wanted = ResourceVersion::new(rv);
        wait_for(&self.inner.freshness, &self.inner.name, &wanted, timeout).await
    }

    /// Shows the object a write of this process returned (`body`, the
    /// response's JSON) to this informer's [listers](Self::lister) until the
    /// watch delivers that version or a newer one (see
    /// [`Indexer::record_own_write`](kcache_indexer::Indexer::record_own_write)).
    /// The object is built as the informer builds the ones it lists and
    /// watches (its object options and transform). Returns whether it was
    /// recorded (not when the cache already holds that version). Forgets
    /// the own writes the cache's freshness has passed first.
    pub fn record_own_write(&self, body: Bytes) -> Result<bool, StoreError> {
        let obj = CachedObject::<K>::from_bytes_with(body, &self.inner.watch.object_options)
            .map_err(|e| StoreError::Other(Box::new(e)))?;
        let transform = lock(&self.inner.lifecycle).transform.clone();
        let obj = match transform {
            Some(t) => t(obj).map_err(|source| StoreError::Transform {
                key: String::new(),
                source,
            })?,
            None => obj,
        };
        self.sweep_passed_own_writes();
        self.inner.indexer.record_own_write(obj)
    }

    /// Shows `key` as deleted (a delete of this process removed the object
    /// with `uid`) to this informer's listers until the watch delivers the
    /// deletion. Returns whether it was recorded (not when the cache no
    /// longer holds that object).
    pub fn record_own_delete(&self, key: &str, uid: &str) -> bool {
        self.sweep_passed_own_writes();
        self.inner.indexer.record_own_delete(key, uid)
    }

    /// Forgets the passed own writes before a new one is recorded, amortized:
    /// only when the freshness has moved since the last sweep, and then once
    /// per an eighth of the writes held (a sweep looks at every one). The
    /// watch settles each write as it delivers it; the sweep only catches
    /// those it never will (outside the selectors).
    fn sweep_passed_own_writes(&self) {
        let Some(rv) = self.inner.freshness.resource_version() else {
            return;
        };
        let held = self.inner.indexer.own_writes();
        if held == 0 {
            return;
        }
        let mut sweep = lock(&self.inner.own_write_sweep);
        sweep.writes_since += 1;
        let due = sweep.writes_since >= held / 8 || held >= kcache_indexer::MAX_OWN_WRITES;
        if !due || sweep.at.as_ref() == Some(&rv) {
            return;
        }
        sweep.at = Some(rv.clone());
        sweep.writes_since = 0;
        drop(sweep);
        self.inner.indexer.forget_own_writes_through(&rv);
    }

    /// Forgets the own writes at or before the cache's freshness: the cache
    /// holds them (or, outside its selectors, never will).
    pub fn forget_passed_own_writes(&self) -> usize {
        match self.inner.freshness.resource_version() {
            Some(rv) => self.inner.indexer.forget_own_writes_through(&rv),
            None => 0,
        }
    }

    /// Whether this informer would cache an object with metadata `meta`:
    /// its namespace, label selector and shard selector admit it. `None`
    /// when it cannot tell (the informer has a field selector).
    pub fn would_cache(&self, meta: &Metadata) -> Option<bool> {
        let o = &self.inner.watch;
        if o.field_selector.as_deref().is_some_and(|s| !s.is_empty()) {
            return None;
        }
        if let Some(ns) = o.namespace.as_deref()
            && meta.namespace() != Some(ns)
        {
            return Some(false);
        }
        if let Some(sel) = o.label_selector.as_deref().filter(|s| !s.is_empty()) {
            match Selector::parse(sel) {
                Ok(sel) if !sel.matches(meta.labels()) => return Some(false),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        if let Some(shard) = &o.shard_selector
            && !shard.matches(meta)
        {
            return Some(false);
        }
        Some(true)
    }
}

/// Waits on `freshness` for `wanted`, at most `timeout`.
pub(crate) async fn wait_for(
    freshness: &StoreFreshness,
    informer: &str,
    wanted: &ResourceVersion,
    timeout: Duration,
) -> Result<(), FreshnessError> {
    if freshness.has_reached(wanted)? {
        return Ok(());
    }
    match tokio::time::timeout(timeout, freshness.reached(wanted)).await {
        Ok(r) => Ok(r?),
        Err(_) => {
            let reached = freshness.resource_version();
            Err(FreshnessError::TimedOut {
                informer: informer.to_owned(),
                wanted: wanted.clone(),
                behind: reached.as_ref().and_then(|r| wanted.distance_from(r)),
                reached,
                waited: timeout,
            })
        }
    }
}
