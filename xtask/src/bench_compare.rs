//! `cargo xtask bench-compare [--quick]`: kcache against kube-runtime and
//! client-go on the same data, same machine, run alternately.
//!
//! Builds the harness (`benches/compare`: the replay apiserver, the kcache,
//! kube-runtime and ceiling clients, and the client-go client, a Go module
//! built into `target/bench-compare/`), then runs the scenarios of issue 8:
//!
//! - (a) ingest: a paged list of N Pods then M watch events;
//! - (b) steady-state RSS with N Pods cached, without and with a
//!   managedFields-stripping transform in every client;
//! - (c) relist: the first watch answers 410 Gone, forcing a relist of N;
//!   (c') kcache only: the same 410 after 60 s, a relist of a settled
//!   (background-compressed) cache, its peak measured from the moment the
//!   cache was compressed;
//! - (d) workqueue add/get/done of distinct keys, 1 and 8 workers, kcache
//!   against client-go's workqueue;
//! - (e) warm restart, kcache only: a cold start (list N Pods, write a
//!   snapshot on shutdown) then a warm start from that snapshot: time to
//!   synced and peak RSS of each, snapshot write time and size;
//!
//! plus bare serde_json decoding of the same bytes as the ceiling. The
//! replay server serves protobuf to clients that ask for it (client-go's
//! default). `--real` runs the reference measurement against the local
//! kube-apiserver instead (see [`crate::bench_real`]). Prints a
//! Markdown table of medians and ratios, writes it with the raw runs and an
//! SVG plot under `target/bench-compare/`, and with `--write-docs` into
//! `docs/performance.md` and `docs/performance-compare.svg`.

use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bench::{clean_cargo, fmt_rate, target_dir};
use crate::bench_common::{Bins, CLIENTS, Impl, loadavg, machine, median, replace_marked_block};
use crate::run::{step, workspace_root};

/// Options of `cargo xtask bench-compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Small data set and fewer repetitions: under 5 minutes on 2 cores.
    #[arg(long)]
    quick: bool,
    /// Pods in the list (quick: 10,000; full: 100,000).
    #[arg(long)]
    pods: Option<usize>,
    /// Watch events after the list (default: as many as Pods).
    #[arg(long)]
    events: Option<usize>,
    /// Repetitions of each client in scenario (a) and (d) (quick: 3; full: 5).
    #[arg(long)]
    reps: Option<usize>,
    /// Workqueue keys in scenario (d) (default 1,000,000).
    #[arg(long)]
    keys: Option<usize>,
    /// Use the binaries already built.
    #[arg(long)]
    no_build: bool,
    /// Also write the table into docs/performance.md and the plot into
    /// docs/performance-compare.svg.
    #[arg(long)]
    write_docs: bool,
    /// Run only scenario (e), the warm restart (builds only what it needs).
    #[arg(long)]
    only_warm_restart: bool,
    /// The reference measurement: the real kube-apiserver of the local
    /// control plane instead of the replay server (N Pods loaded through the
    /// API; quick: 4,000, full: 20,000), kcache (protobuf and JSON),
    /// client-go and kube-runtime; paged and streaming sync, then an update
    /// load. Needs the control plane's binaries (KCACHE_KUBE_APISERVER and
    /// KCACHE_ETCD, or it builds them).
    #[arg(long)]
    real: bool,
    /// `--real`: the custom-resource table instead of the Pod table (N
    /// custom resources of about 5 KB, quick: 4,000, full: 20,000; the
    /// control plane started with `CBORServingAndStorage`; kcache JSON and
    /// CBOR, client-go's dynamic informer JSON and `ClientsPreferCBOR`,
    /// kube-runtime `DynamicObject`). See [`crate::bench_real_cr`].
    #[arg(long, requires = "real")]
    custom_resources: bool,
    /// `--real`: kcache's JSON path at this build against the same client
    /// built from commit REV (checked out and built under
    /// target/bench-compare), in alternating pairs on one control plane
    /// (`--reps` pairs per sync mode). See [`crate::json_ab`].
    #[arg(
        long,
        requires = "real",
        conflicts_with = "custom_resources",
        value_name = "REV"
    )]
    json_baseline: Option<String>,
    /// `--real`: status updates of the update load (quick: 1,000; full: 5,000).
    #[arg(long)]
    updates: Option<usize>,
    /// `--real`: updates per second of the update load (quick: 200; full: 250).
    #[arg(long)]
    update_rate: Option<f64>,
    /// `--real`: steady-memory runs per client (quick: 1; full: 2; with
    /// `--json-baseline`: pairs).
    #[arg(long)]
    mem_reps: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
struct Settings {
    pods: usize,
    events: usize,
    reps: usize,
    /// kcache's background compression on / off pairs in (a): one per
    /// round, then more back to back up to this many.
    onoff_pairs: usize,
    mem_reps: usize,
    keys: usize,
    quick: bool,
    #[serde(skip)]
    timeout: Duration,
}

/// What every client prints (the `Report` of `benches/compare`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Report {
    client: String,
    events: u64,
    secs: f64,
    events_per_sec: f64,
    peak_rss_kb: u64,
    steady_rss_kb: u64,
    baseline_rss_kb: u64,
    cached: usize,
    #[serde(default)]
    object_heap_bytes: u64,
    /// kcache: heap bytes live at the steady sample (counting allocator).
    #[serde(default)]
    heap_live_bytes: u64,
    /// kcache: heap bytes live before the informer started.
    #[serde(default)]
    baseline_heap_bytes: u64,
    /// kcache: CPU seconds from start to the end marker.
    #[serde(default)]
    cpu_secs: f64,
    /// kcache: seconds waited for background compression before sampling.
    #[serde(default)]
    waited_secs: f64,
    /// kcache: objects compressed in the background before the sample.
    #[serde(default)]
    bg_compressed: u64,
    /// kcache: time background compression spent, seconds.
    #[serde(default)]
    bg_busy_secs: f64,
    /// kcache (c'): when the peak RSS was reset, seconds (0: not reset).
    #[serde(default)]
    peak_reset_secs: f64,
    /// kcache (c'): updates seen at the reset (0: the relist came after).
    #[serde(default)]
    updates_at_peak_reset: u64,
}

