//! Scenario (d) of `cargo xtask bench-compare`, in one process and without
//! the harness's other dependencies: 1M distinct `namespace/name` keys added
//! by one producer (the `block_on` thread) while 1 or 8 workers on a
//! 2-thread tokio runtime get, forget and mark them done. Prints items/s per
//! run. For profiling (`perf record`, `valgrind --tool=callgrind`) the
//! bench profile keeps debug info.
//!
//! ```sh
//! cargo bench -p kcache-workqueue --bench scenario_d -- --keys 1000000 --workers 8 --runs 5
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use kcache_workqueue::WorkQueue;

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
    for _ in 0..runs {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let rate = rt.block_on(run(keys, workers));
        println!(
            "scenario_d keys={keys} workers={workers}: {:.3} M items/s",
            rate / 1e6
        );
    }
}

/// The body of `kcache-client --scenario workqueue`.
async fn run(keys: usize, workers: usize) -> f64 {
    let names: Vec<String> = (0..keys)
        .map(|i| format!("team-{}/web-{i:08}", i % 50))
        .collect();
    let q: WorkQueue<String> = WorkQueue::new();
    let processed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (q, processed) = (q.clone(), Arc::clone(&processed));
            tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    q.forget(&k);
                    q.done(&k);
                    if processed.fetch_add(1, Ordering::Relaxed) + 1 == keys as u64 {
                        q.shut_down();
                    }
                }
            })
        })
        .collect();
    for k in names {
        q.add(k);
    }
    for h in handles {
        let _ = h.await;
    }
    keys as f64 / start.elapsed().as_secs_f64()
}
