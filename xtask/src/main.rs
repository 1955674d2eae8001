//! `cargo xtask`: kcache's project tasks.
//!
//! - `cargo xtask test`: everything CI checks (fmt, clippy, the control-plane
//!   build, every test including the integration tests against a real local
//!   control plane, doc-tests).
//! - `cargo xtask docsrs [-p CRATE]`: each published crate's docs built as
//!   docs.rs builds them, from a copy outside the workspace (part of `test`).
//! - `cargo xtask controlplane build|start|stop|status|kubeconfig`: the local
//!   kube-apiserver + etcd, by hand.
//! - `cargo xtask e2e [--kubeconfig PATH | --kind]`: the integration suite
//!   against the local control plane, any cluster, or a new kind cluster.
//! - `cargo xtask codegen [--check]`: the CRD YAML of every custom resource
//!   type, under `examples/crds/`, and kcache-core's protobuf field tables.
//! - `cargo xtask protobuf-corpus`: kcache-core's protobuf test corpus,
//!   fetched from a local control plane both as protobuf and as JSON.
//! - `cargo xtask demo`: the sample controller on a local control plane.
//! - `cargo xtask bench [--quick]`: every crate's criterion benchmarks and a
//!   Markdown summary.
//! - `cargo xtask bench-compare [--quick]`: kcache against kube-runtime and
//!   client-go on the same replayed data; `--real`: against the local
//!   kube-apiserver, the reference (docs/performance.md).
//! - `cargo xtask fuzz [--seconds N]`: the cargo-fuzz targets, N seconds each.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod api_surface;
mod bench;
mod bench_common;
mod bench_compare;
mod bench_real;
mod bench_real_cr;
mod codegen;
mod controlplane;
mod demo;
mod deny;
mod docsrs;
mod e2e;
mod failover_table;
mod fuzz;
mod json_ab;
mod protobuf_corpus;
mod run;
mod shard_table;
mod test;

#[derive(Parser)]
#[command(name = "cargo xtask", about = "kcache project tasks")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Run every check CI runs: fmt, clippy -D warnings, all tests (unit,
    /// integration against a local control plane, doc-tests).
    Test(test::TestArgs),
    /// Build each published crate's docs as docs.rs does (a copy outside the
    /// workspace, its [package.metadata.docs.rs], K8S_OPENAPI_ENABLED_VERSION
    /// unset, -D warnings); part of `test`.
    Docsrs(docsrs::DocsrsArgs),
    /// Build, start, stop or inspect the local control plane.
    Controlplane {
        #[command(subcommand)]
        action: controlplane::Action,
    },
    /// Run the integration suite against the local control plane, a cluster
    /// given by a kubeconfig, or a new kind cluster.
    E2e(e2e::E2eArgs),
    /// Write the CRD YAML of every custom resource type into examples/crds/
    /// and the protobuf field tables of kcache-core (`--check`: fail when
    /// stale).
    Codegen(codegen::CodegenArgs),
    /// Regenerate kcache-core's protobuf test corpus from a local control
    /// plane (each object fetched as protobuf and as JSON).
    ProtobufCorpus(protobuf_corpus::CorpusArgs),
    /// Run the sample controller on a local control plane: create, scale and
    /// delete Foos, show what happened, stop everything.
    Demo(demo::DemoArgs),
    /// Measure sharded sample-controller replicas (1, 2, 3 processes,
    /// gate on and off) on a local control plane: objects cached, bytes
    /// received, peak RSS, ranges switched after a join and a kill; prints
    /// the table of docs/sharding.md.
    ShardTable(shard_table::ShardTableArgs),
    /// One sample-controller replica (a child of `shard-table`).
    #[command(hide = true)]
    ShardReplica(shard_table::ReplicaArgs),
    /// Run every crate's criterion benchmarks and print a Markdown summary.
    Bench(bench::BenchArgs),
    /// Compare kcache with kube-runtime and client-go on a replayed data set
    /// (ingest, memory, relist, workqueue), or with `--real` against the
    /// local kube-apiserver (sync, update load); prints medians and ratios.
    BenchCompare(bench_compare::CompareArgs),
    /// Build the cargo-fuzz targets (fuzz/) and run each for N seconds
    /// (default 60); fails on a crash.
    Fuzz(fuzz::FuzzArgs),
    /// Measure leader failover on the local control plane: a leader-elected
    /// controller in two processes, the leader killed with SIGKILL; kill to
    /// lease expiry, to acquire, to the first reconcile (warm and cold
    /// standby).
    FailoverTable(failover_table::FailoverArgs),
    /// One replica (a child of `failover-table`).
    #[command(hide = true)]
    FailoverReplica(failover_table::FailoverReplicaArgs),
    /// Count each library crate's public surface (types, methods, root
    /// re-exports, lines) and list library files over 1,000 lines.
    ApiSurface(api_surface::ApiSurfaceArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo prints its own story; the controller's retry warnings (and
    // the client's errors while the apiserver starts) would only repeat it.
    let default_filter = match cli.command {
        Task::Demo(_) => "error,kube_client=off",
        // bench-compare --real polls the apiserver while it starts
        Task::BenchCompare(_) => "warn,kube_client=off",
        // failover-table polls the apiserver while it starts, and its
        // replicas lose their connections when killed
        Task::FailoverTable(_) | Task::FailoverReplica(_) => "warn,kube_client=off",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Task::Test(args) => test::run(args),
        Task::Docsrs(args) => docsrs::run(args),
        Task::Controlplane { action } => controlplane::run(action),
        Task::E2e(args) => e2e::run(args),
        Task::Codegen(args) => codegen::run(args),
        Task::ProtobufCorpus(args) => protobuf_corpus::run(args),
        Task::Demo(args) => demo::run(args),
        Task::ShardTable(args) => shard_table::run(args),
        Task::ShardReplica(args) => shard_table::replica(args),
        Task::Bench(args) => bench::run(args),
        Task::BenchCompare(args) => bench_compare::run(args),
        Task::Fuzz(args) => fuzz::run(args),
        Task::ApiSurface(args) => api_surface::run(args),
        Task::FailoverTable(args) => failover_table::run(args),
        Task::FailoverReplica(args) => failover_table::replica(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
