//! Horizontal scale: N active replicas that split the keys of one
//! controller between them, coordinated through `coordination.k8s.io/v1`
//! Leases, with a handover protocol under which **a key is never worked by
//! two replicas at once**.
//!
//! # Membership
//!
//! Every replica of a *shard group* holds its own membership Lease, named
//! after the group and its identity and labelled [`GROUP_LABEL`]`=<group>`.
//! It renews it every retry period. A replica lists the group's Leases
//! (a fresh read) every retry period and as soon as a watch on them reports
//! a join, a leave or a new acknowledgement. A Lease is **live** while its
//! holder is set and, on the *reader's* clock, less than its
//! `leaseDurationSeconds` has passed since the reader last saw it change
//! (clocks of different machines are never compared, as in leader
//! election). The live identities form the replica's **desired view**.
//!
//! # Ownership
//!
//! Keys are spread over a view by rendezvous hashing ([`View::owner`]):
//! every member scores every key and the best score owns it. Adding a
//! member to N moves about 1/(N+1) of the keys, all to the newcomer;
//! removing one moves only its keys.
//!
//! # Handover protocol
//!
//! Each replica publishes in its Lease (annotation [`ACK_ANNOTATION`]) the
//! view it has **acknowledged**. Two rules keep a key on one replica:
//!
//! 1. **Release before acknowledging.** When its desired view differs from
//!    the acknowledged one, a replica first stops starting the keys it
//!    would lose (they are dropped from its queue), waits until running
//!    reconciles of those keys have finished, and only then writes the new
//!    view into its Lease. So a replica only ever works keys it owns in the
//!    view its Lease shows (and in every view it may have written without
//!    knowing whether the write landed).
//! 2. **Acquire after every previous owner acknowledged.** After the write
//!    succeeded, the replica lists the Leases again (a read that follows its
//!    own write) and starts a newly gained key only when no *other live*
//!    member's acknowledged view gives that member the key. Those members
//!    are the possible previous owners: each either acknowledged a view in
//!    which it released the key, or its Lease expired.
//!
//! Keys kept across a view change (owned in the old and the new view) are
//! worked without interruption. Why rule 2 is enough: if replicas A and B
//! both worked key k, each wrote an acknowledgement claiming k and then
//! read the other's Lease; whichever read second would have seen the
//! other's claim (writes and fresh lists are linearizable in etcd), unless
//! it judged the other expired. A replica judges another expired only
//! `leaseDuration` after it last saw that Lease change, while the other
//! stops starting keys `renewDeadline` (shorter) after its last successful
//! renewal was sent; after such a lapse a replica forgets what it was
//! allowed and must pass rule 2 again.
//!
//! Membership changes therefore go: the change is seen (at most one retry
//! period, or at once through the watch; for a dead replica, one lease
//! duration after its last renewal) → every replica releases and
//! acknowledges → replicas that gain keys start them, enqueued from their
//! caches. A replica that stops gracefully releases its Lease (no holder,
//! no claim) after its workers stopped, so its keys move at once; a Lease
//! that vanishes while it claims keys (deleted by hand) still counts until
//! it expires. Released Leases are deleted by the other members after a
//! lease duration, expired ones after two.
//!
//! Caveat: a replica cut off from the apiserver stops *starting* keys at
//! its renew deadline, but a reconcile already running is not interrupted:
//! keep reconciles shorter than `lease_duration - renew_deadline`, as with
//! leader election.
//!
//! See [Sharding](https://github.com/kcache/kcache/blob/main/docs/sharding.md) for when to shard and the
//! trade-offs.
//!
//! # Example
//!
//! A kcache controller made `sharded` runs a [`Shard`] for its workers;
//! on its own, a replica asks [`Shard::try_begin`] before working a key:
//!
//! ```no_run
//! use kcache_lease::shard::{MembershipStore, Shard, ShardConfig, ShardHooks};
//! use tokio_util::sync::CancellationToken;
//!
//! // `store`: kcache-controller's `KubeMembershipStore` (Leases watched by
//! // an informer), or any other `MembershipStore`
//! # async fn run(keys: Vec<String>, store: impl MembershipStore) -> Result<(), Box<dyn std::error::Error>> {
//! let shard = Shard::new(
//!     ShardConfig::new("configmap-controller", std::env::var("POD_NAME")?).replicas_hint(3),
//!     store,
//! );
//! let stop = CancellationToken::new();
//! let all = keys.clone();
//! let membership = tokio::spawn({
//!     let (shard, stop) = (shard.clone(), stop.clone());
//!     async move {
//!         let hooks = ShardHooks {
//!             keys: Box::new(move || all.clone()),
//!             gained: Box::new(|gained| println!("now mine: {gained:?}")),
//!         };
//!         shard.run(stop, hooks).await
//!     }
//! });
//! for key in &keys {
//!     if let Some(_working) = shard.try_begin(key) {
//!         // only this replica works `key` until `_working` is dropped
//!     }
//! }
//! stop.cancel();
//! membership.await??;
//! # Ok(())
//! # }
//! ```

