//! Where keys come from: the event handlers the controller registers on
//! the primary, owned and watched informers, and the enqueuer that queues
//! each key with the trigger that explains its next reconcile (carried by
//! the queue: [`QueuedKey`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kcache_core::{CachedObject, Metadata, ObjectOrTombstone};
use kcache_informer::{
    HasSynced, InformerError, ResourceEventHandler, ResourceEventHandlerRegistration,
    SharedIndexInformer, SharedInformerFactory,
};
use kcache_lease::Shard;
use kcache_reflector::ReflectorMetricsProvider;
use kcache_workqueue::AddOpts;
use kube::Resource;

use crate::consistency::{TypeCache, WriteLedger};
use crate::predicate::{Predicate, PredicateEvent};
use crate::queued::{KeyQueue, QueuedKey};
use crate::reconciler::Trigger;

/// Queues keys with their trigger.
#[derive(Clone)]
pub(crate) struct Enqueuer {
    pub(crate) queue: KeyQueue,
    low_priority: i32,
    /// Sharded: keys this replica does not own are not queued.
    shard: Option<Shard>,
    /// While set, initial-list adds are not queued (a sharded informer
    /// set that is not live yet).
    quiet: Option<Arc<AtomicBool>>,
    /// What the controller's writes returned: each source registers its
    /// type's cache there.
    ledger: Option<Arc<WriteLedger>>,
    /// The cache of the type this enqueuer's handler gets events of, when
    /// the events of the controller's own writes are skipped.
    own: Option<Arc<TypeCache>>,
}

impl Enqueuer {
    pub(crate) fn new(queue: KeyQueue, low_priority: i32) -> Self {
        Self {
            queue,
            low_priority,
            shard: None,
            quiet: None,
            ledger: None,
            own: None,
        }
    }

