//! The fault suite (issue 9): an informer against a real local control
//! plane, behind a fault-injecting proxy, while a seeded driver churns
//! ConfigMaps. After each fault the driver stops and [`support::converge`]
//! checks: cache == fresh LIST (keys and resourceVersions), the handler's
//! view == fresh LIST (so every deleted key it had seen got a delete or a
//! tombstone), no update went backwards, no notification was delivered
//! twice, no deleted object came back, and the informer ends cleanly.
//!
//! Faults 1-5 run on both list paths: the streaming list
//! (`sendInitialEvents`, the default) and, in the `_paged` variants, the
//! paged LIST + watch (`use_watch_list(false)`, pages of [`PAGE`] items),
//! which is the reflector's fallback whenever a streaming list fails.
//!
//! Quick form by default (CI); `KCACHE_FAULT_FULL=1` for more faults and
//! operations; `KCACHE_FAULT_SEED=<n>` replays a run.

#[path = "faults/fault8.rs"]
mod fault8;
#[path = "faults/fault9.rs"]
mod fault9;
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kcache_envtest::ControlPlane;
use kcache_envtest::proxy::{FaultProxy, ProxyStats};
use kcache_informer::{SharedIndexInformer, wait_for_cache_sync};
use kcache_reflector::WatchConfig;
use kcache_testing::builders::config_map;
use kcache_testing::eventually;
use kube::api::{Api, PostParams};
use rand::Rng;
use rand::rngs::StdRng;
use support::*;

/// Convergence bound after the driver stops: the reflector's backoff caps at
/// 30 s with up to 100 % jitter.
const CONVERGE: Duration = Duration::from_secs(90);

/// Page size of the paged variants: lists of more than this many objects
/// take several pages (continue tokens).
const PAGE: u32 = 10;

/// ConfigMaps created before the informer starts, so that its initial list
/// (and every relist) has several pages on the paged path.
const PREFILL: usize = 25;

/// The list path an informer takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListPath {
    /// Streaming lists (`sendInitialEvents=true`), the default.
    Streaming,
    /// `use_watch_list(false)`: LIST in pages of [`PAGE`], then watch.
    Paged,
}

impl ListPath {
    fn options(self, ns: &str) -> WatchConfig {
        let mut o = WatchConfig {
            namespace: Some(ns.to_owned()),
            ..WatchConfig::default()
        };
        if self == ListPath::Paged {
            o.use_watch_list = false;
            o.page_size = PAGE;
        }
        o
    }

    /// The test's name on this path.
    fn name(self, test: &str) -> String {
        match self {
            ListPath::Streaming => test.to_owned(),
            ListPath::Paged => format!("{test}_paged"),
        }
    }

    /// Asserts, from the requests the informer sent, that it took this
    /// path (a paged variant that silently streamed would test nothing).
    fn assert_taken(self, kinds: RequestKinds) {
        match self {
            ListPath::Streaming => assert!(
                kinds.streaming_lists >= 1,
                "the streaming path sent no streaming list: {kinds:?}"
            ),
            // a list at resourceVersion "0" (the initial one) is served
            // whole from the watch cache whatever the limit; relists at
            // "" or at an exact resourceVersion come in pages
            ListPath::Paged => assert!(
                kinds.streaming_lists == 0 && kinds.lists >= 1,
                "the paged path must LIST and never stream: {kinds:?}"
            ),
        }
    }
}

async fn synced(informer: &SharedIndexInformer<ConfigMap>, within: Duration) {
    let cancel = tokio_util::sync::CancellationToken::new();
    let ok = tokio::time::timeout(within, wait_for_cache_sync(&cancel, &[informer])).await;
    assert!(
        matches!(ok, Ok(true)),
        "the informer did not sync within {within:?}"
    );
}

/// Creates `n` ConfigMaps `pre<i>` of `pad` bytes each.
async fn prefill(api: &Api<ConfigMap>, n: usize, pad: usize) {
    for i in 0..n {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": { "name": format!("pre{i}") },
            "data": { "pad": "x".repeat(pad) }
        }))
        .expect("configmap");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
}

/// A scenario's name on its list path, its seed and an RNG from that seed.
struct Run {
    name: String,
    seed: u64,
    rng: StdRng,
}

impl Run {
    fn new(path: ListPath, test: &str) -> Run {
        capture_logs();
        let name = path.name(test);
        let (seed, rng) = seeded(&name);
        Run { name, seed, rng }
    }
}

/// Sends the library's logs (kcache crates at info, `RUST_LOG` to change)
/// to the test harness's captured output, so that a failing fault test
/// prints what the reflector and informer did (a passing one prints
/// nothing). Once per process; the threads of each test's runtime inherit
/// its capture.
fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("warn,kcache_reflector=info,kcache_informer=info")
        });
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .with_ansi(false)
            .try_init();
    });
}

