//! The membership protocol's rounds (see the [module docs](super)): one
//! [`Coordinator::step`] per retry period or wake-up.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::{
    Frozen, Gate, MemberRecord, Shard, ShardConfig, ShardError, ShardHooks, ShardStoreError,
    StoredMember, View,
};

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

pub(super) struct Coordinator {
    shard: Shard,
    hooks: ShardHooks,
    /// Lease name -> (resourceVersion, when this replica saw it change).
    observed: HashMap<String, (String, Instant)>,
    /// Lease name -> the last record seen, to remember a Lease that
    /// vanished while it claimed keys (a "ghost", live until it expired).
    last_seen: HashMap<String, StoredMember>,
    /// The ghosts of the last list.
    ghosts: HashSet<String>,
    own: Option<Own>,
    acquired_at: Option<Instant>,
    last_write: Option<Instant>,
    acked_once: bool,
    waiting_logged: bool,
}

impl Coordinator {
    pub(super) fn new(shard: Shard, hooks: ShardHooks) -> Self {
        Self {
            shard,
            hooks,
            observed: HashMap::new(),
            last_seen: HashMap::new(),
            ghosts: HashSet::new(),
            own: None,
            acquired_at: None,
            last_write: None,
            acked_once: false,
            waiting_logged: false,
        }
    }

    fn cfg(&self) -> &ShardConfig {
        &self.shard.inner.config
    }

    pub(super) fn next_wait(&self) -> Duration {
        let period = self.period();
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
            lease_duration_seconds: cfg.timings.lease_seconds(),
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
            u64::try_from(self.cfg().timings.lease_seconds()).unwrap_or(1)
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
        let deadline = sent + self.cfg().timings.renew_deadline;
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
    pub(super) async fn step(&mut self) -> Result<bool, ShardError> {
        // 1. Publish the pending view once its keys are released, or renew.
        let conflict = self.publish_or_renew().await;
        // 2. A fresh list, after any write above.
        let Some(list) = self.list_group().await else {
            return Ok(false);
        };
        let now = Instant::now();
        let list = self.observe(list, now);
        // 3. Our own Lease.
        let name = self.shard.inner.lease_name.clone();
        let mine = list.iter().find(|m| m.name == name);
        if self.own.is_none() {
            return self.acquire(mine, now).await;
        }
        if let Some(next) = self.check_own_lease(mine, conflict)? {
            return Ok(next);
        }
        // 4. Lapsed renewals: work nothing until a renewal succeeds.
        if !self.renewed_in_time(now) {
            return Ok(false);
        }
        // 5. The desired view, 6. the gate, 7. clean-up.
        let live: Vec<&StoredMember> = list
            .iter()
            .filter(|m| m.name != name && self.live(m, now))
            .collect();
        let again = self.follow_desired_view(&live, now);
        self.update_gate(&live);
        self.delete_dead_leases(&list, now).await;
        Ok(again)
    }

    fn period(&self) -> Duration {
        self.cfg().timings.retry_period
    }

    /// Writes this replica's record when a pending view is ready to publish
    /// (no running reconcile of a key given up) or a renewal is due.
    /// Returns whether the write met a conflict.
    async fn publish_or_renew(&mut self) -> bool {
        let Some(own) = &self.own else { return false };
        let publish = {
            let st = self.shard.inner.state.lock();
            let now = Instant::now();
            st.pred
                .pending
                .clone()
                .filter(|_| st.inflight.keys().all(|k| st.pred.works(k, now)))
        };
        let renew_due = self
            .last_write
            .is_none_or(|t| Instant::now() >= t + self.period());
        if publish.is_none() && !renew_due {
            return false;
        }
        let acked = {
            let st = self.shard.inner.state.lock();
            publish.clone().unwrap_or_else(|| st.pred.acked.clone())
        };
        let record = self.record(&acked);
        let (rv, sent) = (own.rv.clone(), Instant::now());
        let (group, name) = (
            self.cfg().group.clone(),
            self.shard.inner.lease_name.clone(),
        );
        let store = self.shard.inner.store.clone();
        match timed(self.period(), store.update(&group, &name, &record, &rv)).await {
            Ok(rv) => {
                if publish.is_some() {
                    tracing::info!(group = %group, identity = %self.cfg().identity, view = ?acked, "acknowledged view");
                }
                self.wrote(sent, rv, publish);
                false
            }
            Err(ShardStoreError::Conflict) => true,
            Err(ShardStoreError::NotFound) => {
                tracing::warn!(group = %group, lease = %name, "membership lease deleted (by a member that saw it expired, or by hand): rejoining");
                self.own = None;
                let mut st = self.shard.inner.state.lock();
                st.pred.active = false;
                st.pred.acked = View::default();
                st.pred.gate = None;
                st.pred.carry = None;
                st.pred.uncertain.clear();
                false
            }
            Err(e) => {
                tracing::warn!(group = %group, error = %e, "renewing the membership lease failed");
                if let Some(v) = publish {
                    self.shard.inner.state.lock().pred.uncertain.push(v);
                }
                false
            }
        }
    }

    /// The group's Leases, fresh; `None` (logged) when the list failed.
    async fn list_group(&self) -> Option<Vec<StoredMember>> {
        let group = &self.cfg().group;
        match timed(self.period(), self.shard.inner.store.list(group)).await {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(group = %group, error = %e, "listing the shard group failed");
                None
            }
        }
    }

