//! client-go's reflector backoff: exponential with jitter, reset after a
//! healthy period.

use std::time::Duration;

use tokio::time::Instant;

/// Backoff settings. The defaults are client-go's reflector defaults:
/// 800 ms doubling to 30 s, jitter 1.0 (a delay `d` becomes a random value
/// in `[d, 2d)`), reset to 800 ms when the previous backoff started more
/// than 2 minutes ago.
#[derive(Debug, Clone, PartialEq)]
pub struct BackoffConfig {
    /// First delay.
    pub initial: Duration,
    /// Multiplier per step.
    pub factor: f64,
    /// Largest delay before jitter.
    pub cap: Duration,
    /// Jitter factor: a delay `d` becomes `d + rand[0,1) * jitter * d`.
    pub jitter: f64,
    /// Back to `initial` when the last backoff started longer ago than this.
    pub reset_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_millis(800),
            factor: 2.0,
            cap: Duration::from_secs(30),
            jitter: 1.0,
            reset_after: Duration::from_secs(120),
        }
    }
}

/// The backoff state of one running reflector.
#[derive(Debug)]
pub(crate) struct Backoff {
    config: BackoffConfig,
    next: Duration,
    last_start: Instant,
}

impl Backoff {
    pub(crate) fn new(config: BackoffConfig) -> Self {
        Backoff {
            next: config.initial,
            config,
            last_start: Instant::now(),
        }
    }

    /// The next delay (client-go's `exponentialBackoffManagerImpl.Backoff`).
    pub(crate) fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if now.saturating_duration_since(self.last_start) > self.config.reset_after {
            self.next = self.config.initial;
        }
        self.last_start = now;
        let d = self.next;
        let grown = d.as_secs_f64() * self.config.factor.max(1.0);
        self.next = if grown >= self.config.cap.as_secs_f64() {
            self.config.cap
        } else {
            Duration::from_secs_f64(grown)
        };
        if self.config.jitter > 0.0 {
            let r: f64 = rand::random::<f64>();
            d + d.mul_f64(r * self.config.jitter)
        } else {
            d
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_caps_jitters_and_resets() {
        let mut b = Backoff::new(BackoffConfig {
            jitter: 0.0,
            ..Default::default()
        });
        let seq: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(seq, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        tokio::time::advance(Duration::from_secs(121)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(800));
        // 2 minutes exactly is not enough
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(1600));

        let mut b = Backoff::new(BackoffConfig::default());
        for _ in 0..200 {
            let d = b.next_delay();
            assert!(d >= Duration::from_millis(800) && d < Duration::from_secs(60));
        }
        let mut b = Backoff::new(BackoffConfig::default());
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(800) && first < Duration::from_millis(1600));
    }
}
