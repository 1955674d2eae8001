//! The reflector's HTTP transport, apart from the state machine: the
//! format a request asks for (`Accept`) and the one a response answers in,
//! sending a request within the response-headers deadline, reading an
//! error body into an [`ApiError`], and the one-time fallback to JSON
//! after a `406 Not Acceptable`.

use std::pin::Pin;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures::Stream;
use http_body_util::BodyExt;
use kcache_core::Format;
use kube::client::Body;
use tracing::warn;

use super::Reflector;
use crate::codec::{self, CodecId, WireCodec};
use crate::error::{
    ApiError, MAX_LOGGED_ERROR, Operation, ReflectorError, TimeoutPhase, Truncated,
};
use crate::limits::read_error_body;

/// Largest error body read.
const MAX_ERROR_BODY: usize = 1 << 20;

pub(super) type DataStream = Pin<Box<dyn Stream<Item = Result<Bytes, kube::Error>> + Send>>;

impl<K: 'static> Reflector<K> {
    /// The format the reflector asks for: with
    /// [`WireFormat::Auto`](crate::WireFormat::Auto) protobuf for a
    /// built-in type and CBOR for a custom resource, until a server
    /// refused it with `406 Not Acceptable` or answered JSON (then JSON
    /// for the rest of its life).
    pub fn asks_for(&self) -> Format {
        self.asking().format()
    }
}

impl<K: 'static> Reflector<K> {
    /// The codec whose format the requests prefer.
    fn asking(&self) -> &'static dyn WireCodec<K> {
        if self.asks_json.load(Ordering::Relaxed) {
            CodecId::JSON.get()
        } else {
            self.codec.get()
        }
    }

    /// Adds the `Accept` of the preferred format to a list (`watch =
    /// false`) or watch request (nothing for JSON: kube's own header).
    pub(super) fn set_accept(&self, req: &mut http::Request<Vec<u8>>, watch: bool) {
        let codec = self.asking();
        if codec.format() != Format::Json {
            req.headers_mut().insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static(codec.accept(watch)),
            );
        }
    }

    /// The codec of a response; a JSON answer to a request that preferred
    /// another format makes the reflector ask for JSON from now on.
    pub(super) fn answered(&self, headers: &http::HeaderMap) -> CodecId {
        let answer = codec::of_response(headers);
        if answer.format() == Format::Json && !self.asks_json.swap(true, Ordering::Relaxed) {
            codec::log_json_answer(self.codec.format(), &self.resource);
        }
        answer
    }

    /// Sends a request within the response-headers deadline. A request
    /// that asked for protobuf and is refused with `406 Not Acceptable` (a
    /// proxy that dropped the JSON fallback from `Accept`, or a server
    /// without protobuf for the type) is sent again at once without it,
    /// and the reflector asks for JSON from then on (one WARN).
    pub(super) async fn send(
        &self,
        op: Operation,
        req: http::Request<Vec<u8>>,
    ) -> Result<http::Response<Body>, ReflectorError> {
        let preferred = self.codec.get::<K>();
        let asked_binary = preferred.format() != Format::Json
            && req
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a == preferred.accept(false) || a == preferred.accept(true));
        if !asked_binary {
            return self.send_once(op, req).await;
        }
        let mut again = http::Request::new(req.body().clone());
        *again.method_mut() = req.method().clone();
        *again.uri_mut() = req.uri().clone();
        *again.headers_mut() = req.headers().clone();
        again.headers_mut().remove(http::header::ACCEPT);
        match self.send_once(op, req).await {
            Err(ReflectorError::Api { error, .. }) if error.code == 406 => {
                if !self.asks_json.swap(true, Ordering::Relaxed) {
                    warn!(
                        error = %Truncated(&error, MAX_LOGGED_ERROR),
                        format = ?preferred.format(),
                        "the apiserver (or a proxy in front of it) refused {:?} with 406 Not Acceptable; this reflector asks for JSON from now on (set WireFormat::Json to skip the attempt, or let the proxy pass `Accept: {}`)",
                        preferred.format(),
                        preferred.accept(false),
                    );
                }
                self.send_once(op, again).await
            }
            other => other,
        }
    }

    async fn send_once(
        &self,
        op: Operation,
        req: http::Request<Vec<u8>>,
    ) -> Result<http::Response<Body>, ReflectorError> {
        let after = self.timeouts.response_headers;
        let resp = tokio::time::timeout(after, self.client.send(req.map(Body::from)))
            .await
            .map_err(|_| ReflectorError::Timeout {
                op,
                resource: self.resource.clone(),
                phase: TimeoutPhase::ResponseHeaders,
                after,
            })?
            .map_err(|source| ReflectorError::Transport {
                op,
                resource: self.resource.clone(),
                source,
            })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let headers = resp.headers().clone();
        let bytes = read_error_body(
            resp.into_body().into_data_stream(),
            MAX_ERROR_BODY,
            self.timeouts.list_body_idle,
        )
        .await;
        Err(ReflectorError::Api {
            op,
            resource: self.resource.clone(),
            error: ApiError::from_status_bytes(Some(status.as_u16()), &bytes)
                .with_retry_after_header(&headers),
        })
    }
}
