//! Rate limiters: how long a failed item waits before it is handed out again.
//!
//! Every limiter implements [`RateLimiter`]. The per-item limiters count the
//! failures of each item until [`RateLimiter::forget`] is called for it; the
//! [`BucketRateLimiter`] limits all items together. [`MaxOfRateLimiter`]
//! combines limiters and [`WithMaxWaitRateLimiter`] caps one.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use foldhash::fast::RandomState;
use parking_lot::Mutex;

use crate::error::RateLimiterError;

/// Decides how long an item waits before it is retried.
///
/// [`when`](RateLimiter::when) is called once per retry and records it;
/// [`forget`](RateLimiter::forget) ends the tracking of an item (call it when
/// the item succeeded or was given up); [`num_requeues`](RateLimiter::num_requeues)
/// tells how many retries are recorded for an item.
///
/// Implementations must be cheap and must not block: the queue calls `when`
/// on the caller's task (never while holding its own lock).
///
/// A custom limiter, waiting a fixed time:
///
/// ```
/// use std::time::Duration;
/// use kcache_workqueue::{RateLimiter, WorkQueue};
///
/// struct Fixed(Duration);
///
/// impl<T> RateLimiter<T> for Fixed {
///     fn when(&self, _item: &T) -> Duration {
///         self.0
///     }
///     fn forget(&self, _item: &T) {}
///     fn num_requeues(&self, _item: &T) -> u32 {
///         0
///     }
/// }
///
/// let queue: WorkQueue<&str> = WorkQueue::builder()
///     .rate_limiter(Fixed(Duration::from_secs(1)))
///     .build()
///     .unwrap();
/// queue.add_rate_limited("a");
/// assert_eq!(queue.delayed_len(), 1);
/// ```
pub trait RateLimiter<T>: Send + Sync {
    /// Records a retry of `item` and returns how long it should wait.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item`: its next failure counts as the first.
    fn forget(&self, item: &T);
    /// How many retries of `item` are recorded.
    fn num_requeues(&self, item: &T) -> u32;
}

/// A shared or boxed rate limiter is a rate limiter.
macro_rules! forward_rate_limiter {
    ($($ptr:ident),*) => {$(
        impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for $ptr<R> {
            fn when(&self, item: &T) -> Duration {
                (**self).when(item)
            }
            fn forget(&self, item: &T) {
                (**self).forget(item)
            }
            fn num_requeues(&self, item: &T) -> u32 {
                (**self).num_requeues(item)
            }
        }
    )*};
}
forward_rate_limiter!(Arc, Box);

/// The rate limiter client-go uses for controllers:
/// `MaxOf(ItemExponentialFailure(5 ms, 1000 s), Bucket(10 qps, burst 100))`.
///
/// Each item backs off exponentially on its own, and all retries together
/// are held to 10 per second after a burst of 100.
pub fn default_controller_rate_limiter<T>() -> MaxOfRateLimiter<T>
where
    T: Hash + Eq + Clone + Send + Sync + 'static,
{
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(BucketRateLimiter::default()),
    ])
}

/// client-go's per-item default: `ItemExponentialFailure(1 ms, 1000 s)`.
pub fn default_item_based_rate_limiter<T>() -> ItemExponentialFailureRateLimiter<T>
where
    T: Hash + Eq + Clone + Send + Sync,
{
    ItemExponentialFailureRateLimiter::new(Duration::from_millis(1), Duration::from_secs(1000))
}

/// Per-item failure counts of the per-item limiters.
///
/// `forget` is called for every processed item (client-go's worker loop
/// forgets each success), while almost every item has no failure recorded:
/// the count of tracked items lets `forget` and `num_requeues` skip the
/// lock and the hash when nothing is tracked (in profiles of 1M
/// distinct keys, `forget` with SipHash on an empty map was as costly as
/// `get`). A `when` that happens before a `forget` (on the same thread, or
/// ordered by the queue) is seen by it: the count is written under the lock
/// and read with acquire ordering.
struct Failures<T> {
    counts: Mutex<HashMap<T, u32, RandomState>>,
    tracked: AtomicUsize,
}

