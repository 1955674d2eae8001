//! The kcache client of `cargo xtask bench-compare`: a
//! `SharedIndexInformer<Pod>` over the server of `$KUBECONFIG`, one counting
//! handler, stops at the end marker (scenario `ingest`, the replay server;
//! prints one [`Report`] JSON line); or kcache's `WorkQueue` add/get/done of
//! distinct keys (scenario `workqueue`); or, against the real apiserver
//! (scenario `sync`), syncs `--expect` Pods by paged list or streaming list,
//! then counts `--expect-updates` updates, speaking the line protocol of
//! [`kcache_bench_compare::real`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kcache_bench_compare::real::{
    self, Meter, SyncArgs, emit, stop_requested, unix_micros, write_watch_log,
};
use kcache_bench_compare::{END_MARKER, Report, proc_cpu_secs, proc_status_kb};
use kcache_core::{Compression, ObjectOptions};
use kcache_informer::{
    BackgroundCompression, InformerConfig, ResourceEventHandlerFuncs, SharedIndexInformer,
    SharedIndexInformerBuilder,
};
use kcache_reflector::WatchConfig;
use kube::api::DynamicObject;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Scenario (d)'s driver, shared with kcache-workqueue's `scenario_d` bench.
#[path = "../../../../crates/kcache-workqueue/benches/support/scenario_d.rs"]
mod scenario_d;

/// Counts heap bytes live: the steady memory by the allocator's numbers,
/// next to RSS (which also holds freed pages the allocator keeps).
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Whether allocations go through [`GLOBAL`]'s counters; set once, before
/// the runtime starts. The work queue scenario turns them off: its workers
/// allocate and free a key per item on two threads, and the counters' shared
/// atomics (four read-modify-writes per allocation and free, bounced between
/// the cores) cost it a fifth of its throughput with 8 workers, a cost of
/// the measurement that the Go client does not pay.
static COUNT_HEAP: AtomicBool = AtomicBool::new(true);

/// [`GLOBAL`] while [`COUNT_HEAP`] is set, else the system allocator.
struct HarnessAlloc;

impl HarnessAlloc {
    /// The allocator this process uses now (see [`COUNT_HEAP`]).
    fn backend() -> &'static dyn GlobalAlloc {
        if COUNT_HEAP.load(Ordering::Relaxed) {
            GLOBAL
        } else {
            &System
        }
    }
}

// SAFETY: every call is forwarded to an allocator that upholds
// `GlobalAlloc`'s contract. `COUNT_HEAP` is set before any thread but the
// main one runs and never changes after, and both allocators are `System`
// underneath, so a block is freed by the allocator that gave it out (only
// the counters differ).
#[allow(unsafe_code)] // a `GlobalAlloc` cannot be written without it
unsafe impl GlobalAlloc for HarnessAlloc {
    // Each method forwards with the caller's guarantees.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { Self::backend().alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { Self::backend().dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { Self::backend().alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { Self::backend().realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: HarnessAlloc = HarnessAlloc;

/// Heap bytes allocated and not yet freed (`stats_alloc` counts a
/// realloc's growth in `bytes_allocated` and its shrink in
/// `bytes_deallocated` already).
fn heap_live_bytes() -> u64 {
    let s = GLOBAL.stats();
    s.bytes_allocated.saturating_sub(s.bytes_deallocated) as u64
}

/// `--wire-format`: what the informer asks the apiserver for.
mod wire_format {
    use kcache_reflector::WatchConfig;

    /// The wire format the client is asked to use.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
    pub enum WireFormat {
        /// Protobuf for built-in types (kcache's default).
        Auto,
        /// JSON forced.
        Json,
    }

