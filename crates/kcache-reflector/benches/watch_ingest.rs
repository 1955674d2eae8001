//! Watch ingest throughput: framing + metadata extraction + sink, on a
//! recorded watch stream of realistic ~8 KB Pods (with managedFields), next
//! to a plain `serde_json` scan (`IgnoredAny`) and a full typed
//! `k8s_openapi::api::core::v1::Pod` decode of the same bytes.
//!
//! Run: `cargo bench -p kcache-reflector --bench watch_ingest -- --warm-up-time 1 --measurement-time 3`
//!
//! Before the criterion runs it prints one timed pass of each variant over
//! the whole stream, in events/s and MB/s.

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use k8s_openapi::api::core::v1::Pod;
use kcache_core::{CachedObject, ObjectOptions, ObjectOrTombstone, ReflectorStore, StoreError};
use kcache_reflector::{EventDecoder, LineFramer, WatchEvent};
use parking_lot::Mutex;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::json;

const N: usize = 5_000;
const CHUNK: usize = 16 * 1024;

fn fields_v1(i: usize) -> serde_json::Value {
    let mut containers = serde_json::Map::new();
    for c in ["app", "sidecar"] {
        containers.insert(
            format!("k:{{\"name\":\"{c}\"}}"),
            json!({
                ".": {}, "f:env": { ".": {}, "k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}},
                  "k:{\"name\":\"B\"}": {".": {}, "f:name": {}, "f:value": {}},
                  "k:{\"name\":\"C\"}": {".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}}},
                "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {},
                "f:volumeMounts": {".": {}, "k:{\"mountPath\":\"/etc/config\"}": {".": {}, "f:mountPath": {}, "f:name": {}}}
            }),
        );
    }
    json!({"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:tier": {}},
            "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{i}\"}}"): {}}},
           "f:spec": {"f:containers": containers, "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                      "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {},
                      "f:volumes": {".": {}, "k:{\"name\":\"config\"}": {".": {}, "f:configMap": {".": {}, "f:defaultMode": {}, "f:name": {}}, "f:name": {}}}}})
}

fn container(name: &str, i: usize) -> serde_json::Value {
    json!({
        "name": name,
        "image": format!("registry.example.com/team/{name}:v1.{}.{}", i % 7, i % 13),
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [
            {"name": "A", "value": "some-configuration-value"},
            {"name": "B", "value": format!("value-{i}")},
            {"name": "C", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}}
        ],
        "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/config"},
                         {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"
    })
}

/// A realistic Pod of about 8 KB.
fn pod(i: usize) -> serde_json::Value {
    let ns = format!("namespace-{}", i % 50);
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": format!("web-7f9c8d6b5-{i:05}"), "generateName": "web-7f9c8d6b5-", "namespace": ns,
            "uid": format!("5a0c1e2d-3b4f-4a5b-8c6d-{i:012}"), "resourceVersion": format!("{}", 100_000 + i),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7f9c8d6b5", "tier": "frontend", "team": "payments", "version": "v1"},
            "annotations": {"kubernetes.io/psp": "restricted", "prometheus.io/scrape": "true",
                            "checksum/config": "3f5a8e1c9b7d2f4e6a8c0b1d3e5f7a9c2b4d6e8f0a1c3e5b7d9f1a3c5e7b9d1f",
                            "deployment.example.com/spec": json!({"replicas": 3, "strategy": {"type": "RollingUpdate",
                                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                                "template": {"metadata": {"labels": {"app": "web", "tier": "frontend", "team": "payments"}},
                                "spec": {"containers": [{"name": "app", "image": "registry.example.com/team/app:v1",
                                "args": ["--port=8080", "--log-level=info", "--config=/etc/config/app.yaml", "--metrics-addr=:9090"],
                                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
                                "livenessProbe": {"httpGet": {"path": "/livez", "port": 8080}, "periodSeconds": 10}},
                                {"name": "sidecar", "image": "registry.example.com/team/sidecar:v1",
                                "args": ["--upstream=127.0.0.1:8080", "--tls-cert=/etc/tls/tls.crt", "--tls-key=/etc/tls/tls.key"]}]}}}).to_string()},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7f9c8d6b5",
                                 "uid": format!("{i}"), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields_v1(i)},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:05Z",
                 "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                                                            "k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}},
                                           "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"10.0.0.1\"}": {".": {}, "f:ip": {}}}, "f:startTime": {}}}}
            ]
        },
        "spec": {
            "containers": [container("app", i), container("sidecar", i)],
            "volumes": [{"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}},
                        {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": format!("node-{}", i % 100),
            "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-01-01T00:00:05Z"},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-01-01T00:00:05Z"},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ],
            "hostIP": "192.168.1.10", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}], "startTime": "2026-01-01T00:00:01Z",
            "containerStatuses": (["app", "sidecar"].iter().map(|c| json!({
                "name": c, "state": {"running": {"startedAt": "2026-01-01T00:00:04Z"}}, "lastState": {}, "ready": true,
                "restartCount": 0, "image": format!("registry.example.com/team/{c}:v1"),
                "imageID": format!("registry.example.com/team/{c}@sha256:4c1e5f3b2a7d9e8f6a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f"),
                "containerID": format!("containerd://{i:064}"), "started": true})).collect::<Vec<_>>()),
            "qosClass": "Burstable"
        }
    })
}