impl<T: Hash + Eq + Clone> Failures<T> {
    fn new() -> Self {
        Self {
            counts: Mutex::new(HashMap::default()),
            tracked: AtomicUsize::new(0),
        }
    }

    /// Records a failure of `item`; returns its count including this one.
    fn record(&self, item: &T) -> u32 {
        let mut counts = self.counts.lock();
        match counts.get_mut(item) {
            Some(n) => {
                *n = n.saturating_add(1);
                *n
            }
            None => {
                counts.insert(item.clone(), 1);
                self.tracked.store(counts.len(), Ordering::Release);
                1
            }
        }
    }

    fn forget(&self, item: &T) {
        if self.tracked.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut counts = self.counts.lock();
        if counts.remove(item).is_some() {
            self.tracked.store(counts.len(), Ordering::Release);
        }
    }

    fn count(&self, item: &T) -> u32 {
        if self.tracked.load(Ordering::Acquire) == 0 {
            return 0;
        }
        self.counts.lock().get(item).copied().unwrap_or(0)
    }
}

/// Shows how many items are tracked, not the items (`T` need not be `Debug`).
impl<T> fmt::Debug for Failures<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failures")
            .field("tracked_items", &self.tracked.load(Ordering::Acquire))
            .finish_non_exhaustive()
    }
}

/// Waits `base * 2^failures` for an item, where `failures` is the number of
/// retries recorded before this one, capped at `max`.
///
/// The first retry waits `base`, the second `2 * base`, and so on. The
/// computation never overflows: any delay that would exceed `max` (or
/// `Duration::MAX`) is `max`.
#[derive(Debug)]
pub struct ItemExponentialFailureRateLimiter<T> {
    failures: Failures<T>,
    base: Duration,
    max: Duration,
}

impl<T: Hash + Eq + Clone> ItemExponentialFailureRateLimiter<T> {
    /// A limiter waiting `base * 2^failures`, at most `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            failures: Failures::new(),
            base,
            max,
        }
    }
}

/// `base * 2^exp`, or `max` when that is larger than `max` or overflows.
fn exponential(base: Duration, exp: u32, max: Duration) -> Duration {
    if base.is_zero() {
        return Duration::ZERO;
    }
    let Some(factor) = 1u128.checked_shl(exp).filter(|_| exp < 127) else {
        return max;
    };
    let Some(nanos) = base.as_nanos().checked_mul(factor) else {
        return max;
    };
    if nanos >= max.as_nanos() {
        return max;
    }
    // nanos < max.as_nanos(), so it fits a Duration.
    let secs = (nanos / 1_000_000_000) as u64;
    let sub = (nanos % 1_000_000_000) as u32;
    Duration::new(secs, sub)
}

impl<T: Hash + Eq + Clone + Send + Sync> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        // The count before this failure (saturated counts stay at the cap).
        let exp = self.failures.record(item).saturating_sub(1);
        exponential(self.base, exp, self.max)
    }

    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.count(item)
    }
}

/// Waits `fast` for the first `max_fast_attempts` retries of an item, then
/// `slow` for every later one.
#[derive(Debug)]
pub struct ItemFastSlowRateLimiter<T> {
    failures: Failures<T>,
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
}

impl<T: Hash + Eq + Clone> ItemFastSlowRateLimiter<T> {
    /// A limiter waiting `fast` for `max_fast_attempts` retries, then `slow`.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        Self {
            failures: Failures::new(),
            fast,
            slow,
            max_fast_attempts,
        }
    }
}

impl<T: Hash + Eq + Clone + Send + Sync> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        if self.failures.record(item) <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.count(item)
    }
}

