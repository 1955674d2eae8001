//! A loopback TCP proxy for fault injection between a client and the
//! apiserver.
//!
//! [`FaultProxy`] listens on `127.0.0.1:<random port>` and forwards every
//! connection, byte for byte, to an upstream address (normally the local
//! apiserver). It works at the TCP level: TLS passes through untouched and
//! still verifies, since the serving certificate of the local control plane
//! names `127.0.0.1`. The test controls it while it runs:
//!
//! - [`FaultProxy::cut_all`] resets every open connection (RST);
//! - [`FaultProxy::stall`] stops forwarding bytes on every connection, open
//!   or new, without closing anything, until it is turned off again;
//! - [`FaultProxy::blackhole_open`] stalls only the connections open now,
//!   for ever (a peer that vanished without a FIN), while new connections
//!   work;
//! - [`FaultProxy::delay`] delays every forwarded chunk;
//! - [`FaultProxy::refuse`] accepts new connections and closes them at once.
//!
//! [`FaultProxy::client`] builds a [`kube::Client`] that goes through the
//! proxy. Dropping the proxy stops its tasks and closes its connections.
//!
//! HTTP-level faults (429, 500) cannot be injected here since the bytes are
//! encrypted; inject them with a client layer instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::{Client, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Errors of the fault proxy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The listening socket could not be opened.
    #[error("the fault proxy could not listen on 127.0.0.1: {0}")]
    Bind(#[source] std::io::Error),
    /// The upstream URL has no usable host and port.
    #[error("the upstream URL {0:?} has no usable 127.0.0.1 host and port")]
    BadUpstream(String),
    /// The proxied URL could not be built.
    #[error("the proxied URL {0:?} is invalid")]
    BadUrl(String),
    /// The client for the proxied address could not be built.
    #[error("building a client through the fault proxy failed: {0}")]
    Client(#[source] kube::Error),
}

/// What the proxy does right now; every connection task follows it.
#[derive(Clone, Debug, Default)]
struct Faults {
    /// Incremented by `cut_all`: connections opened before a newer cut end.
    cut_generation: u64,
    /// Incremented by `blackhole_open`.
    blackhole_generation: u64,
    stalled: bool,
    refuse: bool,
    delay: Duration,
    shutdown: bool,
}

/// Counters of a [`FaultProxy`].
#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    cut: AtomicU64,
    upstream_failed: AtomicU64,
}

/// A snapshot of a proxy's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted and forwarded.
    pub accepted: u64,
    /// Connections accepted and closed at once (refuse mode).
    pub refused: u64,
    /// Connections reset by `cut_all`.
    pub cut: u64,
    /// Connections whose upstream could not be reached.
    pub upstream_failed: u64,
}

/// A loopback TCP proxy the test controls (see the [module docs](self)).
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    faults: watch::Sender<Faults>,
    counters: Arc<Counters>,
    accept_task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on `127.0.0.1:0` forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<FaultProxy, ProxyError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(ProxyError::Bind)?;
        let addr = listener.local_addr().map_err(ProxyError::Bind)?;
        let (faults, rx) = watch::channel(Faults::default());
        let counters = Arc::new(Counters::default());
        let accept_task = tokio::spawn(accept_loop(listener, upstream, rx, counters.clone()));
        Ok(FaultProxy {
            addr,
            faults,
            counters,
            accept_task,
        })
    }

    /// Starts a proxy forwarding to the host and port of an `https://` URL
    /// such as [`crate::ControlPlane::server_url`].
    pub async fn for_url(url: &str) -> Result<FaultProxy, ProxyError> {
        let uri: http::Uri = url
            .parse()
            .map_err(|_| ProxyError::BadUpstream(url.to_owned()))?;
        let host = uri
            .host()
            .ok_or_else(|| ProxyError::BadUpstream(url.to_owned()))?;
        let port = uri
            .port_u16()
            .ok_or_else(|| ProxyError::BadUpstream(url.to_owned()))?;
        let ip = host
            .parse()
            .map_err(|_| ProxyError::BadUpstream(url.to_owned()))?;
        FaultProxy::start(SocketAddr::new(ip, port)).await
    }

    /// The address the proxy listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:<proxy port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// `config` with its `cluster_url` pointed at the proxy. TLS still
    /// verifies: the local serving certificate names `127.0.0.1`.
    pub fn config(&self, mut config: Config) -> Result<Config, ProxyError> {
        let url = self.url();
        config.cluster_url = url.parse().map_err(|_| ProxyError::BadUrl(url))?;
        Ok(config)
    }

    /// A client for `config` that goes through the proxy.
    pub fn client(&self, config: Config) -> Result<Client, ProxyError> {
        Client::try_from(self.config(config)?).map_err(ProxyError::Client)
    }

    /// Resets every connection open now (new connections are accepted).
    pub fn cut_all(&self) {
        self.faults.send_modify(|f| f.cut_generation += 1);
    }

    /// Stops (`true`) or resumes (`false`) forwarding bytes on every
    /// connection, open or new, without closing any.
    pub fn stall(&self, stalled: bool) {
        self.faults.send_modify(|f| f.stalled = stalled);
    }

    /// Stalls the connections open now for ever: no byte, no FIN, no RST,
    /// like a peer that vanished. New connections are forwarded normally.
    pub fn blackhole_open(&self) {
        self.faults.send_modify(|f| f.blackhole_generation += 1);
    }

    /// Delays every forwarded chunk by `delay` (zero: no delay).
    pub fn delay(&self, delay: Duration) {
        self.faults.send_modify(|f| f.delay = delay);
    }

    /// Accepts new connections and closes them at once (`true`), or
    /// forwards them again (`false`).
    pub fn refuse(&self, refuse: bool) {
        self.faults.send_modify(|f| f.refuse = refuse);
    }

    /// Clears every fault (open blackholed connections stay stalled).
    pub fn heal(&self) {
        self.faults.send_modify(|f| {
            f.stalled = false;
            f.refuse = false;
            f.delay = Duration::ZERO;
        });
    }

    /// The counters so far.
    pub fn stats(&self) -> ProxyStats {
        ProxyStats {
            accepted: self.counters.accepted.load(Ordering::Relaxed),
            refused: self.counters.refused.load(Ordering::Relaxed),
            cut: self.counters.cut.load(Ordering::Relaxed),
            upstream_failed: self.counters.upstream_failed.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.faults.send_modify(|f| f.shutdown = true);
        self.accept_task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mut faults: watch::Receiver<Faults>,
    counters: Arc<Counters>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            changed = faults.changed() => {
                if changed.is_err() || faults.borrow().shutdown {
                    return;
                }
                continue;
            }
        };
        let Ok((client, _)) = accepted else {
            // e.g. EMFILE: wait a little instead of spinning
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let now = faults.borrow().clone();
        if now.shutdown {
            return;
        }
        if now.refuse {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            let _ = client.set_zero_linger();
            drop(client);
            continue;
        }
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(connection(
            client,
            upstream,
            faults.clone(),
            counters.clone(),
        ));
    }
}

