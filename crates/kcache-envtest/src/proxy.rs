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
//! - [`FaultProxy::refuse`] accepts new connections and closes them at once;
//! - [`FaultProxy::unlisten`] closes the listening socket, so that new
//!   connections are refused by the kernel (`ECONNREFUSED`, as when the
//!   apiserver is down), and listens again on the same port later.
//!
//! [`FaultProxy::client`] builds a [`kube::Client`] that goes through the
//! proxy. Dropping the proxy stops its tasks and closes its connections.
//!
//! In the default (TCP) mode the bytes are encrypted, so nothing can be
//! inserted into a response. [`FaultProxy::start_http`] starts the **HTTP
//! mode**: the proxy serves plain HTTP/1.1 to the client (its
//! [`FaultProxy::config`] points at `http://127.0.0.1:<port>` and carries no
//! credentials) and forwards every request to the apiserver through a
//! [`kube::Client`] of the upstream configuration (TLS verified, the
//! upstream's credentials). The TCP faults above still apply (on the
//! client's side of the proxy), and [`FaultProxy::inject_watch`] inserts
//! raw bytes into the next watch response of a matching path, at a line
//! boundary (between two watch events), so that a test can feed an informer
//! malformed frames from a live watch. [`FaultProxy::delay_watch_events`]
//! holds every chunk of every watch response for a while before passing it
//! on, in order, while every other request (lists, writes) goes straight
//! through: an informer whose watch is behind the apiserver, for the
//! stale-cache tests of a controller.
//!
//! 429 and 500 storms are injected with a client layer instead.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use kube::{Client, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::lock;

