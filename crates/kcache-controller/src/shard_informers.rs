//! Sharded informers: a sharded controller whose primary, owned and watched
//! informers list and watch only its hash ranges (the apiserver's shard
//! selector), re-created whenever its ranges change.
//!
//! The hash space is cut into [`SLOTS`] slots; each slot belongs to the
//! member of the shard view that rendezvous hashing gives it, and a key
//! belongs to the owner of the slot of its field's hash (the namespace in
//! the key, or the cached object's uid), so the replica that caches an
//! object is the one that reconciles it. When the view changes, a new
//! informer set (a factory with the new selector) is built while the old
//! one serves the kept keys; the controller switches to it once it has
//! synced and this replica has acknowledged the view (its lost keys are
//! released), queues the keys it gained, and drops the old set: objects
//! that left the range leave the cache without any delete event.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kcache_core::{ShardField, ShardSelector, ShardSlots, shard_hash};
use kcache_informer::{SharedIndexInformer, SharedInformerFactory};
use kcache_lease::shard::{KeyPoint, Placement, Shard, View};
use kube::Resource;
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;

use crate::predicate::Predicate;
use crate::reconciler::Trigger;
use crate::source::{Enqueuer, PrimaryHandler, SourceFn, SourceHandle, source_handle};

/// How many slots the hash space is cut into: a member's selector is its
/// slots, adjacent ones merged (about `SLOTS / N` ranges for N members at
/// most).
pub const SLOTS: usize = 128;

/// The slots.
pub(crate) fn slots() -> ShardSlots {
    // SLOTS is within 1..=MAX_SHARDS
    ShardSlots::new(SLOTS).unwrap_or_else(|_| unreachable!("SLOTS is a valid slot count"))
}

/// The namespace part of a key (`""` for a cluster-scoped key).
fn key_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

/// The informers a replica caches with now.
pub(crate) struct CacheSet<K: Resource> {
    pub(crate) primary: SharedIndexInformer<K>,
    /// `None` when the informers are not sharded.
    pub(crate) selector: Option<ShardSelector>,
}

/// The controller's current caches: fixed when the informers are not
/// sharded; switched at every range change when they are.
pub(crate) struct Caches<K: Resource> {
    current: Arc<RwLock<Option<Arc<CacheSet<K>>>>>,
    field: Option<ShardField>,
}

impl<K: Resource> Clone for Caches<K> {
    fn clone(&self) -> Self {
        Self {
            current: self.current.clone(),
            field: self.field,
        }
    }
}

impl<K> Caches<K>
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// Unsharded: always `primary`.
    pub(crate) fn fixed(primary: SharedIndexInformer<K>) -> Self {
        Self {
            current: Arc::new(RwLock::new(Some(Arc::new(CacheSet {
                primary,
                selector: None,
            })))),
            field: None,
        }
    }

    /// Sharded on `field`: empty until the first set synced.
    pub(crate) fn sharded(field: ShardField) -> Self {
        Self {
            current: Arc::new(RwLock::new(None)),
            field: Some(field),
        }
    }

    /// The current set (a snapshot: a switch does not change it).
    pub(crate) fn current(&self) -> Option<Arc<CacheSet<K>>> {
        self.current.read().clone()
    }

    fn set(&self, set: CacheSet<K>) {
        *self.current.write() = Some(Arc::new(set));
    }

    /// The keys of the current primary cache.
    pub(crate) fn keys(&self) -> Vec<String> {
        self.current()
            .map(|s| s.primary.indexer().list_keys())
            .unwrap_or_default()
    }

    /// The hash of `key`'s shard field: the namespace in the key, or the
    /// uid of the cached object (`None` when not cached or not sharded).
    pub(crate) fn point(&self, key: &str) -> Option<u64> {
        match self.field? {
            ShardField::Uid => {
                let set = self.current()?;
                let obj = set.primary.indexer().get_by_key(key)?;
                obj.uid().map(|u| shard_hash(u.as_bytes()))
            }
            _ => Some(shard_hash(key_namespace(key).as_bytes())),
        }
    }

    /// Whether `set` caches the object of `key` (always, unsharded).
    pub(crate) fn covers(&self, set: &CacheSet<K>, key: &str) -> bool {
        let Some(selector) = &set.selector else {
            return self.field.is_none();
        };
        match self.field {
            Some(ShardField::Uid) => set
                .primary
                .indexer()
                .get_by_key(key)
                .and_then(|o| o.uid().map(|u| selector.contains(shard_hash(u.as_bytes()))))
                .unwrap_or(false),
            _ => selector.contains(shard_hash(key_namespace(key).as_bytes())),
        }
    }

    /// The placement the shard protocol uses: slots by this field's hash.
    pub(crate) fn placement(&self) -> Placement {
        let caches = self.clone();
        let point: KeyPoint = Arc::new(move |key: &str| caches.point(key));
        Placement::Slots {
            slots: slots(),
            point,
        }
    }
}