    /// This enqueuer, registering the caches of its sources in `ledger`.
    pub(crate) fn with_ledger(mut self, ledger: Arc<WriteLedger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// The enqueuer of a handler on `informer` (objects of `group`/`kind`):
    /// registers the informer's cache with the controller's ledger (for the
    /// stale-cache gate and own reads), and with `skip_own_events` the
    /// handler skips the events of the controller's own writes.
    pub(crate) fn for_type<K>(
        &self,
        informer: &SharedIndexInformer<K>,
        group: &str,
        kind: &str,
        plural: &str,
    ) -> Self
    where
        K: Resource + Send + Sync + 'static,
        K::DynamicType: Clone + Send + Sync + 'static,
    {
        let mut enq = self.clone();
        if let Some(ledger) = &self.ledger
            && ledger.recording()
        {
            let cache = TypeCache::of(informer, kind, plural);
            ledger.register(group, cache.clone());
            if ledger.config().is_some_and(|c| c.skip_own_events) {
                enq.own = Some(cache);
            }
        }
        enq
    }

    /// Whether a live event of `obj` is the result of this controller's
    /// own write (only with `skip_own_events`): then it queues nothing.
    pub(crate) fn is_own_event<T>(&self, obj: &CachedObject<T>) -> bool {
        self.own
            .as_ref()
            .is_some_and(|c| c.is_own_event(obj.key(), obj.resource_version(), obj.uid()))
    }

    /// A deletion of `obj`: the controller's own delete queues nothing
    /// (only with `skip_own_events`): a DELETED event at the version its
    /// delete returned, or a relist's tombstone (the watch missed the
    /// deletion) of an object whose last own write was that delete.
    pub(crate) fn is_own_delete<T>(&self, obj: &ObjectOrTombstone<T>) -> bool {
        let Some(c) = &self.own else { return false };
        match obj {
            ObjectOrTombstone::Object(o) => c.is_own_deletion(o.key(), o.uid()),
            ObjectOrTombstone::Tombstone(t) => c.is_own_deletion(&t.key, t.obj.uid()),
        }
    }

    /// This enqueuer, dropping initial-list adds while `quiet` is set.
    pub(crate) fn quiet_initial(mut self, quiet: Arc<AtomicBool>) -> Self {
        self.quiet = Some(quiet);
        self
    }

    /// Queues initial-list adds again (a standby that took over).
    pub(crate) fn end_quiet(&self) {
        if let Some(q) = &self.quiet {
            q.store(false, Ordering::SeqCst);
        }
    }

    pub(crate) fn with_shard(mut self, shard: Option<Shard>) -> Self {
        self.shard = shard;
        self
    }

    /// Whether `key` may be queued: not while the queue shuts down, not a
    /// key of another shard.
    fn may_queue(&self, key: &str) -> bool {
        !self.queue.shutting_down() && self.shard.as_ref().is_none_or(|s| s.owns(key))
    }

    pub(crate) fn enqueue(&self, key: String, trigger: Trigger, initial: bool) {
        if initial
            && self
                .quiet
                .as_ref()
                .is_some_and(|q| q.load(Ordering::SeqCst))
        {
            return;
        }
        if !self.may_queue(&key) {
            return;
        }
        let item = QueuedKey::new(key, trigger);
        if initial {
            self.queue
                .add_with_opts(item, AddOpts::priority(self.low_priority));
        } else {
            self.queue.add(item);
        }
    }

    pub(crate) fn requeue_after(&self, key: String, after: Duration) {
        if self.may_queue(&key) {
            self.queue
                .add_after(QueuedKey::new(key, Trigger::Requeue), after);
        }
    }

    /// Queues `key` through the rate limiter; the wait it got.
    pub(crate) fn retry(&self, key: String) -> Option<Duration> {
        if self.may_queue(&key) {
            self.queue
                .add_rate_limited(QueuedKey::new(key, Trigger::Retry))
        } else {
            None
        }
    }
}

/// The key of the object that controls `meta` (its `controller: true`
/// ownerReference), when that owner is of `owner_kind` in `owner_group`
/// (the version is ignored, like controller-runtime). Owner references are
/// namespace-local: a namespaced owner's key is `<child namespace>/<owner
/// name>`; a cluster-scoped owner's key is its name.
pub fn owner_key(
    meta: &Metadata,
    owner_group: &str,
    owner_kind: &str,
    owner_namespaced: bool,
) -> Option<String> {
    let r = meta.controller_ref()?;
    let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if r.kind != owner_kind || group != owner_group || r.name.is_empty() {
        return None;
    }
    match (owner_namespaced, meta.namespace()) {
        (true, Some(ns)) => Some(format!("{ns}/{}", r.name)),
        (true, None) => None,
        (false, _) => Some(r.name.clone()),
    }
}

fn passes(p: &Option<Predicate>, ev: PredicateEvent<'_>) -> bool {
    p.as_ref().is_none_or(|p| p.evaluate(&ev))
}

/// Whether an update of an owned or watched object is passed on to the
/// keys it maps to: not a resync (a resync of such an object says nothing
/// new about its owner or mapped keys), and the predicate passes.
fn related_update_passes<T>(
    p: &Option<Predicate>,
    old: &CachedObject<T>,
    new: &CachedObject<T>,
) -> bool {
    let ev = PredicateEvent::Update {
        old: old.meta(),
        new: new.meta(),
    };
    old.resource_version() != new.resource_version() && passes(p, ev)
}

pub(crate) struct PrimaryHandler {
    pub(crate) enq: Enqueuer,
    pub(crate) predicate: Option<Predicate>,
}

impl<K: 'static> ResourceEventHandler<K> for PrimaryHandler {
    fn on_add(&self, obj: &CachedObject<K>, initial: bool) {
        if !initial && self.enq.is_own_event(obj) {
            return;
        }
        if passes(&self.predicate, PredicateEvent::Create(obj.meta())) {
            let trigger = if initial {
                Trigger::InitialList
            } else {
                Trigger::Added
            };
            self.enq.enqueue(obj.key().to_owned(), trigger, initial);
        }
    }
    fn on_update(&self, old: &CachedObject<K>, new: &CachedObject<K>) {
        // also a relist's (or a resync's) same-version update: the version
        // is still the controller's own write
        if self.enq.is_own_event(new) {
            return;
        }
        let ev = PredicateEvent::Update {
            old: old.meta(),
            new: new.meta(),
        };
        if passes(&self.predicate, ev) {
            let trigger = if old.resource_version() == new.resource_version() {
                Trigger::Resync
            } else {
                Trigger::Updated
            };
            self.enq.enqueue(new.key().to_owned(), trigger, false);
        }
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<K>) {
        if self.enq.is_own_delete(obj) {
            return;
        }
        if passes(&self.predicate, PredicateEvent::Delete(obj.object().meta())) {
            self.enq
                .enqueue(obj.key().to_owned(), Trigger::Deleted, false);
        }
    }
}

pub(crate) struct OwnedHandler {
    pub(crate) enq: Enqueuer,
    pub(crate) owner_group: String,
    pub(crate) owner_kind: String,
    pub(crate) owner_namespaced: bool,
    pub(crate) kind: String,
    pub(crate) predicate: Option<Predicate>,
}

