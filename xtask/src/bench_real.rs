//! `cargo xtask bench-compare --real [--quick]`: the real kube-apiserver as
//! the benchmark's reference (issue 16).
//!
//! Starts the local control plane (kcache-envtest, with an audit log of
//! every Pod LIST and WATCH), loads N Pods through the API with `real-load`
//! (created by one field manager, status written by another), then runs
//! each client alternately, each in its own process:
//!
//! - sync by paged list and by streaming list: wall time until the handler
//!   has seen every Pod, the client's CPU and bytes read (its own
//!   `/proc/self/stat` and `/proc/self/io`), the kube-apiserver's and etcd's
//!   CPU over the same window (their `/proc/<pid>/stat`, less their idle
//!   rate measured before), peak and steady RSS;
//! - an update load: M status patches at R per second through the
//!   apiserver while the client watches; the lag from each update's
//!   response to the client's handler seeing it, and the client's CPU per
//!   update.
//!
//! - steady memory (issue 20): one more paged sync per client, after
//!   which kcache waits for background compression (its quiet time x 1.25
//!   and one round) before the steady sample; RSS per Pod for every client
//!   and, for kcache, the heap per Pod by its allocator's count.
//!
//! kcache also runs with background compression off, in the sync table and
//! the memory table, as the reference for what compression costs and saves.
//! What each client requested is read back from the audit log. Prints the
//! tables (medians), writes `real.md` and `real.json` under
//! `target/bench-compare/`, and with `--write-docs` the tables into
//! `docs/performance.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bench_common::{Bins, loadavg, machine, median};
use crate::run::workspace_root;

/// Settings of one `--real` run.
#[derive(Debug, Clone, Serialize)]
pub struct RealSettings {
    /// Pods loaded into the apiserver.
    pub pods: usize,
    /// Runs of each client in each sync mode.
    pub reps: usize,
    /// Status updates of the update load.
    pub updates: usize,
    /// Their rate, per second.
    pub update_rate: f64,
    /// Runs of each client under the update load.
    pub update_reps: usize,
    /// Runs of each client in the steady-memory step.
    pub mem_reps: usize,
    /// Pairs of kcache syncs with background compression on and off, per
    /// mode, run back to back after the sync table's runs (the on / off
    /// table).
    pub onoff_pairs: usize,
    /// `--quick`.
    pub quick: bool,
    /// Milliseconds a client waits after its last phase before reading its
    /// steady RSS.
    pub settle_ms: u64,
    /// Clock ticks per second of `/proc/<pid>/stat`.
    pub clk_tck: f64,
}

/// The clients of the reference table, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RealClient {
    /// kcache asking for protobuf (`--wire-format auto`).
    KcacheProtobuf,
    /// kcache with JSON forced (`--wire-format json`).
    KcacheJson,
    /// The same, built from an earlier commit (`--json-baseline REV`, see
    /// [`crate::json_ab`]): [`Bins::kcache_baseline`].
    KcacheJsonBaseline,
    /// kcache asking for protobuf, background compression off (the
    /// reference for what compression costs and saves).
    KcacheProtobufBgOff,
    /// client-go's generated clientset and shared informer factory, default
    /// configuration (protobuf preferred).
    ClientGo,
    /// kube-runtime 5's watcher feeding a reflector store (JSON).
    KubeRuntime,
    /// Custom-resource mode ([`crate::bench_real_cr`]): kcache on
    /// `DynamicObject`, JSON forced.
    KcacheCrJson,
    /// kcache on `DynamicObject`, `--wire-format auto` (CBOR, JSON as
    /// fallback).
    KcacheCrCbor,
    /// client-go's dynamic informer, its default (JSON).
    ClientGoCrJson,
    /// client-go's dynamic informer with `ClientsAllowCBOR` and
    /// `ClientsPreferCBOR`.
    ClientGoCrCbor,
    /// kube-runtime's watcher and store on `DynamicObject` (JSON).
    KubeRuntimeCr,
}

/// The clients of the update load, in the order of the table and of the
/// runs.
pub const REAL_CLIENTS: [RealClient; 4] = [
    RealClient::KcacheProtobuf,
    RealClient::KcacheJson,
    RealClient::ClientGo,
    RealClient::KubeRuntime,
];

/// The clients of the sync and memory steps: [`REAL_CLIENTS`] and kcache
/// with background compression off.
pub const SYNC_CLIENTS: [RealClient; 5] = [
    RealClient::KcacheProtobuf,
    RealClient::KcacheProtobufBgOff,
    RealClient::KcacheJson,
    RealClient::ClientGo,
    RealClient::KubeRuntime,
];

/// What one client run does after its sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Load {
    /// Nothing: stop, settle, sample.
    Sync,
    /// The update load, then stop.
    Updates,
    /// kcache waits for background compression, then settle and sample.
    Memory,
}

impl RealClient {
    /// The row label.
    pub fn label(self) -> &'static str {
        match self {
            RealClient::KcacheProtobuf => "kcache (protobuf)",
            RealClient::KcacheJson => "kcache (JSON forced)",
            RealClient::KcacheJsonBaseline => "kcache (JSON forced), baseline build",
            RealClient::KcacheProtobufBgOff => "kcache (protobuf, background compression off)",
            RealClient::ClientGo => "client-go 0.37 (default: protobuf)",
            RealClient::KubeRuntime => "kube-runtime 5 (JSON)",
            RealClient::KcacheCrJson => "kcache DynamicObject (JSON forced)",
            RealClient::KcacheCrCbor => "kcache DynamicObject (CBOR)",
            RealClient::ClientGoCrJson => "client-go 0.37 dynamic informer (JSON)",
            RealClient::ClientGoCrCbor => "client-go 0.37 dynamic informer (ClientsPreferCBOR)",
            RealClient::KubeRuntimeCr => "kube-runtime 5 DynamicObject (JSON)",
        }
    }

    /// Whether this is one of kcache's clients (it has `--wait-compressed`).
    pub fn is_kcache(self) -> bool {
        matches!(
            self,
            RealClient::KcacheProtobuf
                | RealClient::KcacheJson
                | RealClient::KcacheJsonBaseline
                | RealClient::KcacheProtobufBgOff
                | RealClient::KcacheCrJson
                | RealClient::KcacheCrCbor
        )
    }

    /// Whether this is the Go client (its flags take one dash).
    fn is_client_go(self) -> bool {
        matches!(
            self,
            RealClient::ClientGo | RealClient::ClientGoCrJson | RealClient::ClientGoCrCbor
        )
    }

    fn command(self, bins: &Bins, mode: Mode) -> Command {
        let mut cmd = match self {
            RealClient::KcacheProtobuf
            | RealClient::KcacheJson
            | RealClient::KcacheJsonBaseline
            | RealClient::KcacheProtobufBgOff
            | RealClient::KcacheCrJson
            | RealClient::KcacheCrCbor => {
                let mut c = Command::new(if self == RealClient::KcacheJsonBaseline {
                    // no silent fallback to this build: without a baseline
                    // the run fails on a missing file
                    bins.kcache_baseline
                        .clone()
                        .unwrap_or_else(|| bins.release.join("kcache-client-baseline-not-built"))
                } else {
                    bins.release.join("kcache-client")
                });
                let wf = if matches!(
                    self,
                    RealClient::KcacheJson
                        | RealClient::KcacheJsonBaseline
                        | RealClient::KcacheCrJson
                ) {
                    "json"
                } else {
                    "auto"
                };
                c.args(["--scenario", "sync", "--wire-format", wf]);
                c.args(["--mode", mode.name()]);
                if self == RealClient::KcacheProtobufBgOff {
                    c.args(["--background-compression", "off"]);
                }
                if self.is_custom_resource() {
                    c.args(["--resource", "applications"]);
                }
                c
            }
            RealClient::KubeRuntime | RealClient::KubeRuntimeCr => {
                let mut c = Command::new(bins.release.join("kube-runtime-client"));
                c.args(["--scenario", "sync", "--mode", mode.name()]);
                if self.is_custom_resource() {
                    c.args(["--resource", "applications"]);
                }
                c
            }
            RealClient::ClientGo | RealClient::ClientGoCrJson | RealClient::ClientGoCrCbor => {
                let mut c = Command::new(&bins.client_go);
                c.arg("-scenario=sync");
                c.arg(match self {
                    RealClient::ClientGoCrJson => "-content-type=json",
                    RealClient::ClientGoCrCbor => "-content-type=cbor",
                    _ => "-content-type=protobuf",
                });
                if self.is_custom_resource() {
                    c.arg("-resource=applications");
                }
                c.arg(format!("-mode={}", mode.name()));
                c.env(
                    "KUBE_FEATURE_WatchListClient",
                    if mode == Mode::Streaming {
                        "true"
                    } else {
                        "false"
                    },
                );
                c
            }
        };
        cmd.env_remove("RUST_LOG");
        cmd
    }

    /// Whether it syncs the custom resource.
    fn is_custom_resource(self) -> bool {
        matches!(
            self,
            RealClient::KcacheCrJson
                | RealClient::KcacheCrCbor
                | RealClient::ClientGoCrJson
                | RealClient::ClientGoCrCbor
                | RealClient::KubeRuntimeCr
        )
    }

    fn flag(self, name: &str, value: &str) -> String {
        let dash = if self.is_client_go() { "-" } else { "--" };
        format!("{dash}{name}={value}")
    }
}

