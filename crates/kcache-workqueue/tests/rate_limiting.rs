//! Rate limiters and the rate-limited queue: client-go's
//! default_rate_limiters_test.go and rate_limiting_queue_test.go.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use kcache_workqueue::rate_limiter::Clock;
use kcache_workqueue::{
    AddOpts, BucketRateLimiter, ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
    MaxOfRateLimiter, RateLimiter, RateLimiterError, WithMaxWaitRateLimiter, WorkQueue,
    default_controller_rate_limiter, default_item_based_rate_limiter,
};
use tokio::time::advance;

const MS: Duration = Duration::from_millis(1);
const US: Duration = Duration::from_micros(1);

/// A [`Clock`] the test advances by hand.
#[derive(Clone, Default)]
struct FakeClock(Arc<AtomicU64>);

impl FakeClock {
    fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap();
        self.0.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::SeqCst))
    }
}

/// Asserts that `item` becomes ready exactly `d` from now, then takes it.
async fn assert_ready_after<
    T: std::hash::Hash + Eq + Clone + Send + Sync + std::fmt::Debug + 'static,
>(
    q: &WorkQueue<T>,
    item: T,
    d: Duration,
) {
    assert_eq!(q.len(), 0);
    advance(d - US).await;
    assert_eq!(q.len(), 0, "ready before {d:?}");
    advance(US).await;
    assert_eq!(q.len(), 1, "not ready after {d:?}");
    assert_eq!(q.get().await, Some(item.clone()));
    q.done(&item);
}

/// client-go TestRateLimitingQueue.
#[tokio::test(start_paused = true)]
async fn rate_limiting_queue() {
    let q: WorkQueue<&str> = WorkQueue::builder()
        .rate_limiter(ItemExponentialFailureRateLimiter::new(
            MS,
            Duration::from_secs(1),
        ))
        .build()
        .unwrap();
    q.add_rate_limited("one");
    assert_ready_after(&q, "one", MS).await;
    q.add_rate_limited("one");
    assert_ready_after(&q, "one", 2 * MS).await;
    assert_eq!(q.num_requeues(&"one"), 2);

    q.add_rate_limited("two");
    assert_ready_after(&q, "two", MS).await;
    q.add_rate_limited("two");
    assert_ready_after(&q, "two", 2 * MS).await;

    q.forget(&"one");
    assert_eq!(q.num_requeues(&"one"), 0);
    q.add_rate_limited("one");
    assert_ready_after(&q, "one", MS).await;
    assert_eq!(q.num_requeues(&"two"), 2);
}

#[tokio::test(start_paused = true)]
async fn add_with_opts_rate_limited_waits_longer_of_both() {
    let q: WorkQueue<&str> = WorkQueue::builder()
        .rate_limiter(ItemExponentialFailureRateLimiter::new(
            10 * MS,
            Duration::from_secs(1),
        ))
        .build()
        .unwrap();
    let opts = |after| AddOpts {
        after: Some(after),
        rate_limited: true,
        priority: 0,
    };
    // Limiter says 10 ms, after says 3 ms: 10 ms.
    q.add_with_opts("a", opts(3 * MS));
    assert_ready_after(&q, "a", 10 * MS).await;
    // Limiter says 20 ms, after says 50 ms: 50 ms.
    q.add_with_opts("a", opts(50 * MS));
    assert_ready_after(&q, "a", 50 * MS).await;
    assert_eq!(q.num_requeues(&"a"), 2);
}

/// client-go TestItemExponentialFailureRateLimiter.
#[test]
fn item_exponential_failure() {
    let l = ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1));
    for expected in [1, 2, 4, 8, 16] {
        assert_eq!(l.when(&"one"), expected * MS);
    }
    assert_eq!(l.num_requeues(&"one"), 5);
    assert_eq!(l.when(&"two"), MS);
    assert_eq!(l.when(&"two"), 2 * MS);
    assert_eq!(l.num_requeues(&"two"), 2);
    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(l.when(&"one"), MS);
}

#[test]
fn item_exponential_failure_caps_at_max() {
    let l = ItemExponentialFailureRateLimiter::new(MS, 10 * MS);
    let waits: Vec<_> = (0..6).map(|_| l.when(&1u8)).collect();
    assert_eq!(waits, [MS, 2 * MS, 4 * MS, 8 * MS, 10 * MS, 10 * MS]);
}

