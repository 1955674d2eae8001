//! The sample controller against the cluster of the current kubeconfig.
//!
//! ```text
//! sample-controller [--namespace NS] [--workers N] [--metrics-addr 127.0.0.1:8080]
//!                   [--leader-elect --lease-namespace NS --identity ID
//!                    [--lease-duration 15s] [--renew-deadline 10s] [--retry-period 2s]]
//!                   [--simulate-deployments]
//! ```
//!
//! Install the CRD first: `kubectl apply -f examples/crds/samplecontroller.k8s.io_foos.yaml`.
//! The command line itself is [`sample_controller::cli`].

use sample_controller::cli::{self, Args, Hooks};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(kcache_controller::log_filter("info"))
            }),
        )
        .init();
    cli::run(Args::parse(std::env::args().skip(1))?, Hooks::default()).await
}
