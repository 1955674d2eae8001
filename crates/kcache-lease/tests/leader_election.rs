//! Leader election against the in-memory lease store, on tokio's paused
//! clock: validation, acquire, renew, expiry-based takeover, release,
//! losing the lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use kcache_lease::testing::InMemoryLeaseLock;
use kcache_lease::{
    JITTER_FACTOR, LeaderCallbacks, LeaderElectionConfig, LeaderElectionConfigError,
    LeaderElectionRecord, LeaderElector, LeaderStatus, LeaseTimings, LeaseTimingsError,
};
use tokio_util::sync::CancellationToken;

/// A candidate `id` on `store`, with [`cfg`].
fn elector(store: &InMemoryLeaseLock, id: &str) -> LeaderElector {
    LeaderElector::new(cfg(id), Arc::new(store.clone())).unwrap()
}

/// Electors "a" and "b" on one in-memory lease.
fn electors_a_and_b() -> (InMemoryLeaseLock, LeaderElector, LeaderElector) {
    let store = InMemoryLeaseLock::new();
    let (a, b) = (elector(&store, "a"), elector(&store, "b"));
    (store, a, b)
}

fn cfg(id: &str) -> LeaderElectionConfig {
    LeaderElectionConfig::new(id)
}

#[test]
fn validation_follows_client_go() {
    assert_eq!(cfg("a").validate(), Ok(()));
    let d = LeaderElectionConfig::new("a");
    assert_eq!(
        (
            d.timings.lease_duration,
            d.timings.renew_deadline,
            d.timings.retry_period
        ),
        (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2)
        )
    );
    let e = cfg("a")
        .renew_deadline(Duration::from_secs(15))
        .validate()
        .unwrap_err();
    assert!(matches!(
        e,
        LeaderElectionConfigError::Timings(
            LeaseTimingsError::LeaseDurationNotGreaterThanRenewDeadline { .. }
        )
    ));
    assert!(
        e.to_string()
            .contains("leaseDuration (15s) must be greater than renewDeadline (15s)"),
        "{e}"
    );
    // 1.2 * 2s = 2.4s >= 2.4s
    let e = cfg("a")
        .renew_deadline(Duration::from_millis(2400))
        .validate()
        .unwrap_err();
    assert!(
        matches!(
            e,
            LeaderElectionConfigError::Timings(LeaseTimingsError::RenewDeadlineTooShort { .. })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("retryPeriod*JitterFactor"), "{e}");
    assert!(
        cfg("a")
            .renew_deadline(Duration::from_millis(2500))
            .validate()
            .is_ok()
    );
    let e = cfg("a")
        .lease_duration(Duration::ZERO)
        .renew_deadline(Duration::ZERO)
        .validate()
        .unwrap_err();
    assert!(matches!(
        e,
        LeaderElectionConfigError::Timings(
            LeaseTimingsError::LeaseDurationNotGreaterThanRenewDeadline { .. }
        )
    ));
    let e = cfg("a")
        .retry_period(Duration::ZERO)
        .validate()
        .unwrap_err();
    assert_eq!(
        e,
        LeaderElectionConfigError::Timings(LeaseTimingsError::ZeroDuration("retryPeriod"))
    );
    assert_eq!(
        cfg("").validate(),
        Err(LeaderElectionConfigError::EmptyIdentity)
    );
    assert!(LeaderElector::new(cfg(""), Arc::new(InMemoryLeaseLock::new())).is_err());
}

