//! `cargo xtask e2e`: the integration suite against a real cluster.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, bail};
use clap::Args;
use kcache_envtest::EXTERNAL_KUBECONFIG_ENV;

use crate::run::{cargo, cargo_test, workspace_root};

#[derive(Args)]
pub struct E2eArgs {
    /// Run against the cluster of this kubeconfig instead of the local
    /// control plane (fault tests that restart the apiserver are skipped).
    #[arg(long, conflicts_with = "kind")]
    kubeconfig: Option<PathBuf>,
    /// Create a kind cluster (needs `kind` and a running Docker engine), run
    /// against it, and delete it afterwards.
    #[arg(long)]
    kind: bool,
    /// Run the fault suite in its full form (`KCACHE_FAULT_FULL=1`: more
    /// faults and operations per fault; 1,000 Foos for fault 9).
    #[arg(long)]
    full: bool,
    /// Run the load and soak test instead of the suite (release build,
    /// local control plane): N ConfigMaps synced, then changes at a rate
    /// for a duration; prints RSS slope, listener backlogs and event lag.
    #[arg(long, conflicts_with_all = ["kubeconfig", "kind"])]
    soak: bool,
    /// Soak: ConfigMaps created and synced first.
    #[arg(long, default_value_t = 100_000, requires = "soak")]
    soak_objects: u64,
    /// Soak: target changes per second.
    #[arg(long, default_value_t = 1000, requires = "soak")]
    soak_rate: u64,
    /// Soak: minutes of changes.
    #[arg(long, default_value_t = 10, requires = "soak")]
    soak_minutes: u64,
    /// Extra arguments passed to the test binaries (e.g. a name filter).
    #[arg(last = true)]
    rest: Vec<String>,
}

pub fn run(args: E2eArgs) -> anyhow::Result<()> {
    if args.full {
        eprintln!("fault suite: full form (KCACHE_FAULT_FULL=1)");
    }
    if args.soak {
        return soak(&args);
    }
    if args.kind {
        return run_on_kind(&args.rest, args.full);
    }
    suite(args.kubeconfig, &args.rest, args.full)
}

/// `--soak`: the ignored `soak` test of the fault suite, release build.
fn soak(args: &E2eArgs) -> anyhow::Result<()> {
    let mut cmd = cargo();
    cmd.args([
        "test",
        "--release",
        "-p",
        "kcache-fault-suite",
        "--test",
        "soak",
        "--",
        "--ignored",
        "--nocapture",
    ])
    .args(&args.rest)
    .env("KCACHE_SOAK_OBJECTS", args.soak_objects.to_string())
    .env("KCACHE_SOAK_RATE", args.soak_rate.to_string())
    .env("KCACHE_SOAK_MINUTES", args.soak_minutes.to_string())
    .env_remove(EXTERNAL_KUBECONFIG_ENV);
    eprintln!(
        "soak: {} ConfigMaps, then {}/s for {} min (local control plane, release build)",
        args.soak_objects, args.soak_rate, args.soak_minutes
    );
    let (_, counts) = cargo_test("soak", cmd)?;
    if counts.failed > 0 || counts.passed == 0 {
        bail!("the soak failed");
    }
    Ok(())
}

/// Integration tests only (`--test '*'`): the tests under each crate's `tests/`.
fn suite(kubeconfig: Option<PathBuf>, rest: &[String], full: bool) -> anyhow::Result<()> {
    let mut cmd = cargo();
    if full {
        cmd.env("KCACHE_FAULT_FULL", "1");
    }
    cmd.args([
        "test",
        "--workspace",
        "--all-features",
        "--no-fail-fast",
        "--test",
        "*",
    ]);
    match &kubeconfig {
        Some(path) => {
            let path = std::fs::canonicalize(path)
                .with_context(|| format!("kubeconfig {}", path.display()))?;
            eprintln!("e2e against the cluster of {}", path.display());
            cmd.env(EXTERNAL_KUBECONFIG_ENV, path);
        }
        None => {
            eprintln!("e2e against the local control plane (built and started by the tests)");
            cmd.env_remove(EXTERNAL_KUBECONFIG_ENV);
        }
    }
    if !rest.is_empty() {
        cmd.arg("--").args(rest);
    }
    let (_, counts) = cargo_test("integration suite", cmd)?;
    println!(
        "e2e: {} passed, {} failed, {} skipped",
        counts.passed, counts.failed, counts.ignored
    );
    Ok(())
}

fn found(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn run_on_kind(rest: &[String], full: bool) -> anyhow::Result<()> {
    let mut missing = Vec::new();
    if !found("kind", &["version"]) {
        missing.push("`kind` is not on PATH (install it from https://kind.sigs.k8s.io)");
    }
    if !found("docker", &["info"]) {
        missing.push("no Docker engine answers `docker info` (kind runs its nodes as containers)");
    }
    if !missing.is_empty() {
        bail!(
            "--kind needs kind and a running Docker engine:\n  - {}\nRun `cargo xtask e2e` to use the local control plane instead.",
            missing.join("\n  - ")
        );
    }
    let kubeconfig = workspace_root().join("target/kind-kubeconfig");
    let name = "kcache-e2e";
    let status = Command::new("kind")
        .args(["create", "cluster", "--name", name, "--kubeconfig"])
        .arg(&kubeconfig)
        .status()?;
    if !status.success() {
        bail!("kind create cluster failed ({status})");
    }
    let result = suite(Some(kubeconfig), rest, full);
    let _ = Command::new("kind")
        .args(["delete", "cluster", "--name", name])
        .status();
    result
}
