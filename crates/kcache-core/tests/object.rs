//! Cached-object construction, managedFields stripping, field paths, keys.

mod common;

use std::error::Error as _;

use k8s_openapi::api::core::v1::Pod;
use kcache_core::{
    CachedObject, DeletedFinalStateUnknown, FieldPaths, KeyError, KeyFunc, ObjectError,
    ObjectOptions, ObjectOrTombstone, deletion_handling_key, deletion_handling_meta_namespace_key,
    meta_namespace_key, split_meta_namespace_key,
};
use serde_json::Value;

fn strip() -> ObjectOptions {
    ObjectOptions {
        strip_managed_fields: true,
        ..ObjectOptions::default()
    }
}

#[test]
fn metadata_is_extracted_once() {
    let bytes = common::pod::realistic_pod(42, "shop");
    assert!(
        bytes.len() > 7_000 && bytes.len() < 10_000,
        "pod is {} bytes",
        bytes.len()
    );
    let obj: CachedObject<Pod> = CachedObject::from_bytes(bytes.clone()).unwrap();
    let full: Pod = serde_json::from_slice(&bytes).unwrap();
    let m = &full.metadata;
    assert_eq!(obj.key(), format!("shop/{}", m.name.as_deref().unwrap()));
    assert_eq!(obj.name(), m.name.as_deref().unwrap());
    assert_eq!(obj.namespace(), m.namespace.as_deref());
    assert_eq!(obj.uid(), m.uid.as_deref());
    assert_eq!(obj.resource_version(), m.resource_version.as_deref());
    assert_eq!(obj.labels(), m.labels.as_ref().unwrap());
    assert_eq!(obj.annotations(), m.annotations.as_ref().unwrap());
    assert_eq!(obj.meta().api_version(), Some("v1"));
    assert_eq!(obj.meta().kind(), Some("Pod"));
    let owners = m.owner_references.as_ref().unwrap();
    assert_eq!(obj.meta().owner_references().len(), owners.len());
    assert_eq!(obj.meta().owner_references()[0].uid, owners[0].uid);
    assert_eq!(obj.meta().controller_ref().unwrap().kind, "ReplicaSet");
    assert_eq!(obj.meta().deletion_timestamp(), None);
    // Unstripped bytes are kept as given, zero-copy.
    assert_eq!(obj.bytes().as_ref(), &bytes[..]);
    assert_eq!(obj.decode().unwrap(), full);
}

#[test]
fn all_metadata_fields() {
    let json = br#"{"metadata":{"name":"n","namespace":"ns","uid":"u","resourceVersion":"7",
        "generation":3,"finalizers":["a/b","c"],"deletionTimestamp":"2026-01-01T00:00:00Z",
        "labels":{"k":"v"},"annotations":{"x":"{\"quoted\":true}"}}}"#;
    let obj: CachedObject<Value> = CachedObject::from_bytes(&json[..]).unwrap();
    let m = obj.meta();
    assert_eq!(m.generation(), Some(3));
    assert_eq!(m.finalizers(), ["a/b", "c"]);
    assert_eq!(m.deletion_timestamp(), Some("2026-01-01T00:00:00Z"));
    assert_eq!(
        &obj.annotations()["x"],
        r#"{"quoted":true}"#,
        "escaped strings are unescaped"
    );
    assert_eq!(obj.uid(), Some("u"));
}

