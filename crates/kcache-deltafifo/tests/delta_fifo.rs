//! Scenario tests equivalent to client-go's TestDeltaFIFO_*.

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use futures::FutureExt;
use kcache_core::{
    CachedObject, DeletedFinalStateUnknown, ObjectOrTombstone, ReflectorStore, StoreError,
};
use kcache_deltafifo::{DeltaFifo, DeltaType::*, FifoOptions, PopError, Queue};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_two_producers_order_kept() {
    let f = Arc::new(fifo(None));
    const AMOUNT: usize = 500;
    let producers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|p| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..AMOUNT {
                    f.add(mk(&format!("{p}{i}"), i + 1)).unwrap();
                }
            })
        })
        .collect();
    let mut last: HashMap<char, usize> = HashMap::new();
    for _ in 0..AMOUNT * 2 {
        let deltas = f.pop(|d, _| Ok::<_, Infallible>(d)).await.unwrap();
        let o = deltas.newest().unwrap().object.object().clone();
        let p = o.name().chars().next().unwrap();
        let v: usize = val(&o).parse().unwrap();
        let prev = last.insert(p, v).unwrap_or(0);
        assert!(v > prev, "producer {p}: got {v} after {prev}");
    }
    for p in producers {
        p.join().unwrap();
    }
    assert_eq!(last[&'a'], AMOUNT);
    assert_eq!(last[&'b'], AMOUNT);
}

#[test]
fn replace_with_delete_delta_in() {
    let old = mk("foo", 1);
    let new = mk("foo", 2);
    let f = fifo(Some(vec![old.clone()]));
    f.delete(old.clone()).unwrap();
    f.replace(vec![new.clone()], "").unwrap();
    assert_eq!(pop(&f), ds(vec![d(Deleted, &old), d(Sync, &new)]));
}

#[test]
fn replace_makes_deletions_for_objects_only_in_queue() {
    let obj = mk("foo", 2);
    let obj_v2 = mk("foo", 3);
    type Ops = Box<dyn Fn(&DeltaFifo<Value>)>;
    let o = obj.clone();
    let o2 = obj_v2.clone();
    let table: Vec<(&str, bool, Ops, Vec<kcache_deltafifo::Delta<Value>>)> = vec![
        (
            "added object deleted on replace",
            false,
            Box::new({
                let o = o.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.replace(vec![], "0").unwrap();
                }
            }),
            vec![d(Added, &obj), tomb("foo", &obj)],
        ),
        (
            "replaced object has a single delete",
            true,
            Box::new({
                let o = o.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.replace(vec![o.clone()], "0").unwrap();
                    f.replace(vec![], "0").unwrap();
                }
            }),
            vec![d(Added, &obj), d(Replaced, &obj), tomb("foo", &obj)],
        ),
        (
            "deleted object has a single delete",
            false,
            Box::new({
                let o = o.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.delete(o.clone()).unwrap();
                    f.replace(vec![], "0").unwrap();
                }
            }),
            vec![d(Added, &obj), d(Deleted, &obj)],
        ),
        (
            "synced objects have a single delete",
            false,
            Box::new({
                let o = o.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.replace(vec![o.clone()], "0").unwrap();
                    f.replace(vec![o.clone()], "0").unwrap();
                    f.replace(vec![], "0").unwrap();
                }
            }),
            vec![
                d(Added, &obj),
                d(Sync, &obj),
                d(Sync, &obj),
                tomb("foo", &obj),
            ],
        ),
        (
            "added object has a single delete on multiple replaces",
            false,
            Box::new({
                let o = o.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.replace(vec![], "0").unwrap();
                    f.replace(vec![], "1").unwrap();
                }
            }),
            vec![d(Added, &obj), tomb("foo", &obj)],
        ),
        (
            "added, deleted and added object is deleted",
            false,
            Box::new({
                let o = o.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.delete(o.clone()).unwrap();
                    f.add(o2.clone()).unwrap();
                    f.replace(vec![], "0").unwrap();
                }
            }),
            vec![
                d(Added, &obj),
                d(Deleted, &obj),
                d(Added, &obj_v2),
                tomb("foo", &obj_v2),
            ],
        ),
    ];
    for (name, emit_replaced, ops, expected) in table {
        for known in [Some(vec![]), None] {
            let f = DeltaFifo::new(opts(known.clone()).emit_delta_type_replaced(emit_replaced));
            ops(&f);
            assert_eq!(
                pop(&f),
                ds(expected.clone()),
                "{name} (known: {})",
                known.is_some()
            );
            assert!(f.is_empty(), "{name}: extra deltas");
        }
    }
}

