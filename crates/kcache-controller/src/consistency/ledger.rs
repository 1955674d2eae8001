//! The write ledger: what the controller's writes returned, by primary key
//! (for the stale-cache gate), by object (for read-your-own-writes, in the
//! informers' indexers) and by object version (for skipping the events of
//! the controller's own writes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use kcache_core::IncomparableResourceVersion;
use parking_lot::{Mutex, RwLock};

use super::Consistency;
use super::type_cache::TypeCache;
use super::wanted::Wanted;
use super::write::{Written, parse};
use crate::source::owner_key;

/// Keys with writes outstanding past which a new record first sweeps the
/// ones the caches have passed (the threshold then doubles with what is
/// left).
const SWEEP_AT: usize = 4096;

/// Most keys with writes outstanding; past it new writes are not recorded
/// for the gate (said once).
pub(crate) const MAX_PENDING_KEYS: usize = 100_000;

/// Whether the cache is fresh enough for a reconcile of a key.
pub(crate) enum Freshness {
    /// No write recorded for the key is newer than its type's cache.
    Fresh,
    /// The cache of `cache`'s type has not caught up with `wanted`, what a
    /// write for the key returned.
    Stale {
        cache: Arc<TypeCache>,
        wanted: Wanted,
    },
}

/// The writes outstanding for one primary key: for each type written, the
/// newest version a write returned, and each deletion.
type Outstanding = Vec<(Arc<TypeCache>, Wanted)>;

/// The primary type of the controller, for attributing writes.
struct PrimaryType {
    group: String,
    kind: String,
    namespaced: bool,
}

/// The controller's cached types, by (group, kind) and by (group, plural).
#[derive(Default)]
struct Types {
    by_kind: HashMap<(String, String), Arc<TypeCache>>,
    by_plural: HashMap<(String, String), Arc<TypeCache>>,
}

/// What a controller's writes returned: created with the controller (its
/// recording client exists before `run`), configured when it runs.
#[derive(Default)]
pub(crate) struct WriteLedger {
    config: OnceLock<Consistency>,
    name: OnceLock<String>,
    primary: OnceLock<PrimaryType>,
    types: RwLock<Types>,
    /// Primary key -> what its caches must have seen of the writes made
    /// for it, where they had not when last looked at.
    pending: Mutex<HashMap<String, Outstanding>>,
    pending_len: AtomicUsize,
    /// The size of `pending` at which the next record sweeps it first
    /// (twice what the last sweep left, at least [`SWEEP_AT`]: sweeps stay
    /// amortized O(1) per record while the caches lag behind).
    next_sweep: AtomicUsize,
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
    /// of a type of `group`.
    pub(crate) fn register(&self, group: &str, cache: Arc<TypeCache>) {
        let mut t = self.types.write();
        t.by_kind
            .insert((group.to_owned(), cache.kind.clone()), cache.clone());
        t.by_plural
            .insert((group.to_owned(), cache.plural.clone()), cache);
    }

    fn cache_of(
        &self,
        group: &str,
        kind: Option<&str>,
        plural: Option<&str>,
    ) -> Option<Arc<TypeCache>> {
        let t = self.types.read();
        let g = group.to_owned();
        kind.and_then(|k| t.by_kind.get(&(g.clone(), k.to_owned())))
            .or_else(|| plural.and_then(|p| t.by_plural.get(&(g, p.to_owned()))))
            .cloned()
    }