/// client-go TestItemExponentialFailureRateLimiterOverFlow.
#[test]
fn item_exponential_failure_overflow() {
    let l = ItemExponentialFailureRateLimiter::new(MS, Duration::from_secs(1000));
    for _ in 0..5 {
        l.when(&"one");
    }
    assert_eq!(l.when(&"one"), 32 * MS);
    for _ in 0..1000 {
        l.when(&"overflow1");
    }
    assert_eq!(l.when(&"overflow1"), Duration::from_secs(1000));

    let minute = Duration::from_secs(60);
    let l = ItemExponentialFailureRateLimiter::new(minute, 1000 * 60 * minute);
    for _ in 0..2 {
        l.when(&"two");
    }
    assert_eq!(l.when(&"two"), 4 * minute);
    for _ in 0..1000 {
        l.when(&"overflow2");
    }
    assert_eq!(l.when(&"overflow2"), 1000 * 60 * minute);

    // Even with a max of Duration::MAX nothing overflows.
    let l = ItemExponentialFailureRateLimiter::new(Duration::from_secs(1), Duration::MAX);
    for _ in 0..200 {
        l.when(&"x");
    }
    assert_eq!(l.when(&"x"), Duration::MAX);
}

#[test]
fn default_item_based_is_1ms_to_1000s() {
    let l = default_item_based_rate_limiter();
    assert_eq!(l.when(&"a"), MS);
    assert_eq!(l.when(&"a"), 2 * MS);
    for _ in 0..40 {
        l.when(&"a");
    }
    assert_eq!(l.when(&"a"), Duration::from_secs(1000));
}

/// client-go TestItemFastSlowRateLimiter.
#[test]
fn item_fast_slow() {
    let l = ItemFastSlowRateLimiter::new(5 * MS, Duration::from_secs(10), 3);
    assert_fast_then_slow(&l, Duration::from_secs(10));
}

/// Three retries of 5 ms then `slow`, counted per item; `forget` starts
/// an item over.
fn assert_fast_then_slow(l: &impl RateLimiter<&'static str>, slow: Duration) {
    assert_eq!(l.when(&"one"), 5 * MS);
    assert_eq!(l.when(&"one"), 5 * MS);
    assert_eq!(l.when(&"one"), 5 * MS);
    assert_eq!(l.when(&"one"), slow);
    assert_eq!(l.when(&"one"), slow);
    assert_eq!(l.num_requeues(&"one"), 5);

    assert_eq!(l.when(&"two"), 5 * MS);
    assert_eq!(l.when(&"two"), 5 * MS);
    assert_eq!(l.num_requeues(&"two"), 2);

    l.forget(&"one");
    assert_eq!(l.num_requeues(&"one"), 0);
    assert_eq!(l.when(&"one"), 5 * MS);
}

/// client-go TestMaxOfRateLimiter.
#[test]
fn max_of() {
    let l: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
        Box::new(ItemFastSlowRateLimiter::new(
            5 * MS,
            Duration::from_secs(3),
            3,
        )),
        Box::new(ItemExponentialFailureRateLimiter::new(
            MS,
            Duration::from_secs(1),
        )),
    ]);
    assert_fast_then_slow(&l, Duration::from_secs(3));
}

#[test]
fn max_of_exponential_overtakes() {
    // After the fast attempts the exponential limiter (which every call
    // also advanced) dominates: 1,2,4,8 ms < 5 ms; 16 ms > 5 ms.
    let l: MaxOfRateLimiter<u8> = MaxOfRateLimiter::new(vec![
        Box::new(ItemFastSlowRateLimiter::new(5 * MS, 5 * MS, 1)),
        Box::new(ItemExponentialFailureRateLimiter::new(
            MS,
            Duration::from_secs(1),
        )),
    ]);
    let waits: Vec<_> = (0..6).map(|_| l.when(&0)).collect();
    assert_eq!(waits, [5 * MS, 5 * MS, 5 * MS, 8 * MS, 16 * MS, 32 * MS]);
    let empty: MaxOfRateLimiter<u8> = MaxOfRateLimiter::new(vec![]);
    assert_eq!(empty.when(&0), Duration::ZERO);
}

/// client-go's test-only StepRateLimiter: `fast` for the first `n` calls
/// (over all items), `slow` after.
struct StepRateLimiter {
    fast: Duration,
    slow: Duration,
    n: u32,
    calls: AtomicU32,
}