    /// Sets `format` on the informer's list options.
    pub fn apply(opts: &mut WatchConfig, format: WireFormat) {
        opts.wire_format = match format {
            WireFormat::Auto => kcache_reflector::WireFormat::Auto,
            WireFormat::Json => kcache_reflector::WireFormat::Json,
        };
    }
}
use wire_format::WireFormat;

#[derive(Parser)]
struct Args {
    /// `ingest` (informer) or `workqueue` (one producer task adds `--keys`
    /// distinct keys, `--workers` tasks get, forget and done them; all on
    /// the runtime's 2 threads, as the Go client runs its goroutines on
    /// GOMAXPROCS=2).
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
    /// Background compression of quiet objects (the informer default: on).
    #[arg(long, value_enum, default_value = "on")]
    background_compression: OnOff,
    /// With background compression on and `--settle-ms` above 0: first
    /// wait its quiet time x 1.25 and one more round over the cache (every
    /// object of the list is then compressed), then settle and sample.
    #[arg(long)]
    wait_compressed: bool,
    /// Scenario (c') (a relist of a settled cache): once synced, wait for
    /// background compression as `--wait-compressed` does, then reset the
    /// peak RSS (`VmHWM`, through `/proc/self/clear_refs`), so that the
    /// peak reported covers the relist that comes after.
    #[arg(long)]
    reset_peak_when_compressed: bool,
    /// Workqueue: number of distinct keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Workqueue: number of workers.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Workqueue: workers call `done_and_get` (done and the next get in one
    /// lock acquisition) instead of `done` then `get`.
    #[arg(long)]
    done_and_get: bool,
    #[command(flatten)]
    sync: SyncArgs,
    /// What to ask the apiserver for: `auto` (protobuf for built-in types,
    /// CBOR with JSON as fallback for custom resources) or `json`.
    #[arg(long, value_enum, default_value = "auto")]
    wire_format: WireFormat,
}

/// `on` or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.scenario == "workqueue" {
        // Before the runtime's threads start (see `COUNT_HEAP`).
        COUNT_HEAP.store(false, Ordering::Relaxed);
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let report = match args.scenario.as_str() {
        "workqueue" => workqueue(args.keys, args.workers, args.done_and_get).await,
        "sync" => return sync(&args).await,
        _ => ingest(&args).await?,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// The Pod informer of both informer scenarios: a paged list (or, with
/// `use_watch_list`, a streaming list), objects kept as
/// `--strip-managed-fields` and `--compress` say, in the wire format of
/// `--wire-format`.
fn pod_informer(
    client: kube::Client,
    args: &Args,
    use_watch_list: bool,
) -> SharedIndexInformer<Pod> {
    configure(
        SharedIndexInformer::<Pod>::builder(client),
        args,
        use_watch_list,
    )
    .build()
}

/// The informer of the custom resource ([`real::real_cr`]), as
/// `DynamicObject`, configured as [`pod_informer`] (with `--wire-format
/// auto` it asks for CBOR).
fn cr_informer(
    client: kube::Client,
    args: &Args,
    use_watch_list: bool,
) -> SharedIndexInformer<DynamicObject> {
    let ar = real::cr_api_resource();
    configure(
        SharedIndexInformer::<DynamicObject>::builder_with(client, ar),
        args,
        use_watch_list,
    )
    .build()
}

/// The options of both informers.
fn configure<K>(
    builder: SharedIndexInformerBuilder<K>,
    args: &Args,
    use_watch_list: bool,
) -> SharedIndexInformerBuilder<K>
where
    K: kube::Resource + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let object_options = ObjectOptions {
        strip_managed_fields: args.strip_managed_fields,
        compression: if args.compress {
            Compression::lz4()
        } else {
            Compression::none()
        },
        ..ObjectOptions::default()
    };
    let mut opts = WatchConfig {
        use_watch_list,
        object_options,
        ..WatchConfig::default()
    };
    wire_format::apply(&mut opts, args.wire_format);
    builder.config(InformerConfig {
        watch: opts,
        background_compression: match args.background_compression {
            OnOff::On => BackgroundCompression::default(),
            OnOff::Off => BackgroundCompression::off(),
        },
        ..InformerConfig::default()
    })
}

/// An informer running in a task of its own.
struct Run {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), kcache_informer::InformerError>>,
}