    /// Records what a write returned (`body`: the JSON answer to a `method`
    /// request on `path` that succeeded), made in the reconcile of
    /// `reconciling` (if it was made in one).
    pub(crate) fn record(
        &self,
        reconciling: Option<&str>,
        method: &http::Method,
        path: &str,
        body: Bytes,
    ) {
        let Some(config) = self.config.get() else {
            return;
        };
        let Some(written) = parse(method, path, body) else {
            return;
        };
        match written {
            Written::Object { obj, body, rv } => {
                let meta = obj.meta();
                let group = written_group(&obj);
                let Some(cache) = self.cache_of(&group, meta.kind(), None) else {
                    return; // not a type this controller caches
                };
                if config.read_own_writes {
                    let recorded = cache.record_write(body).unwrap_or_else(|e| {
                        tracing::debug!(key = %obj.key(), error = %kcache_core::ErrorChain(&e), "own write not recorded for reads");
                        false
                    });
                    tracing::trace!(key = %obj.key(), %rv, recorded, "own write");
                }
                if config.skip_own_events {
                    cache.note_own_write(obj.key(), rv.clone());
                }
                if self.gate_on() && cache.would_cache(meta) != Some(false) {
                    let mut keys = self.primary_keys(reconciling, &group, &cache.kind, obj.key());
                    if let Some(p) = self.primary.get()
                        && let Some(owner) = owner_key(meta, &p.group, &p.kind, p.namespaced)
                    {
                        keys.push(owner);
                    }
                    self.pend(keys, &cache, Wanted::Version(rv));
                }
            }
            Written::Deleted {
                ref group,
                ref plural,
                ref kind,
                ref key,
                ref uid,
                ref obj,
            } => {
                let Some(cache) = self.cache_of(group, kind.as_deref(), plural.as_deref()) else {
                    return;
                };
                // the owner from the answer, or from the cached object
                let owner = self.primary.get().and_then(|p| match obj {
                    Some(o) => owner_key(o.meta(), &p.group, &p.kind, p.namespaced),
                    None => cache.cached_owner(key, &p.group, &p.kind, p.namespaced),
                });
                if config.read_own_writes {
                    let recorded = cache.record_delete(key, uid);
                    tracing::trace!(key = %key, recorded, "own delete");
                }
                if config.skip_own_events {
                    cache.note_own_delete(key, uid);
                }
                if self.gate_on()
                    && obj
                        .as_ref()
                        .is_none_or(|o| cache.would_cache(o.meta()) != Some(false))
                {
                    let mut keys =
                        self.primary_keys(reconciling, written.group(), &cache.kind, key);
                    keys.extend(owner);
                    let wanted = Wanted::Deletion {
                        key: key.clone(),
                        uid: Arc::from(uid.as_str()),
                    };
                    self.pend(keys, &cache, wanted);
                }
            }
        }
    }

    /// The primary keys a write of the object `key` (of `group`/`kind`) is
    /// for: the reconcile it was made in, and the object itself when it is
    /// a primary.
    fn primary_keys(
        &self,
        reconciling: Option<&str>,
        group: &str,
        kind: &str,
        key: &str,
    ) -> Vec<String> {
        let mut keys: Vec<String> = reconciling.map(str::to_owned).into_iter().collect();
        if let Some(p) = self.primary.get()
            && p.group == group
            && p.kind == kind
        {
            keys.push(key.to_owned());
        }
        keys
    }

    fn pend(&self, mut keys: Vec<String>, cache: &Arc<TypeCache>, wanted: Wanted) {
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return;
        }
        let mut pending = self.pending.lock();
        if pending.len() >= self.next_sweep.load(Ordering::Relaxed).max(SWEEP_AT) {
            sweep(&mut pending);
            self.next_sweep
                .store((2 * pending.len()).max(SWEEP_AT), Ordering::Relaxed);
        }
        for key in keys {
            if pending.len() >= MAX_PENDING_KEYS && !pending.contains_key(&key) {
                if !self.warned_full.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        controller = %self.name(),
                        keys = MAX_PENDING_KEYS,
                        "the stale-cache gate holds writes for {MAX_PENDING_KEYS} keys whose caches have not caught up; later writes are not gated (are the informers' watches stuck?)"
                    );
                }
                continue;
            }
            let list = pending.entry(key).or_default();
            // one version per type (the newest), one entry per deletion
            match list
                .iter_mut()
                .find(|(c, w)| Arc::ptr_eq(c, cache) && w.same_slot(&wanted))
            {
                Some((_, held)) => {
                    let newer = match (wanted.version(), held.version()) {
                        (Some(new), Some(old)) => new.is_at_least(old).unwrap_or(true),
                        _ => true,
                    };
                    if newer {
                        *held = wanted.clone();
                    }
                }
                None => list.push((cache.clone(), wanted.clone())),
            }
        }
        self.pending_len.store(pending.len(), Ordering::Relaxed);
    }

    /// Whether `key`'s caches have caught up with every write recorded for
    /// it; forgets the writes they have.
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
        list.retain(|(cache, wanted)| match cache.has_caught_up(wanted) {
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
        });
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

fn written_group(obj: &kcache_core::CachedObject<()>) -> String {
    obj.meta()
        .api_version()
        .and_then(|v| v.rsplit_once('/'))
        .map_or("", |(g, _)| g)
        .to_owned()
}

/// Drops every recorded write the caches have caught up with.
fn sweep(pending: &mut HashMap<String, Outstanding>) {
    pending.retain(|_, list| {
        list.retain(|(c, w)| !matches!(c.has_caught_up(w), Ok(true) | Err(_)));
        !list.is_empty()
    });
}