/// One client run of scenario (b): which client, its extra flags, and
/// where its reports go (`strip`: the managedFields-stripped round).
struct MemoryRun {
    client: Impl,
    name: &'static str,
    args: &'static [&'static str],
    results: fn(&mut Results, bool) -> &mut Vec<Report>,
}

/// Scenario (b)'s runs: the three clients with their default settings
/// (kcache's steady memory sampled once background compression has
/// compressed the quiet objects: its quiet time x 1.25 and one round),
/// then kcache with background compression off, then kcache with its
/// opt-in compressed-at-ingest cache.
fn memory_runs() -> Vec<MemoryRun> {
    fn clients(res: &mut Results, strip: bool) -> &mut Vec<Report> {
        if strip {
            &mut res.memory_stripped
        } else {
            &mut res.memory
        }
    }
    fn bg_off(res: &mut Results, strip: bool) -> &mut Vec<Report> {
        if strip {
            &mut res.memory_bg_off_stripped
        } else {
            &mut res.memory_bg_off
        }
    }
    fn lz4(res: &mut Results, strip: bool) -> &mut Vec<Report> {
        if strip {
            &mut res.memory_compressed_stripped
        } else {
            &mut res.memory_compressed
        }
    }
    let mut runs: Vec<MemoryRun> = CLIENTS
        .iter()
        .map(|&client| MemoryRun {
            client,
            name: client.name(),
            args: if client == Impl::Kcache {
                &["--wait-compressed"]
            } else {
                &[]
            },
            results: clients,
        })
        .collect();
    runs.push(MemoryRun {
        client: Impl::Kcache,
        name: "kcache bg off",
        args: &["--background-compression", "off"],
        results: bg_off,
    });
    runs.push(MemoryRun {
        client: Impl::Kcache,
        name: "kcache LZ4",
        args: &["--compress", "--background-compression", "off"],
        results: lz4,
    });
    runs
}

/// A flag in the syntax of each client (Go's `flag` takes `-name=value`).
fn flag(client: Impl, name: &str, value: Option<&str>) -> String {
    let dash = if client == Impl::ClientGo { "-" } else { "--" };
    match value {
        Some(v) => format!("{dash}{name}={v}"),
        None => format!("{dash}{name}"),
    }
}

/// A running replay server; killed on drop.
struct Server {
    child: Child,
    kubeconfig: PathBuf,
    info: Value,
}

/// Whether the replay server answers each client's first watch with a
/// 410 (scenario (c)), and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    /// Never: every watch is served.
    Never,
    /// At once: a relist right after the list.
    AtOnce,
    /// After this long with the watch open: a relist of a settled cache.
    After(Duration),
}

/// (c'): how long the refused watch stays open before its 410: kcache's
/// default quiet time (30 s) x 1.25, one more compactor tick (7.5 s) and
/// a margin, so that the cache is compressed when the relist comes.
const SETTLED_RELIST_AFTER: Duration = Duration::from_secs(60);