mod coordinator;
mod hash;
mod store;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use coordinator::Coordinator;

use crate::timings::{LeaseTimings, LeaseTimingsError};
use kcache_core::metrics::{CounterMetric, SettableGaugeMetric};

pub use hash::{KeyPoint, Placement, View};
pub use store::{
    ACK_ANNOTATION, GROUP_LABEL, INSTANCE_ANNOTATION, MemberRecord, MembershipStore,
    ShardStoreError, StoredMember,
};

/// Sharding settings. Defaults: leader election's [`LeaseTimings`] (15 s
/// lease, 10 s renew deadline, 2 s retry period), a replicas hint of 1,
/// release on stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    /// The shard group: replicas of one controller share it (a label value:
    /// at most 63 characters, alphanumerics, `-`, `_`, `.`).
    pub group: String,
    /// This replica's identity, unique in the group (e.g. the pod name).
    pub identity: String,
    /// How many replicas are expected: at startup a replica waits (at most
    /// one lease duration) until it sees that many members before it
    /// takes keys, so that a fleet starting together does not hand keys
    /// around.
    pub replicas_hint: usize,
    /// How long a membership Lease lasts without renewal (a dead
    /// replica's keys move about this long after its last renewal), when a
    /// replica whose renewals keep failing stops starting keys (the renew
    /// deadline), and how often the Lease is renewed and the group listed
    /// (the retry period).
    pub timings: LeaseTimings,
    /// Release the Lease at shutdown (after the workers stopped), so that
    /// the keys move at once.
    pub release_on_stop: bool,
}

/// Why a [`ShardConfig`] is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardConfigError {
    /// The group is not a valid label value.
    #[error(
        "shard group {0:?} must be a label value: 1 to 63 characters, alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    )]
    InvalidGroup(String),
    /// The identity is empty.
    #[error("the shard identity must not be empty (use the pod name)")]
    EmptyIdentity,
    /// The durations break client-go's rules.
    #[error(transparent)]
    Timings(#[from] LeaseTimingsError),
}

/// Why sharding stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ShardConfigError),
    /// Another process took this replica's membership Lease: two replicas
    /// run with the same identity.
    #[error(
        "another process (instance {other_instance}) holds the membership lease of identity {identity:?} in shard group {group:?}: give every replica a unique identity"
    )]
    DuplicateIdentity {
        /// The group.
        group: String,
        /// The identity used twice.
        identity: String,
        /// The other process's instance id.
        other_instance: String,
    },
    /// Sharding cannot be combined with leader election.
    #[error(
        "a controller cannot be both sharded and leader-elected: sharded replicas are all active; drop one of the two"
    )]
    WithLeaderElection,
}

