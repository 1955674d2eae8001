//! The buffer of a streaming list's initial events, by key (below the
//! watch loop that fills it and the streaming-list code that hands it to
//! the store), and how often a slow streaming list is reported.

use std::collections::HashMap;
use std::time::Duration;

use kcache_core::CachedObject;

/// How often a slow streaming list is reported.
pub(super) const WATCH_LIST_PROGRESS: Duration = Duration::from_secs(10);

/// Initial events of a streaming list, by key, in arrival order. Each
/// entry records whether its object was reused from the store.
pub(super) struct InitialBuffer<K> {
    index: HashMap<String, usize>,
    pub(super) items: Vec<Option<(CachedObject<K>, bool)>>,
    pub(super) resource_version: String,
    /// The stored bytes of the objects held (capped).
    pub(super) bytes: usize,
    /// Events dropped as outside the shard.
    pub(super) shard_dropped: usize,
}

impl<K> InitialBuffer<K> {
    pub(super) fn new() -> Self {
        InitialBuffer {
            index: HashMap::new(),
            items: Vec::new(),
            resource_version: String::new(),
            bytes: 0,
            shard_dropped: 0,
        }
    }
    pub(super) fn upsert(&mut self, (obj, reused): (CachedObject<K>, bool)) {
        self.bytes = self.bytes.saturating_add(obj.bytes().len());
        match self.index.get(obj.key()) {
            Some(&i) => {
                if let Some((old, _)) = self.items[i].replace((obj, reused)) {
                    self.bytes -= old.bytes().len();
                }
            }
            None => {
                self.index.insert(obj.key().to_owned(), self.items.len());
                self.items.push(Some((obj, reused)));
            }
        }
    }
    pub(super) fn delete(&mut self, obj: &CachedObject<K>) {
        if let Some(i) = self.index.remove(obj.key())
            && let Some((old, _)) = self.items[i].take()
        {
            self.bytes -= old.bytes().len();
        }
    }
    /// The objects, and how many of them were reused from the store.
    pub(super) fn into_items(self) -> (Vec<CachedObject<K>>, usize) {
        drop(self.index);
        let mut reused = 0;
        let items = self
            .items
            .into_iter()
            .flatten()
            .map(|(o, r)| {
                reused += usize::from(r);
                o
            })
            .collect();
        (items, reused)
    }
}
