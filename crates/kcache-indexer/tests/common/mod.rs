#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use kcache_core::CachedObject;
use serde_json::{Value, json};

pub type Obj = CachedObject<Value>;

/// An object with namespace (or none), name, labels and annotations.
pub fn obj(
    ns: Option<&str>,
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Obj {
    let mut meta = json!({"name": name});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    let l: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let a: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    meta["labels"] = Value::Object(l);
    meta["annotations"] = Value::Object(a);
    CachedObject::from_bytes(serde_json::to_vec(&json!({"metadata": meta})).unwrap()).unwrap()
}

/// client-go's testStoreObject{id, val}: name = id, annotation "val".
pub fn mk(id: &str, val: &str) -> Obj {
    obj(None, id, &[], &[("val", val)])
}

pub fn val(o: &Obj) -> String {
    o.annotations().get("val").unwrap_or_default().to_owned()
}

pub fn names(mut v: Vec<Obj>) -> Vec<String> {
    v.sort_by(|a, b| a.key().cmp(b.key()));
    v.iter().map(|o| o.name().to_string()).collect()
}

/// Stops the reader threads, waits for them, and checks that they checked
/// something.
pub fn stop_readers(stop: &AtomicBool, readers: Vec<JoinHandle<()>>, checked: &AtomicUsize) {
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(
        checked.load(Ordering::Relaxed) > 0,
        "readers checked nothing"
    );
}
