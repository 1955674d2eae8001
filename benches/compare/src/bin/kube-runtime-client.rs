//! The kube-runtime client of `cargo xtask bench-compare`: kube-runtime's
//! `watcher` feeding a `reflector` store for Pods over the server of
//! `$KUBECONFIG`, counting every object event, stopping at the end marker
//! (scenario `ingest`, the replay server; prints one [`Report`] JSON line);
//! or, against the real apiserver (scenario `sync`), syncing `--expect`
//! Pods by paged list (`watcher::Config::default()`) or streaming list
//! (`.streaming_lists()`), then counting `--expect-updates` updates,
//! speaking the line protocol of [`kcache_bench_compare::real`].

use std::fmt::Debug;
use std::hash::Hash;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kcache_bench_compare::real::{
    self, Meter, SyncArgs, emit, stop_requested, unix_micros, write_watch_log,
};
use kcache_bench_compare::{END_MARKER, Report, proc_status_kb};
use kube::api::DynamicObject;
use kube::runtime::{reflector, watcher};
use kube::{Api, ResourceExt as _};
use serde::de::DeserializeOwned;

#[derive(Parser)]
struct Args {
    /// `ingest` (replay server) or `sync` (real apiserver).
    #[arg(long, default_value = "ingest")]
    scenario: String,
    #[command(flatten)]
    sync: SyncArgs,
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
    if args.scenario == "sync" {
        return sync(&args).await;
    }
    anyhow::ensure!(
        args.scenario == "ingest",
        "kube-runtime-client runs the ingest and sync scenarios only"
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
    let settle = Duration::from_millis(args.settle_ms);
    let mut report = Report::ingest("kube-runtime", n, secs, baseline, settle).await;
    report.cached = store.state().len();
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// Scenario `sync` against the real apiserver: see the module doc. Pods
/// as `Pod`, the custom resource (`--resource applications`) as
/// `DynamicObject`.
async fn sync(args: &Args) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    if args.sync.custom_resource() {
        let ar = real::cr_api_resource();
        let api: Api<DynamicObject> = Api::all_with(client, &ar);
        sync_with(args, api, reflector::store::Writer::new(ar)).await
    } else {
        let api: Api<Pod> = Api::all(client);
        sync_with(args, api, reflector::store::Writer::default()).await
    }
}

/// [`sync`] for one resource type.
async fn sync_with<K>(
    args: &Args,
    api: Api<K>,
    writer: reflector::store::Writer<K>,
) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let store = writer.as_reader();
    let strip = args.strip_managed_fields;
    let config = if args.sync.streaming() {
        watcher::Config::default().streaming_lists()
    } else {
        watcher::Config::default()
    };
    let stop = stop_requested();
    tokio::pin!(stop);
    let meter = Meter::start();
    let events = watcher(api, config).map_ok(move |ev| {
        if strip {
            ev.modify(|p| p.managed_fields_mut().clear())
        } else {
            ev
        }
    });
    let mut events = reflector(writer, events).boxed();
    let (mut adds, mut synced) = (0u64, false);
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut updated_sent = args.sync.expect_updates == 0;
    loop {
        let ev = tokio::select! {
            ev = events.next() => ev,
            _ = &mut stop => break,
        };
        match ev {
            None => anyhow::bail!("the watcher ended"),
            Some(Ok(watcher::Event::InitApply(_))) if !synced => adds += 1,
            // the store holds the listed objects from InitDone on
            Some(Ok(watcher::Event::InitDone)) if !synced && adds >= args.sync.expect => {
                synced = true;
                emit(&meter.phase("synced", "kube-runtime", adds, store.state().len() as u64));
            }
            Some(Ok(watcher::Event::Apply(p))) if synced => {
                let rv = p
                    .resource_version()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0);
                seen.push((rv, unix_micros()));
                if !updated_sent && seen.len() as u64 == args.sync.expect_updates {
                    updated_sent = true;
                    let n = seen.len() as u64;
                    emit(&meter.phase("updated", "kube-runtime", n, store.state().len() as u64));
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => eprintln!("kube-runtime-client: watcher error (it retries): {e}"),
        }
    }
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    emit(&meter.phase(
        "done",
        "kube-runtime",
        seen.len() as u64,
        store.state().len() as u64,
    ));
    if let Some(path) = &args.sync.watch_log {
        write_watch_log(path, &seen)?;
    }
    Ok(())
}