#[test]
fn add_update() {
    let f = fifo(None);
    f.add(mk("foo", 10)).unwrap();
    f.update(mk("foo", 12)).unwrap();
    f.delete(mk("foo", 15)).unwrap();
    assert_eq!(f.list_keys(), ["foo"]);
    assert_eq!(
        val(f
            .get_by_key("foo")
            .unwrap()
            .newest()
            .unwrap()
            .object
            .object()),
        "15"
    );
    let got = pop(&f);
    assert_eq!(
        got,
        ds(vec![
            d(Added, &mk("foo", 10)),
            d(Updated, &mk("foo", 12)),
            d(Deleted, &mk("foo", 15))
        ])
    );
    assert!(try_pop(&f).is_none(), "got a second value");
    assert!(f.get_by_key("foo").is_none(), "item did not get removed");
}

fn xfrm_count(o: &CachedObject<Value>) -> u64 {
    o.annotations()
        .get("xfrm")
        .map_or(0, |v| v.parse().unwrap())
}

#[test]
fn transformer_runs_once_per_object_never_on_tombstones_or_sync() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let transform: kcache_deltafifo::TransformFunc<Value> =
        Arc::new(move |o: CachedObject<Value>| {
            c.fetch_add(1, Ordering::SeqCst);
            let mut v: Value = o.decode()?;
            let n = xfrm_count(&o) + 1;
            v["metadata"]["annotations"]["xfrm"] = Value::String(n.to_string());
            Ok(CachedObject::from_bytes(serde_json::to_vec(&v)?)?)
        });
    let f = DeltaFifo::new(opts(None).transformer(transform.clone()));
    f.add(mk("foo", 10)).unwrap();
    f.add(mk("bar", 11)).unwrap();
    f.update(mk("foo", 12)).unwrap();
    f.delete(mk("foo", 15)).unwrap();
    f.replace(vec![], "").unwrap();
    f.add(mk("bar", 16)).unwrap();
    f.replace(vec![], "").unwrap();
    assert_eq!(f.list_keys(), ["foo", "bar"]);
    for _ in 0..2 {
        let deltas = pop(&f);
        for delta in deltas.iter() {
            assert_eq!(
                xfrm_count(delta.object.object()),
                1,
                "{delta:?} transformed wrong number of times"
            );
        }
        match &deltas.newest().unwrap().object {
            ObjectOrTombstone::Object(o) => {
                assert_eq!(o.name(), "foo");
                assert_eq!(val(o), "15");
            }
            ObjectOrTombstone::Tombstone(t) => {
                assert_eq!(t.obj.name(), "bar");
                assert_eq!(val(&t.obj), "16");
            }
        }
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        5,
        "one call per object, none for tombstones"
    );

    // Sync deltas from resync are never transformed; Replace items are (even as Sync).
    let known = vec![mk("k", 1)];
    let f = DeltaFifo::new(opts(Some(known)).transformer(transform));
    f.resync().unwrap();
    assert_eq!(xfrm_count(pop(&f)[0].object.object()), 0);
    f.replace(vec![mk("k", 2)], "1").unwrap();
    let got = pop(&f);
    assert_eq!(got[0].kind, Sync);
    assert_eq!(xfrm_count(got[0].object.object()), 1);
}

/// `cached` (what a relist may reuse): the newest queued object of the
/// key, none when that is a deletion, else the known object.
#[test]
fn cached_is_the_newest_queued_object_else_the_known_one() {
    let k1 = mk("k", 1);
    let f = fifo(Some(vec![k1.clone()]));
    assert!(f.cached("k").unwrap().ptr_eq(&k1));
    assert!(ReflectorStore::cached(&f, "k").unwrap().ptr_eq(&k1));
    assert!(f.cached("x").is_none());
    let k2 = mk("k", 2);
    f.update(k2.clone()).unwrap();
    assert!(ReflectorStore::cached(&f, "k").unwrap().ptr_eq(&k2));
    f.delete(mk("k", 3)).unwrap();
    assert!(f.cached("k").is_none(), "the newest delta is a deletion");
    pop(&f);
    assert!(f.cached("k").unwrap().ptr_eq(&k1), "the known object again");

    // without known objects: only what is queued
    let f = fifo(None);
    assert!(ReflectorStore::cached(&f, "a").is_none());
    let a = mk("a", 1);
    f.add(a.clone()).unwrap();
    assert!(ReflectorStore::cached(&f, "a").unwrap().ptr_eq(&a));
    pop(&f);
    assert!(ReflectorStore::cached(&f, "a").is_none());
}

