//! The CBOR path: data items of a CBOR sequence (a watch) cut from
//! arbitrary chunks, and objects decoded and transcoded from them.
//!
//! Properties, besides "never panics": the items come out the same
//! whatever the chunk boundaries (`item_len` on what has arrived so far
//! against the whole buffer); the JSON transcoded from an item is valid
//! JSON and equals the item's decode into `serde_json::Value` (one fails
//! exactly when the other does); an item that builds a `CachedObject` has
//! the key of its metadata, and its decode and JSON agree. The first input byte sets the chunk size.

use kcache_core::cbor;

fn check_item(item: &[u8]) {
    let decoded = cbor::decode::<serde_json::Value>(item);
    let json = cbor::to_json(item);
    match (decoded, json) {
        (Ok(value), Ok(json)) => {
            let parsed: serde_json::Value =
                serde_json::from_slice(&json).expect("transcoded JSON must parse");
            assert!(
                same(&parsed, &value),
                "transcode and decode disagree: {parsed:?} vs {value:?}"
            );
        }
        (Err(_), Err(_)) => {}
        (d, j) => panic!("decode {d:?} vs json {j:?}"),
    }
    // as a cached object: the key of its metadata, decode and JSON agree
    if let Ok(obj) = kcache_core::CachedObject::<serde_json::Value>::from_cbor(item.to_vec()) {
        let expected_key = match obj.namespace() {
            Some(ns) => format!("{ns}/{}", obj.name()),
            None => obj.name().to_owned(),
        };
        assert_eq!(obj.key(), expected_key);
        match (obj.decode(), obj.json()) {
            (Ok(value), Ok(json)) => {
                let parsed: serde_json::Value =
                    serde_json::from_slice(&json).expect("transcoded JSON must parse");
                assert!(
                    same(&parsed, &value),
                    "object transcode and decode disagree"
                );
            }
            (Err(_), Err(_)) => {}
            (d, j) => panic!("object decode {:?} vs json {:?}", d.is_ok(), j.is_ok()),
        }
        let _ = obj.without_managed_fields();
    }
}

/// Equal, floats to the last bit or two: serde_json's default float
/// parse is not correctly rounded (without its `float_roundtrip`
/// feature), so the transcoded text of a float can read back one ulp off.
fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value::{Array, Number, Object};
    match (a, b) {
        (Number(x), Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (
                x.as_f64().unwrap_or(f64::NAN),
                y.as_f64().unwrap_or(f64::NAN),
            );
            x == y || ((x - y) / x).abs() < 1e-15
        }
        (Array(x), Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
        (Object(x), Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Panics when a property of the CBOR sequence framing or decode fails.
pub fn check(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(first % 16) + 1;
    // the whole buffer, item by item
    let mut whole = Vec::new();
    let mut at = 0;
    while at < rest.len() {
        match cbor::item_len(&rest[at..]) {
            Ok(Some(n)) => {
                assert!(n > 0 && at + n <= rest.len());
                whole.push(&rest[at..at + n]);
                at += n;
            }
            Ok(None) | Err(_) => break,
        }
    }
    // the same, as it would arrive in chunks
    let mut got = Vec::new();
    let (mut start, mut end) = (0, 0);
    while end < rest.len() && got.len() < whole.len() {
        end = (end + chunk).min(rest.len());
        while let Ok(Some(n)) = cbor::item_len(&rest[start..end]) {
            got.push(&rest[start..start + n]);
            start += n;
        }
    }
    assert_eq!(got, whole, "the chunk boundaries changed the items");
    for item in whole {
        check_item(item);
    }
}
