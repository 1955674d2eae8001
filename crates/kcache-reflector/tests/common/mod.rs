//! Shared test helpers: a recording store.
#![allow(dead_code)]

use std::time::Duration;

use kcache_core::{CachedObject, ObjectOrTombstone, ReflectorStore, StoreError};
use parking_lot::Mutex;
use tokio::sync::watch;

/// One call the reflector made on the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Add(String, String),
    Update(String, String),
    Delete(String, String),
    /// keys (sorted) and the resource version
    Replace(Vec<String>, String),
    Resync,
    Bookmark(String),
}

/// Records every call; the current state (key -> rv) is derived from them.
pub struct RecordingStore<K> {
    calls: Mutex<Vec<Call>>,
    objects: Mutex<std::collections::BTreeMap<String, CachedObject<K>>>,
    count: watch::Sender<usize>,
    pub fail_adds: std::sync::atomic::AtomicBool,
    pub fail_replace: std::sync::atomic::AtomicUsize,
}

impl<K> Default for RecordingStore<K> {
    fn default() -> Self {
        RecordingStore {
            calls: Mutex::new(Vec::new()),
            objects: Mutex::new(Default::default()),
            count: watch::channel(0).0,
            fail_adds: Default::default(),
            fail_replace: Default::default(),
        }
    }
}

fn rv<K>(o: &CachedObject<K>) -> String {
    o.resource_version().unwrap_or("").to_owned()
}

impl<K> RecordingStore<K> {
    fn push(&self, c: Call) {
        let n = {
            let mut calls = self.calls.lock();
            calls.push(c);
            calls.len()
        };
        self.count.send_replace(n);
    }
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }
    /// Waits until at least `n` calls were made (real or virtual time, 600 s).
    pub async fn wait_calls(&self, n: usize) -> Vec<Call> {
        let mut rx = self.count.subscribe();
        let r = tokio::time::timeout(Duration::from_secs(600), rx.wait_for(|c| *c >= n)).await;
        assert!(
            r.is_ok(),
            "timed out waiting for {n} store calls; got {:#?}",
            self.calls()
        );
        self.calls()
    }
    /// Waits until `pred` holds for the calls.
    pub async fn wait_until(&self, timeout: Duration, pred: impl Fn(&[Call]) -> bool) -> Vec<Call> {
        let mut rx = self.count.subscribe();
        let r = tokio::time::timeout(timeout, rx.wait_for(|_| pred(&self.calls.lock()))).await;
        assert!(r.is_ok(), "condition not met; calls: {:#?}", self.calls());
        self.calls()
    }
    /// key -> resourceVersion of the current content.
    pub fn state(&self) -> std::collections::BTreeMap<String, String> {
        self.objects
            .lock()
            .iter()
            .map(|(k, o)| (k.clone(), rv(o)))
            .collect()
    }
    pub fn object(&self, key: &str) -> Option<CachedObject<K>> {
        self.objects.lock().get(key).cloned()
    }
}

impl<K> ReflectorStore<K> for RecordingStore<K> {
    fn add(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        if self.fail_adds.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StoreError::Other("add refused by the test".into()));
        }
        self.objects
            .lock()
            .insert(obj.key().to_owned(), obj.clone());
        self.push(Call::Add(obj.key().to_owned(), rv(&obj)));
        Ok(())
    }
    fn update(&self, obj: CachedObject<K>) -> Result<(), StoreError> {
        self.objects
            .lock()
            .insert(obj.key().to_owned(), obj.clone());
        self.push(Call::Update(obj.key().to_owned(), rv(&obj)));
        Ok(())
    }
    fn delete(&self, obj: ObjectOrTombstone<K>) -> Result<(), StoreError> {
        self.objects.lock().remove(obj.key());
        self.push(Call::Delete(obj.key().to_owned(), rv(obj.object())));
        Ok(())
    }
    fn replace(
        &self,
        items: Vec<CachedObject<K>>,
        resource_version: String,
    ) -> Result<(), StoreError> {
        if self.fail_replace.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            self.fail_replace
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            return Err(StoreError::Other("replace refused by the test".into()));
        }
        let mut keys: Vec<String> = items.iter().map(|o| o.key().to_owned()).collect();
        keys.sort();
        {
            let mut objs = self.objects.lock();
            objs.clear();
            for o in items {
                objs.insert(o.key().to_owned(), o);
            }
        }
        self.push(Call::Replace(keys, resource_version));
        Ok(())
    }
    fn resync(&self) -> Result<(), StoreError> {
        self.push(Call::Resync);
        Ok(())
    }
    fn bookmark(&self, resource_version: &str) -> Result<(), StoreError> {
        self.push(Call::Bookmark(resource_version.to_owned()));
        Ok(())
    }
    fn cached(&self, key: &str) -> Option<CachedObject<K>> {
        self.objects.lock().get(key).cloned()
    }
}
