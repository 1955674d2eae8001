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
    /// Extra arguments passed to the test binaries (e.g. a name filter).
    #[arg(last = true)]
    rest: Vec<String>,
}

pub fn run(args: E2eArgs) -> anyhow::Result<()> {
    if args.kind {
        return run_on_kind(&args.rest);
    }
    suite(args.kubeconfig, &args.rest)
}

/// Integration tests only (`--test '*'`): the tests under each crate's `tests/`.
fn suite(kubeconfig: Option<PathBuf>, rest: &[String]) -> anyhow::Result<()> {
    let mut cmd = cargo();
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

fn run_on_kind(rest: &[String]) -> anyhow::Result<()> {
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
    let result = suite(Some(kubeconfig), rest);
    let _ = Command::new("kind")
        .args(["delete", "cluster", "--name", name])
        .status();
    result
}
