//! Priorities, FIFO by ready time, re-add rules and aging.

use std::time::Duration;

use kcache_workqueue::{AddOpts, BuildError, WorkQueue};
use tokio::time::advance;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn prio(p: i32) -> AddOpts {
    AddOpts::priority(p)
}

/// Priority `p`, ready after `after`.
fn prio_after(p: i32, after: Duration) -> AddOpts {
    AddOpts {
        after: Some(after),
        ..prio(p)
    }
}

async fn drain<T: std::hash::Hash + Eq + Clone + Send + Sync + 'static>(
    q: &WorkQueue<T>,
) -> Vec<T> {
    let mut out = Vec::new();
    while !q.is_empty() {
        let item = q.get().await.unwrap();
        q.done(&item);
        out.push(item);
    }
    out
}

fn strict() -> WorkQueue<&'static str> {
    WorkQueue::builder().strict_priority().build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn higher_priority_first() {
    for q in [WorkQueue::new(), strict()] {
        q.add_with_opts("low", prio(0));
        q.add_with_opts("high", prio(5));
        q.add_with_opts("mid", prio(1));
        q.add_with_opts("negative", prio(-100));
        q.add("plain"); // priority 0, after "low"
        assert_eq!(drain(&q).await, ["high", "mid", "low", "plain", "negative"]);
    }
}

#[tokio::test(start_paused = true)]
async fn fifo_within_priority_by_ready_time() {
    for q in [WorkQueue::new(), strict()] {
        q.add_with_opts("a", prio_after(1, 20 * MS));
        q.add_with_opts("b", prio(1));
        advance(30 * MS).await;
        q.add_with_opts("c", prio(1));
        // a became ready at 20 ms (before c, after b) even though it was
        // moved to the ready queue only now.
        assert_eq!(drain(&q).await, ["b", "a", "c"]);
    }
}

#[tokio::test(start_paused = true)]
async fn readd_keeps_highest_priority() {
    let q = strict();
    q.add_with_opts("a", prio(5));
    q.add_with_opts("a", prio(1));
    q.add_with_opts("b", prio(3));
    assert_eq!(q.len(), 2);
    assert_eq!(drain(&q).await, ["a", "b"]);

    // Raising the priority of a waiting item moves it forward.
    q.add_with_opts("x", prio(0));
    q.add_with_opts("y", prio(2));
    q.add_with_opts("x", prio(4));
    assert_eq!(drain(&q).await, ["x", "y"]);
}