impl OwnedHandler {
    fn send(&self, meta: &Metadata, child_key: &str, initial: bool) {
        if let Some(key) = owner_key(
            meta,
            &self.owner_group,
            &self.owner_kind,
            self.owner_namespaced,
        ) {
            let trigger = Trigger::Owned {
                kind: self.kind.clone(),
                key: child_key.to_owned(),
            };
            self.enq.enqueue(key, trigger, initial);
        }
    }
}

impl<K: 'static> ResourceEventHandler<K> for OwnedHandler {
    fn on_add(&self, obj: &CachedObject<K>, initial: bool) {
        if !initial && self.enq.is_own_event(obj) {
            return;
        }
        if passes(&self.predicate, PredicateEvent::Create(obj.meta())) {
            self.send(obj.meta(), obj.key(), initial);
        }
    }
    fn on_update(&self, old: &CachedObject<K>, new: &CachedObject<K>) {
        if related_update_passes(&self.predicate, old, new) && !self.enq.is_own_event(new) {
            // Both owners: a changed controller reference concerns the old
            // owner too.
            self.send(new.meta(), new.key(), false);
            if old.meta().controller_ref() != new.meta().controller_ref() {
                self.send(old.meta(), old.key(), false);
            }
        }
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<K>) {
        if self.enq.is_own_delete(obj) {
            return;
        }
        if passes(&self.predicate, PredicateEvent::Delete(obj.object().meta())) {
            self.send(obj.object().meta(), obj.key(), false);
        }
    }
}

pub(crate) type Mapper<O> = Arc<dyn Fn(&CachedObject<O>) -> Vec<String> + Send + Sync>;

pub(crate) struct WatchHandler<O> {
    pub(crate) enq: Enqueuer,
    pub(crate) mapper: Mapper<O>,
    pub(crate) kind: String,
    pub(crate) predicate: Option<Predicate>,
}

impl<O> WatchHandler<O> {
    fn send(&self, obj: &CachedObject<O>, initial: bool, seen: &mut Vec<String>) {
        for key in (self.mapper)(obj) {
            if seen.contains(&key) {
                continue;
            }
            seen.push(key.clone());
            let trigger = Trigger::Watched {
                kind: self.kind.clone(),
                key: obj.key().to_owned(),
            };
            self.enq.enqueue(key, trigger, initial);
        }
    }
}

impl<O: 'static> ResourceEventHandler<O> for WatchHandler<O> {
    fn on_add(&self, obj: &CachedObject<O>, initial: bool) {
        if !initial && self.enq.is_own_event(obj) {
            return;
        }
        if passes(&self.predicate, PredicateEvent::Create(obj.meta())) {
            self.send(obj, initial, &mut Vec::new());
        }
    }
    fn on_update(&self, old: &CachedObject<O>, new: &CachedObject<O>) {
        if related_update_passes(&self.predicate, old, new) && !self.enq.is_own_event(new) {
            let mut seen = Vec::new();
            self.send(new, false, &mut seen);
            self.send(old, false, &mut seen);
        }
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<O>) {
        if self.enq.is_own_delete(obj) {
            return;
        }
        if passes(&self.predicate, PredicateEvent::Delete(obj.object().meta())) {
            self.send(obj.object(), false, &mut Vec::new());
        }
    }
}

/// What the controller keeps of a registered source.
pub(crate) struct SourceHandle {
    pub(crate) synced: Box<dyn HasSynced>,
    pub(crate) remove: Box<dyn FnOnce() + Send>,
    pub(crate) probe: Probe,
    /// Sets the informer's metrics provider, and its reflector's when it
    /// has not started.
    pub(crate) attach_metrics: AttachMetrics,
}

/// Gives an informer its metrics providers.
pub(crate) type AttachMetrics = Box<
    dyn Fn(
            Arc<dyn kcache_informer::InformerMetricsProvider>,
            Option<Arc<dyn ReflectorMetricsProvider>>,
        ) + Send
        + Sync,
>;

/// An informer's state, as a cache-sync timeout names it.
pub(crate) struct InformerStatus {
    pub(crate) name: String,
    pub(crate) last_error: Option<String>,
}

/// Reads an informer's [`InformerStatus`].
pub(crate) type Probe = Arc<dyn Fn() -> InformerStatus + Send + Sync>;

