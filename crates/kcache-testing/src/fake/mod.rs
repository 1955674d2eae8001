//! A scripted fake apiserver behind `kube::Client::new(service, "default")`.
//!
//! A test gives [`Fake::new`] a script: a function from the request
//! received ([`Recorded`]) to the [`Reply`] to send (list pages, watch
//! lines, Status errors, raw chunks, a live channel, a refused connection,
//! protobuf bodies from [`protobuf`]). The fake records every request, so
//! the test can then inspect what the client asked for ([`Fake::lists`],
//! [`Fake::watches`], [`Fake::wait_requests`]).
//!
//! [`Fake::serving`] is the common case of a script: every list answered
//! with one body, every watch held open and silent. [`FakeApi`] is a
//! stateful ConfigMap apiserver built on the same fake.

pub mod protobuf;
mod stateful;

pub use protobuf::*;
pub use stateful::FakeApi;

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use http_body::Frame;
use http_body_util::StreamBody;
use kube::Client;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// The body type of the fake's responses.
pub type RespBody = StreamBody<BoxStream<'static, Result<Frame<Bytes>, io::Error>>>;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Virtual time since the fake was made.
    pub at: Duration,
    /// The method.
    pub method: http::Method,
    /// The URI path.
    pub path: String,
    /// The decoded query parameters.
    pub query: BTreeMap<String, String>,
    /// The request headers.
    pub headers: http::HeaderMap,
    /// Index among lists (or among watches).
    pub nth: usize,
}

impl Recorded {
    /// Whether this is a watch (`watch=true`).
    pub fn is_watch(&self) -> bool {
        self.q("watch") == Some("true")
    }
    /// A query parameter.
    pub fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }
    /// The `resourceVersion` parameter.
    pub fn rv(&self) -> Option<&str> {
        self.q("resourceVersion")
    }
    /// A header, if it is text.
    pub fn header(&self, k: &str) -> Option<&str> {
        self.headers.get(k).and_then(|v| v.to_str().ok())
    }
}

/// How a response body ends after its chunks.
#[derive(Debug, Clone, Copy)]
pub enum End {
    /// A clean end of stream.
    Close,
    /// The body never ends.
    Hang,
    /// A body read error (not an EOF).
    Error,
    /// The connection is reset (`ConnectionReset`, which a client takes
    /// for the end of the stream) this long after the response started.
    ResetAfter(Duration),
}

/// What the fake answers to one request.
pub enum Reply {
    /// A status and a JSON body.
    Json(u16, String),
    /// Status 200, one line per entry (a newline is added), then the end.
    Stream(Vec<String>, End),
    /// Status 200, raw chunks, then the end.
    Chunks(Vec<Bytes>, End),
    /// Status 200, then whatever the test sends on the channel; the body
    /// ends when the sender is dropped.
    Channel(mpsc::UnboundedReceiver<Bytes>),
    /// The connection is refused.
    ConnRefused,
    /// The request is accepted but the response headers never come.
    NoHeaders,
    /// Status 200 with a `Content-Length` header of the given value
    /// (whatever the chunks add up to), then the chunks and the end.
    WithLength(u64, Vec<Bytes>, End),
    /// A status, a `Content-Type`, then the chunks and the end.
    Typed(u16, &'static str, Vec<Bytes>, End),
    /// The reply, after this long (the response headers wait).
    Delayed(Duration, Box<Reply>),
    /// A status, extra response headers (e.g. `Retry-After`) and a JSON
    /// body.
    JsonWithHeaders(u16, Vec<(&'static str, String)>, String),
}

/// A watch that sends nothing and never ends.
pub fn hang() -> Reply {
    Reply::Stream(vec![], End::Hang)
}

/// A JSON `Status` error reply.
pub fn status(code: u16, reason: &str, message: &str) -> Reply {
    Reply::Json(code, status_json(code, reason, message))
}

/// The JSON of a failure `Status`.
pub fn status_json(code: u16, reason: &str, message: &str) -> String {
    json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":message,"reason":reason,"code":code}).to_string()
}

/// 410 Gone (`Expired`): the resourceVersion is too old.
pub fn gone() -> Reply {
    status(410, "Expired", "too old resource version")
}

/// 504 with the `ResourceVersionTooLarge` cause.
pub fn too_large() -> Reply {
    Reply::Json(
        504,
        json!({"kind":"Status","apiVersion":"v1","status":"Failure","message":"Too large resource version: 20, current: 10","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}).to_string(),
    )
}

/// A ConfigMap `name` in namespace `ns` at `rv`, with a managed field and
/// one data key (the JSON the scripted tests list and watch).
pub fn cm(name: &str, rv: &str) -> serde_json::Value {
    json!({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":name,"namespace":"ns","resourceVersion":rv,"managedFields":[{"manager":"kubectl","operation":"Update"}]},"data":{"k":"v"}})
}

/// ConfigMaps `names` in namespace `ns`, the i-th with uid `uid-<i>` and
/// resourceVersion `i + 1` (a list to serve with [`list_json`]).
pub fn cm_items(names: &[&str]) -> Vec<serde_json::Value> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": n, "namespace": "ns", "uid": format!("uid-{i}"),
                    "resourceVersion": (i + 1).to_string()}})
        })
        .collect()
}

/// A `ConfigMapList` page reply.
pub fn list(rv: &str, cont: &str, items: Vec<serde_json::Value>) -> Reply {
    Reply::Json(200, list_json(rv, cont, items))
}

/// The JSON of a `ConfigMapList` page.
pub fn list_json(rv: &str, cont: &str, items: Vec<serde_json::Value>) -> String {
    json!({"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":rv,"continue":cont},"items":items}).to_string()
}

