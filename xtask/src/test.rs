//! `cargo xtask test`: every check CI runs.

use std::time::Instant;

use clap::Args;

use crate::run::{cargo, cargo_test, step};

#[derive(Args)]
pub struct TestArgs {
    /// Skip `cargo fmt --check` and clippy (for a quick local loop).
    #[arg(long)]
    no_lint: bool,
    /// Extra arguments passed to `cargo test` after `--` (e.g. a test name filter).
    #[arg(last = true)]
    rest: Vec<String>,
}

pub fn run(args: TestArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    crate::run::report_free_disk();
    let mut timings: Vec<(&str, f64)> = Vec::new();
    if !args.no_lint {
        let mut fmt = cargo();
        fmt.args(["fmt", "--all", "--", "--check"]);
        timings.push(("fmt --check", step("cargo fmt --all -- --check", fmt)?));
        let mut clippy = full_run_cargo();
        clippy.args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]);
        timings.push((
            "clippy",
            step(
                "cargo clippy --workspace --all-targets --all-features -- -D warnings",
                clippy,
            )?,
        ));
    }
    // Generated files must match their sources.
    eprintln!("\n==> cargo xtask codegen --check");
    let t = Instant::now();
    crate::codegen::check()?;
    timings.push(("codegen --check", t.elapsed().as_secs_f64()));

    // --- dependency policy (deny.toml; see xtask/src/deny.rs) ---
    timings.push(("cargo deny (licenses bans sources)", crate::deny::check()?));
    // --- end dependency policy ---

    // Each published crate's docs as docs.rs builds them (xtask/src/docsrs.rs).
    timings.push(("docs.rs builds", crate::docsrs::check(&[])?));

    // Build the control plane up front, with progress, so that the first
    // integration test does not sit silently through a cold Go build.
    eprintln!(
        "\n==> local control plane (kube-apiserver {} + etcd {})",
        kcache_envtest::KUBERNETES_VERSION,
        kcache_envtest::ETCD_VERSION
    );
    let t = Instant::now();
    let bins = kcache_envtest::Binaries::ensure()?;
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "==> control plane binaries ready in {secs:.1}s: {}",
        bins.kube_apiserver.display()
    );
    timings.push(("control plane build", secs));

    let mut test = full_run_cargo();
    test.args(["test", "--workspace", "--all-features", "--no-fail-fast"]);
    if !args.rest.is_empty() {
        test.arg("--").args(&args.rest);
    }
    let (secs, counts) = cargo_test("cargo test --workspace --all-features", test)?;
    timings.push(("tests (unit, integration, doc)", secs));

    eprintln!("\n==> summary");
    for (name, secs) in &timings {
        eprintln!("    {name:<32} {secs:>8.1}s");
    }
    eprintln!(
        "    {:<32} {:>8.1}s",
        "total",
        started.elapsed().as_secs_f64()
    );
    println!(
        "tests: {} passed, {} failed, {} skipped",
        counts.passed, counts.failed, counts.ignored
    );
    Ok(())
}

/// `cargo` for the one-shot full run: incremental-compilation caches add
/// gigabytes across the test binaries and buy nothing here (unless the
/// caller set `CARGO_INCREMENTAL` explicitly).
fn full_run_cargo() -> std::process::Command {
    let mut cmd = cargo();
    if std::env::var_os("CARGO_INCREMENTAL").is_none() {
        cmd.env("CARGO_INCREMENTAL", "0");
    }
    cmd
}