impl<T> RateLimiter<T> for StepRateLimiter {
    fn when(&self, _: &T) -> Duration {
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.n {
            self.fast
        } else {
            self.slow
        }
    }
    fn forget(&self, _: &T) {}
    fn num_requeues(&self, _: &T) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

/// client-go TestWithMaxWaitRateLimiter.
#[test]
fn with_max_wait() {
    let step = StepRateLimiter {
        fast: 5 * MS,
        slow: Duration::from_secs(1000),
        n: 100,
        calls: AtomicU32::new(0),
    };
    let l = WithMaxWaitRateLimiter::new(Box::new(step), Duration::from_secs(500));
    for i in 0..100 {
        assert_eq!(l.when(&i), 5 * MS);
    }
    for i in 100..200 {
        assert_eq!(l.when(&i), Duration::from_secs(500));
    }
    assert_eq!(l.num_requeues(&0), 200);
}

#[test]
fn bucket_burst_then_booked_tokens() {
    let clock = FakeClock::default();
    let b = BucketRateLimiter::with_clock(10.0, 100, clock.clone()).unwrap();
    // The burst: 100 tokens at once.
    for _ in 0..100 {
        assert_eq!(RateLimiter::<u8>::when(&b, &0), Duration::ZERO);
    }
    // Then every call books the next token: 100 ms, 200 ms, 300 ms.
    assert_eq!(RateLimiter::<u8>::when(&b, &0), 100 * MS);
    assert_eq!(RateLimiter::<u8>::when(&b, &0), 200 * MS);
    assert_eq!(RateLimiter::<u8>::when(&b, &0), 300 * MS);
    // 150 ms later the first booking has its token; the next free token
    // is at 400 ms from the start: 250 ms from now.
    clock.advance(150 * MS);
    assert_eq!(RateLimiter::<u8>::when(&b, &0), 250 * MS);
    // Long idle: every booked token is long due and the bucket is full
    // again.
    clock.advance(Duration::from_secs(60));
    let free = (0..200)
        .take_while(|_| RateLimiter::<u8>::when(&b, &0).is_zero())
        .count();
    assert_eq!(free, 100);
    // A partial refill: 1 s = 10 tokens.
    clock.advance(Duration::from_secs(1));
    let free = (0..200)
        .take_while(|_| RateLimiter::<u8>::when(&b, &0).is_zero())
        .count();
    assert_eq!(free, 10 - 1, "the failed probe above took the first token");
    assert_eq!(RateLimiter::<u8>::num_requeues(&b, &0), 0);
}

#[test]
fn bucket_default_is_10_qps_burst_100() {
    let clock = FakeClock::default();
    let b = BucketRateLimiter::with_clock(10.0, 100, clock).unwrap();
    let d = BucketRateLimiter::default();
    for _ in 0..100 {
        assert!(RateLimiter::<u8>::when(&b, &0).is_zero());
        assert!(RateLimiter::<u8>::when(&d, &0).is_zero());
    }
    // The default reads the real clock: check its configuration rather
    // than a timing-dependent wait.
    let wait = RateLimiter::<u8>::when(&d, &0);
    assert!(wait <= 100 * MS, "{wait:?}");
    let debug = format!("{d:?}");
    assert!(debug.contains("interval: 100ms"), "{debug}");
    assert!(debug.contains("tolerance: 10s"), "{debug}");
    assert_eq!(RateLimiter::<u8>::when(&b, &0), 100 * MS);
}

#[test]
fn bucket_rejects_bad_config() {
    assert_eq!(
        BucketRateLimiter::new(0.0, 1).unwrap_err(),
        RateLimiterError::InvalidQps(0.0)
    );
    assert!(matches!(
        BucketRateLimiter::new(f64::NAN, 1),
        Err(RateLimiterError::InvalidQps(_))
    ));
    assert!(matches!(
        BucketRateLimiter::new(-1.0, 1),
        Err(RateLimiterError::InvalidQps(_))
    ));
    assert!(matches!(
        BucketRateLimiter::new(1e-30, 1),
        Err(RateLimiterError::InvalidQps(_))
    ));
    assert_eq!(
        BucketRateLimiter::new(1.0, 0).unwrap_err(),
        RateLimiterError::ZeroBurst
    );
    assert!(BucketRateLimiter::new(0.5, 1).is_ok());
}

#[test]
fn bucket_fractional_rate() {
    let clock = FakeClock::default();
    let b = BucketRateLimiter::with_clock(0.5, 1, clock).unwrap();
    assert_eq!(RateLimiter::<u8>::when(&b, &0), Duration::ZERO);
    assert_eq!(RateLimiter::<u8>::when(&b, &0), Duration::from_secs(2));
    assert_eq!(RateLimiter::<u8>::when(&b, &0), Duration::from_secs(4));
}

#[test]
fn default_controller_limiter_combines_both() {
    let l = default_controller_rate_limiter::<String>();
    let s = |x: &str| x.to_owned();
    // Per item: 5 ms, 10 ms, ... (the bucket still has its burst).
    assert_eq!(l.when(&s("a")), 5 * MS);
    assert_eq!(l.when(&s("a")), 10 * MS);
    assert_eq!(l.when(&s("b")), 5 * MS);
    assert_eq!(l.num_requeues(&s("a")), 2);
    l.forget(&s("a"));
    assert_eq!(l.num_requeues(&s("a")), 0);
    // Overall: after the burst of 100 the bucket dominates. 300 calls so
    // far book tokens up to 20 s ahead (real clock: leave a wide margin).
    for i in 0..297 {
        l.when(&format!("x{i}"));
    }
    let wait = l.when(&s("c"));
    assert!(
        wait > Duration::from_secs(10),
        "bucket should dominate, got {wait:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn queue_uses_default_controller_limiter() {
    let q: WorkQueue<&str> = WorkQueue::new();
    q.add_rate_limited("a");
    assert_ready_after(&q, "a", 5 * MS).await;
    q.add_rate_limited("a");
    assert_ready_after(&q, "a", 10 * MS).await;
    assert_eq!(q.num_requeues(&"a"), 2);
}
