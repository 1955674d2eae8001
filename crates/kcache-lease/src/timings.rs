//! The three durations every lease-based protocol here runs on, and their
//! one validation (client-go's rules for leader election, shared by shard
//! membership).

use std::time::Duration;

/// client-go's jitter factor: attempts wait a retry period plus up to
/// 1.2 retry periods more.
pub const JITTER_FACTOR: f64 = 1.2;

/// How long a lease lasts, when its holder gives up, and how often it
/// tries. Defaults: client-go's documented 15 s / 10 s / 2 s.
///
/// ```
/// use std::time::Duration;
/// use kcache_lease::LeaseTimings;
///
/// let t = LeaseTimings::default().lease_duration(Duration::from_secs(30));
/// assert!(t.validate().is_ok());
/// assert!(LeaseTimings::default().renew_deadline(Duration::from_secs(20)).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a lease lasts without renewal; another candidate waits this
    /// long (on its own clock) after the last change it saw before it may
    /// take the lease over.
    pub lease_duration: Duration,
    /// How long after the start of its last successful renewal the holder
    /// gives up when renewals keep failing (less than the lease duration:
    /// the holder stops acting before anyone may take over).
    pub renew_deadline: Duration,
    /// How long to wait between attempts.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            lease_duration: Self::DEFAULT_LEASE_DURATION,
            renew_deadline: Self::DEFAULT_RENEW_DEADLINE,
            retry_period: Self::DEFAULT_RETRY_PERIOD,
        }
    }
}

/// Why [`LeaseTimings`] are invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseTimingsError {
    /// The lease duration must be greater than the renew deadline.
    #[error(
        "leaseDuration ({lease_duration:?}) must be greater than renewDeadline ({renew_deadline:?})"
    )]
    LeaseDurationNotGreaterThanRenewDeadline {
        /// The lease duration.
        lease_duration: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
    },
    /// The renew deadline must be greater than 1.2 x the retry period.
    #[error(
        "renewDeadline ({renew_deadline:?}) must be greater than retryPeriod*JitterFactor ({retry_period:?} * 1.2 = {jittered:?})"
    )]
    RenewDeadlineTooShort {
        /// The renew deadline.
        renew_deadline: Duration,
        /// The retry period.
        retry_period: Duration,
        /// 1.2 x the retry period.
        jittered: Duration,
    },
    /// A duration was zero.
    #[error("{0} must be greater than zero")]
    ZeroDuration(&'static str),
}

impl LeaseTimings {
    /// client-go's documented default lease duration.
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
    /// client-go's documented default renew deadline.
    pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
    /// client-go's documented default retry period.
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

    /// Sets the lease duration.
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self
    }
    /// Sets the renew deadline.
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.renew_deadline = d;
        self
    }
    /// Sets the retry period.
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.retry_period = d;
        self
    }

    /// client-go's rules: all durations positive, lease duration > renew
    /// deadline > 1.2 x retry period.
    pub fn validate(&self) -> Result<(), LeaseTimingsError> {
        use LeaseTimingsError as E;
        if self.lease_duration <= self.renew_deadline {
            return Err(E::LeaseDurationNotGreaterThanRenewDeadline {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        let jittered = self.retry_period.mul_f64(JITTER_FACTOR);
        if self.renew_deadline <= jittered {
            return Err(E::RenewDeadlineTooShort {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
                jittered,
            });
        }
        for (name, d) in [
            ("leaseDuration", self.lease_duration),
            ("renewDeadline", self.renew_deadline),
            ("retryPeriod", self.retry_period),
        ] {
            if d.is_zero() {
                return Err(E::ZeroDuration(name));
            }
        }
        Ok(())
    }

    /// The lease duration as written in a Lease: whole seconds, rounded up
    /// (others must never see a shorter lease than the one the holder's
    /// renew deadline assumes), at least 1.
    pub fn lease_seconds(&self) -> i32 {
        let d = self.lease_duration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
    }

    /// A retry period plus a random extra of up to [`JITTER_FACTOR`] retry
    /// periods (client-go's `wait.Jitter`).
    pub fn jittered_retry(&self) -> Duration {
        let rp = self.retry_period;
        rp + rp.mul_f64(rand::random::<f64>() * JITTER_FACTOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_seconds_round_up() {
        let t = LeaseTimings::default();
        assert_eq!(t.lease_seconds(), 15);
        assert_eq!(
            t.lease_duration(Duration::from_millis(4500))
                .lease_seconds(),
            5
        );
        assert_eq!(
            t.lease_duration(Duration::from_millis(1)).lease_seconds(),
            1
        );
    }

    #[test]
    fn jitter_stays_within_client_go_bounds() {
        let t = LeaseTimings::default();
        for _ in 0..1000 {
            let d = t.jittered_retry();
            assert!(d >= t.retry_period && d <= t.retry_period.mul_f64(1.0 + JITTER_FACTOR));
        }
    }
}