/// How the client does its initial sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// LIST (each client's own paging and resourceVersion) then WATCH.
    Paged,
    /// A WATCH with `sendInitialEvents=true`.
    Streaming,
}

impl Mode {
    /// `paged` or `streaming`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Paged => "paged",
            Mode::Streaming => "streaming",
        }
    }
}

/// One protocol line of a client (`kcache_bench_compare::real::Phase`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Phase {
    /// `synced`, `updated` or `done`.
    pub phase: String,
    /// The client's own name.
    #[serde(default)]
    pub client: String,
    /// Adds (synced) or updates (updated, done) seen.
    #[serde(default)]
    pub objects: u64,
    /// Seconds since the informer started.
    #[serde(default)]
    pub secs: f64,
    /// The client's CPU since the informer started, microseconds.
    #[serde(default)]
    pub cpu_us: u64,
    /// VmHWM, KiB.
    #[serde(default)]
    pub peak_rss_kb: u64,
    /// VmRSS, KiB.
    #[serde(default)]
    pub rss_kb: u64,
    /// VmRSS before the informer started, KiB.
    #[serde(default)]
    pub baseline_rss_kb: u64,
    /// rchar since the informer started.
    #[serde(default)]
    pub read_bytes: u64,
    /// Objects in the cache.
    #[serde(default)]
    pub cached: u64,
    /// kcache: heap bytes live now (its counting allocator).
    #[serde(default)]
    pub heap_live_bytes: u64,
    /// kcache: heap bytes live before the informer started.
    #[serde(default)]
    pub baseline_heap_bytes: u64,
    /// kcache: seconds waited for background compression before `done`.
    #[serde(default)]
    pub waited_secs: f64,
    /// client-go: its requests with Accept and the response Content-Type.
    #[serde(default)]
    pub requests: Vec<String>,
}

/// One client run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SyncRun {
    /// Which client.
    pub client: RealClient,
    /// How it synced.
    pub mode: Mode,
    /// The `synced` line.
    pub synced: Phase,
    /// The `updated` line (update load only).
    pub updated: Option<Phase>,
    /// The `done` line (steady RSS).
    pub done: Phase,
    /// kube-apiserver CPU from the client's start to its `synced` line,
    /// less the idle rate over that window, seconds.
    pub apiserver_cpu_secs: f64,
    /// The same for etcd.
    pub etcd_cpu_secs: f64,
    /// Bytes the client's TCP sockets had received at its `synced` line
    /// (`bytes_received` of `ss -tnpi`: TLS records of the responses).
    pub rx_bytes: Option<u64>,
    /// The requests the apiserver's audit log recorded during the run.
    pub audit: Vec<String>,
    /// Update load: lags in microseconds, one per update matched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lags_us: Vec<i64>,
    /// Update load: updates the driver made.
    #[serde(default)]
    pub updates_sent: usize,
}

/// Everything a `--real` run measured.
#[derive(Debug, Default, Serialize)]
pub struct RealResults {
    /// The settings.
    pub settings: Option<RealSettings>,
    /// Machine, versions, load averages.
    pub machine: Vec<(String, String)>,
    /// What `real-load create` printed.
    pub load: Value,
    /// kube-apiserver and etcd CPU at rest, fraction of a core.
    pub idle: (f64, f64),
    /// Sync runs, both modes.
    pub syncs: Vec<SyncRun>,
    /// The on / off pairs (kcache protobuf, background compression on and
    /// off), both modes.
    pub onoff: Vec<SyncRun>,
    /// Update-load runs.
    pub updates: Vec<SyncRun>,
    /// Steady-memory runs (paged sync; kcache waits for background
    /// compression).
    pub memory: Vec<SyncRun>,
    /// Seconds of the whole run (load included).
    pub total_secs: f64,
}

