//! The kube-runtime client of `cargo xtask bench-compare`: kube-runtime's
//! `watcher` feeding a `reflector` store for Pods over the server of
//! `$KUBECONFIG`, counting every object event, stopping at the end marker.
//! Prints one [`Report`] JSON line.

use std::time::{Duration, Instant};

use clap::Parser;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kcache_bench_compare::{END_MARKER, Report, proc_status_kb};
use kube::runtime::{reflector, watcher};
use kube::{Api, ResourceExt as _};

#[derive(Parser)]
struct Args {
    /// Accepted for symmetry with the other clients (only `ingest`).
    #[arg(long, default_value = "ingest")]
    scenario: String,
    /// Drop managedFields from every object before it is stored.
    #[arg(long)]
    strip_managed_fields: bool,
    /// Milliseconds to wait before reading the steady-state RSS.
    #[arg(long, default_value_t = 1000)]
    settle_ms: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.scenario == "ingest",
        "kube-runtime-client runs the ingest scenario only"
    );
    let client = kube::Client::try_default().await?;
    let baseline = proc_status_kb("VmRSS");
    let api: Api<Pod> = Api::all(client);
    let (store, writer) = reflector::store::<Pod>();
    let strip = args.strip_managed_fields;
    let events = watcher(api, watcher::Config::default()).map_ok(move |ev| {
        if strip {
            ev.modify(|p| p.managed_fields_mut().clear())
        } else {
            ev
        }
    });
    let mut events = reflector(writer, events).boxed();
    let start = Instant::now();
    let mut n = 0u64;
    while let Some(ev) = events.next().await {
        match ev {
            Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p)) => {
                n += 1;
                if p.name_any() == END_MARKER {
                    break;
                }
            }
            Ok(watcher::Event::Delete(_)) => n += 1,
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(e) => eprintln!("kube-runtime-client: watcher error (it retries): {e}"),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let peak = proc_status_kb("VmHWM");
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let report = Report {
        client: "kube-runtime".into(),
        events: n,
        secs,
        events_per_sec: n as f64 / secs,
        peak_rss_kb: peak,
        steady_rss_kb: proc_status_kb("VmRSS"),
        baseline_rss_kb: baseline,
        cached: store.state().len(),
        ..Report::default()
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
