//! The sample controller against the cluster of the current kubeconfig.
//!
//! ```text
//! sample-controller [--namespace NS] [--workers N] [--metrics-addr 127.0.0.1:8080]
//!                   [--leader-elect --lease-namespace NS --identity ID]
//!                   [--simulate-deployments]
//! ```
//!
//! Install the CRD first: `kubectl apply -f examples/crds/samplecontroller.k8s.io_foos.yaml`.

use std::net::SocketAddr;

use anyhow::{Context as _, bail};
use kcache_controller::{Config, KubeLeaseLock, LeaderElectionConfig, MetricsRegistry};
use kcache_informer::SharedInformerFactory;
use sample_controller::simulator;

#[derive(Default)]
struct Args {
    namespace: Option<String>,
    workers: usize,
    metrics_addr: Option<SocketAddr>,
    leader_elect: bool,
    lease_namespace: String,
    identity: Option<String>,
    simulate: bool,
}

fn parse() -> anyhow::Result<Args> {
    let mut a = Args {
        workers: 2,
        lease_namespace: "default".into(),
        ..Args::default()
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--namespace" => a.namespace = Some(value("--namespace")?),
            "--workers" => a.workers = value("--workers")?.parse()?,
            "--metrics-addr" => a.metrics_addr = Some(value("--metrics-addr")?.parse()?),
            "--leader-elect" => a.leader_elect = true,
            "--lease-namespace" => a.lease_namespace = value("--lease-namespace")?,
            "--identity" => a.identity = Some(value("--identity")?),
            "--simulate-deployments" => a.simulate = true,
            "-h" | "--help" => {
                println!(
                    "usage: sample-controller [--namespace NS] [--workers N] [--metrics-addr ADDR] \
                     [--leader-elect --lease-namespace NS --identity ID] [--simulate-deployments]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok(a)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = parse()?;
    let client = kube::Client::try_default()
        .await
        .context("no cluster (set KUBECONFIG)")?;
    let metrics = MetricsRegistry::new();
    let mut fb = SharedInformerFactory::builder(client.clone())
        .strip_managed_fields(true)
        .reflector_metrics(metrics.reflector_provider());
    if let Some(ns) = &args.namespace {
        fb = fb.namespace(ns.clone());
    }
    let factory = fb.build();
    let (mut controller, ctx) = sample_controller::build_controller(
        &factory,
        client.clone(),
        Config::default().workers(args.workers),
    );
    controller = controller.metrics(metrics.clone()).shutdown_on_signal();
    if let Some(addr) = args.metrics_addr {
        controller = controller.serve_metrics(addr);
    }
    if args.leader_elect {
        let identity = args
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("sample-controller-{:08x}", rand_id()));
        controller = controller.leader_election(
            LeaderElectionConfig::new(identity),
            KubeLeaseLock::new(client.clone(), &args.lease_namespace, "sample-controller"),
        );
    }
    let sim = if args.simulate {
        let (sim, sim_ctx) = simulator::build_simulator(&factory, client.clone());
        let sim = sim.metrics(metrics).shutdown_on_signal();
        Some(tokio::spawn(sim.run(simulator::reconcile, sim_ctx)))
    } else {
        None
    };
    let result = controller.run(sample_controller::reconcile, ctx).await;
    if let Some(sim) = sim {
        sim.abort();
        let _ = sim.await;
    }
    factory.shutdown().await;
    result.context("controller")
}

fn rand_id() -> u32 {
    std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
}
