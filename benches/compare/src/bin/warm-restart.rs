//! The warm-restart client of `cargo xtask bench-compare` (scenario (e)):
//! a `SharedIndexInformer<Pod>` over the server of `$KUBECONFIG` with
//! snapshots in `--snapshot-dir`. Without a snapshot there it starts cold
//! (lists every Pod); with one it starts warm (loads the snapshot, resumes
//! the watch). It measures the time from `run` to `has_synced` and the peak
//! RSS at that point, then stops, which writes the snapshot (its write time
//! and size are reported). Prints one JSON line.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kcache_bench_compare::proc_status_kb;
use kcache_core::ObjectOptions;
use kcache_informer::{SharedIndexInformer, SnapshotOptions, StartKind};
use kcache_reflector::WatchConfig;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Args {
    /// Folder of the snapshot.
    #[arg(long)]
    snapshot_dir: std::path::PathBuf,
    /// Cut managedFields from every cached object.
    #[arg(long)]
    strip_managed_fields: bool,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = kube::Client::try_default().await?;
    let baseline = proc_status_kb("VmRSS");
    let informer = SharedIndexInformer::<Pod>::builder(client)
        .config(kcache_informer::InformerConfig {
            watch: WatchConfig {
                use_watch_list: false,
                object_options: ObjectOptions {
                    strip_managed_fields: args.strip_managed_fields,
                    ..ObjectOptions::default()
                },
                ..WatchConfig::default()
            },
            snapshot: Some(
                SnapshotOptions::dir(&args.snapshot_dir)
                    // the replay server serves Pods only: no kube-system GET
                    .cluster_id("replay")
                    .interval(Duration::ZERO),
            ),
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let cancel = CancellationToken::new();
    let start = Instant::now();
    let task = informer
        .try_start(cancel.clone())
        .context("the new informer was already started")?;
    while !informer.has_synced() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = proc_status_kb("VmHWM");
    let cached = informer.indexer().len();
    let stop = Instant::now();
    cancel.cancel();
    task.await??;
    let stop_secs = stop.elapsed().as_secs_f64();
    let st = informer.snapshot_status();
    let write = st.last_write.clone();
    let report = serde_json::json!({
        "client": "kcache",
        "start": match st.start { StartKind::Warm => "warm", _ => "cold" },
        "cold_reason": st.cold_reason,
        "secs_to_synced": secs,
        "peak_rss_kb": peak,
        "baseline_rss_kb": baseline,
        "cached": cached,
        "objects_loaded": st.objects_loaded,
        "resume_relisted": st.resume_relisted,
        "snapshot_age_secs": st.snapshot_age.map(|d| d.as_secs_f64()),
        "snapshot_write_secs": write.as_ref().map(|w| w.duration.as_secs_f64()),
        "snapshot_bytes": write.as_ref().map(|w| w.bytes),
        "stop_secs": stop_secs,
    });
    println!("{report}");
    Ok(())
}
