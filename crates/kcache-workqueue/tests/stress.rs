//! Concurrency stress: many producers and workers on a multi-threaded
//! runtime. Every item is processed at least once after its last add, and
//! never by two workers at once.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kcache_workqueue::{
    AddOpts, ItemExponentialFailureRateLimiter, NoopWorkQueueMetricsProvider, WorkQueue,
};

mod common;
use common::WorkerLoop;

const KEYS: usize = 200;
const PRODUCERS: usize = 8;
const WORKERS: usize = 8;
const OPS_PER_PRODUCER: usize = 20_000;

struct Book {
    /// Logical clock shared by everybody.
    clock: AtomicU64,
    /// Per key: logical time just before its last add.
    last_add: Vec<AtomicU64>,
    /// Per key: logical time just after its last `get`.
    last_start: Vec<AtomicU64>,
    in_flight: Mutex<HashSet<usize>>,
    gets: AtomicUsize,
    /// Times a worker got a key another worker was holding.
    double_holds: AtomicUsize,
    /// Workers re-add (rate limited) every 11th item while this is set.
    readd: AtomicBool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stress_producers_and_workers() {
    stress(false).await;
}

/// The same with a named queue with metrics: its adds take the lock
/// (they need a timestamp), its deferred `done`s and `get`s carry theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stress_producers_and_workers_with_metrics() {
    stress(true).await;
}