/// How one connection ended.
enum End {
    Closed,
    Cut,
    Shutdown,
}

async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    faults: watch::Receiver<Faults>,
    counters: Arc<Counters>,
) {
    let (cut_at, blackhole_at) = {
        let f = faults.borrow();
        (f.cut_generation, f.blackhole_generation)
    };
    let server = match TcpStream::connect(upstream).await {
        Ok(s) => s,
        Err(_) => {
            counters.upstream_failed.fetch_add(1, Ordering::Relaxed);
            let _ = client.set_zero_linger();
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, faults.clone(), cut_at, blackhole_at);
    let down = pump(sr, cw, faults, cut_at, blackhole_at);
    tokio::pin!(up, down);
    // The first direction to end decides: after a clean close (FIN) the
    // other direction may still finish; after a cut both sockets are reset.
    let (first, up_first) = tokio::select! {
        r = &mut up => (r, true),
        r = &mut down => (r, false),
    };
    let (end, writer) = first;
    let cut = matches!(end, End::Cut | End::Shutdown);
    if cut {
        reset(writer);
    } else {
        drop(writer);
    }
    let other = async { if up_first { down.await } else { up.await } };
    // the other direction sees the same faults; do not wait for ever on a
    // peer that stopped reading
    let grace = if cut {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(3600)
    };
    if let Ok((end2, w2)) = tokio::time::timeout(grace, other).await {
        if cut || matches!(end2, End::Cut | End::Shutdown) {
            reset(w2);
        }
        if matches!(end, End::Cut) || matches!(end2, End::Cut) {
            counters.cut.fetch_add(1, Ordering::Relaxed);
        }
    } else if matches!(end, End::Cut) {
        counters.cut.fetch_add(1, Ordering::Relaxed);
    }
}

/// Sets SO_LINGER 0 on the socket of `w` and gives the half up without a
/// FIN: the socket is closed with an RST once its read half is dropped.
fn reset(w: tokio::net::tcp::OwnedWriteHalf) {
    let _ = w.as_ref().set_zero_linger();
    w.forget();
}

/// Copies `from` to `to` under the current faults. Returns how it ended and
/// the write half (so the caller decides between FIN and RST).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut faults: watch::Receiver<Faults>,
    cut_at: u64,
    blackhole_at: u64,
) -> (End, tokio::net::tcp::OwnedWriteHalf) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // read, unless a fault ends the connection first
        let n = loop {
            tokio::select! {
                r = from.read(&mut buf) => match r {
                    Ok(0) | Err(_) => {
                        let _ = to.shutdown().await;
                        return (End::Closed, to);
                    }
                    Ok(n) => break n,
                },
                changed = faults.changed() => {
                    if changed.is_err() {
                        return (End::Shutdown, to);
                    }
                    if let Some(end) = ending(&faults.borrow(), cut_at) {
                        return (end, to);
                    }
                }
            }
        };
        // hold the bytes while stalled or blackholed
        loop {
            let (end, hold, delay) = {
                let f = faults.borrow_and_update();
                (
                    ending(&f, cut_at),
                    f.stalled || f.blackhole_generation != blackhole_at,
                    f.delay,
                )
            };
            if let Some(end) = end {
                return (end, to);
            }
            if !hold {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                break;
            }
            if faults.changed().await.is_err() {
                return (End::Shutdown, to);
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return (End::Closed, to);
        }
    }
}

fn ending(f: &Faults, cut_at: u64) -> Option<End> {
    if f.shutdown {
        Some(End::Shutdown)
    } else if f.cut_generation != cut_at {
        Some(End::Cut)
    } else {
        None
    }
}
