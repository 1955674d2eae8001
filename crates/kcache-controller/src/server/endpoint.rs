//! The HTTP endpoint: `/metrics`, `/healthz` and `/readyz` (feature
//! `prometheus`).

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Health;
use crate::metrics::MetricsRegistry;

/// A running metrics and health endpoint; stops when dropped or on
/// [`shutdown`](Self::shutdown).
pub struct MetricsServer {
    addr: SocketAddr,
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl fmt::Debug for MetricsServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsServer")
            .field("addr", &self.addr)
            .finish()
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    resp
}

fn handle(
    req: &Request<Incoming>,
    registry: &MetricsRegistry,
    health: &[Health],
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "method not allowed\n".into(),
        );
    }
    match req.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            registry.encode(),
        ),
        "/healthz" | "/livez" => text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into()),
        "/readyz" => {
            let mut ready = true;
            let mut body = String::new();
            for h in health {
                let (ok, reason) = h.readiness();
                ready &= ok;
                body.push_str(&reason);
                body.push('\n');
            }
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(status, "text/plain; charset=utf-8", body)
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found\n".into(),
        ),
    }
}

impl MetricsServer {
    /// Serves on `listener` (already bound; a std listener is made
    /// non-blocking). Needs a tokio runtime.
    pub fn serve(
        listener: std::net::TcpListener,
        registry: MetricsRegistry,
        health: Vec<Health>,
    ) -> std::io::Result<Self> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?;
        let cancel = CancellationToken::new();
        let task = tokio::spawn(accept_loop(listener, registry, health, cancel.clone()));
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
        Ok(Self {
            addr,
            cancel,
            task: Some(task),
        })
    }

    /// Binds `addr` and serves on it.
    pub async fn bind(
        addr: SocketAddr,
        registry: MetricsRegistry,
        health: Vec<Health>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Self::serve(listener.into_std()?, registry, health)
    }

    /// The address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes open connections and waits for the server's
    /// tasks to end.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Connections served at once; more are closed as soon as accepted (a
/// scraper and a few probes need a handful).
pub const MAX_CONNECTIONS: usize = 64;

/// How long a client may take to send a request's headers (also while an
/// idle keep-alive connection waits for its next request).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a connection is kept, whatever it does.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(300);

async fn accept_loop(
    listener: TcpListener,
    registry: MetricsRegistry,
    health: Vec<Health>,
    cancel: CancellationToken,
) {
    let health: Arc<[Health]> = health.into();
    let mut conns = JoinSet::new();
    let mut refused_logged = false;
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "accepting a metrics connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if conns.len() >= MAX_CONNECTIONS {
            if !std::mem::replace(&mut refused_logged, true) {
                tracing::warn!(%peer, max = MAX_CONNECTIONS, "too many open metrics connections: closing new ones until some end");
            }
            drop(stream);
            continue;
        }
        refused_logged = false;
        let registry = registry.clone();
        let health = health.clone();
        let cancel = cancel.clone();
        conns.spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let resp = handle(&req, &registry, &health);
                async move { Ok::<_, Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "metrics connection ended with an error");
                    }
                }
                _ = tokio::time::sleep(MAX_CONNECTION_AGE) => {}
                _ = cancel.cancelled() => {}
            }
        });
    }
    conns.shutdown().await;
}
