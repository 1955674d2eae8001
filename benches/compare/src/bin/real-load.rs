//! The load driver of `cargo xtask bench-compare --real`, against the
//! apiserver of `$KUBECONFIG`:
//!
//! - `real-load create --pods N`: creates the namespaces and N Pods
//!   ([`real_pod`]) with the field manager `kube-controller-manager`, then
//!   writes each Pod's status ([`real_pod_status`]) with the field manager
//!   `kubelet` through the `status` subresource, `--concurrency` requests
//!   in flight; progress on stderr, one JSON line at the end (mean JSON
//!   size of a stored Pod included).
//! - `real-load create-crs --count N`: installs the `Application`
//!   CustomResourceDefinition ([`real_crd`]), waits until it is served,
//!   creates N custom resources ([`real_cr`]) with the field manager
//!   `gitops-applier` and writes their status ([`real_cr_status`]) with
//!   `application-controller`; one JSON line at the end (mean JSON size
//!   of a stored custom resource included).
//! - `real-load update --count M --rate R --pods N --out PATH`: M status
//!   patches (the status message changes) at R per second, spread over the
//!   N Pods; writes `resourceVersion unix_micros` (the time the response
//!   arrived) per update to PATH and one JSON line at the end.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kcache_bench_compare::real::{
    CR_CREATE_MANAGER, CR_STATUS_MANAGER, CREATE_MANAGER, REAL_NAMESPACES, STATUS_MANAGER,
    cr_api_resource, real_cr, real_cr_name, real_cr_status, real_crd, real_namespace, real_pod,
    real_pod_name, real_pod_status, unix_micros, write_watch_log,
};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt as _};
use serde_json::json;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create N Pods and write their status.
    Create {
        /// Pods to create.
        #[arg(long)]
        pods: usize,
        /// Requests in flight.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// Install the `Application` CRD, create N of them and write their status.
    CreateCrs {
        /// Custom resources to create.
        #[arg(long)]
        count: usize,
        /// Requests in flight.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// Patch Pod statuses at a fixed rate.
    Update {
        /// Updates to make.
        #[arg(long)]
        count: usize,
        /// Updates per second.
        #[arg(long)]
        rate: f64,
        /// Pods in the cluster (the updates go round them).
        #[arg(long)]
        pods: usize,
        /// Where to write `resourceVersion unix_micros` per update.
        #[arg(long)]
        out: PathBuf,
    },
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = Client::try_default().await.context("kubeconfig")?;
    match args.command {
        Cmd::Create { pods, concurrency } => create(client, pods, concurrency).await,
        Cmd::CreateCrs { count, concurrency } => create_crs(client, count, concurrency).await,
        Cmd::Update {
            count,
            rate,
            pods,
            out,
        } => update(client, count, rate, pods, out).await,
    }
}

async fn create(client: Client, n: usize, concurrency: usize) -> anyhow::Result<()> {
    // the Pods' priorityClassName (the Priority admission plugin checks it)
    let pcs: Api<PriorityClass> = Api::all(client.clone());
    let pc: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "tier-1"}, "value": 100000}))?;
    match pcs.create(&PostParams::default(), &pc).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("creating the PriorityClass tier-1"),
    }
    create_namespaces(&client, n).await?;
    let started = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let progress = report_progress(done.clone(), started, n, "Pods");
    let (create_pp, status_pp) = managers(CREATE_MANAGER, STATUS_MANAGER);
    let pods_client = client.clone();
    let mut results = futures::stream::iter(0..n)
        .map(move |i| {
            let (client, create_pp, status_pp, done) = (
                pods_client.clone(),
                create_pp.clone(),
                status_pp.clone(),
                done.clone(),
            );
            async move {
                let api: Api<Pod> = Api::namespaced(client, &real_namespace(i));
                let pod: Pod = serde_json::from_value(real_pod(i))?;
                let name = pod.name_any();
                match api.create(&create_pp, &pod).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e).context("creating a Pod"),
                }
                let status = json!({"status": real_pod_status(i, 0)});
                api.patch_status(&name, &status_pp, &Patch::Merge(&status))
                    .await
                    .context("writing a Pod's status")?;
                done.fetch_add(1, Ordering::Relaxed);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(r) = results.next().await {
        r?;
    }
    progress.abort();
    let secs = started.elapsed().as_secs_f64();
    // The size of what a client receives: a page of stored Pods as JSON.
    let api: Api<Pod> = Api::all(client);
    let page = api.list(&ListParams::default().limit(200)).await?;
    let bytes: usize = page
        .items
        .iter()
        .map(|p| serde_json::to_vec(p).map_or(0, |v| v.len()))
        .sum();
    let report = json!({
        "pods": n,
        "secs": secs,
        "pods_per_sec": n as f64 / secs,
        "avg_pod_json_bytes": bytes / page.items.len().max(1),
        "managers": page.items.first().map(|p| p.managed_fields().iter()
            .map(|m| m.manager.clone().unwrap_or_default()).collect::<Vec<_>>()),
    });
    eprintln!("    loaded {n} Pods in {secs:.0}s");
    println!("{report}");
    Ok(())
}

