//! Opt-in LZ4 compression of the stored JSON with a shared dictionary.

mod common;

use k8s_openapi::api::core::v1::Pod;
use kcache_core::{CachedObject, Compression, CompressionDictionary, FieldPaths, ObjectOptions};
use serde_json::Value;

fn compressed() -> ObjectOptions {
    ObjectOptions {
        strip_managed_fields: true,
        compression: Compression::lz4(),
        ..ObjectOptions::default()
    }
}

fn plain() -> ObjectOptions {
    ObjectOptions {
        strip_managed_fields: true,
        ..ObjectOptions::default()
    }
}

#[test]
fn round_trip_decode_metadata_and_fields_match_uncompressed() {
    let paths =
        FieldPaths::new(["/spec/nodeName", "/status/phase", "/metadata/labels/app"]).unwrap();
    let copts = ObjectOptions {
        field_paths: Some(paths.clone()),
        ..compressed()
    };
    let popts = ObjectOptions {
        field_paths: Some(paths),
        ..plain()
    };
    for i in 0..50 {
        let bytes = common::pod::varied_pod(i);
        let c: CachedObject<Pod> = CachedObject::from_bytes_with(bytes.clone(), &copts).unwrap();
        let p: CachedObject<Pod> = CachedObject::from_bytes_with(bytes.clone(), &popts).unwrap();
        assert!(c.is_compressed(), "pod {i} stays compressed");
        assert!(!p.is_compressed());
        assert_eq!(c.json().unwrap().as_ref(), p.bytes().as_ref());
        assert_eq!(c.to_json_bytes().unwrap(), p.bytes());
        assert_eq!(c.json_len(), p.bytes().len());
        assert_eq!(c.decode().unwrap(), p.decode().unwrap());
        assert_eq!(c.key(), p.key());
        assert_eq!(c.meta(), p.meta());
        for f in 0..3 {
            assert_eq!(c.field_at(f), p.field_at(f));
        }
        assert_eq!(
            c.field("/spec/nodeName"),
            Some(&*format!("worker-node-{:03}", i % 100))
        );
        let full: Pod = serde_json::from_slice(&bytes).unwrap();
        let mut expected = full.clone();
        expected.metadata.managed_fields = None;
        assert_eq!(c.decode().unwrap(), expected);
    }
}

#[test]
fn heap_size_shrinks_by_a_clear_margin() {
    let copts = compressed();
    let n = 200;
    let (mut json, mut raw, mut c_heap, mut p_heap, mut stored) = (0, 0, 0, 0, 0);
    for i in 0..n {
        let bytes = common::pod::varied_pod(i);
        raw += bytes.len();
        let c: CachedObject<Pod> = CachedObject::from_bytes_with(bytes.clone(), &copts).unwrap();
        let p: CachedObject<Pod> = CachedObject::from_bytes_with(bytes, &plain()).unwrap();
        json += c.json_len();
        stored += c.bytes().len();
        c_heap += c.heap_size();
        p_heap += p.heap_size();
    }
    let dict = copts.compression.dictionary().unwrap().len();
    let ratio = c_heap as f64 / p_heap as f64;
    println!(
        "over {n} varied Pods: received JSON {} B, stored JSON (managedFields cut) {} B, \
         compressed {} B ({:.3}x); heap_size plain {} B, compressed {} B ({ratio:.3}x, \
         {:.3}x the stored JSON); shared dictionary {dict} B once",
        raw / n,
        json / n,
        stored / n,
        stored as f64 / json as f64,
        p_heap / n,
        c_heap / n,
        c_heap as f64 / json as f64,
    );
    assert!(stored * 3 < json, "compressed to under a third of the JSON");
    assert!(ratio < 0.6, "heap_size ratio {ratio:.3}");

    // The same template with little per-Pod variation (the benchmark's Pods).
    let copts = compressed();
    let (mut json, mut stored) = (0, 0);
    for i in 0..n {
        let c: CachedObject<Pod> =
            CachedObject::from_bytes_with(common::pod::realistic_pod(i, "ns"), &copts).unwrap();
        json += c.json_len();
        stored += c.bytes().len();
    }
    println!(
        "over {n} template Pods: stored JSON {} B, compressed {} B ({:.3}x)",
        json / n,
        stored / n,
        stored as f64 / json as f64
    );
}

