//! Indexer benchmarks (`rwlock_hashmap`: the shipped indexer, one
//! `parking_lot::RwLock` around `HashMap`s). Issue 17 compared it here with
//! the DashMap stack it replaced; that stack stayed bench-only until commit
//! 68790e6 (docs/indexer.md has the figures and how to rerun them).
//!
//! Each store holds N objects (10k and 100k) with a namespace index (N/100
//! namespaces, 100 objects each) and a label index (`app`, 100 values, N/100
//! objects each). Groups:
//!
//! * `read_*`: one read on a filled store, no writer.
//! * `write_*`: N adds into an empty store, N updates keeping or moving the
//!   label value, N deletes, a replace of N objects.
//! * `mixed_1w{R}r_{point,list}_{writer,reader}`: 1 writer and R readers
//!   running at once; `_writer` times one update while R reader threads loop,
//!   `_reader` times one read while a writer thread loops updates (moving the
//!   label) and R-1 other reader threads loop. A `point` read is a
//!   `get_by_key` plus a `by_index` on the namespace index (100 objects); a
//!   `list` read is a full `list()`. `mixed_1w{R}r_point_paced_reader`: the
//!   same with a writer sleeping 100 µs after each update (an informer's
//!   pace rather than flat out).
//!
//! Run (results in docs/indexer.md):
//! `cargo bench -p kcache-indexer --bench store -- --warm-up-time 1 --measurement-time 2`
//!
//! * `INDEXER_BENCH_SIZES=10000` (default `10000,100000`).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, Criterion, Throughput};
use kcache_core::{CachedObject, meta_namespace_key};
use kcache_indexer::{
    Indexer, Indexers, NAMESPACE_INDEX, label_index_func, meta_namespace_index_func,
};
use serde_json::{Value, json};

type Obj = CachedObject<Value>;
type Group<'a> = BenchmarkGroup<'a, WallTime>;

const LABEL_INDEX: &str = "app";
const LABEL_VALUES: usize = 100;
const PER_NAMESPACE: usize = 100;

/// What the benchmark needs of an indexer (the groups are generic over it,
/// so that another implementation can be measured beside it).
trait Bench: Send + Sync + Sized + 'static {
    const NAME: &'static str;
    fn build() -> Self;
    fn add(&self, o: Obj);
    fn update(&self, o: Obj);
    fn delete(&self, o: Obj);
    fn replace(&self, items: Vec<Obj>);
    fn get_by_key(&self, key: &str) -> Option<Obj>;
    fn list(&self) -> Vec<Obj>;
    fn list_keys(&self) -> Vec<String>;
    fn by_index(&self, index: &str, value: &str) -> Vec<Obj>;
    fn index_keys(&self, index: &str, value: &str) -> Vec<String>;
}

fn indexers() -> Indexers<Value> {
    let mut ix = Indexers::new();
    ix.insert(NAMESPACE_INDEX.to_string(), meta_namespace_index_func());
    ix.insert(LABEL_INDEX.to_string(), label_index_func(LABEL_INDEX));
    ix
}

macro_rules! impl_bench {
    ($ty:ty, $name:literal) => {
        impl Bench for $ty {
            const NAME: &'static str = $name;
            fn build() -> Self {
                <$ty>::with_indexers(Arc::new(meta_namespace_key::<Value>), indexers())
            }
            fn add(&self, o: Obj) {
                <$ty>::add(self, o).unwrap()
            }
            fn update(&self, o: Obj) {
                <$ty>::update(self, o).unwrap()
            }
            fn delete(&self, o: Obj) {
                <$ty>::delete(self, o).unwrap()
            }
            fn replace(&self, items: Vec<Obj>) {
                <$ty>::replace(self, items, "1").unwrap()
            }
            fn get_by_key(&self, key: &str) -> Option<Obj> {
                <$ty>::get_by_key(self, key)
            }
            fn list(&self) -> Vec<Obj> {
                <$ty>::list(self)
            }
            fn list_keys(&self) -> Vec<String> {
                <$ty>::list_keys(self)
            }
            fn by_index(&self, index: &str, value: &str) -> Vec<Obj> {
                <$ty>::by_index(self, index, value).unwrap()
            }
            fn index_keys(&self, index: &str, value: &str) -> Vec<String> {
                <$ty>::index_keys(self, index, value).unwrap()
            }
        }
    };
}

impl_bench!(Indexer<Value>, "rwlock_hashmap");

/// The objects of one size: `v1` and `v2` differ in the `app` label only.
struct Data {
    n: usize,
    keys: Vec<String>,
    namespaces: Vec<String>,
    apps: Vec<String>,
    v1: Vec<Obj>,
    v2: Vec<Obj>,
}