/// `member`'s selector in `view` (`None`: it owns no slot).
pub(crate) fn selector_of(view: &View, member: &str, field: ShardField) -> Option<ShardSelector> {
    let mine = view.slots_of(member, slots());
    if mine.is_empty() {
        return None;
    }
    slots().selector(field, mine).ok()
}

/// Gives a set's informers the controller's metrics providers.
pub(crate) type AttachAll = Arc<dyn Fn(&[SourceHandle]) + Send + Sync>;

/// Builds the primary informer of a sharded factory.
pub(crate) type PrimaryOf<K> =
    Arc<dyn Fn(&SharedInformerFactory) -> SharedIndexInformer<K> + Send + Sync>;

/// One informer set: a factory with one selector and the controller's
/// handlers on its informers.
struct InformerSet<K: Resource> {
    view: View,
    selector: ShardSelector,
    factory: SharedInformerFactory,
    primary: SharedIndexInformer<K>,
    handles: Vec<SourceHandle>,
    /// Set while the set is a candidate: its initial-list adds are not
    /// queued (the keys it gains are queued at the switch).
    quiet: Arc<AtomicBool>,
}

impl<K: Resource> InformerSet<K> {
    fn synced(&self) -> bool {
        self.handles.iter().all(|h| h.synced.has_synced())
    }

    /// Removes the handlers and stops the informers (in the background):
    /// the objects leave with the set, no delete event is sent.
    fn retire(self) {
        for h in self.handles {
            (h.remove)();
        }
        let factory = self.factory;
        tokio::spawn(async move { factory.shutdown().await });
    }
}

/// Follows a sharded controller's view with informer sets.
pub(crate) struct Follower<K: Resource> {
    pub(crate) name: String,
    pub(crate) field: ShardField,
    pub(crate) shard: Shard,
    pub(crate) base: SharedInformerFactory,
    pub(crate) primary_of: PrimaryOf<K>,
    pub(crate) primary_predicate: Option<Predicate>,
    pub(crate) sources: Vec<SourceFn>,
    pub(crate) enq: Enqueuer,
    /// The primary's group and kind (for the stale-cache gate's ledger).
    pub(crate) primary_group: String,
    pub(crate) primary_kind: String,
    pub(crate) primary_plural: String,
    pub(crate) caches: Caches<K>,
    /// The controller handle's factory (what `ControllerHandle::informer`
    /// reads).
    pub(crate) handle_factory: Arc<RwLock<SharedInformerFactory>>,
    pub(crate) attach: Option<AttachAll>,
    /// Called once the first set is live.
    pub(crate) on_first_sync: Box<dyn Fn() + Send + Sync>,
}

/// How often the follower looks at the shard's state.
const TICK: Duration = Duration::from_millis(50);