impl Run {
    fn start<K>(informer: &SharedIndexInformer<K>) -> Run
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Clone + Send + Sync + 'static,
    {
        let cancel = CancellationToken::new();
        let task = informer
            .try_start(cancel.clone())
            .expect("a new informer has not started");
        Run { cancel, task }
    }

    /// Stops the informer and waits (at most 5 s) for its task to end.
    async fn stop(self) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

async fn ingest(args: &Args) -> anyhow::Result<Report> {
    let client = kube::Client::try_default().await?;
    let baseline = proc_status_kb("VmRSS");
    let baseline_heap = heap_live_bytes();
    let informer = pod_informer(client, args, false);
    let events = Arc::new(AtomicU64::new(0));
    let end = Arc::new(Notify::new());
    let updates = Arc::new(AtomicU64::new(0));
    let (a, u, d, end_a) = (events.clone(), events.clone(), events.clone(), end.clone());
    let updates_u = updates.clone();
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
                updates_u.fetch_add(1, Ordering::Relaxed);
            })
            .delete_func(move |_| {
                d.fetch_add(1, Ordering::Relaxed);
            }),
    )?;
    let start = Instant::now();
    let run = Run::start(&informer);
    let peak_reset = args
        .reset_peak_when_compressed
        .then(|| tokio::spawn(reset_peak_when_compressed(informer.clone(), updates, start)));
    end.notified().await;
    let secs = start.elapsed().as_secs_f64();
    let cpu_secs = proc_cpu_secs();
    let n = events.load(Ordering::Relaxed);
    let waited = Instant::now();
    let bg = informer.background_compression().clone();
    if args.wait_compressed && bg.is_enabled() && args.settle_ms > 0 {
        wait_compressed(&informer, &bg).await;
    }
    let waited_secs = waited.elapsed().as_secs_f64();
    let settle = Duration::from_millis(args.settle_ms);
    let mut report = Report::ingest("kcache", n, secs, baseline, settle).await;
    report.heap_live_bytes = heap_live_bytes();
    report.baseline_heap_bytes = baseline_heap;
    report.cpu_secs = cpu_secs;
    report.cpu_total_secs = proc_cpu_secs();
    report.waited_secs = waited_secs;
    report.background_compression = bg.is_enabled();
    let stats = informer.background_compression_stats();
    report.bg_compressed = stats.compressed;
    report.bg_bytes_before = stats.bytes_before;
    report.bg_bytes_after = stats.bytes_after;
    report.bg_busy_secs = stats.busy.as_secs_f64();
    report.decompressions = kcache_core::decompressions();
    if let Some(reset) = peak_reset {
        if reset.is_finished() {
            if let Ok((secs, updates)) = reset.await {
                report.peak_reset_secs = secs;
                report.updates_at_peak_reset = updates;
            }
        } else {
            reset.abort();
        }
    }
    report.cached = informer.indexer().len();
    report.object_heap_bytes = informer
        .indexer()
        .list()
        .iter()
        .map(|o| o.heap_size() as u64)
        .sum();
    run.stop().await;
    Ok(report)
}

/// Waits background compression's quiet time x 1.25 after the last
/// write (the end marker), then until one more round over the cache has
/// ended: every object of the list has then been compressed (or kept
/// plain for lack of gain). Bounded: at most 4 more quiet times.
async fn wait_compressed<K>(informer: &SharedIndexInformer<K>, bg: &BackgroundCompression)
where
    K: kube::Resource + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    tokio::time::sleep(bg.quiet() * 5 / 4).await;
    let rounds = informer.background_compression_stats().rounds;
    let deadline = Instant::now() + bg.quiet() * 4;
    while informer.background_compression_stats().rounds == rounds && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "kcache-client: waited for background compression (quiet {:?}): {:?}",
        bg.quiet(),
        informer.background_compression_stats()
    );
}