/// A relist hands back objects it got from `cached`: they were transformed
/// when they entered the queue and are not transformed again (the very
/// object is queued); other items are transformed once.
#[test]
fn replace_does_not_transform_reused_objects_again() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let transform: kcache_deltafifo::TransformFunc<Value> =
        Arc::new(move |o: CachedObject<Value>| {
            c.fetch_add(1, Ordering::SeqCst);
            let mut v: Value = o.decode()?;
            let n = xfrm_count(&o) + 1;
            v["metadata"]["annotations"]["xfrm"] = Value::String(n.to_string());
            Ok(CachedObject::from_bytes(serde_json::to_vec(&v)?)?)
        });
    // the known object came through this transform before
    let known = transform(mk("k", 1)).unwrap();
    calls.store(0, Ordering::SeqCst);
    let f = DeltaFifo::new(opts(Some(vec![known.clone()])).transformer(transform));
    f.add(mk("q", 1)).unwrap();
    let queued = f.cached("q").unwrap();
    assert_eq!(xfrm_count(&queued), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let reused = f.cached("k").unwrap();
    f.replace(vec![reused, queued.clone(), mk("n", 1)], "2")
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "only the new item");
    let q = pop(&f);
    assert_eq!(q.len(), 2);
    assert!(q[1].object.object().ptr_eq(&queued));
    let k = pop(&f);
    assert!(k[0].object.object().ptr_eq(&known));
    assert_eq!(xfrm_count(k[0].object.object()), 1);
    assert_eq!(xfrm_count(pop(&f)[0].object.object()), 1);

    // an equal but separately decoded object is transformed
    let f = DeltaFifo::new(opts(Some(vec![known.clone()])).transformer(Arc::new(
        |o: CachedObject<Value>| Ok(CachedObject::from_bytes(o.bytes().clone())?),
    )));
    let copy = CachedObject::from_bytes(known.bytes().clone()).unwrap();
    f.replace(vec![copy.clone()], "3").unwrap();
    let got = pop(&f);
    assert!(!got[0].object.object().ptr_eq(&copy));
}

#[test]
fn transformer_error_queues_nothing() {
    let t: kcache_deltafifo::TransformFunc<Value> = Arc::new(|_o| Err("nope".into()));
    let f = DeltaFifo::new(opts(None).transformer(t));
    let e = f.add(mk("a", 1)).unwrap_err();
    assert!(matches!(&e, StoreError::Transform { key, .. } if key == "a"));
    assert!(f.is_empty());
}

#[test]
fn enqueueing_no_lister() {
    let f = fifo(None);
    f.add(mk("foo", 10)).unwrap();
    f.update(mk("bar", 15)).unwrap();
    f.add(mk("qux", 17)).unwrap();
    f.delete(mk("qux", 18)).unwrap();
    // Dropped: baz is neither queued nor known.
    f.delete(mk("baz", 20)).unwrap();
    for expect in ["10", "15", "18"] {
        assert_eq!(val(pop(&f).newest().unwrap().object.object()), expect);
    }
    assert!(f.is_empty());
}

#[test]
fn enqueueing_with_lister() {
    let f = fifo(Some(vec![mk("foo", 5), mk("bar", 6), mk("baz", 7)]));
    f.add(mk("foo", 10)).unwrap();
    f.update(mk("bar", 15)).unwrap();
    // Enqueued: baz is known.
    f.delete(mk("baz", 20)).unwrap();
    for expect in ["10", "15", "20"] {
        assert_eq!(val(pop(&f).newest().unwrap().object.object()), expect);
    }
    assert!(f.is_empty());
}

#[test]
fn add_replace() {
    let f = fifo(None);
    f.add(mk("foo", 10)).unwrap();
    f.replace(vec![mk("foo", 15)], "0").unwrap();
    let got = pop(&f);
    assert_eq!(val(got.newest().unwrap().object.object()), "15");
    assert_eq!(
        got,
        ds(vec![d(Added, &mk("foo", 10)), d(Sync, &mk("foo", 15))])
    );
    assert!(try_pop(&f).is_none());
    assert!(f.get_by_key("foo").is_none());
}