#[tokio::test(start_paused = true)]
async fn readd_keeps_earliest_ready_time() {
    let q = strict();
    q.add_with_opts("a", prio_after(0, 50 * MS));
    q.add_with_opts("a", prio_after(0, 10 * MS));
    q.add_with_opts("a", prio_after(0, 100 * MS));
    advance(10 * MS).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("a"));
    q.done(&"a");
    advance(SEC).await;
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn delayed_item_keeps_priority() {
    let q = strict();
    q.add_with_opts("a", prio_after(7, 10 * MS));
    q.add_with_opts("a", prio_after(1, 20 * MS));
    q.add_with_opts("b", prio(3));
    advance(10 * MS).await;
    assert_eq!(drain(&q).await, ["a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn dirty_item_keeps_priority_after_done() {
    let q = strict();
    q.add("a");
    let a = q.get().await.unwrap();
    q.add_with_opts("a", prio(9));
    q.add_with_opts("b", prio(2));
    q.done(&a);
    assert_eq!(drain(&q).await, ["a", "b"]);
}

/// With aging (1 s per level), an item that has been ready longer than
/// `(q - p) * 1 s` before a higher-priority one goes first.
#[tokio::test(start_paused = true)]
async fn aging_lets_old_low_priority_items_through() {
    let q: WorkQueue<&str> = WorkQueue::builder().priority_aging(SEC).build().unwrap();
    q.add_with_opts("old-low", prio(0));
    advance(2 * SEC + 500 * MS).await;
    q.add_with_opts("new-high", prio(2));
    assert_eq!(drain(&q).await, ["old-low", "new-high"]);

    // Waited less than the priority difference: high first.
    q.add_with_opts("old-low", prio(0));
    advance(SEC + 500 * MS).await;
    q.add_with_opts("new-high", prio(2));
    assert_eq!(drain(&q).await, ["new-high", "old-low"]);

    // Exactly the difference: a tie, broken by order of adding.
    q.add_with_opts("old-low", prio(0));
    advance(2 * SEC).await;
    q.add_with_opts("new-high", prio(2));
    assert_eq!(drain(&q).await, ["old-low", "new-high"]);
}

#[tokio::test(start_paused = true)]
async fn strict_priority_never_ages() {
    let q = strict();
    q.add_with_opts("old-low", prio(0));
    advance(Duration::from_secs(3600)).await;
    q.add_with_opts("new-high", prio(1));
    assert_eq!(drain(&q).await, ["new-high", "old-low"]);
}

/// A steady stream of high-priority work (always one ready) does not starve
/// a low-priority item: with aging of 100 ms per level and a difference of
/// 10 levels, it is handed out after about 1 s. With strict priority it
/// never is.
#[tokio::test(start_paused = true)]
async fn low_priority_does_not_starve() {
    async fn run(q: WorkQueue<u32>) -> Option<Duration> {
        let start = tokio::time::Instant::now();
        q.add_with_opts(0, prio(0));
        let mut next = 1;
        q.add_with_opts(next, prio(10));
        for _ in 0..500 {
            // A worker takes 10 ms per item; a new high-priority item
            // arrives for every one taken.
            let item = q.get().await.unwrap();
            if item == 0 {
                return Some(start.elapsed());
            }
            next += 1;
            q.add_with_opts(next, prio(10));
            advance(10 * MS).await;
            q.done(&item);
        }
        None
    }
    let aged = WorkQueue::builder()
        .priority_aging(100 * MS)
        .build()
        .unwrap();
    let waited = run(aged).await.expect("the low-priority item starved");
    // Ready at 0 with rank 0; a high item added at t has rank
    // t - 10 * 100 ms, so items added after 1 s rank behind it.
    assert_eq!(waited, Duration::from_millis(1010));
    let strict = WorkQueue::builder().strict_priority().build().unwrap();
    assert_eq!(run(strict).await, None);
}

#[tokio::test(start_paused = true)]
async fn extreme_priorities_do_not_overflow() {
    for q in [WorkQueue::new(), strict()] {
        q.add_with_opts("min", prio(i32::MIN));
        q.add_with_opts("max", prio(i32::MAX));
        q.add("zero");
        assert_eq!(drain(&q).await, ["max", "zero", "min"]);
    }
    let q: WorkQueue<u8> = WorkQueue::builder()
        .priority_aging(Duration::MAX)
        .build()
        .unwrap();
    q.add_with_opts(1, prio(i32::MIN));
    q.add_with_opts(2, prio(i32::MAX));
    assert_eq!(drain(&q).await, [2, 1]);
}

#[test]
fn zero_aging_is_rejected() {
    let r = WorkQueue::<u8>::builder()
        .priority_aging(Duration::ZERO)
        .build();
    assert_eq!(r.unwrap_err(), BuildError::ZeroAgingInterval);
}

#[tokio::test(start_paused = true)]
async fn raising_a_ready_items_priority_moves_it_once() {
    for q in [WorkQueue::new(), strict()] {
        q.add("a");
        q.add("b");
        q.add("c");
        // "b" is raised twice: it goes first, exactly once, and the entries
        // it left behind are neither handed out nor counted.
        q.add_with_opts("b", prio(3));
        q.add_with_opts("b", prio(7));
        assert_eq!(q.len(), 3);
        assert_eq!(drain(&q).await, ["b", "a", "c"]);
        assert_eq!(q.len(), 0);
        // Added again after its stale entries were skipped: handed out once.
        q.add("b");
        assert_eq!(drain(&q).await, ["b"]);
    }
}

#[tokio::test(start_paused = true)]
async fn an_item_re_added_while_processing_queues_behind_those_already_ready() {
    // client-go: a dirty item goes to the back of the queue at `done`.
    for q in [WorkQueue::new(), strict()] {
        q.add("a");
        let a = q.get().await.unwrap();
        q.add("a"); // dirty while processing
        advance(10 * MS).await;
        q.add("b");
        q.done(&a);
        assert_eq!(drain(&q).await, ["b", "a"]);
    }
}