/// Runs `--real`.
pub fn run(bins: &Bins, s: RealSettings, out: &Path, write_docs: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let log = out.join("real-clients.log");
    let _ = std::fs::remove_file(&log);
    let mut res = RealResults {
        machine: machine(),
        ..RealResults::default()
    };
    let audit_log = out.join("real-audit.log");
    let _ = std::fs::remove_file(&audit_log);
    eprintln!(
        "\n==> bench-compare --real: N={} Pods, {} runs per client and mode, update load {} at {}/s; clients' stderr in {}",
        s.pods,
        s.reps,
        s.updates,
        s.update_rate,
        log.display()
    );
    let plane = start_plane(bins, &s, out, &audit_log, false, &mut res)?;

    let total = 2 * s.reps * SYNC_CLIENTS.len()
        + 2 * 2 * s.onoff_pairs
        + s.update_reps * REAL_CLIENTS.len()
        + s.mem_reps * SYNC_CLIENTS.len();
    let mut done = 0usize;
    let t0 = Instant::now();
    let ctx = plane.ctx(bins, &log, &audit_log, &s, out);
    // One counted sync, logged as `[done/total] secs  {what}  client  #n`.
    let run_logged = |c: RealClient,
                      mode: Mode,
                      what: &str,
                      n: usize,
                      done: &mut usize|
     -> anyhow::Result<SyncRun> {
        *done += 1;
        let r = ctx.run_one(c, mode, Load::Sync)?;
        eprintln!(
            "[{:>2}/{total}] {:>4.0}s  {what:<9} {:<36} #{n}: {}",
            *done,
            t0.elapsed().as_secs_f64(),
            c.label(),
            summary(&r, s.pods)
        );
        Ok(r)
    };
    for mode in [Mode::Paged, Mode::Streaming] {
        // The first sync after the Pods were loaded (or after the paged
        // runs) is the slowest whoever runs it (48-50 against 25-35 µs of
        // client CPU per object): a warm-up, not counted.
        let r = ctx.run_one(RealClient::KcacheProtobuf, mode, Load::Sync)?;
        eprintln!(
            "[warm-up] {:>4.0}s  {:<9} {:<36} (not counted): {}",
            t0.elapsed().as_secs_f64(),
            mode.name(),
            RealClient::KcacheProtobuf.label(),
            summary(&r, s.pods)
        );
        for rep in 0..s.reps {
            // kcache with background compression on and off run one right
            // after the other, in alternating order (ABBA): the on / off
            // ratios are of these pairs
            let mut order = SYNC_CLIENTS;
            if rep % 2 == 1 {
                order.swap(0, 1);
            }
            for c in order {
                res.syncs
                    .push(run_logged(c, mode, mode.name(), rep + 1, &mut done)?);
            }
        }
    }
    // Background compression on / off: pairs run back to back, in
    // alternating order (ABBA), after a pause. Within the sync table's
    // rounds a pair comes right after kube-runtime's run, whose 2 GB of
    // JSON keep the apiserver busy for seconds: client CPU per object then
    // ranged 25-57 µs within one mode, and 5 pairs could not resolve 5%.
    for mode in [Mode::Paged, Mode::Streaming] {
        if s.onoff_pairs == 0 {
            break;
        }
        std::thread::sleep(Duration::from_secs(if s.quick { 3 } else { 10 }));
        for pair in 0..s.onoff_pairs {
            let mut order = [RealClient::KcacheProtobuf, RealClient::KcacheProtobufBgOff];
            if pair % 2 == 1 {
                order.swap(0, 1);
            }
            for c in order {
                let what = format!("on/off {}", mode.name());
                res.onoff
                    .push(run_logged(c, mode, &what, pair + 1, &mut done)?);
            }
        }
    }
    for rep in 0..s.update_reps {
        for c in REAL_CLIENTS {
            done += 1;
            let r = ctx.run_one(c, Mode::Paged, Load::Updates)?;
            let l = lag_stats(&r.lags_us);
            eprintln!(
                "[{done:>2}/{total}] {:>4.0}s  updates   {:<36} #{}: seen {}/{} lag p50 {:.1} ms p99 {:.1} ms",
                t0.elapsed().as_secs_f64(),
                c.label(),
                rep + 1,
                r.lags_us.len(),
                r.updates_sent,
                l.p50_ms,
                l.p99_ms
            );
            res.updates.push(r);
        }
    }
    for rep in 0..s.mem_reps {
        for c in SYNC_CLIENTS {
            done += 1;
            let r = ctx.run_one(c, Mode::Paged, Load::Memory)?;
            let n = s.pods.max(1) as f64;
            eprintln!(
                "[{done:>2}/{total}] {:>4.0}s  memory    {:<36} #{}: steady RSS {:.2} KiB/Pod, heap {:.2} KiB/Pod (waited {:.0}s)",
                t0.elapsed().as_secs_f64(),
                c.label(),
                rep + 1,
                r.done.rss_kb.saturating_sub(r.done.baseline_rss_kb) as f64 / n,
                r.done
                    .heap_live_bytes
                    .saturating_sub(r.done.baseline_heap_bytes) as f64
                    / 1024.0
                    / n,
                r.done.waited_secs
            );
            res.memory.push(r);
        }
    }
    drop(plane);
    res.total_secs = started.elapsed().as_secs_f64();
    res.settings = Some(s.clone());
    finish(
        &mut res,
        |res| markdown(res, &s),
        out,
        "real",
        "--real",
        write_docs.then_some((BEGIN, END)),
    )
}

/// The local control plane of a `--real` run: started (with the audit log
/// of [`AUDIT_POLICY`]), loaded with N Pods or, with `custom_resources`,
/// N custom resources (the control plane then has `CBORServingAndStorage`
/// on), then left to settle and measured at rest.
pub(crate) struct Plane {
    /// Dropped first: stops kube-apiserver and etcd.
    _cp: kcache_envtest::ControlPlane,
    _rt: tokio::runtime::Runtime,
    /// The control plane's kubeconfig.
    pub(crate) kubeconfig: PathBuf,
    /// Its processes' CPU, with their rates at rest.
    pub(crate) probe: Probe,
}

impl Plane {
    /// The context of this plane's client runs.
    pub(crate) fn ctx<'a>(
        &'a self,
        bins: &'a Bins,
        log: &'a Path,
        audit_log: &'a Path,
        s: &'a RealSettings,
        out: &'a Path,
    ) -> RunCtx<'a> {
        RunCtx {
            bins,
            kubeconfig: &self.kubeconfig,
            log,
            audit_log,
            probe: &self.probe,
            s,
            out,
        }
    }
}

