//! The sample controller's own command line ([`sample_controller::cli`]),
//! for fault 8 (`fault8::leader_election_sample_controller` in
//! `tests/faults/tests/faults/fault8.rs`), run as a child process so that
//! the test can kill, pause, partition or stop it. Same arguments as
//! `sample-controller`; two test hooks, from the environment:
//!
//! - `KCACHE_FAULT_ACT_LOG=<path>`: every write request the controller
//!   sends (POST, PUT, PATCH, DELETE; the Lease's own excepted) is appended
//!   to the file when sent, as `act <unix nanos> <method> <path>`: the
//!   controller's acts;
//! - `KCACHE_FAULT_RECONCILE_DELAY_MS=<min>-<max>` (or `<n>`): every
//!   reconcile first waits between `min` and `max` ms, picked at random
//!   (slow work of varying length), so that faults land while reconciles
//!   run and an old leader's last reconcile may outlast a new leader's
//!   first.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kcache_fault_suite::{StampLog, unix_nanos};
use kube::client::{Body, ClientBuilder};
use sample_controller::cli::{self, Args, Hooks};

/// Appends a write request the controller sends (but the Lease's) to
/// `log` as `act <unix nanos> <method> <path>`.
fn log_act(log: &StampLog, req: &http::Request<Body>) {
    let method = req.method();
    let path = req.uri().path();
    let write = !matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    );
    // the Lease's create (POST .../leases) and updates (.../leases/<name>)
    let lease = path.contains("/leases/") || path.ends_with("/leases");
    if write && !lease {
        log.note("act", &format!("{method} {path}"));
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut hooks = Hooks::default();
    if let Some(path) = std::env::var_os("KCACHE_FAULT_ACT_LOG") {
        let log = StampLog::open(path)?;
        // a client layer that logs each request as it is sent
        let act_log = tower::util::MapRequestLayer::new(move |req: http::Request<Body>| {
            log_act(&log, &req);
            req
        });
        hooks.client = Some(Box::new(move |config| {
            Ok(ClientBuilder::try_from(config)?
                .with_layer(&act_log)
                .build())
        }));
    }
    if let Ok(range) = std::env::var("KCACHE_FAULT_RECONCILE_DELAY_MS") {
        let (min, max) = range.split_once('-').unwrap_or((&range, &range));
        let (min, max): (u64, u64) = (min.trim().parse()?, max.trim().parse()?);
        anyhow::ensure!(min <= max, "KCACHE_FAULT_RECONCILE_DELAY_MS: {min} > {max}");
        hooks.before_reconcile = Some(Arc::new(move || {
            let ms = min + random() % (max - min + 1);
            Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
                as Pin<Box<dyn Future<Output = ()> + Send>>
        }));
    }
    cli::run(Args::parse(std::env::args().skip(1))?, hooks).await
}

/// A cheap random number (no seed to replay: the delays only make faults
/// land while reconciles run).
fn random() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(unix_nanos());
    h.finish()
}
