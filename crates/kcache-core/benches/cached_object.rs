//! Cached-object construction rate, decode cost and memory per object on
//! realistic ~8 KB Pod JSON with managedFields, with and without LZ4
//! compression of the stored JSON.
//!
//! Run: `cargo bench -p kcache-core --bench cached_object -- --warm-up-time 1 --measurement-time 3`
//!
//! Before the timed benchmarks it prints a memory report: bytes held per
//! object, counted by an instrumenting global allocator (net bytes allocated
//! while building 20,000 objects, divided by 20,000), against the JSON size.
//! The compressed rows include the shared dictionary (allocated once while
//! building the first object). "Varied" Pods differ per Pod the way real ones
//! do (timestamps, IPs, container IDs), so they compress less than the
//! template Pods.

use std::alloc::System;
use std::hint::black_box;

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use k8s_openapi::api::core::v1::Pod;
use kcache_core::{CachedObject, Compression, FieldPaths, ObjectOptions};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[path = "../tests/common/pod.rs"]
mod pod;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const N: usize = 20_000;

fn inputs() -> Vec<Bytes> {
    (0..N)
        // Exact-size buffers, as a framed network read gives: the memory
        // report charges a zero-copy object the input's length.
        .map(|i| Bytes::from(pod::realistic_pod(i, &format!("ns-{}", i % 50)).into_boxed_slice()))
        .collect()
}

fn varied_inputs() -> Vec<Bytes> {
    (0..N)
        .map(|i| Bytes::from(pod::varied_pod(i).into_boxed_slice()))
        .collect()
}

fn lz4() -> ObjectOptions {
    ObjectOptions {
        strip_managed_fields: true,
        compression: Compression::lz4(),
        ..ObjectOptions::default()
    }
}

fn held_per_object<T>(inputs: &[Bytes], build: impl Fn(Bytes) -> T) -> f64 {
    // The inputs themselves are allocated before the region starts; an object
    // that keeps its input (zero-copy) is charged the input's size below.
    let region = Region::new(GLOBAL);
    let objs: Vec<T> = inputs.iter().map(|b| build(b.clone())).collect();
    let stats = region.change();
    let net = stats.bytes_allocated as f64 - stats.bytes_deallocated as f64;
    let vec_overhead = (objs.capacity() * std::mem::size_of::<T>()) as f64;
    black_box(&objs);
    (net - vec_overhead) / N as f64
}

/// [`held_per_object`] of `CachedObject`s built with `opts`.
fn held_with(inputs: &[Bytes], opts: &ObjectOptions) -> f64 {
    held_per_object(inputs, |b| {
        CachedObject::<Pod>::from_bytes_with(b, opts).unwrap()
    })
}

fn memory_report(inputs: &[Bytes], varied: &[Bytes]) {
    let json = inputs.iter().map(|b| b.len()).sum::<usize>() as f64 / N as f64;
    println!("memory per object over {N} realistic Pods, mean JSON size {json:.0} B:");
    // Zero-copy: the object keeps the input buffer, so count the buffer too.
    let plain = held_per_object(inputs, |b| CachedObject::<Pod>::from_bytes(b).unwrap()) + json;
    println!(
        "  CachedObject (bytes kept, metadata)      {plain:>8.0} B  = {:.3}x JSON",
        plain / json
    );
    let stripping = ObjectOptions {
        strip_managed_fields: true,
        ..ObjectOptions::default()
    };
    let stripped = held_with(inputs, &stripping);
    println!(
        "  CachedObject (managedFields stripped)    {stripped:>8.0} B  = {:.3}x JSON",
        stripped / json
    );
    let compressed = held_with(inputs, &lz4());
    println!(
        "  CachedObject (stripped, LZ4 compressed)  {compressed:>8.0} B  = {:.3}x JSON",
        compressed / json
    );
    let vjson = varied.iter().map(|b| b.len()).sum::<usize>() as f64 / N as f64;
    // fresh options: a compression dictionary is shared by the objects of one `ObjectOptions`
    let stripped = held_with(
        varied,
        &ObjectOptions {
            strip_managed_fields: true,
            ..ObjectOptions::default()
        },
    );
    println!(
        "  varied Pods, mean JSON {vjson:.0} B: stripped {stripped:>8.0} B  = {:.3}x JSON",
        stripped / vjson
    );
    let compressed = held_with(varied, &lz4());
    println!(
        "  varied Pods, stripped + LZ4 compressed   {compressed:>8.0} B  = {:.3}x JSON",
        compressed / vjson
    );
    let typed = held_per_object(inputs, |b| serde_json::from_slice::<Pod>(&b).unwrap());
    println!(
        "  k8s-openapi Pod (typed, for comparison)  {typed:>8.0} B  = {:.3}x JSON",
        typed / json
    );
}

