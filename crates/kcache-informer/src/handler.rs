//! Event handlers: the trait, closure helpers and the filtering wrapper.

use std::sync::Arc;

use kcache_core::{CachedObject, ObjectOrTombstone};

/// Receives the changes an informer observes, in order, for one handler.
///
/// Methods are called on the handler's own listener thread, one at a time:
/// a slow handler delays only itself. Handlers should be quick (typically:
/// compute a key and add it to a work queue); objects are reference-counted
/// handles, cheap to keep, with metadata at hand and
/// [`CachedObject::decode`] for the typed value.
pub trait ResourceEventHandler<K>: Send + Sync + 'static {
    /// An object was added. `is_in_initial_list` is true for objects of the
    /// informer's initial list (and for the cache replayed to a handler
    /// added late), false for live changes.
    fn on_add(&self, obj: &CachedObject<K>, is_in_initial_list: bool) {
        let _ = (obj, is_in_initial_list);
    }
    /// An object changed (or, with a resync, did not: then
    /// `old.resource_version() == new.resource_version()`).
    fn on_update(&self, old: &CachedObject<K>, new: &CachedObject<K>) {
        let _ = (old, new);
    }
    /// An object was deleted. When a relist found it gone without a delete
    /// event having been seen, this is a tombstone
    /// ([`ObjectOrTombstone::Tombstone`]) carrying the last known state.
    fn on_delete(&self, obj: &ObjectOrTombstone<K>) {
        let _ = obj;
    }
}

impl<K: 'static, H: ResourceEventHandler<K> + ?Sized> ResourceEventHandler<K> for Arc<H> {
    fn on_add(&self, obj: &CachedObject<K>, is_in_initial_list: bool) {
        (**self).on_add(obj, is_in_initial_list)
    }
    fn on_update(&self, old: &CachedObject<K>, new: &CachedObject<K>) {
        (**self).on_update(old, new)
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<K>) {
        (**self).on_delete(obj)
    }
}

type AddFn<K> = Box<dyn Fn(&CachedObject<K>, bool) + Send + Sync>;
type UpdateFn<K> = Box<dyn Fn(&CachedObject<K>, &CachedObject<K>) + Send + Sync>;
type DeleteFn<K> = Box<dyn Fn(&ObjectOrTombstone<K>) + Send + Sync>;

