//! Key functions and the metadata decode.
//!
//! - `split_meta_namespace_key` never panics and splits losslessly.
//! - `CachedObject::from_bytes` accepts only JSON text
//!   ([`json_text`](crate::json_text)), reads the same
//!   name/namespace/resourceVersion as serde_json's `Value`, and
//!   `meta_namespace_key` is `namespace/name` (or `name`).
//! - `without_managed_fields` gives JSON text, the same as serde_json's
//!   `Value` minus `metadata.managedFields`, with the same key.

use kcache_core::{CachedObject, meta_namespace_key, split_meta_namespace_key};
use serde_json::Value;

use crate::json_text;

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

/// The target's check: panics when a property does not hold.
pub fn check(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        check_split(s);
    }
    let Ok(obj) = CachedObject::<()>::from_bytes(data.to_vec()) else {
        return;
    };
    if let Err(e) = json_text(data) {
        panic!("from_bytes accepted what is not JSON ({e})");
    }
    // serde_json's Value also refuses lone surrogate escapes, which
    // RFC 8259 allows (see `json_text`): compare with it where it reads
    let value = serde_json::from_slice::<Value>(data).ok();
    if let Some(value) = &value {
        assert_eq!(Some(obj.name()), str_at(value, "name"));
        assert_eq!(non_empty(obj.namespace()), str_at(value, "namespace"));
        assert_eq!(
            non_empty(obj.resource_version()),
            str_at(value, "resourceVersion")
        );
    }
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
    if let Err(e) = json_text(stripped.bytes()) {
        panic!("stripped bytes are not JSON ({e})");
    }
    let Some(mut want) = value else {
        return;
    };
    let got: Value = serde_json::from_slice(stripped.bytes())
        .expect("serde_json reads the stripped bytes as it reads the original");
    if let Some(meta) = want.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    assert_eq!(
        got, want,
        "without_managed_fields changed more than managedFields"
    );
}