/// Errors of the fault proxy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The listening socket could not be opened.
    #[error("the fault proxy could not listen on 127.0.0.1")]
    Bind(#[source] std::io::Error),
    /// The upstream URL has no usable host and port.
    #[error("the upstream URL {0:?} has no usable 127.0.0.1 host and port")]
    BadUpstream(String),
    /// The proxied URL could not be built.
    #[error("the proxied URL {0:?} is invalid")]
    BadUrl(String),
    /// The client for the proxied address could not be built.
    #[error("building a client through the fault proxy failed")]
    Client(#[source] kube::Error),
    /// The HTTP mode's upstream client could not be built.
    #[error("building the HTTP mode's upstream client failed")]
    Upstream(#[source] kube::Error),
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
    /// Not listening: connection attempts are refused by the kernel.
    unlisten: bool,
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
    injected: AtomicU64,
    http_requests: AtomicU64,
    delayed_watch: AtomicU64,
    held_stalled: AtomicU64,
    held_blackholed: AtomicU64,
    delayed: AtomicU64,
    open: AtomicU64,
    unlistened: AtomicBool,
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
    /// HTTP mode: injections written into a watch response.
    pub injected: u64,
    /// HTTP mode: requests forwarded (or answered 502 when the upstream
    /// failed).
    pub http_requests: u64,
    /// HTTP mode: watch response chunks held back by
    /// [`FaultProxy::delay_watch_events`].
    pub delayed_watch: u64,
    /// Chunks held back by [`FaultProxy::stall`] (each counted once, in
    /// either direction): what a stall really stopped.
    pub held_stalled: u64,
    /// Chunks held back for ever by [`FaultProxy::blackhole_open`].
    pub held_blackholed: u64,
    /// Chunks forwarded late by [`FaultProxy::delay`].
    pub delayed: u64,
    /// Connections open now (accepted and not ended).
    pub open: u64,
    /// The listening socket is closed ([`FaultProxy::unlisten`] has taken
    /// effect): new connections are refused by the kernel.
    pub unlistened: bool,
}

/// A loopback TCP proxy the test controls (see the [module docs](self)).
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    faults: watch::Sender<Faults>,
    counters: Arc<Counters>,
    accept_task: JoinHandle<()>,
    /// HTTP mode: the forwarder behind the TCP faults.
    http: Option<HttpForwarder>,
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
            http: None,
        })
    }

    /// Starts a proxy in HTTP mode (see the [module docs](self)): plain
    /// HTTP/1.1 towards the client, every request forwarded through a
    /// client of `upstream` (normally [`crate::ControlPlane::config`]).
    pub async fn start_http(upstream: Config) -> Result<FaultProxy, ProxyError> {
        let client = Client::try_from(upstream).map_err(ProxyError::Upstream)?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(ProxyError::Bind)?;
        let forwarder_addr = listener.local_addr().map_err(ProxyError::Bind)?;
        let mut proxy = FaultProxy::start(forwarder_addr).await?;
        let injector = Arc::new(Injector::default());
        let task = tokio::spawn(serve_http(
            listener,
            client,
            injector.clone(),
            proxy.counters.clone(),
        ));
        proxy.http = Some(HttpForwarder { injector, task });
        Ok(proxy)
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

    /// `https://127.0.0.1:<proxy port>` (`http://` in HTTP mode).
    pub fn url(&self) -> String {
        let scheme = if self.http.is_some() { "http" } else { "https" };
        format!("{scheme}://{}", self.addr)
    }

    /// `config` with its `cluster_url` pointed at the proxy. In TCP mode TLS
    /// still verifies (the local serving certificate names `127.0.0.1`); in
    /// HTTP mode the credentials are removed (the proxy authenticates
    /// upstream with its own).
    pub fn config(&self, mut config: Config) -> Result<Config, ProxyError> {
        let url = self.url();
        config.cluster_url = url.parse().map_err(|_| ProxyError::BadUrl(url))?;
        if self.http.is_some() {
            config.auth_info = kube::config::AuthInfo::default();
            config.root_cert = None;
        }
        Ok(config)
    }

    /// HTTP mode: inserts `bytes` into the next watch response (a request
    /// with `watch=true`/`watch=1`) whose path contains `path_contains`, at
    /// the next line boundary of its body (at once if the watch is idle
    /// between events). Injections are used once each, in order. While
    /// [`delay_watch_events`](Self::delay_watch_events) holds chunks back,
    /// the injection goes ahead of them (at the boundary of what the client
    /// has received): a watch ended by an injected error then never
    /// delivers the events it held. In TCP mode this does nothing and
    /// returns `false`.
    pub fn inject_watch(&self, path_contains: &str, bytes: impl Into<Bytes>) -> bool {
        let Some(http) = &self.http else {
            return false;
        };
        lock(&http.injector.queue).push_back(Injection {
            path_contains: path_contains.to_owned(),
            bytes: bytes.into(),
        });
        http.injector.wake.send_modify(|g| *g += 1);
        true
    }

    /// HTTP mode: holds every chunk of every watch response (open or new)
    /// for `delay` after it arrived from the apiserver, then passes it on,
    /// in order; lists and writes are not delayed (zero: no delay). Chunks
    /// held when the delay changes keep the release time they got. In TCP
    /// mode this does nothing and returns `false`.
    pub fn delay_watch_events(&self, delay: Duration) -> bool {
        let Some(http) = &self.http else {
            return false;
        };
        *lock(&http.injector.watch_delay) = delay;
        http.injector.wake.send_modify(|g| *g += 1);
        true
    }

    /// HTTP mode: injections queued and not written yet.
    pub fn pending_injections(&self) -> usize {
        self.http
            .as_ref()
            .map_or(0, |h| lock(&h.injector.queue).len())
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

    /// Closes the listening socket (`true`): new connections are refused
    /// by the kernel (`ECONNREFUSED`), which a client treats as a server
    /// that is down (a reflector backs off and watches again, without a
    /// relist), unlike [`FaultProxy::refuse`], whose accepted-then-reset
    /// connections are transport errors. Open connections are not touched.
    /// `false` listens again on the same port. Both take effect shortly
    /// after the call: [`ProxyStats::unlistened`] tells when.
    pub fn unlisten(&self, unlisten: bool) {
        self.faults.send_modify(|f| f.unlisten = unlisten);
    }

    /// Clears every fault (open blackholed connections stay stalled).
    pub fn heal(&self) {
        self.faults.send_modify(|f| {
            f.stalled = false;
            f.refuse = false;
            f.unlisten = false;
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
            injected: self.counters.injected.load(Ordering::Relaxed),
            http_requests: self.counters.http_requests.load(Ordering::Relaxed),
            delayed_watch: self.counters.delayed_watch.load(Ordering::Relaxed),
            held_stalled: self.counters.held_stalled.load(Ordering::Relaxed),
            held_blackholed: self.counters.held_blackholed.load(Ordering::Relaxed),
            delayed: self.counters.delayed.load(Ordering::Relaxed),
            open: self.counters.open.load(Ordering::Relaxed),
            unlistened: self.counters.unlistened.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.faults.send_modify(|f| f.shutdown = true);
        self.accept_task.abort();
        if let Some(h) = &self.http {
            h.task.abort();
            h.injector.wake.send_modify(|g| *g = u64::MAX);
        }
    }
}

async fn accept_loop(
    mut listener: TcpListener,
    upstream: SocketAddr,
    mut faults: watch::Receiver<Faults>,
    counters: Arc<Counters>,
) {
    loop {
        if faults.borrow().unlisten {
            let Ok(addr) = listener.local_addr() else {
                return;
            };
            drop(listener);
            counters.unlistened.store(true, Ordering::Relaxed);
            listener = loop {
                let (unlisten, shutdown) = {
                    let f = faults.borrow_and_update();
                    (f.unlisten, f.shutdown)
                };
                if shutdown {
                    return;
                }
                if !unlisten {
                    match TcpListener::bind(addr).await {
                        Ok(l) => {
                            counters.unlistened.store(false, Ordering::Relaxed);
                            break l;
                        }
                        // the port may still be held for a moment: retry
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    }
                }
                if faults.changed().await.is_err() {
                    return;
                }
            };
        }
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
        counters.open.fetch_add(1, Ordering::Relaxed);
        let (faults, counters) = (faults.clone(), counters.clone());
        tokio::spawn(async move {
            connection(client, upstream, faults, counters.clone()).await;
            counters.open.fetch_sub(1, Ordering::Relaxed);
        });
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
    let up = pump(cr, sw, faults.clone(), cut_at, blackhole_at, &counters);
    let down = pump(sr, cw, faults, cut_at, blackhole_at, &counters);
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
    counters: &Counters,
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
        let (mut counted_stall, mut counted_blackhole) = (false, false);
        loop {
            let (end, stalled, blackholed, delay) = {
                let f = faults.borrow_and_update();
                (
                    ending(&f, cut_at),
                    f.stalled,
                    f.blackhole_generation != blackhole_at,
                    f.delay,
                )
            };
            if let Some(end) = end {
                return (end, to);
            }
            if blackholed && !counted_blackhole {
                counted_blackhole = true;
                counters.held_blackholed.fetch_add(1, Ordering::Relaxed);
            } else if stalled && !blackholed && !counted_stall {
                counted_stall = true;
                counters.held_stalled.fetch_add(1, Ordering::Relaxed);
            }
            if !stalled && !blackholed {
                if !delay.is_zero() {
                    counters.delayed.fetch_add(1, Ordering::Relaxed);
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

// ------------------------------------------------------------- HTTP mode

#[derive(Debug)]
struct HttpForwarder {
    injector: Arc<Injector>,
    task: JoinHandle<()>,
}

#[derive(Debug)]
struct Injection {
    path_contains: String,
    bytes: Bytes,
}

/// Queued injections; `wake` changes when one is queued (`u64::MAX`: the
/// proxy is gone).
#[derive(Debug)]
struct Injector {
    queue: Mutex<VecDeque<Injection>>,
    wake: watch::Sender<u64>,
    /// How long watch chunks are held (see `delay_watch_events`).
    watch_delay: Mutex<Duration>,
}

impl Default for Injector {
    fn default() -> Self {
        Injector {
            queue: Mutex::new(VecDeque::new()),
            wake: watch::Sender::new(0),
            watch_delay: Mutex::new(Duration::ZERO),
        }
    }
}

/// Most bytes of one watch held back by a delay; past it the proxy stops
/// reading the watch until chunks are released (the apiserver's flow
/// control then holds the rest).
const MAX_HELD_WATCH_BYTES: usize = 64 << 20;

impl Injector {
    fn take(&self, path: &str) -> Option<Bytes> {
        let mut q = lock(&self.queue);
        let pos = q.iter().position(|i| path.contains(&i.path_contains))?;
        q.remove(pos).map(|i| i.bytes)
    }
}

type ProxyBody = UnsyncBoxBody<Bytes, std::io::Error>;

fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

async fn serve_http(
    listener: TcpListener,
    client: Client,
    injector: Arc<Injector>,
    counters: Arc<Counters>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (client, injector, counters) = (client.clone(), injector.clone(), counters.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                forward(req, client.clone(), injector.clone(), counters.clone())
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "fault proxy: HTTP connection ended");
            }
        });
    }
}

/// Hop-by-hop headers (and the client's own credentials, which the
/// forwarding client replaces) are not forwarded.
fn forwardable(name: &http::HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-connection"
            | "authorization"
    )
}

fn status_response(code: u16, message: &str) -> http::Response<ProxyBody> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "code": code
    })
    .to_string();
    let mut resp = http::Response::new(full(Bytes::from(body)));
    *resp.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::BAD_GATEWAY);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