impl Server {
    fn start(
        bins: &Bins,
        out: &Path,
        pods: usize,
        events: usize,
        gone: Gone,
    ) -> anyhow::Result<Server> {
        let mut cmd = Command::new(bins.release.join("replay"));
        cmd.args(["--pods", &pods.to_string(), "--events", &events.to_string()]);
        match gone {
            Gone::Never => {}
            Gone::AtOnce => {
                cmd.arg("--gone-once");
            }
            Gone::After(after) => {
                cmd.args(["--gone-once", "--gone-after-ms"])
                    .arg(after.as_millis().to_string());
            }
        }
        // protobuf bodies for the clients that ask for them (client-go's
        // default), encoded by the client-go client itself
        if bins.client_go.is_file() {
            cmd.arg("--protobuf-encoder").arg(&bins.client_go);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the replay server")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("replay stdout")?)
            .read_line(&mut line)
            .context("reading the replay server's address")?;
        let info: Value = serde_json::from_str(line.trim())
            .with_context(|| format!("the replay server printed {line:?}"))?;
        let addr = info["addr"].as_str().context("no addr")?.to_string();
        let kubeconfig = out.join(format!("kubeconfig-{}.yaml", addr.replace([':', '.'], "-")));
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: replay\n  cluster:\n    server: http://{addr}\n\
                 contexts:\n- name: replay\n  context:\n    cluster: replay\n    user: replay\n\
                 current-context: replay\nusers:\n- name: replay\n  user: {{}}\n"
            ),
        )?;
        Ok(Server {
            child,
            kubeconfig,
            info,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs one client to completion (or kills it at the timeout) and parses
/// its report. Its stderr goes to `log`.
fn run_client(cmd: Command, timeout: Duration, log: &Path) -> anyhow::Result<Report> {
    run_client_as(cmd, timeout, log)
}

/// [`run_client`] for a client that prints another JSON line.
fn run_client_as<T: serde::de::DeserializeOwned>(
    mut cmd: Command,
    timeout: Duration,
    log: &Path,
) -> anyhow::Result<T> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let stdout = child.stdout.take().context("stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stdout), &mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{cmd:?} did not finish in {timeout:?} (stderr in {})",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = reader.join().unwrap_or_default();
    if !status.success() {
        bail!("{cmd:?} failed ({status}); stderr in {}", log.display());
    }
    let last = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or("");
    serde_json::from_str(last).with_context(|| format!("{cmd:?} printed {out:?}"))
}

struct Progress {
    done: usize,
    total: usize,
    started: Instant,
}

impl Progress {
    fn tick(&mut self, what: &str, r: &Report, extra: &str) {
        self.done += 1;
        eprintln!(
            "[{:>2}/{}] {:>5.0}s  {what:<38} {:>10}/s  peak {:>7.1} MiB  steady {:>7.1} MiB{extra}",
            self.done,
            self.total,
            self.started.elapsed().as_secs_f64(),
            fmt_rate(r.events_per_sec),
            r.peak_rss_kb as f64 / 1024.0,
            r.steady_rss_kb as f64 / 1024.0,
        );
    }
}

#[derive(Debug, Default, Serialize)]
struct Results {
    settings: Option<Settings>,
    machine: Vec<(String, String)>,
    server: Value,
    ceiling: Value,
    ingest: Vec<Report>,
    memory: Vec<Report>,
    memory_stripped: Vec<Report>,
    /// kcache only, with its opt-in LZ4-compressed cache.
    memory_compressed: Vec<Report>,
    memory_compressed_stripped: Vec<Report>,
    /// kcache only, with background compression off (the default runs,
    /// in `ingest` and `memory`, have it on).
    ingest_bg_off: Vec<Report>,
    memory_bg_off: Vec<Report>,
    memory_bg_off_stripped: Vec<Report>,
    relist: Vec<Report>,
    /// (c'): kcache's relist of a settled cache.
    relist_settled: Vec<Report>,
    workqueue_1: Vec<Report>,
    workqueue_8: Vec<Report>,
    warm_restart: Vec<Value>,
    total_secs: f64,
}

fn med(runs: &[Report], client: Impl, f: impl Fn(&Report) -> f64) -> f64 {
    median(
        runs.iter()
            .filter(|r| r.client == client.name())
            .map(f)
            .collect(),
    )
}

/// [`med`] for each of [`CLIENTS`], in their order.
fn meds(runs: &[Report], f: impl Fn(&Report) -> f64) -> Vec<f64> {
    CLIENTS.iter().map(|&c| med(runs, c, &f)).collect()
}

/// Runs the comparison.
pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    let pods = args
        .pods
        .unwrap_or(if args.quick { 10_000 } else { 100_000 });
    let s = Settings {
        pods,
        events: args.events.unwrap_or(pods),
        reps: args.reps.unwrap_or(if args.quick { 3 } else { 5 }),
        onoff_pairs: if args.quick { 6 } else { 10 },
        mem_reps: if args.quick { 1 } else { 3 },
        keys: args.keys.unwrap_or(1_000_000),
        quick: args.quick,
        timeout: Duration::from_secs(if args.quick { 120 } else { 1200 }),
    };
    let out = target_dir().join("bench-compare");
    std::fs::create_dir_all(&out)?;
    if args.real {
        let pods = args.pods.unwrap_or(if args.quick { 4_000 } else { 20_000 });
        let rs = crate::bench_real::RealSettings {
            pods,
            reps: args.reps.unwrap_or(if args.quick { 3 } else { 5 }),
            updates: args
                .updates
                .unwrap_or(if args.quick { 1_000 } else { 5_000 }),
            update_rate: args
                .update_rate
                .unwrap_or(if args.quick { 200.0 } else { 250.0 }),
            update_reps: if args.quick { 1 } else { 3 },
            mem_reps: args.mem_reps.unwrap_or(if args.quick { 1 } else { 2 }),
            onoff_pairs: if args.quick { 3 } else { 10 },
            quick: args.quick,
            settle_ms: if args.quick { 500 } else { 1000 },
            clk_tck: crate::bench_real::clk_tck(),
        };
        if let Some(rev) = &args.json_baseline {
            let mut bins = bins(&out);
            if !args.no_build {
                build_rust(
                    "build kcache-client and real-load (release)",
                    &["--bin", "kcache-client", "--bin", "real-load"],
                )?;
            }
            bins.kcache_baseline = Some(crate::json_ab::build_baseline(rev)?);
            let pairs = rs.reps;
            return crate::json_ab::run(&bins, rev, rs, pairs, &out, args.write_docs);
        }
        let bins = build(&out, args.no_build)?;
        if args.custom_resources {
            return crate::bench_real_cr::run(&bins, rs, &out, args.write_docs);
        }
        return crate::bench_real::run(&bins, rs, &out, args.write_docs);
    }
    if args.only_warm_restart {
        return only_warm_restart(&out, &s, args.no_build);
    }
    let bins = build(&out, args.no_build)?;
    let log = out.join("clients.log");
    let _ = std::fs::remove_file(&log);
    let mut res = Results {
        machine: machine(),
        ..Results::default()
    };
    let total = 2
        + 4 * s.reps
        + 2 * s.onoff_pairs.saturating_sub(s.reps)
        + 3 * 3 * s.mem_reps
        + 2 * 2 * s.mem_reps
        + 2 * 2 * s.reps
        + 3 * s.mem_reps;
    let mut p = Progress {
        done: 0,
        total,
        started: Instant::now(),
    };
    eprintln!(
        "\n==> bench-compare: N={} Pods, M={} watch events, {} reps ({}), clients' stderr in {}",
        s.pods,
        s.events,
        s.reps,
        if s.quick { "quick" } else { "full" },
        log.display()
    );

    // The ceiling: serde_json on the same bytes.
    let mut cmd = Command::new(bins.release.join("decode-ceiling"));
    cmd.args([
        "--pods",
        &s.pods.to_string(),
        "--events",
        &s.events.to_string(),
    ]);
    let o = cmd
        .stderr(Stdio::inherit())
        .output()
        .context("decode-ceiling")?;
    res.ceiling = serde_json::from_slice(&o.stdout).context("decode-ceiling output")?;
    p.tick(
        "ceiling: serde_json IgnoredAny",
        &Report {
            events_per_sec: res.ceiling["ignored_any_per_sec"].as_f64().unwrap_or(0.0),
            ..Report::default()
        },
        "",
    );

    // (a) ingest.
    {
        let server = Server::start(&bins, &out, s.pods, s.events, Gone::Never)?;
        res.server = server.info.clone();
        let kcache = |background_compression: &str| {
            let mut cmd = bins.command(Impl::Kcache);
            cmd.env("KUBECONFIG", &server.kubeconfig).args([
                "--settle-ms",
                "0",
                "--background-compression",
                background_compression,
            ]);
            cmd
        };
        // The first run after the server started is slower whoever runs
        // it (the server's first replay): a warm-up, not counted.
        let r = run_client(kcache("on"), s.timeout, &log)?;
        p.tick("(a) ingest warm-up (not counted)", &r, "");
        // kcache with background compression on (the default) and off, one
        // right after the other, in alternating order (on/off, off/on,
        // ...): the on / off ratios are of these pairs. `what`: the log's
        // name of the pair ("#3", "pair #7").
        let run_pair =
            |pair: usize, what: &str, p: &mut Progress, res: &mut Results| -> anyhow::Result<()> {
                let order = if pair.is_multiple_of(2) {
                    ["on", "off"]
                } else {
                    ["off", "on"]
                };
                for bg in order {
                    let r = run_client(kcache(bg), s.timeout, &log)?;
                    if bg == "on" {
                        p.tick(&format!("(a) ingest kcache {what}"), &r, "");
                        res.ingest.push(r);
                    } else {
                        p.tick(&format!("(a) ingest kcache bg off {what}"), &r, "");
                        res.ingest_bg_off.push(r);
                    }
                }
                Ok(())
            };
        for rep in 0..s.reps {
            run_pair(rep, &format!("#{}", rep + 1), &mut p, &mut res)?;
            for c in [Impl::KubeRuntime, Impl::ClientGo] {
                let mut cmd = bins.command(c);
                cmd.env("KUBECONFIG", &server.kubeconfig)
                    .arg(flag(c, "settle-ms", Some("0")));
                let r = run_client(cmd, s.timeout, &log)?;
                p.tick(&format!("(a) ingest {} #{}", c.name(), rep + 1), &r, "");
                res.ingest.push(r);
            }
        }
        // More on / off pairs, back to back: runs of about a second on a
        // shared 2-core machine scatter (pairs' CPU ratios 0.60x-1.24x by
        // hand), and five pairs could not resolve 5%.
        for pair in s.reps..s.onoff_pairs {
            run_pair(pair, &format!("pair #{}", pair + 1), &mut p, &mut res)?;
        }
    }
    // (b) steady-state memory, without and with the transform.
    {
        let server = Server::start(&bins, &out, s.pods, 0, Gone::Never)?;
        for strip in [false, true] {
            for rep in 0..s.mem_reps {
                for run in memory_runs() {
                    let mut cmd = bins.command(run.client);
                    cmd.env("KUBECONFIG", &server.kubeconfig).args(run.args);
                    if strip {
                        cmd.arg(flag(run.client, "strip-managed-fields", None));
                    }
                    let r = run_client(cmd, s.timeout, &log)?;
                    let per = per_pod_kib(&r, s.pods);
                    let what = format!(
                        "(b) memory{} {} #{}",
                        if strip { " stripped" } else { "" },
                        run.name,
                        rep + 1
                    );
                    p.tick(&what, &r, &format!("  {per:.2} KiB/Pod"));
                    (run.results)(&mut res, strip).push(r);
                }
            }
        }
    }
    // (c) relist after a 410.
    {
        let server = Server::start(&bins, &out, s.pods, 0, Gone::AtOnce)?;
        for rep in 0..s.mem_reps {
            for c in CLIENTS {
                let mut cmd = bins.command(c);
                cmd.env("KUBECONFIG", &server.kubeconfig);
                let r = run_client(cmd, s.timeout, &log)?;
                p.tick(&format!("(c) relist {} #{}", c.name(), rep + 1), &r, "");
                res.relist.push(r);
            }
        }
    }
    // (c') kcache's relist of a settled cache: the 410 comes once the
    // cache is compressed; the peak RSS is reset then, so that it covers
    // the relist alone.
    {
        let server = Server::start(&bins, &out, s.pods, 0, Gone::After(SETTLED_RELIST_AFTER))?;
        for rep in 0..s.mem_reps {
            let mut cmd = bins.command(Impl::Kcache);
            cmd.env("KUBECONFIG", &server.kubeconfig)
                .arg("--reset-peak-when-compressed");
            let r = run_client(cmd, s.timeout.max(SETTLED_RELIST_AFTER * 3), &log)?;
            let note = if r.peak_reset_secs > 0.0 && r.updates_at_peak_reset == 0 {
                format!("  peak reset at {:.0}s", r.peak_reset_secs)
            } else {
                "  peak NOT reset before the relist: not counted".to_string()
            };
            p.tick(
                &format!("(c') settled relist kcache #{}", rep + 1),
                &r,
                &note,
            );
            res.relist_settled.push(r);
        }
    }
    // (d) workqueue.
    for workers in [1usize, 8] {
        for rep in 0..s.reps {
            for c in [Impl::Kcache, Impl::ClientGo] {
                let mut cmd = bins.command(c);
                cmd.args([
                    flag(c, "scenario", Some("workqueue")),
                    flag(c, "keys", Some(&s.keys.to_string())),
                    flag(c, "workers", Some(&workers.to_string())),
                ]);
                let r = run_client(cmd, s.timeout, &log)?;
                p.tick(
                    &format!("(d) workqueue {workers}w {} #{}", c.name(), rep + 1),
                    &r,
                    "",
                );
                if workers == 1 {
                    res.workqueue_1.push(r);
                } else {
                    res.workqueue_8.push(r);
                }
            }
        }
    }
    // (e) warm restart (kcache only).
    warm_restart(&bins, &out, &s, &log, &mut p, &mut res.warm_restart)?;
    res.total_secs = p.started.elapsed().as_secs_f64();
    res.settings = Some(s.clone());
    res.machine
        .push(("load average at the end".into(), loadavg()));

    let md = markdown(&res, &s) + &warm_restart_markdown(&res.warm_restart, &s);
    write_results(&out, "results", &md, &res)?;
    let svg = plot(&res, &s);
    std::fs::write(out.join("compare.svg"), &svg)?;
    eprintln!(
        "==> bench-compare: done in {:.0}s; results.md, results.json and compare.svg in {}",
        res.total_secs,
        out.display()
    );
    if args.write_docs {
        write_docs(&md, &svg)?;
    }
    Ok(())
}

/// Where the clients are (built or not).
fn bins(out: &Path) -> Bins {
    Bins {
        release: target_dir().join("release"),
        client_go: out.join("client-go-bench"),
        kcache_baseline: None,
    }
}

/// `cargo build --release` of kcache-bench-compare (`extra`: which binaries).
fn build_rust(what: &str, extra: &[&str]) -> anyhow::Result<()> {
    let mut cmd = clean_cargo();
    cmd.args([
        "build",
        "--release",
        "-j",
        "2",
        "-p",
        "kcache-bench-compare",
    ])
    .args(extra);
    step(what, cmd).map(drop)
}

fn build(out: &Path, no_build: bool) -> anyhow::Result<Bins> {
    let bins = bins(out);
    if no_build {
        return Ok(bins);
    }
    build_rust(
        "build the Rust clients and the replay server (release)",
        &[],
    )?;
    let mut go = Command::new("go");
    go.current_dir(workspace_root().join("benches/compare/client-go"))
        .args(["build", "-mod=readonly", "-o"])
        .arg(&bins.client_go)
        .arg(".");
    step("build the client-go client (Go, client-go v0.37.2)", go)?;
    Ok(bins)
}

/// Scenario (e) alone: `cargo xtask bench-compare --only-warm-restart`.
fn only_warm_restart(out: &Path, s: &Settings, no_build: bool) -> anyhow::Result<()> {
    let bins = bins(out);
    if !no_build {
        build_rust(
            "build the replay server and the warm-restart client (release)",
            &["--bin", "replay", "--bin", "warm-restart"],
        )?;
    }
    let log = out.join("clients.log");
    let _ = std::fs::remove_file(&log);
    let mut p = Progress {
        done: 0,
        total: 2 * s.mem_reps,
        started: Instant::now(),
    };
    eprintln!(
        "\n==> bench-compare (e) warm restart: N={} Pods, {} reps, clients' stderr in {}",
        s.pods,
        s.mem_reps,
        log.display()
    );
    let mut runs = Vec::new();
    warm_restart(&bins, out, s, &log, &mut p, &mut runs)?;
    let md = warm_restart_markdown(&runs, s);
    write_results(out, "warm-restart", &md, &runs)
}

/// Prints the tables `md` and writes them as `out/{name}.md`, with the
/// results they come from as `out/{name}.json`.
fn write_results(out: &Path, name: &str, md: &str, results: &impl Serialize) -> anyhow::Result<()> {
    println!("\n{md}");
    std::fs::write(out.join(format!("{name}.md")), md)?;
    std::fs::write(
        out.join(format!("{name}.json")),
        serde_json::to_string_pretty(results)?,
    )?;
    Ok(())
}

/// (e) warm restart, kcache only: a cold start lists N Pods and writes a
/// snapshot when it stops; a warm start (a new process) loads it and
/// resumes the watch. Each reports the time from `run` to synced, the peak
/// RSS at that point, and the snapshot write on stop.
fn warm_restart(
    bins: &Bins,
    out: &Path,
    s: &Settings,
    log: &Path,
    p: &mut Progress,
    runs: &mut Vec<Value>,
) -> anyhow::Result<()> {
    let server = Server::start(bins, out, s.pods, 0, Gone::Never)?;
    let dir = out.join("warm-restart-snapshots");
    for rep in 0..s.mem_reps {
        let _ = std::fs::remove_dir_all(&dir);
        for phase in ["cold", "warm"] {
            let mut cmd = Command::new(bins.release.join("warm-restart"));
            cmd.env_remove("RUST_LOG")
                .env("KUBECONFIG", &server.kubeconfig)
                .arg("--snapshot-dir")
                .arg(&dir);
            let v: Value = run_client_as(cmd, s.timeout, log)?;
            if v["start"].as_str() != Some(phase) {
                bail!("(e) expected a {phase} start, the client reported {v}");
            }
            let secs = v["secs_to_synced"].as_f64().unwrap_or(f64::NAN);
            let cached = v["cached"].as_u64().unwrap_or(0);
            let r = Report {
                events: cached,
                secs,
                events_per_sec: cached as f64 / secs,
                peak_rss_kb: v["peak_rss_kb"].as_u64().unwrap_or(0),
                ..Report::default()
            };
            let extra = format!(
                "  synced in {secs:.2}s, snapshot written in {:.2}s ({:.1} MiB)",
                v["snapshot_write_secs"].as_f64().unwrap_or(f64::NAN),
                v["snapshot_bytes"].as_f64().unwrap_or(f64::NAN) / 1048576.0
            );
            p.tick(
                &format!("(e) warm restart {phase} #{}", rep + 1),
                &r,
                &extra,
            );
            runs.push(v);
        }
    }
    Ok(())
}

fn warm_restart_markdown(runs: &[Value], s: &Settings) -> String {
    let med_of = |phase: &str, field: &str| {
        median(
            runs.iter()
                .filter(|v| v["start"].as_str() == Some(phase))
                .filter_map(|v| v[field].as_f64())
                .collect(),
        )
    };
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\n(e) warm restart, kcache, N = {} Pods (medians of {} runs): time from `run` to synced, \
         peak RSS at that point, and the snapshot written when the informer stops.\n",
        s.pods, s.mem_reps
    );
    t.push_str("| start | time to synced | peak RSS | snapshot write | snapshot size |\n");
    t.push_str("| --- | ---: | ---: | ---: | ---: |\n");
    for phase in ["cold", "warm"] {
        let _ = writeln!(
            t,
            "| {phase} | {:.2} s | {:.1} MiB | {:.2} s | {:.1} MiB |",
            med_of(phase, "secs_to_synced"),
            med_of(phase, "peak_rss_kb") / 1024.0,
            med_of(phase, "snapshot_write_secs"),
            med_of(phase, "snapshot_bytes") / 1048576.0,
        );
    }
    let _ = writeln!(
        t,
        "\nwarm / cold: time to synced {:.2}x, peak RSS {:.2}x",
        med_of("warm", "secs_to_synced") / med_of("cold", "secs_to_synced"),
        med_of("warm", "peak_rss_kb") / med_of("cold", "peak_rss_kb"),
    );
    t
}

fn per_pod_kib(r: &Report, pods: usize) -> f64 {
    (r.steady_rss_kb.saturating_sub(r.baseline_rss_kb)) as f64 / pods.max(1) as f64
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "n/a".into()
    }
}

