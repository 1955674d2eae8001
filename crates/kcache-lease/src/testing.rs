//! Test doubles: in-memory lease and membership stores (feature
//! `testing`), for tests of code that uses leader election or sharding
//! without an apiserver.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::resource_lock::{LeaderElectionRecord, LeaseError, LeaseLock};
use crate::shard::{MemberRecord, MembershipStore, ShardStoreError, StoredMember};

type Entries = BTreeMap<(String, String), (MemberRecord, u64)>;

/// An in-memory [`LeaseLock`] for tests: shared by clones (so several
/// candidates can compete for it), with resourceVersion checks, and a
/// switch to make every request fail (a partitioned candidate).
#[derive(Clone, Default)]
pub struct InMemoryLeaseLock {
    state: Arc<Mutex<Option<(LeaderElectionRecord, u64)>>>,
    next_rv: Arc<AtomicU64>,
}

impl fmt::Debug for InMemoryLeaseLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryLeaseLock")
            .field("record", &self.record())
            .finish()
    }
}

impl InMemoryLeaseLock {
    /// An empty store (no lease yet).
    pub fn new() -> Self {
        Self::default()
    }
    /// The stored record, if any.
    pub fn record(&self) -> Option<LeaderElectionRecord> {
        self.state.lock().as_ref().map(|(r, _)| r.clone())
    }
    /// Overwrites the stored record (as another writer would).
    pub fn set_record(&self, record: LeaderElectionRecord) {
        let rv = self.next_rv.fetch_add(1, Ordering::Relaxed) + 1;
        *self.state.lock() = Some((record, rv));
    }
    /// A handle on the same store whose requests fail while `failing` is
    /// set (a candidate cut off from the apiserver).
    pub fn handle(&self) -> FlakyLeaseLock {
        FlakyLeaseLock {
            store: self.clone(),
            failing: Arc::new(AtomicBool::new(false)),
        }
    }
}

#[async_trait]
impl LeaseLock for InMemoryLeaseLock {
    async fn get(&self) -> Result<Option<(LeaderElectionRecord, String)>, LeaseError> {
        Ok(self
            .state
            .lock()
            .as_ref()
            .map(|(r, rv)| (r.clone(), rv.to_string())))
    }
    async fn create(&self, record: &LeaderElectionRecord) -> Result<String, LeaseError> {
        let mut st = self.state.lock();
        if st.is_some() {
            return Err(LeaseError::AlreadyExists);
        }
        let rv = self.next_rv.fetch_add(1, Ordering::Relaxed) + 1;
        *st = Some((record.clone(), rv));
        Ok(rv.to_string())
    }
    async fn update(
        &self,
        record: &LeaderElectionRecord,
        resource_version: &str,
    ) -> Result<String, LeaseError> {
        let mut st = self.state.lock();
        match &*st {
            Some((_, rv)) if rv.to_string() == resource_version => {
                let rv = self.next_rv.fetch_add(1, Ordering::Relaxed) + 1;
                *st = Some((record.clone(), rv));
                Ok(rv.to_string())
            }
            Some(_) => Err(LeaseError::Conflict),
            None => Err(LeaseError::Other("the lease does not exist".into())),
        }
    }
    fn describe(&self) -> String {
        "in-memory".to_owned()
    }
}

/// A handle on an [`InMemoryLeaseLock`] that can be cut off.
#[derive(Clone, Debug)]
pub struct FlakyLeaseLock {
    store: InMemoryLeaseLock,
    failing: Arc<AtomicBool>,
}