/// Starts and loads a [`Plane`]; what the load printed and the rates at rest
/// go into `res`.
pub(crate) fn start_plane(
    bins: &Bins,
    s: &RealSettings,
    out: &Path,
    audit_log: &Path,
    custom_resources: bool,
    res: &mut RealResults,
) -> anyhow::Result<Plane> {
    let cbor = custom_resources;
    let n = s.pods.to_string();
    let load_args: &[&str] = if custom_resources {
        &["create-crs", "--count", &n]
    } else {
        &["create", "--pods", &n]
    };
    let started = Instant::now();
    let _ = std::fs::remove_file(audit_log);
    let policy = out.join("real-audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY)?;
    let rt = tokio::runtime::Runtime::new()?;
    let cp = rt
        .block_on(
            kcache_envtest::ControlPlane::builder()
                .cbor_serving_and_storage(cbor)
                .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
                .apiserver_arg(format!("--audit-log-path={}", audit_log.display()))
                .apiserver_arg("--audit-log-format=json")
                .apiserver_arg("--audit-log-maxsize=1000")
                .start(),
        )
        .context("starting the local control plane (set KCACHE_KUBE_APISERVER and KCACHE_ETCD to use prebuilt binaries)")?;
    let (Some(etcd_pid), Some(api_pid)) = cp.pids() else {
        bail!("the control plane has no process ids");
    };
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    eprintln!(
        "==> control plane at {}{} (kube-apiserver pid {api_pid}, etcd pid {etcd_pid}), {:.0}s",
        cp.server_url(),
        if cbor {
            " with CBORServingAndStorage"
        } else {
            ""
        },
        started.elapsed().as_secs_f64()
    );
    let mut load = Command::new(bins.release.join("real-load"));
    load.env("KUBECONFIG", &kubeconfig)
        .env_remove("RUST_LOG")
        .args(load_args)
        .stderr(Stdio::inherit());
    let o = load
        .output()
        .with_context(|| format!("real-load {}", load_args.join(" ")))?;
    if !o.status.success() {
        bail!("real-load {} failed ({})", load_args.join(" "), o.status);
    }
    let load: Value = serde_json::from_slice(&o.stdout).context("real-load output")?;
    eprintln!("==> loaded: {load}");
    let mut probe = Probe {
        api_pid,
        etcd_pid,
        clk_tck: s.clk_tck,
        idle: (0.0, 0.0),
    };
    // the apiserver is still busy for a while after the load (its caches,
    // garbage collection): let it settle, then measure its rate at rest
    std::thread::sleep(Duration::from_secs(if s.quick { 5 } else { 15 }));
    probe.idle = probe.idle_rates(Duration::from_secs(3));
    eprintln!(
        "==> at rest: kube-apiserver {:.1}% of a core, etcd {:.1}%",
        probe.idle.0 * 100.0,
        probe.idle.1 * 100.0
    );
    res.load = load;
    res.idle = probe.idle;
    Ok(Plane {
        _cp: cp,
        _rt: rt,
        kubeconfig,
        probe,
    })
}

/// Records LISTs and WATCHes of Pods and of the custom resource (request
/// URI, user agent), nothing else.
pub(crate) const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [\"RequestReceived\"]
rules:
- level: Metadata
  verbs: [\"list\", \"watch\"]
  resources:
  - group: \"\"
    resources: [\"pods\"]
  - group: \"apps.kcache.dev\"
    resources: [\"applications\"]
- level: None
";

/// CPU of the kube-apiserver and etcd processes.
pub(crate) struct Probe {
    pub(crate) api_pid: u32,
    pub(crate) etcd_pid: u32,
    pub(crate) clk_tck: f64,
    /// Their CPU at rest, fraction of a core.
    pub(crate) idle: (f64, f64),
}

impl Probe {
    fn ticks(&self) -> (u64, u64) {
        (
            proc_cpu_ticks(self.api_pid).unwrap_or(0),
            proc_cpu_ticks(self.etcd_pid).unwrap_or(0),
        )
    }

    pub(crate) fn idle_rates(&self, over: Duration) -> (f64, f64) {
        let (a0, e0, t) = {
            let (a, e) = self.ticks();
            (a, e, Instant::now())
        };
        std::thread::sleep(over);
        let (a1, e1) = self.ticks();
        let secs = t.elapsed().as_secs_f64();
        (
            (a1.saturating_sub(a0)) as f64 / self.clk_tck / secs,
            (e1.saturating_sub(e0)) as f64 / self.clk_tck / secs,
        )
    }
}

/// user + system ticks of `/proc/<pid>/stat`.
fn proc_cpu_ticks(pid: u32) -> Option<u64> {
    parse_stat_cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// utime + stime from the text of a `/proc/<pid>/stat` (fields 14 and 15;
/// the command name in parentheses may hold spaces).
fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // after ") ": state is field 3, so utime (14) is index 11, stime index 12
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Bytes received by the TCP sockets of process `pid` (`ss -tnpi`), or
/// `None` if `ss` is not there.
fn socket_bytes_received(pid: u32) -> Option<u64> {
    let o = Command::new("ss").args(["-tnpiH"]).output().ok()?;
    if !o.status.success() {
        return None;
    }
    Some(parse_ss_bytes_received(
        &String::from_utf8_lossy(&o.stdout),
        pid,
    ))
}

/// Sums `bytes_received:` over the sockets of `pid` in the output of
/// `ss -tnpi` (a socket's line names its process as `users:((...,pid=N,...))`;
/// its TCP info follows on the same or the next line).
pub fn parse_ss_bytes_received(text: &str, pid: u32) -> u64 {
    let needle = format!("pid={pid},");
    let mut owned = false;
    let mut total = 0;
    for line in text.lines() {
        if line.contains("users:((") {
            owned = line.contains(&needle);
        }
        if owned && let Some(at) = line.find("bytes_received:") {
            let digits: String = line[at + "bytes_received:".len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            total += digits.parse::<u64>().unwrap_or(0);
            owned = false;
        }
    }
    total
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 if unknown).
pub fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// What every client run of a `--real` measurement shares.
pub(crate) struct RunCtx<'a> {
    pub(crate) bins: &'a Bins,
    pub(crate) kubeconfig: &'a Path,
    pub(crate) log: &'a Path,
    pub(crate) audit_log: &'a Path,
    pub(crate) probe: &'a Probe,
    pub(crate) s: &'a RealSettings,
    pub(crate) out: &'a Path,
}

impl RunCtx<'_> {
    /// One client run: sync (and the update load when `updates`).
    pub(crate) fn run_one(&self, c: RealClient, mode: Mode, load: Load) -> anyhow::Result<SyncRun> {
        let s = self.s;
        let updates = load == Load::Updates;
        let timeout = Duration::from_secs(if s.quick { 180 } else { 900 });
        let mut cmd = c.command(self.bins, mode);
        cmd.env("KUBECONFIG", self.kubeconfig)
            .arg(c.flag("expect", &s.pods.to_string()))
            .arg(c.flag("settle-ms", &s.settle_ms.to_string()));
        if load == Load::Memory && c.is_kcache() {
            // a no-op with background compression off
            cmd.arg("--wait-compressed");
        }
        let watch_log = self.out.join("real-watch-client.log");
        let driver_log = self.out.join("real-watch-driver.log");
        if updates {
            let _ = std::fs::remove_file(&watch_log);
            cmd.arg(c.flag("expect-updates", &s.updates.to_string()))
                .arg(c.flag("watch-log", &watch_log.display().to_string()));
        }
        let audit_from = std::fs::metadata(self.audit_log).map_or(0, |m| m.len());
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log)?;
        let (api0, etcd0) = self.probe.ticks();
        let t0 = Instant::now();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        let mut stdin = child.stdin.take().context("stdin")?;
        let (tx, rx) = mpsc::channel::<Phase>();
        let stdout = child.stdout.take().context("stdout")?;
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(p) = serde_json::from_str::<Phase>(line.trim()) {
                    let _ = tx.send(p);
                }
            }
        });
        let wait_phase = |name: &str, child: &mut std::process::Child| -> anyhow::Result<Phase> {
            let deadline = Instant::now() + timeout;
            loop {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(p) if p.phase == name => return Ok(p),
                    Ok(_) => {}
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        let status = child.wait()?;
                        bail!(
                            "{} exited ({status}) before its '{name}' line; stderr in {}",
                            c.label(),
                            self.log.display()
                        );
                    }
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!(
                        "{} did not reach '{name}' in {timeout:?}; stderr in {}",
                        c.label(),
                        self.log.display()
                    );
                }
            }
        };
        let synced = wait_phase("synced", &mut child)?;
        let window = t0.elapsed().as_secs_f64();
        let (api1, etcd1) = self.probe.ticks();
        let rx_bytes = socket_bytes_received(child.id());
        let cpu = |a: u64, b: u64, idle: f64| {
            ((b.saturating_sub(a)) as f64 / s.clk_tck - idle * window).max(0.0)
        };
        let apiserver_cpu_secs = cpu(api0, api1, self.probe.idle.0);
        let etcd_cpu_secs = cpu(etcd0, etcd1, self.probe.idle.1);
        let mut updated = None;
        let mut updates_sent = 0;
        if updates {
            let mut drv = Command::new(self.bins.release.join("real-load"));
            drv.env("KUBECONFIG", self.kubeconfig)
                .env_remove("RUST_LOG")
                .args([
                    "update",
                    "--count",
                    &s.updates.to_string(),
                    "--rate",
                    &s.update_rate.to_string(),
                    "--pods",
                    &s.pods.to_string(),
                    "--out",
                ])
                .arg(&driver_log)
                .stderr(Stdio::inherit());
            let o = drv.output().context("real-load update")?;
            if !o.status.success() {
                bail!("real-load update failed ({})", o.status);
            }
            let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            updates_sent = v["updates"].as_u64().unwrap_or(0) as usize;
            // the client reports when it has seen them all; 20 s at most after the driver
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(p) if p.phase == "updated" => {
                        updated = Some(p);
                        break;
                    }
                    _ => {}
                }
            }
        }
        let _ = stdin.write_all(b"stop\n");
        let _ = stdin.flush();
        let done = wait_phase("done", &mut child)?;
        drop(stdin);
        let deadline = Instant::now() + Duration::from_secs(15);
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.wait();
        let _ = reader.join();
        let audit = std::fs::read(self.audit_log)
            .map(|b| {
                let from = (audit_from as usize).min(b.len());
                summarize_audit(&String::from_utf8_lossy(&b[from..]))
            })
            .unwrap_or_default();
        let lags_us = if updates {
            let client = std::fs::read_to_string(&watch_log).unwrap_or_default();
            let driver = std::fs::read_to_string(&driver_log).unwrap_or_default();
            lags(&driver, &client)
        } else {
            Vec::new()
        };
        Ok(SyncRun {
            client: c,
            mode,
            synced,
            updated,
            done,
            apiserver_cpu_secs,
            etcd_cpu_secs,
            rx_bytes,
            audit,
            lags_us,
            updates_sent,
        })
    }
}

pub(crate) fn summary(r: &SyncRun, pods: usize) -> String {
    let n = pods.max(1) as f64;
    format!(
        "{:>6.0} obj/s  peak {:>6.1} MiB  client {:>4.0} us/obj  apiserver {:>4.0} us/obj  received {:.1} MiB",
        r.synced.objects as f64 / r.synced.secs,
        r.synced.peak_rss_kb as f64 / 1024.0,
        r.synced.cpu_us as f64 / n,
        r.apiserver_cpu_secs / n * 1e6,
        r.rx_bytes.unwrap_or(0) as f64 / 1048576.0
    )
}

