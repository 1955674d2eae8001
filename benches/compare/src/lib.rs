//! The side-by-side comparison harness of `cargo xtask bench-compare`.
//!
//! - [`generate`] builds a deterministic data set of realistic Pods (about
//!   5 KB of JSON each, managedFields included) and a watch stream of updates
//!   and deletes that ends with the [`END_MARKER`] Pod and a bookmark.
//! - [`serve`] is a minimal loopback Kubernetes apiserver for
//!   `/api/v1/pods`: paged lists (`limit`/`continue`, `resourceVersion`) and a
//!   chunked watch (JSON lines, `allowWatchBookmarks`), optionally answering
//!   the first watch with `410 Gone` to force a relist. Plain HTTP, no auth:
//!   kube-rs and client-go both accept `server: http://127.0.0.1:PORT`.
//! - [`Report`] is the one JSON line every client prints.
//! - [`protobuf`] encodes the data set as protobuf (the Pods by k8s.io/api's
//!   own `Marshal`, run in the client-go module), which the server sends to
//!   clients that ask for `application/vnd.kubernetes.protobuf`.
//! - [`real`]: the Pods and the client protocol of the runs against the real
//!   apiserver (`cargo xtask bench-compare --real`).
//!
//! The binaries: `replay` (the server), `kcache-client`, `kube-runtime-client`,
//! `decode-ceiling`, `warm-restart`, and `real-load` (the Pods and the update
//! load of `--real`). The client-go client is the Go module in
//! `benches/compare/client-go`.

pub mod protobuf;
pub mod real;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kcache_testing::fake::protobuf::{pb_frame, pb_status_body};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader, BufWriter,
};
use tokio::net::{TcpListener, TcpStream};

/// The name of the Pod the watch stream adds after its last event: every
/// client stops counting when its handler sees it.
pub const END_MARKER: &str = "bench-end-marker";

/// The namespaces Pods are spread over.
const NAMESPACES: usize = 40;