/// How [`Proxied::spawn`] sets a scenario up.
#[derive(Clone, Copy, Debug)]
struct Setup {
    /// ConfigMaps created before the informer starts.
    prefill: usize,
    /// Their size in bytes.
    pad: usize,
    /// The reflector's idle limit for a silent watch (`None`: its default).
    watch_idle: Option<Duration>,
    /// The proxy's delay of every chunk from the start.
    delay: Duration,
    /// The proxy in HTTP mode (so that bytes can be injected into a
    /// watch), and the informer on JSON (injections are JSON lines: the
    /// proxy writes them at a line boundary, protobuf frames have none;
    /// `protobuf_watch_errors_and_bookmarks` covers bad protobuf).
    http_mode: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            prefill: PREFILL,
            pad: 64,
            watch_idle: None,
            delay: Duration::ZERO,
            http_mode: false,
        }
    }
}

/// A fresh namespace with ConfigMaps in it ([`Setup::prefill`]), a fault
/// proxy in front of `cp`'s apiserver, and an informer on that namespace
/// through the proxy and an [`HttpFaults`] layer, on `path`, with a
/// recorder and a watch-error counter.
struct Proxied {
    ns: String,
    path: ListPath,
    proxy: FaultProxy,
    http: HttpFaults,
    informer: SharedIndexInformer<ConfigMap>,
    rec: Recorder,
    errors: ErrorCounts,
    cancel: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Proxied {
    /// [`Proxied::spawn`] with the default [`Setup`], then waits until the
    /// informer synced.
    async fn start(cp: &ControlPlane, ns_prefix: &str, path: ListPath) -> Proxied {
        Proxied::start_with(cp, ns_prefix, path, Setup::default()).await
    }

    /// [`Proxied::spawn`], then waits until the informer synced.
    async fn start_with(
        cp: &ControlPlane,
        ns_prefix: &str,
        path: ListPath,
        setup: Setup,
    ) -> Proxied {
        let p = Proxied::spawn(cp, ns_prefix, path, setup).await;
        synced(&p.informer, Duration::from_secs(30)).await;
        p
    }

    /// Sets up and starts the informer (not waiting for it to sync).
    async fn spawn(cp: &ControlPlane, ns_prefix: &str, path: ListPath, setup: Setup) -> Proxied {
        let ns = cp.create_namespace(ns_prefix).await.expect("namespace");
        prefill(&api(cp, &ns), setup.prefill, setup.pad).await;
        let proxy = if setup.http_mode {
            FaultProxy::start_http(cp.config()).await
        } else {
            FaultProxy::for_url(&cp.server_url()).await
        }
        .expect("proxy");
        proxy.delay(setup.delay);
        let http = HttpFaults::default();
        let mut options = path.options(&ns);
        options.timeouts.watch_idle_timeout = setup.watch_idle;
        if setup.http_mode {
            options.wire_format = kcache_reflector::WireFormat::Json;
        }
        let errors = ErrorCounts::default();
        let informer = SharedIndexInformer::<ConfigMap>::builder(
            http.client(proxy.config(cp.config()).expect("config")),
        )
        .config(kcache_informer::InformerConfig {
            watch: options,
            ..kcache_informer::InformerConfig::default()
        })
        .watch_error_handler(errors.handler())
        .reflector_metrics(Arc::new(errors.clone()))
        .build();
        let rec = Recorder::default();
        informer.add_event_handler(rec.clone()).expect("handler");
        let (cancel, task) = spawn_informer(&informer);
        Proxied {
            ns,
            path,
            proxy,
            http,
            informer,
            rec,
            errors,
            cancel,
            task,
        }
    }

    /// [`converge`]; on a failure, also prints what the proxy, the
    /// informer's requests and its watch-error reports show.
    async fn converge(&self, cp: &ControlPlane, done: &DriverReport) -> Outcome {
        use futures::FutureExt as _;
        let api = api(cp, &self.ns);
        let check = converge(&self.informer, &self.rec, &api, done, CONVERGE);
        match std::panic::AssertUnwindSafe(check).catch_unwind().await {
            Ok(out) => out,
            Err(panic) => {
                eprintln!(
                    "at the failure: proxy {:?}; requests {:?}; watch errors reported {:?}",
                    self.proxy.stats(),
                    self.http.kinds(),
                    self.errors.all()
                );
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// The proxy's counters now; asserts that `counter` shows the fault
    /// bit (`what`: what it means if not).
    fn bitten(&self, counter: fn(&ProxyStats) -> u64, what: &str) -> ProxyStats {
        let stats = self.proxy.stats();
        assert!(
            counter(&stats) >= 1,
            "{what}: the fault was not injected ({stats:?})"
        );
        stats
    }

    /// Reports the scenario's RESULT line ([`report`]), checks the list
    /// path taken and stops the informer.
    async fn finish(self, name: &str, injected: u64, done: &DriverReport, out: &Outcome) {
        report(name, injected, done, out);
        eprintln!(
            "requests: {:?}; watch errors reported: {:?}",
            self.http.kinds(),
            self.errors.all()
        );
        self.path.assert_taken(self.http.kinds());
        stop_informer(self.cancel, self.task).await;
    }
}

/// A direct (unproxied) client's API for ConfigMaps in `ns`.
fn api(cp: &ControlPlane, ns: &str) -> Api<ConfigMap> {
    Api::namespaced(cp.client().expect("client"), ns)
}

/// A [`Driver`] of ConfigMaps `<prefix><n>` in `ns`, on a direct client.
fn churn(cp: &ControlPlane, ns: &str, prefix: &str, seed: u64, ops: u64, pace: Duration) -> Driver {
    Driver::start(cp.client().expect("client"), ns, prefix, seed, ops, pace)
}

/// Keeps a fault on until the proxy's counters show it bit (`bit` on the
/// stats since `before`), at least `min` and at most `max` long. Returns
/// whether it bit.
async fn until_bitten(
    proxy: &FaultProxy,
    before: ProxyStats,
    min: Duration,
    max: Duration,
    bit: impl Fn(&ProxyStats, &ProxyStats) -> bool,
) -> bool {
    tokio::time::sleep(min).await;
    let start = Instant::now();
    loop {
        if bit(&before, &proxy.stats()) {
            return true;
        }
        if start.elapsed() + min >= max {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The faults that run on both list paths, as a table. A row
/// `test, test_paged => scenario(, args)` makes two tests: `test` runs
/// `scenario(ListPath::Streaming, args)`, `test_paged` runs
/// `scenario(ListPath::Paged, args)` (the paged LIST + watch path).
macro_rules! on_both_list_paths {
    ($($(#[doc = $doc:literal])* $test:ident, $paged:ident => $scenario:ident $(, $arg:expr)*;)*) => {$(
        $(#[doc = $doc])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            $scenario(ListPath::Streaming $(, $arg)*).await;
        }

        #[doc = concat!("[`", stringify!($test), "`] on the paged LIST + watch path.")]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $paged() {
            $scenario(ListPath::Paged $(, $arg)*).await;
        }
    )*};
}

on_both_list_paths! {
    /// Fault 1: every connection through the proxy is reset at random
    /// intervals while the driver runs.
    connection_cuts, connection_cuts_paged => connection_cuts_on;
    /// Fault 1, mixed: at random intervals, one of: reset every connection;
    /// stall every connection for 0.5-2 s (then resume: the held bytes
    /// flow); delay every chunk by 100 ms for 1 s; refuse new connections
    /// and reset the open ones for 1 s. Each episode lasts until the
    /// proxy's counters show that it bit (bounded), and every episode must
    /// have bitten.
    network_chaos, network_chaos_paged => network_chaos_on;
    /// Fault 2: the apiserver is restarted (etcd kept) during the
    /// informer's initial list (on the paged path: between its pages), then
    /// again while the driver runs.
    apiserver_restarts, apiserver_restarts_paged => apiserver_restarts_on;
    /// Fault 4: a 429 storm from a client layer (every request answered
    /// 429; the proxy cuts the open watch at the start so the reflector
    /// must send new requests). The reflector must back off: few requests
    /// during the storm, but more than one (it keeps retrying); then it
    /// recovers.
    http_429_storm, http_429_storm_paged => http_storm, 429;
    /// Fault 4: a 500 storm, as [`http_429_storm`].
    http_500_storm, http_500_storm_paged => http_storm, 500;
    /// Fault 5: the watch connection is blackholed (no bytes, no FIN, no
    /// RST) while new connections work. A watch silent for longer than its
    /// idle limit (5 s here) must be abandoned, reported as
    /// `watch_stalled`, and the informer must recover.
    stalled_watch_is_abandoned, stalled_watch_is_abandoned_paged => stalled_watch_on;
    /// Fault 3: while the informer is cut off (the proxy stops listening,
    /// as an apiserver that is down: connections refused), objects are
    /// created and deleted, the apiserver restarts (emptying its watch
    /// cache) and etcd is compacted past the informer's resourceVersion:
    /// the re-watch gets 410 Gone (asserted: counted by the watch-error
    /// handler), the informer relists, and the deletes of the gap arrive
    /// as tombstones.
    compaction_while_disconnected, compaction_while_disconnected_paged => compaction_on;
}

/// The scenario of [`connection_cuts`].
async fn connection_cuts_on(path: ListPath) {
    let mut run = Run::new(path, "connection_cuts");
    let (cuts, ops) = if full() { (15, 600) } else { (4, 200) };
    let cp = ControlPlane::shared().await.expect("control plane");
    let p = Proxied::start(cp, "fault-cuts", path).await;

    let driver = churn(cp, &p.ns, "c", run.seed, ops, Duration::from_millis(20));
    for _ in 0..cuts {
        tokio::time::sleep(Duration::from_millis(run.rng.random_range(300..1500))).await;
        p.proxy.cut_all();
    }
    let done = driver.stop().await;
    let out = p.converge(cp, &done).await;
    let stats = p.bitten(|s| s.cut, "no connection was cut");
    assert!(
        !done.deleted.is_empty() && out.deletes > 0,
        "no delete exercised"
    );
    p.finish(&run.name, stats.cut, &done, &out).await;
}

/// The scenario of [`network_chaos`].
async fn network_chaos_on(path: ListPath) {
    let mut run = Run::new(path, "network_chaos");
    let faults = if full() { 20 } else { 6 };
    let cp = ControlPlane::shared().await.expect("control plane");
    let p = Proxied::start(cp, "fault-chaos", path).await;
    let proxy = &p.proxy;

    // the driver runs until the faults are done: a stall or a delay bites
    // only while events flow
    let driver = churn(cp, &p.ns, "c", run.seed, 100_000, Duration::from_millis(20));
    const KINDS: [&str; 4] = ["cut", "stall", "delay", "refusal"];
    let (mut chosen, mut bitten) = ([0u64; 4], [0u64; 4]);
    // a fault is kept on until it bites: the reflector may be between
    // connections (backoff) when it starts
    let max = Duration::from_secs(5);
    for _ in 0..faults {
        tokio::time::sleep(Duration::from_millis(run.rng.random_range(200..1000))).await;
        let kind = run.rng.random_range(0..4usize);
        chosen[kind] += 1;
        // a fault bites only where a connection is open: the reflector may
        // be in its backoff (which grows with every failure) between two
        let open = until_bitten(proxy, proxy.stats(), Duration::ZERO, CONVERGE, |_, a| {
            a.open >= 1
        })
        .await;
        assert!(
            open,
            "the informer opened no connection within {CONVERGE:?}"
        );
        let before = proxy.stats();
        let bit = match kind {
            0 => {
                // a cut bites only if a connection is open: if none was,
                // wait for the next one and cut again
                let deadline = Instant::now() + max;
                loop {
                    let b = proxy.stats();
                    proxy.cut_all();
                    let short = Duration::from_millis(200);
                    if until_bitten(proxy, b, Duration::ZERO, short, |b, a| a.cut > b.cut).await {
                        break true;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break false;
                    }
                    let b = proxy.stats();
                    until_bitten(proxy, b, Duration::ZERO, left, |b, a| {
                        a.accepted > b.accepted
                    })
                    .await;
                }
            }
            1 => {
                proxy.stall(true);
                let min = Duration::from_millis(run.rng.random_range(500..2000));
                let bit = until_bitten(proxy, before, min, max, |b, a| {
                    a.held_stalled > b.held_stalled
                })
                .await;
                proxy.stall(false);
                bit
            }
            2 => {
                proxy.delay(Duration::from_millis(100));
                let bit = until_bitten(proxy, before, Duration::from_secs(1), max, |b, a| {
                    a.delayed > b.delayed
                })
                .await;
                proxy.delay(Duration::ZERO);
                bit
            }
            _ => {
                proxy.refuse(true);
                proxy.cut_all();
                let bit = until_bitten(proxy, before, Duration::from_secs(1), max, |b, a| {
                    a.refused > b.refused || a.cut > b.cut
                })
                .await;
                proxy.refuse(false);
                bit
            }
        };
        bitten[kind] += u64::from(bit);
    }
    let summary: Vec<String> = (0..4)
        .map(|k| format!("{} {}/{}", KINDS[k], bitten[k], chosen[k]))
        .collect();
    eprintln!(
        "{}: faults that bit / injected: {}; proxy {:?}",
        run.name,
        summary.join(", "),
        proxy.stats()
    );
    assert_eq!(
        bitten, chosen,
        "every fault must bite (measured by the proxy): {summary:?}"
    );
    let done = driver.stop().await;
    let out = p.converge(cp, &done).await;
    assert!(out.deletes > 0, "no delete exercised");
    p.finish(&run.name, bitten.iter().sum(), &done, &out).await;
}

/// Restarts the apiserver; returns 1 if a new apiserver process runs.
async fn restart(cp: &ControlPlane) -> u64 {
    let before = cp.pids().1;
    cp.restart_apiserver().await.expect("restart");
    let after = cp.pids().1;
    u64::from(after.is_some() && after != before)
}

/// The scenario of [`apiserver_restarts`].
async fn apiserver_restarts_on(path: ListPath) {
    let mut run = Run::new(path, "apiserver_restarts");
    let (restarts, ops) = if full() { (4, 600) } else { (2, 200) };
    let cp = ControlPlane::start().await.expect("control plane");
    // slow every chunk down so the initial list is still in flight
    let setup = Setup {
        prefill: 150,
        pad: 512,
        delay: Duration::from_millis(150),
        ..Setup::default()
    };
    let p = Proxied::spawn(&cp, "fault-restart", path, setup).await;
    eventually("the informer connected", Duration::from_secs(10), || {
        p.proxy.stats().accepted >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !p.informer.has_synced(),
        "the initial list finished before the restart: the fault missed its window"
    );
    let mut restarted = restart(&cp).await;
    p.proxy.delay(Duration::ZERO);
    synced(&p.informer, Duration::from_secs(60)).await;

    let driver = churn(&cp, &p.ns, "c", run.seed, ops, Duration::from_millis(20));
    for _ in 0..restarts {
        tokio::time::sleep(Duration::from_millis(run.rng.random_range(500..2000))).await;
        restarted += restart(&cp).await;
    }
    let done = driver.finish().await;
    let out = p.converge(&cp, &done).await;
    assert!(out.deletes > 0, "no delete exercised");
    assert_eq!(
        restarted,
        1 + restarts,
        "every restart must start a new apiserver process"
    );
    p.finish(&run.name, restarted, &done, &out).await;
}

/// The scenario of [`http_429_storm`] and [`http_500_storm`].
async fn http_storm(path: ListPath, status: u16) {
    let run = Run::new(path, &format!("http_{status}_storm"));
    let storm = if full() {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(6)
    };
    let cp = ControlPlane::shared().await.expect("control plane");
    let p = Proxied::start(cp, "fault-storm", path).await;
    let faults = &p.http;

    let driver = churn(cp, &p.ns, "c", run.seed, 10_000, Duration::from_millis(30));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = faults.requests();
    faults.storm(status);
    p.proxy.cut_all();
    tokio::time::sleep(storm).await;
    faults.calm();
    let during = faults.requests() - before;
    let injected = faults.injected();
    eprintln!("storm {status}: {during} requests in {storm:?} ({injected} answered {status})");
    // a fresh backoff (0.8 s doubling, up to 100 % jitter) allows at least
    // 2 attempts within 4.8 s and a handful in S seconds; a hot loop makes
    // hundreds
    let bound = 2 + storm.as_secs() * 2;
    assert!(
        injected >= 2,
        "{status} storm: {injected} requests answered {status} in {storm:?}: \
         the reflector stopped retrying"
    );
    assert!(
        during <= bound,
        "{status} storm: {during} requests in {storm:?} (bound {bound}): no backoff (hot loop)"
    );
    let done = driver.stop().await;
    let out = p.converge(cp, &done).await;
    p.finish(&run.name, injected, &done, &out).await;
}

/// The scenario of [`stalled_watch_is_abandoned`].
async fn stalled_watch_on(path: ListPath) {
    let run = Run::new(path, "stalled_watch_is_abandoned");
    let cp = ControlPlane::shared().await.expect("control plane");
    // The reflector abandons a watch silent for longer than its idle limit
    // (default: the server-side timeout + 30 s, i.e. 5.5-10.5 min); a short
    // limit keeps the test quick.
    let setup = Setup {
        watch_idle: Some(Duration::from_secs(5)),
        ..Setup::default()
    };
    let p = Proxied::start_with(cp, "fault-stall", path, setup).await;
    let accepted = p.proxy.stats().accepted;
    p.proxy.blackhole_open();
    let done = churn(cp, &p.ns, "c", run.seed, 100, Duration::from_millis(10))
        .finish()
        .await;
    let out = p.converge(cp, &done).await;
    let stats = p.bitten(|s| s.held_blackholed, "the blackhole held nothing");
    assert!(
        stats.accepted > accepted,
        "no new connection after the blackhole"
    );
    let stalls = p.errors.get("watch_stalled");
    assert!(
        stalls >= 1,
        "the stall was never detected (no watch_stalled report): {:?}",
        p.errors.all()
    );
    eprintln!("{}: stalls detected {stalls}", run.name);
    p.finish(&run.name, stats.held_blackholed, &done, &out)
        .await;
}

/// The scenario of [`compaction_while_disconnected`].
async fn compaction_on(path: ListPath) {
    let run = Run::new(path, "compaction_while_disconnected");
    let ops = if full() { 400 } else { 150 };
    let cp = ControlPlane::start().await.expect("control plane");
    let p = Proxied::start(&cp, "fault-compact", path).await;
    let api = api(&cp, &p.ns);

    // phase 1: connected churn, so the informer knows some keys
    let before = churn(&cp, &p.ns, "before", run.seed, ops / 2, Duration::ZERO)
        .finish()
        .await;
    converge(&p.informer, &p.rec, &api, &before, CONVERGE).await;
    // a watch must be open when the gap begins: a watch request still
    // waiting for its response when the proxy resets its connection fails
    // with a reset, not a refusal, and the reflector then relists (client-go's
    // rule) instead of watching again from its resourceVersion. A marker
    // object delivered by a watch event shows the watch open (it is deleted
    // in the gap like every known key).
    let events_before = p.errors.watch_events();
    api.create(
        &PostParams::default(),
        &config_map("marker-before-gap").data("v", "0").build(),
    )
    .await
    .expect("create the marker");
    let marker = format!("{}/marker-before-gap", p.ns);
    eventually("a watch event delivered the marker", CONVERGE, || {
        p.informer.indexer().get_by_key(&marker).is_some()
            && p.errors.watch_events() > events_before
    })
    .await;
    let known: BTreeSet<String> = p
        .informer
        .indexer()
        .list()
        .iter()
        .map(|o| o.key().to_string())
        .collect();

    // phase 2: disconnected (connections refused: the reflector backs off
    // and watches again from its resourceVersion, without a relist); delete
    // the known keys, create new ones
    p.proxy.unlisten(true);
    // cut only once nothing can connect: a re-watch that slipped in before
    // would watch through the gap
    eventually(
        "the proxy stopped listening",
        Duration::from_secs(5),
        || p.proxy.stats().unlistened,
    )
    .await;
    p.proxy.cut_all();
    let mut gap_deleted = BTreeSet::new();
    for key in &known {
        let name = key.rsplit('/').next().unwrap_or_default();
        if api
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .is_ok()
        {
            gap_deleted.insert(key.clone());
        }
    }
    let during = churn(
        &cp,
        &p.ns,
        "gap",
        run.seed ^ 0x5eed,
        ops / 2,
        Duration::ZERO,
    )
    .finish()
    .await;
    // counted by the reflector's error metric: a 410 on the watch reaches
    // the watch-error handler too, but a list at the old resourceVersion
    // refused with 410 (the reflector relists when the watch broke in
    // flight rather than being refused) is retried at once from the newest
    // state, as in client-go, and reaches no handler
    let expired_before = p.errors.metric("expired");
    cp.restart_apiserver().await.expect("restart");
    let compacted = cp.compact_etcd().await.expect("compact");
    eprintln!("compacted etcd at revision {compacted}");
    p.proxy.unlisten(false);

    let mut done = during;
    done.deleted.extend(gap_deleted.iter().cloned());
    done.ok += before.ok;
    done.deleted.extend(before.deleted.iter().cloned());
    let out = p.converge(&cp, &done).await;
    // the 410 really happened: the informer's resourceVersion was compacted
    let gone = p.errors.metric("expired") - expired_before;
    assert!(
        gone >= 1,
        "no 410 Gone after the compaction: the fault did not bite (watch errors reported {:?})",
        p.errors.all()
    );
    // the gap's deletes were never seen as events: only a relist can
    // deliver them, as tombstones
    let events = p.rec.all();
    for key in &gap_deleted {
        let last = events.iter().rev().find(|e| &e.key == key);
        assert!(
            last.is_some_and(|e| e.kind == "delete" && e.tombstone),
            "{key} was deleted during the gap; expected a tombstone, got {last:?}"
        );
    }
    assert!(!gap_deleted.is_empty(), "no delete during the gap");
    eprintln!("{}: 410 Gone answers {gone}", run.name);
    p.finish(&run.name, gone, &done, &out).await;
}

/// A watch event line (newline-terminated).
fn frame(v: serde_json::Value) -> Vec<u8> {
    let mut b = serde_json::to_vec(&v).expect("json");
    b.push(b'\n');
    b
}

/// Fault 6: malformed frames and objects injected into the live watch
/// stream (the proxy in HTTP mode writes them between two real events):
/// lines that are not JSON, truncated JSON, a JSON value that is not an
/// event, an unknown event type, an object without metadata, an object
/// without a name, objects of another kind (a Secret, a Pod) in the
/// watched namespace, and one event larger than the reflector's limit
/// (128 MiB). Each must be reported to
/// the watch-error handler and skipped (the huge one ends the watch: the
/// reflector re-lists); the informer keeps going and nothing else is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_watch_frames() {
    let mut run = Run::new(ListPath::Streaming, "malformed_watch_frames");
    let (rounds, ops) = if full() { (6, 600) } else { (2, 200) };
    let cp = ControlPlane::shared().await.expect("control plane");
    let setup = Setup {
        prefill: 0,
        http_mode: true,
        ..Setup::default()
    };
    let p = Proxied::start_with(cp, "fault-malformed", ListPath::Streaming, setup).await;
    let (ns, proxy, errors) = (&p.ns, &p.proxy, &p.errors);

    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let meta =
        |name: &str| serde_json::json!({ "name": name, "namespace": ns, "resourceVersion": "1" });
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("not json", b"this is not json\n".to_vec()),
        (
            "truncated",
            br#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"na"#
                .iter()
                .copied()
                .chain([b'\n'])
                .collect(),
        ),
        ("not an event", b"[1,2,3]\n".to_vec()),
        (
            "unknown type",
            frame(
                serde_json::json!({ "type": "EXPLODED", "object": { "kind": "ConfigMap", "apiVersion": "v1", "metadata": meta("bad-type") } }),
            ),
        ),
        ("no object", frame(serde_json::json!({ "type": "ADDED" }))),
        (
            "no metadata",
            frame(
                serde_json::json!({ "type": "ADDED", "object": { "kind": "ConfigMap", "apiVersion": "v1", "data": { "a": "b" } } }),
            ),
        ),
        (
            "no name",
            frame(
                serde_json::json!({ "type": "MODIFIED", "object": { "kind": "ConfigMap", "apiVersion": "v1", "metadata": { "namespace": ns, "resourceVersion": "5" } } }),
            ),
        ),
        (
            "wrong kind (Secret)",
            frame(
                serde_json::json!({ "type": "ADDED", "object": { "kind": "Secret", "apiVersion": "v1", "metadata": meta("intruder-secret") } }),
            ),
        ),
        (
            "wrong kind (Pod)",
            frame(
                serde_json::json!({ "type": "ADDED", "object": { "kind": "Pod", "apiVersion": "v1", "metadata": meta("intruder-pod") } }),
            ),
        ),
        (
            "wrong apiVersion",
            frame(
                serde_json::json!({ "type": "ADDED", "object": { "kind": "ConfigMap", "apiVersion": "v9", "metadata": meta("intruder-v9") } }),
            ),
        ),
    ];

    let driver = churn(cp, ns, "c", run.seed, ops, Duration::from_millis(20));
    let mut injected = 0u64;
    for _ in 0..rounds {
        // a seeded order, one at a time, between the driver's events
        let mut order: Vec<usize> = (0..bad.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, run.rng.random_range(0..=i));
        }
        for i in order {
            tokio::time::sleep(Duration::from_millis(run.rng.random_range(20..200))).await;
            assert!(proxy.inject_watch(&path, bad[i].1.clone()));
            injected += 1;
        }
    }
    eventually(
        "every injection was written into a watch",
        Duration::from_secs(60),
        || proxy.stats().injected >= injected,
    )
    .await;
    eventually(
        "every injection was reported",
        Duration::from_secs(30),
        || errors.get("bad_event") >= injected,
    )
    .await;
    {
        // one event over the reflector's max_event_size: the framer gives
        // up, the watch ends and the reflector lists again
        let limit = kcache_reflector::DEFAULT_MAX_FRAME;
        let mut big = Vec::with_capacity(limit + 4096);
        big.extend_from_slice(
            format!(
                r#"{{"type":"ADDED","object":{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"huge","namespace":"{ns}","resourceVersion":"1"}},"data":{{"x":""#
            )
            .as_bytes(),
        );
        big.resize(limit + 1024, b'x');
        big.extend_from_slice(b"\"}}}\n");
        let before = proxy.stats().injected;
        let started = std::time::Instant::now();
        assert!(proxy.inject_watch(&path, big));
        injected += 1;
        eventually(
            "the huge event was written",
            Duration::from_secs(60),
            || proxy.stats().injected > before,
        )
        .await;
        eventually(
            "the huge event was reported",
            Duration::from_secs(60),
            || errors.get("event_too_large") >= 1,
        )
        .await;
        eprintln!(
            "huge event ({} MiB) reported after {:.1}s",
            (limit + 1024) >> 20,
            started.elapsed().as_secs_f64()
        );
    }
    let done = driver.stop().await;
    let out = p.converge(cp, &done).await;
    // measured by the proxy: what was really written into the watches
    let written = proxy.stats().injected;
    assert_eq!(written, injected, "every injection was written once");
    assert_eq!(
        errors.get("bad_event"),
        written - 1,
        "every malformed line reported exactly once: {:?}",
        errors.all()
    );
    for name in [
        "intruder-secret",
        "intruder-pod",
        "intruder-v9",
        "bad-type",
        "huge",
    ] {
        let key = format!("{ns}/{name}");
        assert!(
            p.rec.all().iter().all(|e| e.key != key),
            "the handler was notified about the injected {key}"
        );
    }
    p.finish(&run.name, written, &done, &out).await;
}

/// A handler that records every notification, then panics on some (chosen
/// by the seed and the resourceVersion).
struct Panicky {
    rec: Recorder,
    seed: u64,
    panics: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Panicky {
    fn maybe_panic(&self, rv: u64) {
        if (rv ^ self.seed).is_multiple_of(4) {
            self.panics
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            panic!("injected handler panic at rv {rv}");
        }
    }
}

fn rv(o: &kcache_core::CachedObject<ConfigMap>) -> u64 {
    o.resource_version()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

impl kcache_informer::ResourceEventHandler<ConfigMap> for Panicky {
    fn on_add(&self, o: &kcache_core::CachedObject<ConfigMap>, initial: bool) {
        self.rec.on_add(o, initial);
        self.maybe_panic(rv(o));
    }
    fn on_update(
        &self,
        old: &kcache_core::CachedObject<ConfigMap>,
        o: &kcache_core::CachedObject<ConfigMap>,
    ) {
        self.rec.on_update(old, o);
        self.maybe_panic(rv(o));
    }
    fn on_delete(&self, o: &kcache_core::ObjectOrTombstone<ConfigMap>) {
        self.rec.on_delete(o);
        self.maybe_panic(rv(o.object()));
    }
}

/// A handler that records every notification and blocks for `block` on
/// every `every`-th one (the first included).
struct Blocking {
    rec: Recorder,
    block: Duration,
    every: u64,
    calls: std::sync::atomic::AtomicU64,
    /// Blocking calls made (counted when they end).
    blocks: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Blocking {
    fn maybe_block(&self) {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n.is_multiple_of(self.every) {
            std::thread::sleep(self.block);
            self.blocks
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

impl kcache_informer::ResourceEventHandler<ConfigMap> for Blocking {
    fn on_add(&self, o: &kcache_core::CachedObject<ConfigMap>, initial: bool) {
        self.rec.on_add(o, initial);
        self.maybe_block();
    }
    fn on_update(
        &self,
        old: &kcache_core::CachedObject<ConfigMap>,
        o: &kcache_core::CachedObject<ConfigMap>,
    ) {
        self.rec.on_update(old, o);
        self.maybe_block();
    }
    fn on_delete(&self, o: &kcache_core::ObjectOrTombstone<ConfigMap>) {
        self.rec.on_delete(o);
        self.maybe_block();
    }
}

/// Fault 7: on one informer under churn, a handler that panics on about a
/// quarter of its events and a handler that blocks for seconds, beside a
/// plain one. The cache and the plain handler keep pace (converged while
/// the blocked handler still has a backlog); every panic is caught and
/// counted, and the panicking handler keeps receiving later events (its
/// view, notifications recorded before each panic, equals the LIST); the
/// blocked handler catches up and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_panics_and_blocks() {
    let seed = seed("handler_panics_and_blocks");
    let (ops, block, every) = if full() {
        (600, Duration::from_secs(3), 150)
    } else {
        (200, Duration::from_secs(2), 60)
    };
    // the injected panics are expected: keep their messages and backtraces
    // out of the output (other panics still go to the default hook)
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let injected = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.starts_with("injected handler panic"));
        if !injected {
            default_hook(info);
        }
    }));
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp
        .create_namespace("fault-handlers")
        .await
        .expect("namespace");
    let informer = SharedIndexInformer::<ConfigMap>::builder(cp.client().expect("client"))
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let rec = Recorder::default();
    let panicky = Panicky {
        rec: Recorder::default(),
        seed,
        panics: Default::default(),
    };
    let (panicky_rec, panicky_count) = (panicky.rec.clone(), panicky.panics.clone());
    let blocking = Blocking {
        rec: Recorder::default(),
        block,
        every,
        calls: Default::default(),
        blocks: Default::default(),
    };
    let (blocking_rec, blocks) = (blocking.rec.clone(), blocking.blocks.clone());
    let panicky_reg = informer.add_event_handler(panicky).expect("handler");
    let blocking_reg = informer.add_event_handler(blocking).expect("handler");
    informer.add_event_handler(rec.clone()).expect("handler");
    let (cancel, task) = spawn_informer(&informer);
    synced(&informer, Duration::from_secs(30)).await;

    let done = churn(cp, &ns, "c", seed, ops, Duration::from_millis(10))
        .finish()
        .await;
    let api = api(cp, &ns);
    let out = converge(&informer, &rec, &api, &done, CONVERGE).await;
    let blocked_backlog = blocking_reg.backlog();
    let blocked_seen = blocking_rec.all().len();
    eprintln!(
        "handler_panics_and_blocks: cache and plain handler converged {:.1}s after the driver \
         stopped; the blocking handler had seen {blocked_seen} of {} events, backlog {blocked_backlog}",
        out.converged_in.as_secs_f64(),
        out.events
    );
    assert!(
        blocked_seen < out.events,
        "the blocking handler was not behind: the fault did not bite"
    );
    let want = server_state(&api).await;
    view_converges("panicking handler", &want, Duration::from_secs(30), || {
        panicky_rec.all()
    })
    .await;
    let panics = panicky_count.load(std::sync::atomic::Ordering::SeqCst);
    assert!(panics > 0, "the handler never panicked");
    assert_eq!(
        panicky_reg.panics(),
        panics,
        "every panic is counted on the registration"
    );
    // later events after the first panic reached it
    assert!(panicky_rec.all().len() as u64 > panics);
    let drain = block * (1 + out.events as u32 / every as u32) + Duration::from_secs(30);
    let caught_up = view_converges("blocking handler", &want, drain, || blocking_rec.all()).await;
    eprintln!(
        "handler_panics_and_blocks: {panics} panics caught, the blocking handler caught up \
         {:.1}s later",
        caught_up.as_secs_f64()
    );
    assert_eq!(blocking_reg.backlog(), 0);
    let blocks = blocks.load(std::sync::atomic::Ordering::SeqCst);
    eprintln!("handler_panics_and_blocks: {panics} panics, {blocks} blocking calls");
    report("handler_panics_and_blocks", panics + blocks, &done, &out);
    stop_informer(cancel, task).await;
}