/// The Pod LISTs and WATCHes of an audit log excerpt, one line per distinct
/// request shape with its count: `2x LIST limit=500&resourceVersion=0`.
/// resourceVersions other than `0` print as `<rv>`, continue tokens as
/// `<token>`. A watch is counted at `ResponseStarted`, a list at
/// `ResponseComplete`.
pub fn summarize_audit(text: &str) -> Vec<String> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let verb = v["verb"].as_str().unwrap_or_default();
        let stage = v["stage"].as_str().unwrap_or_default();
        let counted = matches!(
            (verb, stage),
            ("list", "ResponseComplete") | ("watch", "ResponseStarted")
        );
        if !counted {
            continue;
        }
        let uri = v["requestURI"].as_str().unwrap_or_default();
        let query = uri.split_once('?').map_or("", |(_, q)| q);
        let mut params: Vec<String> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .filter(|p| {
                !p.starts_with("timeoutSeconds=")
                    && !p.starts_with("timeout=")
                    && !p.starts_with("watch=")
            })
            .map(|p| match p.split_once('=') {
                Some(("resourceVersion", rv)) if rv != "0" && !rv.is_empty() => {
                    "resourceVersion=<rv>".to_string()
                }
                Some(("continue", _)) => "continue=<token>".to_string(),
                _ => p.to_string(),
            })
            .collect();
        params.sort();
        let code = v["responseStatus"]["code"].as_i64().unwrap_or(0);
        let key = format!(
            "{} {}{}",
            verb.to_uppercase(),
            if params.is_empty() {
                "(no parameters)".to_string()
            } else {
                params.join("&")
            },
            if code != 0 && code != 200 {
                format!(" -> {code}")
            } else {
                String::new()
            }
        );
        if !counts.contains_key(&key) {
            order.push(key.clone());
        }
        *counts.entry(key).or_default() += 1;
    }
    order
        .into_iter()
        .map(|k| format!("{}x {k}", counts[&k]))
        .collect()
}

/// Lags in microseconds: for every resourceVersion in both logs
/// (`rv unix_micros` lines), the client's time minus the driver's (the
/// update's response). Negative when the watch event beat the response.
pub fn lags(driver: &str, client: &str) -> Vec<i64> {
    let parse = |s: &str| -> BTreeMap<u64, i64> {
        s.lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
            })
            .collect()
    };
    let sent = parse(driver);
    let seen = parse(client);
    sent.iter()
        .filter_map(|(rv, t)| seen.get(rv).map(|s| s - t))
        .collect()
}

/// Percentiles of lags, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LagStats {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

/// [`LagStats`] of `lags_us` (NaN when empty).
pub fn lag_stats(lags_us: &[i64]) -> LagStats {
    if lags_us.is_empty() {
        return LagStats {
            p50_ms: f64::NAN,
            p99_ms: f64::NAN,
            max_ms: f64::NAN,
        };
    }
    let mut v = lags_us.to_vec();
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    LagStats {
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    }
}

/// Medians of one client's sync runs in one mode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) objects_per_sec: f64,
    pub(crate) peak_mib: f64,
    pub(crate) steady_mib: f64,
    pub(crate) client_us: f64,
    pub(crate) apiserver_us: f64,
    pub(crate) etcd_us: f64,
    pub(crate) rx_bytes: f64,
}

/// The sync table of a `--real` run: a row per client and mode (objects/s,
/// peak and steady RSS, client, apiserver and etcd CPU per object, bytes
/// received per object), for `clients` syncing `s.pods` objects called
/// `noun`.
pub(crate) fn sync_table(
    t: &mut String,
    res: &RealResults,
    clients: &[RealClient],
    s: &RealSettings,
    noun: &str,
) {
    let _ = writeln!(
        t,
        "| sync of {} {noun} | objects/s | peak RSS | steady RSS | client CPU / object | apiserver CPU / object | etcd CPU / object | bytes received / object |",
        s.pods
    );
    t.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for mode in [Mode::Paged, Mode::Streaming] {
        let m = if mode == Mode::Paged {
            "paged list"
        } else {
            "streaming list"
        };
        for &c in clients {
            match row(res, c, mode, s) {
                Some(r) => {
                    let _ = writeln!(
                        t,
                        "| {m}: {} | {:.0} | {:.0} MiB | {:.0} MiB | {:.0} us | {:.0} us | {:.0} us | {} |",
                        c.label(),
                        r.objects_per_sec,
                        r.peak_mib,
                        r.steady_mib,
                        r.client_us,
                        r.apiserver_us,
                        r.etcd_us,
                        if r.rx_bytes.is_finite() {
                            format!("{:.1} KB", r.rx_bytes / 1000.0)
                        } else {
                            "n/a".into()
                        }
                    );
                }
                None => {
                    let _ = writeln!(t, "| {m}: {} | not run | | | | | | |", c.label());
                }
            }
        }
    }
}

pub(crate) fn row(res: &RealResults, c: RealClient, mode: Mode, s: &RealSettings) -> Option<Row> {
    let runs: Vec<&SyncRun> = res
        .syncs
        .iter()
        .filter(|r| r.client == c && r.mode == mode)
        .collect();
    if runs.is_empty() {
        return None;
    }
    let n = s.pods.max(1) as f64;
    let m = |f: &dyn Fn(&SyncRun) -> f64| median(runs.iter().map(|r| f(r)).collect());
    Some(Row {
        objects_per_sec: m(&|r| r.synced.objects as f64 / r.synced.secs),
        peak_mib: m(&|r| r.synced.peak_rss_kb as f64 / 1024.0),
        steady_mib: m(&|r| r.done.rss_kb as f64 / 1024.0),
        client_us: m(&|r| r.synced.cpu_us as f64 / n),
        apiserver_us: m(&|r| r.apiserver_cpu_secs / n * 1e6),
        etcd_us: m(&|r| r.etcd_cpu_secs / n * 1e6),
        rx_bytes: m(&|r| r.rx_bytes.map_or(f64::NAN, |b| b as f64 / n)),
    })
}

pub(crate) fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "n/a".into()
    }
}

/// `items`, each as inline code (in backquotes), joined by `sep`.
pub(crate) fn code_list(items: &[String], sep: &str) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(sep)
}

