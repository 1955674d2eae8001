//! FIFO throughput: add + pop, for DeltaFifo and RealFifo.
//!
//! Run: `cargo bench -p kcache-deltafifo --bench fifo -- --warm-up-time 1 --measurement-time 3`

use std::convert::Infallible;
use std::sync::Arc;

use criterion::{BatchSize, Bencher, Criterion, Throughput};
use futures::executor::block_on;
use kcache_core::{CachedObject, ReflectorStore};
use kcache_deltafifo::{DeltaFifo, FifoOptions, Queue, RealFifo};
use serde_json::{Value, json};

const N: usize = 100_000;

fn objects(keys: usize) -> Vec<CachedObject<Value>> {
    (0..N)
        .map(|i| {
            let v = json!({"metadata": {"name": format!("pod-{}", i % keys), "namespace": "ns",
                "resourceVersion": i.to_string()}});
            CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
        })
        .collect()
}

fn drain(q: &dyn Queue<Value>) -> usize {
    let mut n = 0;
    while !q.is_empty() {
        block_on(q.pop(Box::new(|d, _| {
            std::hint::black_box(&d);
            Ok(())
        })))
        .unwrap();
        n += 1;
    }
    n
}

/// Adds every object to a fresh queue, then pops everything (static
/// dispatch: `F` is the concrete FIFO).
fn add_then_pop<F: Queue<Value>>(b: &mut Bencher, new: fn() -> F, objs: &[CachedObject<Value>]) {
    b.iter_batched(
        new,
        |f| {
            for o in objs {
                f.add(o.clone()).unwrap();
            }
            drain(&f)
        },
        BatchSize::PerIteration,
    )
}

fn main() {
    let distinct = objects(N);
    let coalescing = objects(1_000);
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("fifo_add_then_pop_100k");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    for (name, objs) in [
        ("distinct_keys", &distinct),
        ("1k_keys_coalescing", &coalescing),
    ] {
        g.bench_function(format!("delta_fifo/{name}"), |b| {
            add_then_pop(b, || DeltaFifo::new(FifoOptions::new()), objs)
        });
        g.bench_function(format!("real_fifo/{name}"), |b| {
            add_then_pop(b, || RealFifo::new(FifoOptions::new()), objs)
        });
    }
    g.finish();

    // A producer thread and a consumer popping concurrently (the informer shape).
    let mut g = c.benchmark_group("fifo_concurrent_producer_consumer_100k");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("delta_fifo/distinct_keys", |b| {
        b.iter(|| {
            let f = Arc::new(DeltaFifo::<Value>::new(FifoOptions::new()));
            let producer = {
                let f = f.clone();
                let objs = distinct.clone();
                std::thread::spawn(move || {
                    for o in objs {
                        f.add(o).unwrap();
                    }
                    f.close();
                })
            };
            let mut popped = 0usize;
            while block_on(f.pop(|d, _| Ok::<_, Infallible>(d.len()))).is_ok() {
                popped += 1;
            }
            producer.join().unwrap();
            popped
        })
    });
    g.finish();
    c.final_summary();
}