#[test]
fn cluster_scoped_and_escaped_names() {
    let o: CachedObject<Value> =
        CachedObject::from_bytes(&br#"{"metadata":{"name":"node-1","namespace":""}}"#[..]).unwrap();
    assert_eq!(o.key(), "node-1");
    assert_eq!(o.namespace(), None);
    let o: CachedObject<Value> =
        CachedObject::from_bytes(&br#"{"metadata":{"name":"a\u0062c","namespace":"n\"s"}}"#[..])
            .unwrap();
    assert_eq!(o.key(), "n\"s/abc");
}

#[test]
fn malformed_input_is_a_typed_error() {
    let cases: &[&[u8]] = &[
        b"",
        b"{",
        b"[]",
        b"null",
        b"42",
        b"{\"metadata\":{\"name\":\"a\"}} trailing",
        b"{\"metadata\":{\"name\":5}}",
        b"{\"metadata\":{\"name\":\"a\",\"labels\":[\"x\"]}}",
        b"{\"metadata\":{\"name\":\"a\",\"generation\":\"x\"}}",
        b"{\"metadata\":{\"name\":\"a\"},\"metadata\":{\"name\":\"b\"}}",
        b"{\"metadata\":{\"name\":\"\xff\"}}",
        b"{\"metadata\":[1,2]}",
    ];
    for c in cases {
        let r = CachedObject::<Value>::from_bytes(c.to_vec());
        assert!(
            matches!(r, Err(ObjectError::Json(_))),
            "{:?} -> {r:?}",
            String::from_utf8_lossy(c)
        );
    }
    for c in [
        &b"{}"[..],
        b"{\"metadata\":{}}",
        b"{\"metadata\":{\"name\":\"\"}}",
        b"{\"metadata\":null}",
    ] {
        let r = CachedObject::<Value>::from_bytes(c.to_vec());
        assert!(matches!(r, Err(ObjectError::MissingName)), "{r:?}");
    }
    // Random garbage never panics.
    let mut seed = 0x9e3779b97f4a7c15u64;
    let pod = common::pod::realistic_pod(1, "x");
    for _ in 0..2000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut b = pod.clone();
        let at = (seed as usize) % b.len();
        b[at] = (seed >> 32) as u8;
        b.truncate(b.len() - (seed as usize >> 40) % 64);
        let _ = CachedObject::<Value>::from_bytes_with(b, &strip());
    }
}

#[test]
fn decode_error_is_typed() {
    let o: CachedObject<Pod> =
        CachedObject::from_bytes(&br#"{"metadata":{"name":"a"},"spec":{"containers":7}}"#[..])
            .unwrap();
    let e = o.decode().unwrap_err();
    assert_eq!(e.key, "a");
    assert!(e.to_string().contains("Pod"));
}

fn without_managed(v: &Value) -> Value {
    let mut v = v.clone();
    v["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    v
}

#[test]
fn strip_managed_fields_matches_full_decode() {
    for i in 0..20 {
        let bytes = common::pod::realistic_pod(i, "ns");
        let original: Value = serde_json::from_slice(&bytes).unwrap();
        let obj: CachedObject<Pod> =
            CachedObject::from_bytes_with(bytes.clone(), &strip()).unwrap();
        assert!(obj.bytes().len() < bytes.len() - 1000);
        let stripped: Value = serde_json::from_slice(obj.bytes()).unwrap();
        assert_eq!(stripped, without_managed(&original));
        let pod = obj.decode().unwrap();
        assert!(pod.metadata.managed_fields.is_none());
        let mut full: Pod = serde_json::from_slice(&bytes).unwrap();
        full.metadata.managed_fields = None;
        assert_eq!(pod, full);
    }
}

#[test]
fn strip_in_every_position_and_layout() {
    let mf = r#"[{"manager":"m","fieldsV1":{"f:a":{}}}]"#;
    let docs = [
        format!(r#"{{"metadata":{{"managedFields":{mf},"name":"a"}}}}"#),
        format!(r#"{{"metadata":{{"name":"a","managedFields":{mf}}}}}"#),
        format!(r#"{{"metadata":{{"name":"a","managedFields":{mf},"uid":"u"}}}}"#),
        format!(
            "{{\n  \"metadata\" : {{\n    \"name\" : \"a\" ,\n    \"managedFields\" :\n {mf}\n  }}\n}}"
        ),
        format!("{{\"metadata\":{{ \"managedFields\" : {mf} , \"name\":\"a\"}}}}"),
        // escaped key: handled by the fallback full decode
        format!(r#"{{"metadata":{{"name":"a","managed\u0046ields":{mf}}}}}"#),
        // a managedFields key elsewhere is not touched
        format!(
            r#"{{"spec":{{"managedFields":1}},"metadata":{{"name":"a","managedFields":{mf}}}}}"#
        ),
        r#"{"metadata":{"name":"a","managedFields":null}}"#.to_string(),
        r#"{"metadata":{"name":"a","managedFields":[]}}"#.to_string(),
    ];
    for d in &docs {
        let original: Value = serde_json::from_str(d).unwrap();
        let obj: CachedObject<Value> = CachedObject::from_bytes_with(d.clone(), &strip()).unwrap();
        let got: Value = serde_json::from_slice(obj.bytes())
            .unwrap_or_else(|e| panic!("invalid JSON after strip of {d}: {e}"));
        assert_eq!(got, without_managed(&original), "{d}");
        assert_eq!(obj.key(), "a");
    }
    // Nothing to strip: bytes kept as-is.
    let d = r#"{"metadata":{"name":"a"}}"#;
    let obj: CachedObject<Value> = CachedObject::from_bytes_with(d, &strip()).unwrap();
    assert_eq!(obj.bytes().as_ref(), d.as_bytes());
    // without_managed_fields() on an existing object.
    let full: CachedObject<Value> = CachedObject::from_bytes(docs[1].clone()).unwrap();
    let cut = full.without_managed_fields().unwrap();
    assert!(
        serde_json::from_slice::<Value>(cut.bytes()).unwrap()["metadata"]
            .get("managedFields")
            .is_none()
    );
    assert!(!cut.ptr_eq(&full));
    let same = cut.without_managed_fields().unwrap();
    assert!(same.ptr_eq(&cut));
}

#[test]
fn field_paths_are_extracted_in_the_same_pass() {
    let paths = FieldPaths::new([
        "/spec/nodeName",
        "/status/phase",
        "/spec/containers/0/image",
        "/spec/priority",
        "/spec/enableServiceLinks",
        "/spec/missing",
        "/status/conditions/1/type",
        "/metadata/labels/tier",
        "/metadata/namespace",
        "/kind",
        "/spec/securityContext",
        "/status/conditions/0/lastProbeTime",
    ])
    .unwrap();
    let opts = ObjectOptions {
        field_paths: Some(paths),
        strip_managed_fields: true,
        ..ObjectOptions::default()
    };
    let obj: CachedObject<Pod> =
        CachedObject::from_bytes_with(common::pod::realistic_pod(7, "ns"), &opts).unwrap();
    assert_eq!(obj.field("/spec/nodeName"), Some("worker-node-007"));
    assert_eq!(obj.field("/status/phase"), Some("Running"));
    assert_eq!(
        obj.field("/spec/containers/0/image"),
        Some("registry.example.com/shop/web-frontend:v2.14.3")
    );
    assert_eq!(obj.field("/spec/priority"), Some("0"));
    assert_eq!(obj.field("/spec/enableServiceLinks"), Some("true"));
    assert_eq!(obj.field("/spec/missing"), None);
    assert_eq!(obj.field("/status/conditions/1/type"), Some("Ready"));
    assert_eq!(obj.field("/metadata/labels/tier"), Some("frontend"));
    assert_eq!(obj.field("/metadata/namespace"), Some("ns"));
    assert_eq!(obj.field("/kind"), Some("Pod"));
    assert_eq!(obj.field("/spec/securityContext"), Some("{}"));
    assert_eq!(
        obj.field("/status/conditions/0/lastProbeTime"),
        None,
        "null is None"
    );
    assert_eq!(obj.field("/not/declared"), None);
    assert_eq!(obj.field_at(0), Some("worker-node-007"));
}

#[test]
fn nested_and_overlapping_field_paths() {
    let paths = FieldPaths::new(["/spec", "/spec/a/b", "/x~1y", "/m~0n"]).unwrap();
    let opts = ObjectOptions {
        field_paths: Some(paths),
        ..ObjectOptions::default()
    };
    let obj: CachedObject<Value> = CachedObject::from_bytes_with(
        r#"{"metadata":{"name":"a"},"spec":{"a":{"b":"c\"d"}},"x/y":1,"m~n":"t"}"#,
        &opts,
    )
    .unwrap();
    assert_eq!(obj.field("/spec"), Some(r#"{"a":{"b":"c\"d"}}"#));
    assert_eq!(obj.field("/spec/a/b"), Some("c\"d"));
    assert_eq!(obj.field("/x~1y"), Some("1"));
    assert_eq!(obj.field("/m~0n"), Some("t"));
}

#[test]
fn invalid_field_paths() {
    for p in ["spec/nodeName", "/", "/a~2"] {
        assert!(
            matches!(
                FieldPaths::new([p]),
                Err(ObjectError::InvalidFieldPath { .. })
            ),
            "{p}"
        );
    }
}

#[test]
fn from_object_roundtrip_and_cast() {
    let mut pod = Pod::default();
    pod.metadata.name = Some("p".into());
    pod.metadata.namespace = Some("ns".into());
    let obj = CachedObject::from_object(&pod).unwrap();
    assert_eq!(obj.key(), "ns/p");
    assert_eq!(obj.decode().unwrap(), pod);
    let dynamic: CachedObject<Value> = obj.cast();
    assert!(dynamic.ptr_eq(&obj.cast()));
    assert_eq!(dynamic.decode().unwrap()["metadata"]["name"], "p");
    assert!(matches!(
        CachedObject::from_object(&Pod::default()),
        Err(ObjectError::MissingName)
    ));
}

fn is_send_sync_clone<T: Send + Sync + Clone>() {}

#[test]
fn cached_object_is_send_sync_for_any_k() {
    struct NotSync(#[allow(dead_code)] std::cell::Cell<u8>);
    is_send_sync_clone::<CachedObject<NotSync>>();
    is_send_sync_clone::<ObjectOrTombstone<NotSync>>();
    is_send_sync_clone::<DeletedFinalStateUnknown<NotSync>>();
    is_send_sync_clone::<CachedObject<Pod>>();
    assert_eq!(
        std::mem::size_of::<CachedObject<Pod>>(),
        std::mem::size_of::<usize>()
    );
}

fn obj(key_ns: Option<&str>, name: &str) -> CachedObject<Value> {
    let v = match key_ns {
        Some(ns) => serde_json::json!({"metadata": {"name": name, "namespace": ns}}),
        None => serde_json::json!({"metadata": {"name": name}}),
    };
    CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
}

#[test]
fn key_functions() {
    assert_eq!(meta_namespace_key(&obj(Some("ns"), "a")).unwrap(), "ns/a");
    assert_eq!(meta_namespace_key(&obj(None, "a")).unwrap(), "a");
    let t = ObjectOrTombstone::Tombstone(DeletedFinalStateUnknown {
        key: "recorded/key".into(),
        obj: obj(Some("ns"), "a"),
    });
    assert_eq!(
        deletion_handling_meta_namespace_key(&t).unwrap(),
        "recorded/key"
    );
    let o: ObjectOrTombstone<Value> = obj(Some("ns"), "b").into();
    assert_eq!(deletion_handling_meta_namespace_key(&o).unwrap(), "ns/b");
    let custom =
        |o: &CachedObject<Value>| -> Result<String, KeyError> { Ok(o.name().to_uppercase()) };
    assert_eq!(deletion_handling_key(&custom, &o).unwrap(), "B");
    assert_eq!(deletion_handling_key(&custom, &t).unwrap(), "recorded/key");
    assert_eq!(custom.key(&obj(None, "x")).unwrap(), "X");
}

#[test]
fn split_keys() {
    assert_eq!(split_meta_namespace_key("ns/name").unwrap(), ("ns", "name"));
    assert_eq!(split_meta_namespace_key("name").unwrap(), ("", "name"));
    assert_eq!(split_meta_namespace_key("").unwrap(), ("", ""));
    assert_eq!(split_meta_namespace_key("/name").unwrap(), ("", "name"));
    let e = split_meta_namespace_key("a/b/c").unwrap_err();
    assert!(matches!(&e, KeyError::UnexpectedFormat { key } if key == "a/b/c"));
    assert_eq!(e.to_string(), "unexpected key format: \"a/b/c\"");
}

/// client-go TestKeyError: the wrapped error is reachable.
#[test]
fn key_error_wraps_its_cause() {
    #[derive(Debug, thiserror::Error)]
    #[error("inner failure")]
    struct Inner;
    let o = obj(Some("ns"), "a");
    let e = KeyError::for_object(&o, Inner);
    let src = e.source().expect("source");
    assert!(src.downcast_ref::<Inner>().is_some());
    // The cause is printed once in a chain: by the source, not the message.
    assert!(e.to_string().contains("ns/a") && !e.to_string().contains("inner failure"));
    let chain = kcache_core::ErrorChain(&e).to_string();
    assert!(
        chain.contains("ns/a") && chain.contains("inner failure"),
        "{chain}"
    );
    let nested = kcache_core::StoreError::from(e);
    assert!(
        nested.source().unwrap().downcast_ref::<Inner>().is_some()
            || nested.to_string().contains("inner failure")
    );
}

#[test]
fn labels_map_semantics() {
    let o: CachedObject<Value> = CachedObject::from_bytes(
        &br#"{"metadata":{"name":"a","labels":{"b":"2","a":"1","b":"3"},"annotations":null}}"#[..],
    )
    .unwrap();
    // Sorted, last duplicate wins (as a full decode into a map would give).
    assert_eq!(
        o.labels().iter().collect::<Vec<_>>(),
        [("a", "1"), ("b", "3")]
    );
    assert!(o.annotations().is_empty());
    let full: std::collections::BTreeMap<String, String> = serde_json::from_value(
        serde_json::from_slice::<Value>(o.bytes()).unwrap()["metadata"]["labels"].clone(),
    )
    .unwrap();
    assert_eq!(o.labels(), &full);
    assert_eq!(o.labels().to_btree_map(), full);
    assert!(o.labels().contains_key("a") && !o.labels().contains_key("c"));
}

#[test]
fn copy_bytes_detaches_from_a_larger_buffer() {
    let list =
        bytes::Bytes::from_static(br#"[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]"#);
    let item = list.slice(1..26);
    let kept: CachedObject<Value> = CachedObject::from_bytes(item.clone()).unwrap();
    assert_eq!(kept.bytes().as_ptr(), item.as_ptr(), "zero-copy by default");
    let copied: CachedObject<Value> = CachedObject::from_bytes_with(
        item.clone(),
        &ObjectOptions {
            copy_bytes: true,
            ..ObjectOptions::default()
        },
    )
    .unwrap();
    assert_ne!(copied.bytes().as_ptr(), item.as_ptr());
    assert_eq!(copied.bytes(), &item);
    assert_eq!(copied.key(), "a");
}
