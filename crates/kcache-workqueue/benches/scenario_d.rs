//! Scenario (d) of `cargo xtask bench-compare`, in one process and without
//! the harness's other dependencies: 1M distinct `namespace/name` keys added
//! by one producer task while 1 or 8 workers on a 2-thread tokio runtime
//! get, forget and mark them done (`--done-and-get`: with
//! `WorkQueue::done_and_get`), by the driver `kcache-client --scenario
//! workqueue` runs too (support/scenario_d.rs). Prints items/s per run. For
//! profiling (`perf record`, `valgrind --tool=callgrind`) the bench profile
//! keeps debug info.
//!
//! ```sh
//! cargo bench -p kcache-workqueue --bench scenario_d -- --keys 1000000 --workers 8 --runs 5
//! ```
//!
//! `--partitions N` (an experiment, not a queue one would ship): N
//! independent queues, the producer adding each key to the queue its hash
//! picks and the workers split evenly between them with no stealing: no
//! lock or cache line is shared between the partitions, so it bounds what
//! a queue sharded by key could do on this machine (it gives up the
//! queue-wide FIFO and priority order, and a worker idles while another
//! partition has items).
//!
//! `--shards N` (an experiment too): the nearest thing to a queue sharded
//! by key that one could ship, built from N queues: the producer adds each
//! key to the shard its hash picks; each runtime thread has a home shard
//! (the first thread to get takes shard 0, the next shard 1, ...), and a
//! `get` takes from its home shard first and otherwise from whichever shard
//! has an item first (waiting on all of them). Dedup and one worker per key
//! hold (a key lives in one shard); the hand-out order holds within a
//! shard only.

#[path = "support/scenario_d.rs"]
mod scenario_d;

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use kcache_workqueue::WorkQueue;

thread_local! {
    /// This thread's home shard in the `--shards` experiment.
    static HOME_SHARD: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Home shards handed to threads so far (`--shards`).
static HOMES: AtomicU64 = AtomicU64::new(0);

/// The calling thread's home shard among `shards` (`--shards`).
fn home_shard(shards: usize) -> usize {
    HOME_SHARD.with(|home| {
        let first = || HOMES.fetch_add(1, Ordering::Relaxed) as usize;
        *home.get().get_or_insert_with(first) % shards
    })
}

/// `get` over `shards` (`--shards`): the home shard's item if it has one
/// now, else the first item any shard hands out; `None` once they are shut
/// down. Returns the shard with the item.
async fn get_sharded(shards: &[WorkQueue<String>]) -> Option<(usize, String)> {
    type Get<'a> = std::pin::Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;
    let home = home_shard(shards.len());
    let mut home_get = std::pin::pin!(shards[home].get());
    // The other shards' gets, made (and registered with their shards) only
    // once the home shard has nothing ready.
    let mut others: Vec<(usize, Get<'_>)> = Vec::new();
    std::future::poll_fn(|cx| {
        if let Poll::Ready(item) = home_get.as_mut().poll(cx) {
            return Poll::Ready(item.map(|item| (home, item)));
        }
        if others.is_empty() {
            others = (1..shards.len())
                .map(|i| (home + i) % shards.len())
                .map(|s| (s, Box::pin(shards[s].get()) as Get<'_>))
                .collect();
        }
        for (s, get) in &mut others {
            if let Poll::Ready(item) = get.as_mut().poll(cx) {
                return Poll::Ready(item.map(|item| (*s, item)));
            }
        }
        Poll::Pending
    })
    .await
}

/// How a worker of the `--partitions` and `--shards` experiments gets its
/// next item (see the module documentation).
#[derive(Debug, Clone, Copy)]
enum Getting {
    /// From its own queue only (worker `w` of queue `w % n`).
    Partitioned,
    /// From its thread's home shard, else from any ([`get_sharded`]).
    Sharded,
}

/// The scenario over `n` queues, each key added to the queue its hash
/// picks, the workers getting as `getting` says.
async fn run_over_queues(keys: usize, workers: usize, n: usize, getting: Getting) -> Duration {
    let names = scenario_d::key_names(keys);
    let queues: Arc<[WorkQueue<String>]> = (0..n).map(|_| WorkQueue::new()).collect();
    let processed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (queues, processed) = (queues.clone(), processed.clone());
            tokio::spawn(async move {
                loop {
                    let next = match getting {
                        Getting::Partitioned => {
                            let s = w % queues.len();
                            queues[s].get().await.map(|k| (s, k))
                        }
                        Getting::Sharded => get_sharded(&queues).await,
                    };
                    let Some((s, k)) = next else { break };
                    let q = &queues[s];
                    q.forget(&k);
                    if processed.fetch_add(1, Ordering::Relaxed) + 1 == keys as u64 {
                        queues.iter().for_each(WorkQueue::shut_down);
                    }
                    q.done(&k);
                }
            })
        })
        .collect();
    let producer = tokio::spawn(async move {
        let hasher = foldhash::fast::FixedState::default();
        for k in names {
            let s = (hasher.hash_one(&k) % queues.len() as u64) as usize;
            queues[s].add(k);
        }
    });
    let _ = producer.await;
    for h in handles {
        let _ = h.await;
    }
    start.elapsed()
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        // `cargo bench` / `cargo test --benches` probing: nothing to list.
        return;
    }
    let keys = arg(&args, "--keys", 1_000_000);
    let workers = arg(&args, "--workers", 1);
    let runs = arg(&args, "--runs", 1);
    let done_and_get = args.iter().any(|a| a == "--done-and-get");
    let partitions = arg(&args, "--partitions", 1).max(1);
    let shards = arg(&args, "--shards", 1).max(1);
    for _ in 0..runs {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let elapsed = if shards > 1 {
            rt.block_on(run_over_queues(keys, workers, shards, Getting::Sharded))
        } else if partitions > 1 {
            rt.block_on(run_over_queues(
                keys,
                workers,
                partitions,
                Getting::Partitioned,
            ))
        } else {
            rt.block_on(scenario_d::run(keys, workers, done_and_get))
        };
        let rate = keys as f64 / elapsed.as_secs_f64();
        println!(
            "scenario_d keys={keys} workers={workers} partitions={partitions} shards={shards}: {:.3} M items/s",
            rate / 1e6
        );
    }
}