impl Data {
    fn new(n: usize) -> Self {
        let namespaces: Vec<String> = (0..n / PER_NAMESPACE).map(|i| format!("ns-{i}")).collect();
        let object = |i: usize, shift: usize| -> Obj {
            let v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": format!("pod-{i}"), "namespace": namespaces[i % namespaces.len()],
                "uid": format!("uid-{i}"), "resourceVersion": format!("{}", shift * n + i),
                "labels": {"app": format!("app-{}", (i + shift) % LABEL_VALUES)}}});
            CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
        };
        let v1: Vec<Obj> = (0..n).map(|i| object(i, 0)).collect();
        let v2: Vec<Obj> = (0..n).map(|i| object(i, 1)).collect();
        Data {
            n,
            keys: v1.iter().map(|o| o.key().to_string()).collect(),
            apps: (0..LABEL_VALUES).map(|i| format!("app-{i}")).collect(),
            namespaces,
            v1,
            v2,
        }
    }

    fn label(&self) -> String {
        format!("{}k", self.n / 1000)
    }

    /// The `i`-th update of an endless stream that moves every object's
    /// label back and forth.
    fn moving(&self, i: usize) -> &Obj {
        let j = i % (2 * self.n);
        if j < self.n {
            &self.v2[j]
        } else {
            &self.v1[j - self.n]
        }
    }
}

fn filled<S: Bench>(d: &Data) -> Arc<S> {
    let s = S::build();
    s.replace(d.v1.clone());
    Arc::new(s)
}

/// Runs `$f` on the store in a group named `$group` and the size.
macro_rules! bench {
    ($c:expr, $group:expr, $d:expr, $st:expr, $f:ident $(, $arg:expr)*) => {{
        let mut g = $c.benchmark_group(format!("{}_{}", $group, $d.label()));
        $f(&mut g, $d, &$st $(, $arg)*);
        g.finish();
    }};
}

// ---- reads ----

/// One lookup per iteration, `lookup(i)` with `i` stepping by `step`
/// through `0..len`.
fn lookups<R>(
    g: &mut Group,
    name: &str,
    len: usize,
    step: usize,
    mut lookup: impl FnMut(usize) -> R,
) {
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    g.bench_function(name, |b| {
        b.iter(|| {
            i = (i + step) % len;
            lookup(i)
        })
    });
}

fn get_by_key<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>) {
    lookups(g, S::NAME, d.n, 7919, |i| {
        black_box(s.get_by_key(&d.keys[i]))
    });
}

fn list<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>) {
    g.throughput(Throughput::Elements(d.n as u64));
    g.sample_size(20);
    g.bench_function(S::NAME, |b| b.iter(|| s.list()));
}

fn list_keys<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>) {
    g.throughput(Throughput::Elements(d.n as u64));
    g.sample_size(20);
    g.bench_function(S::NAME, |b| b.iter(|| s.list_keys()));
}

fn by_index_namespace<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>) {
    lookups(g, S::NAME, d.namespaces.len(), 1, |i| {
        let r = s.by_index(NAMESPACE_INDEX, &d.namespaces[i]);
        debug_assert_eq!(r.len(), PER_NAMESPACE);
        r
    });
}

fn by_index_label<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>) {
    lookups(g, S::NAME, d.apps.len(), 1, |i| {
        let r = s.by_index(LABEL_INDEX, &d.apps[i]);
        debug_assert_eq!(r.len(), d.n / LABEL_VALUES);
        r
    });
}

fn index_keys_namespace<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>) {
    lookups(g, S::NAME, d.namespaces.len(), 1, |i| {
        s.index_keys(NAMESPACE_INDEX, &d.namespaces[i])
    });
}

// ---- writes of N objects ----

/// A group measuring writes of all N objects: throughput per object, 10
/// samples (each sample writes N).
fn writes_of_n(g: &mut Group, d: &Data) {
    g.throughput(Throughput::Elements(d.n as u64));
    g.sample_size(10);
}

/// Each sample on a fresh store from `setup` (not measured): `write` of
/// every object of `v1`.
fn fresh_store_writes<S: Bench>(
    g: &mut Group,
    d: &Data,
    setup: impl Fn() -> S,
    write: impl Fn(&S, Obj),
) {
    writes_of_n(g, d);
    g.bench_function(S::NAME, |b| {
        b.iter_batched(
            &setup,
            |s| {
                for o in &d.v1 {
                    write(&s, o.clone());
                }
                s
            },
            BatchSize::PerIteration,
        )
    });
}

fn add_all<S: Bench>(g: &mut Group, d: &Data, _: &Arc<S>) {
    fresh_store_writes(g, d, S::build, S::add);
}

/// Updates that keep every index value (the store holds `v1`).
fn update_all_same_values<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>) {
    writes_of_n(g, d);
    g.bench_function(S::NAME, |b| {
        b.iter(|| {
            for o in &d.v1 {
                s.update(o.clone());
            }
        })
    });
}

/// Updates that move every object to another label value (and back on the
/// next iteration).
fn update_all_moving_label<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>) {
    writes_of_n(g, d);
    let mut round = 0usize;
    g.bench_function(S::NAME, |b| {
        b.iter(|| {
            round += 1;
            let objs = if round % 2 == 1 { &d.v2 } else { &d.v1 };
            for o in objs {
                s.update(o.clone());
            }
        })
    });
    // Leave the store holding `v1` for the benchmarks that follow.
    if round % 2 == 1 {
        for o in &d.v1 {
            s.update(o.clone());
        }
    }
}

