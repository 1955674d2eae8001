//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's
//! semantics (`tools/leaderelection`).
//!
//! * **Validation**: lease duration > renew deadline > 1.2 x retry period,
//!   all positive, identity and lease name non-empty
//!   ([`LeaderElectionConfig::validate`]).
//! * **Acquire**: try every retry period (jittered by up to 1.2 x) until the
//!   lease is free, expired or already ours.
//! * **Expiry** is judged on the local clock, as client-go does: a lease held
//!   by someone else is valid while `observed_time + leaseDurationSeconds >
//!   now`, where `observed_time` is when *this* candidate last saw the
//!   record change. Clocks of different machines are never compared.
//! * **Renew** every retry period; when no renewal succeeded within the
//!   renew deadline, counted from the start of the last successful one,
//!   leadership is lost: the leading token is cancelled and
//!   `on_stopped_leading` runs. Since a standby waits a whole lease
//!   duration (> renew deadline) after it saw that renewal, the old leader
//!   has stopped before anyone can take over, whatever the latency of the
//!   requests.
//! * **Takeover** increments `leaseTransitions`; a renewal keeps the
//!   acquire time and the transitions.
//! * **Release on cancel**: the holder is cleared (and the duration set to
//!   1 s) so that a standby takes over at once.
//!
//! The lease is read and written through the small
//! [`LeaseLock`] trait: [`KubeLeaseLock`](crate::KubeLeaseLock)
//! talks to the apiserver; the `testing` feature adds an in-memory one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::resource_lock::{LeaderElectionRecord, LeaseError, LeaseLock};
use crate::timings::{LeaseTimings, LeaseTimingsError};
use kcache_core::metrics::CounterMetric;

/// Leader election settings: this candidate's identity, the
/// [`LeaseTimings`] (default 15 s lease, 10 s renew deadline, 2 s retry
/// period: client-go's documented values) and release on cancel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// This candidate's identity (unique per replica: e.g. the pod name).
    pub identity: String,
    /// Lease duration, renew deadline and retry period.
    pub timings: LeaseTimings,
    /// Clear the holder when the election is cancelled, so that a standby
    /// takes over at once instead of waiting a lease duration (default on).
    ///
    /// client-go leaves this off by default: its callers may cancel the
    /// election while work guarded by the lease still runs, and a released
    /// lease would then let a standby act beside it. A kcache controller
    /// cancels its election only after every worker has stopped (running
    /// reconciles finished, or were abandoned at the graceful timeout), so
    /// releasing is safe there and shortens a rolling update's gap without
    /// a leader from a lease duration to about a retry period. Turn it off
    /// if you run a [`LeaderElector`] yourself and cannot guarantee that
    /// order.
    pub release_on_cancel: bool,
}

/// Why a [`LeaderElectionConfig`] is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaderElectionConfigError {
    /// The durations break client-go's rules.
    #[error(transparent)]
    Timings(#[from] LeaseTimingsError),
    /// The identity was empty.
    #[error("the leader election identity must not be empty")]
    EmptyIdentity,
}

impl LeaderElectionConfig {
    /// Defaults for the candidate `identity`.
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            identity: identity.into(),
            timings: LeaseTimings::default(),
            release_on_cancel: true,
        }
    }
    crate::timings::timing_setters!(timings);
    /// Whether to release the lease when cancelled.
    pub fn release_on_cancel(mut self, release: bool) -> Self {
        self.release_on_cancel = release;
        self
    }

    /// Checks client-go's rules: the timings ([`LeaseTimings::validate`]),
    /// and a non-empty identity.
    pub fn validate(&self) -> Result<(), LeaderElectionConfigError> {
        self.timings.validate()?;
        if self.identity.is_empty() {
            return Err(LeaderElectionConfigError::EmptyIdentity);
        }
        Ok(())
    }
}

