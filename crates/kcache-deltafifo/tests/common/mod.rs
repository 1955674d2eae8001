#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::Arc;

use futures::FutureExt;
use kcache_core::{CachedObject, DeletedFinalStateUnknown, KeyError, KeyFunc, KeyListerGetter};
use kcache_deltafifo::{Delta, DeltaFifo, DeltaType, Deltas, FifoOptions, RealFifo};
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

/// Pops an item that must already be queued.
pub fn pop(f: &DeltaFifo<Value>) -> Deltas<Value> {
    pop2(f).0
}

/// Pops an item that must already be queued, with its is_in_initial_list flag.
pub fn pop2(f: &DeltaFifo<Value>) -> (Deltas<Value>, bool) {
    f.pop(|d, initial| Ok::<_, Infallible>((d, initial)))
        .now_or_never()
        .expect("an item should be queued")
        .unwrap()
}

pub fn try_pop(f: &DeltaFifo<Value>) -> Option<Deltas<Value>> {
    f.pop(|d, _| Ok::<_, Infallible>(d))
        .now_or_never()
        .map(|r| r.unwrap())
}

pub fn rpop(f: &RealFifo<Value>) -> Deltas<Value> {
    rpop2(f).0
}

pub fn rpop2(f: &RealFifo<Value>) -> (Deltas<Value>, bool) {
    f.pop(|d, initial| Ok::<_, Infallible>((d, initial)))
        .now_or_never()
        .expect("an item should be queued")
        .unwrap()
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