fn full(b: Bytes) -> ProxyBody {
    http_body_util::Full::new(b)
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

async fn forward(
    req: http::Request<hyper::body::Incoming>,
    client: Client,
    injector: Arc<Injector>,
    counters: Arc<Counters>,
) -> Result<http::Response<ProxyBody>, Infallible> {
    counters.http_requests.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(status_response(400, &format!("reading the request: {e}"))),
    };
    let watch = is_watch(&parts.uri);
    let path = parts.uri.path().to_owned();
    let target = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned());
    let mut builder = http::Request::builder()
        .method(parts.method.clone())
        .uri(target);
    for (name, value) in &parts.headers {
        if forwardable(name) {
            builder = builder.header(name, value);
        }
    }
    let Ok(upstream_req) = builder.body(kube::client::Body::from(body)) else {
        return Ok(status_response(400, "the request could not be rebuilt"));
    };
    let resp = match client.send(upstream_req).await {
        Ok(r) => r,
        Err(e) => {
            counters.upstream_failed.fetch_add(1, Ordering::Relaxed);
            return Ok(status_response(502, &format!("fault proxy: upstream: {e}")));
        }
    };
    let (mut parts, upstream_body) = resp.into_parts();
    for name in ["connection", "keep-alive", "transfer-encoding", "trailer"] {
        parts.headers.remove(name);
    }
    let body = if watch && parts.status.is_success() {
        // the body changes length: no content-length
        parts.headers.remove(http::header::CONTENT_LENGTH);
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(pump_watch(upstream_body, tx, path, injector, counters));
        ChannelBody(rx).boxed_unsync()
    } else {
        upstream_body.map_err(std::io::Error::other).boxed_unsync()
    };
    Ok(http::Response::from_parts(parts, body))
}

