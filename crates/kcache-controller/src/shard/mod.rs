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
//! See `docs/sharding.md` for when to shard and the trade-offs.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kcache_controller::shard::{KubeMembershipStore, ShardConfig};
//! use kcache_controller::{Action, Config, Controller, Request};
//! use kcache_informer::SharedInformerFactory;
//!
//! async fn reconcile(req: Request<ConfigMap>, _ctx: Arc<()>) -> Result<Action, kube::Error> {
//!     // Only this replica reconciles req.key while it owns it.
//!     let _ = req.object;
//!     Ok(Action::await_change())
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let factory = SharedInformerFactory::new(client.clone());
//! let pod_name = std::env::var("POD_NAME")?;
//! let shard = ShardConfig::new("configmap-controller", pod_name)
//!     .replicas_hint(3)
//!     .lease_duration(Duration::from_secs(15));
//! Controller::<ConfigMap>::new(&factory, Config::default().workers(4))
//!     .sharded(shard, KubeMembershipStore::new(client.clone(), "kube-system"))
//!     .shutdown_on_signal()
//!     .run(reconcile, Arc::new(()))
//!     .await?;
//! factory.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod hash;
mod store;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use hash::View;
pub use store::{
    ACK_ANNOTATION, GROUP_LABEL, INSTANCE_ANNOTATION, InMemoryMembershipStore, KubeMembershipStore,
    MemberRecord, MembershipStore, ShardStoreError, StoredMember,
};

/// Sharding settings. Defaults: 15 s lease, 10 s renew deadline, 2 s retry
/// period (leader election's), a replicas hint of 1, release on stop.
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
    /// How long a membership Lease lasts without renewal: a dead replica's
    /// keys move about this long after its last renewal.
    pub lease_duration: Duration,
    /// A replica whose renewals keep failing this long stops starting keys.
    pub renew_deadline: Duration,
    /// How often the Lease is renewed and the group listed.
    pub retry_period: Duration,
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
    /// The durations are not ordered.
    #[error(
        "shard timings must satisfy lease_duration ({lease_duration:?}) > renew_deadline ({renew_deadline:?}) > 1.2 x retry_period ({retry_period:?}), all above zero"
    )]
    Timings {
        /// The lease duration.
        lease_duration: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
        /// The retry period.
        retry_period: Duration,
    },
}