/// One Pod of the data set: `i` is its index, `rv` its resourceVersion,
/// `generation` how many times it was updated (changes status and an
/// annotation, as a kubelet status update would).
pub fn pod(i: usize, rv: u64, generation: usize) -> Value {
    let ns = format!("tenant-{:02}", i % NAMESPACES);
    let rs = format!("checkout-{:x}", 0x5f00_0000u64 + (i / 25) as u64);
    let name = format!("{rs}-{:05x}", i);
    let uid = format!(
        "{:08x}-7c1d-4e8a-9b2f-{:012x}",
        i as u64 * 2_654_435_761 % 0xffff_ffff,
        i
    );
    let rs_uid = format!("{:08x}-1a2b-4c3d-8e4f-{:012x}", i / 25, i / 25);
    let ip = format!("10.{}.{}.{}", 32 + i / 65_536 % 200, i / 256 % 256, i % 256);
    let node = format!("worker-{:03}", i % 97);
    let ready = if generation % 7 == 3 { "False" } else { "True" };
    let image = "ghcr.io/example/shop/checkout:v2.18.4";
    let managed = json!([
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": "2026-11-28T08:14:03Z", "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app.kubernetes.io/name": {},
                "f:app.kubernetes.io/part-of": {}, "f:pod-template-hash": {}, "f:version": {}},
                "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{rs_uid}\"}}"): {}}},
            "f:spec": {"f:containers": {
                "k:{\"name\":\"checkout\"}": {".": {}, "f:env": {".": {},
                    "k:{\"name\":\"GOMAXPROCS\"}": {".": {}, "f:name": {}, "f:valueFrom": {}},
                    "k:{\"name\":\"OTEL_EXPORTER_OTLP_ENDPOINT\"}": {".": {}, "f:name": {}, "f:value": {}}},
                    "f:image": {}, "f:imagePullPolicy": {}, "f:livenessProbe": {}, "f:name": {},
                    "f:ports": {".": {}, "k:{\"containerPort\":8443,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                    "f:readinessProbe": {}, "f:resources": {".": {}, "f:limits": {}, "f:requests": {}},
                    "f:securityContext": {}, "f:terminationMessagePath": {}, "f:volumeMounts": {}},
                "k:{\"name\":\"envoy\"}": {".": {}, "f:args": {}, "f:image": {}, "f:name": {}, "f:resources": {}}},
                "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:priorityClassName": {}, "f:restartPolicy": {},
                "f:schedulerName": {}, "f:securityContext": {}, "f:serviceAccountName": {},
                "f:terminationGracePeriodSeconds": {}, "f:volumes": {}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
         "time": "2026-11-28T08:14:09Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {
            "f:conditions": {"k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                "k:{\"type\":\"Initialized\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                "k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}},
            "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {},
            "f:podIPs": {".": {}, format!("k:{{\"ip\":\"{ip}\"}}"): {".": {}, "f:ip": {}}}, "f:startTime": {}}}}
    ]);
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": name, "generateName": format!("{rs}-"), "namespace": ns, "uid": uid,
            "resourceVersion": rv.to_string(), "creationTimestamp": "2026-11-28T08:14:03Z",
            "labels": {"app.kubernetes.io/name": "checkout", "app.kubernetes.io/part-of": "shop",
                "pod-template-hash": rs.trim_start_matches("checkout-"), "version": "v2.18.4"},
            "annotations": {"kubectl.kubernetes.io/default-container": "checkout",
                "prometheus.io/path": "/metrics", "bench.kcache.dev/status-updates": generation.to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": rs_uid,
                "controller": true, "blockOwnerDeletion": true}],
            "managedFields": managed
        },
        "spec": {
            "serviceAccountName": "checkout", "nodeName": node, "priorityClassName": "tier-1",
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 45, "enableServiceLinks": false,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {"name": "checkout", "image": image, "imagePullPolicy": "IfNotPresent",
                 "ports": [{"name": "https", "containerPort": 8443, "protocol": "TCP"}],
                 "env": [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"},
                         {"name": "GOMAXPROCS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1"}}}],
                 "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "250m", "memory": "256Mi"}},
                 "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8443, "scheme": "HTTPS"}, "periodSeconds": 10, "failureThreshold": 3},
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": 8443, "scheme": "HTTPS"}, "periodSeconds": 5},
                 "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                 "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"},
                {"name": "envoy", "image": "docker.io/envoyproxy/envoy:v1.33.2", "args": ["--config-path", "/etc/envoy/envoy.yaml"],
                 "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]
        },
        "status": {
            "phase": "Running", "hostIP": "192.168.7.21", "hostIPs": [{"ip": "192.168.7.21"}], "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": "2026-11-28T08:14:04Z", "qosClass": "Burstable",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-28T08:14:04Z"},
                {"type": "Ready", "status": ready, "lastProbeTime": null, "lastTransitionTime": "2026-11-28T08:14:09Z"},
                {"type": "ContainersReady", "status": ready, "lastProbeTime": null, "lastTransitionTime": "2026-11-28T08:14:09Z"},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-28T08:14:03Z"}],
            "containerStatuses": [
                {"name": "checkout", "ready": ready == "True", "restartCount": generation / 7, "started": true, "image": image,
                 "imageID": "ghcr.io/example/shop/checkout@sha256:9c3f1e0b7a5d4c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b",
                 "containerID": format!("containerd://{:064x}", i as u128 * 0x9e37_79b9_7f4a_7c15),
                 "state": {"running": {"startedAt": "2026-11-28T08:14:08Z"}}, "lastState": {}}]
        }
    })
}

/// A generated data set, serialized once and served as bytes.
pub struct DataSet {
    /// The N Pods of the list, one JSON document each.
    pub pods: Vec<Bytes>,
    /// The resourceVersion of the list.
    pub list_rv: u64,
    /// The watch stream from `list_rv`: M events, then the end marker, as
    /// JSON lines.
    pub watch: Bytes,
    /// The bookmark sent after `watch` when the client allows bookmarks.
    pub bookmark: Bytes,
    /// Number of events in `watch`, end marker included.
    pub watch_events: usize,
    /// Mean size of a listed Pod's JSON, bytes.
    pub avg_pod_bytes: usize,
    /// Mean size of a listed Pod's JSON without managedFields, bytes.
    pub avg_pod_bytes_stripped: usize,
    /// The same data as protobuf, served to clients that ask for it (see
    /// [`protobuf::encode`]); `None`: JSON only.
    pub protobuf: Option<protobuf::ProtobufData>,
}

