//! Controller overhead: what the reconcile loop costs on top of the
//! informer. N ConfigMaps are listed by an in-process fake apiserver (no
//! network); the benchmark measures the time from `run` until every key was
//! reconciled once (initial-list events -> predicates -> rate-limited queue
//! -> worker -> read from the cache -> typed decode -> reconciler), with 1
//! and 4 workers, and the same list through a bare informer with one
//! counting handler (the baseline the controller adds to).
//!
//! `cargo bench -p kcache-controller --bench overhead`

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{Action, Config, Controller, Request};
use kcache_informer::{ResourceEventHandlerFuncs, SharedInformerFactory};
use kcache_testing::fake::Fake;
use serde_json::json;

const N: usize = 10_000;

/// A list of N ConfigMaps of about 600 bytes of JSON each.
fn list_body() -> Bytes {
    let items: Vec<_> = (0..N)
        .map(|i| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {
                    "name": format!("settings-{i:06}"), "namespace": format!("team-{}", i % 50),
                    "uid": format!("6f1c2a4e-0000-4000-8000-{i:012}"), "resourceVersion": (i + 1).to_string(),
                    "creationTimestamp": "2026-11-30T10:00:00Z",
                    "labels": {"app": "web", "tier": "frontend"},
                    "annotations": {"example.com/owner": "team-web"}
                },
                "data": {"mode": "production", "log-level": "info", "endpoint": format!("https://svc-{i}.example.com:8443/api")}
            })
        })
        .collect();
    let list = json!({"kind": "ConfigMapList", "apiVersion": "v1",
        "metadata": {"resourceVersion": N.to_string()}, "items": items});
    Bytes::from(list.to_string())
}

/// A factory whose client (the scripted fake apiserver) answers every
/// list with `list` and holds every watch open, silent.
fn factory(list: Bytes) -> SharedInformerFactory {
    SharedInformerFactory::builder(Fake::serving(list).client)
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .build()
}

/// Time until every key was reconciled once.
async fn controller(list: &Bytes, workers: usize) -> Duration {
    let factory = factory(list.clone());
    let done = Arc::new(AtomicUsize::new(0));
    let ctl = Controller::<ConfigMap>::new(&factory, Config::default().workers(workers));
    let handle = ctl.handle();
    let start = Instant::now();
    let task = tokio::spawn(ctl.run(
        |req: Request<ConfigMap>, done: Arc<AtomicUsize>| async move {
            // What a reconciler minimally does: look at the decoded object.
            let data = req.object.and_then(|cm| cm.data).map_or(0, |d| d.len());
            std::hint::black_box(data);
            done.fetch_add(1, Ordering::Relaxed);
            Ok::<_, std::io::Error>(Action::await_change())
        },
        done.clone(),
    ));
    while done.load(Ordering::Relaxed) < N {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let took = start.elapsed();
    handle.stop();
    let _ = task.await;
    factory.shutdown().await;
    took
}

/// The baseline: the same list through an informer with one counting
/// handler and no decode.
async fn informer(list: &Bytes) -> Duration {
    let factory = factory(list.clone());
    let inf = factory.informer::<ConfigMap>();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    inf.add_event_handler(ResourceEventHandlerFuncs::new().add_func(move |_, _| {
        counter.fetch_add(1, Ordering::Relaxed);
    }))
    .expect("handler registers");
    let start = Instant::now();
    factory.start();
    while seen.load(Ordering::Relaxed) < N {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let took = start.elapsed();
    factory.shutdown().await;
    took
}

/// Measures `run` (which returns the time it took) once per iteration.
fn iter_timed<'a, F, Fut>(b: &mut criterion::Bencher<'_>, rt: &tokio::runtime::Runtime, run: F)
where
    F: Fn() -> Fut + 'a,
    Fut: std::future::Future<Output = Duration> + 'a,
{
    b.to_async(rt).iter_custom(|iters| {
        let run = &run;
        async move {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += run().await;
            }
            total
        }
    })
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let list = list_body();
    let mut g = c.benchmark_group("controller_overhead");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function(format!("list{N}/informer_baseline"), |b| {
        iter_timed(b, &rt, || informer(&list))
    });
    for workers in [1usize, 4] {
        g.bench_function(format!("list{N}/reconcile_all/{workers}_workers"), |b| {
            iter_timed(b, &rt, || controller(&list, workers))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