/// Asks every inner limiter and returns the longest wait.
///
/// `when` is called on every inner limiter (each records the retry),
/// `num_requeues` is the largest count, and `forget` forgets the item in all.
/// As in client-go, when combined with a token bucket the burst may appear
/// exceeded when some items were separately delayed longer.
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> fmt::Debug for MaxOfRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<T> MaxOfRateLimiter<T> {
    /// Combines `limiters`; with none, every wait is zero.
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// Caps the wait of an inner limiter at `max_wait`.
pub struct WithMaxWaitRateLimiter<T> {
    inner: Box<dyn RateLimiter<T>>,
    max_wait: Duration,
}

impl<T> fmt::Debug for WithMaxWaitRateLimiter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithMaxWaitRateLimiter")
            .field("max_wait", &self.max_wait)
            .finish()
    }
}

impl<T> WithMaxWaitRateLimiter<T> {
    /// Wraps `inner`, never waiting longer than `max_wait`.
    pub fn new(inner: Box<dyn RateLimiter<T>>, max_wait: Duration) -> Self {
        Self { inner, max_wait }
    }
}

impl<T> RateLimiter<T> for WithMaxWaitRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.inner.when(item).min(self.max_wait)
    }

    fn forget(&self, item: &T) {
        self.inner.forget(item)
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.inner.num_requeues(item)
    }
}

/// The monotonic time a [`BucketRateLimiter`] reads.
///
/// [`MonotonicClock`] (the default) reads [`std::time::Instant`]; a test
/// implements this trait with a clock it advances by hand (see
/// [`BucketRateLimiter`]).
pub trait Clock: Send + Sync {
    /// The time elapsed since this clock's fixed origin; never decreases.
    fn now(&self) -> Duration;
}

/// The real monotonic clock: the time since the clock was created, read
/// from [`std::time::Instant`].
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// An overall token bucket shared by all items (client-go's
/// `BucketRateLimiter` over Go's `rate.Limiter`): `qps` tokens per second,
/// at most `burst` at once, as client-go's
/// `&BucketRateLimiter{Limiter: rate.NewLimiter(rate.Limit(10), 100)}` is
/// `BucketRateLimiter::new(10.0, 100)`.
///
/// Every call to [`when`](RateLimiter::when) takes a token. While the bucket
/// has tokens the wait is zero; once it is empty each call *reserves* the
/// next future token and returns the time until it, so `n` calls on an empty
/// bucket of rate `r` wait `1/r, 2/r, ..., n/r`, exactly like Go's
/// `rate.Limiter.Reserve().Delay()`, instead of all waiting for the same
/// token (the reservation arithmetic is GCRA).
///
/// `forget` does nothing and `num_requeues` is always 0: the bucket does not
/// track items.
///
/// The clock is a [`Clock`] ([`MonotonicClock`] by default), not tokio's:
/// use [`with_clock`](BucketRateLimiter::with_clock) and a clock advanced
/// by hand for deterministic tests:
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use kcache_workqueue::BucketRateLimiter;
/// use kcache_workqueue::rate_limiter::Clock;
///
/// #[derive(Clone, Default)]
/// struct ManualClock(Arc<Mutex<Duration>>);
/// impl Clock for ManualClock {
///     fn now(&self) -> Duration {
///         *self.0.lock().unwrap()
///     }
/// }
///
/// let clock = ManualClock::default();
/// let bucket = BucketRateLimiter::with_clock(10.0, 2, clock.clone()).unwrap();
/// assert_eq!(bucket.reserve(), Duration::ZERO); // the burst of 2
/// assert_eq!(bucket.reserve(), Duration::ZERO);
/// assert_eq!(bucket.reserve(), Duration::from_millis(100)); // booked
/// assert_eq!(bucket.reserve(), Duration::from_millis(200));
/// *clock.0.lock().unwrap() += Duration::from_millis(250);
/// assert_eq!(bucket.reserve(), Duration::from_millis(50));
/// ```
pub struct BucketRateLimiter<C: Clock = MonotonicClock> {
    clock: C,
    start: Duration,
    /// Nanoseconds per token.
    interval: u64,
    /// Nanoseconds the bucket may run ahead: `burst * interval`.
    tolerance: u64,
    /// Theoretical arrival time of the next token, in ns since `start`.
    tat: Mutex<u64>,
}