/// A mean object size the replay server reported (`avg_pod_bytes...`), in
/// KiB; NaN if it did not.
fn server_kib(res: &Results, field: &str) -> f64 {
    res.server[field].as_f64().unwrap_or(f64::NAN) / 1024.0
}

fn cell(v: f64, fmt: impl Fn(f64) -> String) -> String {
    if v.is_finite() { fmt(v) } else { "n/a".into() }
}

fn markdown(res: &Results, s: &Settings) -> String {
    let mib = |kb: u64| kb as f64 / 1024.0;
    let pods = s.pods;
    let ev = |r: &Report| r.events_per_sec;
    let json_kib = server_kib(res, "avg_pod_bytes");
    let json_stripped_kib = server_kib(res, "avg_pod_bytes_stripped");
    let mut t = String::new();
    let _ = writeln!(
        t,
        "N = {} Pods (mean {:.0} bytes of JSON each, {:.0} without managedFields), M = {} watch events; \
         {} runs per client in (a) and (d) (kcache's background compression on and off: {} pairs), {} in (b) and (c); medians. Total {:.0}s.\n",
        s.pods,
        json_kib * 1024.0,
        json_stripped_kib * 1024.0,
        s.events,
        s.reps,
        s.onoff_pairs.max(s.reps),
        s.mem_reps,
        res.total_secs
    );
    t.push_str("| scenario | kcache | kube-runtime | client-go | kcache / kube-runtime | kcache / client-go | goal |\n");
    t.push_str("|---|---:|---:|---:|---:|---:|---|\n");
    let row = |t: &mut String,
               name: &str,
               runs: &[Report],
               f: &dyn Fn(&Report) -> f64,
               fmt: &dyn Fn(f64) -> String,
               goal: &str| {
        let v = meds(runs, f);
        let _ = writeln!(
            t,
            "| {name} | {} | {} | {} | {} | {} | {goal} |",
            cell(v[0], fmt),
            cell(v[1], fmt),
            cell(v[2], fmt),
            ratio(v[0], v[1]),
            ratio(v[0], v[2])
        );
        v
    };
    let rate = |v: f64| format!("{}/s", fmt_rate(v));
    let mibf = |v: f64| format!("{v:.1} MiB");
    let kibf = |v: f64| format!("{v:.2} KiB");
    row(
        &mut t,
        "(a) ingest N + M events, events/s",
        &res.ingest,
        &ev,
        &rate,
        "≥ 5x both",
    );
    row(
        &mut t,
        "(a) ingest: peak RSS",
        &res.ingest,
        &|r| mib(r.peak_rss_kb),
        &mibf,
        "",
    );
    // kcache's compressed runs against the same kube-runtime and client-go runs
    let with_compressed = |kcache: &[Report], others: &[Report]| -> Vec<Report> {
        kcache
            .iter()
            .chain(others.iter().filter(|r| r.client != "kcache"))
            .cloned()
            .collect()
    };
    let per_pod_rows = [
        (
            "(b) steady RSS per cached Pod (kcache: default, background compression, sampled after its quiet time)",
            res.memory.clone(),
        ),
        (
            "(b) same, managedFields stripped",
            res.memory_stripped.clone(),
        ),
        (
            "(b) kcache with its LZ4-compressed cache (opt-in)",
            with_compressed(&res.memory_compressed, &res.memory),
        ),
        (
            "(b) same, managedFields stripped",
            with_compressed(&res.memory_compressed_stripped, &res.memory_stripped),
        ),
    ];
    let [b, bs, bc, bcs] = per_pod_rows.map(|(name, runs)| {
        let per_pod = |r: &Report| per_pod_kib(r, pods);
        row(&mut t, name, &runs, &per_pod, &kibf, "≤ 0.25x both")
    });
    for (name, runs) in [
        (
            "(b) kcache with background compression off",
            with_compressed(&res.memory_bg_off, &res.memory),
        ),
        (
            "(b) same, managedFields stripped",
            with_compressed(&res.memory_bg_off_stripped, &res.memory_stripped),
        ),
    ] {
        let per_pod = |r: &Report| per_pod_kib(r, pods);
        row(&mut t, name, &runs, &per_pod, &kibf, "");
    }
    // the medians per client, as in the rows
    let steady = row(
        &mut t,
        "(b) steady RSS, N cached",
        &res.memory,
        &|r| mib(r.steady_rss_kb),
        &mibf,
        "",
    );
    let peaks = row(
        &mut t,
        "(c) relist after 410: peak RSS",
        &res.relist,
        &|r| mib(r.peak_rss_kb),
        &mibf,
        "",
    );
    // (c)'s relist comes right after the list: kcache's cache is still
    // plain then (background compression waits 30 s), so its peak is set
    // against the steady RSS of a plain cache (background compression
    // off); (c') is the relist of a compressed cache.
    let plain_steady = median(
        res.memory_bg_off
            .iter()
            .map(|r| mib(r.steady_rss_kb))
            .collect(),
    );
    let mut pr: Vec<f64> = peaks.iter().zip(&steady).map(|(p, s)| p / s).collect();
    pr[0] = peaks[0] / plain_steady;
    let _ = writeln!(
        t,
        "| (c) relist peak / (b) steady RSS (kcache: of a plain cache, background compression off: the relist comes before compression) | {:.2}x | {:.2}x | {:.2}x | | | kcache ≤ 1.5x |",
        pr[0], pr[1], pr[2]
    );
    let settled: Vec<f64> = res
        .relist_settled
        .iter()
        .filter(|r| r.peak_reset_secs > 0.0 && r.updates_at_peak_reset == 0)
        .map(|r| mib(r.peak_rss_kb))
        .collect();
    if !res.relist_settled.is_empty() {
        let peak = median(settled.clone());
        let _ = writeln!(
            t,
            "| (c') kcache: relist of a compressed cache (410 after {} s), peak RSS from the compressed cache on / (b) steady RSS (default) | {} | n/a | n/a | | | kcache ≤ 1.5x |",
            SETTLED_RELIST_AFTER.as_secs(),
            if settled.is_empty() {
                "n/a (peak not reset before the relist)".to_string()
            } else {
                format!(
                    "{:.1} MiB / {:.1} MiB = {:.2}x",
                    peak,
                    steady[0],
                    peak / steady[0]
                )
            }
        );
    }
    row(
        &mut t,
        "(d) workqueue, 1 worker, items/s",
        &res.workqueue_1,
        &ev,
        &rate,
        "≥ 2x client-go",
    );
    row(
        &mut t,
        "(d) workqueue, 8 workers, items/s",
        &res.workqueue_8,
        &ev,
        &rate,
        "≥ 2x client-go",
    );
    // kcache's own accounting of a cached object, KiB, median over runs
    let heap_kib = |runs: &[Report]| {
        median(
            runs.iter()
                .filter(|r| r.client == "kcache" && r.cached > 0)
                .map(|r| r.object_heap_bytes as f64 / r.cached as f64 / 1024.0)
                .collect(),
        )
    };
    let heap = heap_kib(&res.memory);
    let heap_stripped = heap_kib(&res.memory_stripped);
    let _ = writeln!(
        t,
        "\nkcache's own accounting of a cached object (`CachedObject::heap_size`: bytes + extracted metadata): \
         {heap:.2} KiB = {:.2}x its JSON; stripped {heap_stripped:.2} KiB = {:.2}x. The rest of the RSS per Pod is \
         the cache's maps and indexes, allocator overhead and buffers.",
        heap / json_kib,
        heap_stripped / json_stripped_kib
    );
    t.push_str(&background_compression_summary(
        res,
        s,
        json_kib,
        json_stripped_kib,
        [b[2], bs[2]],
    ));
    let c = &res.ceiling;
    let _ = writeln!(
        t,
        "\nkcache memory per cached Pod vs its JSON: {:.2}x ({:.2} KiB / {:.2} KiB; goal ≤ 1.3x); stripped: {:.2}x ({:.2} KiB / {:.2} KiB).",
        b[0] / json_kib,
        b[0],
        json_kib,
        bs[0] / json_stripped_kib,
        bs[0],
        json_stripped_kib
    );
    let _ = writeln!(
        t,
        "\nWith the opt-in LZ4-compressed cache (`ObjectOptions::compression(Compression::lz4())`): {:.2}x its JSON ({:.2} KiB); stripped: {:.2}x ({:.2} KiB).",
        bc[0] / json_kib,
        bc[0],
        bcs[0] / json_stripped_kib,
        bcs[0],
    );
    let _ = writeln!(
        t,
        "\nCeiling, serde_json on the same bytes (1 thread, no network, no cache): parse only (IgnoredAny) {}/s, \
         serde_json::Value {}/s, k8s-openapi Pod {}/s.",
        fmt_rate(c["ignored_any_per_sec"].as_f64().unwrap_or(f64::NAN)),
        fmt_rate(c["value_per_sec"].as_f64().unwrap_or(f64::NAN)),
        fmt_rate(c["pod_per_sec"].as_f64().unwrap_or(f64::NAN)),
    );
    t.push_str("\nMachine:");
    for (k, v) in &res.machine {
        let _ = write!(t, " {k}: {v};");
    }
    t.push('\n');
    t
}

