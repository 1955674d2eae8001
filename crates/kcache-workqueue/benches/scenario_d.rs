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

#[path = "support/scenario_d.rs"]
mod scenario_d;

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kcache_workqueue::WorkQueue;

/// The `--partitions` experiment: the scenario over `partitions`
/// independent queues (see the module documentation).
async fn run_partitioned(keys: usize, workers: usize, partitions: usize) -> Duration {
    let names: Vec<String> = (0..keys)
        .map(|i| format!("team-{}/web-{i:08}", i % 50))
        .collect();
    let queues: Vec<WorkQueue<String>> = (0..partitions).map(|_| WorkQueue::new()).collect();
    let processed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (q, all, processed) = (
                queues[w % partitions].clone(),
                queues.clone(),
                processed.clone(),
            );
            tokio::spawn(async move {
                let mut next = q.get().await;
                while let Some(k) = next {
                    q.forget(&k);
                    if processed.fetch_add(1, Ordering::Relaxed) + 1 == keys as u64 {
                        all.iter().for_each(WorkQueue::shut_down);
                    }
                    q.done(&k);
                    next = q.get().await;
                }
            })
        })
        .collect();
    let producer = tokio::spawn(async move {
        let hasher = foldhash::fast::FixedState::default();
        for k in names {
            let p = (hasher.hash_one(&k) % queues.len() as u64) as usize;
            queues[p].add(k);
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
    for _ in 0..runs {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let elapsed = if partitions > 1 {
            rt.block_on(run_partitioned(keys, workers, partitions))
        } else {
            rt.block_on(scenario_d::run(keys, workers, done_and_get))
        };
        let rate = keys as f64 / elapsed.as_secs_f64();
        println!(
            "scenario_d keys={keys} workers={workers} partitions={partitions}: {:.3} M items/s",
            rate / 1e6
        );
    }
}
