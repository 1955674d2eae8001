//! `cargo xtask demo`: the sample controller on a fresh local control plane.
//!
//! Builds (first time only) and starts kube-apiserver + etcd in this
//! process, installs the Foo CRD, runs the sample controller (and a stand-in
//! for the Deployment controller, which the local control plane lacks),
//! creates a few Foos, scales one, deletes one, points one at a Deployment
//! it does not own, prints what happened, and stops everything.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kcache_controller::MetricsRegistry;
use kcache_envtest::{Binaries, ControlPlane};
use kcache_informer::BackgroundCompression;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use sample_controller::{Foo, FooSpec, LocalOptions, start_local};

#[derive(Args)]
pub struct DemoArgs {
    /// How long to wait for each step before giving up, in seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(demo(Duration::from_secs(args.timeout)))
}

struct Clock(Instant);

impl Clock {
    fn say(&self, msg: impl AsRef<str>) {
        println!(
            "[{:>6.2}s] {}",
            self.0.elapsed().as_secs_f64(),
            msg.as_ref()
        );
    }
}

fn new_foo(name: &str, deployment: &str, replicas: i32) -> Foo {
    Foo::new(
        name,
        FooSpec {
            deployment_name: deployment.to_owned(),
            replicas: Some(replicas),
        },
    )
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = Instant::now();
    loop {
        if check().await? {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!("{what}: not done after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Foo is converged when its Deployment has its replicas and its status
/// reports them available.
async fn converged(
    foos: &Api<Foo>,
    deps: &Api<Deployment>,
    name: &str,
    replicas: i32,
) -> anyhow::Result<bool> {
    let Some(f) = foos.get_opt(name).await? else {
        return Ok(false);
    };
    let Some(dep) = deps.get_opt(&f.spec.deployment_name).await? else {
        return Ok(false);
    };
    Ok(dep.spec.replicas == Some(replicas)
        && f.status.map(|s| s.available_replicas) == Some(replicas))
}

/// Prints `title`, then `items` as a table: `headers`, then a row (its
/// cells from `row`) an item.
fn table<K>(title: &str, headers: &[&str], items: &[K], row: impl Fn(&K) -> Vec<String>) {
    println!("\n{title}");
    let rows: Vec<Vec<String>> = items.iter().map(row).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        println!("  {}", s.join("   ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

fn foo_row(f: &Foo) -> Vec<String> {
    vec![
        f.name_any(),
        f.spec.deployment_name.clone(),
        f.spec.replicas.map_or("-".into(), |r| r.to_string()),
        f.status
            .as_ref()
            .map_or("-".into(), |s| s.available_replicas.to_string()),
    ]
}

fn deployment_row(d: &Deployment) -> Vec<String> {
    let owner = d
        .metadata
        .owner_references
        .as_ref()
        .and_then(|o| o.iter().find(|r| r.controller == Some(true)))
        .map_or("<none>".to_owned(), |r| format!("{}/{}", r.kind, r.name));
    vec![
        d.name_any(),
        d.spec.replicas.map_or("-".into(), |r| r.to_string()),
        d.status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .map_or("-".into(), |r| r.to_string()),
        owner,
    ]
}

fn event_row(e: &Event) -> Vec<String> {
    let regarding = e
        .regarding
        .as_ref()
        .map(|r| {
            format!(
                "{}/{}",
                r.kind.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default()
            )
        })
        .unwrap_or_default();
    vec![
        e.type_.clone().unwrap_or_default(),
        e.reason.clone().unwrap_or_default(),
        regarding,
        e.series.as_ref().map_or(1, |s| s.count).to_string(),
        e.note.clone().unwrap_or_default(),
    ]
}

/// The demo's background-compression quiet time: short, so that the demo
/// shows objects compressed (and decompressed by a reconcile) within its
/// run; informers default to 30 s.
const DEMO_QUIET: Duration = Duration::from_secs(2);

async fn demo(timeout: Duration) -> anyhow::Result<()> {
    let clock = Clock(Instant::now());
    println!("kcache demo: k8s.io/sample-controller, ported to kcache, on a local control plane\n");

    clock.say(format!(
        "control plane: kube-apiserver {} + etcd {} (the first run builds them from the pinned Go modules: about 6-7 min on 2 cores, with progress)",
        kcache_envtest::KUBERNETES_VERSION,
        kcache_envtest::ETCD_VERSION
    ));
    Binaries::ensure_async().await?;
    let cp = ControlPlane::start()
        .await
        .context("starting the control plane")?;
    clock.say(format!("control plane up at {}", cp.server_url()));
    let client = cp.client()?;

    cp.install_crds(&[sample_controller::foo_crd()]).await?;
    clock.say("installed CRD foos.samplecontroller.k8s.io (examples/crds/samplecontroller.k8s.io_foos.yaml)");
    let ns = cp.create_namespace("demo").await?;
    clock.say(format!("namespace {ns}"));

    let metrics = MetricsRegistry::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let metrics_addr = listener.local_addr()?;
    let options = LocalOptions {
        workers: 2,
        metrics: Some(metrics.clone()),
        serve_metrics_on: Some(listener),
        // 2 s instead of the default 30 s, to show background compression
        // within the demo's run
        background_compression: BackgroundCompression::default().quiet_for(DEMO_QUIET),
    };
    let running = start_local(&client, &ns, options);
    clock.say(format!(
        "started foo-controller (owns Deployments, finalizer, events) and deployment-simulator; metrics on http://{metrics_addr}/metrics"
    ));

    let health = running.handle.health();
    wait_for("caches synced", timeout, || {
        let ready = health.readiness().0;
        async move { Ok(ready) }
    })
    .await?;
    clock.say("caches synced (Foos, Deployments: one shared informer each); controllers ready");

    let foos: Api<Foo> = Api::namespaced(client.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let wanted = [
        ("alpha", "alpha-web", 1),
        ("beta", "beta-web", 2),
        ("gamma", "gamma-web", 3),
    ];
    for (name, dep, replicas) in wanted {
        foos.create(&PostParams::default(), &new_foo(name, dep, replicas))
            .await?;
        clock.say(format!(
            "created Foo {name} (deploymentName {dep}, replicas {replicas})"
        ));
    }
    for (name, dep, replicas) in wanted {
        wait_for(&format!("Foo {name}"), timeout, || {
            converged(&foos, &deps, name, replicas)
        })
        .await?;
        clock.say(format!("  Foo {name}: Deployment {dep} has {replicas} replica(s), status.availableReplicas = {replicas}"));
    }

    foos.patch(
        "beta",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"spec": {"replicas": 4}})),
    )
    .await?;
    clock.say("scaled Foo beta to 4 replicas");
    wait_for("Foo beta scaled", timeout, || {
        converged(&foos, &deps, "beta", 4)
    })
    .await?;
    clock.say("  Foo beta: Deployment beta-web scaled to 4, status updated");

    foos.delete("gamma", &DeleteParams::default()).await?;
    clock.say("deleted Foo gamma");
    wait_for("Foo gamma gone", timeout, || {
        let (foos, deps) = (foos.clone(), deps.clone());
        async move {
            Ok(
                deps.get_opt("gamma-web").await?.is_none()
                    && foos.get_opt("gamma").await?.is_none(),
            )
        }
    })
    .await?;
    clock.say("  Deployment gamma-web deleted by the finalizer, then Foo gamma went away (no garbage collector needed)");

    let mut stranger =
        sample_controller::controller::new_deployment(&new_foo("x", "legacy-web", 1));
    stranger.metadata.owner_references = None;
    deps.create(&PostParams::default(), &stranger).await?;
    foos.create(&PostParams::default(), &new_foo("delta", "legacy-web", 2))
        .await?;
    clock.say("created Deployment legacy-web (not owned by any Foo) and Foo delta pointing at it");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    wait_for("warning event", timeout, || {
        let events = events.clone();
        async move {
            Ok(events
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("ErrResourceExists")))
        }
    })
    .await?;
    clock.say("  Foo delta: Warning ErrResourceExists; legacy-web left untouched, delta retried with backoff");

    // issue 20: the quiet objects are compressed in the background; a
    // reconcile that reads one (the owned Deployment, from the lister)
    // decompresses it first.
    let (foo_informer, dep_informer) = (
        running.factory.informer::<Foo>(),
        running.factory.informer::<Deployment>(),
    );
    wait_for("quiet objects compressed", timeout, || {
        let stats = dep_informer.background_compression_stats();
        async move { Ok(stats.compressed > 0) }
    })
    .await?;
    clock.say(format!(
        "objects quiet for {DEMO_QUIET:?} compressed in the background: Foos {}, Deployments {}",
        foo_informer.background_compression_stats().compressed,
        dep_informer.background_compression_stats().compressed
    ));
    let (decodes, decompressions) = (kcache_core::decodes(), kcache_core::decompressions());
    foos.patch(
        "alpha",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"spec": {"replicas": 2}})),
    )
    .await?;
    clock.say("scaled Foo alpha to 2 replicas");
    wait_for("Foo alpha scaled", timeout, || {
        converged(&foos, &deps, "alpha", 2)
    })
    .await?;
    clock.say(format!(
        "  Foo alpha: Deployment alpha-web scaled to 2; meanwhile handlers and reconcilers made {} typed decodes, and {} compressed objects were decompressed (about 1 µs each, next to 20-40 µs of decode)",
        kcache_core::decodes() - decodes,
        kcache_core::decompressions() - decompressions
    ));

    // What the cluster holds now.
    let now = sample_controller::observe(&client, &ns).await?;
    let foo_headers = ["NAME", "DEPLOYMENT", "REPLICAS", "AVAILABLE"];
    table("Foos", &foo_headers, &now.foos, foo_row);
    let deployments: Vec<Deployment> = now.deployments.into_values().collect();
    let deployment_headers = ["NAME", "REPLICAS", "AVAILABLE", "CONTROLLED BY"];
    table(
        "Deployments",
        &deployment_headers,
        &deployments,
        deployment_row,
    );
    let mut evs = events.list(&ListParams::default()).await?.items;
    evs.sort_by_key(|e| e.event_time.clone());
    let event_headers = ["TYPE", "REASON", "OBJECT", "COUNT", "NOTE"];
    table(
        "Events (events.k8s.io/v1; repeats folded into a series)",
        &event_headers,
        &evs,
        event_row,
    );

    println!("\nMetrics (excerpt of http://{metrics_addr}/metrics)");
    let text = metrics.encode();
    let mut shown: BTreeMap<&str, ()> = BTreeMap::new();
    for line in text.lines() {
        if (line.starts_with("controller_runtime_reconcile_total")
            || line.starts_with("controller_runtime_reconcile_errors_total")
            || line.starts_with("workqueue_adds_total")
            || line.starts_with("kcache_informer_cached_objects"))
            && shown.insert(line, ()).is_none()
        {
            println!("  {line}");
        }
    }

    // issue 20: what background compression did, and how often anything
    // (handlers, reconcilers, listers) had to decompress an object
    let (foos, deployments) = (
        running.factory.informer::<Foo>(),
        running.factory.informer::<Deployment>(),
    );
    let (f, d) = (
        foos.background_compression_stats(),
        deployments.background_compression_stats(),
    );
    println!(
        "\nBackground compression (quiet for {:?}; the default is 30 s): Foos {} of {} cached objects compressed, Deployments {} of {} (now compressed: {}, {}); over the whole run, {} typed decodes by handlers and reconcilers, {} decompressions",
        foos.background_compression().quiet(),
        f.compressed,
        foos.indexer().len(),
        d.compressed,
        deployments.indexer().len(),
        foos.indexer()
            .list()
            .iter()
            .filter(|o| o.is_compressed())
            .count(),
        deployments
            .indexer()
            .list()
            .iter()
            .filter(|o| o.is_compressed())
            .count(),
        kcache_core::decodes(),
        kcache_core::decompressions()
    );

    println!();
    running.stop().await?;
    clock.say("controllers stopped (graceful shutdown, queue drained, informers stopped)");
    drop(cp);
    clock.say("control plane stopped");
    Ok(())
}