/// The size of a generated data set, as command-line options.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct DataSetArgs {
    /// Pods in the list.
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,
    /// Watch events after the list.
    #[arg(long, default_value_t = 10_000)]
    pub events: usize,
}

impl DataSetArgs {
    /// [`generate`]s the data set of this size.
    pub fn generate(&self) -> DataSet {
        generate(self.pods, self.events)
    }
}

/// Generates N Pods (resourceVersions 1..=N) and M watch events
/// (resourceVersions N+1..): each event updates Pod `j % N`, the last tenth
/// of them (at most N) delete instead. Deterministic.
pub fn generate(n: usize, m: usize) -> DataSet {
    let mut pods = Vec::with_capacity(n);
    let (mut total, mut stripped) = (0usize, 0usize);
    for i in 0..n {
        let mut p = pod(i, i as u64 + 1, 0);
        let bytes = serde_json::to_vec(&p).expect("serialize");
        total += bytes.len();
        if i.is_multiple_of(64) {
            p["metadata"]
                .as_object_mut()
                .map(|m| m.remove("managedFields"));
            stripped += serde_json::to_vec(&p).expect("serialize").len() * 64;
        }
        pods.push(Bytes::from(bytes));
    }
    let list_rv = n as u64;
    let deletes = (m / 10).min(n);
    let mut watch = Vec::with_capacity(m * 5200 + 6000);
    let mut rv = list_rv;
    for j in 0..m {
        rv += 1;
        let kind = if j >= m - deletes {
            "DELETED"
        } else {
            "MODIFIED"
        };
        let ev = json!({"type": kind, "object": pod(j % n.max(1), rv, j / n.max(1) + 1)});
        serde_json::to_writer(&mut watch, &ev).expect("serialize");
        watch.push(b'\n');
    }
    rv += 1;
    let mut end = pod(n, rv, 0);
    end["metadata"]["name"] = json!(END_MARKER);
    serde_json::to_writer(&mut watch, &json!({"type": "ADDED", "object": end})).expect("serialize");
    watch.push(b'\n');
    rv += 1;
    let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
        "metadata": {"resourceVersion": rv.to_string()}}});
    let mut bookmark = serde_json::to_vec(&bookmark).expect("serialize");
    bookmark.push(b'\n');
    DataSet {
        pods,
        list_rv,
        watch: Bytes::from(watch),
        bookmark: Bytes::from(bookmark),
        watch_events: m + 1,
        avg_pod_bytes: total / n.max(1),
        avg_pod_bytes_stripped: stripped / n.max(1),
        protobuf: None,
    }
}

/// How the replay server behaves.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerOptions {
    /// Answer the first watch of every client with a `410 Gone` error event,
    /// forcing one relist: the 1st, 3rd, 5th... watch requests get it (each
    /// client run makes two watches: the refused one and the one after its
    /// relist, so clients run one after the other each see it once).
    pub gone_once: bool,
    /// How long a watch is held open after its last event (the client
    /// normally hangs up first).
    pub hold: Option<Duration>,
    /// With `gone_once`: hold the refused watch open (no events) this long
    /// before its 410, so that the relist finds a cache that has settled
    /// (kcache's background compression has run); `None`: at once.
    pub gone_after: Option<Duration>,
}

struct Shared {
    data: DataSet,
    opts: ServerOptions,
    watches: AtomicUsize,
}

/// Serves `data` on `listener` until the process ends.
pub async fn serve(listener: TcpListener, data: DataSet, opts: ServerOptions) -> io::Result<()> {
    let shared = Arc::new(Shared {
        data,
        opts,
        watches: AtomicUsize::new(0),
    });
    loop {
        let (sock, _) = listener.accept().await?;
        let _ = sock.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ = connection(sock, &shared).await;
        });
    }
}

/// One parsed request: path, query pairs, and whether it accepts protobuf.
struct Request {
    path: String,
    query: Vec<(String, String)>,
    accepts_protobuf: bool,
}

impl Request {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

async fn read_request(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut content_length = 0usize;
    let mut accepts_protobuf = false;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).await? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                content_length = v.trim().parse().unwrap_or(0);
            } else if k.eq_ignore_ascii_case("accept") {
                accepts_protobuf = v.contains(protobuf::CONTENT_TYPE);
            }
        }
    }
    if content_length > 0 {
        let mut body = vec![0u8; content_length];
        reader.read_exact(&mut body).await?;
    }
    let (path, q) = target.split_once('?').unwrap_or((&target, ""));
    let query = form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    Ok(Some(Request {
        path: path.to_string(),
        query,
        accepts_protobuf,
    }))
}

fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

async fn connection(sock: TcpStream, shared: &Shared) -> io::Result<()> {
    let (r, w) = sock.into_split();
    let mut reader = BufReader::new(r);
    let mut writer = BufWriter::with_capacity(256 * 1024, w);
    while let Some(req) = read_request(&mut reader).await? {
        if req.path != "/api/v1/pods" {
            let message = "the replay server serves /api/v1/pods only";
            respond_status(&mut writer, 404, "Not Found", "NotFound", message).await?;
            continue;
        }
        let watch = matches!(req.param("watch"), Some("true" | "1"));
        if !watch {
            list(&mut writer, shared, &req).await?;
            continue;
        }
        if req.param("sendInitialEvents") == Some("true") {
            let message = "streaming lists are not served here";
            respond_status(&mut writer, 400, "Bad Request", "BadRequest", message).await?;
            continue;
        }
        let data = &shared.data;
        let pb = data.protobuf.as_ref().filter(|_| req.accepts_protobuf);
        let head: &[u8] = if pb.is_some() {
            b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.kubernetes.protobuf;stream=watch\r\nTransfer-Encoding: chunked\r\n\r\n"
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        };
        writer.write_all(head).await?;
        let nth = shared.watches.fetch_add(1, Ordering::SeqCst);
        if shared.opts.gone_once && nth.is_multiple_of(2) {
            if let Some(after) = shared.opts.gone_after {
                writer.flush().await?;
                tokio::time::sleep(after).await;
            }
            let message = "too old resource version (replay server: forced once)";
            let ev = if pb.is_some() {
                pb_frame("ERROR", &pb_status_body(410, "Expired", message))
            } else {
                let mut ev = serde_json::to_vec(
                    &json!({"type": "ERROR", "object": status_json(410, "Expired", message)}),
                )?;
                ev.push(b'\n');
                ev
            };
            chunk(&mut writer, &ev).await?;
            writer.write_all(b"0\r\n\r\n").await?;
            writer.flush().await?;
            continue;
        }
        let rv: Option<u64> = req.param("resourceVersion").and_then(|v| v.parse().ok());
        let (events, bookmark) = match pb {
            Some(pb) => (&pb.watch, &pb.bookmark),
            None => (&data.watch, &data.bookmark),
        };
        if rv.is_none_or(|rv| rv <= data.list_rv) {
            for part in events.chunks(64 * 1024) {
                chunk(&mut writer, part).await?;
            }
            if req.param("allowWatchBookmarks") == Some("true") {
                chunk(&mut writer, bookmark).await?;
            }
        } else if req.param("allowWatchBookmarks") == Some("true") {
            // A client resuming from a later resourceVersion (kcache's warm
            // restart, scenario (e)): nothing new, but a bookmark says the
            // resourceVersion is still served.
            chunk(&mut writer, bookmark).await?;
        }
        writer.flush().await?;
        // Hold the watch open until the client hangs up.
        let hold = shared.opts.hold.unwrap_or(Duration::from_secs(3600));
        let mut buf = [0u8; 1024];
        let _ = tokio::time::timeout(hold, async {
            loop {
                match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await;
        return Ok(());
    }
    Ok(())
}

async fn chunk<W: tokio::io::AsyncWrite + Unpin>(w: &mut W, data: &[u8]) -> io::Result<()> {
    w.write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    w.write_all(data).await?;
    w.write_all(b"\r\n").await
}

async fn respond<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    code: u16,
    reason: &str,
    body: &[u8],
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    w.write_all(head.as_bytes()).await?;
    w.write_all(body).await?;
    w.flush().await
}

/// Answers with the apiserver's failure `Status` body: HTTP `code
/// phrase`, Status `reason` and `message`.
async fn respond_status<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    code: u16,
    phrase: &str,
    reason: &str,
    message: &str,
) -> io::Result<()> {
    let body = serde_json::to_vec(&status_json(code, reason, message))?;
    respond(w, code, phrase, &body).await
}

async fn list<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    shared: &Shared,
    req: &Request,
) -> io::Result<()> {
    let data = &shared.data;
    let n = data.pods.len();
    let start: usize = match req.param("continue").filter(|c| !c.is_empty()) {
        Some(c) => match c.parse() {
            Ok(s) => s,
            Err(_) => {
                let message = "bad continue token";
                return respond_status(w, 400, "Bad Request", "BadRequest", message).await;
            }
        },
        None => 0,
    };
    let limit = req
        .param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|&l| l > 0)
        .unwrap_or(usize::MAX);
    let end = start.saturating_add(limit).min(n);
    let start = start.min(end);
    if let Some(pb) = data.protobuf.as_ref().filter(|_| req.accepts_protobuf) {
        return list_protobuf(w, data.list_rv, &pb.pods[start..end], end, n).await;
    }
    let mut meta = json!({"resourceVersion": data.list_rv.to_string()});
    if end < n {
        meta["continue"] = json!(end.to_string());
        meta["remainingItemCount"] = json!(n - end);
    }
    let mut head =
        format!(r#"{{"kind":"PodList","apiVersion":"v1","metadata":{meta},"items":["#).into_bytes();
    let items: usize = data.pods[start..end].iter().map(|p| p.len() + 1).sum();
    let len = head.len() + items.saturating_sub(1) + 2;
    let http_head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    );
    w.write_all(http_head.as_bytes()).await?;
    w.write_all(&head).await?;
    head.clear();
    for (k, p) in data.pods[start..end].iter().enumerate() {
        if k > 0 {
            w.write_all(b",").await?;
        }
        w.write_all(p).await?;
    }
    w.write_all(b"]}").await?;
    w.flush().await
}

