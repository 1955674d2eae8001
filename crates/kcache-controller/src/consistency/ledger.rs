//! The write ledger: what the controller's writes returned, by primary key
//! (for the stale-cache gate), by object (for read-your-own-writes, in the
//! informers' indexers) and by object version (for skipping the events of
//! the controller's own writes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use kcache_core::{
    CachedObject, IncomparableResourceVersion, Metadata, ResourceVersion, StoreError,
};
use kcache_informer::{SharedIndexInformer, StoreFreshness};
use kube::Resource;
use parking_lot::{Mutex, RwLock};

use super::Consistency;
use crate::source::owner_key;

/// Keys with writes outstanding past which every new record first sweeps
/// the ones the caches have passed.
const SWEEP_AT: usize = 4096;

/// Most keys with writes outstanding; past it new writes are not recorded
/// for the gate (said once).
pub(crate) const MAX_PENDING_KEYS: usize = 100_000;

/// Most object versions kept for skipping own events, per type.
const MAX_OWN_VERSIONS: usize = 65_536;

type RecordWrite = Box<dyn Fn(Bytes) -> Result<bool, StoreError> + Send + Sync>;
type RecordDelete = Box<dyn Fn(&str, &ResourceVersion) -> bool + Send + Sync>;
type WouldCache = Box<dyn Fn(&Metadata) -> Option<bool> + Send + Sync>;

/// One cached type of a controller (its primary, an owned or a watched
/// type): the informer's freshness, its own-writes overlay, and the
/// versions of the controller's own writes to it.
pub(crate) struct TypeCache {
    pub(crate) kind: String,
    pub(crate) informer: String,
    pub(crate) freshness: StoreFreshness,
    record_write: RecordWrite,
    record_delete: RecordDelete,
    would_cache: WouldCache,
    /// Object key -> the version this controller's last write to it
    /// returned, while no other version has been seen since.
    own_versions: Mutex<HashMap<String, ResourceVersion>>,
}

impl TypeCache {
    /// The type cache of `informer`, objects of `kind`.
    pub(crate) fn of<K>(informer: &SharedIndexInformer<K>, kind: &str) -> Arc<Self>
    where
        K: Resource + Send + Sync + 'static,
        K::DynamicType: Clone + Send + Sync + 'static,
    {
        let (w, d, c) = (informer.clone(), informer.clone(), informer.clone());
        Arc::new(TypeCache {
            kind: kind.to_owned(),
            informer: informer.name().to_owned(),
            freshness: informer.freshness(),
            record_write: Box::new(move |body| w.record_own_write(body)),
            record_delete: Box::new(move |key, rv| d.record_own_delete(key, rv)),
            would_cache: Box::new(move |meta| c.would_cache(meta)),
            own_versions: Mutex::new(HashMap::new()),
        })
    }

    /// Whether an event of the object `key` at `rv` is the result of this
    /// controller's own write: its version is exactly the one the write
    /// returned. A relist that delivers that version again is still its
    /// own; any other version (someone else's change) forgets it.
    pub(crate) fn is_own_event(&self, key: &str, rv: Option<&str>) -> bool {
        let mut own = self.own_versions.lock();
        if own.is_empty() {
            return false;
        }
        match (own.get(key), rv) {
            (Some(v), Some(rv)) if *v == ResourceVersion::new(rv) => true,
            (Some(_), _) => {
                own.remove(key);
                false
            }
            (None, _) => false,
        }
    }

    /// The object `key` is gone (a tombstone, a deletion): nothing to skip.
    pub(crate) fn forget_own(&self, key: &str) {
        let mut own = self.own_versions.lock();
        if !own.is_empty() {
            own.remove(key);
        }
    }

    fn note_own(&self, key: &str, rv: ResourceVersion) {
        let mut own = self.own_versions.lock();
        if own.len() >= MAX_OWN_VERSIONS && !own.contains_key(key) {
            return;
        }
        own.insert(key.to_owned(), rv);
    }
}

/// The writes outstanding for one primary key: for each type written, the
/// newest version a write returned.
type Outstanding = Vec<(Arc<TypeCache>, ResourceVersion)>;

