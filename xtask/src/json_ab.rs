//! `cargo xtask bench-compare --real --json-baseline REV`: kcache's JSON
//! path against the same client built from an earlier commit, on one
//! control plane, in one session (issue 31: "kcache's JSON path no worse
//! than today's").
//!
//! The baseline is checked out with `git worktree` under
//! `target/bench-compare/baseline-src`, and its `kcache-client` built there
//! (its own target directory, so the two builds never overwrite each other).
//! Then the real kube-apiserver is loaded with N Pods and the two clients
//! sync them with `--wire-format json`, one right after the other in
//! alternating order (ABBA), paged and streaming, and once more each for
//! steady memory. The table gives both builds' medians and the median of the
//! per-pair ratios (this build / baseline).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::bench::{clean_cargo, target_dir};
use crate::bench_common::{Bins, machine, median};
use crate::bench_real::{
    Load, Mode, RealClient, RealResults, RealSettings, SyncRun, finish, mem_row, start_plane,
    summary, sync_table,
};
use crate::run::{step, workspace_root};

const BEGIN: &str = "<!-- json-ab:begin -->";
const END: &str = "<!-- json-ab:end -->";

/// The two clients, baseline first.
const AB: [RealClient; 2] = [RealClient::KcacheJsonBaseline, RealClient::KcacheJson];