/// The median of `f(on) / f(off)` over kcache's runs of `on` and `off`
/// taken in pairs (the i-th of each: runs one right after the other).
fn paired_ratio(on: &[Report], off: &[Report], f: &dyn Fn(&Report) -> f64) -> f64 {
    let kcache = |runs: &[Report]| -> Vec<f64> {
        runs.iter()
            .filter(|r| r.client == "kcache")
            .map(f)
            .collect()
    };
    median(
        kcache(on)
            .into_iter()
            .zip(kcache(off))
            .map(|(a, b)| a / b)
            .collect(),
    )
}

/// Issue 20's figures for background compression: kcache's default
/// (on) against the same build with it off, per cached Pod by RSS and by
/// the allocator's count of live heap bytes, against client-go and the
/// JSON received; ingest rate and CPU per event, on and off.
fn background_compression_summary(
    res: &Results,
    s: &Settings,
    json_kib: f64,
    json_stripped_kib: f64,
    client_go_kib: [f64; 2],
) -> String {
    let pods = s.pods.max(1) as f64;
    let kc = |runs: &[Report], f: &dyn Fn(&Report) -> f64| {
        median(
            runs.iter()
                .filter(|r| r.client == "kcache")
                .map(f)
                .collect(),
        )
    };
    let rss = |r: &Report| per_pod_kib(r, s.pods);
    let heap =
        |r: &Report| r.heap_live_bytes.saturating_sub(r.baseline_heap_bytes) as f64 / pods / 1024.0;
    // what kcache receives (the replay server serves protobuf, as the
    // apiserver does), with managedFields
    let proto_kib = server_kib(res, "avg_pod_bytes_protobuf");
    let mut t = String::new();
    let _ = writeln!(
        t,
        "\nBackground compression (issue 20; kcache's default: objects quiet for 30 s are LZ4-compressed; \
         the default runs of (b) wait its quiet time x 1.25 and one round, median {:.0} s, before the steady sample; \
         heap = live bytes by the kcache client's counting allocator, less those before the informer started):\n",
        kc(&res.memory, &|r| r.waited_secs)
    );
    t.push_str("| per cached Pod | default (on) | off | on / off | on / client-go RSS | on / the Pod's JSON | on / protobuf received |\n");
    t.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for (name, on, off, go, json) in [
        (
            "(b) RSS",
            &res.memory,
            &res.memory_bg_off,
            client_go_kib[0],
            json_kib,
        ),
        (
            "(b) heap (allocator)",
            &res.memory,
            &res.memory_bg_off,
            client_go_kib[0],
            json_kib,
        ),
        (
            "(b) RSS, managedFields stripped",
            &res.memory_stripped,
            &res.memory_bg_off_stripped,
            client_go_kib[1],
            json_stripped_kib,
        ),
        (
            "(b) heap (allocator), stripped",
            &res.memory_stripped,
            &res.memory_bg_off_stripped,
            client_go_kib[1],
            json_stripped_kib,
        ),
    ] {
        let f: &dyn Fn(&Report) -> f64 = if name.contains("heap") { &heap } else { &rss };
        let (a, b) = (kc(on, f), kc(off, f));
        let _ = writeln!(
            t,
            "| {name} | {a:.2} KiB | {b:.2} KiB | {} | {} | {} | {} |",
            ratio(a, b),
            ratio(a, go),
            ratio(a, json),
            ratio(a, proto_kib)
        );
    }
    let rate = |r: &Report| r.events_per_sec;
    let cpu_us = |r: &Report| {
        if r.events > 0 && r.cpu_secs > 0.0 {
            r.cpu_secs / r.events as f64 * 1e6
        } else {
            f64::NAN
        }
    };
    let (ra, rb) = (kc(&res.ingest, &rate), kc(&res.ingest_bg_off, &rate));
    let (ca, cb) = (kc(&res.ingest, &cpu_us), kc(&res.ingest_bg_off, &cpu_us));
    let (pr, pc) = (
        paired_ratio(&res.ingest, &res.ingest_bg_off, &rate),
        paired_ratio(&res.ingest, &res.ingest_bg_off, &cpu_us),
    );
    let _ = writeln!(
        t,
        "| (a) ingest, events/s (on / off: median of the adjacent pairs' ratios) | {}/s | {}/s | {} | | | |",
        fmt_rate(ra),
        fmt_rate(rb),
        ratio(pr, 1.0)
    );
    let _ = writeln!(
        t,
        "| (a) client CPU per event (start to end marker; idem) | {ca:.2} µs | {cb:.2} µs | {} | | | |",
        ratio(pc, 1.0)
    );
    let compressed = kc(&res.memory, &|r| r.bg_compressed as f64);
    let busy = kc(&res.memory, &|r| r.bg_busy_secs);
    let _ = writeln!(
        t,
        "\nBackground compression's work in (b): {compressed:.0} objects compressed in {:.0} ms ({:.2} µs per object, on a runtime thread, after ingest).",
        busy * 1e3,
        busy / compressed.max(1.0) * 1e6
    );
    t
}