/// Whether the cache is fresh enough for a reconcile of a key.
pub(crate) enum Freshness {
    /// No write recorded for the key is newer than its type's cache.
    Fresh,
    /// The cache of `cache`'s type has not caught up to `wanted`, the
    /// version a write for the key returned.
    Stale {
        cache: Arc<TypeCache>,
        wanted: ResourceVersion,
    },
}

/// The primary type of the controller, for attributing writes.
struct PrimaryType {
    group: String,
    kind: String,
    namespaced: bool,
}

/// What a controller's writes returned: created with the controller (its
/// recording client exists before `run`), configured when it runs.
#[derive(Default)]
pub(crate) struct WriteLedger {
    config: OnceLock<Consistency>,
    name: OnceLock<String>,
    primary: OnceLock<PrimaryType>,
    /// (group, kind) -> the type's cache.
    types: RwLock<HashMap<(String, String), Arc<TypeCache>>>,
    /// Primary key -> (type, newest version written) for each type written
    /// for it whose cache had not caught up when last looked at.
    pending: Mutex<HashMap<String, Outstanding>>,
    pending_len: AtomicUsize,
    /// The gate turned itself off: the apiserver's versions do not compare.
    gate_off: AtomicBool,
    warned_full: AtomicBool,
}

impl WriteLedger {
    /// Configures the ledger for a run of controller `name` whose primary
    /// is `group`/`kind` (first call wins: a controller runs once).
    pub(crate) fn configure(
        &self,
        name: &str,
        config: &Consistency,
        group: &str,
        kind: &str,
        namespaced: bool,
    ) {
        let _ = self.config.set(config.clone());
        let _ = self.name.set(name.to_owned());
        let _ = self.primary.set(PrimaryType {
            group: group.to_owned(),
            kind: kind.to_owned(),
            namespaced,
        });
    }

    /// The configuration, once running.
    pub(crate) fn config(&self) -> Option<&Consistency> {
        self.config.get()
    }

    /// Whether writes are recorded at all.
    pub(crate) fn recording(&self) -> bool {
        self.config.get().is_some_and(Consistency::records_writes)
    }

    /// Whether the gate is on (configured, and the versions compare).
    pub(crate) fn gate_on(&self) -> bool {
        self.config.get().is_some_and(|c| c.stale_cache_gate)
            && !self.gate_off.load(Ordering::Relaxed)
    }

    /// Registers (or, for a new informer of the type, replaces) the cache
    /// of `group`/`kind`.
    pub(crate) fn register(&self, group: &str, cache: Arc<TypeCache>) {
        self.types
            .write()
            .insert((group.to_owned(), cache.kind.clone()), cache);
    }

    /// Records what a write returned (`body`: the JSON response of a
    /// `method` request that succeeded), made in the reconcile of
    /// `reconciling` (if it was made in one).
    pub(crate) fn record(&self, reconciling: Option<&str>, method: &http::Method, body: Bytes) {
        let Some(config) = self.config.get() else {
            return;
        };
        let Ok(obj) = CachedObject::<()>::from_bytes(body.clone()) else {
            return;
        };
        let meta = obj.meta();
        let (Some(kind), Some(api_version)) = (meta.kind(), meta.api_version()) else {
            return;
        };
        if kind == "Status" {
            return; // a Status answer (some deletes): no object version
        }
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let Some(cache) = self
            .types
            .read()
            .get(&(group.to_owned(), kind.to_owned()))
            .cloned()
        else {
            return; // not a type this controller caches
        };
        let Some(rv) = meta.resource_version().map(ResourceVersion::new) else {
            return;
        };
        // A DELETE answered with the object and no deletionTimestamp
        // removed it; with one, it waits for finalizers: an update.
        let deleted = method == http::Method::DELETE && meta.deletion_timestamp().is_none();
        if config.read_own_writes {
            let recorded = if deleted {
                (cache.record_delete)(obj.key(), &rv)
            } else {
                (cache.record_write)(body).unwrap_or_else(|e| {
                    tracing::debug!(key = %obj.key(), error = %kcache_core::ErrorChain(&e), "own write not recorded for reads");
                    false
                })
            };
            tracing::trace!(key = %obj.key(), %rv, deleted, recorded, "own write");
        }
        if config.skip_own_events {
            cache.note_own(obj.key(), rv.clone());
        }
        if self.gate_on() && (cache.would_cache)(meta) != Some(false) {
            let keys = self.primary_keys(reconciling, group, kind, &obj);
            self.pend(&keys, &cache, rv);
        }
    }

