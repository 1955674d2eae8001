//! `cargo xtask bench [--quick]`: every crate's criterion benchmarks, then a
//! Markdown summary of `target/criterion` (criterion's HTML reports stay
//! there).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;

use crate::run::{cargo, step, workspace_root};

/// Options of `cargo xtask bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Short criterion settings (`--quick`): a rough figure in a few minutes.
    #[arg(long)]
    quick: bool,
    /// Only summarize what is already under target/criterion.
    #[arg(long)]
    summary_only: bool,
    /// Only the benchmarks of this package (repeatable).
    #[arg(long, short = 'p')]
    package: Vec<String>,
}

/// The cargo target directory (`$CARGO_TARGET_DIR` or `target/`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                workspace_root().join(d)
            }
        }
        None => workspace_root().join("target"),
    }
}

/// `cargo` without the package variables `cargo run` gave this xtask
/// process (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`...): build scripts that
/// track them (ring's does) would otherwise see them change between
/// `cargo build` and `cargo xtask`, and rebuild half of the tree each time.
pub fn clean_cargo() -> std::process::Command {
    let mut cmd = cargo();
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || matches!(
                key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
            )
        {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Runs the benchmarks and prints the summary.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if !args.summary_only {
        let mut cmd = clean_cargo();
        cmd.args(["bench", "-j", "2"]);
        if args.package.is_empty() {
            cmd.arg("--workspace");
        }
        for p in &args.package {
            cmd.args(["-p", p]);
        }
        // Bench targets only (not the libtest harness of libs and bins).
        cmd.args(["--bench", "*", "--"]);
        if args.quick {
            cmd.args(["--quick", "--noplot"]);
        }
        step("cargo bench (criterion)", cmd)?;
    }
    let dir = target_dir().join("criterion");
    let rows = collect(&dir)?;
    println!("{}", table(&rows));
    eprintln!(
        "criterion HTML reports: {}",
        dir.join("report/index.html").display()
    );
    Ok(())
}

/// One benchmark's figures.
#[derive(Debug, Clone)]
pub struct Row {
    /// criterion's full id (`group/function/parameter`).
    pub id: String,
    /// Median time per iteration, ns.
    pub median_ns: f64,
    /// Mean time per iteration, ns.
    pub mean_ns: f64,
    /// Standard error of the mean, ns.
    pub mean_se_ns: f64,
    /// Elements or bytes per iteration, if the benchmark declared them.
    pub throughput: Option<(String, f64)>,
}

/// Reads every `new/estimates.json` (with its `benchmark.json`) under `dir`.
pub fn collect(dir: &Path) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    if dir.is_dir() {
        walk(dir, &mut rows)?;
    }
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(rows)
}

fn walk(dir: &Path, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") {
            if let Some(row) = read_row(&path)? {
                rows.push(row);
            }
        } else if path
            .file_name()
            .is_none_or(|n| n != "base" && n != "change" && n != "report")
        {
            walk(&path, rows)?;
        }
    }
    Ok(())
}

fn read_json(path: &Path) -> anyhow::Result<Option<Value>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(
            serde_json::from_slice(&b).with_context(|| format!("parsing {}", path.display()))?,
        )),
        Err(_) => Ok(None),
    }
}

fn read_row(new: &Path) -> anyhow::Result<Option<Row>> {
    let (Some(est), Some(bench)) = (
        read_json(&new.join("estimates.json"))?,
        read_json(&new.join("benchmark.json"))?,
    ) else {
        return Ok(None);
    };
    let point = |k: &str| est[k]["point_estimate"].as_f64().unwrap_or(f64::NAN);
    let throughput = bench["throughput"].as_object().and_then(|t| {
        let (kind, n) = t.iter().next()?;
        Some((kind.clone(), n.as_f64()?))
    });
    Ok(Some(Row {
        id: bench["full_id"].as_str().unwrap_or("?").to_string(),
        median_ns: point("median"),
        mean_ns: point("mean"),
        mean_se_ns: est["mean"]["standard_error"].as_f64().unwrap_or(f64::NAN),
        throughput,
    }))
}

/// A duration in ns, human-readable.
pub fn fmt_ns(ns: f64) -> String {
    scaled(
        ns,
        [
            (1e9, 2, "s"),
            (1e6, 2, "ms"),
            (1e3, 2, "µs"),
            (1.0, 1, "ns"),
        ],
    )
}

/// A rate per second, human-readable.
pub fn fmt_rate(per_sec: f64) -> String {
    scaled(
        per_sec,
        [(1e9, 2, "G"), (1e6, 2, "M"), (1e3, 1, "k"), (1.0, 1, "")],
    )
}

/// `v` in the first of `units` (divisor, decimals, unit; largest first)
/// whose divisor it reaches, else (smaller, or NaN) in the last.
fn scaled(v: f64, units: [(f64, usize, &str); 4]) -> String {
    let (div, decimals, unit) = units
        .into_iter()
        .find(|(div, _, _)| v >= *div)
        .unwrap_or(units[3]);
    format!("{:.*} {unit}", decimals, v / div)
}

/// The Markdown summary table.
pub fn table(rows: &[Row]) -> String {
    let mut out =
        String::from("| benchmark | median | mean ± se | throughput |\n|---|---:|---:|---:|\n");
    for r in rows {
        let thr = match &r.throughput {
            Some((kind, n)) if r.median_ns > 0.0 => {
                let per_sec = n / (r.median_ns / 1e9);
                match kind.as_str() {
                    "Bytes" | "BytesDecimal" => format!("{}B/s", fmt_rate(per_sec)),
                    _ => format!("{}elem/s", fmt_rate(per_sec)),
                }
            }
            _ => String::new(),
        };
        out.push_str(&format!(
            "| {} | {} | {} ± {} | {} |\n",
            r.id,
            fmt_ns(r.median_ns),
            fmt_ns(r.mean_ns),
            fmt_ns(r.mean_se_ns),
            thr
        ));
    }
    if rows.is_empty() {
        out.push_str("| (no criterion results under target/criterion yet) | | | |\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarizes_criterion_output() {
        let dir = tempfile_dir();
        let new = dir.join("workqueue/add_get_done/1_worker/new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(
            new.join("estimates.json"),
            r#"{"mean":{"point_estimate":250.0,"standard_error":2.0},"median":{"point_estimate":200.0}}"#,
        )
        .unwrap();
        std::fs::write(
            new.join("benchmark.json"),
            r#"{"full_id":"add_get_done/1_worker","throughput":{"Elements":1}}"#,
        )
        .unwrap();
        let rows = collect(&dir).unwrap();
        assert_eq!(rows.len(), 1);
        let t = table(&rows);
        assert!(
            t.contains("| add_get_done/1_worker | 200.0 ns | 250.0 ns ± 2.0 ns | 5.00 M"),
            "{t}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("xtask-bench-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn human_readable_durations_and_rates() {
        assert_eq!(fmt_ns(2.5e9), "2.50 s");
        assert_eq!(fmt_ns(1.5e6), "1.50 ms");
        assert_eq!(fmt_ns(1234.0), "1.23 µs");
        assert_eq!(fmt_ns(12.34), "12.3 ns");
        assert_eq!(fmt_ns(0.5), "0.5 ns");
        assert_eq!(fmt_rate(3e9), "3.00 G");
        assert_eq!(fmt_rate(2.5e6), "2.50 M");
        assert_eq!(fmt_rate(1500.0), "1.5 k");
        assert_eq!(fmt_rate(12.0), "12.0 ");
    }
}
