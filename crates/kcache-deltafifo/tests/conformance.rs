//! One conformance suite run over both FIFOs (client-go's TestDeltaFIFO_*
//! and TestRealFIFO_* scenarios that apply to both). Each test is written
//! once, generic over [`Fifo`], and instantiated for the DeltaFifo and the
//! RealFifo by `conformance!` (modules `delta_fifo::` and `real_fifo::`).
//! Where the two differ by design (per-key coalescing vs one entry per
//! event), the test states both expectations with `F::pick(delta, real)`.
//! What only one FIFO does is tested in delta_fifo.rs / real_fifo.rs.

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use futures::FutureExt;
use kcache_core::StoreError;
use kcache_deltafifo::{Delta, DeltaFifo, DeltaType::*, PopError, RealFifo, TransformFunc};
use serde_json::Value;

/// A transform that counts its calls.
fn counting_transform() -> (TransformFunc<Value>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let t: TransformFunc<Value> = Arc::new(move |o| {
        c.fetch_add(1, Ordering::SeqCst);
        Ok(o)
    });
    (t, calls)
}

/// Two producers adding concurrently: each producer's items leave in order.
async fn basic_two_producers_order_kept<F: Fifo>() {
    let f = Arc::new(new_fifo::<F>(None));
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
        let deltas = f.pop_with(|d, _| Ok::<_, Infallible>(d)).await.unwrap();
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

fn replace_with_delete_delta_in<F: Fifo>() {
    let old = mk("foo", 1);
    let new = mk("foo", 2);
    let f = new_fifo::<F>(Some(vec![old.clone()]));
    f.delete(old.clone().into()).unwrap();
    f.replace(vec![new.clone()], "".into()).unwrap();
    assert_eq!(
        drain(&f),
        F::pick(
            vec![vec![d(Deleted, &old), d(Sync, &new)]],
            each(vec![d(Deleted, &old), d(Replaced, &new)])
        )
    );
}

/// A write in a scenario of `replace_makes_deletions_for_objects_only_in_queue`.
#[derive(Clone, Copy)]
enum Step {
    /// `add(foo=2)`
    Add,
    /// `add(foo=3)`
    AddV2,
    /// `delete(foo=2)`
    Delete,
    /// `replace([foo=2])`
    Relist,
    /// `replace([])`
    RelistEmpty,
}

fn replace_makes_deletions_for_objects_only_in_queue<F: Fifo>() {
    use Step::*;
    let obj = mk("foo", 2);
    let obj_v2 = mk("foo", 3);
    // the DeltaFifo's relist delta without / with emit_delta_type_replaced;
    // the RealFifo always emits Replaced
    let relisted = |emit: bool| F::pick(if emit { Replaced } else { Sync }, Replaced);
    /// name, emit_delta_type_replaced, the writes, the deltas popped
    type Case = (&'static str, bool, &'static [Step], Vec<Delta<Value>>);
    let table: Vec<Case> = vec![
        (
            "added object deleted on replace",
            false,
            &[Add, RelistEmpty],
            vec![d(Added, &obj), tomb("foo", &obj)],
        ),
        (
            "replaced object has a single delete",
            true,
            &[Add, Relist, RelistEmpty],
            vec![d(Added, &obj), d(relisted(true), &obj), tomb("foo", &obj)],
        ),
        (
            "deleted object has a single delete",
            false,
            &[Add, Delete, RelistEmpty],
            vec![d(Added, &obj), d(Deleted, &obj)],
        ),
        (
            "synced objects have a single delete",
            false,
            &[Add, Relist, Relist, RelistEmpty],
            vec![
                d(Added, &obj),
                d(relisted(false), &obj),
                d(relisted(false), &obj),
                tomb("foo", &obj),
            ],
        ),
        (
            "added object has a single delete on multiple replaces",
            false,
            &[Add, RelistEmpty, RelistEmpty],
            vec![d(Added, &obj), tomb("foo", &obj)],
        ),
        (
            "added, deleted and added object is deleted",
            false,
            &[Add, Delete, AddV2, RelistEmpty],
            vec![
                d(Added, &obj),
                d(Deleted, &obj),
                d(Added, &obj_v2),
                tomb("foo", &obj_v2),
            ],
        ),
    ];
    for (name, emit_replaced, steps, expected) in table {
        for known in [Some(vec![]), None] {
            let f = F::with(opts(known.clone()).emit_delta_type_replaced(emit_replaced));
            for (i, step) in steps.iter().enumerate() {
                let rv = i.to_string();
                match step {
                    Add => f.add(obj.clone()),
                    AddV2 => f.add(obj_v2.clone()),
                    Delete => f.delete(obj.clone().into()),
                    Relist => f.replace(vec![obj.clone()], rv.clone()),
                    RelistEmpty => f.replace(vec![], rv.clone()),
                }
                .unwrap();
            }
            assert_eq!(
                drain(&f),
                F::pick(vec![expected.clone()], each(expected.clone())),
                "{name} (known: {})",
                known.is_some()
            );
        }
    }
}

/// Without known objects a deletion of a key that is not queued is
/// dropped by the DeltaFifo, kept by the RealFifo.
fn enqueueing_no_lister<F: Fifo>() {
    let f = new_fifo::<F>(None);
    f.add(mk("foo", 10)).unwrap();
    f.update(mk("bar", 15)).unwrap();
    f.add(mk("qux", 17)).unwrap();
    f.delete(mk("qux", 18).into()).unwrap();
    // DeltaFifo: dropped, baz is neither queued nor known.
    f.delete(mk("baz", 20).into()).unwrap();
    assert_eq!(
        newest_vals(&drain(&f)),
        F::pick(vec!["10", "15", "18"], vec!["10", "15", "17", "18", "20"])
    );
    assert!(f.is_empty());
}

fn enqueueing_with_lister<F: Fifo>() {
    let f = new_fifo::<F>(known3());
    f.add(mk("foo", 10)).unwrap();
    f.update(mk("bar", 15)).unwrap();
    // Enqueued: baz is known.
    f.delete(mk("baz", 20).into()).unwrap();
    assert_eq!(newest_vals(&drain(&f)), ["10", "15", "20"]);
    assert!(f.is_empty());
}

fn resync<F: Fifo>() {
    let f = new_fifo::<F>(Some(vec![mk("foo", 5)]));
    f.resync().unwrap();
    assert_eq!(drain(&f), vec![vec![d(Sync, &mk("foo", 5))]]);
    // Without known objects resync does nothing.
    let f = new_fifo::<F>(None);
    f.resync().unwrap();
    assert!(f.is_empty());
}

/// A resync does not re-deliver a known key with a queued deletion
/// (client-go's ResyncNonExisting) or a queued update (UpdateResyncRace).
fn resync_skips_a_key_with_a_queued_write<F: Fifo>() {
    type Write<F> = fn(&F, Obj) -> Result<(), StoreError>;
    let writes: [(Write<F>, _); 2] = [
        (|f: &F, o: Obj| f.delete(o.into()), Deleted),
        (|f: &F, o: Obj| f.update(o), Updated),
    ];
    for (write, kind) in writes {
        let f = new_fifo::<F>(Some(vec![mk("foo", 5)]));
        write(&f, mk("foo", 10)).unwrap();
        f.resync().unwrap();
        assert_eq!(drain(&f), vec![vec![d(kind, &mk("foo", 10))]], "{kind}");
        assert!(f.is_empty());
    }
}

/// A resync skips keys with something queued and its `Sync` deltas are not
/// transformed.
fn resync_skips_queued_keys_and_is_not_transformed<F: Fifo>() {
    let (t, calls) = counting_transform();
    let f = F::with(opts(Some(vec![mk("foo", 5), mk("bar", 6)])).transformer(t));
    f.update(mk("foo", 6)).unwrap();
    f.resync().unwrap();
    assert_eq!(
        drain(&f),
        each(vec![d(Updated, &mk("foo", 6)), d(Sync, &mk("bar", 6))])
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the update was transformed"
    );
}

/// `replace([foo=5])` after some writes, with foo=5, bar=6, baz=7 known
/// (or nothing known): tombstones for what is queued or known but not
/// listed.
fn replace_makes_deletions<F: Fifo>() {
    /// what the case is, the known objects, the writes before the replace,
    /// the pops of the DeltaFifo, the events of the RealFifo
    type Case<F> = (
        &'static str,
        Option<Vec<Obj>>,
        fn(&F),
        Vec<Vec<Delta<Value>>>,
        Vec<Delta<Value>>,
    );
    let cases: Vec<Case<F>> = vec![
        (
            "a pre-existing Delete",
            known3(),
            |f| f.delete(mk("baz", 10).into()).unwrap(),
            each(vec![
                d(Deleted, &mk("baz", 10)),
                d(Sync, &mk("foo", 5)),
                tomb("bar", &mk("bar", 6)),
            ]),
            vec![
                d(Deleted, &mk("baz", 10)),
                tomb("bar", &mk("bar", 6)),
                d(Replaced, &mk("foo", 5)),
            ],
        ),
        (
            "starting with an Add instead",
            known3(),
            |f| f.add(mk("baz", 10)).unwrap(),
            vec![
                vec![d(Added, &mk("baz", 10)), tomb("baz", &mk("baz", 10))],
                vec![d(Sync, &mk("foo", 5))],
                vec![tomb("bar", &mk("bar", 6))],
            ],
            vec![
                d(Added, &mk("baz", 10)),
                tomb("baz", &mk("baz", 10)),
                tomb("bar", &mk("bar", 6)),
                d(Replaced, &mk("foo", 5)),
            ],
        ),
        (
            // the tombstone carries the newest queued object
            "deleted and recreated in the queue, then deleted by a Replace",
            known3(),
            |f| {
                f.delete(mk("bar", 6).into()).unwrap();
                f.add(mk("bar", 100)).unwrap();
            },
            vec![
                vec![
                    d(Deleted, &mk("bar", 6)),
                    d(Added, &mk("bar", 100)),
                    tomb("bar", &mk("bar", 100)),
                ],
                vec![d(Sync, &mk("foo", 5))],
                vec![tomb("baz", &mk("baz", 7))],
            ],
            vec![
                d(Deleted, &mk("bar", 6)),
                d(Added, &mk("bar", 100)),
                tomb("bar", &mk("bar", 100)),
                tomb("baz", &mk("baz", 7)),
                d(Replaced, &mk("foo", 5)),
            ],
        ),
        (
            "synced first: the delete uses the latest version",
            known3(),
            |f| {
                f.replace(vec![mk("bar", 100), mk("foo", 5)], "0".into())
                    .unwrap()
            },
            vec![
                vec![d(Sync, &mk("bar", 100)), tomb("bar", &mk("bar", 100))],
                vec![d(Sync, &mk("foo", 5)), d(Sync, &mk("foo", 5))],
                vec![tomb("baz", &mk("baz", 7))],
            ],
            vec![
                tomb("baz", &mk("baz", 7)),
                d(Replaced, &mk("bar", 100)),
                d(Replaced, &mk("foo", 5)),
                tomb("bar", &mk("bar", 100)),
                d(Replaced, &mk("foo", 5)),
            ],
        ),
    ];
    let without_known = |known: Option<Vec<Obj>>| -> Case<F> {
        (
            "without known objects (or none known)",
            known,
            |f| f.add(mk("baz", 10)).unwrap(),
            vec![
                vec![d(Added, &mk("baz", 10)), tomb("baz", &mk("baz", 10))],
                vec![d(Sync, &mk("foo", 5))],
            ],
            vec![
                d(Added, &mk("baz", 10)),
                tomb("baz", &mk("baz", 10)),
                d(Replaced, &mk("foo", 5)),
            ],
        )
    };
    let cases = cases
        .into_iter()
        .chain([without_known(None), without_known(Some(vec![]))]);
    for (name, known, writes, delta_pops, real_events) in cases {
        let f = new_fifo::<F>(known);
        writes(&f);
        f.replace(vec![mk("foo", 5)], "0".into()).unwrap();
        assert_eq!(drain(&f), F::pick(delta_pops, each(real_events)), "{name}");
        assert!(f.is_empty());
    }
}

/// The transform runs once per object, never on tombstones.
fn transformer_once_per_object_never_on_tombstones<F: Fifo>() {
    let (t, calls) = counting_transform();
    let f = F::with(opts(Some(vec![mk("gone", 1)])).transformer(t));
    f.add(mk("a", 1)).unwrap();
    f.replace(vec![mk("b", 1), mk("c", 1)], "1".into()).unwrap();
    // a: add (1) ; tombstones for a and gone: none ; b, c replaced: 2
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // DeltaFifo: keys a, b, c, gone; RealFifo: a's add and tombstone too.
    assert_eq!(f.len(), F::pick(4, 5));
}

fn transformer_error_queues_nothing<F: Fifo>() {
    let t: TransformFunc<Value> = Arc::new(|_o| Err("nope".into()));
    let f = F::with(opts(None).transformer(t));
    let e = f.add(mk("a", 1)).unwrap_err();
    assert!(matches!(&e, StoreError::Transform { key, .. } if key == "a"));
    assert!(f.is_empty());
}

/// Each item of the first list (tombstones included) is popped as
/// initial, and `has_synced` turns true after the last.
fn has_synced_correct_on_deletion<F: Fifo>() {
    let f = new_fifo::<F>(known3());
    f.replace(vec![mk("foo", 5)], "0".into()).unwrap();
    let expected = F::pick(
        [
            d(Sync, &mk("foo", 5)),
            tomb("bar", &mk("bar", 6)),
            tomb("baz", &mk("baz", 7)),
        ],
        [
            tomb("bar", &mk("bar", 6)),
            tomb("baz", &mk("baz", 7)),
            d(Replaced, &mk("foo", 5)),
        ],
    );
    for expected in expected {
        assert!(!f.has_synced());
        let (got, initial) = pop2(&f);
        assert_eq!(got, ds(vec![expected]));
        assert!(initial, "expected an initial-list item");
    }
    assert!(f.has_synced());
    f.add(mk("late", 1)).unwrap();
    assert!(!pop2(&f).1, "after sync, items are not initial");
}

fn has_synced_cases<F: Fifo>() {
    type Action<F> = fn(&F);
    let cases: Vec<(Vec<Action<F>>, bool)> = vec![
        (vec![], false),
        (vec![|f| f.add(mk("a", 1)).unwrap()], true),
        (vec![|f| f.replace(vec![], "0".into()).unwrap()], true),
        (
            vec![|f| f.replace(vec![mk("a", 1), mk("b", 2)], "0".into()).unwrap()],
            false,
        ),
        (
            vec![
                |f| f.replace(vec![mk("a", 1), mk("b", 2)], "0".into()).unwrap(),
                |f| drop(pop(f)),
            ],
            false,
        ),
        (
            vec![
                |f| f.replace(vec![mk("a", 1), mk("b", 2)], "0".into()).unwrap(),
                |f| drop(pop(f)),
                |f| drop(pop(f)),
            ],
            true,
        ),
        // Duplicate keys in a list (a broken apiserver): the DeltaFifo
        // counts keys (one pop), the RealFifo entries (two pops needed).
        (
            vec![
                |f| f.replace(vec![mk("a", 1), mk("a", 2)], "0".into()).unwrap(),
                |f| drop(pop(f)),
            ],
            F::pick(true, false),
        ),
        (vec![|f| f.delete(mk("never", 1).into()).unwrap()], true),
        (
            vec![|f| f.update(mk("a", 1)).unwrap(), |f| {
                f.replace(vec![mk("x", 1)], "0".into()).unwrap()
            }],
            true,
        ),
    ];
    for (i, (actions, want)) in cases.into_iter().enumerate() {
        for known in [None, Some(vec![])] {
            let f = new_fifo::<F>(known.clone());
            for a in &actions {
                a(&f);
            }
            assert_eq!(
                f.has_synced(),
                want,
                "case {i} (known: {})",
                known.is_some()
            );
        }
    }
}

async fn pop_should_unblock_when_closed<F: Fifo>() {
    let f = Arc::new(new_fifo::<F>(Some(vec![mk("foo", 5)])));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let f = f.clone();
            tokio::spawn(async move { f.pop_with(|_, _| Ok::<_, Infallible>(())).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for t in &tasks {
        assert!(!t.is_finished(), "pop returned before close");
    }
    f.close();
    assert!(f.is_closed());
    for t in tasks {
        let r = tokio::time::timeout(Duration::from_millis(500), t)
            .await
            .expect("pop did not return after close")
            .unwrap();
        assert!(matches!(r, Err(PopError::Closed)));
    }
}

async fn closed_but_not_empty_still_pops<F: Fifo>() {
    let f = new_fifo::<F>(None);
    f.add(mk("a", 1)).unwrap();
    f.close();
    assert_eq!(
        f.pop_with(|d, _| Ok::<_, Infallible>(d.len()))
            .await
            .unwrap(),
        1
    );
    assert!(matches!(
        f.pop_with(|_, _| Ok::<_, Infallible>(())).await,
        Err(PopError::Closed)
    ));
}

async fn pop_waits_for_an_add<F: Fifo>() {
    let f = Arc::new(new_fifo::<F>(None));
    let f2 = f.clone();
    let waiter = tokio::spawn(async move {
        f2.pop_with(|d, _| Ok::<_, Infallible>(d.newest().unwrap().object.key().to_owned()))
            .await
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!waiter.is_finished());
    f.add(mk("late", 1)).unwrap();
    assert_eq!(waiter.await.unwrap().unwrap(), "late");
}

async fn process_error_is_returned_and_item_removed<F: Fifo>() {
    let f = new_fifo::<F>(None);
    f.add(mk("a", 1)).unwrap();
    let r = f.pop_with(|_, _| Err::<(), _>("handler failed")).await;
    assert!(matches!(r, Err(PopError::Process("handler failed"))));
    assert!(f.is_empty());
}

async fn usable_as_dyn_queue_and_store<F: Fifo>() {
    let q = Arc::new(new_fifo::<F>(None)).into_dyn();
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

/// Through `dyn Queue`: writes before any list, pops, then close drains
/// what is left before `Closed`.
async fn dyn_queue<F: Fifo>() {
    let q = Arc::new(new_fifo::<F>(Some(vec![]))).into_dyn();
    let o: Obj = mk("x", 1);
    q.add(o.clone()).unwrap();
    q.update(o).unwrap();
    // one key vs two events
    assert_eq!(q.len(), F::pick(1, 2));
    q.pop(Box::new(|d, initial| {
        assert!(!initial);
        assert_eq!(d[0].kind, Added);
        Ok(())
    }))
    .await
    .unwrap();
    q.close();
    if F::KIND == Kind::Real {
        // the update is still queued
        q.pop(Box::new(|_, _| Ok(()))).await.unwrap();
    }
    assert!(matches!(
        q.pop(Box::new(|_, _| Ok(()))).await,
        Err(PopError::Closed)
    ));
}

async fn wait_synced_wakes_when_initial_list_is_popped<F: Fifo>() {
    let f = Arc::new(new_fifo::<F>(None));
    f.replace(vec![mk("a", 1), mk("b", 1)], "1".into()).unwrap();
    let f2 = f.clone();
    let waiter = tokio::spawn(async move { f2.wait_synced().await });
    pop(&*f);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished());
    pop(&*f);
    tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .unwrap()
        .unwrap();
}

/// Instantiates every test above for one FIFO type.
macro_rules! suite {
    ($fifo:ty;
     sync: $($sync:ident)*;
     tokio: $($asy:ident)*;
     multi_thread: $($mt:ident)*) => {
        $(
            #[test]
            fn $sync() {
                super::$sync::<$fifo>()
            }
        )*
        $(
            #[tokio::test]
            async fn $asy() {
                super::$asy::<$fifo>().await
            }
        )*
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $mt() {
                super::$mt::<$fifo>().await
            }
        )*
    };
}

/// The suite over both FIFOs: `delta_fifo::<test>` and `real_fifo::<test>`.
macro_rules! conformance {
    ($($tests:tt)*) => {
        mod delta_fifo {
            use super::*;
            suite!(DeltaFifo<Value>; $($tests)*);
        }
        mod real_fifo {
            use super::*;
            suite!(RealFifo<Value>; $($tests)*);
        }
    };
}

conformance! {
    sync:
        replace_with_delete_delta_in
        replace_makes_deletions_for_objects_only_in_queue
        enqueueing_no_lister
        enqueueing_with_lister
        resync
        resync_skips_a_key_with_a_queued_write
        resync_skips_queued_keys_and_is_not_transformed
        replace_makes_deletions
        transformer_once_per_object_never_on_tombstones
        transformer_error_queues_nothing
        has_synced_correct_on_deletion
        has_synced_cases;
    tokio:
        closed_but_not_empty_still_pops
        process_error_is_returned_and_item_removed
        usable_as_dyn_queue_and_store
        dyn_queue;
    multi_thread:
        basic_two_producers_order_kept
        pop_should_unblock_when_closed
        pop_waits_for_an_add
        wait_synced_wakes_when_initial_list_is_popped
}