/// Registers a source's handler (with the controller's enqueuer) when the
/// controller runs.
/// Called once per informer factory: once unsharded, once per informer set
/// with sharded informers.
pub(crate) type SourceFn = Arc<
    dyn Fn(&SharedInformerFactory, Enqueuer) -> Result<SourceHandle, InformerError> + Send + Sync,
>;

fn probe_of<K>(informer: &SharedIndexInformer<K>) -> Probe
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let informer = informer.clone();
    Arc::new(move || InformerStatus {
        name: informer.name().to_owned(),
        last_error: informer.last_error(),
    })
}

/// The source that, for each informer factory the controller runs, registers
/// on the factory's informer of `K` the handler `handler` builds from the
/// controller's enqueuer.
pub(crate) fn source<K, H>(handler: impl Fn(Enqueuer) -> H + Send + Sync + 'static) -> SourceFn
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Default + Clone + Send + Sync + 'static,
    H: ResourceEventHandler<K>,
{
    Arc::new(move |factory, enq| {
        let informer = factory.informer::<K>();
        let dyntype = K::DynamicType::default();
        let enq = enq.for_type(
            &informer,
            &K::group(&dyntype),
            &K::kind(&dyntype),
            &K::plural(&dyntype),
        );
        let registration = informer.add_event_handler(handler(enq))?;
        Ok(source_handle(&informer, registration))
    })
}

pub(crate) fn source_handle<K>(
    informer: &SharedIndexInformer<K>,
    registration: ResourceEventHandlerRegistration<K>,
) -> SourceHandle
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let registration = Arc::new(registration);
    let remove = {
        let informer = informer.clone();
        let registration = registration.clone();
        Box::new(move || informer.remove_event_handler(&registration)) as Box<dyn FnOnce() + Send>
    };
    SourceHandle {
        synced: Box::new(ArcSynced(registration)),
        remove,
        probe: probe_of(informer),
        attach_metrics: {
            let informer = informer.clone();
            Box::new(move |m, r| {
                informer.set_metrics(m);
                if let Some(r) = r {
                    informer.set_reflector_metrics(r);
                }
            })
        },
    }
}

struct ArcSynced<K: Resource>(Arc<ResourceEventHandlerRegistration<K>>);

