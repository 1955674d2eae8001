//! Writes are atomic for readers: the indexer's one lock covers the objects
//! and every index map, so a query never catches an object between its old
//! and new index values.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;

use common::{Obj, obj, stop_readers};
use kcache_core::meta_namespace_key;
use kcache_indexer::{IndexFunc, Indexer, Indexers};
use serde_json::Value;

const COLORS: [&str; 3] = ["red", "green", "blue"];

/// A write is atomic for readers: while a writer moves objects between index
/// values (updates only, nothing deleted), one query over every value at once
/// always finds every object, never one caught between its old and new value.
#[test]
fn readers_never_miss_an_object_being_moved() {
    const OBJECTS: usize = 100;
    const MOVES: usize = 20_000;
    let mut ix = Indexers::new();
    ix.insert(
        "color".to_string(),
        IndexFunc::new(|o: &Obj| {
            Ok(o.annotations()
                .get("colors")
                .unwrap_or_default()
                .split(',')
                .map(str::to_owned)
                .collect())
        }),
    );
    let idx = Arc::new(Indexer::with_indexers(
        Arc::new(meta_namespace_key::<Value>),
        ix,
    ));
    let objs: Vec<Vec<Obj>> = (0..OBJECTS)
        .map(|k| {
            COLORS
                .iter()
                .map(|c| obj(Some("ns"), &format!("o{k}"), &[], &[("colors", c)]))
                .collect()
        })
        .collect();
    for o in &objs {
        idx.add(o[0].clone()).unwrap();
    }
    let every_color = obj(Some("ns"), "probe", &[], &[("colors", &COLORS.join(","))]);
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (idx, stop, checked, probe) = (
                idx.clone(),
                stop.clone(),
                checked.clone(),
                every_color.clone(),
            );
            thread::spawn(move || {
                // one pass after the stop too: a reader the scheduler kept
                // off the CPU until the moves finished still checks
                loop {
                    let last = stop.load(Ordering::Relaxed);
                    let found = idx.index("color", &probe).unwrap().len();
                    assert_eq!(found, OBJECTS, "an object being moved was missed");
                    checked.fetch_add(1, Ordering::Relaxed);
                    if last {
                        break;
                    }
                }
            })
        })
        .collect();
    for i in 0..MOVES {
        let k = i % OBJECTS;
        idx.update(objs[k][(i / OBJECTS + 1) % COLORS.len()].clone())
            .unwrap();
    }
    stop_readers(&stop, readers, &checked);
}