/// Checks out `rev` and builds its `kcache-client` (release); returns the
/// binary's path.
pub fn build_baseline(rev: &str) -> anyhow::Result<PathBuf> {
    let root = workspace_root();
    let out = target_dir().join("bench-compare");
    let src = out.join("baseline-src");
    let sha = git(
        &root,
        &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
    )
    .with_context(|| format!("--json-baseline {rev}: not a commit of this repository"))?;
    let here = git(&src, &["rev-parse", "HEAD"]).unwrap_or_default();
    if here != sha {
        let _ = std::fs::remove_dir_all(&src);
        let _ = git(&root, &["worktree", "prune"]);
        let mut add = Command::new("git");
        add.current_dir(&root)
            .args(["worktree", "add", "-f", "--detach"])
            .arg(&src)
            .arg(&sha);
        step(&format!("check out the baseline {rev} ({sha:.10})"), add)?;
    }
    let mut build = clean_cargo();
    build
        .current_dir(&src)
        .env("CARGO_TARGET_DIR", out.join("baseline-target"))
        .args([
            "build",
            "--release",
            "-j",
            "2",
            "-p",
            "kcache-bench-compare",
        ])
        .args(["--bin", "kcache-client"]);
    step(&format!("build kcache-client at {rev} (release)"), build)?;
    let bin = out.join("baseline-target/release/kcache-client");
    if !bin.is_file() {
        bail!("the baseline build left no {}", bin.display());
    }
    Ok(bin)
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let o = Command::new("git").current_dir(dir).args(args).output()?;
    if !o.status.success() {
        bail!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Runs the A/B: `pairs` pairs per sync mode, `s.mem_reps` pairs for steady
/// memory.
pub fn run(
    bins: &Bins,
    rev: &str,
    s: RealSettings,
    pairs: usize,
    out: &Path,
    write_docs: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let log = out.join("json-ab-clients.log");
    let _ = std::fs::remove_file(&log);
    let audit_log = out.join("json-ab-audit.log");
    let mut res = RealResults {
        machine: machine(),
        ..RealResults::default()
    };
    eprintln!(
        "\n==> bench-compare --real --json-baseline {rev}: N={} Pods, {pairs} pairs per mode, {} for memory; clients' stderr in {}",
        s.pods,
        s.mem_reps,
        log.display()
    );
    let plane = start_plane(bins, &s, out, &audit_log, false, &mut res)?;
    let ctx = plane.ctx(bins, &log, &audit_log, &s, out);
    let total = 2 * 2 * pairs + 2 * s.mem_reps;
    let mut done = 0usize;
    let t0 = Instant::now();
    let mut logged = |r: &SyncRun, what: &str, n: usize| {
        done += 1;
        eprintln!(
            "[{done:>2}/{total}] {:>4.0}s  {what:<9} {:<40} #{n}: {}",
            t0.elapsed().as_secs_f64(),
            r.client.label(),
            summary(r, s.pods)
        );
    };
    for mode in [Mode::Paged, Mode::Streaming] {
        // the first sync after a load or a mode change is the slowest
        // whoever runs it: a warm-up, not counted
        ctx.run_one(RealClient::KcacheJson, mode, Load::Sync)?;
        std::thread::sleep(Duration::from_secs(if s.quick { 2 } else { 5 }));
        for pair in 0..pairs {
            for c in order(pair) {
                let r = ctx.run_one(c, mode, Load::Sync)?;
                logged(&r, mode.name(), pair + 1);
                res.syncs.push(r);
            }
        }
    }
    for pair in 0..s.mem_reps {
        for c in order(pair) {
            let r = ctx.run_one(c, Mode::Paged, Load::Memory)?;
            logged(&r, "memory", pair + 1);
            res.memory.push(r);
        }
    }
    drop(plane);
    res.total_secs = started.elapsed().as_secs_f64();
    finish(
        &mut res,
        |res| markdown(res, &s, rev),
        out,
        "json-ab",
        "--real --json-baseline",
        write_docs.then_some((BEGIN, END)),
    )
}

/// ABBA: the baseline first in even pairs, this build first in odd ones.
fn order(pair: usize) -> [RealClient; 2] {
    let mut o = AB;
    if pair % 2 == 1 {
        o.swap(0, 1);
    }
    o
}

/// The median over pairs of `f(this build) / f(baseline)`; runs pair up in
/// the order they ran.
fn paired(runs: &[SyncRun], mode: Mode, f: &dyn Fn(&SyncRun) -> f64) -> f64 {
    paired_where(runs, mode, f, &|_, _| true).0
}

/// How far apart the apiserver's CPU per object of a pair's two runs may
/// be for the pair to count as "the same apiserver speed": the
/// apiserver's cost for the same request is bimodal (for the JSON watch,
/// about 190 or about 310 us per object in both builds), and the client's
/// CPU per object follows it (a slow server sends the same bytes in more,
/// smaller reads).
const SAME_SPEED: f64 = 0.15;

/// Like [`paired`], over the pairs whose two runs met the apiserver at
/// the same speed (see [`SAME_SPEED`]); and how many pairs that is.
fn paired_same_speed(runs: &[SyncRun], mode: Mode, f: &dyn Fn(&SyncRun) -> f64) -> (f64, usize) {
    paired_where(runs, mode, f, &|b, h| {
        let (b, h) = (b.apiserver_cpu_secs, h.apiserver_cpu_secs);
        b > 0.0 && (h / b - 1.0).abs() <= SAME_SPEED
    })
}

/// The median of `f(this build) / f(baseline)` over the pairs (in run
/// order) that `keep(baseline, this build)` accepts, and their count.
fn paired_where(
    runs: &[SyncRun],
    mode: Mode,
    f: &dyn Fn(&SyncRun) -> f64,
    keep: &dyn Fn(&SyncRun, &SyncRun) -> bool,
) -> (f64, usize) {
    let of = |c: RealClient| -> Vec<&SyncRun> {
        runs.iter()
            .filter(|r| r.client == c && r.mode == mode)
            .collect()
    };
    let (base, head) = (
        of(RealClient::KcacheJsonBaseline),
        of(RealClient::KcacheJson),
    );
    let ratios: Vec<f64> = base
        .iter()
        .zip(&head)
        .filter(|(b, h)| keep(b, h) && f(b) > 0.0)
        .map(|(b, h)| f(h) / f(b))
        .collect();
    let n = ratios.len();
    if ratios.is_empty() {
        (f64::NAN, 0)
    } else {
        (median(ratios), n)
    }
}

/// The A/B tables: both builds' sync rows, the paired ratios, steady memory.
pub fn markdown(res: &RealResults, s: &RealSettings, rev: &str) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "kcache's JSON path (`--wire-format json`) at `{rev}` (baseline build) and at this build, against the real kube-apiserver, same control plane, run one right after the other in alternating order. Printed by `cargo xtask bench-compare --real --json-baseline {rev} --pods {}`.\n",
        s.pods
    );
    sync_table(&mut t, res, &AB, s, "Pods");
    let n = s.pods.max(1) as f64;
    let _ = writeln!(
        t,
        "\n| this build / baseline, median of pairs | objects/s | client CPU / object | apiserver CPU / object | peak RSS |"
    );
    t.push_str("|---|---:|---:|---:|---:|\n");
    for mode in [Mode::Paged, Mode::Streaming] {
        let cell = |f: &dyn Fn(&SyncRun) -> f64| {
            let v = paired(&res.syncs, mode, f);
            if v.is_finite() {
                format!("{v:.2}x")
            } else {
                "n/a".into()
            }
        };
        let _ = writeln!(
            t,
            "| {} ({} pairs) | {} | {} | {} | {} |",
            mode.name(),
            res.syncs
                .iter()
                .filter(|r| r.mode == mode && r.client == RealClient::KcacheJson)
                .count(),
            cell(&|r| r.synced.objects as f64 / r.synced.secs.max(1e-9)),
            cell(&|r| r.synced.cpu_us as f64 / n),
            cell(&|r| r.apiserver_cpu_secs / n),
            cell(&|r| r.synced.peak_rss_kb as f64),
        );
    }
    for mode in [Mode::Paged, Mode::Streaming] {
        let cell = |f: &dyn Fn(&SyncRun) -> f64| {
            let (v, _) = paired_same_speed(&res.syncs, mode, f);
            if v.is_finite() {
                format!("{v:.2}x")
            } else {
                "n/a".into()
            }
        };
        let (_, k) = paired_same_speed(&res.syncs, mode, &|r| r.synced.secs);
        let _ = writeln!(
            t,
            "| {}, pairs that met the apiserver at the same speed (its CPU / object within {:.0}%; {k} pairs) | {} | {} | {} | {} |",
            mode.name(),
            SAME_SPEED * 100.0,
            cell(&|r| r.synced.objects as f64 / r.synced.secs.max(1e-9)),
            cell(&|r| r.synced.cpu_us as f64 / n),
            cell(&|r| r.apiserver_cpu_secs / n),
            cell(&|r| r.synced.peak_rss_kb as f64),
        );
    }
    let _ = writeln!(
        t,
        "\n| steady memory per Pod (paged sync, background compression done) | RSS | heap |"
    );
    t.push_str("|---|---:|---:|\n");
    for c in AB {
        match mem_row(res, c, s) {
            Some(m) => {
                let _ = writeln!(
                    t,
                    "| {} | {:.2} KiB | {:.2} KiB |",
                    c.label(),
                    m.rss_kib,
                    m.heap_kib
                );
            }
            None => {
                let _ = writeln!(t, "| {} | not run | |", c.label());
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_real::Phase;

    fn run(c: RealClient, mode: Mode, secs: f64, cpu_us: u64) -> SyncRun {
        let synced = Phase {
            phase: "synced".into(),
            objects: 1000,
            secs,
            cpu_us,
            peak_rss_kb: 1024,
            ..Phase::default()
        };
        SyncRun {
            client: c,
            mode,
            done: Phase {
                phase: "done".into(),
                ..synced.clone()
            },
            synced,
            updated: None,
            apiserver_cpu_secs: 0.1,
            etcd_cpu_secs: 0.0,
            rx_bytes: None,
            audit: Vec::new(),
            lags_us: Vec::new(),
            updates_sent: 0,
        }
    }

    /// The ratios are of pairs in run order (this build / baseline), their
    /// median: a slower pair and a faster one give the middle, not the
    /// ratio of medians.
    #[test]
    fn ratios_pair_runs_in_order() {
        let mut runs = Vec::new();
        for (b, h) in [(1.0, 2.0), (2.0, 1.0), (4.0, 2.0)] {
            runs.push(run(RealClient::KcacheJsonBaseline, Mode::Paged, b, 10_000));
            runs.push(run(RealClient::KcacheJson, Mode::Paged, h, 20_000));
        }
        // objects/s ratios: 0.5, 2.0, 2.0 -> median 2.0 (the ratio of the
        // medians, 500 / 500, would be 1.0)
        let r = paired(&runs, Mode::Paged, &|r| {
            r.synced.objects as f64 / r.synced.secs
        });
        assert!((r - 2.0).abs() < 1e-9, "{r}");
        // CPU doubled in every pair
        let r = paired(&runs, Mode::Paged, &|r| r.synced.cpu_us as f64);
        assert!((r - 2.0).abs() < 1e-9, "{r}");
        // no streaming runs: n/a, not a number
        assert!(paired(&runs, Mode::Streaming, &|r| r.synced.secs).is_nan());
        let s = RealSettings {
            pods: 1000,
            reps: 0,
            updates: 0,
            update_rate: 0.0,
            update_reps: 0,
            mem_reps: 0,
            onoff_pairs: 0,
            quick: true,
            settle_ms: 0,
            clk_tck: 100.0,
        };
        let res = RealResults {
            syncs: runs,
            ..RealResults::default()
        };
        let md = markdown(&res, &s, "abc123");
        assert!(
            md.contains("| paged (3 pairs) | 2.00x | 2.00x | 1.00x | 1.00x |"),
            "{md}"
        );
        assert!(
            md.contains("| streaming (0 pairs) | n/a | n/a | n/a | n/a |"),
            "{md}"
        );
        assert!(md.contains("--json-baseline abc123"), "{md}");
    }

    /// Pairs whose two runs met the apiserver at different speeds are left
    /// out of the same-speed ratio: two pairs where this build's run met
    /// a slow apiserver (and spent more client CPU) do not move it.
    #[test]
    fn same_speed_pairs_leave_out_a_slow_apiserver() {
        let mut runs = Vec::new();
        for (b_api, h_api, h_cpu) in [
            (0.1, 0.1, 10_000),
            (0.1, 0.105, 10_000),
            (0.1, 0.2, 15_000),
            (0.1, 0.2, 15_000),
            (0.1, 0.095, 10_000),
        ] {
            let mut b = run(RealClient::KcacheJsonBaseline, Mode::Streaming, 1.0, 10_000);
            b.apiserver_cpu_secs = b_api;
            let mut h = run(RealClient::KcacheJson, Mode::Streaming, 1.0, h_cpu);
            h.apiserver_cpu_secs = h_api;
            runs.extend([b, h]);
        }
        let cpu = |r: &SyncRun| r.synced.cpu_us as f64;
        // same speed: pairs 1, 2 and 5 (ratio 1 each); 3 and 4 met a slow
        // apiserver
        let (r, k) = paired_same_speed(&runs, Mode::Streaming, &cpu);
        assert_eq!(k, 3);
        assert!((r - 1.0).abs() < 1e-9, "{r}");
        let mut slow = run(RealClient::KcacheJsonBaseline, Mode::Streaming, 1.0, 10_000);
        slow.apiserver_cpu_secs = 0.1;
        let mut slow_h = run(RealClient::KcacheJson, Mode::Streaming, 1.0, 15_000);
        slow_h.apiserver_cpu_secs = 0.2;
        runs.extend([slow, slow_h]);
        // a third slow pair moves the plain median, not the same-speed one
        assert!((paired(&runs, Mode::Streaming, &cpu) - 1.25).abs() < 1e-9);
        assert_eq!(paired_same_speed(&runs, Mode::Streaming, &cpu), (1.0, 3));
    }

    #[test]
    fn abba_order() {
        assert_eq!(order(0), AB);
        assert_eq!(order(1), [AB[1], AB[0]]);
    }
}