/// The recorded stream: N MODIFIED events, cut into 16 KiB chunks.
fn recorded_stream() -> (Vec<Bytes>, usize) {
    let mut all = Vec::new();
    for i in 0..N {
        let line = serde_json::to_vec(&json!({"type": "MODIFIED", "object": pod(i)})).unwrap();
        all.extend_from_slice(&line);
        all.push(b'\n');
    }
    let total = all.len();
    let all = Bytes::from(all);
    let chunks = (0..total)
        .step_by(CHUNK)
        .map(|s| all.slice(s..(s + CHUNK).min(total)))
        .collect();
    (chunks, total)
}

/// A sink that keeps the newest object per key, as a cache would.
#[derive(Default)]
struct LatestByKey(Mutex<HashMap<String, CachedObject<Pod>>>);

impl ReflectorStore<Pod> for LatestByKey {
    fn add(&self, obj: CachedObject<Pod>) -> Result<(), StoreError> {
        self.update(obj)
    }
    fn update(&self, obj: CachedObject<Pod>) -> Result<(), StoreError> {
        let mut m = self.0.lock();
        match m.get_mut(obj.key()) {
            Some(slot) => *slot = obj,
            None => {
                m.insert(obj.key().to_owned(), obj);
            }
        }
        Ok(())
    }
    fn delete(&self, obj: ObjectOrTombstone<Pod>) -> Result<(), StoreError> {
        self.0.lock().remove(obj.key());
        Ok(())
    }
    fn replace(&self, _items: Vec<CachedObject<Pod>>, _rv: String) -> Result<(), StoreError> {
        Ok(())
    }
    fn resync(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Frames the chunks and hands every line to `f`; returns the event count.
fn frame_all(chunks: &[Bytes], mut f: impl FnMut(Bytes)) -> usize {
    let mut framer = LineFramer::new();
    let mut n = 0;
    for c in chunks {
        framer.push(c.clone());
        while let Some(line) = framer.next_frame().unwrap() {
            f(line);
            n += 1;
        }
    }
    n
}

fn ingest(chunks: &[Bytes], decoder: &EventDecoder<Pod>, sink: &LatestByKey) -> usize {
    frame_all(chunks, |line| match decoder.decode_event(line).unwrap() {
        WatchEvent::Added(o) => sink.add(o).unwrap(),
        WatchEvent::Modified(o) => sink.update(o).unwrap(),
        WatchEvent::Deleted(o) => sink.delete(o.into()).unwrap(),
        _ => {}
    })
}

fn scan(chunks: &[Bytes]) -> usize {
    frame_all(chunks, |line| {
        black_box(serde_json::from_slice::<IgnoredAny>(&line).unwrap());
    })
}

#[derive(Deserialize)]
struct TypedEvent {
    #[serde(rename = "type")]
    _type: String,
    object: Pod,
}

fn typed(chunks: &[Bytes]) -> usize {
    frame_all(chunks, |line| {
        let e: TypedEvent = serde_json::from_slice(&line).unwrap();
        black_box(e.object);
    })
}

/// A sink that counts events and cancels the reflector after `N` updates.
struct CountingSink {
    latest: std::sync::Arc<LatestByKey>,
    seen: std::sync::atomic::AtomicUsize,
    done: tokio_util::sync::CancellationToken,
}

impl ReflectorStore<Pod> for CountingSink {
    fn add(&self, obj: CachedObject<Pod>) -> Result<(), StoreError> {
        self.update(obj)
    }
    fn update(&self, obj: CachedObject<Pod>) -> Result<(), StoreError> {
        self.latest.update(obj)?;
        if self.seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 == N {
            self.done.cancel();
        }
        Ok(())
    }
    fn delete(&self, obj: ObjectOrTombstone<Pod>) -> Result<(), StoreError> {
        self.latest.delete(obj)
    }
    fn replace(&self, _items: Vec<CachedObject<Pod>>, _rv: String) -> Result<(), StoreError> {
        Ok(())
    }
    fn resync(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// A `kube::Client` on the scripted fake apiserver: lists are empty, the
/// watch replays the recorded chunks then stays open.
fn replay_client(chunks: Vec<Bytes>) -> kube::Client {
    use kcache_testing::fake::{End, Fake, Reply};
    const EMPTY: &str =
        r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#;
    Fake::new(move |r| {
        if r.is_watch() {
            Reply::Chunks(chunks.clone(), End::Hang)
        } else {
            Reply::Json(200, EMPTY.to_owned())
        }
    })
    .client
}

/// One full reflector run (list, then the watch of N events) through
/// `kube::Client`, until the sink has seen every event.
fn reflector_run(
    rt: &tokio::runtime::Runtime,
    chunks: &[Bytes],
    latest: &std::sync::Arc<LatestByKey>,
) -> usize {
    rt.block_on(async {
        let done = tokio_util::sync::CancellationToken::new();
        let sink = std::sync::Arc::new(CountingSink {
            // warm across runs, like the sink of the other variants
            latest: latest.clone(),
            seen: Default::default(),
            done: done.clone(),
        });
        let reflector = kcache_reflector::Reflector::<Pod>::builder(
            replay_client(chunks.to_vec()),
            sink.clone(),
        )
        .config(kcache_reflector::WatchConfig {
            use_watch_list: false,
            ..Default::default()
        })
        .build();
        reflector.run(done).await;
        sink.seen.load(std::sync::atomic::Ordering::Relaxed)
    })
}

fn report(name: &str, bytes: usize, mut f: impl FnMut() -> usize) {
    // one warm-up pass, then the best of three
    f();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let n = f();
        assert_eq!(n, N);
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!(
        "  {name:<44} {:>9.0} events/s  {:>7.1} MB/s",
        N as f64 / best,
        bytes as f64 / best / 1e6
    );
}

fn main() {
    let (chunks, total) = recorded_stream();
    println!(
        "watch stream: {N} MODIFIED events of realistic Pods, mean line {} B, {:.1} MB in {} chunks of {} KiB",
        total / N,
        total as f64 / 1e6,
        chunks.len(),
        CHUNK / 1024
    );
    let decoder = EventDecoder::<Pod>::new(ObjectOptions::default(), Some("Pod"), Some("v1"));
    let strip = EventDecoder::<Pod>::new(
        ObjectOptions {
            strip_managed_fields: true,
            ..ObjectOptions::default()
        },
        Some("Pod"),
        Some("v1"),
    );
    let sink = LatestByKey::default();
    report("reflector ingest (frame+metadata+sink)", total, || {
        ingest(&chunks, &decoder, &sink)
    });
    report("reflector ingest, managedFields stripped", total, || {
        ingest(&chunks, &strip, &sink)
    });
    let shared_sink = std::sync::Arc::new(LatestByKey::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    report("full Reflector::run via kube::Client", total, || {
        reflector_run(&rt, &chunks, &shared_sink)
    });
    report("serde_json IgnoredAny scan (frame+scan)", total, || {
        scan(&chunks)
    });
    report("typed k8s-openapi Pod decode (frame+decode)", total, || {
        typed(&chunks)
    });

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("watch_ingest");
    g.throughput(Throughput::Bytes(total as u64));
    g.sample_size(10);
    g.bench_function("reflector_ingest", |b| {
        b.iter(|| ingest(&chunks, &decoder, &sink))
    });
    g.bench_function("reflector_ingest_strip_managed_fields", |b| {
        b.iter(|| ingest(&chunks, &strip, &sink))
    });
    g.bench_function("reflector_run_via_kube_client", |b| {
        b.iter(|| reflector_run(&rt, &chunks, &shared_sink))
    });
    g.bench_function("serde_json_ignored_any", |b| b.iter(|| scan(&chunks)));
    g.bench_function("typed_pod", |b| b.iter(|| typed(&chunks)));
    g.finish();
    c.final_summary();
}
