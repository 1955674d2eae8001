//! The sample controller's command line: what `main` runs, also run by the
//! fault suite's `fault-sample-controller` (with [`Hooks`] that record its
//! writes), so that the leader-elected path under test is this one.
//!
//! ```text
//! sample-controller [--namespace NS] [--workers N] [--metrics-addr 127.0.0.1:8080]
//!                   [--leader-elect --lease-namespace NS --identity ID
//!                    [--lease-duration 15s] [--renew-deadline 10s] [--retry-period 2s]]
//!                   [--simulate-deployments]
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kcache_controller::metrics::RestClientMetricsLayer;
use kcache_controller::{Config, MetricsRegistry, Request};
use kcache_informer::{InformerConfig, SharedInformerFactory};
use kcache_lease::{KubeLeaseLock, LeaderElectionConfig, LeaseTimings};

use crate::{Context, Foo, simulator};

/// The usage line.
pub const USAGE: &str = "usage: sample-controller [--namespace NS] [--workers N] \
    [--metrics-addr ADDR] [--leader-elect --lease-namespace NS --identity ID \
    [--lease-duration 15s] [--renew-deadline 10s] [--retry-period 2s]] [--simulate-deployments]";

/// The parsed command line.
#[derive(Debug, Clone)]
pub struct Args {
    /// Only this namespace (default: all).
    pub namespace: Option<String>,
    /// Reconcile workers (default 2).
    pub workers: usize,
    /// Serve `/metrics`, `/healthz`, `/readyz` here.
    pub metrics_addr: Option<SocketAddr>,
    /// With `--leader-elect`: run only while holding the Lease
    /// `sample-controller`, with these settings.
    pub leader_election: Option<LeaderElectionArgs>,
    /// Also run the Deployment-status simulator.
    pub simulate: bool,
    /// `-h`/`--help` was given.
    pub help: bool,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            namespace: None,
            workers: 2,
            metrics_addr: None,
            leader_election: None,
            simulate: false,
            help: false,
        }
    }
}

/// The leader election settings of the command line.
#[derive(Debug, Clone)]
pub struct LeaderElectionArgs {
    /// The Lease's namespace (default `default`).
    pub lease_namespace: String,
    /// This replica's identity (default: `$HOSTNAME`, or a random one).
    pub identity: Option<String>,
    /// Lease duration, renew deadline, retry period (default: client-go's
    /// 15 s, 10 s, 2 s).
    pub timings: LeaseTimings,
}

impl Default for LeaderElectionArgs {
    fn default() -> Self {
        LeaderElectionArgs {
            lease_namespace: "default".into(),
            identity: None,
            timings: LeaseTimings::default(),
        }
    }
}

impl LeaderElectionArgs {
    fn config(&self) -> LeaderElectionConfig {
        let identity = self
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("sample-controller-{:08x}", rand_id()));
        LeaderElectionConfig::new(identity).timings(self.timings)
    }
}

/// `15s`, `500ms` or plain seconds (`1.5`).
fn duration(text: &str) -> anyhow::Result<Duration> {
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1e-3)
    } else {
        (text.strip_suffix('s').unwrap_or(text), 1.0)
    };
    let value: f64 = number
        .parse()
        .with_context(|| format!("{text:?} is not a duration (e.g. 15s, 500ms)"))?;
    Duration::try_from_secs_f64(value * scale)
        .with_context(|| format!("{text:?} is not a valid duration"))
}

impl Args {
    /// Parses the arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> anyhow::Result<Args> {
        let mut a = Args::default();
        // the leader election flags may come before `--leader-elect`
        let (mut elect, mut le) = (false, LeaderElectionArgs::default());
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
            let t = &mut le.timings;
            match arg.as_str() {
                "--namespace" => a.namespace = Some(value("--namespace")?),
                "--workers" => a.workers = value("--workers")?.parse()?,
                "--metrics-addr" => a.metrics_addr = Some(value("--metrics-addr")?.parse()?),
                "--leader-elect" => elect = true,
                "--lease-namespace" => le.lease_namespace = value("--lease-namespace")?,
                "--identity" => le.identity = Some(value("--identity")?),
                "--lease-duration" => t.lease_duration = duration(&value("--lease-duration")?)?,
                "--renew-deadline" => t.renew_deadline = duration(&value("--renew-deadline")?)?,
                "--retry-period" => t.retry_period = duration(&value("--retry-period")?)?,
                "--simulate-deployments" => a.simulate = true,
                "-h" | "--help" => a.help = true,
                other => bail!("unknown argument {other:?} (see --help)"),
            }
        }
        a.leader_election = elect.then_some(le);
        Ok(a)
    }
}

