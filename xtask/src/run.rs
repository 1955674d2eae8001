//! Running commands with visible progress.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, bail};

/// The workspace root (the parent of `xtask/`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `cargo` as invoked by the user (`$CARGO`), else `cargo`.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// Runs `cargo args` (quietly) and returns its standard output; fails with
/// its standard error when it exits non-zero.
pub fn cargo_output(args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let what = format!("cargo {}", args.join(" "));
    let out = cargo()
        .args(args)
        .output()
        .with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

/// Prints the free space of the file system holding `target/` (one line,
/// best effort): a full disk is the usual cause of a compile dying with
/// "No space left on device", and this line tells so up front.
pub fn report_free_disk() {
    let target = workspace_root().join("target");
    let probe = if target.exists() {
        target
    } else {
        workspace_root()
    };
    let Ok(out) = Command::new("df")
        .args(["-Pk"])
        .arg(&probe)
        .stderr(Stdio::null())
        .output()
    else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    // "Filesystem 1024-blocks Used Available Capacity Mounted on" then one row
    let Some(avail_kib) = text
        .lines()
        .nth(1)
        .and_then(|row| row.split_whitespace().nth(3))
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let gib = avail_kib as f64 / (1024.0 * 1024.0);
    eprintln!("==> free disk at {}: {gib:.1} GiB", probe.display());
    if gib < 8.0 {
        eprintln!(
            "    warning: a clean `cargo xtask test` needs about 8 GiB (Rust test binaries, \
             the Go build of the control plane); free some space if the build fails"
        );
    }
}

/// Prints a step header, runs the command, fails on a non-zero exit.
pub fn step(name: &str, mut cmd: Command) -> anyhow::Result<f64> {
    eprintln!("\n==> {name}");
    let started = Instant::now();
    let status = cmd.status().with_context(|| format!("running {name}"))?;
    let secs = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("{name} failed ({status}) after {secs:.1}s");
    }
    eprintln!("==> {name}: ok in {secs:.1}s");
    Ok(secs)
}

/// Test counts summed over every `test result:` line of cargo test.
#[derive(Debug, Default, Clone, Copy)]
pub struct TestCounts {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
}

impl TestCounts {
    fn add_line(&mut self, line: &str) {
        // "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(label), Some(n)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match label {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// Runs `cargo test ...`, echoing its output, and sums the test counts.
pub fn cargo_test(name: &str, mut cmd: Command) -> anyhow::Result<(f64, TestCounts)> {
    eprintln!("\n==> {name}");
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {name}"))?;
    let mut counts = TestCounts::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.context("reading cargo test output")?;
            println!("{line}");
            counts.add_line(&line);
        }
    }
    let status = child.wait()?;
    let secs = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!(
            "{name} failed ({status}) after {secs:.1}s: {} passed, {} failed",
            counts.passed,
            counts.failed
        );
    }
    eprintln!("==> {name}: ok in {secs:.1}s");
    Ok((secs, counts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_cargo_test_result_lines() {
        let mut c = TestCounts::default();
        c.add_line("test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s");
        c.add_line(
            "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        c.add_line("running 3 tests");
        assert_eq!((c.passed, c.failed, c.ignored), (15, 2, 1));
    }
}