/// Copies a watch body, writing queued injections at line boundaries and
/// holding chunks back while a watch delay is set.
async fn pump_watch(
    mut upstream: kube::client::Body,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    path: String,
    injector: Arc<Injector>,
    counters: Arc<Counters>,
) {
    let mut wake = injector.wake.subscribe();
    // the last chunk read from upstream ended a line
    let mut at_boundary = true;
    // the last chunk sent to the client ended a line
    let mut sent_boundary = true;
    // chunks held by a delay, with their release time, in arrival order
    let mut held: VecDeque<(tokio::time::Instant, Bytes)> = VecDeque::new();
    let mut held_bytes = 0usize;
    // what ended the upstream body, once it has (passed on after the held
    // chunks)
    let mut ended: Option<Option<std::io::Error>> = None;
    loop {
        if *wake.borrow_and_update() == u64::MAX {
            return;
        }
        if (held.is_empty() && at_boundary) || (!held.is_empty() && sent_boundary) {
            while let Some(bytes) = injector.take(&path) {
                counters.injected.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(path = %path, len = bytes.len(), "fault proxy: injecting into a watch");
                if tx.send(Ok(bytes)).await.is_err() {
                    return;
                }
            }
        }
        if held.is_empty()
            && let Some(end) = ended.take()
        {
            if let Some(e) = end {
                let _ = tx.send(Err(e)).await;
            }
            return;
        }
        let release = held.front().map(|(at, _)| *at);
        let reading = ended.is_none() && held_bytes < MAX_HELD_WATCH_BYTES;
        tokio::select! {
            frame = upstream.frame(), if reading => match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                    {
                        at_boundary = data.ends_with(b"\n");
                        let delay = *lock(&injector.watch_delay);
                        if delay.is_zero() && held.is_empty() {
                            sent_boundary = at_boundary;
                            if tx.send(Ok(data)).await.is_err() {
                                return;
                            }
                        } else {
                            counters.delayed_watch.fetch_add(1, Ordering::Relaxed);
                            held_bytes += data.len();
                            held.push_back((tokio::time::Instant::now() + delay, data));
                        }
                    }
                }
                Some(Err(e)) => ended = Some(Some(std::io::Error::other(e))),
                None => ended = Some(None),
            },
            _ = tokio::time::sleep_until(release.unwrap_or_else(tokio::time::Instant::now)), if release.is_some() => {
                if let Some((_, data)) = held.pop_front() {
                    held_bytes -= data.len();
                    sent_boundary = data.ends_with(b"\n");
                    if tx.send(Ok(data)).await.is_err() {
                        return;
                    }
                }
            }
            changed = wake.changed() => if changed.is_err() { return },
            _ = tx.closed() => return,
        }
    }
}

/// A response body fed by a channel.
struct ChannelBody(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }
}
