//! `cargo xtask fuzz [--seconds N] [--target NAME]`: builds the cargo-fuzz
//! targets under `fuzz/` and runs each for N seconds.
//!
//! - cargo-fuzz is installed from crates.io when missing.
//! - With a nightly toolchain (rustup), targets build with AddressSanitizer
//!   (cargo-fuzz's default); without one, on stable with
//!   `RUSTC_BOOTSTRAP=1 --sanitizer none`.
//! - Each run starts from the checked-in seeds (`fuzz/corpus/<target>/`,
//!   never written to) plus the corpus grown by earlier runs
//!   (`target/fuzz/corpus/<target>/`, where new inputs go).
//! - A crash leaves its input under `target/fuzz/artifacts/<target>/`; the
//!   task prints it, the replay command, and fails.

use std::fs;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::Args;

use crate::run::{cargo, workspace_root};

/// The fuzz targets, in run order.
pub const TARGETS: &[&str] = &[
    "watch_frame",
    "label_selector",
    "keys",
    "list_split",
    "list_decode",
    "snapshot",
    "protobuf_frame",
    "cbor_frame",
    "cbor_list",
];

#[derive(Args)]
pub struct FuzzArgs {
    /// Seconds to fuzz each target.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Run only this target (default: all of them).
    #[arg(long)]
    target: Option<String>,
}

/// What one target's run gave.
struct Outcome {
    target: String,
    execs: Option<u64>,
    secs: f64,
    corpus: usize,
    crash: Option<PathBuf>,
}

/// How to invoke cargo-fuzz on this machine.
struct Toolchain {
    nightly: bool,
}

impl Toolchain {
    fn detect() -> Self {
        let nightly = Command::new("rustup")
            .args(["toolchain", "list"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .is_some_and(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.starts_with("nightly"))
            });
        Toolchain { nightly }
    }

    /// `cargo [+nightly] fuzz <sub>` run from `fuzz/`, building into
    /// `target/fuzz/`.
    fn fuzz(&self, sub: &str, fuzz_dir: &Path, target_dir: &Path) -> Command {
        // `cargo +nightly` needs the rustup proxy, not $CARGO (a toolchain's
        // own cargo binary).
        let mut cmd = if self.nightly {
            let mut c = Command::new("cargo");
            c.arg("+nightly");
            c
        } else {
            let mut c = cargo();
            c.env("RUSTC_BOOTSTRAP", "1");
            c
        };
        cmd.current_dir(fuzz_dir);
        cmd.args(["fuzz", sub]);
        if !self.nightly {
            cmd.args(["--sanitizer", "none"]);
        }
        // Debug assertions catch overflow and the like in the fuzzed code.
        cmd.arg("--debug-assertions")
            .arg("--target-dir")
            .arg(target_dir);
        cmd.env("CARGO_BUILD_JOBS", "2");
        cmd
    }

    fn describe(&self) -> &'static str {
        if self.nightly {
            "nightly, AddressSanitizer"
        } else {
            "stable with RUSTC_BOOTSTRAP=1, no sanitizer"
        }
    }
}

fn ensure_cargo_fuzz() -> anyhow::Result<()> {
    let mut probe = cargo();
    probe
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if probe.status().is_ok_and(|s| s.success()) {
        return Ok(());
    }
    crate::run::step("cargo install cargo-fuzz --locked", {
        let mut c = cargo();
        c.args(["install", "cargo-fuzz", "--locked"]);
        c
    })?;
    Ok(())
}

fn count_files(dir: &Path) -> usize {
    fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).count())
        .unwrap_or(0)
}

/// The newest file in `dir`, if any (libFuzzer's crash/leak/timeout input).
fn newest_file(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, p)| p)
}