#[test]
fn resync_non_existing() {
    let f = fifo(Some(vec![mk("foo", 5)]));
    f.delete(mk("foo", 10)).unwrap();
    f.resync().unwrap();
    let deltas = f.get_by_key("foo").unwrap();
    assert_eq!(deltas.len(), 1);
    assert_eq!(deltas[0].kind, Deleted);
}

#[test]
fn resync() {
    let f = fifo(Some(vec![mk("foo", 5)]));
    f.resync().unwrap();
    let deltas = f.get_by_key("foo").unwrap();
    assert_eq!(deltas.len(), 1);
    assert_eq!(deltas[0].kind, Sync);
    // Without known objects resync does nothing.
    let f = fifo(None);
    f.resync().unwrap();
    assert!(f.is_empty());
}

#[test]
fn delete_existing_non_propagated() {
    let f = fifo(Some(vec![]));
    f.add(mk("foo", 5)).unwrap();
    f.delete(mk("foo", 6)).unwrap();
    let deltas = f.get_by_key("foo").unwrap();
    assert_eq!(deltas.len(), 2);
    assert_eq!(deltas.newest().unwrap().kind, Deleted);
}

fn known3() -> Option<Vec<Obj>> {
    Some(vec![mk("foo", 5), mk("bar", 6), mk("baz", 7)])
}

#[test]
fn replace_makes_deletions() {
    // A pre-existing Delete.
    let f = fifo(known3());
    f.delete(mk("baz", 10)).unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    for expected in [
        vec![d(Deleted, &mk("baz", 10))],
        vec![d(Sync, &mk("foo", 5))],
        vec![tomb("bar", &mk("bar", 6))],
    ] {
        assert_eq!(pop(&f), ds(expected));
    }

    // Starting with an Add instead.
    let f = fifo(known3());
    f.add(mk("baz", 10)).unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    for expected in [
        vec![d(Added, &mk("baz", 10)), tomb("baz", &mk("baz", 10))],
        vec![d(Sync, &mk("foo", 5))],
        vec![tomb("bar", &mk("bar", 6))],
    ] {
        assert_eq!(pop(&f), ds(expected));
    }

    // Deleted and recreated in the queue, then deleted by a Replace: the
    // tombstone carries the newest queued object.
    let f = fifo(known3());
    f.delete(mk("bar", 6)).unwrap();
    f.add(mk("bar", 100)).unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    for expected in [
        vec![
            d(Deleted, &mk("bar", 6)),
            d(Added, &mk("bar", 100)),
            tomb("bar", &mk("bar", 100)),
        ],
        vec![d(Sync, &mk("foo", 5))],
        vec![tomb("baz", &mk("baz", 7))],
    ] {
        assert_eq!(pop(&f), ds(expected));
    }

    // Synced first: the delete uses the latest version.
    let f = fifo(known3());
    f.replace(vec![mk("bar", 100), mk("foo", 5)], "0").unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    for expected in [
        vec![d(Sync, &mk("bar", 100)), tomb("bar", &mk("bar", 100))],
        vec![d(Sync, &mk("foo", 5)), d(Sync, &mk("foo", 5))],
        vec![tomb("baz", &mk("baz", 7))],
    ] {
        assert_eq!(pop(&f), ds(expected));
    }

    // Without known objects.
    let f = fifo(None);
    f.add(mk("baz", 10)).unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    for expected in [
        vec![d(Added, &mk("baz", 10)), tomb("baz", &mk("baz", 10))],
        vec![d(Sync, &mk("foo", 5))],
    ] {
        assert_eq!(pop(&f), ds(expected));
    }
    assert!(f.is_empty());
}

#[test]
fn replace_makes_deletions_replaced() {
    let f = DeltaFifo::new(opts(known3()).emit_delta_type_replaced(true));
    f.delete(mk("baz", 10)).unwrap();
    f.replace(vec![mk("foo", 6)], "0").unwrap();
    for expected in [
        vec![d(Deleted, &mk("baz", 10))],
        vec![d(Replaced, &mk("foo", 6))],
        vec![tomb("bar", &mk("bar", 6))],
    ] {
        assert_eq!(pop(&f), ds(expected));
    }
}

#[test]
fn replace_delta_type() {
    let f = DeltaFifo::new(opts(Some(vec![mk("foo", 5)])).emit_delta_type_replaced(true));
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    assert_eq!(pop(&f), ds(vec![d(Replaced, &mk("foo", 5))]));
}

