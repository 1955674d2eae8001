//! What only the DeltaFifo does (client-go's TestDeltaFIFO_* scenarios on
//! per-key coalescing, the dedup of deletions, `emit_delta_type_replaced`,
//! `get_by_key`, `cached` of queued objects). The scenarios both FIFOs share
//! are in conformance.rs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use kcache_core::{CachedObject, DeletedFinalStateUnknown, ObjectOrTombstone, ReflectorStore};
use kcache_deltafifo::{DeltaFifo, DeltaType::*, FifoOptions};
use serde_json::Value;

#[test]
fn add_update() {
    let f = fifo(None);
    f.add(mk("foo", 10)).unwrap();
    f.update(mk("foo", 12)).unwrap();
    f.delete(mk("foo", 15).into()).unwrap();
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

/// A transform that bumps the "xfrm" annotation (how many times an object
/// went through it), and its call count.
fn xfrm_transform() -> (kcache_deltafifo::TransformFunc<Value>, Arc<AtomicUsize>) {
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
    (transform, calls)
}

#[test]
fn transformer_runs_once_per_object_never_on_tombstones_or_sync() {
    let (transform, calls) = xfrm_transform();
    let f = DeltaFifo::new(opts(None).transformer(transform.clone()));
    f.add(mk("foo", 10)).unwrap();
    f.add(mk("bar", 11)).unwrap();
    f.update(mk("foo", 12)).unwrap();
    f.delete(mk("foo", 15).into()).unwrap();
    f.replace(vec![], "".into()).unwrap();
    f.add(mk("bar", 16)).unwrap();
    f.replace(vec![], "".into()).unwrap();
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
    f.replace(vec![mk("k", 2)], "1".into()).unwrap();
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
    f.delete(mk("k", 3).into()).unwrap();
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
    let (transform, calls) = xfrm_transform();
    // the known object came through this transform before
    let known = transform(mk("k", 1)).unwrap();
    calls.store(0, Ordering::SeqCst);
    let f = DeltaFifo::new(opts(Some(vec![known.clone()])).transformer(transform));
    f.add(mk("q", 1)).unwrap();
    let queued = f.cached("q").unwrap();
    assert_eq!(xfrm_count(&queued), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    let reused = f.cached("k").unwrap();
    f.replace(vec![reused, queued.clone(), mk("n", 1)], "2".into())
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
    f.replace(vec![copy.clone()], "3".into()).unwrap();
    let got = pop(&f);
    assert!(!got[0].object.object().ptr_eq(&copy));
}

#[test]
fn add_replace() {
    let f = fifo(None);
    f.add(mk("foo", 10)).unwrap();
    f.replace(vec![mk("foo", 15)], "0".into()).unwrap();
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
fn delete_existing_non_propagated() {
    let f = fifo(Some(vec![]));
    f.add(mk("foo", 5)).unwrap();
    f.delete(mk("foo", 6).into()).unwrap();
    let deltas = f.get_by_key("foo").unwrap();
    assert_eq!(deltas.len(), 2);
    assert_eq!(deltas.newest().unwrap().kind, Deleted);
}

#[test]
fn replace_makes_deletions_replaced() {
    let f = DeltaFifo::new(opts(known3()).emit_delta_type_replaced(true));
    f.delete(mk("baz", 10).into()).unwrap();
    f.replace(vec![mk("foo", 6)], "0".into()).unwrap();
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
    f.replace(vec![mk("foo", 5)], "0".into()).unwrap();
    assert_eq!(pop(&f), ds(vec![d(Replaced, &mk("foo", 5))]));
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
fn dedup_collapses_only_two_trailing_deletes() {
    let f = fifo(None);
    f.add(mk("a", 1)).unwrap();
    f.delete(mk("a", 2).into()).unwrap();
    f.delete(mk("a", 3).into()).unwrap();
    assert_eq!(
        pop(&f),
        ds(vec![d(Added, &mk("a", 1)), d(Deleted, &mk("a", 2))]),
        "keeps the older"
    );
    // Older is a tombstone: keep the newer real deletion.
    f.add(mk("b", 1)).unwrap();
    f.replace(vec![], "1".into()).unwrap();
    f.delete(mk("b", 9).into()).unwrap();
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
    f.delete(
        DeletedFinalStateUnknown {
            key: "k".into(),
            obj: mk("k", 1),
        }
        .into(),
    )
    .unwrap();
    assert_eq!(pop(&f), ds(vec![tomb("k", &mk("k", 1))]));
    f.delete(
        DeletedFinalStateUnknown {
            key: "unknown".into(),
            obj: mk("x", 1),
        }
        .into(),
    )
    .unwrap();
    assert!(f.is_empty());
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