fn run_target(
    tc: &Toolchain,
    target: &str,
    seconds: u64,
    fuzz_dir: &Path,
    target_dir: &Path,
) -> anyhow::Result<Outcome> {
    let seeds = fuzz_dir.join("corpus").join(target);
    let corpus = target_dir.join("corpus").join(target);
    let artifacts = target_dir.join("artifacts").join(target);
    let log_path = target_dir.join("logs").join(format!("{target}.log"));
    for d in [&corpus, &artifacts] {
        fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    if let Some(parent) = log_path.parent() {
        fs::create_dir_all(parent)?;
    }
    let before = newest_file(&artifacts);
    eprintln!(
        "\n==> fuzz {target} for {seconds}s (log: {})",
        log_path.display()
    );
    let mut cmd = tc.fuzz("run", fuzz_dir, target_dir);
    cmd.arg(target)
        .arg(&corpus)
        .arg(&seeds)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running cargo fuzz run {target}"))?;
    let mut log = String::new();
    let mut execs = None;
    let mut last_pulse = Instant::now();
    if let Some(err) = child.stderr.take() {
        for line in BufReader::new(err).lines() {
            let line = line.context("reading libFuzzer output")?;
            // "stat::number_of_executed_units: 123456"
            if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
                execs = n.trim().parse().ok();
            }
            // Progress: a line every ~10 s, and every crash report line.
            let crashy = line.contains("ERROR:")
                || line.contains("panicked")
                || line.contains("Test unit written")
                || line.contains("SUMMARY:");
            if crashy || last_pulse.elapsed().as_secs() >= 10 && line.starts_with('#') {
                eprintln!("    {line}");
                last_pulse = Instant::now();
            }
            log.push_str(&line);
            log.push('\n');
        }
    }
    let status = child.wait().context("waiting for cargo fuzz")?;
    let secs = started.elapsed().as_secs_f64();
    fs::write(&log_path, &log).with_context(|| format!("writing {}", log_path.display()))?;
    let after = newest_file(&artifacts);
    let crash = if status.success() {
        None
    } else {
        match after.filter(|a| Some(a) != before.as_ref()) {
            Some(a) => Some(a),
            None => {
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                for l in tail.iter().rev() {
                    eprintln!("    {l}");
                }
                bail!("cargo fuzz run {target} failed ({status}) without a crash input")
            }
        }
    };
    Ok(Outcome {
        target: target.to_owned(),
        execs,
        secs,
        corpus: count_files(&corpus),
        crash,
    })
}

pub fn run(args: FuzzArgs) -> anyhow::Result<()> {
    let root = workspace_root();
    let fuzz_dir = root.join("fuzz");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("fuzz");
    let targets: Vec<&str> = match &args.target {
        Some(t) if TARGETS.contains(&t.as_str()) => vec![t.as_str()],
        Some(t) => bail!("unknown fuzz target {t:?} (known: {})", TARGETS.join(", ")),
        None => TARGETS.to_vec(),
    };
    ensure_cargo_fuzz()?;
    let tc = Toolchain::detect();
    eprintln!("==> cargo fuzz build ({})", tc.describe());
    let t = Instant::now();
    let status = tc
        .fuzz("build", &fuzz_dir, &target_dir)
        .status()
        .context("running cargo fuzz build")?;
    if !status.success() {
        bail!("cargo fuzz build failed ({status})");
    }
    eprintln!("==> built in {:.1}s", t.elapsed().as_secs_f64());

    let mut outcomes = Vec::new();
    for target in targets {
        outcomes.push(run_target(
            &tc,
            target,
            args.seconds,
            &fuzz_dir,
            &target_dir,
        )?);
    }

    println!("\n| target | seconds | executions | exec/s | corpus | result |");
    println!("|---|---:|---:|---:|---:|---|");
    for o in &outcomes {
        let execs = o.execs.map_or("?".to_owned(), |n| n.to_string());
        let rate = o.execs.map_or("?".to_owned(), |n| {
            format!("{:.0}", n as f64 / o.secs.max(1e-3))
        });
        let result = match &o.crash {
            Some(p) => format!("CRASH: {}", p.display()),
            None => "ok".to_owned(),
        };
        println!(
            "| {} | {:.0} | {execs} | {rate} | {} | {result} |",
            o.target, o.secs, o.corpus
        );
    }
    let crashes: Vec<&Outcome> = outcomes.iter().filter(|o| o.crash.is_some()).collect();
    if crashes.is_empty() {
        return Ok(());
    }
    for o in &crashes {
        if let Some(p) = &o.crash {
            eprintln!(
                "replay: (cd fuzz && cargo{} fuzz run {} {})",
                if tc.nightly { " +nightly" } else { "" },
                o.target,
                p.display()
            );
        }
    }
    bail!(
        "{} fuzz target(s) crashed; turn each input into a regression test",
        crashes.len()
    )
}