impl<K: Resource + 'static> HasSynced for ArcSynced<K> {
    fn has_synced(&self) -> bool {
        self.0.has_synced()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Obj = serde_json::Value;

    fn obj(v: serde_json::Value) -> CachedObject<Obj> {
        CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
    }

    fn child(
        ns: &str,
        name: &str,
        rv: &str,
        owner: Option<(&str, &str, &str, bool)>,
    ) -> CachedObject<Obj> {
        let refs: Vec<serde_json::Value> = owner
            .into_iter()
            .map(|(api, kind, name, controller)| {
                json!({"apiVersion": api, "kind": kind, "name": name, "uid": "u1", "controller": controller})
            })
            .collect();
        obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "ownerReferences": refs}}))
    }

    fn enqueuer() -> (Enqueuer, KeyQueue) {
        let q = crate::queued::builder().strict_priority().build().unwrap();
        (Enqueuer::new(q.clone(), crate::INITIAL_LIST_PRIORITY), q)
    }

    /// The queued keys with their triggers, in the order handed out.
    async fn drain_triggers(q: &KeyQueue) -> Vec<(String, Trigger)> {
        let mut out = Vec::new();
        while !q.is_empty() {
            let k = q.get().await.unwrap();
            q.done(&k);
            out.push((k.key, k.trigger));
        }
        out
    }

    async fn drain(q: &KeyQueue) -> Vec<String> {
        drain_triggers(q)
            .await
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    #[test]
    fn owner_key_follows_the_controller_reference() {
        const GROUP: &str = "samplecontroller.k8s.io";
        // ns1/web, referring to the Foo foo-a with `api_version`, as its
        // controller or not
        let owned_by = |api_version, controller| {
            child(
                "ns1",
                "web",
                "1",
                Some((api_version, "Foo", "foo-a", controller)),
            )
        };
        let c = owned_by("samplecontroller.k8s.io/v1alpha1", true);
        assert_eq!(
            owner_key(c.meta(), GROUP, "Foo", true).as_deref(),
            Some("ns1/foo-a")
        );
        // the version does not matter, the group and kind do
        let c2 = owned_by("samplecontroller.k8s.io/v1", true);
        assert!(owner_key(c2.meta(), GROUP, "Foo", true).is_some());
        assert!(owner_key(c.meta(), "other.io", "Foo", true).is_none());
        assert!(owner_key(c.meta(), GROUP, "Bar", true).is_none());
        // a cluster-scoped owner is keyed by name
        assert_eq!(
            owner_key(c.meta(), GROUP, "Foo", false).as_deref(),
            Some("foo-a")
        );
        // not a controller reference
        let c3 = owned_by("samplecontroller.k8s.io/v1alpha1", false);
        assert!(owner_key(c3.meta(), GROUP, "Foo", true).is_none());
        // core group owner ("v1")
        let c4 = child("ns1", "web", "1", Some(("v1", "ConfigMap", "cm", true)));
        assert_eq!(
            owner_key(c4.meta(), "", "ConfigMap", true).as_deref(),
            Some("ns1/cm")
        );
        let none = child("ns1", "web", "1", None);
        assert!(owner_key(none.meta(), "", "ConfigMap", true).is_none());
    }

    #[tokio::test]
    async fn owned_events_enqueue_the_owner() {
        let (enq, q) = enqueuer();
        let h = OwnedHandler {
            enq: enq.clone(),
            owner_group: "samplecontroller.k8s.io".into(),
            owner_kind: "Foo".into(),
            owner_namespaced: true,
            kind: "Deployment".into(),
            predicate: None,
        };
        // ns/d1 at resourceVersion `rv`, controlled by the Foo `foo`
        let d1 = |rv, foo| {
            let owner = ("samplecontroller.k8s.io/v1alpha1", "Foo", foo, true);
            child("ns", "d1", rv, Some(owner))
        };
        let (a, a2, b) = (d1("1", "foo-a"), d1("2", "foo-a"), d1("3", "foo-b"));
        let stranger = child("ns", "d2", "1", None);
        ResourceEventHandler::<Obj>::on_add(&h, &a, false);
        ResourceEventHandler::<Obj>::on_add(&h, &stranger, false);
        assert_eq!(
            drain_triggers(&q).await,
            [(
                "ns/foo-a".to_owned(),
                Trigger::Owned {
                    kind: "Deployment".into(),
                    key: "ns/d1".into()
                }
            )]
        );
        // a resync (same resourceVersion) is ignored
        ResourceEventHandler::<Obj>::on_update(&h, &a, &a);
        assert!(q.is_empty());
        ResourceEventHandler::<Obj>::on_update(&h, &a, &a2);
        assert_eq!(drain(&q).await, ["ns/foo-a"]);
        // a changed controller: both owners
        ResourceEventHandler::<Obj>::on_update(&h, &a2, &b);
        let mut got = drain(&q).await;
        got.sort();
        assert_eq!(got, ["ns/foo-a", "ns/foo-b"]);
        ResourceEventHandler::<Obj>::on_delete(&h, &ObjectOrTombstone::Object(b.clone()));
        assert_eq!(drain(&q).await, ["ns/foo-b"]);
    }

    #[tokio::test]
    async fn watched_events_go_through_the_mapper() {
        let (enq, q) = enqueuer();
        let h = WatchHandler::<Obj> {
            enq,
            mapper: Arc::new(|o: &CachedObject<Obj>| {
                o.labels()
                    .get("app")
                    .map(|a| {
                        vec![
                            format!("{}/{a}", o.namespace().unwrap_or_default()),
                            "other/x".to_owned(),
                        ]
                    })
                    .unwrap_or_default()
            }),
            kind: "ConfigMap".into(),
            predicate: None,
        };
        let cm = |rv: &str, app: &str| {
            obj(
                json!({"metadata": {"name": "cm", "namespace": "ns", "resourceVersion": rv, "labels": {"app": app}}}),
            )
        };
        ResourceEventHandler::<Obj>::on_add(&h, &cm("1", "web"), false);
        let mut got = drain(&q).await;
        got.sort();
        assert_eq!(got, ["ns/web", "other/x"]);
        // update: old and new mapped, duplicates once
        ResourceEventHandler::<Obj>::on_update(&h, &cm("1", "web"), &cm("2", "api"));
        let mut got = drain(&q).await;
        got.sort();
        assert_eq!(got, ["ns/api", "ns/web", "other/x"]);
    }

    #[tokio::test]
    async fn primary_events_pass_the_predicate_and_initial_list_is_low_priority() {
        let (enq, q) = enqueuer();
        let h = PrimaryHandler {
            enq: enq.clone(),
            predicate: Some(Predicate::generation_changed()),
        };
        let foo = |name: &str, rv: &str, generation: i64| {
            obj(
                json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "generation": generation}}),
            )
        };
        ResourceEventHandler::<Obj>::on_add(&h, &foo("old", "1", 1), true);
        ResourceEventHandler::<Obj>::on_add(&h, &foo("live", "2", 1), false);
        // live changes first, then the initial list
        assert_eq!(
            drain_triggers(&q).await,
            [
                ("ns/live".to_owned(), Trigger::Added),
                ("ns/old".to_owned(), Trigger::InitialList)
            ]
        );
        // status-only update (same generation) filtered; spec change passes
        ResourceEventHandler::<Obj>::on_update(&h, &foo("a", "3", 1), &foo("a", "4", 1));
        assert!(q.is_empty());
        ResourceEventHandler::<Obj>::on_update(&h, &foo("a", "4", 1), &foo("a", "5", 2));
        assert_eq!(
            drain_triggers(&q).await,
            [("ns/a".to_owned(), Trigger::Updated)]
        );
        ResourceEventHandler::<Obj>::on_delete(&h, &ObjectOrTombstone::Object(foo("a", "5", 2)));
        assert_eq!(
            drain_triggers(&q).await,
            [("ns/a".to_owned(), Trigger::Deleted)]
        );
    }

    #[tokio::test]
    async fn a_live_change_replaces_a_requeue_as_trigger() {
        let (enq, q) = enqueuer();
        enq.requeue_after("ns/a".into(), Duration::from_secs(60));
        enq.enqueue("ns/a".into(), Trigger::Updated, false);
        enq.retry("ns/a".into());
        assert_eq!(
            drain_triggers(&q).await,
            [("ns/a".to_owned(), Trigger::Updated)]
        );
        enq.enqueue("ns/b".into(), Trigger::Added, false);
        enq.enqueue("ns/b".into(), Trigger::Updated, false);
        assert_eq!(
            drain_triggers(&q).await,
            [("ns/b".to_owned(), Trigger::Added)],
            "the first cause stays"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_controller_queue_takes_only_owned_keys() {
        use kcache_lease::shard::{ShardConfig, ShardError, ShardHooks, View};
        use kcache_lease::testing::InMemoryMembershipStore;
        use tokio::task::JoinHandle;
        use tokio_util::sync::CancellationToken;

        let cfg = |id: &str| {
            ShardConfig::new("group-a", id)
                .lease_duration(Duration::from_secs(4))
                .renew_deadline(Duration::from_secs(3))
                .retry_period(Duration::from_millis(500))
        };
        let quiet_hooks = |keys: Arc<Vec<String>>| ShardHooks {
            keys: Box::new(move || keys.to_vec()),
            gained: Box::new(|_| {}),
        };

        let store = InMemoryMembershipStore::new();
        let keys: Arc<Vec<String>> = Arc::new((0..100).map(|i| format!("ns/k{i}")).collect());
        type Running = (Shard, CancellationToken, JoinHandle<Result<(), ShardError>>);
        let shards: Vec<Running> = ["a", "b"]
            .iter()
            .map(|id| {
                let s = Shard::new(cfg(id).replicas_hint(2), store.clone());
                let stop = CancellationToken::new();
                let t = tokio::spawn({
                    let (s, stop, hooks) = (s.clone(), stop.clone(), quiet_hooks(keys.clone()));
                    async move { s.run(stop, hooks).await }
                });
                (s, stop, t)
            })
            .collect();
        while !shards.iter().all(|(s, _, _)| s.status().settled()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let a = &shards[0].0;
        let q = crate::queued::builder().build().unwrap();
        let enq = Enqueuer::new(q.clone(), -100).with_shard(Some(a.clone()));
        for k in keys.iter() {
            enq.enqueue(k.clone(), Trigger::Added, false);
        }
        let owned: Vec<&String> = keys.iter().filter(|k| a.owns(k)).collect();
        assert!(!owned.is_empty() && owned.len() < keys.len());
        assert_eq!(q.len(), owned.len(), "only a's keys are queued");
        let view = View::new(["a", "b"]);
        assert!(owned.iter().all(|k| view.owned_by(k, "a")));
        // an unsharded queue takes everything
        let q2 = crate::queued::builder().build().unwrap();
        let all = Enqueuer::new(q2.clone(), -100);
        for k in keys.iter() {
            all.enqueue(k.clone(), Trigger::Added, false);
        }
        assert_eq!(q2.len(), keys.len());
        for (_, stop, t) in shards {
            stop.cancel();
            t.await.unwrap().unwrap();
        }
    }
}
