//! Key functions and the metadata decode.
//!
//! - `split_meta_namespace_key` never panics and splits losslessly.
//! - `CachedObject::from_bytes` accepts only JSON that serde_json accepts,
//!   reads the same name/namespace/resourceVersion, and
//!   `meta_namespace_key` is `namespace/name` (or `name`).
//! - `without_managed_fields` gives the same JSON minus
//!   `metadata.managedFields`, with the same key.
#![no_main]

use kcache_core::{CachedObject, meta_namespace_key, split_meta_namespace_key};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn check_split(key: &str) {
    match split_meta_namespace_key(key) {
        Ok((ns, name)) => {
            if key.contains('/') {
                assert_eq!(format!("{ns}/{name}"), key);
            } else {
                assert_eq!((ns, name), ("", key));
            }
        }
        Err(_) => assert!(key.matches('/').count() > 1, "{key:?} rejected"),
    }
}

/// A metadata string as serde_json reads it; kcache reads an empty
/// namespace or resourceVersion as absent (a cluster-scoped object).
fn str_at<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get("metadata")?
        .get(field)?
        .as_str()
        .filter(|s| !s.is_empty())
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        check_split(s);
    }
    let Ok(obj) = CachedObject::<()>::from_bytes(data.to_vec()) else {
        return;
    };
    let value: Value = match serde_json::from_slice(data) {
        Ok(v) => v,
        Err(e) => panic!("from_bytes accepted what serde_json rejects ({e})"),
    };
    assert_eq!(Some(obj.name()), str_at(&value, "name"));
    assert_eq!(non_empty(obj.namespace()), str_at(&value, "namespace"));
    assert_eq!(
        non_empty(obj.resource_version()),
        str_at(&value, "resourceVersion")
    );
    let key = meta_namespace_key(&obj).expect("a cached object always has a key");
    match obj.namespace() {
        Some(ns) if !ns.is_empty() => assert_eq!(key, format!("{ns}/{}", obj.name())),
        _ => assert_eq!(key, obj.name()),
    }
    check_split(&key);

    let Ok(stripped) = obj.without_managed_fields() else {
        return;
    };
    assert_eq!(stripped.key(), obj.key());
    let got: Value = serde_json::from_slice(stripped.bytes()).expect("stripped bytes are JSON");
    let mut want = value;
    if let Some(meta) = want.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    assert_eq!(
        got, want,
        "without_managed_fields changed more than managedFields"
    );
});