#[tokio::test(start_paused = true)]
async fn acquire_renew_expire_takeover() {
    let (store, a, b) = electors_a_and_b();

    // a creates the lease
    assert!(a.try_acquire_or_renew().await);
    let r1 = store.record().unwrap();
    assert_eq!(r1.holder_identity, "a");
    assert_eq!(r1.lease_duration_seconds, 15);
    assert_eq!(r1.leader_transitions, 0);
    assert!(a.is_leader());

    // b sees a valid lease held by a
    assert!(!b.try_acquire_or_renew().await);
    assert_eq!(b.leader().as_deref(), Some("a"));
    assert!(!b.is_leader());

    // a renews: acquire time and transitions kept
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(a.try_acquire_or_renew().await);
    let r2 = store.record().unwrap();
    assert_eq!(r2.acquire_time, r1.acquire_time);
    assert_eq!(r2.leader_transitions, 0);

    // b observes the renewal: the expiry clock restarts at b's observation
    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(!b.try_acquire_or_renew().await);
    // 14 s after b's last observation of a change: still valid
    tokio::time::advance(Duration::from_secs(14)).await;
    assert!(!b.try_acquire_or_renew().await);
    // a stops renewing; 15 s after b saw the last change it expires
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(b.try_acquire_or_renew().await);
    let r3 = store.record().unwrap();
    assert_eq!(r3.holder_identity, "b");
    assert_eq!(r3.leader_transitions, 1, "a takeover counts a transition");

    // a comes back: it sees b's fresh record and does not take it
    assert!(!a.try_acquire_or_renew().await);
    assert!(!a.is_leader());
    assert_eq!(a.leader().as_deref(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn release_lets_a_standby_take_over_at_once() {
    let (store, a, b) = electors_a_and_b();
    assert!(a.try_acquire_or_renew().await);
    assert!(!b.try_acquire_or_renew().await);
    assert!(a.release().await);
    let r = store.record().unwrap();
    assert_eq!(r.holder_identity, "");
    assert_eq!(r.lease_duration_seconds, 1);
    // an empty holder is free, whatever the observed time
    assert!(b.try_acquire_or_renew().await);
    assert_eq!(store.record().unwrap().holder_identity, "b");
    assert_eq!(store.record().unwrap().leader_transitions, 1);
    // releasing when not leading is a no-op
    assert!(a.release().await);
    assert_eq!(store.record().unwrap().holder_identity, "b");
}

#[tokio::test(start_paused = true)]
async fn conflicting_writer_wins_and_is_observed() {
    let store = InMemoryLeaseLock::new();
    let a = elector(&store, "a");
    assert!(a.try_acquire_or_renew().await);
    // someone else writes the lease behind a's back (a newer record)
    store.set_record(LeaderElectionRecord {
        holder_identity: "x".into(),
        lease_duration_seconds: 15,
        leader_transitions: 5,
        ..LeaderElectionRecord::default()
    });
    // the optimistic renewal conflicts, the slow path reads x's record
    assert!(!a.try_acquire_or_renew().await);
    assert_eq!(a.leader().as_deref(), Some("x"));
}

#[tokio::test(start_paused = true)]
async fn run_leads_renews_and_releases_on_cancel() {
    let store = InMemoryLeaseLock::new();
    let a = Arc::new(elector(&store, "a"));
    let started = Arc::new(AtomicBool::new(false));
    let stopped = Arc::new(AtomicBool::new(false));
    let leaders = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let cancel = CancellationToken::new();
    let leading_token = Arc::new(parking_lot::Mutex::new(None));
    let task = tokio::spawn({
        let (a, cancel) = (a.clone(), cancel.clone());
        let (started, stopped, leaders, leading_token) = (
            started.clone(),
            stopped.clone(),
            leaders.clone(),
            leading_token.clone(),
        );
        async move {
            a.run(
                cancel,
                LeaderCallbacks {
                    on_started_leading: Box::new(move |t| {
                        started.store(true, Ordering::SeqCst);
                        *leading_token.lock() = Some(t);
                    }),
                    on_stopped_leading: Box::new(move || stopped.store(true, Ordering::SeqCst)),
                    on_new_leader: Some(Box::new(move |l| leaders.lock().push(l.to_owned()))),
                },
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(started.load(Ordering::SeqCst));
    assert_eq!(a.status(), LeaderStatus::Leading);
    let first_renew = store.record().unwrap().renew_time;
    // renewals every retry period
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(store.record().unwrap().holder_identity, "a");
    assert!(store.record().unwrap().renew_time >= first_renew);
    cancel.cancel();
    let lost = task.await.unwrap();
    assert!(!lost);
    assert!(stopped.load(Ordering::SeqCst));
    assert!(leading_token.lock().as_ref().unwrap().is_cancelled());
    assert_eq!(
        store.record().unwrap().holder_identity,
        "",
        "released on cancel"
    );
    assert_eq!(a.status(), LeaderStatus::Stopped);
    assert_eq!(leaders.lock().first().map(String::as_str), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_lose_leadership_and_a_standby_takes_over() {
    let store = InMemoryLeaseLock::new();
    let a_lock = store.handle();
    let a = Arc::new(LeaderElector::new(cfg("a"), Arc::new(a_lock.clone())).unwrap());
    let b = Arc::new(elector(&store, "b"));
    let stops = Arc::new(AtomicUsize::new(0));
    let cancel = CancellationToken::new();
    let run = |e: Arc<LeaderElector>| {
        let cancel = cancel.clone();
        let stops = stops.clone();
        tokio::spawn(async move {
            e.run(
                cancel,
                LeaderCallbacks {
                    on_stopped_leading: Box::new(move || {
                        stops.fetch_add(1, Ordering::SeqCst);
                    }),
                    ..LeaderCallbacks::default()
                },
            )
            .await
        })
    };
    let ta = run(a.clone());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(a.status(), LeaderStatus::Leading);
    let tb = run(b.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        b.status(),
        LeaderStatus::StandingBy {
            leader: Some("a".into())
        }
    );

    // a is cut off from the apiserver
    a_lock.set_failing(true);
    let cut = tokio::time::Instant::now();
    let lost = ta.await.unwrap();
    assert!(lost, "a gave up after the renew deadline");
    let waited = cut.elapsed();
    assert!(
        waited <= Duration::from_secs(10) + Duration::from_secs(2) + Duration::from_millis(100),
        "{waited:?}"
    );
    assert_eq!(a.status(), LeaderStatus::Stopped);
    assert_eq!(stops.load(Ordering::SeqCst), 1);

    // b takes over within a lease duration of when it saw a's last
    // renewal: b sees it at its next attempt (up to a jittered retry
    // period after it was written) and takes the expired lease at the
    // attempt after the expiry (up to another): 15 s + 2 x 4.4 s
    let t = LeaseTimings::default();
    let jittered_retry = t.retry_period.mul_f64(1.0 + JITTER_FACTOR);
    let deadline = cut + t.lease_duration + 2 * jittered_retry + Duration::from_millis(100);
    while b.status() != LeaderStatus::Leading {
        assert!(
            tokio::time::Instant::now() < deadline,
            "b did not take over"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = store.record().unwrap();
    assert_eq!(r.holder_identity, "b");
    assert_eq!(r.leader_transitions, 1);
    cancel.cancel();
    assert!(!tb.await.unwrap());
    assert_eq!(stops.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn on_stopped_leading_runs_even_if_never_leading() {
    let store = InMemoryLeaseLock::new();
    store.set_record(LeaderElectionRecord {
        holder_identity: "other".into(),
        lease_duration_seconds: 15,
        ..LeaderElectionRecord::default()
    });
    let a = elector(&store, "a");
    let stopped = Arc::new(AtomicBool::new(false));
    let cancel = CancellationToken::new();
    let s = stopped.clone();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        c.cancel();
    });
    let lost = a
        .run(
            cancel,
            LeaderCallbacks {
                on_started_leading: Box::new(|_| panic!("must not lead")),
                on_stopped_leading: Box::new(move || s.store(true, Ordering::SeqCst)),
                on_new_leader: None,
            },
        )
        .await;
    assert!(!lost);
    assert!(stopped.load(Ordering::SeqCst));
    assert_eq!(store.record().unwrap().holder_identity, "other");
}

/// A lease store whose writes take effect when sent but answer `latency`
/// later (a slow apiserver), and that fails every request once `ok_updates`
/// updates succeeded (the leader is then cut off). Records when the last
/// successful update was sent.
struct SlowThenCut {
    store: InMemoryLeaseLock,
    latency: Duration,
    ok_updates: usize,
    updates: AtomicUsize,
    last_write: parking_lot::Mutex<Option<tokio::time::Instant>>,
}

#[async_trait::async_trait]
impl kcache_lease::LeaseLock for SlowThenCut {
    async fn get(
        &self,
    ) -> Result<Option<(LeaderElectionRecord, String)>, kcache_lease::LeaseError> {
        if self.updates.load(Ordering::SeqCst) >= self.ok_updates {
            return Err(kcache_lease::LeaseError::Other("cut off".into()));
        }
        self.store.get().await
    }
    async fn create(
        &self,
        record: &LeaderElectionRecord,
    ) -> Result<String, kcache_lease::LeaseError> {
        let sent = tokio::time::Instant::now();
        let rv = self.store.create(record).await?;
        *self.last_write.lock() = Some(sent);
        tokio::time::sleep(self.latency).await;
        Ok(rv)
    }
    async fn update(
        &self,
        record: &LeaderElectionRecord,
        rv: &str,
    ) -> Result<String, kcache_lease::LeaseError> {
        if self.updates.load(Ordering::SeqCst) >= self.ok_updates {
            return Err(kcache_lease::LeaseError::Other("cut off".into()));
        }
        let sent = tokio::time::Instant::now();
        let rv = self.store.update(record, rv).await?;
        self.updates.fetch_add(1, Ordering::SeqCst);
        *self.last_write.lock() = Some(sent);
        tokio::time::sleep(self.latency).await;
        Ok(rv)
    }
    fn describe(&self) -> String {
        "slow, then cut off".into()
    }
}

/// The safety property behind leader election: a leader whose renewals
/// fail stops acting (its token is cancelled) before its lease can be taken,
/// i.e. before `last successful write + lease duration` (a standby that saw
/// that write at once may take over then), for any valid configuration and
/// request latency. A configuration client-go accepts (4 s lease, 3 s renew
/// deadline, 1 s retry period) with 600 ms answers: counting the deadline
/// from the next attempt (as client-go does) kept the leader acting until
/// write + 0.6 + 1 + 3 = 4.6 s > 4 s.
#[tokio::test(start_paused = true)]
async fn a_leader_stops_acting_before_its_lease_can_be_taken() {
    for (latency_ms, retry_ms, renew_ms, lease_s) in [
        (600, 1000, 3000, 4),
        (0, 1000, 3000, 4),
        (900, 2000, 2500, 3),
        (100, 2000, 10_000, 15),
    ] {
        let store = InMemoryLeaseLock::new();
        let lock = Arc::new(SlowThenCut {
            store: store.clone(),
            latency: Duration::from_millis(latency_ms),
            ok_updates: 3,
            updates: AtomicUsize::new(0),
            last_write: parking_lot::Mutex::new(None),
        });
        let config = cfg("a")
            .lease_duration(Duration::from_secs(lease_s))
            .renew_deadline(Duration::from_millis(renew_ms))
            .retry_period(Duration::from_millis(retry_ms));
        let a = LeaderElector::new(config, lock.clone()).unwrap();
        let stopped_at = Arc::new(parking_lot::Mutex::new(None));
        let s = stopped_at.clone();
        let lost = a
            .run(
                CancellationToken::new(),
                LeaderCallbacks {
                    on_started_leading: Box::new(move |token| {
                        tokio::spawn(async move {
                            token.cancelled().await;
                            *s.lock() = Some(tokio::time::Instant::now());
                        });
                    }),
                    ..LeaderCallbacks::default()
                },
            )
            .await;
        assert!(lost);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let stopped = stopped_at.lock().expect("the leading token was cancelled");
        let last_write = lock.last_write.lock().expect("a write");
        let takeover = last_write + Duration::from_secs(lease_s);
        assert!(
            stopped < takeover,
            "latency {latency_ms} ms, retry {retry_ms} ms, renew deadline {renew_ms} ms, \
             lease {lease_s} s: the leader acted until {:?} after its last write, \
             a standby may take over {lease_s} s after it",
            stopped - last_write
        );
        assert!(
            stopped - last_write <= Duration::from_millis(renew_ms) + Duration::from_millis(10),
            "latency {latency_ms} ms: stopped {:?} after the last write",
            stopped - last_write
        );
    }
}
