//! Concurrency stress: writers move objects between index values while
//! readers query the index; a reader must never see an object under a value
//! it does not have at the time of the read.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use common::{Obj, obj, stop_readers};
use kcache_indexer::{Indexer, Indexers, NAMESPACE_INDEX, label_index_func};
use serde_json::Value;

const COLORS: [&str; 3] = ["red", "green", "blue"];
const WRITERS: usize = 4;
const READERS: usize = 4;
const KEYS_PER_WRITER: usize = 50;
const ROUNDS: usize = 1_000;

#[test]
fn readers_never_see_stale_index_membership() {
    let idx = Arc::new(Indexer::<Value>::new());
    let mut more = Indexers::new();
    more.insert("color".to_string(), label_index_func("color"));
    idx.add_indexers(more).unwrap();

    // Pre-built objects: [writer][key][color]
    let objs: Arc<Vec<Vec<Vec<Obj>>>> = Arc::new(
        (0..WRITERS)
            .map(|w| {
                (0..KEYS_PER_WRITER)
                    .map(|k| {
                        COLORS
                            .iter()
                            .map(|c| {
                                obj(
                                    Some(&format!("ns{w}")),
                                    &format!("o{k}"),
                                    &[("color", c)],
                                    &[],
                                )
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicUsize::new(0));

    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let idx = idx.clone();
            let stop = stop.clone();
            let checked = checked.clone();
            thread::spawn(move || {
                let mut n = 0usize;
                // after the stop, one more pass per color: a reader the
                // scheduler kept off the CPU until the writers finished
                // still checks the final index
                let mut passes_after_stop = 0;
                loop {
                    if stop.load(Ordering::Relaxed) {
                        passes_after_stop += 1;
                        if passes_after_stop > COLORS.len() {
                            break;
                        }
                    }
                    let color = COLORS[n % COLORS.len()];
                    for o in idx.by_index("color", color).unwrap() {
                        assert_eq!(
                            o.labels().get("color"),
                            Some(color),
                            "reader {r} saw {} under {color}",
                            o.key()
                        );
                        checked.fetch_add(1, Ordering::Relaxed);
                    }
                    for k in idx.index_keys("color", color).unwrap() {
                        // The key was under `color` at read time; it must be a real key.
                        assert!(k.starts_with("ns"));
                    }
                    let ns = format!("ns{}", n % WRITERS);
                    for o in idx.by_index(NAMESPACE_INDEX, &ns).unwrap() {
                        assert_eq!(o.namespace(), Some(ns.as_str()));
                    }
                    n += 1;
                }
            })
        })
        .collect();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let idx = idx.clone();
            let objs = objs.clone();
            thread::spawn(move || {
                let mut seed = 0x2545F4914F6CDD1Du64 ^ (w as u64);
                for _ in 0..ROUNDS {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let k = (seed as usize) % KEYS_PER_WRITER;
                    let c = (seed >> 32) as usize % COLORS.len();
                    let o = objs[w][k][c].clone();
                    if (seed >> 48).is_multiple_of(10) {
                        idx.delete(o).unwrap();
                    } else {
                        idx.update(o).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop_readers(&stop, readers, &checked);

    // Quiescent state: the index is exactly what the objects say.
    for color in COLORS {
        let mut want: Vec<String> = idx
            .list()
            .into_iter()
            .filter(|o| o.labels().get("color") == Some(color))
            .map(|o| o.key().to_string())
            .collect();
        want.sort();
        assert_eq!(idx.index_keys("color", color).unwrap(), want);
    }
    // No empty sets after deleting everything.
    for k in idx.list_keys() {
        idx.delete_by_key(&k);
    }
    assert!(idx.list_index_func_values("color").is_empty());
    assert!(idx.list_index_func_values(NAMESPACE_INDEX).is_empty());
}

#[test]
fn replace_is_atomic_for_readers() {
    let idx = Arc::new(Indexer::<Value>::new());
    let gen_a: Vec<Obj> = (0..500)
        .map(|i| obj(Some("a"), &format!("x{i}"), &[], &[]))
        .collect();
    let gen_b: Vec<Obj> = (0..300)
        .map(|i| obj(Some("b"), &format!("y{i}"), &[], &[]))
        .collect();
    idx.replace(gen_a.clone(), "1").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let idx = idx.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let n = idx.len();
                assert!(n == 500 || n == 300, "saw a half-replaced store: {n}");
                let a = idx.by_index(NAMESPACE_INDEX, "a").unwrap().len();
                assert!(a == 0 || a == 500, "saw a half-built index: {a}");
            }
        })
    };
    for i in 0..40 {
        let items = if i % 2 == 0 {
            gen_b.clone()
        } else {
            gen_a.clone()
        };
        idx.replace(items, i.to_string()).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
}
