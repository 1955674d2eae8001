//! Informer ingest: a list of N realistic Pods then M watch events, through
//! reflector -> DeltaFIFO -> indexer -> 1 or 4 handlers, served by an
//! in-process fake apiserver (no network). Also prints the memory held per
//! cached Pod with and without `strip_managed_fields`.
//!
//! `cargo bench -p kcache-informer --bench ingest`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kcache_core::ObjectOptions;
use kcache_informer::{ResourceEventHandlerFuncs, SharedIndexInformer};
use kcache_reflector::WatchConfig;
use kcache_testing::fake::{End, Fake, Reply};
use kube::Client;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const N: usize = 5_000;
const M: usize = 5_000;

/// A realistic Pod of about 8 KB of JSON, managedFields included.
fn pod(i: usize, rv: usize) -> Value {
    let fields: Value = json!({
        "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:tier": {}},
                        "f:ownerReferences": {".": {}, "k:{\"uid\":\"0b6d9a9e\"}": {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:env": {".": {}, "k:{\"name\":\"MODE\"}": {".": {}, "f:name": {}, "f:value": {}}},
                   "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:protocol": {}}},
                   "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                   "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {}}},
                   "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}
    });
    let status_fields: Value = json!({"f:status": {"f:conditions": {"k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
        "k:{\"type\":\"Initialized\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
        "k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}},
        "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"10.244.1.7\"}": {".": {}, "f:ip": {}}}, "f:startTime": {}}});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("web-7d4b9c8f6d-{i:05}"), "namespace": format!("team-{}", i % 50),
            "uid": format!("6f1c2a4e-0000-4000-8000-{i:012}"), "resourceVersion": rv.to_string(),
            "generateName": "web-7d4b9c8f6d-", "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d4b9c8f6d"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T09:59:00Z", "prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f6d", "uid": "0b6d9a9e", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T10:00:05Z", "fieldsType": "FieldsV1", "fieldsV1": status_fields, "subresource": "status"}
            ]
        },
        "spec": {
            "nodeName": format!("node-{}", i % 20), "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler", "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "app", "image": "registry.example.com/team/web:1.42.0", "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "production"}, {"name": "LOG_LEVEL", "value": "info"}],
                "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
                "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"
            }],
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "hostIP": "172.18.0.3", "podIP": "10.244.1.7", "podIPs": [{"ip": "10.244.1.7"}],
            "startTime": "2026-11-30T10:00:01Z", "qosClass": "Burstable",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-30T10:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:05Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-11-30T10:00:05Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T10:00:00Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "started": true,
                "image": "registry.example.com/team/web:1.42.0", "imageID": "registry.example.com/team/web@sha256:4b1e0c7a2f9d8e6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a392817065f4e",
                "containerID": "containerd://9f8e7d6c5b4a392817065f4e3d2c1b0a9f8e7d6c5b4a392817065f4e3d2c1b0a",
                "state": {"running": {"startedAt": "2026-11-30T10:00:04Z"}}, "lastState": {}}]
        }
    })
}

struct Data {
    list: Bytes,
    watch: Bytes,
    json_bytes: usize,
}

fn data() -> Data {
    let items: Vec<Value> = (0..N).map(|i| pod(i, i + 1)).collect();
    let json_bytes = items.iter().map(|p| p.to_string().len()).sum::<usize>() / N;
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": N.to_string()}, "items": items});
    let mut watch = String::new();
    for j in 0..M {
        let ev = json!({"type": "MODIFIED", "object": pod(j % N, N + j + 1)});
        watch.push_str(&ev.to_string());
        watch.push('\n');
    }
    Data {
        list: Bytes::from(list.to_string()),
        watch: Bytes::from(watch),
        json_bytes,
    }
}

/// The scripted fake apiserver: serves the list, then one watch with
/// every event (in 64 KiB chunks), then holds the watch open.
fn client(d: &Data) -> Client {
    let (list, watch) = (d.list.clone(), d.watch.clone());
    Fake::new(move |r| match (r.is_watch(), r.nth) {
        (false, _) => Reply::Chunks(vec![list.clone()], End::Close),
        (true, 0) => {
            let chunks = (0..watch.len())
                .step_by(65536)
                .map(|s| watch.slice(s..(s + 65536).min(watch.len())))
                .collect();
            Reply::Chunks(chunks, End::Hang)
        }
        (true, _) => Reply::Chunks(vec![], End::Hang),
    })
    .client
}

fn informer(client: Client, strip: bool) -> SharedIndexInformer<Pod> {
    SharedIndexInformer::<Pod>::builder(client)
        .config(kcache_informer::InformerConfig {
            watch: WatchConfig {
                use_watch_list: false,
                object_options: ObjectOptions {
                    strip_managed_fields: strip,
                    ..ObjectOptions::default()
                },
                ..WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build()
}

async fn ingest(d: &Data, handlers: usize) -> Duration {
    let inf = informer(client(d), false);
    let counts: Vec<Arc<AtomicUsize>> = (0..handlers)
        .map(|_| Arc::new(AtomicUsize::new(0)))
        .collect();
    for c in &counts {
        let (a, u) = (c.clone(), c.clone());
        inf.add_event_handler(
            ResourceEventHandlerFuncs::new()
                .add_func(move |_, _| {
                    a.fetch_add(1, Ordering::Relaxed);
                })
                .update_func(move |_, _| {
                    u.fetch_add(1, Ordering::Relaxed);
                }),
        )
        .unwrap();
    }
    let cancel = CancellationToken::new();
    let start = Instant::now();
    let task = inf.try_start(cancel.clone()).expect("a new informer");
    while counts.iter().any(|c| c.load(Ordering::Relaxed) < N + M) {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let took = start.elapsed();
    cancel.cancel();
    let _ = task.await;
    took
}

async fn memory_per_object(d: &Data, strip: bool) -> usize {
    let inf = informer(client(d), strip);
    let cancel = CancellationToken::new();
    let task = inf.try_start(cancel.clone()).expect("a new informer");
    while inf.indexer().len() < N || !inf.has_synced() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let total: usize = inf.indexer().list().iter().map(|o| o.heap_size()).sum();
    cancel.cancel();
    let _ = task.await;
    total / N
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let d = data();
    for strip in [false, true] {
        let per = rt.block_on(memory_per_object(&d, strip));
        eprintln!(
            "memory per cached Pod (strip_managed_fields={strip}): {per} bytes = {:.2}x its {} bytes of JSON",
            per as f64 / d.json_bytes as f64,
            d.json_bytes
        );
    }
    let mut g = c.benchmark_group("informer_ingest");
    g.sample_size(10);
    g.throughput(Throughput::Elements((N + M) as u64));
    for handlers in [1usize, 4] {
        g.bench_function(format!("list{N}+watch{M}/{handlers}_handlers"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let d = &d;
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += ingest(d, handlers).await;
                    }
                    total
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