/// One watch event line.
pub fn ev(ty: &str, obj: serde_json::Value) -> String {
    json!({"type":ty,"object":obj}).to_string()
}

/// A BOOKMARK line (with the initial-events-end annotation when `end`).
pub fn bookmark(rv: &str, end: bool) -> String {
    let mut meta = json!({"resourceVersion": rv});
    if end {
        meta["annotations"] = json!({"k8s.io/initial-events-end":"true"});
    }
    ev(
        "BOOKMARK",
        json!({"kind":"ConfigMap","apiVersion":"v1","metadata":meta}),
    )
}

/// An ERROR watch line carrying a Status.
pub fn error_event(code: u16, reason: &str) -> String {
    format!(
        "{{\"type\":\"ERROR\",\"object\":{}}}",
        status_json(code, reason, "from the test")
    )
}

type Script = Box<dyn FnMut(&Recorded) -> Reply + Send>;

/// The fake apiserver: a `kube::Client` and the log of requests.
pub struct Fake {
    /// A client whose every request the script answers.
    pub client: Client,
    log: Arc<Mutex<Vec<Recorded>>>,
    count: watch::Sender<usize>,
    /// Response streams currently alive (dropped when the client drops them).
    pub live_streams: Arc<AtomicUsize>,
}

struct Guard(Arc<AtomicUsize>);
impl Drop for Guard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn frames(chunks: Vec<Bytes>, end: End, live: Arc<AtomicUsize>) -> RespBody {
    live.fetch_add(1, Ordering::SeqCst);
    let guard = Guard(live);
    let data = stream::iter(chunks.into_iter().map(|b| Ok(Frame::data(b))));
    let tail: BoxStream<'static, Result<Frame<Bytes>, io::Error>> = match end {
        End::Close => stream::empty().boxed(),
        End::Hang => stream::pending().boxed(),
        End::Error => stream::iter([Err(io::Error::other("stream reset by the test"))]).boxed(),
        End::ResetAfter(d) => stream::once(async move {
            tokio::time::sleep(d).await;
            Err(io::Error::from(io::ErrorKind::ConnectionReset))
        })
        .boxed(),
    };
    let s = data.chain(tail).map(move |x| {
        let _ = &guard;
        x
    });
    StreamBody::new(s.boxed())
}

/// The error type of the fake's service.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The fake's service, under the layer of [`Fake::with_layer`].
pub type FakeService =
    tower::util::BoxService<http::Request<kube::client::Body>, http::Response<RespBody>, BoxError>;

fn respond(reply: Reply, live: Arc<AtomicUsize>) -> Result<http::Response<RespBody>, BoxError> {
    let resp = match reply {
        Reply::ConnRefused | Reply::NoHeaders | Reply::Delayed(..) => {
            unreachable!("answered before")
        }
        Reply::WithLength(len, chunks, end) => http::Response::builder()
            .status(200)
            .header("content-length", len)
            .body(frames(chunks, end, live)),
        Reply::Json(code, body) => http::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(frames(vec![Bytes::from(body)], End::Close, live)),
        Reply::JsonWithHeaders(code, headers, body) => {
            let mut b = http::Response::builder()
                .status(code)
                .header("content-type", "application/json");
            for (name, value) in headers {
                b = b.header(name, value);
            }
            b.body(frames(vec![Bytes::from(body)], End::Close, live))
        }
        Reply::Stream(lines, end) => {
            let chunks = lines.into_iter().map(|l| Bytes::from(l + "\n")).collect();
            http::Response::builder()
                .status(200)
                .body(frames(chunks, end, live))
        }
        Reply::Chunks(chunks, end) => http::Response::builder()
            .status(200)
            .body(frames(chunks, end, live)),
        Reply::Typed(code, content_type, chunks, end) => http::Response::builder()
            .status(code)
            .header("content-type", content_type)
            .body(frames(chunks, end, live)),
        Reply::Channel(mut rx) => {
            live.fetch_add(1, Ordering::SeqCst);
            let guard = Guard(live);
            let s = stream::poll_fn(move |cx| rx.poll_recv(cx)).map(move |b| {
                let _ = &guard;
                Ok::<_, io::Error>(Frame::data(b))
            });
            http::Response::builder()
                .status(200)
                .body(StreamBody::new(s.boxed()))
        }
    };
    resp.map_err(|e| Box::new(e) as BoxError)
}

