//! A scripted fake apiserver behind `kube::Client::new(service, "default")`.
#![allow(dead_code)]

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

pub type RespBody = StreamBody<BoxStream<'static, Result<Frame<Bytes>, io::Error>>>;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Virtual time since the fake was made.
    pub at: Duration,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub headers: http::HeaderMap,
    /// Index among lists (or among watches).
    pub nth: usize,
}

impl Recorded {
    pub fn is_watch(&self) -> bool {
        self.q("watch") == Some("true")
    }
    pub fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }
    pub fn rv(&self) -> Option<&str> {
        self.q("resourceVersion")
    }
    pub fn header(&self, k: &str) -> Option<&str> {
        self.headers.get(k).and_then(|v| v.to_str().ok())
    }
}

/// How a watch stream ends after its lines.
#[derive(Debug, Clone, Copy)]
pub enum End {
    Close,
    Hang,
    /// A body read error (not an EOF).
    Error,
    /// The connection is reset (`ConnectionReset`, which a client takes
    /// for the end of the stream) this long after the response started.
    ResetAfter(Duration),
}

pub enum Reply {
    Json(u16, String),
    Stream(Vec<String>, End),
    /// Raw chunks, then the end.
    Chunks(Vec<Bytes>, End),
    Channel(mpsc::UnboundedReceiver<Bytes>),
    ConnRefused,
    /// The request is accepted but the response headers never come.
    NoHeaders,
    /// Status 200 with a `Content-Length` header of the given value
    /// (whatever the chunks add up to), then the chunks and the end.
    WithLength(u64, Vec<Bytes>, End),
    /// A status, a `Content-Type`, then the chunks and the end.
    Typed(u16, &'static str, Vec<Bytes>, End),
}

// ------------------------------------------------------------- protobuf
//
// The fake speaks Kubernetes protobuf too: `k8s\0` + `runtime.Unknown`
// bodies, length-delimited `WatchEvent` frames (field numbers of the
// generated.proto files of k8s.io/api and k8s.io/apimachinery v0.37.2).

pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
pub const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field.
pub fn pb_field(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    varint(out, u64::from(number) << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A varint field.
pub fn pb_varint(out: &mut Vec<u8>, number: u32, v: u64) {
    varint(out, u64::from(number) << 3);
    varint(out, v);
}

fn pb_map_entry(out: &mut Vec<u8>, number: u32, k: &str, v: &str) {
    let mut e = Vec::new();
    pb_field(&mut e, 1, k.as_bytes());
    pb_field(&mut e, 2, v.as_bytes());
    pb_field(out, number, &e);
}

/// `k8s\0` + `runtime.Unknown` {typeMeta, raw, contentEncoding "",
/// contentType ""}, as the apiserver writes it.
pub fn pb_envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut tm = Vec::new();
    pb_field(&mut tm, 1, api_version.as_bytes());
    pb_field(&mut tm, 2, kind.as_bytes());
    let mut out = b"k8s\0".to_vec();
    pb_field(&mut out, 1, &tm);
    pb_field(&mut out, 2, raw);
    pb_field(&mut out, 3, b"");
    pb_field(&mut out, 4, b"");
    out
}

/// The protobuf of [`cm`]: the same ConfigMap (no envelope).
pub fn pb_cm(name: &str, rv: &str) -> Vec<u8> {
    pb_cmu(name, "", rv)
}

/// [`pb_cm`] with a uid.
pub fn pb_cmu(name: &str, uid: &str, rv: &str) -> Vec<u8> {
    let mut mf = Vec::new();
    pb_field(&mut mf, 1, b"kubectl");
    pb_field(&mut mf, 2, b"Update");
    let mut meta = Vec::new();
    pb_field(&mut meta, 1, name.as_bytes());
    pb_field(&mut meta, 3, b"ns");
    if !uid.is_empty() {
        pb_field(&mut meta, 5, uid.as_bytes());
    }
    pb_field(&mut meta, 6, rv.as_bytes());
    pb_field(&mut meta, 17, &mf);
    let mut cm = Vec::new();
    pb_field(&mut cm, 1, &meta);
    pb_map_entry(&mut cm, 2, "k", "v");
    cm
}

/// A `ConfigMapList` body of `items` (each a [`pb_cm`]).
pub fn pb_list_body(rv: &str, cont: &str, items: &[Vec<u8>]) -> Vec<u8> {
    let mut meta = Vec::new();
    pb_field(&mut meta, 2, rv.as_bytes());
    pb_field(&mut meta, 3, cont.as_bytes());
    let mut list = Vec::new();
    pb_field(&mut list, 1, &meta);
    for it in items {
        pb_field(&mut list, 2, it);
    }
    pb_envelope("v1", "ConfigMapList", &list)
}

/// A protobuf list reply, cut into chunks of `chunk` bytes.
pub fn pb_list(rv: &str, cont: &str, items: &[Vec<u8>], chunk: usize) -> Reply {
    let body = pb_list_body(rv, cont, items);
    Reply::Typed(
        200,
        PROTOBUF,
        body.chunks(chunk.max(1))
            .map(Bytes::copy_from_slice)
            .collect(),
        End::Close,
    )
}

/// One watch frame: a 4-byte big-endian length, then a `WatchEvent`
/// {type, RawExtension{raw: object}}.
pub fn pb_frame(ty: &str, object: &[u8]) -> Vec<u8> {
    let mut raw = Vec::new();
    pb_field(&mut raw, 1, object);
    let mut ev = Vec::new();
    pb_field(&mut ev, 1, ty.as_bytes());
    pb_field(&mut ev, 2, &raw);
    let mut out = (ev.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&ev);
    out
}

/// A watch frame of a ConfigMap event.
pub fn pb_ev(ty: &str, cm: &[u8]) -> Vec<u8> {
    pb_frame(ty, &pb_envelope("v1", "ConfigMap", cm))
}

/// A BOOKMARK frame (with the initial-events-end annotation when `end`).
pub fn pb_bookmark(rv: &str, end: bool) -> Vec<u8> {
    let mut meta = Vec::new();
    pb_field(&mut meta, 6, rv.as_bytes());
    if end {
        pb_map_entry(&mut meta, 12, "k8s.io/initial-events-end", "true");
    }
    let mut cm = Vec::new();
    pb_field(&mut cm, 1, &meta);
    pb_frame("BOOKMARK", &pb_envelope("v1", "ConfigMap", &cm))
}

/// A protobuf `Status` body.
pub fn pb_status_body(code: u16, reason: &str, message: &str) -> Vec<u8> {
    let mut st = Vec::new();
    pb_field(&mut st, 1, b"");
    pb_field(&mut st, 2, b"Failure");
    pb_field(&mut st, 3, message.as_bytes());
    pb_field(&mut st, 4, reason.as_bytes());
    pb_varint(&mut st, 6, u64::from(code));
    pb_envelope("v1", "Status", &st)
}

/// An HTTP error answered with a protobuf Status.
pub fn pb_status(code: u16, reason: &str, message: &str) -> Reply {
    Reply::Typed(
        code,
        PROTOBUF,
        vec![Bytes::from(pb_status_body(code, reason, message))],
        End::Close,
    )
}

/// An ERROR frame carrying a Status.
pub fn pb_error_event(code: u16, reason: &str) -> Vec<u8> {
    pb_frame("ERROR", &pb_status_body(code, reason, "from the test"))
}

/// A protobuf watch reply: the frames, each in chunks of `chunk` bytes
/// (0: one chunk per frame), then the end.
pub fn pb_watch(frames: Vec<Vec<u8>>, chunk: usize, end: End) -> Reply {
    let chunks = if chunk == 0 {
        frames.into_iter().map(Bytes::from).collect()
    } else {
        frames
            .concat()
            .chunks(chunk)
            .map(Bytes::copy_from_slice)
            .collect()
    };
    Reply::Typed(200, PROTOBUF_WATCH, chunks, end)
}

pub fn status(code: u16, reason: &str, message: &str) -> Reply {
    Reply::Json(code, status_json(code, reason, message))
}

pub fn status_json(code: u16, reason: &str, message: &str) -> String {
    json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":message,"reason":reason,"code":code}).to_string()
}

pub fn gone() -> Reply {
    status(410, "Expired", "too old resource version")
}

pub fn too_large() -> Reply {
    Reply::Json(
        504,
        json!({"kind":"Status","apiVersion":"v1","status":"Failure","message":"Too large resource version: 20, current: 10","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}).to_string(),
    )
}

pub fn cm(name: &str, rv: &str) -> serde_json::Value {
    json!({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":name,"namespace":"ns","resourceVersion":rv,"managedFields":[{"manager":"kubectl","operation":"Update"}]},"data":{"k":"v"}})
}

pub fn list(rv: &str, cont: &str, items: Vec<serde_json::Value>) -> Reply {
    Reply::Json(200, list_json(rv, cont, items))
}

pub fn list_json(rv: &str, cont: &str, items: Vec<serde_json::Value>) -> String {
    json!({"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":rv,"continue":cont},"items":items}).to_string()
}

pub fn ev(ty: &str, obj: serde_json::Value) -> String {
    json!({"type":ty,"object":obj}).to_string()
}

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

pub fn error_event(code: u16, reason: &str) -> String {
    format!(
        "{{\"type\":\"ERROR\",\"object\":{}}}",
        status_json(code, reason, "from the test")
    )
}

type Script = Box<dyn FnMut(&Recorded) -> Reply + Send>;

pub struct Fake {
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

impl Fake {
    pub fn new(script: impl FnMut(&Recorded) -> Reply + Send + 'static) -> Fake {
        let log: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let (count, _) = watch::channel(0usize);
        let live = Arc::new(AtomicUsize::new(0));
        let script: Arc<Mutex<Script>> = Arc::new(Mutex::new(Box::new(script)));
        let t0 = Instant::now();
        let (log2, count2, live2) = (log.clone(), count.clone(), live.clone());
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let uri = req.uri().clone();
            let mut query = BTreeMap::new();
            if let Some(q) = uri.query() {
                for pair in q.split('&') {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    query.insert(decode(k), decode(v));
                }
            }
            let is_watch = query.get("watch").map(String::as_str) == Some("true");
            let nth = log2
                .lock()
                .iter()
                .filter(|r: &&Recorded| r.is_watch() == is_watch)
                .count();
            let rec = Recorded {
                at: t0.elapsed(),
                path: uri.path().to_owned(),
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
                let resp = match reply {
                    Reply::ConnRefused => {
                        return Err::<
                            http::Response<RespBody>,
                            Box<dyn std::error::Error + Send + Sync>,
                        >(Box::new(io::Error::from(
                            io::ErrorKind::ConnectionRefused,
                        )));
                    }
                    Reply::NoHeaders => std::future::pending().await,
                    Reply::WithLength(len, chunks, end) => http::Response::builder()
                        .status(200)
                        .header("content-length", len)
                        .body(frames(chunks, end, live)),
                    Reply::Json(code, body) => http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(frames(vec![Bytes::from(body)], End::Close, live)),
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
                resp.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
            }
        });
        let client = Client::new(svc, "default");
        Fake {
            client,
            log,
            count,
            live_streams: live,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().clone()
    }
    pub fn lists(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| !r.is_watch())
            .collect()
    }
    pub fn watches(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_watch())
            .collect()
    }
    /// Waits (virtual time) until `n` requests were received.
    pub async fn wait_requests(&self, n: usize) -> Vec<Recorded> {
        let mut rx = self.count.subscribe();
        let r = tokio::time::timeout(Duration::from_secs(3600), rx.wait_for(|c| *c >= n)).await;
        assert!(
            r.is_ok(),
            "timed out waiting for {n} requests: {:#?}",
            self.requests()
        );
        self.requests()
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let h = u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?');
                out.push(h);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