/// `--reset-peak-when-compressed`: once synced and compressed, resets the
/// process's peak RSS (writes `5` to `/proc/self/clear_refs`); returns the
/// seconds since `start` and the updates the handler had seen then.
async fn reset_peak_when_compressed(
    informer: SharedIndexInformer<Pod>,
    updates: Arc<AtomicU64>,
    start: Instant,
) -> (f64, u64) {
    while !informer.has_synced() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bg = informer.background_compression().clone();
    if bg.is_enabled() {
        wait_compressed(&informer, &bg).await;
    }
    let seen = updates.load(Ordering::Relaxed);
    if let Err(e) = std::fs::write("/proc/self/clear_refs", "5") {
        eprintln!("kcache-client: cannot reset the peak RSS: {e}");
        return (0.0, seen);
    }
    (start.elapsed().as_secs_f64(), seen)
}

/// Scenario `sync` against the real apiserver: see the module doc.
async fn sync(args: &Args) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    if args.sync.custom_resource() {
        sync_with(args, cr_informer(client, args, args.sync.streaming())).await
    } else {
        sync_with(args, pod_informer(client, args, args.sync.streaming())).await
    }
}

/// [`sync`] with its informer.
async fn sync_with<K>(args: &Args, informer: SharedIndexInformer<K>) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let adds = Arc::new(AtomicU64::new(0));
    let synced = Arc::new(Notify::new());
    let updated = Arc::new(Notify::new());
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(u64, u64)>::new()));
    let (expect, expect_updates) = (args.sync.expect, args.sync.expect_updates);
    let (a, s) = (adds.clone(), synced.clone());
    let (seen_u, updated_u) = (seen.clone(), updated.clone());
    informer.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .add_func(move |_, _| {
                if a.fetch_add(1, Ordering::Relaxed) + 1 == expect {
                    s.notify_one();
                }
            })
            .update_func(move |_, new| {
                let rv = new
                    .resource_version()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0);
                let mut seen = seen_u.lock().unwrap_or_else(|e| e.into_inner());
                seen.push((rv, unix_micros()));
                if seen.len() as u64 == expect_updates {
                    updated_u.notify_one();
                }
            }),
    )?;
    let stop = stop_requested();
    tokio::pin!(stop);
    let baseline_heap = heap_live_bytes();
    let meter = Meter::start();
    let run = Run::start(&informer);
    synced.notified().await;
    let cached = informer.indexer().len() as u64;
    emit(&meter.phase("synced", "kcache", adds.load(Ordering::Relaxed), cached));
    let mut stopped = false;
    if expect_updates > 0 {
        tokio::select! {
            _ = updated.notified() => {
                let n = seen.lock().unwrap_or_else(|e| e.into_inner()).len() as u64;
                emit(&meter.phase("updated", "kcache", n, cached));
            }
            _ = &mut stop => stopped = true,
        }
    }
    if !stopped {
        stop.await;
    }
    let waited = Instant::now();
    let bg = informer.background_compression().clone();
    if args.wait_compressed && bg.is_enabled() {
        wait_compressed(&informer, &bg).await;
    }
    let waited_secs = waited.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let n = seen.lock().unwrap_or_else(|e| e.into_inner()).len() as u64;
    let mut done = meter.phase("done", "kcache", n, informer.indexer().len() as u64);
    done.heap_live_bytes = heap_live_bytes();
    done.baseline_heap_bytes = baseline_heap;
    done.waited_secs = waited_secs;
    emit(&done);
    if let Some(path) = &args.sync.watch_log {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        write_watch_log(path, &seen)?;
    }
    run.stop().await;
    Ok(())
}

/// Scenario `workqueue`: the shared scenario (d) driver
/// ([`scenario_d::run`]), reported as the rate of keys over the time until
/// every key is done.
async fn workqueue(keys: usize, workers: usize, done_and_get: bool) -> Report {
    let secs = scenario_d::run(keys, workers, done_and_get)
        .await
        .as_secs_f64();
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