/// A protobuf `PodList` of `items` (the list's page ending at `end` of
/// `n`), written without building the body in one piece.
async fn list_protobuf<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    rv: u64,
    items: &[Bytes],
    end: usize,
    n: usize,
) -> io::Result<()> {
    let more = end < n;
    let cont = end.to_string();
    let head = protobuf::list_head(
        rv,
        more.then_some(cont.as_str()),
        more.then_some((n - end) as u64),
        items,
    );
    let prefixes: Vec<Vec<u8>> = items
        .iter()
        .map(|i| protobuf::list_item_prefix(i))
        .collect();
    let len = head.len()
        + items
            .iter()
            .zip(&prefixes)
            .map(|(i, p)| i.len() + p.len())
            .sum::<usize>()
        + protobuf::LIST_TAIL.len();
    let http_head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {len}\r\n\r\n",
        protobuf::CONTENT_TYPE
    );
    w.write_all(http_head.as_bytes()).await?;
    w.write_all(&head).await?;
    for (i, p) in items.iter().zip(&prefixes) {
        w.write_all(p).await?;
        w.write_all(i).await?;
    }
    w.write_all(protobuf::LIST_TAIL).await?;
    w.flush().await
}

/// A kubeconfig for the replay server at `addr` (plain HTTP, no auth).
pub fn kubeconfig(addr: std::net::SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: replay\n  cluster:\n    server: http://{addr}\n\
         contexts:\n- name: replay\n  context:\n    cluster: replay\n    user: replay\n\
         current-context: replay\nusers:\n- name: replay\n  user: {{}}\n"
    )
}