fn delete_all<S: Bench>(g: &mut Group, d: &Data, _: &Arc<S>) {
    let full = || {
        let s = S::build();
        s.replace(d.v1.clone());
        s
    };
    fresh_store_writes(g, d, full, S::delete);
}

fn replace_all<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>) {
    writes_of_n(g, d);
    g.bench_function(S::NAME, |b| b.iter(|| s.replace(d.v1.clone())));
}

// ---- mixed: 1 writer, R readers ----

#[derive(Clone, Copy)]
enum Read {
    /// `get_by_key` + `by_index` on the namespace index.
    Point,
    /// A full `list()`.
    List,
}

fn read_once<S: Bench>(s: &S, d: &Data, read: Read, i: usize) {
    match read {
        Read::Point => {
            black_box(s.get_by_key(&d.keys[(i * 7919) % d.n]));
            black_box(s.by_index(NAMESPACE_INDEX, &d.namespaces[i % d.namespaces.len()]));
        }
        Read::List => {
            black_box(s.list());
        }
    }
}

fn reader_loop<S: Bench>(s: &S, d: &Data, read: Read, stop: &AtomicBool, seed: usize) {
    let mut i = seed * 104_729;
    while !stop.load(Ordering::Relaxed) {
        read_once(s, d, read, i);
        i += 1;
    }
}

/// Times one update while `readers` threads read.
fn mixed_writer<S: Bench>(g: &mut Group, d: &Data, s: &Arc<S>, readers: usize, read: Read) {
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    let stop = AtomicBool::new(false);
    thread::scope(|sc| {
        for r in 0..readers {
            let stop = &stop;
            sc.spawn(move || reader_loop(&**s, d, read, stop, r + 1));
        }
        let mut i = 0usize;
        g.bench_function(S::NAME, |b| {
            b.iter(|| {
                i += 1;
                s.update(d.moving(i).clone())
            })
        });
        stop.store(true, Ordering::Relaxed);
    });
}

/// Times one read while a writer thread updates (nonstop, or sleeping
/// `pace` after each update) and `readers - 1` other threads read.
fn mixed_reader<S: Bench>(
    g: &mut Group,
    d: &Data,
    s: &Arc<S>,
    readers: usize,
    read: Read,
    pace: Option<Duration>,
) {
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    let stop = AtomicBool::new(false);
    thread::scope(|sc| {
        let stop = &stop;
        sc.spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                s.update(d.moving(i).clone());
                if let Some(pace) = pace {
                    thread::sleep(pace);
                }
            }
        });
        for r in 1..readers {
            sc.spawn(move || reader_loop(&**s, d, read, stop, r + 1));
        }
        let mut i = 0usize;
        g.bench_function(S::NAME, |b| {
            b.iter(|| {
                i += 1;
                read_once(&**s, d, read, i)
            })
        });
        stop.store(true, Ordering::Relaxed);
    });
}

fn sizes() -> Vec<usize> {
    std::env::var("INDEXER_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').map(|n| n.trim().parse().unwrap()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000])
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    for n in sizes() {
        let d = Data::new(n);
        let st: Arc<Indexer<Value>> = filled(&d);
        let d = &d;

        bench!(c, "read_get_by_key", d, st, get_by_key);
        bench!(c, "read_list", d, st, list);
        bench!(c, "read_list_keys", d, st, list_keys);
        bench!(c, "read_by_index_namespace", d, st, by_index_namespace);
        bench!(c, "read_by_index_label", d, st, by_index_label);
        bench!(c, "read_index_keys_namespace", d, st, index_keys_namespace);

        bench!(c, "write_add_all", d, st, add_all);
        bench!(
            c,
            "write_update_all_same_values",
            d,
            st,
            update_all_same_values
        );
        bench!(
            c,
            "write_update_all_moving_label",
            d,
            st,
            update_all_moving_label
        );
        bench!(c, "write_delete_all", d, st, delete_all);
        bench!(c, "write_replace_all", d, st, replace_all);

        for (readers, read, tag) in [
            (1, Read::Point, "1w1r_point"),
            (4, Read::Point, "1w4r_point"),
            (4, Read::List, "1w4r_list"),
        ] {
            bench!(
                c,
                format!("mixed_{tag}_writer"),
                d,
                st,
                mixed_writer,
                readers,
                read
            );
            bench!(
                c,
                format!("mixed_{tag}_reader"),
                d,
                st,
                mixed_reader,
                readers,
                read,
                None
            );
        }
        // A writer at an informer's pace rather than flat out: one update
        // every ~100 µs (the sleep's granularity makes it 5-10k updates/s).
        for (readers, tag) in [(1, "1w1r_point_paced"), (4, "1w4r_point_paced")] {
            let pace = Some(Duration::from_micros(100));
            bench!(
                c,
                format!("mixed_{tag}_reader"),
                d,
                st,
                mixed_reader,
                readers,
                Read::Point,
                pace
            );
        }
    }
    c.final_summary();
}
