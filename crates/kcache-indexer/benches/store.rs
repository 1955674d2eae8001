//! Indexer benchmarks: add / update / get at 100k objects, `by_index` on a
//! 100k store spread over 1k namespaces.
//!
//! Run: `cargo bench -p kcache-indexer --bench store -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput};
use kcache_core::CachedObject;
use kcache_indexer::{Indexer, Indexers, NAMESPACE_INDEX, label_index_func};
use serde_json::{Value, json};

const N: usize = 100_000;
const NAMESPACES: usize = 1_000;

fn object(i: usize, tier: &str) -> CachedObject<Value> {
    let v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": format!("pod-{i}"), "namespace": format!("ns-{}", i % NAMESPACES),
        "uid": format!("uid-{i}"), "resourceVersion": format!("{i}"),
        "labels": {"app": format!("app-{}", i % 100), "tier": tier}}});
    CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
}

fn indexer() -> Indexer<Value> {
    let idx = Indexer::new();
    let mut more = Indexers::new();
    more.insert("tier".to_string(), label_index_func("tier"));
    idx.add_indexers(more).unwrap();
    idx
}

fn main() {
    let v1: Vec<_> = (0..N).map(|i| object(i, "front")).collect();
    let v2: Vec<_> = (0..N).map(|i| object(i, "back")).collect();
    let mut c = Criterion::default().configure_from_args();

    let mut g = c.benchmark_group("indexer");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("add_100k_objects_into_empty_store", |b| {
        b.iter_batched(
            indexer,
            |idx| {
                for o in &v1 {
                    idx.add(o.clone()).unwrap();
                }
                idx
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("replace_100k_objects", |b| {
        let idx = indexer();
        b.iter(|| idx.replace(v1.clone(), "1").unwrap())
    });
    g.finish();

    let idx = indexer();
    idx.replace(v1.clone(), "1").unwrap();
    let mut g = c.benchmark_group("indexer_at_100k");
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    g.bench_function("update_changing_an_index_value", |b| {
        b.iter(|| {
            i = (i + 1) % (2 * N);
            let o = if i < N { &v2[i] } else { &v1[i - N] };
            idx.update(o.clone()).unwrap()
        })
    });
    let mut i = 0usize;
    g.bench_function("update_same_index_values", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            idx.update(idx.get_by_key(v1[i].key()).unwrap()).unwrap()
        })
    });
    let keys: Vec<String> = v1.iter().map(|o| o.key().to_string()).collect();
    let mut i = 0usize;
    g.bench_function("get_by_key", |b| {
        b.iter(|| {
            i = (i + 1) % N;
            black_box(idx.get_by_key(&keys[i]))
        })
    });
    let nss: Vec<String> = (0..NAMESPACES).map(|n| format!("ns-{n}")).collect();
    let mut i = 0usize;
    g.bench_function("by_index_namespace_100_of_100k_1k_namespaces", |b| {
        b.iter(|| {
            i = (i + 1) % NAMESPACES;
            let r = idx.by_index(NAMESPACE_INDEX, &nss[i]).unwrap();
            debug_assert_eq!(r.len(), N / NAMESPACES);
            r
        })
    });
    let mut i = 0usize;
    g.bench_function("index_keys_namespace_sorted", |b| {
        b.iter(|| {
            i = (i + 1) % NAMESPACES;
            idx.index_keys(NAMESPACE_INDEX, &nss[i]).unwrap()
        })
    });
    g.finish();
    c.final_summary();
}