/// Why sharding stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The configuration is invalid.
    #[error("invalid shard configuration: {0}")]
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
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_stop: true,
        }
    }
    /// Sets [`replicas_hint`](Self::replicas_hint).
    pub fn replicas_hint(mut self, n: usize) -> Self {
        self.replicas_hint = n;
        self
    }
    /// Sets [`lease_duration`](Self::lease_duration).
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self
    }
    /// Sets [`renew_deadline`](Self::renew_deadline).
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.renew_deadline = d;
        self
    }
    /// Sets [`retry_period`](Self::retry_period).
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.retry_period = d;
        self
    }
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
        let ordered = !self.retry_period.is_zero()
            && self.lease_duration > self.renew_deadline
            && self.renew_deadline.as_secs_f64() > 1.2 * self.retry_period.as_secs_f64();
        if !ordered {
            return Err(ShardConfigError::Timings {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
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

/// The lease duration in whole seconds, rounded up: peers must never see
/// a shorter lease than the one the holder's renew deadline assumes.
fn lease_seconds(d: Duration) -> i32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
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
    fn allows(&self, key: &str) -> bool {
        self.blockers.iter().all(|(id, v)| !v.owned_by(key, id))
    }
}

/// What was allowed before the last acknowledgement, until a fresh gate.
#[derive(Clone, Debug)]
struct Frozen {
    views: Vec<View>,
    gate: Gate,
}

impl Frozen {
    fn allows(&self, key: &str, me: &str) -> bool {
        self.views.iter().all(|v| v.owned_by(key, me)) && self.gate.allows(key)
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
}

impl Pred {
    fn works(&self, key: &str, now: Instant) -> bool {
        if !self.active || self.deadline.is_none_or(|d| now >= d) {
            return false;
        }
        let me = &*self.me;
        if !self.acked.owned_by(key, me) || !self.uncertain.iter().all(|v| v.owned_by(key, me)) {
            return false;
        }
        if self.pending.as_ref().is_some_and(|p| !p.owned_by(key, me)) {
            return false;
        }
        match &self.gate {
            Some(g) => g.allows(key),
            None => self.carry.as_ref().is_some_and(|c| c.allows(key, me)),
        }
    }
}

struct State {
    pred: Pred,
    inflight: HashMap<String, usize>,
}

/// Counters and gauges of a sharded controller.
#[derive(Clone, Debug)]
pub(crate) struct ShardMetrics {
    pub(crate) members: Gauge,
    pub(crate) gained: Counter,
    pub(crate) released: Counter,
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
/// clone. A [`Controller`](crate::Controller) made
/// [`sharded`](crate::Controller::sharded) uses one internally.
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
pub struct ShardGuard {
    shard: Shard,
    key: String,
}

impl fmt::Debug for ShardGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardGuard")
            .field("key", &self.key)
            .finish()
    }
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

    pub(crate) fn set_metrics(&self, metrics: ShardMetrics) {
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
        let mut c = Coordinator {
            shard: self.clone(),
            hooks,
            observed: HashMap::new(),
            last_seen: HashMap::new(),
            ghosts: std::collections::HashSet::new(),
            own: None,
            acquired_at: None,
            last_write: None,
            acked_once: false,
            waiting_logged: false,
        };
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
            let releasing = c.shard.inner.state.lock().pred.pending.is_some();
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
            m.members.set(0);
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

/// A store request that gives up after `limit` (its outcome is then
/// unknown, which the protocol treats as "may have been applied").
async fn timed<T>(
    limit: Duration,
    request: impl std::future::Future<Output = Result<T, ShardStoreError>>,
) -> Result<T, ShardStoreError> {
    match tokio::time::timeout(limit, request).await {
        Ok(r) => r,
        Err(_) => Err(ShardStoreError::Other(
            format!("no answer within {limit:?}").into(),
        )),
    }
}

struct Own {
    rv: String,
    acquire_time: Option<Timestamp>,
}

struct Coordinator {
    shard: Shard,
    hooks: ShardHooks,
    /// Lease name -> (resourceVersion, when this replica saw it change).
    observed: HashMap<String, (String, Instant)>,
    /// Lease name -> the last record seen, to remember a Lease that
    /// vanished while it claimed keys (a "ghost", live until it expired).
    last_seen: HashMap<String, StoredMember>,
    /// The ghosts of the last list.
    ghosts: std::collections::HashSet<String>,
    own: Option<Own>,
    acquired_at: Option<Instant>,
    last_write: Option<Instant>,
    acked_once: bool,
    waiting_logged: bool,
}

impl Coordinator {
    fn cfg(&self) -> &ShardConfig {
        &self.shard.inner.config
    }

    fn next_wait(&self) -> Duration {
        let period = self.cfg().retry_period;
        match self.last_write {
            Some(t) => (t + period)
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(10)),
            None => period,
        }
    }

    fn record(&self, acked: &View) -> MemberRecord {
        let cfg = self.cfg();
        MemberRecord {
            identity: cfg.identity.clone(),
            instance: self.shard.inner.instance.clone(),
            lease_duration_seconds: lease_seconds(cfg.lease_duration),
            acquire_time: self.own.as_ref().and_then(|o| o.acquire_time),
            renew_time: Some(Timestamp::now()),
            acked: (!acked.is_empty()).then(|| acked.members().to_vec()),
        }
    }

    /// Whether `m` expired on this replica's clock.
    fn expired_for(&self, m: &StoredMember, now: Instant) -> Option<Duration> {
        let secs = if m.record.lease_duration_seconds > 0 {
            u64::try_from(m.record.lease_duration_seconds).unwrap_or(1)
        } else {
            u64::try_from(lease_seconds(self.cfg().lease_duration)).unwrap_or(1)
        };
        let seen = self.observed.get(&m.name).map(|(_, at)| *at)?;
        now.saturating_duration_since(seen)
            .checked_sub(Duration::from_secs(secs))
    }

    fn live(&self, m: &StoredMember, now: Instant) -> bool {
        !m.record.identity.is_empty() && self.expired_for(m, now).is_none()
    }

    /// Records when each Lease last changed, and returns the list plus the
    /// ghosts: Leases that vanished (deleted by hand, or by a member that
    /// judged them expired sooner) while they claimed keys are kept, as
    /// last seen, until they expire on this replica's clock. A replica that
    /// leaves gracefully writes a released record first, which claims
    /// nothing.
    fn observe(&mut self, mut list: Vec<StoredMember>, now: Instant) -> Vec<StoredMember> {
        for m in &list {
            match self.observed.get(&m.name) {
                Some((rv, _)) if *rv == m.resource_version => {}
                _ => {
                    self.observed
                        .insert(m.name.clone(), (m.resource_version.clone(), now));
                }
            }
            self.last_seen.insert(m.name.clone(), m.clone());
        }
        let own = &self.shard.inner.lease_name;
        let mut ghosts = Vec::new();
        let mut gone = Vec::new();
        for (name, m) in &self.last_seen {
            if list.iter().any(|l| &l.name == name) {
                continue;
            }
            let claims = !m.record.identity.is_empty()
                && m.record.acked.as_ref().is_some_and(|a| !a.is_empty());
            if name != own && claims && self.expired_for(m, now).is_none() {
                ghosts.push(m.clone());
            } else {
                gone.push(name.clone());
            }
        }
        for name in gone {
            self.last_seen.remove(&name);
            self.observed.remove(&name);
        }
        self.ghosts = ghosts.iter().map(|m| m.name.clone()).collect();
        list.extend(ghosts);
        list
    }

    /// A successful write sent at `sent`: the deadline moves; after a lapse
    /// everything allowed before is forgotten.
    fn wrote(&mut self, sent: Instant, rv: String, published: Option<View>) {
        if let Some(own) = &mut self.own {
            own.rv = rv;
        }
        self.last_write = Some(sent);
        let deadline = sent + self.cfg().renew_deadline;
        let mut st = self.shard.inner.state.lock();
        let p = &mut st.pred;
        if p.deadline.is_none_or(|d| sent >= d) {
            p.gate = None;
            p.carry = None;
        }
        p.deadline = Some(deadline);
        p.active = true;
        p.uncertain.clear();
        if let Some(v) = published {
            p.carry = match p.gate.take() {
                Some(g) => Some(Frozen {
                    views: vec![p.acked.clone()],
                    gate: g,
                }),
                None => p.carry.take().map(|mut c| {
                    c.views.push(p.acked.clone());
                    c
                }),
            };
            p.acked = v;
            p.pending = None;
            self.acked_once = true;
        }
    }

    /// One round: write (publish or renew), list, acquire, follow the
    /// group. Returns whether to run another round at once.
    async fn step(&mut self) -> Result<bool, ShardError> {
        let period = self.cfg().retry_period;
        let group = self.cfg().group.clone();
        let name = self.shard.inner.lease_name.clone();
        let store = self.shard.inner.store.clone();
        let mut conflict = false;

        // 1. Publish the pending view once its keys are released, or renew.
        if let Some(own) = &self.own {
            let publish = {
                let st = self.shard.inner.state.lock();
                let now = Instant::now();
                st.pred.pending.clone().filter(|_| {
                    // no running reconcile of a key given up
                    st.inflight.keys().all(|k| st.pred.works(k, now))
                })
            };
            let renew_due = self.last_write.is_none_or(|t| Instant::now() >= t + period);
            if publish.is_some() || renew_due {
                let acked = {
                    let st = self.shard.inner.state.lock();
                    publish.clone().unwrap_or_else(|| st.pred.acked.clone())
                };
                let record = self.record(&acked);
                let rv = own.rv.clone();
                let sent = Instant::now();
                match tokio::time::timeout(period, store.update(&group, &name, &record, &rv)).await
                {
                    Ok(Ok(rv)) => {
                        if publish.is_some() {
                            tracing::info!(group = %group, identity = %self.cfg().identity, view = ?acked, "acknowledged view");
                        }
                        self.wrote(sent, rv, publish);
                    }
                    Ok(Err(ShardStoreError::Conflict)) => conflict = true,
                    Ok(Err(ShardStoreError::NotFound)) => {
                        tracing::warn!(group = %group, lease = %name, "membership lease deleted (by a member that saw it expired, or by hand): rejoining");
                        self.own = None;
                        let mut st = self.shard.inner.state.lock();
                        st.pred.active = false;
                        st.pred.acked = View::default();
                        st.pred.gate = None;
                        st.pred.carry = None;
                        st.pred.uncertain.clear();
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(group = %group, error = %e, "renewing the membership lease failed");
                        if let Some(v) = publish {
                            self.shard.inner.state.lock().pred.uncertain.push(v);
                        }
                    }
                    Err(_) => {
                        tracing::warn!(group = %group, "renewing the membership lease timed out");
                        if let Some(v) = publish {
                            self.shard.inner.state.lock().pred.uncertain.push(v);
                        }
                    }
                }
            }
        }

        // 2. A fresh list, after any write above.
        let list = match tokio::time::timeout(period, store.list(&group)).await {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                tracing::warn!(group = %group, error = %e, "listing the shard group failed");
                return Ok(false);
            }
            Err(_) => {
                tracing::warn!(group = %group, "listing the shard group timed out");
                return Ok(false);
            }
        };
        let now = Instant::now();
        let list = self.observe(list, now);
        let mine = list.iter().find(|m| m.name == name);

        // 3. Our own Lease.
        if self.own.is_some() {
            match mine {
                Some(m) if m.record.instance != self.shard.inner.instance => {
                    return Err(ShardError::DuplicateIdentity {
                        group,
                        identity: self.cfg().identity.clone(),
                        other_instance: m.record.instance.clone(),
                    });
                }
                Some(m) if conflict => {
                    // Our own earlier write landed after all.
                    if let Some(own) = &mut self.own {
                        own.rv = m.resource_version.clone();
                    }
                    return Ok(true);
                }
                None => {
                    // Deleted: the next write finds out and rejoins.
                    return Ok(false);
                }
                Some(_) => {}
            }
        } else {
            return self.acquire(mine, now).await;
        }

        // 4. Lapsed renewals: work nothing until a renewal succeeds.
        let active = {
            let st = self.shard.inner.state.lock();
            st.pred.active && st.pred.deadline.is_some_and(|d| now < d)
        };
        if !active {
            return Ok(false);
        }

        // 5. The desired view.
        let me = self.cfg().identity.clone();
        let live: Vec<&StoredMember> = list
            .iter()
            .filter(|m| m.name != name && self.live(m, now))
            .collect();
        let desired = View::new(
            live.iter()
                .map(|m| m.record.identity.clone())
                .chain(std::iter::once(me.clone())),
        );
        if let Some(m) = &*self.shard.inner.metrics.lock() {
            m.members
                .set(i64::try_from(desired.len()).unwrap_or(i64::MAX));
        }
        let waiting_for_peers = !self.acked_once
            && desired.len() < self.cfg().replicas_hint
            && self
                .acquired_at
                .is_some_and(|t| now < t + self.cfg().lease_duration);
        let mut again = false;
        if !waiting_for_peers {
            let (acked, pending) = {
                let st = self.shard.inner.state.lock();
                (st.pred.acked.clone(), st.pred.pending.clone())
            };
            if desired != acked {
                if pending.as_ref() != Some(&desired) {
                    tracing::info!(group = %group, identity = %me, from = ?acked, to = ?desired, "members changed: releasing keys");
                    let d = desired.clone();
                    self.shard.change(&self.hooks, move |p| p.pending = Some(d));
                    // publish at once if nothing running has to finish
                    again = true;
                }
            } else if pending.is_some() {
                self.shard.change(&self.hooks, |p| p.pending = None);
            }
        } else if !self.waiting_logged {
            self.waiting_logged = true;
            tracing::info!(group = %group, identity = %me, seen = desired.len(), hint = self.cfg().replicas_hint, "waiting for more replicas before taking keys");
        }

        // 6. The gate: other members' claims, from this list (which
        // follows our last write).
        let (acked, gate_open) = {
            let st = self.shard.inner.state.lock();
            let open = st.pred.gate.as_ref().is_none_or(|g| !g.blockers.is_empty());
            (st.pred.acked.clone(), open)
        };
        if !acked.is_empty() && gate_open {
            let blockers: Vec<(String, View)> = live
                .iter()
                .filter_map(|m| {
                    let v = View::new(m.record.acked.clone()?);
                    (v != acked && v.contains(&m.record.identity))
                        .then(|| (m.record.identity.clone(), v))
                })
                .collect();
            let changed = {
                let st = self.shard.inner.state.lock();
                st.pred.gate.as_ref().is_none_or(|g| {
                    g.blockers
                        .iter()
                        .map(|(i, v)| (i, v))
                        .ne(blockers.iter().map(|(i, v)| (i, v)))
                })
            };
            if changed {
                if !blockers.is_empty() {
                    tracing::debug!(group = %group, identity = %me, waiting_for = ?blockers.iter().map(|(i, _)| i).collect::<Vec<_>>(), "waiting for members to acknowledge");
                }
                let gate = Gate {
                    blockers: Arc::new(blockers),
                };
                self.shard.change(&self.hooks, move |p| {
                    p.gate = Some(gate);
                    p.carry = None;
                });
            }
        }

        // 7. Delete released Leases unchanged for a lease duration (every
        // member has listed them released by then) and Leases expired for
        // two lease durations.
        for m in &list {
            if m.name == name || self.ghosts.contains(&m.name) {
                continue;
            }
            let over = self.expired_for(m, now);
            let long_dead = if m.record.identity.is_empty() {
                over.is_some()
            } else {
                over.is_some_and(|over| {
                    over >= Duration::from_secs(
                        u64::try_from(m.record.lease_duration_seconds.max(1)).unwrap_or(1),
                    )
                })
            };
            if long_dead {
                let delete = store.delete(&group, &m.name, &m.resource_version);
                match timed(period, delete).await {
                    Ok(()) => {
                        tracing::info!(group = %group, lease = %m.name, identity = %m.record.identity, "deleted an expired membership lease");
                    }
                    Err(e) => {
                        tracing::debug!(lease = %m.name, error = %e, "deleting an expired membership lease")
                    }
                }
            }
        }
        Ok(again)
    }

    async fn acquire(
        &mut self,
        mine: Option<&StoredMember>,
        now: Instant,
    ) -> Result<bool, ShardError> {
        let group = self.cfg().group.clone();
        let name = self.shard.inner.lease_name.clone();
        let store = self.shard.inner.store.clone();
        let mut record = self.record(&View::default());
        record.acquire_time = Some(Timestamp::now());
        let sent = Instant::now();
        let result = match mine {
            None => {
                timed(
                    self.cfg().retry_period,
                    store.create(&group, &name, &record),
                )
                .await
            }
            Some(m) if m.record.instance == self.shard.inner.instance => {
                Ok(m.resource_version.clone())
            }
            Some(m) if m.record.identity.is_empty() || self.expired_for(m, now).is_some() => {
                let update = store.update(&group, &name, &record, &m.resource_version);
                timed(self.cfg().retry_period, update).await
            }
            Some(m) => {
                if !self.waiting_logged {
                    self.waiting_logged = true;
                    tracing::warn!(group = %group, lease = %name, instance = %m.record.instance, "the membership lease of this identity is held by another process: waiting until it expires");
                }
                return Ok(false);
            }
        };
        match result {
            Ok(rv) => {
                tracing::info!(group = %group, lease = %name, "membership lease taken");
                self.own = Some(Own {
                    rv: rv.clone(),
                    acquire_time: record.acquire_time,
                });
                self.acquired_at.get_or_insert(sent);
                self.waiting_logged = false;
                {
                    let mut st = self.shard.inner.state.lock();
                    st.pred.acked = View::default();
                    st.pred.pending = None;
                    st.pred.gate = None;
                    st.pred.carry = None;
                    st.pred.uncertain.clear();
                }
                self.wrote(sent, rv, None);
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(group = %group, lease = %name, error = %e, "taking the membership lease failed");
                Ok(false)
            }
        }
    }

    /// Writes a released record (no holder, no claim) into our Lease: the
    /// others take its keys at once; a member deletes it a lease duration
    /// later. The workers have stopped.
    async fn release(&mut self) {
        let Some(own) = &self.own else { return };
        let cfg = self.cfg();
        let store = &self.shard.inner.store;
        let mut rv = own.rv.clone();
        let mut record = self.record(&View::default());
        record.identity = String::new();
        for _ in 0..3 {
            let update = store.update(&cfg.group, &self.shard.inner.lease_name, &record, &rv);
            match timed(cfg.retry_period, update).await {
                Ok(_) | Err(ShardStoreError::NotFound) => {
                    tracing::info!(group = %cfg.group, identity = %cfg.identity, "membership lease released");
                    return;
                }
                Err(ShardStoreError::Conflict) => {
                    // Read the current version; release it only if it is ours.
                    let Ok(list) = timed(cfg.retry_period, store.list(&cfg.group)).await else {
                        break;
                    };
                    match list.iter().find(|m| m.name == self.shard.inner.lease_name) {
                        Some(m) if m.record.instance == self.shard.inner.instance => {
                            rv = m.resource_version.clone();
                        }
                        _ => return,
                    }
                }
                Err(e) => {
                    tracing::warn!(group = %cfg.group, error = %e, "releasing the membership lease failed; it expires instead");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