/// The namespaces of the first `n` objects (an existing one is fine).
async fn create_namespaces(client: &Client, n: usize) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    for k in 0..REAL_NAMESPACES.min(n.max(1)) {
        let ns: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": real_namespace(k)}}))?;
        match nss.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).context("creating a namespace"),
        }
    }
    Ok(())
}

/// The `Application` resource for the dynamic API.
async fn create_crs(client: Client, n: usize, concurrency: usize) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(real_crd())?;
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("creating the Application CustomResourceDefinition"),
    }
    create_namespaces(&client, n).await?;
    let ar = cr_api_resource();
    // served once the CRD is Established and discovery has it: a list answers
    let probe: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = probe.list(&ListParams::default().limit(1)).await {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the Application CRD is not served after 60 s: {e}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let started = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let progress = report_progress(done.clone(), started, n, "custom resources");
    let (create_pp, status_pp) = managers(CR_CREATE_MANAGER, CR_STATUS_MANAGER);
    let c = client.clone();
    let mut results = futures::stream::iter(0..n)
        .map(move |i| {
            let (client, create_pp, status_pp, done, ar) = (
                c.clone(),
                create_pp.clone(),
                status_pp.clone(),
                done.clone(),
                ar.clone(),
            );
            async move {
                let api: Api<DynamicObject> = Api::namespaced_with(client, &real_namespace(i), &ar);
                let obj: DynamicObject = serde_json::from_value(real_cr(i))?;
                match api.create(&create_pp, &obj).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e).context("creating an Application"),
                }
                let status = json!({"status": real_cr_status(i, 0)});
                api.patch_status(&real_cr_name(i), &status_pp, &Patch::Merge(&status))
                    .await
                    .context("writing an Application's status")?;
                done.fetch_add(1, Ordering::Relaxed);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(r) = results.next().await {
        r?;
    }
    progress.abort();
    let secs = started.elapsed().as_secs_f64();
    let api: Api<DynamicObject> = Api::all_with(client, &cr_api_resource());
    let page = api.list(&ListParams::default().limit(200)).await?;
    let bytes: usize = page
        .items
        .iter()
        .map(|p| serde_json::to_vec(p).map_or(0, |v| v.len()))
        .sum();
    let report = json!({
        "custom_resources": n,
        "secs": secs,
        "per_sec": n as f64 / secs,
        "avg_json_bytes": bytes / page.items.len().max(1),
        "managers": page.items.first().map(|p| p.managed_fields().iter()
            .map(|m| m.manager.clone().unwrap_or_default()).collect::<Vec<_>>()),
    });
    eprintln!("    loaded {n} custom resources in {secs:.0}s");
    println!("{report}");
    Ok(())
}

async fn update(
    client: Client,
    count: usize,
    rate: f64,
    pods: usize,
    out: PathBuf,
) -> anyhow::Result<()> {
    let pp = PatchParams {
        field_manager: Some(STATUS_MANAGER.into()),
        ..PatchParams::default()
    };
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let run = unix_micros();
    let mut tasks = Vec::with_capacity(count);
    let pods = pods.max(1);
    // a stride co-prime with most N spreads consecutive updates over Pods
    let stride = 7919 % pods.max(2);
    for k in 0..count {
        let at = started + Duration::from_secs_f64(k as f64 / rate.max(0.001));
        tokio::time::sleep_until(at.into()).await;
        let permit = sem.clone().acquire_owned().await?;
        let i = (k * stride.max(1)) % pods;
        let api: Api<Pod> = Api::namespaced(client.clone(), &real_namespace(i));
        let name = real_pod_name(i);
        let (pp, errors) = (pp.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            // unique per driver run: a patch that changes nothing makes no event
            let patch = json!({"status": {"message": format!("load update {run}-{k}")}});
            let r = api.patch_status(&name, &pp, &Patch::Merge(&patch)).await;
            drop(permit);
            match r {
                Ok(p) => p
                    .resource_version()
                    .and_then(|rv| rv.parse::<u64>().ok())
                    .map(|rv| (rv, unix_micros())),
                Err(e) => {
                    if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("real-load: update failed: {e}");
                    }
                    None
                }
            }
        }));
    }
    let mut seen = Vec::with_capacity(count);
    for t in tasks {
        if let Ok(Some(x)) = t.await {
            seen.push(x);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    write_watch_log(&out, &seen)?;
    println!(
        "{}",
        json!({"updates": seen.len(), "errors": errors.load(Ordering::Relaxed),
               "secs": secs, "rate": seen.len() as f64 / secs})
    );
    Ok(())
}

/// Prints every 5 s how many of the `n` objects (`what`) are loaded, until
/// aborted.
fn report_progress(
    done: Arc<AtomicU64>,
    started: Instant,
    n: usize,
    what: &'static str,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let d = done.load(Ordering::Relaxed);
            let s = started.elapsed().as_secs_f64();
            eprintln!(
                "    loaded {d:>6}/{n} {what} in {s:>5.0}s ({:.0}/s)",
                d as f64 / s
            );
        }
    })
}

/// The create and status-patch parameters of the two field managers.
fn managers(create: &str, status: &str) -> (PostParams, PatchParams) {
    (
        PostParams {
            field_manager: Some(create.into()),
            ..PostParams::default()
        },
        PatchParams {
            field_manager: Some(status.into()),
            ..PatchParams::default()
        },
    )
}
