//! Scenario tests equivalent to client-go's TestRealFIFO_* (non-atomic mode).

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use kcache_core::CachedObject;
use kcache_deltafifo::{DeltaType::*, PopError, Queue, RealFifo};
use serde_json::Value;

fn pop_all(f: &RealFifo<Value>) -> Vec<kcache_deltafifo::Delta<Value>> {
    let mut out = Vec::new();
    while !f.is_empty() {
        let d = rpop(f);
        assert_eq!(d.len(), 1, "RealFifo pops one event at a time");
        out.extend(d);
    }
    out
}

#[test]
fn one_entry_per_event_in_order() {
    let f = real(Some(vec![]));
    f.add(mk("foo", 1)).unwrap();
    f.add(mk("bar", 2)).unwrap();
    f.update(mk("foo", 3)).unwrap();
    f.delete(mk("foo", 4)).unwrap();
    assert_eq!(f.list_keys(), ["foo", "bar", "foo", "foo"]);
    assert_eq!(
        pop_all(&f),
        vec![
            d(Added, &mk("foo", 1)),
            d(Added, &mk("bar", 2)),
            d(Updated, &mk("foo", 3)),
            d(Deleted, &mk("foo", 4))
        ]
    );
}

#[test]
fn delete_is_never_dropped() {
    let f = real(Some(vec![]));
    f.delete(mk("unknown", 1)).unwrap();
    assert_eq!(pop_all(&f), vec![d(Deleted, &mk("unknown", 1))]);
}

#[test]
fn replace_with_delete_delta_in() {
    let old = mk("foo", 1);
    let new = mk("foo", 2);
    let f = real(Some(vec![old.clone()]));
    f.delete(old.clone()).unwrap();
    f.replace(vec![new.clone()], "").unwrap();
    assert_eq!(pop_all(&f), vec![d(Deleted, &old), d(Replaced, &new)]);
}

#[test]
fn replace_makes_deletions_for_objects_only_in_queue() {
    let obj = mk("foo", 2);
    let v2 = mk("foo", 3);
    type Ops = Box<dyn Fn(&RealFifo<Value>)>;
    let table: Vec<(&str, Ops, Vec<kcache_deltafifo::Delta<Value>>)> = vec![
        (
            "added object deleted",
            Box::new({
                let o = obj.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.replace(vec![], "0").unwrap();
                }
            }),
            vec![d(Added, &obj), tomb("foo", &obj)],
        ),
        (
            "deleted object single delete",
            Box::new({
                let o = obj.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.delete(o.clone()).unwrap();
                    f.replace(vec![], "0").unwrap();
                }
            }),
            vec![d(Added, &obj), d(Deleted, &obj)],
        ),
        (
            "synced objects single delete",
            Box::new({
                let o = obj.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.replace(vec![o.clone()], "0").unwrap();
                    f.replace(vec![o.clone()], "0").unwrap();
                    f.replace(vec![], "0").unwrap();
                }
            }),
            vec![
                d(Added, &obj),
                d(Replaced, &obj),
                d(Replaced, &obj),
                tomb("foo", &obj),
            ],
        ),
        (
            "single delete on multiple replaces",
            Box::new({
                let o = obj.clone();
                move |f| {
                    f.add(o.clone()).unwrap();
                    f.replace(vec![], "0").unwrap();
                    f.replace(vec![], "1").unwrap();
                }
            }),
            vec![d(Added, &obj), tomb("foo", &obj)],
        ),
        (
            "added, deleted, added",
            Box::new({
                let (o, o2) = (obj.clone(), v2.clone());
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
                d(Added, &v2),
                tomb("foo", &v2),
            ],
        ),
    ];
    for (name, ops, expected) in table {
        let f = real(Some(vec![]));
        ops(&f);
        assert_eq!(pop_all(&f), expected, "{name}");
    }
}

#[test]
fn enqueueing_with_and_without_lister() {
    let f = real(None);
    f.add(mk("foo", 10)).unwrap();
    f.update(mk("bar", 15)).unwrap();
    f.add(mk("qux", 17)).unwrap();
    f.delete(mk("qux", 18)).unwrap();
    f.delete(mk("baz", 20)).unwrap();
    let vals: Vec<String> = pop_all(&f).iter().map(|d| val(d.object.object())).collect();
    assert_eq!(vals, ["10", "15", "17", "18", "20"]);
}

#[test]
fn resync_skips_queued_keys_and_is_not_transformed() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let t: kcache_deltafifo::TransformFunc<Value> = Arc::new(move |o| {
        c.fetch_add(1, Ordering::SeqCst);
        Ok(o)
    });
    let f = RealFifo::new(opts(Some(vec![mk("foo", 5), mk("bar", 6)])).transformer(t));
    f.update(mk("foo", 6)).unwrap();
    f.resync().unwrap();
    assert_eq!(
        pop_all(&f),
        vec![d(Updated, &mk("foo", 6)), d(Sync, &mk("bar", 6))]
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the update was transformed"
    );
    let f = real(Some(vec![mk("foo", 5)]));
    f.delete(mk("foo", 10)).unwrap();
    f.resync().unwrap();
    assert_eq!(pop_all(&f), vec![d(Deleted, &mk("foo", 10))]);
    let f = real(None);
    f.resync().unwrap();
    assert!(f.is_empty());
}

fn known3() -> Option<Vec<Obj>> {
    Some(vec![mk("foo", 5), mk("bar", 6), mk("baz", 7)])
}

