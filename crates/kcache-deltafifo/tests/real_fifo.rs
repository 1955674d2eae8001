//! What only the RealFifo does (client-go's TestRealFIFO_*, non-atomic
//! mode: one entry per event, deletions never dropped, `cached` of known
//! objects only). The scenarios both FIFOs share are in conformance.rs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use kcache_core::CachedObject;
use kcache_deltafifo::{DeltaType::*, RealFifo};
use serde_json::Value;

/// Every queued event, in order (`drain` checks one event a pop).
fn pop_all(f: &RealFifo<Value>) -> Vec<kcache_deltafifo::Delta<Value>> {
    drain(f).concat()
}

#[test]
fn one_entry_per_event_in_order() {
    let f = real(Some(vec![]));
    f.add(mk("foo", 1)).unwrap();
    f.add(mk("bar", 2)).unwrap();
    f.update(mk("foo", 3)).unwrap();
    f.delete(mk("foo", 4).into()).unwrap();
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
    f.delete(mk("unknown", 1).into()).unwrap();
    assert_eq!(pop_all(&f), vec![d(Deleted, &mk("unknown", 1))]);
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
    f.replace(vec![reused, mk("n", 1)], "2".into()).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the new item");
    let got = pop_all(&f);
    assert!(got[0].object.object().ptr_eq(&known));
    assert!(!got[1].object.object().ptr_eq(&known));
}
