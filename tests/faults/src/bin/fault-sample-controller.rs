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
use std::io::Write as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube::client::{Body, ClientBuilder};
use sample_controller::cli::{self, Args, Hooks};

type Log = Arc<Mutex<std::fs::File>>;

/// A client layer that logs every write request but the Lease's.
#[derive(Clone)]
struct ActLog(Log);

impl<S> tower::Layer<S> for ActLog {
    type Service = ActLogService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ActLogService {
            inner,
            log: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct ActLogService<S> {
    inner: S,
    log: Log,
}

impl<S> tower::Service<http::Request<Body>> for ActLogService<S>
where
    S: tower::Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let method = req.method();
        let path = req.uri().path();
        let write = !matches!(
            *method,
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        );
        // the Lease's create (POST .../leases) and updates (.../leases/<name>)
        let lease = path.contains("/leases/") || path.ends_with("/leases");
        if write && !lease {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let line = format!("act {nanos} {method} {path}\n");
            let mut f = self
                .log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            // one write per line, unbuffered: a SIGKILL loses nothing written
            let _ = f.write_all(line.as_bytes());
        }
        self.inner.call(req)
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
        let log: Log = Arc::new(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        ));
        hooks.client = Some(Box::new(move |config| {
            Ok(ClientBuilder::try_from(config)?
                .with_layer(&ActLog(log))
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
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}