    /// Checks our own Lease in the list: held by another process (an
    /// error), our conflicting write landed after all (run again), or
    /// deleted (wait for the next write to rejoin). `None`: carry on.
    fn check_own_lease(
        &mut self,
        mine: Option<&StoredMember>,
        conflict: bool,
    ) -> Result<Option<bool>, ShardError> {
        match mine {
            Some(m) if m.record.instance != self.shard.inner.instance => {
                Err(ShardError::DuplicateIdentity {
                    group: self.cfg().group.clone(),
                    identity: self.cfg().identity.clone(),
                    other_instance: m.record.instance.clone(),
                })
            }
            Some(m) if conflict => {
                if let Some(own) = &mut self.own {
                    own.rv = m.resource_version.clone();
                }
                Ok(Some(true))
            }
            None => Ok(Some(false)),
            Some(_) => Ok(None),
        }
    }

    fn renewed_in_time(&self, now: Instant) -> bool {
        let st = self.shard.inner.state.lock();
        st.pred.active && st.pred.deadline.is_some_and(|d| now < d)
    }

    /// Moves towards the view of the live members plus this replica:
    /// starts releasing keys when it changed (returns `true`: publish at
    /// once if nothing running has to finish), except at startup while
    /// fewer members than the replicas hint are seen (at most a lease
    /// duration).
    fn follow_desired_view(&mut self, live: &[&StoredMember], now: Instant) -> bool {
        let me = self.cfg().identity.clone();
        let group = self.cfg().group.clone();
        let desired = View::new(
            live.iter()
                .map(|m| m.record.identity.clone())
                .chain(std::iter::once(me.clone())),
        );
        if let Some(m) = &*self.shard.inner.metrics.lock() {
            m.members.set(desired.len() as f64);
        }
        let waiting_for_peers = !self.acked_once
            && desired.len() < self.cfg().replicas_hint
            && self
                .acquired_at
                .is_some_and(|t| now < t + self.cfg().timings.lease_duration);
        if waiting_for_peers {
            if !self.waiting_logged {
                self.waiting_logged = true;
                tracing::info!(group = %group, identity = %me, seen = desired.len(), hint = self.cfg().replicas_hint, "waiting for more replicas before taking keys");
            }
            return false;
        }
        let (acked, pending) = {
            let st = self.shard.inner.state.lock();
            (st.pred.acked.clone(), st.pred.pending.clone())
        };
        if desired == acked {
            if pending.is_some() {
                self.shard.change(&self.hooks, |p| p.pending = None);
            }
            return false;
        }
        if pending.as_ref() == Some(&desired) {
            return false;
        }
        tracing::info!(group = %group, identity = %me, from = ?acked, to = ?desired, "members changed: releasing keys");
        self.shard
            .change(&self.hooks, move |p| p.pending = Some(desired));
        true
    }

    /// The gate: the live members whose acknowledged view differs from ours
    /// and still claims keys, from this list (which follows our last
    /// write). A gained key starts only when none of them claims it.
    fn update_gate(&mut self, live: &[&StoredMember]) {
        let (acked, gate_open) = {
            let st = self.shard.inner.state.lock();
            let open = st.pred.gate.as_ref().is_none_or(|g| !g.blockers.is_empty());
            (st.pred.acked.clone(), open)
        };
        if acked.is_empty() || !gate_open {
            return;
        }
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
        if !changed {
            return;
        }
        if !blockers.is_empty() {
            tracing::debug!(group = %self.cfg().group, identity = %self.cfg().identity, waiting_for = ?blockers.iter().map(|(i, _)| i).collect::<Vec<_>>(), "waiting for members to acknowledge");
        }
        let gate = Gate {
            blockers: Arc::new(blockers),
        };
        self.shard.change(&self.hooks, move |p| {
            p.gate = Some(gate);
            p.carry = None;
        });
    }

    /// Deletes released Leases unchanged for a lease duration (every member
    /// has listed them released by then) and Leases expired for two lease
    /// durations.
    async fn delete_dead_leases(&self, list: &[StoredMember], now: Instant) {
        let group = &self.cfg().group;
        for m in list {
            if m.name == self.shard.inner.lease_name || self.ghosts.contains(&m.name) {
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
            if !long_dead {
                continue;
            }
            let delete = self
                .shard
                .inner
                .store
                .delete(group, &m.name, &m.resource_version);
            match timed(self.period(), delete).await {
                Ok(()) => {
                    tracing::info!(group = %group, lease = %m.name, identity = %m.record.identity, "deleted an expired membership lease");
                }
                Err(e) => {
                    tracing::debug!(lease = %m.name, error = %e, "deleting an expired membership lease")
                }
            }
        }
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
            None => timed(self.period(), store.create(&group, &name, &record)).await,
            Some(m) if m.record.instance == self.shard.inner.instance => {
                Ok(m.resource_version.clone())
            }
            Some(m) if m.record.identity.is_empty() || self.expired_for(m, now).is_some() => {
                let update = store.update(&group, &name, &record, &m.resource_version);
                timed(self.period(), update).await
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
    pub(super) async fn release(&mut self) {
        let Some(own) = &self.own else { return };
        let cfg = self.cfg();
        let store = &self.shard.inner.store;
        let mut rv = own.rv.clone();
        let mut record = self.record(&View::default());
        record.identity = String::new();
        for _ in 0..3 {
            let update = store.update(&cfg.group, &self.shard.inner.lease_name, &record, &rv);
            match timed(cfg.timings.retry_period, update).await {
                Ok(_) | Err(ShardStoreError::NotFound) => {
                    tracing::info!(group = %cfg.group, identity = %cfg.identity, "membership lease released");
                    return;
                }
                Err(ShardStoreError::Conflict) => {
                    // Read the current version; release it only if it is ours.
                    let Ok(list) = timed(cfg.timings.retry_period, store.list(&cfg.group)).await
                    else {
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