async fn stress(with_metrics: bool) {
    let mut builder = WorkQueue::builder().rate_limiter(ItemExponentialFailureRateLimiter::new(
        Duration::from_micros(100),
        Duration::from_millis(2),
    ));
    if with_metrics {
        builder = builder.name("stress").metrics(NoopWorkQueueMetricsProvider);
    }
    let q: WorkQueue<usize> = builder.build().unwrap();
    let book = Arc::new(Book {
        clock: AtomicU64::new(1),
        last_add: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        last_start: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        in_flight: Mutex::new(HashSet::new()),
        gets: AtomicUsize::new(0),
        double_holds: AtomicUsize::new(0),
        readd: AtomicBool::new(true),
    });

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let q = q.clone();
            let book = Arc::clone(&book);
            tokio::spawn(async move {
                let mut n = 0u64;
                while let Some(key) = q.get().await {
                    let t = book.clock.fetch_add(1, Ordering::SeqCst);
                    book.last_start[key].fetch_max(t, Ordering::SeqCst);
                    if !book.in_flight.lock().unwrap().insert(key) {
                        // Counted, not asserted: a panicking worker would
                        // leave the drain below waiting forever.
                        book.double_holds.fetch_add(1, Ordering::SeqCst);
                    }
                    book.gets.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                    if (n + w as u64).is_multiple_of(7) {
                        tokio::task::yield_now().await;
                    }
                    book.in_flight.lock().unwrap().remove(&key);
                    if n.is_multiple_of(11) && book.readd.load(Ordering::SeqCst) {
                        // A retry: recorded as an add like the producers'.
                        let t = book.clock.fetch_add(1, Ordering::SeqCst);
                        book.last_add[key].fetch_max(t, Ordering::SeqCst);
                        q.add_rate_limited(key);
                    } else {
                        q.forget(&key);
                    }
                    q.done(&key);
                }
            })
        })
        .collect();

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let q = q.clone();
            let book = Arc::clone(&book);
            tokio::spawn(async move {
                let mut x = (p as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                for i in 0..OPS_PER_PRODUCER {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = (x % KEYS as u64) as usize;
                    let t = book.clock.fetch_add(1, Ordering::SeqCst);
                    book.last_add[key].fetch_max(t, Ordering::SeqCst);
                    match x % 10 {
                        0 => q.add_after(key, Duration::from_micros(x % 2000)),
                        1 => q.add_with_opts(
                            key,
                            AddOpts {
                                after: Some(Duration::from_micros(x % 500)),
                                rate_limited: false,
                                priority: (x % 5) as i32 - 2,
                            },
                        ),
                        2 => q.add_with_opts(key, AddOpts::priority((x % 7) as i32)),
                        _ => q.add(key),
                    }
                    if i.is_multiple_of(64) {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();

    for p in producers {
        p.await.unwrap();
    }
    // Stop the retries, then wait until the queue is idle (nothing
    // delayed, ready or processing, twice in a row) so that shutting down
    // drops no delayed item: every add was accepted and must be processed.
    book.readd.store(false, Ordering::SeqCst);
    let idle = || q.processing_len() == 0 && q.delayed_len() == 0 && q.is_empty();
    let settle = async {
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if idle() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if idle() {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), settle)
        .await
        .expect("the queue never became idle");
    tokio::time::timeout(Duration::from_secs(20), q.shut_down_with_drain())
        .await
        .expect("drain never finished");
    assert_eq!(
        book.double_holds.load(Ordering::SeqCst),
        0,
        "keys handed to two workers at once"
    );
    for w in workers {
        w.await.unwrap();
    }

    let mut added = 0;
    for key in 0..KEYS {
        let last_add = book.last_add[key].load(Ordering::SeqCst);
        if last_add == 0 {
            continue;
        }
        added += 1;
        let last_start = book.last_start[key].load(Ordering::SeqCst);
        assert!(
            last_start > last_add,
            "key {key}: last add at {last_add}, last processing start at {last_start}"
        );
    }
    assert_eq!(added, KEYS);
    assert!(book.in_flight.lock().unwrap().is_empty());
    assert!(book.gets.load(Ordering::Relaxed) >= KEYS);
    assert_eq!(q.len(), 0);
    assert_eq!(q.processing_len(), 0);
}

/// Many workers, adds from a runtime task and from a plain thread, in bursts
/// with pauses so that workers park often: every distinct item is handed
/// out exactly once and none is stranded by a lost wakeup (the queue wakes
/// one parked getter per burst and the woken getters wake the next ones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_items_each_processed_once_by_many_workers() {
    const ITEMS: usize = 100_000;
    const WORKERS: usize = 16;
    let q: WorkQueue<usize> = WorkQueue::new();
    let seen: Arc<Vec<AtomicUsize>> = Arc::new((0..ITEMS).map(|_| AtomicUsize::new(0)).collect());
    let processed = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (q, seen) = (q.clone(), Arc::clone(&seen));
            let (processed, all_done) = (Arc::clone(&processed), Arc::clone(&all_done));
            tokio::spawn(async move {
                let mut n = 0usize;
                while let Some(item) = q.get().await {
                    seen[item].fetch_add(1, Ordering::SeqCst);
                    n += 1;
                    if (n + w).is_multiple_of(5) {
                        tokio::task::yield_now().await;
                    }
                    q.done(&item);
                    if processed.fetch_add(1, Ordering::SeqCst) + 1 == ITEMS {
                        all_done.notify_one();
                    }
                }
            })
        })
        .collect();
    // Half the items from a thread outside the runtime (wakes cross into
    // the runtime), half from a task.
    let outside = {
        let q = q.clone();
        std::thread::spawn(move || {
            for i in (0..ITEMS).step_by(2) {
                q.add(i);
                if i % 2_000 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        })
    };
    for i in (1..ITEMS).step_by(2) {
        q.add(i);
        if i % 3_001 == 0 {
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
    }
    outside.join().unwrap();
    tokio::time::timeout(Duration::from_secs(30), all_done.notified())
        .await
        .expect("items stranded: a wakeup was lost");
    q.shut_down();
    for w in workers {
        tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("a worker did not see the shutdown")
            .unwrap();
    }
    for (i, n) in seen.iter().enumerate() {
        assert_eq!(n.load(Ordering::SeqCst), 1, "item {i}");
    }
    assert_eq!(q.len(), 0);
    assert_eq!(q.processing_len(), 0);
}

/// A getter woken for an item but dropped before it runs passes the wake on
/// to another parked getter.
#[tokio::test(flavor = "current_thread")]
async fn dropped_woken_getter_passes_the_wake_on() {
    let q: WorkQueue<u32> = WorkQueue::new();
    let first = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await; // `first` parks
    let second = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await; // `second` parks behind it
    q.add(7); // wakes `first` ...
    first.abort(); // ... which is dropped before it runs
    let got = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the wake was lost with the dropped getter")
        .unwrap();
    assert_eq!(got, Some(7));
    assert!(first.await.unwrap_err().is_cancelled());
}

/// A worker that always finds an item ready (and never awaits anything
/// else) still lets the getter woken to share the work run: on one thread,
/// that getter waits behind the busy task until it yields.
#[tokio::test(flavor = "current_thread")]
async fn busy_worker_yields_to_a_woken_getter() {
    common::busy_worker_yields_to_a_woken_getter(WorkerLoop::GetThenDone).await;
}