#[test]
fn update_resync_race() {
    let f = fifo(Some(vec![mk("foo", 5)]));
    f.update(mk("foo", 6)).unwrap();
    f.resync().unwrap();
    assert_eq!(pop(&f), ds(vec![d(Updated, &mk("foo", 6))]));
    assert!(f.is_empty());
}

#[test]
fn has_synced_correct_on_deletion() {
    let f = fifo(known3());
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    for expected in [
        vec![d(Sync, &mk("foo", 5))],
        vec![tomb("bar", &mk("bar", 6))],
        vec![tomb("baz", &mk("baz", 7))],
    ] {
        assert!(!f.has_synced());
        let (got, initial) = pop2(&f);
        assert_eq!(got, ds(expected));
        assert!(initial, "expected an initial-list item");
    }
    assert!(f.has_synced());
    f.add(mk("late", 1)).unwrap();
    assert!(!pop2(&f).1, "after sync, items are not initial");
}

#[test]
fn detect_line_jumpers() {
    let f = fifo(None);
    f.add(mk("foo", 10)).unwrap();
    f.add(mk("bar", 1)).unwrap();
    f.add(mk("foo", 11)).unwrap();
    f.add(mk("foo", 13)).unwrap();
    f.add(mk("zab", 30)).unwrap();
    let newest = |d: kcache_deltafifo::Deltas<Value>| val(d.newest().unwrap().object.object());
    assert_eq!(newest(pop(&f)), "13");
    f.add(mk("foo", 14)).unwrap(); // foo must not jump back in line
    assert_eq!(newest(pop(&f)), "1");
    assert_eq!(newest(pop(&f)), "30");
    assert_eq!(newest(pop(&f)), "14");
}

#[test]
fn key_of() {
    let f = fifo(None);
    assert_eq!(f.key_of(&mk("A", 1).into()).unwrap(), "A");
    let t: ObjectOrTombstone<Value> = DeletedFinalStateUnknown {
        key: "B".into(),
        obj: mk("x", 1),
    }
    .into();
    assert_eq!(f.key_of(&t).unwrap(), "B");
}