impl ShardConfig {
    /// Defaults for `identity` in `group`.
    pub fn new(group: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            identity: identity.into(),
            replicas_hint: 1,
            timings: LeaseTimings::default(),
            release_on_stop: true,
        }
    }
    /// Sets [`replicas_hint`](Self::replicas_hint).
    pub fn replicas_hint(mut self, n: usize) -> Self {
        self.replicas_hint = n;
        self
    }
    crate::timings::timing_setters!(timings);
    /// Sets [`release_on_stop`](Self::release_on_stop).
    pub fn release_on_stop(mut self, release: bool) -> Self {
        self.release_on_stop = release;
        self
    }

    /// Checks the group, the identity and the timings.
    pub fn validate(&self) -> Result<(), ShardConfigError> {
        let g = self.group.as_bytes();
        let alnum = |b: &u8| b.is_ascii_alphanumeric();
        let valid_group = !g.is_empty()
            && g.len() <= 63
            && g.first().is_some_and(alnum)
            && g.last().is_some_and(alnum)
            && g.iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid_group {
            return Err(ShardConfigError::InvalidGroup(self.group.clone()));
        }
        if self.identity.is_empty() {
            return Err(ShardConfigError::EmptyIdentity);
        }
        self.timings.validate()?;
        Ok(())
    }

    /// The membership Lease's name: group and identity made DNS-safe, with
    /// a hash of both so that distinct identities never share a Lease.
    pub fn lease_name(&self) -> String {
        let raw = format!("{}-{}", self.group, self.identity);
        let mut safe: String = raw
            .chars()
            .map(|c| {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        safe.truncate(200);
        let safe = safe.trim_matches(|c: char| !c.is_ascii_alphanumeric());
        format!("{safe}-{:08x}", name_hash(&raw))
    }
}

fn name_hash(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.as_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Members whose acknowledged view gives them keys this replica's does not.
#[derive(Clone, Default, Debug)]
struct Gate {
    blockers: Arc<Vec<(String, View)>>,
}

impl Gate {
    fn allows(&self, placement: &Placement, key: &str) -> bool {
        self.blockers
            .iter()
            .all(|(id, v)| !placement.owned_by(v, key, id))
    }
}

/// What was allowed before the last acknowledgement, until a fresh gate.
#[derive(Clone, Debug)]
struct Frozen {
    views: Vec<View>,
    gate: Gate,
}

impl Frozen {
    fn allows(&self, placement: &Placement, key: &str, me: &str) -> bool {
        self.views.iter().all(|v| placement.owned_by(v, key, me))
            && self.gate.allows(placement, key)
    }
}

/// Which keys this replica may start: a snapshot, cheap to clone.
#[derive(Clone, Debug)]
struct Pred {
    me: Arc<str>,
    /// The view the Lease shows (confirmed write).
    acked: View,
    /// Views written without knowing whether the write landed.
    uncertain: Vec<View>,
    /// Releasing towards this view (not yet acknowledged).
    pending: Option<View>,
    /// Other members' claims, from a list that followed the last write of
    /// `acked`; `None` until that list.
    gate: Option<Gate>,
    carry: Option<Frozen>,
    /// Holds its Lease and is not stopping.
    active: bool,
    /// Renewals must succeed before this instant.
    deadline: Option<Instant>,
    /// How views assign keys.
    placement: Placement,
}

impl Pred {
    fn works(&self, key: &str, now: Instant) -> bool {
        if !self.active || self.deadline.is_none_or(|d| now >= d) {
            return false;
        }
        let me = &*self.me;
        let pl = &self.placement;
        if !pl.owned_by(&self.acked, key, me)
            || !self.uncertain.iter().all(|v| pl.owned_by(v, key, me))
        {
            return false;
        }
        if self
            .pending
            .as_ref()
            .is_some_and(|p| !pl.owned_by(p, key, me))
        {
            return false;
        }
        match &self.gate {
            Some(g) => g.allows(pl, key),
            None => self.carry.as_ref().is_some_and(|c| c.allows(pl, key, me)),
        }
    }
}

struct State {
    pred: Pred,
    inflight: HashMap<String, usize>,
}

/// The metrics of a shard member (see [`Shard::set_metrics`]).
pub struct ShardMetrics {
    /// `kcache_shard_members`: members in the view being worked towards.
    pub members: Box<dyn SettableGaugeMetric>,
    /// `kcache_shard_handovers_total{direction="gained"}`: keys gained.
    pub gained: Box<dyn CounterMetric>,
    /// `kcache_shard_handovers_total{direction="released"}`: keys released.
    pub released: Box<dyn CounterMetric>,
}

impl fmt::Debug for ShardMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardMetrics").finish_non_exhaustive()
    }
}

struct Inner {
    config: ShardConfig,
    store: Arc<dyn MembershipStore>,
    lease_name: String,
    instance: String,
    state: Mutex<State>,
    released: Notify,
    metrics: Mutex<Option<ShardMetrics>>,
}

/// One replica's membership in a shard group: decides which keys it may
/// work ([`owns`](Self::owns), [`try_begin`](Self::try_begin)) and runs
/// the membership and handover protocol ([`run`](Self::run)). Cheap to
/// clone. A [`Controller`](https://docs.rs/kcache-controller) made
/// [`sharded`](https://docs.rs/kcache-controller) uses one internally.
#[derive(Clone)]
pub struct Shard {
    inner: Arc<Inner>,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("group", &self.inner.config.group)
            .field("identity", &self.inner.config.identity)
            .field("lease", &self.inner.lease_name)
            .field("store", &self.inner.store.describe())
            .finish()
    }
}