/// An index that walks the `N` inputs round-robin, one step a call.
fn cycle_inputs() -> impl FnMut() -> usize {
    let mut i = 0usize;
    move || {
        i = (i + 1) % N;
        i
    }
}

fn construction(c: &mut Criterion, inputs: &[Bytes]) {
    let mut g = c.benchmark_group("cached_object");
    g.throughput(Throughput::Elements(1));
    let mut next = cycle_inputs();
    g.bench_function("from_bytes", |b| {
        b.iter(|| CachedObject::<Pod>::from_bytes(inputs[next()].clone()).unwrap())
    });
    let strip = ObjectOptions {
        strip_managed_fields: true,
        ..ObjectOptions::default()
    };
    g.bench_function("from_bytes_strip_managed_fields", |b| {
        b.iter(|| CachedObject::<Pod>::from_bytes_with(inputs[next()].clone(), &strip).unwrap())
    });
    let fields = ObjectOptions {
        field_paths: Some(FieldPaths::new(["/spec/nodeName", "/status/phase"]).unwrap()),
        ..strip.clone()
    };
    g.bench_function("from_bytes_strip_and_2_field_paths", |b| {
        b.iter(|| CachedObject::<Pod>::from_bytes_with(inputs[next()].clone(), &fields).unwrap())
    });
    g.bench_function("typed_pod_decode_for_comparison", |b| {
        b.iter(|| serde_json::from_slice::<Pod>(&inputs[next()]).unwrap())
    });
    let obj = CachedObject::<Pod>::from_bytes(inputs[0].clone()).unwrap();
    g.bench_function("clone", |b| b.iter(|| black_box(&obj).clone()));
    g.finish();
}

/// Build and decode cost of LZ4 compression, on the varied Pods (managedFields
/// cut in both cases, so the only difference is the compression).
fn compression(c: &mut Criterion, varied: &[Bytes]) {
    let mut g = c.benchmark_group("compression");
    g.throughput(Throughput::Elements(1));
    let mut next = cycle_inputs();
    let strip = ObjectOptions {
        strip_managed_fields: true,
        ..ObjectOptions::default()
    };
    let compress = lz4();
    g.bench_function("from_bytes_with_strip", |b| {
        b.iter(|| CachedObject::<Pod>::from_bytes_with(varied[next()].clone(), &strip).unwrap())
    });
    g.bench_function("from_bytes_with_strip_lz4", |b| {
        b.iter(|| CachedObject::<Pod>::from_bytes_with(varied[next()].clone(), &compress).unwrap())
    });
    let plain: Vec<CachedObject<Pod>> = varied
        .iter()
        .map(|b| CachedObject::from_bytes_with(b.clone(), &strip).unwrap())
        .collect();
    let compressed: Vec<CachedObject<Pod>> = varied
        .iter()
        .map(|b| CachedObject::from_bytes_with(b.clone(), &compress).unwrap())
        .collect();
    assert!(compressed.iter().all(|o| o.is_compressed()));
    g.bench_function("decode_pod", |b| b.iter(|| plain[next()].decode().unwrap()));
    g.bench_function("decode_pod_lz4", |b| {
        b.iter(|| compressed[next()].decode().unwrap())
    });
    // One object over and over (its JSON stays in cache): the CPU cost alone.
    g.bench_function("decode_pod_same_object", |b| {
        b.iter(|| plain[0].decode().unwrap())
    });
    g.bench_function("decode_pod_lz4_same_object", |b| {
        b.iter(|| compressed[0].decode().unwrap())
    });
    g.bench_function("json_lz4_decompress_only", |b| {
        b.iter(|| compressed[next()].json().unwrap().len())
    });
    g.finish();
}

fn main() {
    let inputs = inputs();
    let varied = varied_inputs();
    memory_report(&inputs, &varied);
    let mut c = Criterion::default().configure_from_args();
    construction(&mut c, &inputs);
    compression(&mut c, &varied);
    c.final_summary();
}