#[test]
fn equality_across_compressed_and_plain() {
    let copts = compressed();
    let other = compressed();
    let a = common::pod::varied_pod(1);
    let b = common::pod::varied_pod(2);
    let build = |bytes: &Vec<u8>, o: &ObjectOptions| -> CachedObject<Value> {
        CachedObject::from_bytes_with(bytes.clone(), o).unwrap()
    };
    // Seed both dictionaries with different objects.
    let _ = build(&common::pod::varied_pod(100), &copts);
    let _ = build(&common::pod::varied_pod(200), &other);
    let ca = build(&a, &copts);
    let ca2 = build(&a, &copts);
    let cb = build(&b, &copts);
    let pa = build(&a, &plain());
    let oa = build(&a, &other);
    assert!(!ca.ptr_eq(&ca2));
    assert_eq!(ca, ca2, "same dictionary: compared compressed");
    assert_eq!(ca.bytes(), ca2.bytes(), "the compressor is deterministic");
    assert_ne!(ca, cb);
    assert_eq!(ca, pa, "compressed vs plain");
    assert_eq!(pa, ca);
    assert_ne!(cb, pa);
    assert!(!ca.dictionary().unwrap().ptr_eq(oa.dictionary().unwrap()));
    assert_eq!(ca, oa, "different dictionaries: compared as JSON");
    assert_ne!(cb, oa);
}

#[test]
fn dictionary_learned_once_and_shared() {
    let copts = compressed();
    assert!(copts.compression.is_enabled());
    assert!(copts.compression.dictionary().is_none(), "not learned yet");
    let first: CachedObject<Pod> =
        CachedObject::from_bytes_with(common::pod::varied_pod(0), &copts).unwrap();
    let dict = copts.compression.dictionary().unwrap().clone();
    // Learned from the first object's JSON after the managedFields cut.
    assert_eq!(dict.as_bytes(), first.json().unwrap().as_ref());
    let clone = copts.clone();
    let objs: Vec<CachedObject<Pod>> = (1..20)
        .map(|i| {
            CachedObject::from_bytes_with(
                common::pod::varied_pod(i),
                if i % 2 == 0 { &copts } else { &clone },
            )
            .unwrap()
        })
        .collect();
    for o in std::iter::once(&first).chain(&objs) {
        assert!(o.dictionary().unwrap().ptr_eq(&dict));
    }
    assert!(clone.compression.dictionary().unwrap().ptr_eq(&dict));
    // A fresh setting learns its own.
    let fresh = compressed();
    let o: CachedObject<Pod> =
        CachedObject::from_bytes_with(common::pod::varied_pod(5), &fresh).unwrap();
    assert!(!o.dictionary().unwrap().ptr_eq(&dict));
    // A dictionary given up front is used as is.
    let given = ObjectOptions {
        compression: Compression::lz4_with_dictionary(dict.clone()),
        ..ObjectOptions::default()
    };
    let o: CachedObject<Pod> =
        CachedObject::from_bytes_with(common::pod::varied_pod(6), &given).unwrap();
    assert!(o.dictionary().unwrap().ptr_eq(&dict));
    // Large samples are capped to the LZ4 window.
    assert_eq!(
        CompressionDictionary::new(vec![b' '; 1 << 20]).len(),
        CompressionDictionary::MAX_LEN
    );
}

