//! The kcache client of `cargo xtask bench-compare`: a
//! `SharedIndexInformer<Pod>` over the server of `$KUBECONFIG`, one counting
//! handler, stops at the end marker (scenario `ingest`); or kcache's
//! `WorkQueue` add/get/done of distinct keys (scenario `workqueue`).
//! Prints one [`Report`] JSON line.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kcache_bench_compare::{END_MARKER, Report, proc_status_kb};
use kcache_core::{Compression, ObjectOptions};
use kcache_informer::{ListOptions, ResourceEventHandlerFuncs, SharedIndexInformer};
use kcache_workqueue::WorkQueue;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    /// `ingest` (informer) or `workqueue`.
    #[arg(long, default_value = "ingest")]
    scenario: String,
    /// Cut managedFields from every cached object.
    #[arg(long)]
    strip_managed_fields: bool,
    /// Keep every cached object's JSON LZ4-compressed (opt-in `Compression::lz4()`).
    #[arg(long)]
    compress: bool,
    /// Milliseconds to wait before reading the steady-state RSS.
    #[arg(long, default_value_t = 1000)]
    settle_ms: u64,
    /// Workqueue: number of distinct keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Workqueue: number of workers.
    #[arg(long, default_value_t = 1)]
    workers: usize,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let report = match args.scenario.as_str() {
        "workqueue" => workqueue(args.keys, args.workers).await,
        _ => ingest(&args).await?,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

async fn ingest(args: &Args) -> anyhow::Result<Report> {
    let client = kube::Client::try_default().await?;
    let baseline = proc_status_kb("VmRSS");
    let informer = SharedIndexInformer::<Pod>::builder(client)
        .list_options(ListOptions {
            use_watch_list: false,
            object_options: ObjectOptions::new()
                .strip_managed_fields(args.strip_managed_fields)
                .compression(if args.compress {
                    Compression::lz4()
                } else {
                    Compression::none()
                }),
            ..ListOptions::default()
        })
        .build();
    let events = Arc::new(AtomicU64::new(0));
    let end = Arc::new(Notify::new());
    let (a, u, d, end_a) = (events.clone(), events.clone(), events.clone(), end.clone());
    informer.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .add_func(move |obj, _| {
                a.fetch_add(1, Ordering::Relaxed);
                if obj.name() == END_MARKER {
                    end_a.notify_one();
                }
            })
            .update_func(move |_, _| {
                u.fetch_add(1, Ordering::Relaxed);
            })
            .delete_func(move |_| {
                d.fetch_add(1, Ordering::Relaxed);
            }),
    )?;
    let cancel = CancellationToken::new();
    let start = Instant::now();
    let task = tokio::spawn({
        let (inf, cancel) = (informer.clone(), cancel.clone());
        async move { inf.run(cancel).await }
    });
    end.notified().await;
    let secs = start.elapsed().as_secs_f64();
    let n = events.load(Ordering::Relaxed);
    let peak = proc_status_kb("VmHWM");
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let report = Report {
        client: "kcache".into(),
        events: n,
        secs,
        events_per_sec: n as f64 / secs,
        peak_rss_kb: peak,
        steady_rss_kb: proc_status_kb("VmRSS"),
        baseline_rss_kb: baseline,
        cached: informer.indexer().len(),
        object_heap_bytes: informer
            .indexer()
            .list()
            .iter()
            .map(|o| o.heap_size() as u64)
            .sum(),
    };
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    Ok(report)
}

async fn workqueue(keys: usize, workers: usize) -> Report {
    let names: Vec<String> = (0..keys)
        .map(|i| format!("team-{}/web-{i:08}", i % 50))
        .collect();
    // `new` has client-go's default controller rate limiter, like the Go
    // client's rate-limiting queue; a worker forgets a key it processed.
    let q: WorkQueue<String> = WorkQueue::new();
    let processed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let (q, processed) = (q.clone(), processed.clone());
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
    let secs = start.elapsed().as_secs_f64();
    Report {
        client: "kcache".into(),
        events: keys as u64,
        secs,
        events_per_sec: keys as f64 / secs,
        peak_rss_kb: proc_status_kb("VmHWM"),
        steady_rss_kb: proc_status_kb("VmRSS"),
        ..Report::default()
    }
}