    /// The primary keys a write of `obj` is for: the reconcile it was made
    /// in, the object itself when it is a primary, and its controlling
    /// owner when that is a primary.
    fn primary_keys(
        &self,
        reconciling: Option<&str>,
        group: &str,
        kind: &str,
        obj: &CachedObject<()>,
    ) -> Vec<String> {
        let mut keys: Vec<String> = reconciling.map(str::to_owned).into_iter().collect();
        if let Some(p) = self.primary.get() {
            if p.group == group && p.kind == kind {
                keys.push(obj.key().to_owned());
            }
            if let Some(owner) = owner_key(obj.meta(), &p.group, &p.kind, p.namespaced) {
                keys.push(owner);
            }
        }
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    fn pend(&self, keys: &[String], cache: &Arc<TypeCache>, rv: ResourceVersion) {
        if keys.is_empty() {
            return;
        }
        let mut pending = self.pending.lock();
        if pending.len() >= SWEEP_AT {
            self.sweep(&mut pending);
        }
        for key in keys {
            if pending.len() >= MAX_PENDING_KEYS && !pending.contains_key(key) {
                if !self.warned_full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        controller = %self.name(),
                        keys = MAX_PENDING_KEYS,
                        "the stale-cache gate holds writes for {MAX_PENDING_KEYS} keys whose caches have not caught up; later writes are not gated (are the informers' watches stuck?)"
                    );
                }
                continue;
            }
            let list = pending.entry(key.clone()).or_default();
            match list.iter_mut().find(|(c, _)| Arc::ptr_eq(c, cache)) {
                Some((_, newest)) => {
                    if rv.is_at_least(newest).unwrap_or(true) {
                        *newest = rv.clone();
                    }
                }
                None => list.push((cache.clone(), rv.clone())),
            }
        }
        self.pending_len.store(pending.len(), Ordering::Relaxed);
    }

    /// Drops every recorded write the caches have passed.
    fn sweep(&self, pending: &mut HashMap<String, Outstanding>) {
        pending.retain(|_, list| {
            list.retain(|(c, rv)| !matches!(c.freshness.has_reached(rv), Ok(true) | Err(_)));
            !list.is_empty()
        });
    }

    /// Whether `key`'s caches have caught up with every write recorded for
    /// it; forgets the writes they have passed.
    pub(crate) fn check(&self, key: &str) -> Freshness {
        if self.pending_len.load(Ordering::Relaxed) == 0 || !self.gate_on() {
            return Freshness::Fresh;
        }
        let mut pending = self.pending.lock();
        let Some(list) = pending.get_mut(key) else {
            return Freshness::Fresh;
        };
        let mut stale = None;
        let mut incomparable = None;
        list.retain(
            |(cache, wanted)| match cache.freshness.has_reached(wanted) {
                Ok(true) => false,
                Ok(false) => {
                    if stale.is_none() {
                        stale = Some((cache.clone(), wanted.clone()));
                    }
                    true
                }
                Err(e) => {
                    incomparable = Some(e);
                    false
                }
            },
        );
        if list.is_empty() {
            pending.remove(key);
        }
        self.pending_len.store(pending.len(), Ordering::Relaxed);
        drop(pending);
        if let Some(e) = incomparable {
            self.turn_gate_off(&e);
            return Freshness::Fresh;
        }
        match stale {
            Some((cache, wanted)) => Freshness::Stale { cache, wanted },
            None => Freshness::Fresh,
        }
    }

    /// The apiserver's versions do not compare: the gate cannot decide and
    /// turns itself off, said once.
    pub(crate) fn turn_gate_off(&self, e: &IncomparableResourceVersion) {
        if !self.gate_off.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                controller = %self.name(),
                error = %e,
                "the stale-cache gate is off for this controller: reconciles no longer wait for the caches to catch up with its writes"
            );
            self.pending.lock().clear();
            self.pending_len.store(0, Ordering::Relaxed);
        }
    }

    /// Keys with writes outstanding.
    #[cfg(test)]
    pub(crate) fn pending_keys(&self) -> usize {
        self.pending.lock().len()
    }

    pub(crate) fn name(&self) -> &str {
        self.name.get().map_or("", String::as_str)
    }
}
