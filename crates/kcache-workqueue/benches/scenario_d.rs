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

#[path = "support/scenario_d.rs"]
mod scenario_d;

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
    for _ in 0..runs {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let elapsed = rt.block_on(scenario_d::run(keys, workers, done_and_get));
        let rate = keys as f64 / elapsed.as_secs_f64();
        println!(
            "scenario_d keys={keys} workers={workers}: {:.3} M items/s",
            rate / 1e6
        );
    }
}