/// A hand-written SVG: events/s of (a), and RSS of (a), (b) and (c), for
/// the three clients.
fn plot(res: &Results, s: &Settings) -> String {
    const COLORS: [&str; 3] = ["#d9480f", "#1971c2", "#2f9e44"];
    let mib = |kb: u64| kb as f64 / 1024.0;
    let rates = meds(&res.ingest, |r| r.events_per_sec);
    let groups: Vec<(&str, Vec<f64>)> = vec![
        ("(a) ingest peak", meds(&res.ingest, |r| mib(r.peak_rss_kb))),
        ("(b) steady", meds(&res.memory, |r| mib(r.steady_rss_kb))),
        (
            "(b) steady, stripped",
            meds(&res.memory_stripped, |r| mib(r.steady_rss_kb)),
        ),
        ("(c) relist peak", meds(&res.relist, |r| mib(r.peak_rss_kb))),
    ];
    let (w, h) = (960.0, 420.0);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">kcache vs kube-runtime vs client-go: {} Pods listed + {} watch events (medians)</text>"#,
        w / 2.0,
        s.pods,
        s.events
    );
    // Legend.
    for (i, c) in CLIENTS.iter().enumerate() {
        let x = 330.0 + i as f64 * 120.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="34" width="12" height="12" fill="{}"/><text x="{}" y="45">{}</text>"#,
            COLORS[i],
            x + 16.0,
            c.name()
        );
    }
    let panel = |svg: &mut String,
                 x0: f64,
                 pw: f64,
                 title: &str,
                 groups: &[(&str, Vec<f64>)],
                 fmt: &dyn Fn(f64) -> String| {
        let (y0, ph) = (80.0, 280.0);
        let max = groups
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max)
            .max(1e-9);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="13">{title}</text>"#,
            x0 + pw / 2.0,
            y0 - 12.0
        );
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" y1="{}" x2="{}" y2="{}" stroke="#333"/>"##,
            y0 + ph,
            x0 + pw,
            y0 + ph
        );
        let gw = pw / groups.len() as f64;
        for (g, (label, vals)) in groups.iter().enumerate() {
            let gx = x0 + g as f64 * gw;
            let bw = (gw * 0.8) / 3.0;
            for (i, v) in vals.iter().enumerate() {
                let v = if v.is_finite() { *v } else { 0.0 };
                let bh = ph * v / max;
                let x = gx + gw * 0.1 + i as f64 * bw;
                let y = y0 + ph - bh;
                let _ = writeln!(
                    svg,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{bh:.1}" fill="{}"/>"#,
                    bw - 2.0,
                    COLORS[i]
                );
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                    x + bw / 2.0 - 1.0,
                    y - 3.0,
                    fmt(v)
                );
            }
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{label}</text>"#,
                gx + gw / 2.0,
                y0 + ph + 18.0
            );
        }
    };
    panel(
        &mut svg,
        40.0,
        280.0,
        "(a) ingest, events/s (higher is better)",
        &[("events/s", rates)],
        &|v| fmt_rate(v).trim().to_string(),
    );
    panel(
        &mut svg,
        380.0,
        550.0,
        "RSS, MiB (lower is better)",
        &groups,
        &|v| format!("{v:.0}"),
    );
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" text-anchor="middle" font-size="10" fill="#555">cargo xtask bench-compare{}; machine and method: docs/performance.md</text>"##,
        w / 2.0,
        h - 12.0,
        if s.quick { " --quick" } else { "" }
    );
    svg.push_str("</svg>\n");
    svg
}

