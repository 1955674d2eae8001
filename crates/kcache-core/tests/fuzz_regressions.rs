//! Inputs found by `cargo xtask fuzz`, kept as regression tests.

use kcache_core::{CachedObject, ObjectError, ObjectOptions};

/// watch_frame / keys: a byte that is not UTF-8 inside a string the
/// metadata decode skips (`data.k`) was accepted, so the cache held bytes
/// that are not JSON and only a later typed decode failed.
#[test]
fn invalid_utf8_outside_metadata_is_rejected() {
    let mut bytes = br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b","namespace":"default","resourceVersion":"8"},"data":{"k":"X"}}"#.to_vec();
    let x = bytes.iter().position(|b| *b == b'X').unwrap();
    bytes[x] = 0x88;
    assert!(serde_json::from_slice::<serde_json::Value>(&bytes).is_err());
    for options in [
        ObjectOptions::default(),
        ObjectOptions {
            strip_managed_fields: true,
            ..ObjectOptions::default()
        },
        ObjectOptions {
            copy_bytes: true,
            ..ObjectOptions::default()
        },
    ] {
        match CachedObject::<()>::from_bytes_with(bytes.clone(), &options) {
            Err(ObjectError::Json(e)) => assert!(e.to_string().contains("UTF-8"), "{e}"),
            other => panic!("accepted invalid UTF-8: {other:?}"),
        }
    }
    // The same object with valid UTF-8 (here a multi-byte character) is fine.
    bytes[x] = b'X';
    let ok = String::from_utf8(bytes).unwrap().replace('X', "é");
    let obj = CachedObject::<()>::from_bytes(ok.into_bytes()).unwrap();
    assert_eq!(obj.key(), "default/b");
}
