//! Waiting for a condition: poll it until it holds or a deadline passes,
//! then panic naming what was awaited.
//!
//! The deadline is on tokio's clock, so under a paused clock
//! (`start_paused = true`) it is virtual time and the sleeps advance it.
//! The poll interval is `within / 300`, kept between 10 ms and 200 ms.

use std::time::Duration;

use tokio::time::Instant;

fn interval(within: Duration) -> Duration {
    (within / 300).clamp(Duration::from_millis(10), Duration::from_millis(200))
}

/// Polls `cond` until it returns `Ok(())`; panics after `within` with
/// `what` and the last reason `cond` gave.
pub async fn eventually_ok(
    what: &str,
    within: Duration,
    mut cond: impl AsyncFnMut() -> Result<(), String>,
) {
    let start = Instant::now();
    loop {
        match cond().await {
            Ok(()) => return,
            Err(why) if start.elapsed() >= within => {
                if why.is_empty() {
                    panic!("timed out after {within:?} waiting for: {what}")
                }
                panic!("timed out after {within:?} waiting for: {what}: {why}")
            }
            Err(_) => tokio::time::sleep(interval(within)).await,
        }
    }
}

/// Polls the async condition `cond` until it holds; panics after `within`
/// with `what`.
pub async fn eventually_async(what: &str, within: Duration, mut cond: impl AsyncFnMut() -> bool) {
    eventually_ok(what, within, async || {
        if cond().await {
            Ok(())
        } else {
            Err(String::new())
        }
    })
    .await
}

/// Polls `cond` until it holds; panics after `within` with `what`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// let mut n = 0;
/// kcache_testing::eventually("three polls", Duration::from_secs(5), || {
///     n += 1;
///     n == 3
/// })
/// .await;
/// # }
/// ```
pub async fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    eventually_async(what, within, async || cond()).await
}

/// Waits until the count published on `count` reaches `n`, for up to
/// `within`; returns whether it did (the caller's assertion names what it
/// awaited and what it got).
pub async fn count_reaches(
    count: &tokio::sync::watch::Sender<usize>,
    n: usize,
    within: Duration,
) -> bool {
    let mut rx = count.subscribe();
    tokio::time::timeout(within, rx.wait_for(|c| *c >= n))
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 1s waiting for: the moon: still 9")]
    async fn names_what_was_awaited_and_why() {
        eventually_ok("the moon", Duration::from_secs(1), async || {
            Err("still 9".to_string())
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn returns_once_the_condition_holds() {
        let start = Instant::now();
        let mut polls = 0;
        eventually("5 polls", Duration::from_secs(3), || {
            polls += 1;
            polls == 5
        })
        .await;
        assert_eq!(start.elapsed(), Duration::from_millis(40));
    }
}