const BEGIN: &str = "<!-- bench-compare:begin -->";
const END: &str = "<!-- bench-compare:end -->";

fn write_docs(md: &str, svg: &str) -> anyhow::Result<()> {
    let docs = workspace_root().join("docs");
    let path = docs.join("performance.md");
    replace_marked_block(&path, BEGIN, END, md)?;
    std::fs::write(docs.join("performance-compare.svg"), svg)?;
    eprintln!(
        "==> wrote {} and docs/performance-compare.svg",
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn table_and_plot_render() {
        let s = Settings {
            pods: 10,
            events: 10,
            reps: 1,
            onoff_pairs: 1,
            mem_reps: 1,
            keys: 10,
            quick: true,
            timeout: Duration::from_secs(1),
        };
        let mk = |c: Impl, ev: f64| Report {
            client: c.name().into(),
            events: 21,
            secs: 1.0,
            events_per_sec: ev,
            peak_rss_kb: 4096,
            steady_rss_kb: 2048,
            baseline_rss_kb: 1024,
            cached: 10,
            object_heap_bytes: 10 * 4096,
            ..Report::default()
        };
        let runs: Vec<Report> = CLIENTS.iter().map(|&c| mk(c, 100.0)).collect();
        let res = Results {
            server: serde_json::json!({"avg_pod_bytes": 5000, "avg_pod_bytes_stripped": 3500}),
            ingest: runs.clone(),
            memory: runs.clone(),
            memory_stripped: runs.clone(),
            memory_compressed: vec![Report {
                steady_rss_kb: 1034,
                ..mk(Impl::Kcache, 0.0)
            }],
            relist: runs.clone(),
            workqueue_1: vec![mk(Impl::Kcache, 200.0), mk(Impl::ClientGo, 100.0)],
            workqueue_8: vec![mk(Impl::Kcache, 200.0), mk(Impl::ClientGo, 100.0)],
            ..Results::default()
        };
        let md = markdown(&res, &s);
        assert!(
            md.contains(
                "| (d) workqueue, 1 worker, items/s | 200.0 /s | n/a | 100.0 /s | n/a | 2.00x |"
            ),
            "{md}"
        );
        // the compressed kcache row is set against the same other clients
        assert!(
            md.contains("| (b) kcache with its LZ4-compressed cache (opt-in) | 1.00 KiB | 102.40 KiB | 102.40 KiB | 0.01x | 0.01x |"),
            "{md}"
        );
        let svg = plot(&res, &s);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}
