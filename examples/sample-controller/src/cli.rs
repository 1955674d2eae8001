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
use kcache_controller::{Config, KubeLeaseLock, LeaderElectionConfig, MetricsRegistry, Request};
use kcache_informer::SharedInformerFactory;

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
    /// Run only while holding the Lease `sample-controller`.
    pub leader_elect: bool,
    /// The Lease's namespace (default `default`).
    pub lease_namespace: String,
    /// This replica's identity (default: `$HOSTNAME`, or a random one).
    pub identity: Option<String>,
    /// Lease duration, renew deadline, retry period (default: client-go's
    /// 15 s, 10 s, 2 s).
    pub lease_duration: Option<Duration>,
    /// See [`Args::lease_duration`].
    pub renew_deadline: Option<Duration>,
    /// See [`Args::lease_duration`].
    pub retry_period: Option<Duration>,
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
            leader_elect: false,
            lease_namespace: "default".into(),
            identity: None,
            lease_duration: None,
            renew_deadline: None,
            retry_period: None,
            simulate: false,
            help: false,
        }
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
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
            match arg.as_str() {
                "--namespace" => a.namespace = Some(value("--namespace")?),
                "--workers" => a.workers = value("--workers")?.parse()?,
                "--metrics-addr" => a.metrics_addr = Some(value("--metrics-addr")?.parse()?),
                "--leader-elect" => a.leader_elect = true,
                "--lease-namespace" => a.lease_namespace = value("--lease-namespace")?,
                "--identity" => a.identity = Some(value("--identity")?),
                "--lease-duration" => {
                    a.lease_duration = Some(duration(&value("--lease-duration")?)?);
                }
                "--renew-deadline" => {
                    a.renew_deadline = Some(duration(&value("--renew-deadline")?)?);
                }
                "--retry-period" => a.retry_period = Some(duration(&value("--retry-period")?)?),
                "--simulate-deployments" => a.simulate = true,
                "-h" | "--help" => a.help = true,
                other => bail!("unknown argument {other:?} (see --help)"),
            }
        }
        Ok(a)
    }

    fn leader_election_config(&self) -> LeaderElectionConfig {
        let identity = self
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("sample-controller-{:08x}", rand_id()));
        let mut config = LeaderElectionConfig::new(identity);
        if let Some(d) = self.lease_duration {
            config = config.lease_duration(d);
        }
        if let Some(d) = self.renew_deadline {
            config = config.renew_deadline(d);
        }
        if let Some(d) = self.retry_period {
            config = config.retry_period(d);
        }
        config
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
    let mut fb = SharedInformerFactory::builder(client.clone())
        .strip_managed_fields(true)
        .reflector_metrics(metrics.reflector_provider());
    if let Some(ns) = &args.namespace {
        fb = fb.namespace(ns.clone());
    }
    let factory = fb.build();
    let (mut controller, ctx) = crate::build_controller(
        &factory,
        client.clone(),
        Config::default().workers(args.workers),
    );
    controller = controller.metrics(metrics.clone()).shutdown_on_signal();
    if let Some(addr) = args.metrics_addr {
        controller = controller.serve_metrics(addr);
    }
    if args.leader_elect {
        controller = controller.leader_election(
            args.leader_election_config(),
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
        assert!(a.leader_elect);
        assert_eq!(a.lease_duration, Some(Duration::from_secs(4)));
        assert_eq!(a.renew_deadline, Some(Duration::from_secs(3)));
        assert_eq!(a.retry_period, Some(Duration::from_millis(1500)));
        assert!(Args::parse(["--lease-duration", "soon"].map(String::from)).is_err());
        assert!(Args::parse(["--bogus"].map(String::from)).is_err());
    }
}