/// The state of a replica in its shard group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardStatus {
    /// This replica's identity.
    pub identity: String,
    /// The view it acknowledged (empty before the first one).
    pub members: Vec<String>,
    /// The view it is releasing keys towards, if any.
    pub pending: Option<Vec<String>>,
    /// Identities of live members that acknowledged a different view
    /// (the keys they claim wait); this replica's own identity while it has
    /// not listed the group since its last acknowledgement.
    pub waiting_for: Vec<String>,
    /// Holds its Lease, renewed in time, not stopping.
    pub active: bool,
}

impl ShardStatus {
    /// Whether the replica works every key it owns: active, nothing
    /// pending, every live member acknowledged the same view.
    pub fn settled(&self) -> bool {
        self.active
            && self.pending.is_none()
            && self.waiting_for.is_empty()
            && !self.members.is_empty()
    }
}

/// What the protocol needs from the thing that works keys.
pub struct ShardHooks {
    /// Every key that could be worked now (the primary cache's keys): used
    /// to enqueue gained keys and to count handovers.
    pub keys: Box<dyn Fn() -> Vec<String> + Send + Sync>,
    /// Called with keys this replica may start now and could not before.
    pub gained: Box<dyn Fn(Vec<String>) + Send + Sync>,
}

impl fmt::Debug for ShardHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardHooks").finish_non_exhaustive()
    }
}

/// A key being worked; dropping it ends the work (a replica releasing the
/// key waits for that).
#[must_use = "the key counts as worked until the guard is dropped"]
#[derive(Debug)]
pub struct ShardGuard {
    shard: Shard,
    key: String,
}

impl Drop for ShardGuard {
    fn drop(&mut self) {
        let mut st = self.shard.inner.state.lock();
        if let Some(n) = st.inflight.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                st.inflight.remove(&self.key);
            }
        }
        drop(st);
        self.shard.inner.released.notify_one();
    }
}

fn instance_id() -> String {
    use rand::Rng as _;
    format!("{:016x}", rand::rng().random::<u64>())
}

