//! client-go's REST client metrics as a tower layer on a [`kube::Client`]'s
//! service: `rest_client_requests_total{code,method,host}` (`code` is the
//! HTTP status, or `<error>` when no response came) and
//! `rest_client_request_duration_seconds{verb,host}` (until the response
//! head arrived, as client-go measures: a watch counts until it opened).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use kcache_core::metrics::prometheus::{HistogramFamily, Labels, family, histogram_family, labels};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tower::{Layer, Service};

fn latency_histogram() -> Histogram {
    // client-go's buckets for rest_client_request_duration_seconds
    Histogram::new([
        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
    ])
}

/// The REST client families, registered once per registry (by
/// [`MetricsRegistry::new`](super::MetricsRegistry::new)).
#[derive(Clone)]
pub struct RestClientMetrics {
    requests: Family<Labels, Counter>,
    latency: HistogramFamily,
}

impl fmt::Debug for RestClientMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestClientMetrics").finish_non_exhaustive()
    }
}

impl RestClientMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let r = registry;
        Self {
            requests: family(
                r,
                "rest_client_requests",
                "Number of HTTP requests, partitioned by status code, method, and host",
            ),
            latency: histogram_family(
                r,
                "rest_client_request_duration_seconds",
                "Request latency in seconds. Broken down by verb, and host",
                latency_histogram,
            ),
        }
    }

    fn record(&self, code: &str, method: &str, host: &str, seconds: f64) {
        let l = labels(&[("code", code), ("method", method), ("host", host)]);
        self.requests.get_or_create(&l).inc();
        let l = labels(&[("verb", method), ("host", host)]);
        self.latency.get_or_create(&l).observe(seconds);
    }
}

/// A tower [`Layer`] that records every request through it in
/// [`RestClientMetrics`]; from
/// [`MetricsRegistry::rest_client_layer`](super::MetricsRegistry::rest_client_layer).
#[derive(Clone, Debug)]
pub struct RestClientMetricsLayer {
    metrics: RestClientMetrics,
    host: Arc<str>,
}

impl RestClientMetricsLayer {
    /// A layer recording into `metrics`; `host` labels requests whose URI
    /// has no authority.
    pub fn new(metrics: RestClientMetrics, host: impl Into<String>) -> Self {
        Self {
            metrics,
            host: host.into().into(),
        }
    }

    /// The `host:port` of a cluster URL (client-go's `host` label), or an
    /// empty string when it has none.
    pub fn host_of(uri: &http::Uri) -> String {
        uri.authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default()
    }
}

impl<S> Layer<S> for RestClientMetricsLayer {
    type Service = RestClientMetricsService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RestClientMetricsService {
            inner,
            metrics: self.metrics.clone(),
            host: self.host.clone(),
        }
    }
}

/// The service of [`RestClientMetricsLayer`].
#[derive(Clone, Debug)]
pub struct RestClientMetricsService<S> {
    inner: S,
    metrics: RestClientMetrics,
    host: Arc<str>,
}

impl<S, B, RB> Service<Request<B>> for RestClientMetricsService<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let method = req.method().as_str().to_owned();
        let host = req
            .uri()
            .authority()
            .map_or_else(|| self.host.to_string(), |a| a.as_str().to_owned());
        let metrics = self.metrics.clone();
        let start = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            let code = match &result {
                Ok(r) => r.status().as_u16().to_string(),
                Err(_) => "<error>".to_owned(),
            };
            metrics.record(&code, &method, &host, start.elapsed().as_secs_f64());
            result
        })
    }
}