impl FlakyLeaseLock {
    /// Makes every request of this handle fail (`true`) or work again.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }
    fn check(&self) -> Result<(), LeaseError> {
        if self.failing.load(Ordering::SeqCst) {
            Err(LeaseError::Other("injected failure".into()))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl LeaseLock for FlakyLeaseLock {
    async fn get(&self) -> Result<Option<(LeaderElectionRecord, String)>, LeaseError> {
        self.check()?;
        self.store.get().await
    }
    async fn create(&self, record: &LeaderElectionRecord) -> Result<String, LeaseError> {
        self.check()?;
        self.store.create(record).await
    }
    async fn update(
        &self,
        record: &LeaderElectionRecord,
        resource_version: &str,
    ) -> Result<String, LeaseError> {
        self.check()?;
        self.store.update(record, resource_version).await
    }
    fn describe(&self) -> String {
        "in-memory (flaky handle)".to_owned()
    }
}

#[derive(Default)]
struct MemShared {
    entries: Mutex<Entries>,
    next_rv: AtomicU64,
    changed: Notify,
    writes: AtomicU64,
}

/// An in-memory [`MembershipStore`] for tests: clones share the Leases;
/// [`partitioned`](Self::partitioned) gives a handle that can be cut off.
#[derive(Clone)]
pub struct InMemoryMembershipStore {
    shared: Arc<MemShared>,
    failing: Arc<AtomicBool>,
    losing_answers: Arc<AtomicBool>,
    watching: bool,
}

impl fmt::Debug for InMemoryMembershipStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryMembershipStore")
            .field("leases", &self.shared.entries.lock().len())
            .field("failing", &self.failing.load(Ordering::SeqCst))
            .finish()
    }
}

impl Default for InMemoryMembershipStore {
    fn default() -> Self {
        Self {
            shared: Arc::default(),
            failing: Arc::default(),
            losing_answers: Arc::default(),
            watching: true,
        }
    }
}

impl InMemoryMembershipStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle on the same Leases with its own failure switch.
    pub fn partitioned(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            failing: Arc::new(AtomicBool::new(false)),
            losing_answers: Arc::new(AtomicBool::new(false)),
            watching: self.watching,
        }
    }

    /// The same handle without change notifications: its replica notices
    /// changes only at its retry period (a slow watch).
    pub fn without_watch(mut self) -> Self {
        self.watching = false;
        self
    }

    /// Makes every request of this handle fail (`true`), or work again.
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// The records of `group`, by Lease name.
    pub fn records(&self, group: &str) -> BTreeMap<String, MemberRecord> {
        self.shared
            .entries
            .lock()
            .iter()
            .filter(|((g, _), _)| g == group)
            .map(|((_, n), (r, _))| (n.clone(), r.clone()))
            .collect()
    }

    /// Applies this handle's writes but never answers them (`true`): the
    /// caller cannot tell whether they landed.
    pub fn set_losing_answers(&self, losing: bool) {
        self.losing_answers.store(losing, Ordering::SeqCst);
    }

    /// Runs one write on the Lease `(group, name)`: `write` gets the Leases
    /// locked and the key. Fails first when this handle is failing; never
    /// answers (after writing) when it loses answers.
    async fn write<T>(
        &self,
        group: &str,
        name: &str,
        write: impl FnOnce(&mut Entries, (String, String)) -> Result<T, ShardStoreError>,
    ) -> Result<T, ShardStoreError> {
        self.check()?;
        let key = (group.to_owned(), name.to_owned());
        let r = write(&mut self.shared.entries.lock(), key);
        if self.losing_answers.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        r
    }

    /// How many writes (creates, updates, deletes) succeeded.
    pub fn writes(&self) -> u64 {
        self.shared.writes.load(Ordering::Relaxed)
    }

    fn check(&self) -> Result<(), ShardStoreError> {
        if self.failing.load(Ordering::SeqCst) {
            Err(ShardStoreError::Other("injected failure".into()))
        } else {
            Ok(())
        }
    }

    fn wrote(&self, significant: bool) -> u64 {
        self.shared.writes.fetch_add(1, Ordering::Relaxed);
        if significant {
            self.shared.changed.notify_waiters();
        }
        self.shared.next_rv.fetch_add(1, Ordering::Relaxed) + 1
    }
}

#[async_trait]
impl MembershipStore for InMemoryMembershipStore {
    async fn list(&self, group: &str) -> Result<Vec<StoredMember>, ShardStoreError> {
        self.check()?;
        Ok(self
            .shared
            .entries
            .lock()
            .iter()
            .filter(|((g, _), _)| g == group)
            .map(|((_, n), (r, rv))| StoredMember {
                name: n.clone(),
                record: r.clone(),
                resource_version: rv.to_string(),
            })
            .collect())
    }

    async fn create(
        &self,
        group: &str,
        name: &str,
        record: &MemberRecord,
    ) -> Result<String, ShardStoreError> {
        self.write(group, name, |entries, key| match entries.entry(key) {
            std::collections::btree_map::Entry::Occupied(_) => Err(ShardStoreError::AlreadyExists),
            std::collections::btree_map::Entry::Vacant(v) => {
                let rv = self.wrote(true);
                v.insert((record.clone(), rv));
                Ok(rv.to_string())
            }
        })
        .await
    }

    async fn update(
        &self,
        group: &str,
        name: &str,
        record: &MemberRecord,
        resource_version: &str,
    ) -> Result<String, ShardStoreError> {
        self.write(group, name, |entries, key| match entries.get_mut(&key) {
            None => Err(ShardStoreError::NotFound),
            Some((r, rv)) if rv.to_string() == resource_version => {
                let significant = r.acked != record.acked || r.instance != record.instance;
                let new = self.wrote(significant);
                *r = record.clone();
                *rv = new;
                Ok(new.to_string())
            }
            Some(_) => Err(ShardStoreError::Conflict),
        })
        .await
    }

    async fn delete(
        &self,
        group: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<(), ShardStoreError> {
        self.write(group, name, |entries, key| match entries.get(&key) {
            None => Err(ShardStoreError::NotFound),
            Some((_, rv)) if rv.to_string() == resource_version => {
                entries.remove(&key);
                self.wrote(true);
                Ok(())
            }
            Some(_) => Err(ShardStoreError::Conflict),
        })
        .await
    }

    async fn watch(&self, _group: &str, wake: Arc<Notify>, stop: CancellationToken) {
        if !self.watching {
            return stop.cancelled().await;
        }
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.shared.changed.notified() => {
                    if !self.failing.load(Ordering::SeqCst) {
                        wake.notify_one();
                    }
                }
            }
        }
    }

    fn describe(&self) -> String {
        "in-memory".to_owned()
    }
}