/// A future run before each reconcile.
pub type BeforeReconcile = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Where a test can step in; [`Hooks::default`] changes nothing.
#[derive(Default)]
pub struct Hooks {
    /// Builds the client from the kubeconfig's configuration (default:
    /// `kube::Client::try_from`), e.g. to record the requests it sends.
    pub client: Option<Box<dyn FnOnce(kube::Config) -> anyhow::Result<kube::Client> + Send>>,
    /// Awaited at the start of every reconcile, e.g. slow work.
    pub before_reconcile: Option<BeforeReconcile>,
}

/// Runs the sample controller until SIGTERM/SIGINT (or, with
/// `--leader-elect`, until it loses its lease: an error, the process
/// exits as client-go's controllers do).
pub async fn run(args: Args, hooks: Hooks) -> anyhow::Result<()> {
    if args.help {
        println!("{USAGE}");
        return Ok(());
    }
    let config = kube::Config::infer()
        .await
        .context("no cluster (set KUBECONFIG)")?;
    let metrics = MetricsRegistry::new();
    let client = match hooks.client {
        Some(build) => build(config)?,
        None => {
            // client-go's rest_client_* metrics for every request
            let host = RestClientMetricsLayer::host_of(&config.cluster_url);
            kube::client::ClientBuilder::try_from(config)
                .context("building the client")?
                .with_layer(&metrics.rest_client_layer(host))
                .build()
        }
    };
    let mut config = InformerConfig::default();
    config.watch.namespace = args.namespace.clone();
    config.watch.object_options.strip_managed_fields = true;
    let factory = SharedInformerFactory::builder(client.clone())
        .config(config)
        .reflector_metrics(metrics.reflector_provider())
        .build();
    let (mut controller, ctx) = crate::build_controller(
        &factory,
        client.clone(),
        Config::default().workers(args.workers),
    );
    controller = controller.metrics(metrics.clone()).shutdown_on_signal();
    if let Some(addr) = args.metrics_addr {
        controller = controller.serve_metrics(addr);
    }
    if let Some(le) = &args.leader_election {
        controller = controller.leader_election(
            le.config(),
            KubeLeaseLock::new(client.clone(), &le.lease_namespace, "sample-controller"),
        );
    }
    let sim = if args.simulate {
        let (sim, sim_ctx) = simulator::build_simulator(&factory, client.clone());
        let sim = sim.metrics(metrics).shutdown_on_signal();
        Some(tokio::spawn(sim.run(simulator::reconcile, sim_ctx)))
    } else {
        None
    };
    let before = hooks.before_reconcile;
    let reconcile = move |req: Request<Foo>, ctx: Arc<Context>| {
        let before = before.clone();
        async move {
            if let Some(before) = before {
                before().await;
            }
            crate::reconcile(req, ctx).await
        }
    };
    let result = controller.run(reconcile, ctx).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_leader_election_timings() {
        let a = Args::parse(
            [
                "--leader-elect",
                "--lease-duration",
                "4s",
                "--renew-deadline",
                "3000ms",
                "--retry-period",
                "1.5",
            ]
            .map(String::from),
        )
        .unwrap();
        let le = a.leader_election.expect("--leader-elect");
        assert_eq!(le.timings.lease_duration, Duration::from_secs(4));
        assert_eq!(le.timings.renew_deadline, Duration::from_secs(3));
        assert_eq!(le.timings.retry_period, Duration::from_millis(1500));
        assert!(Args::parse(["--lease-duration", "soon"].map(String::from)).is_err());
        assert!(Args::parse(["--bogus"].map(String::from)).is_err());
    }
}
