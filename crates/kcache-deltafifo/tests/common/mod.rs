#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;
use kcache_core::{CachedObject, DeletedFinalStateUnknown, KeyError, KeyFunc, KeyListerGetter};
use kcache_deltafifo::{Delta, DeltaFifo, DeltaType, Deltas, FifoOptions, PopError, RealFifo};
// the FIFOs' write and queue methods are these traits': every test file
// gets them with `use common::*`
#[allow(unused_imports)] // not every test file writes
pub use kcache_core::ReflectorStore;
#[allow(unused_imports)]
pub use kcache_deltafifo::Queue;
use serde_json::{Value, json};

pub type Obj = CachedObject<Value>;

/// client-go's mkFifoObj(name, val): name plus an annotation "val".
pub fn mk(name: &str, val: impl ToString) -> Obj {
    let v = json!({"metadata": {"name": name, "annotations": {"val": val.to_string()}}});
    CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
}

pub fn val(o: &Obj) -> String {
    o.annotations().get("val").unwrap_or_default().to_owned()
}

/// client-go's testFifoObjectKeyFunc: the name.
pub fn name_key() -> Arc<dyn KeyFunc<Value>> {
    Arc::new(|o: &Obj| -> Result<String, KeyError> { Ok(o.name().to_owned()) })
}

/// client-go's literalListerGetter.
pub struct Literal(pub Vec<Obj>);

impl KeyListerGetter<Value> for Literal {
    fn list_keys(&self) -> Vec<String> {
        self.0.iter().map(|o| o.name().to_owned()).collect()
    }
    fn get_by_key(&self, key: &str) -> Option<Obj> {
        self.0.iter().find(|o| o.name() == key).cloned()
    }
}

pub fn opts(known: Option<Vec<Obj>>) -> FifoOptions<Value> {
    let mut o = FifoOptions::new().key_function(name_key());
    if let Some(k) = known {
        o = o.known_objects(Arc::new(Literal(k)));
    }
    o
}

pub fn fifo(known: Option<Vec<Obj>>) -> DeltaFifo<Value> {
    DeltaFifo::new(opts(known))
}

pub fn real(known: Option<Vec<Obj>>) -> RealFifo<Value> {
    RealFifo::new(opts(known))
}

/// Known objects foo=5, bar=6, baz=7.
pub fn known3() -> Option<Vec<Obj>> {
    Some(vec![mk("foo", 5), mk("bar", 6), mk("baz", 7)])
}

/// Which FIFO a conformance test runs over, for the few expectations that
/// differ (per-key coalescing vs one entry per event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// client-go's DeltaFIFO: one pop per key, deltas coalesced.
    Delta,
    /// client-go's RealFIFO: one pop per event.
    Real,
}

/// What the conformance suite needs of a FIFO beyond [`Queue`] (and its
/// [`ReflectorStore`] writes): the inherent API both queues share, so a
/// test written once runs over both.
pub trait Fifo: Queue<Value> + Send + Sync + Sized + 'static {
    const KIND: Kind;
    fn with(options: FifoOptions<Value>) -> Self;
    fn pop_with<T: Send, E: Send>(
        &self,
        process: impl FnOnce(Deltas<Value>, bool) -> Result<T, E> + Send,
    ) -> impl Future<Output = Result<T, PopError<E>>> + Send;
    fn wait_synced(&self) -> impl Future<Output = ()> + Send;
    fn list_keys(&self) -> Vec<String>;
    fn into_dyn(self: Arc<Self>) -> Arc<dyn Queue<Value>>;

    /// The expectation for this FIFO: `delta` for the DeltaFifo, `real`
    /// for the RealFifo.
    fn pick<T>(delta: T, real: T) -> T {
        match Self::KIND {
            Kind::Delta => delta,
            Kind::Real => real,
        }
    }
}

macro_rules! impl_fifo {
    ($t:ident, $kind:ident) => {
        impl Fifo for $t<Value> {
            const KIND: Kind = Kind::$kind;
            fn with(options: FifoOptions<Value>) -> Self {
                $t::new(options)
            }
            fn pop_with<T: Send, E: Send>(
                &self,
                process: impl FnOnce(Deltas<Value>, bool) -> Result<T, E> + Send,
            ) -> impl Future<Output = Result<T, PopError<E>>> + Send {
                $t::pop(self, process)
            }
            fn wait_synced(&self) -> impl Future<Output = ()> + Send {
                $t::wait_synced(self)
            }
            fn list_keys(&self) -> Vec<String> {
                $t::list_keys(self)
            }
            fn into_dyn(self: Arc<Self>) -> Arc<dyn Queue<Value>> {
                self
            }
        }
    };
}

impl_fifo!(DeltaFifo, Delta);
impl_fifo!(RealFifo, Real);

/// A FIFO of type `F` keyed by name, with these known objects.
pub fn new_fifo<F: Fifo>(known: Option<Vec<Obj>>) -> F {
    F::with(opts(known))
}

/// Pops an item that must already be queued.
pub fn pop<F: Fifo>(f: &F) -> Deltas<Value> {
    pop2(f).0
}

/// Pops an item that must already be queued, with its is_in_initial_list flag.
pub fn pop2<F: Fifo>(f: &F) -> (Deltas<Value>, bool) {
    f.pop_with(|d, initial| Ok::<_, Infallible>((d, initial)))
        .now_or_never()
        .expect("an item should be queued")
        .unwrap()
}

/// Pops an item if one is queued.
pub fn try_pop<F: Fifo>(f: &F) -> Option<Deltas<Value>> {
    f.pop_with(|d, _| Ok::<_, Infallible>(d))
        .now_or_never()
        .map(|r| r.unwrap())
}

/// Pops everything queued, one `Vec` per pop. A RealFifo pop carries one
/// event; a DeltaFifo pop the deltas of one key.
pub fn drain<F: Fifo>(f: &F) -> Vec<Vec<Delta<Value>>> {
    let mut out = Vec::new();
    while !f.is_empty() {
        let deltas = pop(f);
        match F::KIND {
            Kind::Real => assert_eq!(deltas.len(), 1, "RealFifo pops one event at a time"),
            Kind::Delta => {
                let keys: Vec<String> = deltas
                    .iter()
                    .map(|d| d.object.object().name().to_owned())
                    .collect();
                assert!(
                    keys.windows(2).all(|w| w[0] == w[1]),
                    "one key a pop: {keys:?}"
                );
            }
        }
        out.push(deltas.into_vec());
    }
    out
}

/// Each delta popped on its own (what a RealFifo delivers).
pub fn each(v: Vec<Delta<Value>>) -> Vec<Vec<Delta<Value>>> {
    v.into_iter().map(|d| vec![d]).collect()
}

pub fn d(kind: DeltaType, o: &Obj) -> Delta<Value> {
    Delta::new(kind, o.clone())
}

pub fn tomb(key: &str, o: &Obj) -> Delta<Value> {
    Delta::new(
        DeltaType::Deleted,
        DeletedFinalStateUnknown {
            key: key.to_owned(),
            obj: o.clone(),
        },
    )
}

pub fn ds(v: Vec<Delta<Value>>) -> Deltas<Value> {
    Deltas::from(v)
}

/// The newest object's "val" of each pop.
pub fn newest_vals(pops: &[Vec<Delta<Value>>]) -> Vec<String> {
    pops.iter()
        .map(|p| val(p.last().unwrap().object.object()))
        .collect()
}
