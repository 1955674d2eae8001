//! `CachedObject::compressed_with`: the compressed twin of a plain object
//! (what an informer's background compression swaps into its cache), for
//! JSON and protobuf objects, and the process-wide decompression counter.

mod common;

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use kcache_core::{
    CachedObject, Compression, CompressionDictionary, FieldPaths, Format, ObjectOptions,
    decompressions,
};
use serde_json::Value;

fn data(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/protobuf")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn paths() -> FieldPaths {
    FieldPaths::new([
        "/spec/nodeName",
        "/status/phase",
        "/metadata/labels/app",
        "/spec/containers/0/image",
    ])
    .unwrap()
}

/// Everything a reader can see of `a` and `b` is the same.
fn assert_same_view(a: &CachedObject<Pod>, b: &CachedObject<Pod>) {
    assert_eq!(a.key(), b.key());
    assert_eq!(a.meta(), b.meta());
    assert_eq!(a.format(), b.format());
    assert_eq!(a.json_len(), b.json_len());
    for i in 0..4 {
        assert_eq!(a.field_at(i), b.field_at(i), "field {i}");
    }
    assert_eq!(a.encoded().unwrap(), b.encoded().unwrap());
    assert_eq!(a.json().unwrap(), b.json().unwrap());
    assert_eq!(a.to_json_bytes().unwrap(), b.to_json_bytes().unwrap());
    assert_eq!(a.decode().unwrap(), b.decode().unwrap());
    let (va, vb): (Value, Value) = (a.cast().decode().unwrap(), b.cast().decode().unwrap());
    assert_eq!(va, vb);
    assert_eq!(a, b);
    assert_eq!(b, a);
}

#[test]
fn json_twins_read_the_same_and_are_smaller() {
    let options = ObjectOptions {
        strip_managed_fields: true,
        field_paths: Some(paths()),
        ..ObjectOptions::default()
    };
    let pods: Vec<CachedObject<Pod>> = (0..50)
        .map(|i| CachedObject::from_bytes_with(common::pod::varied_pod(i), &options).unwrap())
        .collect();
    let dict = CompressionDictionary::new(pods[0].encoded().unwrap());
    let (mut plain, mut twin_heap) = (0, 0);
    for p in &pods {
        let twin = p.compressed_with(&dict).expect("a Pod shrinks");
        assert!(twin.is_compressed() && !p.is_compressed());
        assert!(!twin.ptr_eq(p));
        assert!(twin.dictionary().unwrap().ptr_eq(&dict));
        assert_same_view(p, &twin);
        assert!(twin.compressed_with(&dict).is_none(), "compressed already");
        plain += p.heap_size();
        twin_heap += twin.heap_size();
    }
    println!(
        "50 varied Pods (managedFields cut): heap_size plain {} B, twin {} B ({:.3}x)",
        plain / 50,
        twin_heap / 50,
        twin_heap as f64 / plain as f64
    );
    assert!(twin_heap * 2 < plain, "{twin_heap} vs {plain}");
    // The twin equals an object compressed on the ingest path with the
    // same dictionary, compared without decompressing.
    let ingest = ObjectOptions {
        strip_managed_fields: true,
        compression: Compression::lz4_with_dictionary(dict.clone()),
        ..ObjectOptions::default()
    };
    let built: CachedObject<Pod> =
        CachedObject::from_bytes_with(common::pod::varied_pod(7), &ingest).unwrap();
    let twin = pods[7].compressed_with(&dict).unwrap();
    assert_eq!(built, twin);
    assert_eq!(built.bytes(), twin.bytes(), "the very same block");
}

#[test]
fn protobuf_twins_stay_protobuf_and_read_the_same() {
    let options = ObjectOptions {
        field_paths: Some(paths()),
        ..ObjectOptions::default()
    };
    for strip in [false, true] {
        let options = ObjectOptions {
            strip_managed_fields: strip,
            ..options.clone()
        };
        let p: CachedObject<Pod> =
            CachedObject::from_protobuf_envelope_with(data("pod.pb"), &options).unwrap();
        assert_eq!(p.format(), Format::Protobuf);
        let dict = CompressionDictionary::new(p.encoded().unwrap());
        let twin = p.compressed_with(&dict).expect("a protobuf Pod shrinks");
        assert_eq!(twin.format(), Format::Protobuf);
        assert!(twin.is_compressed());
        assert!(twin.bytes().len() < p.bytes().len());
        assert_same_view(&p, &twin);
        assert_eq!(
            twin.field("/spec/containers/0/image"),
            p.field("/spec/containers/0/image")
        );
        // its managedFields cut still works on the compressed twin
        let a = p.without_managed_fields().unwrap();
        let b = twin.without_managed_fields().unwrap();
        assert_eq!(a.encoded().unwrap(), b.encoded().unwrap());
    }
    // A JSON dictionary serves a protobuf object too (less well).
    let json: CachedObject<Pod> = CachedObject::from_bytes(data("pod.json")).unwrap();
    let jdict = CompressionDictionary::new(json.encoded().unwrap());
    let p: CachedObject<Pod> =
        CachedObject::from_protobuf_envelope_with(data("pod.pb"), &ObjectOptions::default())
            .unwrap();
    if let Some(twin) = p.compressed_with(&jdict) {
        assert_same_view(&p, &twin);
    }
}

#[test]
fn nothing_to_gain_gives_no_twin() {
    let tiny: CachedObject<Value> =
        CachedObject::from_bytes(&br#"{"metadata":{"name":"a"}}"#[..]).unwrap();
    let dict = CompressionDictionary::new(br#"{"metadata":{"name":"b"}}"#);
    assert!(tiny.compressed_with(&dict).is_none(), "under 64 bytes");
    // Incompressible: random data in a field.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let noise: String = (0..2048)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'!' + (x >> 58) as u8)
        })
        .filter(|c| *c != '"' && *c != '\\')
        .collect();
    let noisy: CachedObject<Value> = CachedObject::from_bytes(format!(
        r#"{{"metadata":{{"name":"n"}},"data":{{"x":"{noise}"}}}}"#
    ))
    .unwrap();
    assert!(noisy.compressed_with(&dict).is_none());
}

#[test]
fn decompressions_are_counted() {
    let p: CachedObject<Pod> = CachedObject::from_bytes(common::pod::varied_pod(3)).unwrap();
    let dict = CompressionDictionary::new(p.encoded().unwrap());
    let twin = p.compressed_with(&dict).unwrap();
    let before = decompressions();
    p.decode().unwrap();
    let _ = p.json().unwrap();
    let _ = twin.key();
    let _ = twin.meta().labels();
    twin.decode().unwrap();
    let _ = twin.json().unwrap();
    let _ = twin.encoded().unwrap();
    let after = decompressions();
    // plain reads and metadata count nothing; each of the three reads of
    // the twin counts one (other tests may add more meanwhile)
    assert!(after - before >= 3, "{before} -> {after}");
}