impl<K> Follower<K>
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    fn build(&self, view: View, selector: ShardSelector) -> Option<InformerSet<K>> {
        let factory = self.base.with_shard_selector(selector.clone());
        let primary = (self.primary_of)(&factory);
        let quiet = Arc::new(AtomicBool::new(true));
        let enq = self.enq.clone().quiet_initial(quiet.clone());
        let mut handles = Vec::new();
        let registered = primary
            .add_event_handler(PrimaryHandler {
                enq: enq.for_type(
                    &primary,
                    &self.primary_group,
                    &self.primary_kind,
                    &self.primary_plural,
                ),
                predicate: self.primary_predicate.clone(),
            })
            .map(|reg| source_handle(&primary, reg));
        let all = std::iter::once(registered)
            .chain(self.sources.iter().map(|s| s(&factory, enq.clone())));
        for h in all {
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    tracing::warn!(controller = %self.name, error = %e, "registering the handlers of a sharded informer set failed; retrying");
                    for h in handles {
                        (h.remove)();
                    }
                    return None;
                }
            }
        }
        if let Some(attach) = &self.attach {
            attach(&handles);
        }
        factory.start();
        Some(InformerSet {
            view,
            selector,
            factory,
            primary,
            handles,
            quiet,
        })
    }

    /// Runs until `stop`, then stops every informer it started.
    pub(crate) async fn run(self, stop: CancellationToken) {
        let me = self.shard.config().identity.clone();
        let mut current: Option<InformerSet<K>> = None;
        let mut candidate: Option<InformerSet<K>> = None;
        let mut no_slots_logged = false;
        while !stop.is_cancelled() {
            let st = self.shard.status();
            let target = match (&st.pending, st.members.is_empty()) {
                (Some(p), _) => Some(View::new(p.clone())),
                (None, false) => Some(View::new(st.members.clone())),
                (None, true) => None,
            };
            if let Some(target) = target {
                match selector_of(&target, &me, self.field) {
                    None => {
                        if !no_slots_logged {
                            no_slots_logged = true;
                            tracing::warn!(controller = %self.name, members = target.len(), "this replica owns no hash slot in the view: too many replicas for the slots");
                        }
                    }
                    Some(selector) => {
                        if current.as_ref().is_some_and(|c| c.selector == selector) {
                            if let Some(c) = &mut current {
                                c.view = target;
                            }
                            if let Some(c) = candidate.take() {
                                c.retire();
                            }
                        } else {
                            if candidate.as_ref().is_some_and(|c| c.selector != selector)
                                && let Some(c) = candidate.take()
                            {
                                c.retire();
                            }
                            if candidate.is_none() {
                                candidate = self.build(target.clone(), selector);
                            }
                            if let Some(c) = &mut candidate {
                                c.view = target;
                            }
                            let acked = st.pending.is_none()
                                && candidate
                                    .as_ref()
                                    .is_some_and(|c| c.view.members() == st.members.as_slice());
                            if acked
                                && candidate.as_ref().is_some_and(InformerSet::synced)
                                && let Some(next) = candidate.take()
                            {
                                current = Some(self.switch(current.take(), next));
                            }
                        }
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(TICK) => {}
            }
        }
        for set in [current, candidate].into_iter().flatten() {
            for h in set.handles {
                (h.remove)();
            }
            set.factory.shutdown().await;
        }
    }

    /// Makes `next` the caches, queues the keys it brings, retires `old`.
    fn switch(&self, old: Option<InformerSet<K>>, next: InformerSet<K>) -> InformerSet<K> {
        let old_selector = old.as_ref().map(|o| o.selector.clone());
        self.caches.set(CacheSet {
            primary: next.primary.clone(),
            selector: Some(next.selector.clone()),
        });
        *self.handle_factory.write() = next.factory.clone();
        next.quiet.store(false, Ordering::SeqCst);
        let first = old.is_none();
        let mut gained = 0usize;
        for key in next.primary.indexer().list_keys() {
            let new_here = match (&old_selector, self.caches.point(&key)) {
                (None, _) => true,
                (Some(s), Some(p)) => !s.contains(p),
                (Some(_), None) => false,
            };
            if new_here {
                gained += 1;
                let trigger = if first {
                    Trigger::InitialList
                } else {
                    Trigger::Handover
                };
                self.enq.enqueue(key, trigger, first);
            }
        }
        tracing::info!(
            controller = %self.name,
            field = %self.field,
            members = next.view.len(),
            ranges = next.selector.ranges().len(),
            share = format_args!("{:.3}", next.selector.fraction()),
            previous_share = format_args!("{:.3}", old_selector.as_ref().map_or(0.0, ShardSelector::fraction)),
            cached = next.primary.indexer().list_keys().len(),
            new_keys = gained,
            "shard ranges changed: caching the new ranges"
        );
        if let Some(old) = old {
            old.retire();
        }
        if first {
            (self.on_first_sync)();
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, Controller, ControllerError};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
    use kcache_lease::shard::ShardConfig;
    use kcache_lease::testing::InMemoryMembershipStore;

    fn factory() -> SharedInformerFactory {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        SharedInformerFactory::new(kube::Client::try_from(config).unwrap())
    }

    async fn run_err<K>(c: Controller<K>) -> ControllerError
    where
        K: Resource + serde::de::DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Clone + Send + Sync + 'static,
    {
        let noop = |_req: crate::Request<K>, _ctx: Arc<()>| async {
            Ok::<_, std::io::Error>(crate::Action::await_change())
        };
        c.run(noop, Arc::new(())).await.expect_err("rejected")
    }

    fn shard() -> (ShardConfig, InMemoryMembershipStore) {
        (ShardConfig::new("g", "a"), InMemoryMembershipStore::new())
    }

    #[tokio::test]
    async fn a_field_that_cannot_keep_relations_together_is_rejected_with_the_reason() {
        let f = factory();
        let (cfg, store) = shard();
        let e = run_err(
            Controller::<ConfigMap>::new(&f, Config::default())
                .owns::<Secret>()
                .sharded(cfg, store)
                .shard_informers(ShardField::Uid),
        )
        .await;
        assert!(
            matches!(
                e,
                ControllerError::ShardField {
                    field: ShardField::Uid,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("shard on metadata.namespace"), "{e}");

        let (cfg, store) = shard();
        let e = run_err(
            Controller::<Namespace>::new(&f, Config::default())
                .sharded(cfg, store)
                .shard_informers(ShardField::Namespace),
        )
        .await;
        assert!(e.to_string().contains("cluster-scoped"), "{e}");

        let e = run_err(
            Controller::<ConfigMap>::new(&f, Config::default())
                .shard_informers(ShardField::Namespace),
        )
        .await;
        assert!(e.to_string().contains("call `sharded` too"), "{e}");

        let (cfg, store) = shard();
        let e = run_err(
            Controller::<ConfigMap>::for_informer(
                &f,
                f.informer::<ConfigMap>(),
                &(),
                Config::default(),
            )
            .sharded(cfg, store)
            .shard_informers(ShardField::Uid),
        )
        .await;
        assert!(e.to_string().contains("Controller::new"), "{e}");
    }

    #[test]
    fn a_members_selector_is_its_slots() {
        let view = View::new(["a", "b", "c"]);
        let mut total = 0.0;
        for m in ["a", "b", "c"] {
            let s = selector_of(&view, m, ShardField::Namespace).unwrap();
            assert_eq!(s.field(), ShardField::Namespace);
            total += s.fraction();
            for slot in view.slots_of(m, slots()) {
                let start = slots().range(slot).unwrap().start();
                assert!(s.contains(start));
            }
        }
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        assert_eq!(key_namespace("ns/a"), "ns");
        assert_eq!(key_namespace("a"), "");
    }
}