/// Where a candidate stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderStatus {
    /// The election has not started.
    NotStarted,
    /// Trying to acquire; `leader` is the holder last seen (if any).
    StandingBy {
        /// The current holder as last observed.
        leader: Option<String>,
    },
    /// This candidate holds the lease.
    Leading,
    /// The election ended (cancelled, or leadership lost).
    Stopped,
}

#[derive(Default)]
struct Observed {
    record: Option<LeaderElectionRecord>,
    resource_version: Option<String>,
    time: Option<Instant>,
    reported_leader: Option<String>,
}

/// Called with the identity of a newly observed leader.
pub type NewLeaderFn = Box<dyn Fn(&str) + Send + Sync>;

/// Callbacks of a [`LeaderElector::run`] (client-go's
/// `LeaderCallbacks`).
pub struct LeaderCallbacks {
    /// Called when this candidate becomes the leader, with a token
    /// cancelled when it stops leading.
    pub on_started_leading: Box<dyn FnOnce(CancellationToken) + Send>,
    /// Called when the election ends, whether or not this candidate ever
    /// led.
    pub on_stopped_leading: Box<dyn FnOnce() + Send>,
    /// Called when a new leader is observed (including this candidate).
    pub on_new_leader: Option<NewLeaderFn>,
}

impl fmt::Debug for LeaderCallbacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderCallbacks").finish_non_exhaustive()
    }
}

impl Default for LeaderCallbacks {
    fn default() -> Self {
        Self {
            on_started_leading: Box::new(|_| {}),
            on_stopped_leading: Box::new(|| {}),
            on_new_leader: None,
        }
    }
}

/// How often a lasting lease failure is logged again at WARN (a change of
/// error is logged at once).
const LEASE_WARN_EVERY: Duration = Duration::from_secs(60);

/// Lease requests that failed for a reason someone has to fix (not
/// contention), since the last one that worked.
struct LeaseProblem {
    since: Instant,
    message: String,
    failures: u64,
    last_warned: Instant,
}

/// A candidate in a leader election (client-go's `LeaderElector`).
pub struct LeaderElector {
    config: LeaderElectionConfig,
    lock: Arc<dyn LeaseLock>,
    observed: Mutex<Observed>,
    status: watch::Sender<LeaderStatus>,
    /// When the last successful write of this candidate's own record (an
    /// acquire or a renewal) was started.
    renewed_at: Mutex<Option<Instant>>,
    problem: Mutex<Option<LeaseProblem>>,
    errors: Mutex<Option<Box<dyn CounterMetric>>>,
}

impl fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElector")
            .field("identity", &self.config.identity)
            .field("lease", &self.lock.describe())
            .field("status", &*self.status.borrow())
            .finish()
    }
}

fn now_timestamp() -> Timestamp {
    Timestamp::now()
}