/// The tables of a `--real` run.
pub fn markdown(res: &RealResults, s: &RealSettings) -> String {
    let mut t = String::new();
    if s.quick {
        t.push_str(
            "**A `--quick` run: a check of the harness, not the reference measurement** \
             (small N, few runs; the full `cargo xtask bench-compare --real --write-docs` replaces it).\n\n",
        );
    }
    let kb = res.load["avg_pod_json_bytes"].as_f64().unwrap_or(f64::NAN) / 1000.0;
    let _ = writeln!(
        t,
        "N = {} Pods loaded into kube-apiserver v1.37.2 (local control plane) through the API, \
         created by `kube-controller-manager` and their status written by `kubelet` (mean {kb:.1} KB of JSON each, \
         managedFields included); {} run(s) per client and mode, alternately; medians. Total {:.0}s{}.\n",
        s.pods,
        s.reps,
        res.total_secs,
        if s.quick { " (`--quick`)" } else { "" }
    );
    sync_table(&mut t, res, &SYNC_CLIENTS, s, "Pods");
    t.push_str(
        "\n| kcache / client-go | objects/s (goal ≥ 1x) | peak RSS (goal ≤ 0.5x) | client CPU / object (goal ≤ 0.3x) | apiserver CPU / object (goal ≤ 1x) |\n",
    );
    t.push_str("|---|---:|---:|---:|---:|\n");
    for mode in [Mode::Paged, Mode::Streaming] {
        let Some(g) = row(res, RealClient::ClientGo, mode, s) else {
            continue;
        };
        for c in [RealClient::KcacheProtobuf, RealClient::KcacheJson] {
            let label = format!("{}: {}", mode.name(), c.label());
            match row(res, c, mode, s) {
                Some(k) => {
                    let _ = writeln!(
                        t,
                        "| {label} | {} | {} | {} | {} |",
                        ratio(k.objects_per_sec, g.objects_per_sec),
                        ratio(k.peak_mib, g.peak_mib),
                        ratio(k.client_us, g.client_us),
                        ratio(k.apiserver_us, g.apiserver_us)
                    );
                }
                None => {
                    let _ = writeln!(t, "| {label} | n/a | n/a | n/a | n/a |");
                }
            }
        }
    }
    if !res.updates.is_empty() {
        let _ = writeln!(
            t,
            "\nUpdate load: {} status updates (`PATCH .../status`, field manager `kubelet`) at {}/s through the apiserver while the client \
             watches (after a paged sync); lag from each update's response to the client's handler seeing it (same machine clock); \
             {} run(s) per client, medians.\n",
            s.updates, s.update_rate, s.update_reps
        );
        t.push_str(
            "| update load | updates seen | client CPU / update | lag p50 | lag p99 | lag max |\n",
        );
        t.push_str("|---|---:|---:|---:|---:|---:|\n");
        for c in REAL_CLIENTS {
            let runs: Vec<&SyncRun> = res.updates.iter().filter(|r| r.client == c).collect();
            if runs.is_empty() {
                let _ = writeln!(t, "| {} | not run | | | | |", c.label());
                continue;
            }
            let m = |f: &dyn Fn(&SyncRun) -> f64| median(runs.iter().map(|r| f(r)).collect());
            let seen = m(&|r| r.lags_us.len() as f64);
            let sent = m(&|r| r.updates_sent as f64);
            let cpu = m(&|r| {
                let n = r.done.objects.max(1) as f64;
                let at_sync = r.synced.cpu_us as f64;
                let at_end = r.updated.as_ref().map_or(f64::NAN, |u| u.cpu_us as f64);
                (at_end - at_sync) / n
            });
            let l: Vec<LagStats> = runs.iter().map(|r| lag_stats(&r.lags_us)).collect();
            let lm = |f: &dyn Fn(&LagStats) -> f64| median(l.iter().map(f).collect());
            let _ = writeln!(
                t,
                "| {} | {:.0} / {:.0} | {} | {:.1} ms | {:.1} ms | {:.1} ms |",
                c.label(),
                seen,
                sent,
                if cpu.is_finite() {
                    format!("{cpu:.0} us")
                } else {
                    "n/a".into()
                },
                lm(&|x| x.p50_ms),
                lm(&|x| x.p99_ms),
                lm(&|x| x.max_ms),
            );
        }
    }
    memory_tables(&mut t, res, s);
    // What each client asked for, from the apiserver's audit log (first run).
    t.push_str("\nWhat each client requested (the apiserver's audit log, first run of each):\n\n");
    t.push_str("| client | paged | streaming |\n|---|---|---|\n");
    for c in REAL_CLIENTS {
        let first = |mode: Mode| {
            res.syncs
                .iter()
                .find(|r| r.client == c && r.mode == mode)
                .map_or("not run".to_string(), |r| code_list(&r.audit, "<br>"))
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} |",
            c.label(),
            first(Mode::Paged),
            first(Mode::Streaming)
        );
    }
    if let Some(r) = res
        .syncs
        .iter()
        .find(|r| r.client == RealClient::ClientGo && !r.synced.requests.is_empty())
    {
        let _ = writeln!(
            t,
            "\nclient-go's own log of its requests (paged run): {}",
            code_list(&r.synced.requests, "; ")
        );
    }
    let _ = writeln!(
        t,
        "\nkube-apiserver at rest: {:.1}% of a core, etcd {:.1}% (subtracted over each run's window).",
        res.idle.0 * 100.0,
        res.idle.1 * 100.0
    );
    t.push_str("\nMachine:");
    for (k, v) in &res.machine {
        let _ = write!(t, " {k}: {v};");
    }
    t.push('\n');
    t
}

/// Medians of one client's steady-memory runs, per Pod: RSS, heap
/// (kcache only), bytes received.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemRow {
    pub(crate) rss_kib: f64,
    pub(crate) heap_kib: f64,
    pub(crate) rx_kib: f64,
    pub(crate) waited_secs: f64,
}

pub(crate) fn mem_row(res: &RealResults, c: RealClient, s: &RealSettings) -> Option<MemRow> {
    let runs: Vec<&SyncRun> = res.memory.iter().filter(|r| r.client == c).collect();
    if runs.is_empty() {
        return None;
    }
    let n = s.pods.max(1) as f64;
    let m = |f: &dyn Fn(&SyncRun) -> f64| median(runs.iter().map(|r| f(r)).collect());
    Some(MemRow {
        rss_kib: m(&|r| r.done.rss_kb.saturating_sub(r.done.baseline_rss_kb) as f64 / n),
        heap_kib: m(&|r| {
            if r.done.heap_live_bytes == 0 {
                f64::NAN
            } else {
                r.done
                    .heap_live_bytes
                    .saturating_sub(r.done.baseline_heap_bytes) as f64
                    / 1024.0
                    / n
            }
        }),
        rx_kib: m(&|r| r.rx_bytes.map_or(f64::NAN, |b| b as f64 / 1024.0 / n)),
        waited_secs: m(&|r| r.done.waited_secs),
    })
}

/// The steady-memory table and kcache's background compression on / off.
fn memory_tables(t: &mut String, res: &RealResults, s: &RealSettings) {
    if !res.memory.is_empty() {
        let _ = writeln!(
            t,
            concat!(
                "\nSteady memory (issue 20): a paged sync of {} Pods, then kcache waits for background ",
                "compression (its quiet time x 1.25 and one round), then each client settles {} ms ",
                "(client-go after `runtime.GC()` and `debug.FreeOSMemory()`) and reads its RSS; minus ",
                "the RSS before the informer started, per Pod. kcache's heap is its counting allocator's ",
                "live bytes (same baseline). Bytes received: the client's TLS sockets over the sync. ",
                "{} run(s) per client, medians.\n"
            ),
            s.pods, s.settle_ms, s.mem_reps
        );
        t.push_str("| steady memory per Pod | RSS | heap (allocator) | RSS / client-go RSS | heap / client-go RSS | heap / bytes received | waited |\n");
        t.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
        let go = mem_row(res, RealClient::ClientGo, s);
        let go_rss = go.map_or(f64::NAN, |g| g.rss_kib);
        for c in SYNC_CLIENTS {
            let Some(r) = mem_row(res, c, s) else {
                let _ = writeln!(t, "| {} | not run | | | | | |", c.label());
                continue;
            };
            let kib = |v: f64| {
                if v.is_finite() {
                    format!("{v:.2} KiB")
                } else {
                    "n/a".into()
                }
            };
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {} |",
                c.label(),
                kib(r.rss_kib),
                kib(r.heap_kib),
                ratio(r.rss_kib, go_rss),
                ratio(r.heap_kib, go_rss),
                ratio(r.heap_kib, r.rx_kib),
                if r.waited_secs > 0.0 {
                    format!("{:.0} s", r.waited_secs)
                } else {
                    "-".into()
                }
            );
        }
    }
    // background compression on / off, same build: the median of the
    // ratios of the adjacent pairs (the dedicated pairs when there are
    // any, else those of the sync table's rounds)
    let mut lines = String::new();
    let pairs_from = if res.onoff.is_empty() {
        &res.syncs
    } else {
        &res.onoff
    };
    let mut pairs_seen = 0;
    for mode in [Mode::Paged, Mode::Streaming] {
        let runs = |c: RealClient| -> Vec<&SyncRun> {
            pairs_from
                .iter()
                .filter(|r| r.client == c && r.mode == mode)
                .collect()
        };
        let (on, off) = (
            runs(RealClient::KcacheProtobuf),
            runs(RealClient::KcacheProtobufBgOff),
        );
        if on.is_empty() || off.is_empty() {
            continue;
        }
        pairs_seen = pairs_seen.max(on.len().min(off.len()));
        let paired = |f: &dyn Fn(&SyncRun) -> f64| {
            median(on.iter().zip(&off).map(|(a, b)| f(a) / f(b)).collect())
        };
        let _ = writeln!(
            lines,
            "| {} sync | {} | {} | {} | |",
            mode.name(),
            ratio(paired(&|r| r.synced.objects as f64 / r.synced.secs), 1.0),
            ratio(paired(&|r| r.synced.cpu_us as f64), 1.0),
            ratio(paired(&|r| r.synced.peak_rss_kb as f64), 1.0)
        );
    }
    if let (Some(on), Some(off)) = (
        mem_row(res, RealClient::KcacheProtobuf, s),
        mem_row(res, RealClient::KcacheProtobufBgOff, s),
    ) {
        let _ = writeln!(
            lines,
            "| steady memory | | | | RSS {} , heap {} |",
            ratio(on.rss_kib, off.rss_kib),
            ratio(on.heap_kib, off.heap_kib)
        );
    }
    if !lines.is_empty() {
        let _ = write!(
            t,
            "\nkcache (protobuf), background compression on (the default) / off, same build, run one right after the other in alternating order; sync rows: the median of the ratios of {pairs_seen} pairs per mode{} (goal: objects/s and CPU within 5%):\n\n",
            if res.onoff.is_empty() {
                ", those of the rounds above"
            } else {
                ", run back to back after a pause once the rounds above were done"
            }
        );
        t.push_str(
            "| on / off | objects/s | client CPU / object | peak RSS | steady memory |\n|---|---:|---:|---:|---:|\n",
        );
        t.push_str(&lines);
    }
}