#[test]
fn replace_makes_deletions() {
    let f = real(known3());
    f.delete(mk("baz", 10)).unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    assert_eq!(
        pop_all(&f),
        vec![
            d(Deleted, &mk("baz", 10)),
            tomb("bar", &mk("bar", 6)),
            d(Replaced, &mk("foo", 5))
        ]
    );

    let f = real(known3());
    f.add(mk("baz", 10)).unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    assert_eq!(
        pop_all(&f),
        vec![
            d(Added, &mk("baz", 10)),
            tomb("baz", &mk("baz", 10)),
            tomb("bar", &mk("bar", 6)),
            d(Replaced, &mk("foo", 5))
        ]
    );

    let f = real(known3());
    f.delete(mk("bar", 6)).unwrap();
    f.add(mk("bar", 100)).unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    assert_eq!(
        pop_all(&f),
        vec![
            d(Deleted, &mk("bar", 6)),
            d(Added, &mk("bar", 100)),
            tomb("bar", &mk("bar", 100)),
            tomb("baz", &mk("baz", 7)),
            d(Replaced, &mk("foo", 5))
        ]
    );

    let f = real(known3());
    f.replace(vec![mk("bar", 100), mk("foo", 5)], "0").unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    assert_eq!(
        pop_all(&f),
        vec![
            tomb("baz", &mk("baz", 7)),
            d(Replaced, &mk("bar", 100)),
            d(Replaced, &mk("foo", 5)),
            tomb("bar", &mk("bar", 100)),
            d(Replaced, &mk("foo", 5))
        ]
    );

    let f = real(Some(vec![]));
    f.add(mk("baz", 10)).unwrap();
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    assert_eq!(
        pop_all(&f),
        vec![
            d(Added, &mk("baz", 10)),
            tomb("baz", &mk("baz", 10)),
            d(Replaced, &mk("foo", 5))
        ]
    );
}

#[test]
fn transformer_once_per_object_never_on_tombstones() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let t: kcache_deltafifo::TransformFunc<Value> = Arc::new(move |o| {
        c.fetch_add(1, Ordering::SeqCst);
        Ok(o)
    });
    let f = RealFifo::new(opts(Some(vec![mk("gone", 1)])).transformer(t));
    f.add(mk("a", 1)).unwrap();
    f.replace(vec![mk("b", 1), mk("c", 1)], "1").unwrap();
    // a: add (1) ; tombstones for a and gone: none ; b, c replaced: 2
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(f.len(), 5);
}

/// `cached` is the known object (queued entries are not searched), and a
/// relist handing it back does not transform it again.
#[test]
fn cached_is_the_known_object_and_not_transformed_again() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let t: kcache_deltafifo::TransformFunc<Value> = Arc::new(move |o: Obj| {
        c.fetch_add(1, Ordering::SeqCst);
        Ok(CachedObject::from_bytes(o.bytes().clone())?)
    });
    let known = mk("k", 1);
    let f = RealFifo::new(opts(Some(vec![known.clone()])).transformer(t));
    assert!(f.cached("k").unwrap().ptr_eq(&known));
    assert!(
        kcache_core::ReflectorStore::cached(&f, "k")
            .unwrap()
            .ptr_eq(&known)
    );
    assert!(f.cached("x").is_none());
    assert!(real(None).cached("k").is_none());

    let reused = f.cached("k").unwrap();
    f.replace(vec![reused, mk("n", 1)], "2").unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the new item");
    let got = pop_all(&f);
    assert!(got[0].object.object().ptr_eq(&known));
    assert!(!got[1].object.object().ptr_eq(&known));
}

#[test]
fn has_synced_after_initial_items_processed() {
    let f = real(known3());
    f.replace(vec![mk("foo", 5)], "0").unwrap();
    // bar and baz tombstones, then foo.
    for _ in 0..3 {
        assert!(!f.has_synced());
        let (_, initial) = rpop2(&f);
        assert!(initial);
    }
    assert!(f.has_synced());

    type Action = fn(&RealFifo<Value>);
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
                    rpop(f);
                },
            ],
            false,
        ),
        (
            vec![
                |f| f.replace(vec![mk("a", 1), mk("b", 2)], "0").unwrap(),
                |f| {
                    rpop(f);
                },
                |f| {
                    rpop(f);
                },
            ],
            true,
        ),
        // Duplicate keys: RealFifo counts entries, so two pops are needed.
        (
            vec![
                |f| f.replace(vec![mk("a", 1), mk("a", 2)], "0").unwrap(),
                |f| {
                    rpop(f);
                },
            ],
            false,
        ),
    ];
    for (i, (actions, want)) in cases.into_iter().enumerate() {
        let f = real(Some(vec![]));
        for a in actions {
            a(&f);
        }
        assert_eq!(f.has_synced(), want, "case {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_should_unblock_when_closed() {
    let f = Arc::new(real(Some(vec![mk("foo", 5)])));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let f = f.clone();
            tokio::spawn(async move { f.pop(|_, _| Ok::<_, Infallible>(())).await })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    f.close();
    for t in tasks {
        let r = tokio::time::timeout(std::time::Duration::from_millis(500), t)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(r, Err(PopError::Closed)));
    }
}

#[tokio::test]
async fn dyn_queue() {
    let q: Arc<dyn Queue<Value>> = Arc::new(real(Some(vec![])));
    let o: CachedObject<Value> = mk("x", 1);
    q.add(o.clone()).unwrap();
    q.update(o).unwrap();
    assert_eq!(q.len(), 2);
    q.pop(Box::new(|d, initial| {
        assert!(!initial);
        assert_eq!(d[0].kind, Added);
        Ok(())
    }))
    .await
    .unwrap();
    q.close();
    q.pop(Box::new(|_, _| Ok(()))).await.unwrap();
    assert!(matches!(
        q.pop(Box::new(|_, _| Ok(()))).await,
        Err(PopError::Closed)
    ));
}