#[test]
fn strip_managed_fields_then_compress() {
    let bytes = common::pod::varied_pod(3);
    assert!(String::from_utf8_lossy(&bytes).contains("managedFields"));
    let c: CachedObject<Value> =
        CachedObject::from_bytes_with(bytes.clone(), &compressed()).unwrap();
    let json = c.json().unwrap();
    assert!(!String::from_utf8_lossy(&json).contains("managedFields"));
    let mut expected: Value = serde_json::from_slice(&bytes).unwrap();
    expected["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    assert_eq!(c.decode().unwrap(), expected);

    // Compressed without the cut, then cut afterwards: same dictionary, same JSON.
    let keep = ObjectOptions {
        compression: Compression::lz4(),
        ..ObjectOptions::default()
    };
    let full: CachedObject<Value> = CachedObject::from_bytes_with(bytes, &keep).unwrap();
    assert!(full.is_compressed());
    assert!(String::from_utf8_lossy(&full.json().unwrap()).contains("managedFields"));
    let cut = full.without_managed_fields().unwrap();
    assert!(cut.is_compressed());
    assert!(cut.dictionary().unwrap().ptr_eq(full.dictionary().unwrap()));
    assert_eq!(cut.json().unwrap(), json);
    assert_eq!(cut, c);
    // Nothing left to cut: the same object back.
    assert!(cut.without_managed_fields().unwrap().ptr_eq(&cut));
}

#[test]
fn tiny_objects_stay_plain() {
    let copts = ObjectOptions {
        copy_bytes: true,
        ..compressed()
    };
    let tiny = br#"{"metadata":{"name":"a","namespace":"b"}}"#;
    let o: CachedObject<Value> = CachedObject::from_bytes_with(&tiny[..], &copts).unwrap();
    assert!(!o.is_compressed());
    assert!(o.dictionary().is_none());
    assert_eq!(o.bytes().as_ref(), &tiny[..]);
    assert_eq!(o.json().unwrap().as_ref(), &tiny[..]);
    assert_eq!(o.key(), "b/a");
    // A small object with little redundancy, and no dictionary match, stays plain too.
    let copts = ObjectOptions {
        compression: Compression::lz4_with_dictionary(CompressionDictionary::new(
            b"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
        )),
        ..ObjectOptions::default()
    };
    let small = br#"{"metadata":{"name":"q7","namespace":"x1","uid":"0f8e2d4c-6b1a-4937-8c25-e3d0a9b7f146"}}"#;
    let o: CachedObject<Value> = CachedObject::from_bytes_with(&small[..], &copts).unwrap();
    assert!(!o.is_compressed());
    assert_eq!(o.decode().unwrap()["metadata"]["name"], "q7");
}

#[test]
fn decode_inside_decode_uses_its_own_buffer() {
    // A Deserialize impl that decodes another compressed object while the
    // outer decode still holds the per-thread scratch buffer.
    use std::cell::RefCell;
    thread_local! {
        static INNER: RefCell<Option<CachedObject<Value>>> = const { RefCell::new(None) };
    }
    struct Nested(Value, Value);
    impl<'de> serde::Deserialize<'de> for Nested {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let outer = Value::deserialize(d)?;
            let inner = INNER
                .with(|i| i.borrow().as_ref().map(|o| o.decode()))
                .transpose()
                .map_err(serde::de::Error::custom)?
                .unwrap_or(Value::Null);
            Ok(Nested(outer, inner))
        }
    }
    let copts = compressed();
    let a: CachedObject<Nested> =
        CachedObject::from_bytes_with(common::pod::varied_pod(1), &copts).unwrap();
    let b: CachedObject<Value> =
        CachedObject::from_bytes_with(common::pod::varied_pod(2), &copts).unwrap();
    assert!(a.is_compressed() && b.is_compressed());
    INNER.with(|i| *i.borrow_mut() = Some(b.clone()));
    let Nested(outer, inner) = a.decode().unwrap();
    assert_eq!(outer["metadata"]["name"], a.name());
    assert_eq!(inner["metadata"]["name"], b.name());
}

#[test]
fn mutated_input_never_panics_and_round_trips() {
    // Byte flips, truncations and duplications of a real Pod: whatever is
    // accepted must decompress to exactly what the plain build keeps.
    let base = common::pod::varied_pod(9);
    let copts = compressed();
    let _seed: CachedObject<Value> = CachedObject::from_bytes_with(base.clone(), &copts).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let (mut accepted, mut compressed_count) = (0, 0);
    for round in 0..2_000 {
        let mut bytes = base.clone();
        match round % 3 {
            0 => {
                let i = rand(bytes.len());
                bytes[i] = b" {}[],:\"0a\\"[rand(11)];
            }
            1 => bytes.truncate(rand(bytes.len())),
            _ => {
                let (a, b) = (rand(bytes.len()), rand(bytes.len()));
                let (a, b) = (a.min(b), a.max(b));
                let chunk = bytes[a..b].to_vec();
                bytes.splice(a..a, chunk);
            }
        }
        let c = CachedObject::<Value>::from_bytes_with(bytes.clone(), &copts);
        let p = CachedObject::<Value>::from_bytes_with(bytes, &plain());
        match (c, p) {
            (Ok(c), Ok(p)) => {
                accepted += 1;
                compressed_count += usize::from(c.is_compressed());
                assert_eq!(c.json().unwrap().as_ref(), p.bytes().as_ref());
                assert_eq!(c, p);
                assert_eq!(c.meta(), p.meta());
                assert_eq!(c.decode().ok(), p.decode().ok());
            }
            (Err(_), Err(_)) => {}
            (c, p) => panic!("compressed {:?} vs plain {:?}", c.err(), p.err()),
        }
    }
    assert!(
        accepted > 100 && compressed_count > 100,
        "{accepted} accepted, {compressed_count} compressed"
    );
}