impl Shard {
    /// A replica of `config.group` whose Leases live in `store`. Nothing
    /// happens until [`run`](Self::run).
    pub fn new(config: ShardConfig, store: impl MembershipStore) -> Self {
        let lease_name = config.lease_name();
        let me: Arc<str> = Arc::from(config.identity.as_str());
        Self {
            inner: Arc::new(Inner {
                config,
                store: Arc::new(store),
                lease_name,
                instance: instance_id(),
                state: Mutex::new(State {
                    pred: Pred {
                        me,
                        acked: View::default(),
                        uncertain: Vec::new(),
                        pending: None,
                        gate: None,
                        carry: None,
                        active: false,
                        deadline: None,
                        placement: Placement::Keys,
                    },
                    inflight: HashMap::new(),
                }),
                released: Notify::new(),
                metrics: Mutex::new(None),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &ShardConfig {
        &self.inner.config
    }

    /// The name of this replica's membership Lease.
    pub fn lease_name(&self) -> &str {
        &self.inner.lease_name
    }

    /// Sets how views assign keys to members (default
    /// [`Placement::Keys`]); set it before [`run`](Self::run). A
    /// controller that shards its informers uses [`Placement::Slots`].
    pub fn set_placement(&self, placement: Placement) {
        self.inner.state.lock().pred.placement = placement;
    }

    /// How views assign keys to members.
    pub fn placement(&self) -> Placement {
        self.inner.state.lock().pred.placement.clone()
    }

    /// Whether `member` owns `key` in `view` under this replica's
    /// placement.
    pub fn owned_in(&self, view: &View, key: &str, member: &str) -> bool {
        let placement = self.placement();
        placement.owned_by(view, key, member)
    }

    /// Whether this replica may work `key` now.
    pub fn owns(&self, key: &str) -> bool {
        self.inner.state.lock().pred.works(key, Instant::now())
    }

    /// Starts working `key` if this replica may: the key then counts as
    /// worked (a release waits for it) until the guard is dropped.
    pub fn try_begin(&self, key: &str) -> Option<ShardGuard> {
        let mut st = self.inner.state.lock();
        if !st.pred.works(key, Instant::now()) {
            return None;
        }
        *st.inflight.entry(key.to_owned()).or_default() += 1;
        drop(st);
        Some(ShardGuard {
            shard: self.clone(),
            key: key.to_owned(),
        })
    }

    /// The replica's current state.
    pub fn status(&self) -> ShardStatus {
        let st = self.inner.state.lock();
        let p = &st.pred;
        ShardStatus {
            identity: self.inner.config.identity.clone(),
            members: p.acked.members().to_vec(),
            pending: p.pending.as_ref().map(|v| v.members().to_vec()),
            waiting_for: match &p.gate {
                Some(g) => g.blockers.iter().map(|(id, _)| id.clone()).collect(),
                None => vec![self.inner.config.identity.clone()],
            },
            active: p.active && p.deadline.is_some_and(|d| Instant::now() < d),
        }
    }

    /// Records this member's view size and handovers in `metrics`.
    pub fn set_metrics(&self, metrics: ShardMetrics) {
        *self.inner.metrics.lock() = Some(metrics);
    }

    fn snapshot(&self) -> Pred {
        self.inner.state.lock().pred.clone()
    }

    /// Applies `change` to the predicate and tells `hooks` which keys were
    /// gained; counts handovers.
    fn change(&self, hooks: &ShardHooks, change: impl FnOnce(&mut Pred)) {
        let before = {
            let mut st = self.inner.state.lock();
            let before = st.pred.clone();
            change(&mut st.pred);
            before
        };
        let after = self.snapshot();
        let now = Instant::now();
        let mut gained = Vec::new();
        let mut released = 0u64;
        for k in (hooks.keys)() {
            match (before.works(&k, now), after.works(&k, now)) {
                (false, true) => gained.push(k),
                (true, false) => released += 1,
                _ => {}
            }
        }
        if let Some(m) = &*self.inner.metrics.lock() {
            m.gained.inc_by(gained.len() as u64);
            m.released.inc_by(released);
        }
        if released > 0 {
            tracing::info!(group = %self.inner.config.group, identity = %self.inner.config.identity, released, "released keys");
        }
        if !gained.is_empty() {
            tracing::info!(group = %self.inner.config.group, identity = %self.inner.config.identity, gained = gained.len(), "gained keys");
            (hooks.gained)(gained);
        }
    }

    /// Runs the membership protocol until `stop`: takes and renews the
    /// Lease, follows the group, releases and acknowledges, starts gained
    /// keys. At `stop` the replica stops owning keys and (with
    /// `release_on_stop`) releases its Lease: stop the workers first. Run it
    /// once per `Shard`. Returns an error when the configuration is
    /// invalid or another process took this replica's Lease.
    pub async fn run(&self, stop: CancellationToken, hooks: ShardHooks) -> Result<(), ShardError> {
        self.inner.config.validate()?;
        let cfg = &self.inner.config;
        let wake = Arc::new(Notify::new());
        let watch_stop = CancellationToken::new();
        let watcher = {
            let store = self.inner.store.clone();
            let group = cfg.group.clone();
            let (wake, stop) = (wake.clone(), watch_stop.clone());
            tokio::spawn(async move { store.watch(&group, wake, stop).await })
        };
        tracing::info!(group = %cfg.group, identity = %cfg.identity, lease = %self.inner.lease_name, store = %self.inner.store.describe(), "joining shard group");
        let mut c = Coordinator::new(self.clone(), hooks);
        let result = loop {
            if stop.is_cancelled() {
                break Ok(());
            }
            let again = match c.step().await {
                Ok(again) => again,
                Err(e) => break Err(e),
            };
            if again {
                continue;
            }
            let wait = c.next_wait();
            let releasing = self.inner.state.lock().pred.pending.is_some();
            tokio::select! {
                _ = stop.cancelled() => break Ok(()),
                _ = tokio::time::sleep(wait) => {}
                _ = wake.notified() => {
                    // let a burst of acknowledgements settle
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ = self.inner.released.notified(), if releasing => {}
            }
        };
        {
            let mut st = self.inner.state.lock();
            st.pred.active = false;
            st.pred.gate = None;
            st.pred.carry = None;
        }
        if let Some(m) = &*self.inner.metrics.lock() {
            m.members.set(0.0);
        }
        if result.is_ok() && cfg.release_on_stop {
            c.release().await;
        }
        watch_stop.cancel();
        let _ = watcher.await;
        tracing::info!(group = %cfg.group, identity = %cfg.identity, "left shard group");
        result
    }
}

#[cfg(test)]
mod tests;
