//! What the stale-cache gate ([`Consistency`]) costs per reconcile.
//!
//! N ConfigMaps are listed by an in-process fake apiserver (no network);
//! each benchmark measures the time from `run` until every key was
//! reconciled once, with 1 and 8 workers, with the gate (and the
//! own-writes overlay) on, as by default, and with [`Consistency::off`]:
//!
//! * `check_only`: the reconciler only decodes its object. Every reconcile
//!   pays the gate's check (no write is pending) and the overlay lookup of
//!   the request's object.
//! * `patch`: the reconciler also patches its ConfigMap through the
//!   controller's fenced client; the fake answers with the object at a new
//!   resourceVersion. With the gate on, every answer is parsed and recorded
//!   (the pending write against the key, the object in the overlay).
//!
//! `cargo bench -p kcache-controller --bench stale_gate`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{Action, Config, Consistency, Controller, Request};
use kcache_informer::SharedInformerFactory;
use kcache_testing::fake::{End, Fake, Reply};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const N: usize = 5_000;

fn cm_json(i: usize, rv: u64) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": format!("settings-{i:06}"), "namespace": format!("team-{}", i % 50),
            "uid": format!("6f1c2a4e-0000-4000-8000-{i:012}"), "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"app": "web", "tier": "frontend"},
            "annotations": {"example.com/owner": "team-web"}
        },
        "data": {"mode": "production", "log-level": "info", "endpoint": format!("https://svc-{i}.example.com:8443/api")}
    })
}

/// A list of N ConfigMaps of about 600 bytes of JSON each.
fn list_body() -> Bytes {
    let items: Vec<_> = (0..N).map(|i| cm_json(i, i as u64 + 1)).collect();
    let list = json!({"kind": "ConfigMapList", "apiVersion": "v1",
        "metadata": {"resourceVersion": N.to_string()}, "items": items});
    Bytes::from(list.to_string())
}

/// A fake answering lists with `list`, holding watches open and silent,
/// and answering a PATCH of `settings-<i>` with that ConfigMap at the next
/// resourceVersion.
fn fake(list: Bytes) -> Fake {
    let rv = AtomicU64::new(N as u64);
    Fake::new(move |r| {
        if r.method == http::Method::PATCH {
            let i = r
                .path
                .rsplit("settings-")
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let rv = rv.fetch_add(1, Ordering::Relaxed) + 1;
            Reply::Json(200, cm_json(i, rv).to_string())
        } else if r.is_watch() {
            Reply::Chunks(vec![], End::Hang)
        } else {
            Reply::Chunks(vec![list.clone()], End::Close)
        }
    })
}

struct Ctx {
    done: AtomicUsize,
    /// The fenced client, when the reconciler writes.
    client: Option<kube::Client>,
}

/// Time until every key was reconciled once.
async fn controller(
    list: &Bytes,
    workers: usize,
    consistency: Consistency,
    patch: bool,
) -> Duration {
    let fake = fake(list.clone());
    let factory = SharedInformerFactory::builder(fake.client.clone())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let config = Config {
        consistency,
        ..Config::default().workers(workers)
    };
    let ctl = Controller::<ConfigMap>::new(&factory, config);
    let handle = ctl.handle();
    let ctx = Arc::new(Ctx {
        done: AtomicUsize::new(0),
        client: patch.then(|| handle.fenced_client(fake.client.clone())),
    });
    let start = Instant::now();
    let task = tokio::spawn(ctl.run(
        |req: Request<ConfigMap>, ctx: Arc<Ctx>| async move {
            let data = req
                .object
                .as_ref()
                .and_then(|cm| cm.data.as_ref())
                .map_or(0, |d| d.len());
            std::hint::black_box(data);
            if let (Some(client), Some(cm)) = (&ctx.client, &req.object) {
                let ns = cm.metadata.namespace.as_deref().unwrap_or_default();
                let name = cm.metadata.name.as_deref().unwrap_or_default();
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
                let body = json!({"metadata": {"annotations": {"example.com/seen": "yes"}}});
                api.patch(name, &PatchParams::default(), &Patch::Merge(&body))
                    .await?;
            }
            ctx.done.fetch_add(1, Ordering::Relaxed);
            Ok::<_, kube::Error>(Action::await_change())
        },
        ctx.clone(),
    ));
    while ctx.done.load(Ordering::Relaxed) < N {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let took = start.elapsed();
    handle.stop();
    let _ = task.await;
    factory.shutdown().await;
    took
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let list = list_body();
    let mut g = c.benchmark_group("stale_gate");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    for mode in ["check_only", "patch"] {
        for workers in [1usize, 8] {
            for (gate, consistency) in [("on", Consistency::default()), ("off", Consistency::off())]
            {
                let id = format!("list{N}/{mode}/{workers}_workers/gate_{gate}");
                g.bench_function(id, |b| {
                    b.to_async(&rt).iter_custom(|iters| {
                        let (list, consistency) = (&list, consistency.clone());
                        async move {
                            let mut total = Duration::ZERO;
                            for _ in 0..iters {
                                total +=
                                    controller(list, workers, consistency.clone(), mode == "patch")
                                        .await;
                            }
                            total
                        }
                    })
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
