//! Issue 20's background compression, per object: what an informer's
//! compactor spends on one quiet object (find it in a bounded scan, build
//! its compressed twin with `CachedObject::compressed_with`, swap it in with
//! `Indexer::swap_if_same`, in batches of 256 as the compactor does), and
//! what a reader pays to decode a compressed object against a plain one.
//!
//! Realistic varied Pods (~8 KB JSON, managedFields cut as in the informer
//! default of the bench-compare clients: ~4.3 KB stored), 10,000 in the
//! store; the dictionary is the first Pod, as the compactor learns it.
//!
//! Run: `cargo bench -p kcache-indexer --bench background_compression -- --warm-up-time 1 --measurement-time 3`

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use k8s_openapi::api::core::v1::Pod;
use kcache_core::{CachedObject, CompressionDictionary, ObjectOptions};
use kcache_indexer::{Indexer, Swap};

#[path = "../../kcache-core/tests/common/pod.rs"]
mod pod;

const N: usize = 10_000;
const BATCH: usize = 256;

fn pods(strip: bool) -> Vec<CachedObject<Pod>> {
    let options = ObjectOptions {
        strip_managed_fields: strip,
        ..ObjectOptions::default()
    };
    (0..N)
        .map(|i| CachedObject::from_bytes_with(pod::varied_pod(i), &options).unwrap())
        .collect()
}

/// One compactor batch: scan for `BATCH` quiet objects, compress, swap.
fn compact_batch(idx: &Indexer<Pod>, dict: &CompressionDictionary, from: usize) -> usize {
    let scan = idx.quiet_objects(idx.epoch() - 1, from, BATCH);
    let swaps: Vec<Swap<Pod>> = scan
        .objects
        .into_iter()
        .map(|(key, obj)| {
            let twin = obj.compressed_with(dict);
            Swap {
                key,
                expected: obj,
                twin,
            }
        })
        .collect();
    idx.swap_if_same(swaps).len()
}

fn per_object(c: &mut Criterion) {
    let mut g = c.benchmark_group("background_compression");
    for strip in [true, false] {
        let plain = pods(strip);
        let dict = CompressionDictionary::new(plain[0].encoded().unwrap());
        let name = if strip { "stripped" } else { "full" };
        g.throughput(Throughput::Elements(BATCH as u64));
        // The compactor's work on a store of N plain objects, one batch
        // per iteration (the store is refilled with the plain objects
        // outside the timing once a round is done).
        let idx: Indexer<Pod> = Indexer::new();
        let refill = |idx: &Indexer<Pod>| {
            idx.replace(plain.clone(), "1").unwrap();
            idx.advance_epoch();
        };
        refill(&idx);
        g.bench_function(format!("compact_per_object_{name}"), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                let mut from = N;
                for _ in 0..iters {
                    if from + BATCH > N {
                        refill(&idx);
                        from = 0;
                    }
                    let started = Instant::now();
                    let n = compact_batch(&idx, &dict, from);
                    spent += started.elapsed();
                    assert_eq!(n, BATCH);
                    from += BATCH;
                }
                spent
            })
        });
        g.throughput(Throughput::Elements(1));
        let mut i = 0;
        g.bench_function(format!("compressed_with_{name}"), |b| {
            b.iter(|| {
                i = (i + 1) % N;
                plain[i].compressed_with(&dict).unwrap()
            })
        });
        let twins: Vec<CachedObject<Pod>> = plain
            .iter()
            .map(|o| o.compressed_with(&dict).unwrap())
            .collect();
        let (held_plain, held_twin): (usize, usize) = (
            plain.iter().map(|o| o.heap_size()).sum(),
            twins.iter().map(|o| o.heap_size()).sum(),
        );
        println!(
            "{name}: heap_size per Pod plain {} B, compressed {} B ({:.3}x)",
            held_plain / N,
            held_twin / N,
            held_twin as f64 / held_plain as f64
        );
        g.bench_function(format!("decode_plain_{name}"), |b| {
            b.iter(|| {
                i = (i + 1) % N;
                plain[i].decode().unwrap()
            })
        });
        g.bench_function(format!("decode_compressed_{name}"), |b| {
            b.iter(|| {
                i = (i + 1) % N;
                twins[i].decode().unwrap()
            })
        });
        g.bench_function(format!("json_compressed_{name}"), |b| {
            b.iter(|| {
                i = (i + 1) % N;
                twins[i].json().unwrap().len()
            })
        });
    }
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    per_object(&mut c);
    c.final_summary();
}