/// What every client prints, as one JSON line on stdout.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    /// Which client.
    pub client: String,
    /// Events (or workqueue items) handled.
    pub events: u64,
    /// Seconds from start to the end marker.
    pub secs: f64,
    /// `events / secs`.
    pub events_per_sec: f64,
    /// Peak RSS (VmHWM), KiB.
    pub peak_rss_kb: u64,
    /// RSS after the run settled, KiB.
    pub steady_rss_kb: u64,
    /// RSS before the informer started, KiB.
    pub baseline_rss_kb: u64,
    /// Objects in the cache at the end.
    pub cached: usize,
    /// Heap bytes the cache's objects account for, by their own count
    /// (kcache only: `CachedObject::heap_size`), 0 if unknown.
    #[serde(default)]
    pub object_heap_bytes: u64,
    /// Heap bytes live (allocated and not freed) when the steady RSS was
    /// read, by the client's counting global allocator (kcache only), 0 if
    /// unknown.
    #[serde(default)]
    pub heap_live_bytes: u64,
    /// Heap bytes live before the informer started (kcache only).
    #[serde(default)]
    pub baseline_heap_bytes: u64,
    /// CPU time (user + system) of the client from start to the end
    /// marker, seconds (kcache only), 0 if unknown.
    #[serde(default)]
    pub cpu_secs: f64,
    /// CPU time when the steady RSS was read (after any wait), seconds.
    #[serde(default)]
    pub cpu_total_secs: f64,
    /// Seconds waited after the end marker for background compression
    /// (its quiet time and one round), before the steady sample.
    #[serde(default)]
    pub waited_secs: f64,
    /// Whether background compression was on (kcache only).
    #[serde(default)]
    pub background_compression: bool,
    /// Objects background compression compressed before the steady sample.
    #[serde(default)]
    pub bg_compressed: u64,
    /// Their stored bytes before and after compression.
    #[serde(default)]
    pub bg_bytes_before: u64,
    /// See `bg_bytes_before`.
    #[serde(default)]
    pub bg_bytes_after: u64,
    /// Time background compression spent compressing, seconds.
    #[serde(default)]
    pub bg_busy_secs: f64,
    /// Decompressions of compressed objects in the process
    /// (`kcache_core::decompressions`).
    #[serde(default)]
    pub decompressions: u64,
    /// kcache `--reset-peak-when-compressed`: seconds from the start to
    /// the reset of the peak RSS (`VmHWM`), 0 if it was not reset; the peak
    /// then covers only what came after (the relist of (c')).
    #[serde(default)]
    pub peak_reset_secs: f64,
    /// Updates the handler had seen when the peak was reset: 0 means the
    /// relist (whose objects arrive as updates) came after the reset.
    #[serde(default)]
    pub updates_at_peak_reset: u64,
}

impl Report {
    /// The report of an ingest run in which `client` handled `events` in
    /// `secs`, its memory measured as every client measures it: the peak
    /// RSS now, the steady RSS after waiting `settle`. The cache's size
    /// (`cached`, `object_heap_bytes`) is the caller's to fill in.
    pub async fn ingest(
        client: &str,
        events: u64,
        secs: f64,
        baseline_rss_kb: u64,
        settle: std::time::Duration,
    ) -> Report {
        let peak_rss_kb = proc_status_kb("VmHWM");
        tokio::time::sleep(settle).await;
        Report {
            client: client.to_owned(),
            events,
            secs,
            events_per_sec: events as f64 / secs,
            peak_rss_kb,
            steady_rss_kb: proc_status_kb("VmRSS"),
            baseline_rss_kb,
            ..Report::default()
        }
    }
}

/// CPU time (user + system) of this process so far, seconds, with
/// microsecond resolution (see [`self_cpu_us`]); 0 if unknown.
pub fn proc_cpu_secs() -> f64 {
    self_cpu_us() as f64 / 1e6
}

/// CPU time (user + system) of this process and all its threads so far, in
/// microseconds, from `getrusage(RUSAGE_SELF)`. Linux scales the sampled
/// user / system split so that their sum is the scheduler's nanosecond run
/// time; `/proc/self/stat` gives the same sum in 10 ms clock ticks, too
/// coarse for a 0.15 s sync compared within 5%. 0 if the call fails.
pub fn self_cpu_us() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; `getrusage` only
    // writes it, and it is read only when the call succeeded.
    #[allow(unsafe_code)]
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return 0;
        }
        usage.assume_init()
    };
    let us = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec).unwrap_or(0)
    };
    us(usage.ru_utime) + us(usage.ru_stime)
}

/// A field of `/proc/self/status` (`VmHWM`, `VmRSS`), in KiB; 0 if unknown.
pub use kcache_testing::proc_status_kib as proc_status_kb;

#[cfg(test)]
mod tests {
    use super::*;

    /// The client CPU figure moves in microseconds, not in 10 ms clock
    /// ticks: a busy loop sees it advance by less than a tick.
    #[test]
    fn self_cpu_us_has_sub_tick_resolution() {
        let start = self_cpu_us();
        assert!(start > 0, "getrusage gave nothing");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut x = 0u64;
        let first_step = loop {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            let now = self_cpu_us();
            if now != start {
                break now - start;
            }
            assert!(std::time::Instant::now() < deadline, "CPU time never moved");
        };
        assert!(
            first_step < 5_000,
            "CPU time moved by {first_step} us at once: clock-tick resolution"
        );
    }
}
