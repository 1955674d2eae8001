//! A handler that records every notification.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use kcache_core::{CachedObject, ObjectOrTombstone};
use kcache_informer::ResourceEventHandler;

/// One notification: (kind, key, resourceVersion, initial list / tombstone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub kind: &'static str,
    pub key: String,
    pub rv: String,
    /// adds: in the initial list; deletes: a tombstone
    pub flag: bool,
}

/// Records every notification. Cheap to clone.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Recorder {
    pub fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
    pub fn of(&self, key: &str) -> Vec<Seen> {
        self.all().into_iter().filter(|s| s.key == key).collect()
    }
    /// The keys of the notifications of this kind.
    pub fn keys(&self, kind: &str) -> BTreeSet<String> {
        self.all()
            .into_iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.key)
            .collect()
    }
    /// The state the handler saw: key -> rv after every notification.
    pub fn view(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        for s in self.all() {
            if s.kind == "delete" {
                m.remove(&s.key);
            } else {
                m.insert(s.key, s.rv);
            }
        }
        m
    }
    fn push(&self, kind: &'static str, key: &str, rv: Option<&str>, flag: bool) {
        self.0.lock().unwrap().push(Seen {
            kind,
            key: key.to_owned(),
            rv: rv.unwrap_or_default().to_owned(),
            flag,
        });
    }
}

impl<K: 'static> ResourceEventHandler<K> for Recorder {
    fn on_add(&self, o: &CachedObject<K>, initial: bool) {
        self.push("add", o.key(), o.resource_version(), initial);
    }
    fn on_update(&self, _old: &CachedObject<K>, o: &CachedObject<K>) {
        self.push("update", o.key(), o.resource_version(), false);
    }
    fn on_delete(&self, o: &ObjectOrTombstone<K>) {
        self.push(
            "delete",
            o.key(),
            o.object().resource_version(),
            o.is_tombstone(),
        );
    }
}