/// A handler made of closures; any left out do nothing
/// (client-go's `ResourceEventHandlerFuncs`).
///
/// ```
/// use kcache_informer::ResourceEventHandlerFuncs;
/// # type K = serde_json::Value;
/// let handler = ResourceEventHandlerFuncs::<K>::new()
///     .add_func(|obj, _initial| println!("added {}", obj.key()))
///     .delete_func(|obj| println!("deleted {}", obj.key()));
/// # let _ = handler;
/// ```
pub struct ResourceEventHandlerFuncs<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for ResourceEventHandlerFuncs<K> {
    fn default() -> Self {
        Self {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> ResourceEventHandlerFuncs<K> {
    /// A handler that ignores everything until closures are set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the add closure (client-go's `AddFunc`).
    pub fn add_func(mut self, f: impl Fn(&CachedObject<K>, bool) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }
    /// Sets the update closure (client-go's `UpdateFunc`).
    pub fn update_func(
        mut self,
        f: impl Fn(&CachedObject<K>, &CachedObject<K>) + Send + Sync + 'static,
    ) -> Self {
        self.update = Some(Box::new(f));
        self
    }
    /// Sets the delete closure (client-go's `DeleteFunc`).
    pub fn delete_func(
        mut self,
        f: impl Fn(&ObjectOrTombstone<K>) + Send + Sync + 'static,
    ) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: 'static> ResourceEventHandler<K> for ResourceEventHandlerFuncs<K> {
    fn on_add(&self, obj: &CachedObject<K>, is_in_initial_list: bool) {
        if let Some(f) = &self.add {
            f(obj, is_in_initial_list)
        }
    }
    fn on_update(&self, old: &CachedObject<K>, new: &CachedObject<K>) {
        if let Some(f) = &self.update {
            f(old, new)
        }
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<K>) {
        if let Some(f) = &self.delete {
            f(obj)
        }
    }
}

/// Passes on only the objects a filter accepts, translating updates as
/// client-go's `FilteringResourceEventHandler` does:
///
/// | old passes | new passes | delivered |
/// |---|---|---|
/// | yes | yes | `on_update(old, new)` |
/// | no | yes | `on_add(new, false)` |
/// | yes | no | `on_delete(old)` |
/// | no | no | nothing |
///
/// A delete passes when the object (or the tombstone's last known state)
/// passes.
pub struct FilteringResourceEventHandler<K, F, H> {
    filter: F,
    handler: H,
    _k: std::marker::PhantomData<fn(K)>,
}

impl<K, F, H> FilteringResourceEventHandler<K, F, H>
where
    F: Fn(&CachedObject<K>) -> bool + Send + Sync + 'static,
    H: ResourceEventHandler<K>,
{
    /// Wraps `handler` with `filter` (evaluated on cached metadata, no decode
    /// needed).
    pub fn new(filter: F, handler: H) -> Self {
        Self {
            filter,
            handler,
            _k: std::marker::PhantomData,
        }
    }
}

impl<K, F, H> ResourceEventHandler<K> for FilteringResourceEventHandler<K, F, H>
where
    K: 'static,
    F: Fn(&CachedObject<K>) -> bool + Send + Sync + 'static,
    H: ResourceEventHandler<K>,
{
    fn on_add(&self, obj: &CachedObject<K>, is_in_initial_list: bool) {
        if (self.filter)(obj) {
            self.handler.on_add(obj, is_in_initial_list)
        }
    }
    fn on_update(&self, old: &CachedObject<K>, new: &CachedObject<K>) {
        match ((self.filter)(old), (self.filter)(new)) {
            (true, true) => self.handler.on_update(old, new),
            (false, true) => self.handler.on_add(new, false),
            (true, false) => self
                .handler
                .on_delete(&ObjectOrTombstone::Object(old.clone())),
            (false, false) => {}
        }
    }
    fn on_delete(&self, obj: &ObjectOrTombstone<K>) {
        if (self.filter)(obj.object()) {
            self.handler.on_delete(obj)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    type K = serde_json::Value;

    fn obj(name: &str, app: &str) -> CachedObject<K> {
        let json = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"1","labels":{{"app":"{app}"}}}}}}"#
        );
        CachedObject::from_bytes(json.into_bytes()).unwrap()
    }

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);
    impl ResourceEventHandler<K> for Log {
        fn on_add(&self, o: &CachedObject<K>, initial: bool) {
            self.0
                .lock()
                .unwrap()
                .push(format!("add {} {initial}", o.name()));
        }
        fn on_update(&self, _old: &CachedObject<K>, new: &CachedObject<K>) {
            self.0
                .lock()
                .unwrap()
                .push(format!("update {}", new.name()));
        }
        fn on_delete(&self, o: &ObjectOrTombstone<K>) {
            self.0
                .lock()
                .unwrap()
                .push(format!("delete {}", o.object().name()));
        }
    }

    #[test]
    fn filtering_translates_updates_like_client_go() {
        let log = Arc::new(Log::default());
        let h = FilteringResourceEventHandler::new(
            |o: &CachedObject<K>| o.labels().get("app") == Some("web"),
            log.clone(),
        );
        let (web, db) = (obj("x", "web"), obj("x", "db"));
        h.on_update(&web, &web); // both pass
        h.on_update(&db, &web); // only new passes
        h.on_update(&web, &db); // only old passes
        h.on_update(&db, &db); // neither
        h.on_add(&db, true); // filtered out
        h.on_add(&web, true);
        h.on_delete(&ObjectOrTombstone::Object(db.clone())); // filtered out
        h.on_delete(&ObjectOrTombstone::Object(web.clone()));
        assert_eq!(
            *log.0.lock().unwrap(),
            [
                "update x",
                "add x false",
                "delete x",
                "add x true",
                "delete x"
            ]
        );
    }

    #[test]
    fn funcs_call_only_what_is_set() {
        let adds = Arc::new(Mutex::new(0));
        let a2 = adds.clone();
        let h =
            ResourceEventHandlerFuncs::<K>::new().add_func(move |_, _| *a2.lock().unwrap() += 1);
        let o = obj("x", "web");
        h.on_add(&o, false);
        h.on_update(&o, &o);
        h.on_delete(&ObjectOrTombstone::Object(o));
        assert_eq!(*adds.lock().unwrap(), 1);
    }
}
