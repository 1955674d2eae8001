//! Benchmarks of the work queue: the add/get/done cycle with 1 and 8
//! workers, `add_after` with 10k waiting items, and a rate-limited requeue.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use kcache_workqueue::{QueueItem, WorkQueue, default_controller_rate_limiter};

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn paused_current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// A benchmark group whose throughput is one item per iteration.
fn per_item_group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    g
}

/// `iters` times on a new queue, timed: add `item(i)`, get it, mark it done.
async fn one_worker<T: QueueItem>(iters: u64, item: impl Fn(u64) -> T) -> Duration {
    let q: WorkQueue<T> = WorkQueue::new();
    let start = Instant::now();
    for i in 0..iters {
        q.add(item(i));
        let got = q.get().await.unwrap();
        q.done(&got);
    }
    start.elapsed()
}

/// One worker: add an item, get it, mark it done.
fn add_get_done_1_worker(c: &mut Criterion) {
    let rt = current_thread();
    let mut g = per_item_group(c, "add_get_done");
    g.bench_function("1_worker", |b| {
        b.iter_custom(|iters| rt.block_on(one_worker(iters, black_box)))
    });
    g.bench_function("1_worker_string_keys", |b| {
        let keys: Vec<String> = (0..1024).map(|i| format!("default/pod-{i}")).collect();
        b.iter_custom(|iters| rt.block_on(one_worker(iters, |i| keys[(i % 1024) as usize].clone())))
    });
    g.finish();
}

/// One producer adds distinct items; 8 worker tasks on a multi-threaded
/// runtime (2 threads) get and finish them. Time per item until all are
/// done. With `u64` items, and with `namespace/name` strings as in
/// scenario (d) of `cargo xtask bench-compare`.
fn add_get_done_8_workers(c: &mut Criterion) {
    let mut g = per_item_group(c, "add_get_done");
    g.bench_function("8_workers", |b| {
        b.iter_custom(|iters| eight_workers(iters, |i| i))
    });
    g.bench_function("8_workers_string_keys", |b| {
        b.iter_custom(|iters| eight_workers(iters, |i| format!("team-{}/web-{i:08}", i % 50)))
    });
    g.finish();
}

fn eight_workers<T: kcache_workqueue::QueueItem>(iters: u64, key: impl Fn(u64) -> T) -> Duration {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let keys: Vec<T> = (0..iters).map(key).collect();
    rt.block_on(async {
        let q: WorkQueue<T> = WorkQueue::new();
        let processed = Arc::new(AtomicU64::new(0));
        let finished = Arc::new(tokio::sync::Notify::new());
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let q = q.clone();
                let processed = Arc::clone(&processed);
                let finished = Arc::clone(&finished);
                tokio::spawn(async move {
                    while let Some(item) = q.get().await {
                        q.done(&item);
                        if processed.fetch_add(1, Ordering::Relaxed) + 1 == iters {
                            finished.notify_one();
                        }
                    }
                })
            })
            .collect();
        let start = Instant::now();
        for (i, k) in keys.into_iter().enumerate() {
            q.add(k);
            if i % 256 == 255 {
                tokio::task::yield_now().await;
            }
        }
        finished.notified().await;
        let elapsed = start.elapsed();
        q.shut_down();
        for w in workers {
            w.await.unwrap();
        }
        elapsed
    })
}

const WAITING: u64 = 10_000;

fn delay_of(i: u64) -> Duration {
    // Spread over 1 s .. 1 h, in a scrambled order.
    Duration::from_millis(1_000 + (i.wrapping_mul(0x9E37_79B9) % 3_599_000))
}

/// A new queue holding the items of `range` waiting, each for [`delay_of`] it.
fn waiting_queue(range: std::ops::Range<u64>) -> WorkQueue<u64> {
    let q = WorkQueue::new();
    for i in range {
        q.add_after(i, delay_of(i));
    }
    q
}

/// Runs `iters` iterations on `rt` in batches of at most [`WAITING`]:
/// `batch(n)` runs `n` and returns the time it measured.
fn in_batches(
    rt: &tokio::runtime::Runtime,
    iters: u64,
    mut batch: impl AsyncFnMut(u64) -> Duration,
) -> Duration {
    rt.block_on(async {
        let mut total = Duration::ZERO;
        let mut done = 0;
        while done < iters {
            let n = (iters - done).min(WAITING);
            total += batch(n).await;
            done += n;
        }
        total
    })
}

/// `add_after` of new items into a queue already holding 10k waiting
/// items; and 10k waiting items becoming ready and being processed.
fn add_after_10k_waiting(c: &mut Criterion) {
    let rt = paused_current_thread();
    let mut g = per_item_group(c, "add_after_10k_waiting");
    g.bench_function("insert", |b| {
        b.iter_custom(|iters| {
            in_batches(&rt, iters, async |n| {
                // Untimed: a fresh queue with 10k waiting items.
                let q = waiting_queue(0..WAITING);
                let start = Instant::now();
                for i in WAITING..WAITING + n {
                    q.add_after(black_box(i), delay_of(i));
                }
                start.elapsed()
            })
        })
    });
    g.bench_function("fire_get_done", |b| {
        b.iter_custom(|iters| {
            in_batches(&rt, iters, async |n| {
                let q = waiting_queue(0..n);
                tokio::time::advance(Duration::from_secs(3_601)).await;
                let start = Instant::now();
                for _ in 0..n {
                    let item = q.get().await.unwrap();
                    q.done(&item);
                }
                start.elapsed()
            })
        })
    });
    g.finish();
}

/// A failed item's full cycle with client-go's default controller rate
/// limiter: `add_rate_limited` (limiter + timer queue), then a new event
/// makes it ready at once (`add`), `get`, `done`, `forget`.
fn rate_limited_requeue(c: &mut Criterion) {
    let rt = current_thread();
    let mut g = per_item_group(c, "rate_limited_requeue");
    g.bench_function("cycle", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let q: WorkQueue<u64> = WorkQueue::builder()
                    .rate_limiter(default_controller_rate_limiter())
                    .build()
                    .unwrap();
                let start = Instant::now();
                for i in 0..iters {
                    let key = i % 1024;
                    q.add_rate_limited(key);
                    q.add(key);
                    let item = q.get().await.unwrap();
                    q.done(&item);
                    q.forget(&item);
                }
                start.elapsed()
            })
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    add_get_done_1_worker,
    add_get_done_8_workers,
    add_after_10k_waiting,
    rate_limited_requeue
);
criterion_main!(benches);
