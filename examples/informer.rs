//! Watches Pods cluster-wide with a shared informer, indexes them by node and
//! by the `app` label, and prints a running count of Pods per node.
//!
//! ```sh
//! cargo xtask controlplane start            # or any cluster
//! export KUBECONFIG=...                     # the line it prints
//! cargo run -p kcache-examples --example informer -- --create-demo-pods 30
//! ```
//!
//! The local control plane has no scheduler or kubelet, so `--create-demo-pods`
//! creates Pods that already name a (fictional) node; on a real cluster leave
//! it out.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kcache_core::{FieldPaths, ObjectOptions};
use kcache_indexer::{Indexers, field_index_func, label_index_func};
use kcache_informer::{ResourceEventHandlerFuncs, SharedIndexInformer, wait_for_cache_sync};
use kcache_reflector::WatchConfig;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;

const BY_NODE: &str = "by-node";
const BY_APP: &str = "by-app";

#[derive(Parser)]
struct Args {
    /// Create this many demo Pods (spread over 3 nodes, 2 apps) in the
    /// namespace `kcache-informer-demo` first.
    #[arg(long, default_value_t = 0)]
    create_demo_pods: usize,
    /// Stop after this many seconds (0: run until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    seconds: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("warn").init();
    let args = Args::parse();
    let client = Client::try_default().await?;
    if args.create_demo_pods > 0 {
        create_demo_pods(&client, args.create_demo_pods).await?;
    }

    // spec.nodeName is extracted while the bytes are ingested: the node
    // index needs no typed decode.
    let options = WatchConfig {
        object_options: ObjectOptions {
            strip_managed_fields: true,
            field_paths: Some(FieldPaths::new(["/spec/nodeName"])?),
            ..ObjectOptions::default()
        },
        ..WatchConfig::default()
    };
    let mut indexers = Indexers::new();
    indexers.insert(BY_NODE.to_string(), field_index_func("/spec/nodeName"));
    indexers.insert(BY_APP.to_string(), label_index_func("app"));
    let informer = SharedIndexInformer::<Pod>::builder(client)
        .config(kcache_informer::InformerConfig {
            watch: options,
            ..kcache_informer::InformerConfig::default()
        })
        .indexers(indexers)
        .build();
    informer.add_event_handler(
        ResourceEventHandlerFuncs::new()
            .add_func(|pod, initial| {
                if !initial {
                    println!("+ {}", pod.key())
                }
            })
            .delete_func(|pod| println!("- {}", pod.key())),
    )?;

    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let (i, c) = (informer.clone(), cancel.clone());
        async move { i.run(c).await }
    });
    if !wait_for_cache_sync(&cancel, &[&informer]).await {
        anyhow::bail!("the informer stopped before it synced");
    }
    println!(
        "synced {} pods at resourceVersion {}",
        informer.indexer().len(),
        informer.last_sync_resource_version()
    );

    let deadline =
        (args.seconds > 0).then(|| tokio::time::Instant::now() + Duration::from_secs(args.seconds));
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => print_counts(&informer)?,
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
    }
    cancel.cancel();
    run.await??;
    Ok(())
}

fn print_counts(informer: &SharedIndexInformer<Pod>) -> anyhow::Result<()> {
    let idx = informer.indexer();
    let mut per_node = BTreeMap::new();
    for node in idx.list_index_func_values(BY_NODE) {
        per_node.insert(node.clone(), idx.index_keys(BY_NODE, &node)?.len());
    }
    let apps = idx.list_index_func_values(BY_APP).len();
    println!(
        "pods per node: {per_node:?} ({} pods, {apps} apps)",
        idx.len()
    );
    Ok(())
}

async fn create_demo_pods(client: &Client, n: usize) -> anyhow::Result<()> {
    let ns = "kcache-informer-demo";
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = nss
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
        )
        .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for i in 0..n {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "generateName": "demo-", "labels": { "app": if i % 2 == 0 { "web" } else { "api" } } },
            "spec": { "nodeName": format!("node-{}", i % 3), "containers": [{ "name": "c", "image": "busybox" }] }
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    println!("created {n} demo pods in namespace {ns}");
    Ok(())
}