impl LeaderElector {
    /// A candidate; fails when the configuration is invalid.
    pub fn new(
        config: LeaderElectionConfig,
        lock: Arc<dyn LeaseLock>,
    ) -> Result<Self, LeaderElectionConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            lock,
            observed: Mutex::new(Observed::default()),
            status: watch::Sender::new(LeaderStatus::NotStarted),
            renewed_at: Mutex::new(None),
            problem: Mutex::new(None),
            errors: Mutex::new(None),
        })
    }

    /// Counts every failed lease request (contention excluded) in
    /// `counter` (a controller's `kcache_leader_election_errors_total`).
    pub fn set_error_counter(&self, counter: Box<dyn CounterMetric>) {
        *self.errors.lock() = Some(counter);
    }

    /// Since when lease requests have been failing (contention excluded),
    /// and the last error; `None` while they work. A standby that cannot
    /// read or create its Lease (RBAC, a missing namespace) never leads:
    /// readiness reports this once it lasted a lease duration.
    pub fn failing_since(&self) -> Option<(Instant, String)> {
        self.problem
            .lock()
            .as_ref()
            .map(|p| (p.since, p.message.clone()))
    }

    /// While leading: the instant from which a standby may take the lease
    /// over if no renewal succeeds any more (the start of the last
    /// successful write of this candidate's record plus the lease duration,
    /// on this process's clock). Work guarded by the lease must have
    /// stopped by then.
    pub fn lease_expiry(&self) -> Option<Instant> {
        (*self.renewed_at.lock()).map(|t| t + self.config.timings.lease_duration)
    }

    /// While leading: the instant by which this candidate stops acting
    /// if no renewal succeeds (the start of its last successful renewal
    /// plus the renew deadline, on this process's clock); `None` when it
    /// does not lead.
    pub fn acting_deadline(&self) -> Option<Instant> {
        if *self.status.borrow() != LeaderStatus::Leading {
            return None;
        }
        (*self.renewed_at.lock()).map(|t| t + self.config.timings.renew_deadline)
    }

    /// Whether this candidate may act now: it leads and its renew deadline
    /// has not passed on this process's clock. Checked on the clock, not
    /// only through the leading token: a process that was paused (SIGSTOP,
    /// a stalled VM) runs its ready tasks in any order when it resumes, so
    /// work may run before the election task that cancels the token.
    pub fn may_act(&self) -> bool {
        self.acting_deadline()
            .is_some_and(|deadline| Instant::now() < deadline)
    }

    fn lease_ok(&self) {
        if let Some(p) = self.problem.lock().take() {
            tracing::info!(
                lease = %self.lock.describe(),
                failures = p.failures,
                failing_for = ?p.since.elapsed(),
                "lease requests work again"
            );
        }
    }

    /// Records a failed lease request: contention stays at DEBUG; anything
    /// else is counted and logged at WARN, at once when the error changes
    /// and at most every [`LEASE_WARN_EVERY`] while it lasts.
    fn lease_failed(&self, verb: &str, e: &LeaseError) {
        if e.is_contention() {
            tracing::debug!(lease = %self.lock.describe(), error = %e, "lease {verb}: lost a race with another candidate");
            return;
        }
        if let Some(c) = &*self.errors.lock() {
            c.inc();
        }
        let now = Instant::now();
        let message = e.to_string();
        let warn = {
            let mut guard = self.problem.lock();
            match &mut *guard {
                Some(p) => {
                    p.failures += 1;
                    let due = p.message != message || now >= p.last_warned + LEASE_WARN_EVERY;
                    if due {
                        p.last_warned = now;
                    }
                    p.message = message;
                    due.then_some((p.failures, p.since))
                }
                None => {
                    *guard = Some(LeaseProblem {
                        since: now,
                        message,
                        failures: 1,
                        last_warned: now,
                    });
                    Some((1, now))
                }
            }
        };
        if let Some((failures, since)) = warn {
            tracing::warn!(
                lease = %self.lock.describe(),
                identity = %self.config.identity,
                failures,
                failing_for = ?now.saturating_duration_since(since),
                error = %e,
                "leader election: the lease {verb} failed"
            );
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// Follows this candidate's status.
    pub fn subscribe(&self) -> watch::Receiver<LeaderStatus> {
        self.status.subscribe()
    }

    /// The current status.
    pub fn status(&self) -> LeaderStatus {
        self.status.borrow().clone()
    }

    /// Whether the last observed record names this candidate as holder.
    pub fn is_leader(&self) -> bool {
        self.observed
            .lock()
            .record
            .as_ref()
            .is_some_and(|r| r.holder_identity == self.config.identity)
    }

    /// The holder of the last observed record (empty holder: `None`).
    pub fn leader(&self) -> Option<String> {
        self.observed
            .lock()
            .record
            .as_ref()
            .map(|r| r.holder_identity.clone())
            .filter(|h| !h.is_empty())
    }

    fn lease_valid(&self, obs: &Observed, now: Instant) -> bool {
        match (&obs.record, obs.time) {
            (Some(r), Some(t)) => {
                let secs = u64::try_from(r.lease_duration_seconds).unwrap_or(0);
                t + Duration::from_secs(secs) > now
            }
            _ => false,
        }
    }

    fn set_observed(&self, record: LeaderElectionRecord, rv: String, now: Instant) {
        let mut obs = self.observed.lock();
        obs.record = Some(record);
        obs.resource_version = Some(rv);
        obs.time = Some(now);
    }

    /// One attempt to acquire or renew the lease (client-go's
    /// `tryAcquireOrRenew`); `true` when this candidate holds it afterwards.
    pub async fn try_acquire_or_renew(&self) -> bool {
        let attempt_started = Instant::now();
        let now_wall = now_timestamp();
        // Whole seconds on the wire, rounded up: a standby must never wait
        // less than the duration this leader's renew deadline assumes.
        let mut record = LeaderElectionRecord {
            holder_identity: self.config.identity.clone(),
            lease_duration_seconds: self.config.timings.lease_seconds(),
            acquire_time: Some(now_wall),
            renew_time: Some(now_wall),
            leader_transitions: 0,
        };

        // Fast path: we lead and our lease is still valid: renew with the
        // record and resourceVersion we already have.
        let fast = {
            let obs = self.observed.lock();
            let leading = obs
                .record
                .as_ref()
                .is_some_and(|r| r.holder_identity == self.config.identity);
            if leading && self.lease_valid(&obs, Instant::now()) {
                obs.record.clone().zip(obs.resource_version.clone())
            } else {
                None
            }
        };
        if let Some((old, rv)) = fast {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
            match self.lock.update(&record, &rv).await {
                Ok(new_rv) => {
                    self.set_observed(record, new_rv, Instant::now());
                    self.wrote_own_record(attempt_started);
                    return true;
                }
                Err(e) => {
                    tracing::debug!(lease = %self.lock.describe(), error = %e,
                        "optimistic lease renewal failed; reading the lease");
                }
            }
        }

        // 1. Read (or create) the lease.
        let (old, old_rv) = match self.lock.get().await {
            Ok(Some(found)) => {
                self.lease_ok();
                found
            }
            Ok(None) => {
                let created = self.lock.create(&record).await;
                return self.wrote(record, created, "create", attempt_started);
            }
            Err(e) => {
                self.lease_failed("get", &e);
                return false;
            }
        };

        // 2. Record what we saw; a changed record restarts the expiry clock.
        let now = Instant::now();
        let (held_by_other, we_lead) = {
            let mut obs = self.observed.lock();
            if obs.record.as_ref() != Some(&old) {
                obs.record = Some(old.clone());
                obs.time = Some(now);
            }
            obs.resource_version = Some(old_rv.clone());
            let we_lead = old.holder_identity == self.config.identity;
            (
                !old.holder_identity.is_empty() && self.lease_valid(&obs, now) && !we_lead,
                we_lead,
            )
        };
        self.report_leader();
        if held_by_other {
            tracing::trace!(lease = %self.lock.describe(), holder = %old.holder_identity, "lease is held by another candidate");
            return false;
        }

        // 3. Take over or renew.
        if we_lead {
            record.acquire_time = old.acquire_time;
            record.leader_transitions = old.leader_transitions;
        } else {
            record.leader_transitions = old.leader_transitions.saturating_add(1);
        }
        let updated = self.lock.update(&record, &old_rv).await;
        self.wrote(record, updated, "update", attempt_started)
    }

    /// The outcome of writing this candidate's own `record` (a `create` or
    /// an `update` started at `started`): on success it is what we observe
    /// now, with its new resource version; whether it succeeded.
    fn wrote(
        &self,
        record: LeaderElectionRecord,
        written: Result<String, LeaseError>,
        what: &str,
        started: Instant,
    ) -> bool {
        match written {
            Ok(rv) => {
                self.set_observed(record, rv, Instant::now());
                self.wrote_own_record(started);
                self.report_leader();
                true
            }
            Err(e) => {
                self.lease_failed(what, &e);
                false
            }
        }
    }

    /// A write of this candidate's own record (started at `started`)
    /// succeeded.
    fn wrote_own_record(&self, started: Instant) {
        *self.renewed_at.lock() = Some(started);
        self.lease_ok();
    }

    fn report_leader(&self) {
        let leader = self.leader();
        let changed = {
            let mut obs = self.observed.lock();
            if obs.reported_leader != leader {
                obs.reported_leader = leader.clone();
                true
            } else {
                false
            }
        };
        if changed && let Some(l) = &leader {
            tracing::info!(lease = %self.lock.describe(), leader = %l, "new leader observed");
        }
        if *self.status.borrow() != LeaderStatus::Leading {
            let status = LeaderStatus::StandingBy { leader };
            self.status.send_if_modified(|s| {
                if *s != status && *s != LeaderStatus::Stopped {
                    *s = status;
                    true
                } else {
                    false
                }
            });
        }
    }

    /// Clears the holder if this candidate leads (client-go's `release`):
    /// holder `""`, duration 1 s, transitions kept. `true` on success or
    /// when there was nothing to release.
    pub async fn release(&self) -> bool {
        let (old, rv) = {
            let obs = self.observed.lock();
            match (&obs.record, &obs.resource_version) {
                (Some(r), Some(rv)) if r.holder_identity == self.config.identity => {
                    (r.clone(), rv.clone())
                }
                _ => return true,
            }
        };
        let now = now_timestamp();
        let record = LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: old.leader_transitions,
        };
        match self.lock.update(&record, &rv).await {
            Ok(new_rv) => {
                self.set_observed(record, new_rv, Instant::now());
                *self.renewed_at.lock() = None;
                tracing::info!(lease = %self.lock.describe(), identity = %self.config.identity, "released the lease");
                true
            }
            Err(e) => {
                tracing::warn!(lease = %self.lock.describe(), error = %e, "releasing the lease failed");
                false
            }
        }
    }

    /// Runs the election until `cancel` fires or leadership is lost:
    /// acquire (jittered retries), call `on_started_leading`, renew, and
    /// finally call `on_stopped_leading` (always, even if this candidate
    /// never led). Returns `true` if it stopped because leadership was lost.
    pub async fn run(&self, cancel: CancellationToken, callbacks: LeaderCallbacks) -> bool {
        let LeaderCallbacks {
            on_started_leading,
            on_stopped_leading,
            on_new_leader,
        } = callbacks;
        struct Deferred(Option<Box<dyn FnOnce() + Send>>);
        impl Drop for Deferred {
            fn drop(&mut self) {
                if let Some(f) = self.0.take() {
                    f();
                }
            }
        }
        let _stopped = Deferred(Some(on_stopped_leading));
        let election = async {
            let Some(acquired_at) = self.acquire(&cancel).await else {
                self.status.send_replace(LeaderStatus::Stopped);
                return false;
            };
            self.status.send_replace(LeaderStatus::Leading);
            let leading = cancel.child_token();
            on_started_leading(leading.clone());
            let lost = self.renew(&cancel, acquired_at).await;
            leading.cancel();
            if lost {
                tracing::warn!(lease = %self.lock.describe(), identity = %self.config.identity, "failed to renew the lease in time: leadership lost");
            } else if self.config.release_on_cancel {
                // Bounded: a shutdown never hangs on an unreachable apiserver.
                let released =
                    tokio::time::timeout(self.config.timings.renew_deadline, self.release()).await;
                if released.is_err() {
                    tracing::warn!(lease = %self.lock.describe(), "releasing the lease timed out");
                }
            }
            self.status.send_replace(LeaderStatus::Stopped);
            lost
        };
        match on_new_leader {
            Some(f) => {
                let notify = self.notify_new_leaders(f, &cancel);
                let mut notify = std::pin::pin!(notify);
                let mut election = std::pin::pin!(election);
                tokio::select! {
                    lost = &mut election => lost,
                    _ = &mut notify => election.await,
                }
            }
            None => election.await,
        }
    }

    /// Calls `f` with each new leader observed, until `cancel`.
    async fn notify_new_leaders(&self, f: NewLeaderFn, cancel: &CancellationToken) {
        let identity = self.config.identity.clone();
        let mut last: Option<String> = None;
        let mut rx = self.status.subscribe();
        loop {
            let current = match &*rx.borrow_and_update() {
                LeaderStatus::Leading => Some(identity.clone()),
                LeaderStatus::StandingBy { leader } => leader.clone(),
                _ => None,
            };
            if current.is_some() && current != last {
                if let Some(l) = &current {
                    f(l);
                }
                last = current;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = rx.changed() => if r.is_err() { return },
            }
        }
    }

    /// Tries every retry period (jittered) until this candidate holds the
    /// lease; returns when the successful write started, or `None` when
    /// cancelled.
    async fn acquire(&self, cancel: &CancellationToken) -> Option<Instant> {
        self.status.send_if_modified(|s| {
            if *s == LeaderStatus::NotStarted {
                *s = LeaderStatus::StandingBy { leader: None };
                true
            } else {
                false
            }
        });
        tracing::info!(lease = %self.lock.describe(), identity = %self.config.identity, "attempting to acquire the lease");
        let deadline = self.config.timings.renew_deadline;
        loop {
            if cancel.is_cancelled() {
                return None;
            }
            let started = Instant::now();
            // Bounded: an attempt whose requests hang (no answer, no error)
            // counts as a failure and is retried.
            let attempt = tokio::time::timeout(deadline, self.try_acquire_or_renew());
            let acquired = tokio::select! {
                _ = cancel.cancelled() => false,
                r = attempt => r.unwrap_or_else(|_| {
                    self.lease_failed("acquire", &LeaseError::Timeout { after: deadline });
                    false
                }),
            };
            if acquired {
                tracing::info!(lease = %self.lock.describe(), identity = %self.config.identity, "acquired the lease");
                return Some(started);
            }
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(self.config.timings.jittered_retry()) => {}
            }
        }
    }

    /// Renews every retry period until `cancel` (returns `false`) or until
    /// no renewal succeeded within the renew deadline (returns `true`:
    /// leadership lost).
    ///
    /// The renew deadline runs from the *start* of the last successful
    /// write (the acquire, at first), not from when its answer came back
    /// nor from the next attempt: a standby that saw that write waits a
    /// whole lease duration after seeing it, so a leader that gives up at
    /// `last_ok + renew_deadline` has stopped before any standby can take
    /// over, whatever the retry period and the request latency (client-go
    /// starts the deadline at the next attempt, one retry period after the
    /// last success returned: with a renew deadline close to the lease
    /// duration two leaders could act at once).
    async fn renew(&self, cancel: &CancellationToken, mut last_ok: Instant) -> bool {
        let period = self.config.timings.retry_period;
        loop {
            let deadline = last_ok + self.config.timings.renew_deadline;
            // never sleep past the deadline (a slow last answer may leave
            // less than a retry period)
            let next = deadline.min(Instant::now() + period);
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep_until(next) => {}
            }
            loop {
                let started = Instant::now();
                if started >= deadline {
                    return true;
                }
                let attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew());
                let ok = tokio::select! {
                    _ = cancel.cancelled() => return false,
                    r = attempt => r.unwrap_or_else(|_| {
                        self.lease_failed("renew", &LeaseError::Timeout { after: deadline.saturating_duration_since(started) });
                        false
                    }),
                };
                if ok {
                    last_ok = started;
                    break;
                }
                if Instant::now() >= deadline {
                    return true;
                }
                tokio::select! {
                    _ = cancel.cancelled() => return false,
                    _ = tokio::time::sleep_until(deadline.min(Instant::now() + period)) => {}
                }
            }
        }
    }
}