#[test]
fn has_synced_cases() {
    type Action = fn(&DeltaFifo<Value>);
    let cases: Vec<(Vec<Action>, bool)> = vec![
        (vec![], false),
        (vec![|f| f.add(mk("a", 1)).unwrap()], true),
        (vec![|f| f.replace(vec![], "0").unwrap()], true),
        (
            vec![|f| f.replace(vec![mk("a", 1), mk("b", 2)], "0").unwrap()],
            false,
        ),
        (
            vec![
                |f| f.replace(vec![mk("a", 1), mk("b", 2)], "0").unwrap(),
                |f| {
                    pop(f);
                },
            ],
            false,
        ),
        (
            vec![
                |f| f.replace(vec![mk("a", 1), mk("b", 2)], "0").unwrap(),
                |f| {
                    pop(f);
                },
                |f| {
                    pop(f);
                },
            ],
            true,
        ),
        // Duplicate keys in a list (a broken apiserver): one key, one pop.
        (
            vec![
                |f| f.replace(vec![mk("a", 1), mk("a", 2)], "0").unwrap(),
                |f| {
                    pop(f);
                },
            ],
            true,
        ),
        (vec![|f| f.delete(mk("never", 1)).unwrap()], true),
        (
            vec![|f| f.update(mk("a", 1)).unwrap(), |f| {
                f.replace(vec![mk("x", 1)], "0").unwrap()
            }],
            true,
        ),
    ];
    for (i, (actions, want)) in cases.into_iter().enumerate() {
        let f = fifo(None);
        for a in actions {
            a(&f);
        }
        assert_eq!(f.has_synced(), want, "case {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_should_unblock_when_closed() {
    let f = Arc::new(fifo(Some(vec![mk("foo", 5)])));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            f.pop(|_, _| Ok::<_, Infallible>(())).await
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    for t in &tasks {
        assert!(!t.is_finished(), "pop returned before close");
    }
    f.close();
    assert!(f.is_closed());
    for t in tasks {
        let r = tokio::time::timeout(std::time::Duration::from_millis(500), t)
            .await
            .expect("pop did not return after close")
            .unwrap();
        assert!(matches!(r, Err(PopError::Closed)));
    }
}

#[tokio::test]
async fn closed_but_not_empty_still_pops() {
    let f = fifo(None);
    f.add(mk("a", 1)).unwrap();
    f.close();
    assert_eq!(f.pop(|d, _| Ok::<_, Infallible>(d.len())).await.unwrap(), 1);
    assert!(matches!(
        f.pop(|_, _| Ok::<_, Infallible>(())).await,
        Err(PopError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_waits_for_an_add() {
    let f = Arc::new(fifo(None));
    let f2 = f.clone();
    let waiter = tokio::spawn(async move {
        f2.pop(|d, _| Ok::<_, Infallible>(d.newest().unwrap().object.key().to_owned()))
            .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    assert!(!waiter.is_finished());
    f.add(mk("late", 1)).unwrap();
    assert_eq!(waiter.await.unwrap().unwrap(), "late");
}

#[test]
fn dedup_collapses_only_two_trailing_deletes() {
    let f = fifo(None);
    f.add(mk("a", 1)).unwrap();
    f.delete(mk("a", 2)).unwrap();
    f.delete(mk("a", 3)).unwrap();
    assert_eq!(
        pop(&f),
        ds(vec![d(Added, &mk("a", 1)), d(Deleted, &mk("a", 2))]),
        "keeps the older"
    );
    // Older is a tombstone: keep the newer real deletion.
    f.add(mk("b", 1)).unwrap();
    f.replace(vec![], "1").unwrap();
    f.delete(mk("b", 9)).unwrap();
    assert_eq!(
        pop(&f),
        ds(vec![d(Added, &mk("b", 1)), d(Deleted, &mk("b", 9))])
    );
    // Non-delete deltas are never collapsed.
    f.update(mk("c", 1)).unwrap();
    f.update(mk("c", 1)).unwrap();
    assert_eq!(pop(&f).len(), 2);
}

#[test]
fn delete_of_a_tombstone_uses_its_key() {
    let f = fifo(Some(vec![mk("k", 1)]));
    f.delete(DeletedFinalStateUnknown {
        key: "k".into(),
        obj: mk("k", 1),
    })
    .unwrap();
    assert_eq!(pop(&f), ds(vec![tomb("k", &mk("k", 1))]));
    f.delete(DeletedFinalStateUnknown {
        key: "unknown".into(),
        obj: mk("x", 1),
    })
    .unwrap();
    assert!(f.is_empty());
}

#[tokio::test]
async fn process_error_is_returned_and_item_removed() {
    let f = fifo(None);
    f.add(mk("a", 1)).unwrap();
    let r = f.pop(|_, _| Err::<(), _>("handler failed")).await;
    assert!(matches!(r, Err(PopError::Process("handler failed"))));
    assert!(f.is_empty());
}

#[tokio::test]
async fn usable_as_dyn_queue_and_store() {
    let q: Arc<dyn Queue<Value>> = Arc::new(DeltaFifo::new(opts(None)));
    q.replace(vec![mk("a", 1)], "5".into()).unwrap();
    assert_eq!(q.len(), 1);
    assert!(!q.has_synced());
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    q.pop(Box::new(move |d, initial| {
        assert!(initial);
        s.fetch_add(d.len(), Ordering::SeqCst);
        Ok(())
    }))
    .await
    .unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert!(q.has_synced());
    let r = q.pop(Box::new(|_, _| Err("x".into()))).now_or_never();
    assert!(r.is_none(), "pop on an empty queue waits");
    q.close();
    assert!(q.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_synced_wakes_when_initial_list_is_popped() {
    let f = Arc::new(fifo(None));
    f.replace(vec![mk("a", 1), mk("b", 1)], "1").unwrap();
    let f2 = f.clone();
    let waiter = tokio::spawn(async move { f2.wait_synced().await });
    pop(&f);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(!waiter.is_finished());
    pop(&f);
    tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
        .await
        .unwrap()
        .unwrap();
}

#[test]
fn default_key_function_and_store_trait() {
    let f: DeltaFifo<Value> = DeltaFifo::new(FifoOptions::new());
    let o: CachedObject<Value> =
        CachedObject::from_bytes(&br#"{"metadata":{"name":"a","namespace":"ns"}}"#[..]).unwrap();
    ReflectorStore::add(&f, o.clone()).unwrap();
    ReflectorStore::update(&f, o.clone()).unwrap();
    ReflectorStore::delete(&f, o.into()).unwrap();
    ReflectorStore::resync(&f).unwrap();
    assert_eq!(f.list_keys(), ["ns/a"]);
    assert_eq!(f.get_by_key("ns/a").unwrap().len(), 3);
}