/// The query parameters of `uri`, decoded as the apiserver decodes them.
fn parse_query(uri: &http::Uri) -> BTreeMap<String, String> {
    let query = uri.query().unwrap_or_default();
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

impl Fake {
    /// A fake answering every request with what `script` returns for it.
    pub fn new(script: impl FnMut(&Recorded) -> Reply + Send + 'static) -> Fake {
        Fake::with_layer(tower::layer::util::Identity::new(), script)
    }

    /// [`Fake::new`], with the client's requests passing through `layer`
    /// (a middleware under test) before the fake answers them.
    pub fn with_layer<L, B>(
        layer: L,
        script: impl FnMut(&Recorded) -> Reply + Send + 'static,
    ) -> Fake
    where
        L: tower::Layer<FakeService>,
        L::Service: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>
            + Send
            + 'static,
        <L::Service as tower::Service<http::Request<kube::client::Body>>>::Future: Send + 'static,
        <L::Service as tower::Service<http::Request<kube::client::Body>>>::Error: Into<BoxError>,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let log: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let (count, _) = watch::channel(0usize);
        let live = Arc::new(AtomicUsize::new(0));
        let script: Arc<Mutex<Script>> = Arc::new(Mutex::new(Box::new(script)));
        let t0 = Instant::now();
        let (log2, count2, live2) = (log.clone(), count.clone(), live.clone());
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let query = parse_query(req.uri());
            let is_watch = query.get("watch").map(String::as_str) == Some("true");
            let nth = log2
                .lock()
                .iter()
                .filter(|r: &&Recorded| r.is_watch() == is_watch)
                .count();
            let rec = Recorded {
                at: t0.elapsed(),
                method: req.method().clone(),
                path: req.uri().path().to_owned(),
                query,
                headers: req.headers().clone(),
                nth,
            };
            let reply = (script.lock())(&rec);
            let n = {
                let mut l = log2.lock();
                l.push(rec);
                l.len()
            };
            count2.send_replace(n);
            let live = live2.clone();
            async move {
                let mut reply = reply;
                while let Reply::Delayed(d, inner) = reply {
                    tokio::time::sleep(d).await;
                    reply = *inner;
                }
                match reply {
                    Reply::ConnRefused => {
                        Err(Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)) as BoxError)
                    }
                    Reply::NoHeaders => std::future::pending().await,
                    reply => respond(reply, live),
                }
            }
        });
        let client = Client::new(layer.layer(FakeService::new(svc)), "default");
        Fake {
            client,
            log,
            count,
            live_streams: live,
        }
    }

    /// A fake answering every list with `list` (status 200) and holding
    /// every watch open, silent.
    pub fn serving(list: impl Into<Bytes>) -> Fake {
        let list = list.into();
        Fake::new(move |r| {
            if r.is_watch() {
                Reply::Chunks(vec![], End::Hang)
            } else {
                Reply::Chunks(vec![list.clone()], End::Close)
            }
        })
    }

    /// A fake answering every list with `list` (a JSON body, status 200);
    /// its first watch streams what the test sends on the returned sender
    /// (one event line per send, e.g. [`ev`] plus a newline), later
    /// watches hang, silent.
    pub fn serving_with_watch(list: String) -> (Fake, mpsc::UnboundedSender<Bytes>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Mutex::new(Some(rx));
        let fake = Fake::new(move |r| {
            if r.is_watch() {
                match rx.lock().take() {
                    Some(rx) => Reply::Channel(rx),
                    None => Reply::Chunks(vec![], End::Hang),
                }
            } else {
                Reply::Json(200, list.clone())
            }
        });
        (fake, tx)
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().clone()
    }
    /// The lists so far.
    pub fn lists(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| !r.is_watch())
            .collect()
    }
    /// The watches so far.
    pub fn watches(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_watch())
            .collect()
    }
    /// Waits (virtual time, up to an hour) until `n` requests were received.
    pub async fn wait_requests(&self, n: usize) -> Vec<Recorded> {
        let reached = crate::count_reaches(&self.count, n, Duration::from_secs(3600)).await;
        let requests = self.requests();
        assert!(reached, "timed out waiting for {n} requests: {requests:#?}");
        requests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_requests_and_answers_by_script() {
        let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
            (false, 0) => list("5", "", vec![cm("a", "5")]),
            (false, _) => gone(),
            (true, _) => Reply::Stream(vec![ev("ADDED", cm("b", "6"))], End::Close),
        });
        let req = |q: &str| {
            http::Request::get(format!("/api/v1/namespaces/ns/configmaps?{q}"))
                .body(Vec::new())
                .unwrap()
        };
        let first: serde_json::Value = fake.client.request(req("limit=5")).await.unwrap();
        assert_eq!(first["items"][0]["metadata"]["name"], "a");
        let err = fake
            .client
            .request::<serde_json::Value>(req("limit=5"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("too old"), "{err}");
        let text = fake
            .client
            .request_text(req("watch=true&resourceVersion=5"))
            .await
            .unwrap();
        assert!(text.contains("\"b\""), "{text}");
        let reqs = fake.wait_requests(3).await;
        assert_eq!(fake.lists().len(), 2);
        assert_eq!(reqs[2].rv(), Some("5"));
        assert_eq!(reqs[2].nth, 0);
        assert_eq!(reqs[1].nth, 1);
    }
}