const BEGIN: &str = "<!-- bench-compare-real:begin -->";
const END: &str = "<!-- bench-compare-real:end -->";

/// Replaces the block between `begin` and `end` in docs/performance.md.
pub(crate) fn write_docs_block(begin: &str, end: &str, md: &str) -> anyhow::Result<()> {
    let path = workspace_root().join("docs/performance.md");
    crate::bench_common::replace_marked_block(&path, begin, end, md)?;
    eprintln!("==> wrote {}", path.display());
    Ok(())
}

/// The end of a `--real` run: the load average, the table printed and
/// written with the results as `{stem}.md` and `{stem}.json` under `out`,
/// and, with `write_docs`, the table into docs/performance.md between
/// `begin` and `end`.
pub(crate) fn finish(
    res: &mut RealResults,
    md: impl FnOnce(&RealResults) -> String,
    out: &Path,
    stem: &str,
    what: &str,
    docs: Option<(&str, &str)>,
) -> anyhow::Result<()> {
    res.machine
        .push(("load average at the end".into(), loadavg()));
    let md = md(res);
    println!("\n{md}");
    std::fs::write(out.join(format!("{stem}.md")), &md)?;
    std::fs::write(
        out.join(format!("{stem}.json")),
        serde_json::to_string_pretty(&*res)?,
    )?;
    eprintln!(
        "==> bench-compare {what}: done in {:.0}s; {stem}.md, {stem}.json in {}",
        res.total_secs,
        out.display()
    );
    if let Some((begin, end)) = docs {
        write_docs_block(begin, end, &md)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RealSettings {
        RealSettings {
            pods: 1000,
            reps: 1,
            updates: 10,
            update_rate: 5.0,
            update_reps: 1,
            mem_reps: 1,
            onoff_pairs: 0,
            quick: true,
            settle_ms: 0,
            clk_tck: 100.0,
        }
    }

    fn run(c: RealClient, mode: Mode, secs: f64, cpu_us: u64, peak_kb: u64) -> SyncRun {
        let p = |phase: &str| Phase {
            phase: phase.into(),
            objects: 1000,
            secs,
            cpu_us,
            peak_rss_kb: peak_kb,
            rss_kb: peak_kb / 2,
            read_bytes: 1000 * 9000,
            ..Phase::default()
        };
        SyncRun {
            client: c,
            mode,
            synced: p("synced"),
            updated: None,
            done: p("done"),
            apiserver_cpu_secs: 0.2,
            etcd_cpu_secs: 0.0,
            rx_bytes: Some(1000 * 9000),
            audit: vec!["1x LIST limit=500&resourceVersion=0".into()],
            lags_us: Vec::new(),
            updates_sent: 0,
        }
    }

    /// The steady-memory table: per Pod, less the baselines; kcache's heap
    /// against client-go's RSS and its own bytes received; on / off.
    #[test]
    fn memory_table_reports_per_pod_ratios_and_on_off() {
        let s = settings();
        let mut res = RealResults::default();
        let mem = |c: RealClient, rss_kb: u64, heap: u64| {
            let mut r = run(c, Mode::Paged, 0.5, 100_000, 102_400);
            r.done.baseline_rss_kb = 10_000;
            r.done.rss_kb = 10_000 + rss_kb;
            r.done.baseline_heap_bytes = if heap > 0 { 1 << 20 } else { 0 };
            r.done.heap_live_bytes = if heap > 0 { (1 << 20) + heap } else { 0 };
            r.done.waited_secs = 38.0;
            r.rx_bytes = Some(1000 * 4096);
            r
        };
        // per Pod (N = 1000): kcache RSS 2 KiB, heap 1 KiB; off 4 KiB RSS,
        // 3 KiB heap; client-go 8 KiB RSS
        res.memory
            .push(mem(RealClient::KcacheProtobuf, 2000, 1000 * 1024));
        res.memory
            .push(mem(RealClient::KcacheProtobufBgOff, 4000, 3000 * 1024));
        res.memory.push(mem(RealClient::ClientGo, 8000, 0));
        for c in [RealClient::KcacheProtobuf, RealClient::KcacheProtobufBgOff] {
            res.syncs.push(run(c, Mode::Paged, 0.5, 100_000, 102_400));
        }
        let md = markdown(&res, &s);
        assert!(
            md.contains(
                "| kcache (protobuf) | 2.00 KiB | 1.00 KiB | 0.25x | 0.12x | 0.25x | 38 s |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| client-go 0.37 (default: protobuf) | 8.00 KiB | n/a | 1.00x | n/a | n/a | 38 s |"
            ),
            "{md}"
        );
        assert!(md.contains("| kube-runtime 5 (JSON) | not run |"), "{md}");
        assert!(
            md.contains("| paged sync | 1.00x | 1.00x | 1.00x | |"),
            "{md}"
        );
        assert!(
            md.contains("| steady memory | | | | RSS 0.50x , heap 0.33x |"),
            "{md}"
        );
    }

    /// The apiserver's and etcd's CPU: utime + stime of their stat line,
    /// whatever their command names hold.
    #[test]
    fn stat_cpu_ticks_parse_with_spaces_in_the_name() {
        let stat =
            "4242 (kube apiserver) S 1 4242 4242 0 -1 4194560 9 0 0 0 150 37 0 0 20 0 12 0 100 0 0";
        assert_eq!(parse_stat_cpu_ticks(stat), Some(187));
        assert_eq!(parse_stat_cpu_ticks("1 (x) S 1"), None);
    }

    /// The on / off rows come from the dedicated back-to-back pairs when
    /// the run has them, not from the sync table's rounds.
    #[test]
    fn on_off_rows_use_the_dedicated_pairs() {
        let s = settings();
        let mut res = RealResults::default();
        for c in [RealClient::KcacheProtobuf, RealClient::KcacheProtobufBgOff] {
            res.syncs.push(run(c, Mode::Paged, 0.5, 100_000, 102_400));
        }
        let md = markdown(&res, &s);
        assert!(
            md.contains("| paged sync | 1.00x | 1.00x | 1.00x | |"),
            "{md}"
        );
        assert!(
            md.contains("of 1 pairs per mode, those of the rounds above"),
            "{md}"
        );
        // on costs twice the CPU in the pairs; the rounds say 1.00x
        res.onoff.push(run(
            RealClient::KcacheProtobuf,
            Mode::Paged,
            0.5,
            200_000,
            102_400,
        ));
        res.onoff.push(run(
            RealClient::KcacheProtobufBgOff,
            Mode::Paged,
            0.5,
            100_000,
            102_400,
        ));
        let md = markdown(&res, &s);
        assert!(
            md.contains("| paged sync | 1.00x | 2.00x | 1.00x | |"),
            "{md}"
        );
        assert!(md.contains("of 1 pairs per mode, run back to back"), "{md}");
    }

    #[test]
    fn real_table_renders_rows_ratios_and_clients_not_run() {
        let s = settings();
        let mut res = RealResults {
            load: serde_json::json!({"avg_pod_json_bytes": 11500}),
            ..RealResults::default()
        };
        for mode in [Mode::Paged, Mode::Streaming] {
            res.syncs
                .push(run(RealClient::KcacheJson, mode, 0.5, 100_000, 102400));
            res.syncs
                .push(run(RealClient::ClientGo, mode, 0.25, 200_000, 204800));
            res.syncs
                .push(run(RealClient::KubeRuntime, mode, 1.0, 400_000, 409600));
        }
        let mut u = run(RealClient::KcacheJson, Mode::Paged, 0.5, 100_000, 102400);
        u.updates_sent = 4;
        u.lags_us = vec![1000, 2000, 3000, 50_000];
        u.done.objects = 4;
        u.updated = Some(Phase {
            cpu_us: 110_000,
            ..Phase::default()
        });
        res.updates.push(u);
        let md = markdown(&res, &s);
        // 1000 objects in 0.5 s, 100,000 us = 0.1 s CPU = 100 us per object,
        // apiserver 0.2 s = 200 us per object, 9 KB read per object
        assert!(
            md.contains("| paged list: kcache (JSON forced) | 2000 | 100 MiB | 50 MiB | 100 us | 200 us | 0 us | 9.0 KB |"),
            "{md}"
        );
        assert!(
            md.contains("| paged list: kcache (protobuf) | not run |"),
            "{md}"
        );
        // kcache JSON against client-go: half the rate, half the RSS and CPU
        assert!(
            md.contains("| streaming: kcache (JSON forced) | 0.50x | 0.50x | 0.50x | 1.00x |"),
            "{md}"
        );
        assert!(
            md.contains("| streaming: kcache (protobuf) | n/a | n/a | n/a | n/a |"),
            "{md}"
        );
        // update load: 10,000 us over 4 updates = 2500 us each; lags 2.5 ms median of 4
        assert!(
            md.contains("| kcache (JSON forced) | 4 / 4 | 2500 us | 3.0 ms | 50.0 ms | 50.0 ms |"),
            "{md}"
        );
        assert!(
            md.contains("| client-go 0.37 (default: protobuf) | not run |"),
            "{md}"
        );
        assert!(md.contains("`1x LIST limit=500&resourceVersion=0`"), "{md}");
        assert!(md.starts_with("**A `--quick` run"), "{md}");
    }

    #[test]
    fn audit_lines_summarize_by_request_shape() {
        let log = r#"{"kind":"Event","stage":"ResponseComplete","verb":"list","requestURI":"/api/v1/pods?limit=500&resourceVersion=0","responseStatus":{"code":200}}
{"kind":"Event","stage":"ResponseStarted","verb":"watch","requestURI":"/api/v1/pods?allowWatchBookmarks=true&resourceVersion=4711&timeout=6m52s&timeoutSeconds=412&watch=true","responseStatus":{"code":200}}
{"kind":"Event","stage":"ResponseComplete","verb":"watch","requestURI":"/api/v1/pods?allowWatchBookmarks=true&resourceVersion=4711&timeoutSeconds=412&watch=true"}
{"kind":"Event","stage":"ResponseComplete","verb":"list","requestURI":"/api/v1/pods?limit=500","responseStatus":{"code":200}}
{"kind":"Event","stage":"ResponseComplete","verb":"list","requestURI":"/api/v1/pods?continue=abc&limit=500","responseStatus":{"code":200}}
{"kind":"Event","stage":"ResponseComplete","verb":"list","requestURI":"/api/v1/pods?continue=def&limit=500","responseStatus":{"code":200}}
not json
{"kind":"Event","stage":"ResponseStarted","verb":"watch","requestURI":"/api/v1/pods?sendInitialEvents=true&resourceVersionMatch=NotOlderThan&watch=true","responseStatus":{"code":410}}"#;
        assert_eq!(
            summarize_audit(log),
            vec![
                "1x LIST limit=500&resourceVersion=0",
                "1x WATCH allowWatchBookmarks=true&resourceVersion=<rv>",
                "1x LIST limit=500",
                "2x LIST continue=<token>&limit=500",
                "1x WATCH resourceVersionMatch=NotOlderThan&sendInitialEvents=true -> 410",
            ]
        );
    }

    #[test]
    fn ss_bytes_received_sum_over_the_process_sockets() {
        let ss = "ESTAB 0 0 127.0.0.1:50412 127.0.0.1:6443 users:((\"kcache-client\",pid=42,fd=9))\n\t cubic wscale:7,7 rto:201 bytes_sent:2048 bytes_acked:2049 bytes_received:5000 segs_out:10\n\
ESTAB 0 0 127.0.0.1:50414 127.0.0.1:6443 users:((\"other\",pid=421,fd=9))\n\t cubic bytes_received:7777\n\
ESTAB 0 0 127.0.0.1:50416 127.0.0.1:6443 users:((\"kcache-client\",pid=42,fd=10)) cubic bytes_received:300 segs_in:2\n";
        assert_eq!(parse_ss_bytes_received(ss, 42), 5300);
        assert_eq!(parse_ss_bytes_received(ss, 7), 0);
    }

    #[test]
    fn lags_join_on_resource_version() {
        let driver = "10 1000\n11 2000\n12 3000\n";
        let client = "11 2500\n10 1200\n13 9000\n";
        let mut l = lags(driver, client);
        l.sort_unstable();
        assert_eq!(l, vec![200, 500]);
        let s = lag_stats(&[1000, 3000, 2000]);
        assert_eq!((s.p50_ms, s.max_ms), (2.0, 3.0));
        assert!(lag_stats(&[]).p50_ms.is_nan());
    }

    #[test]
    fn phase_lines_parse() {
        let line = r#"{"phase":"synced","client":"client-go","objects":3,"secs":0.5,"cpu_us":70000,"peak_rss_kb":10,"rss_kb":9,"baseline_rss_kb":1,"read_bytes":100,"cached":3,"requests":["GET /api/v1/pods?limit=500&resourceVersion=0 accept=\"application/vnd.kubernetes.protobuf,application/json\" -> application/vnd.kubernetes.protobuf"]}"#;
        let p: Phase = serde_json::from_str(line).unwrap();
        assert_eq!(
            (p.phase.as_str(), p.objects, p.cpu_us),
            ("synced", 3, 70000)
        );
        assert_eq!(p.requests.len(), 1);
        let rust = r#"{"phase":"done","client":"kcache","objects":0,"secs":1.0,"cpu_us":10000,"peak_rss_kb":1,"rss_kb":1,"baseline_rss_kb":1,"read_bytes":1,"cached":3}"#;
        assert_eq!(serde_json::from_str::<Phase>(rust).unwrap().cached, 3);
    }
}