impl<C: Clock> fmt::Debug for BucketRateLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketRateLimiter")
            .field("interval", &Duration::from_nanos(self.interval))
            .field("tolerance", &Duration::from_nanos(self.tolerance))
            .finish()
    }
}

impl Default for BucketRateLimiter<MonotonicClock> {
    /// 10 tokens per second, burst of 100 (client-go's default).
    fn default() -> Self {
        Self::from_interval(Duration::from_millis(100), 100, MonotonicClock::default())
    }
}

impl BucketRateLimiter<MonotonicClock> {
    /// A bucket refilled at `qps` tokens per second holding at most `burst`.
    ///
    /// Fails when `qps` is not a positive finite number (or is so small that
    /// one token takes longer than `Duration::MAX`, or so large that a token
    /// takes less than a nanosecond) or `burst` is 0.
    pub fn new(qps: f64, burst: u32) -> Result<Self, RateLimiterError> {
        Self::with_clock(qps, burst, MonotonicClock::default())
    }
}

impl<C: Clock> BucketRateLimiter<C> {
    /// Like [`new`](BucketRateLimiter::new), reading time from `clock`.
    pub fn with_clock(qps: f64, burst: u32, clock: C) -> Result<Self, RateLimiterError> {
        if !(qps.is_finite() && qps > 0.0) {
            return Err(RateLimiterError::InvalidQps(qps));
        }
        if burst == 0 {
            return Err(RateLimiterError::ZeroBurst);
        }
        let period = Duration::try_from_secs_f64(1.0 / qps)
            .ok()
            .filter(|p| !p.is_zero())
            .ok_or(RateLimiterError::InvalidQps(qps))?;
        Ok(Self::from_interval(period, burst, clock))
    }

    /// One token per `period`, at most `burst` (not 0) at once.
    fn from_interval(period: Duration, burst: u32, clock: C) -> Self {
        let interval = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        let tolerance = interval.saturating_mul(u64::from(burst));
        Self {
            start: clock.now(),
            clock,
            interval,
            tolerance,
            tat: Mutex::new(0),
        }
    }

    /// Takes one token and returns how long the caller must wait for it.
    pub fn reserve(&self) -> Duration {
        let elapsed = self.clock.now().saturating_sub(self.start);
        let now = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let mut tat = self.tat.lock();
        // The bucket is full when `tat <= now`; each token moves `tat` one
        // interval on; a token is free while `tat - tolerance <= now`.
        let next = (*tat).max(now).saturating_add(self.interval);
        *tat = next;
        Duration::from_nanos(next.saturating_sub(self.tolerance).saturating_sub(now))
    }
}

impl<T, C: Clock> RateLimiter<T> for BucketRateLimiter<C> {
    fn when(&self, _item: &T) -> Duration {
        self.reserve()
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_math() {
        let ms = Duration::from_millis(1);
        let max = Duration::from_secs(1000);
        assert_eq!(exponential(ms, 0, max), ms);
        assert_eq!(exponential(ms, 3, max), 8 * ms);
        assert_eq!(exponential(ms, 200, max), max);
        assert_eq!(exponential(Duration::MAX, 1, Duration::MAX), Duration::MAX);
        assert_eq!(exponential(Duration::ZERO, 500, max), Duration::ZERO);
        assert_eq!(
            exponential(Duration::from_nanos(1_500_000_001), 1, max),
            Duration::from_nanos(3_000_000_002)
        );
    }
}
