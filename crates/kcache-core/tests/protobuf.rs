//! Protobuf objects from the real apiserver (tests/data/protobuf, see its
//! README) decode to what their JSON decodes to; framing and envelope
//! handle real streams and reject malformed input without panicking.

use std::path::PathBuf;

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Node, PersistentVolumeClaim, Pod, Secret, Service,
};
use kcache_core::protobuf::{self, List, Status, TypeMeta, Unknown, WatchEvent, split_frame};
use kcache_core::{CachedObject, Compression, FieldPaths, Format, ObjectError, ObjectOptions};
use serde::de::DeserializeOwned;
use serde_json::Value;

fn data(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/protobuf")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Decodes `<name>.pb` and `<name>.json` every way and compares.
fn check<K>(name: &str)
where
    K: DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let pb = data(&format!("{name}.pb"));
    let json = data(&format!("{name}.json"));

    // Typed: k8s-openapi.
    let from_json: K = serde_json::from_slice(&json).unwrap();
    let envelope = Unknown::decode(&pb).unwrap();
    let from_pb: K = protobuf::decode(envelope.raw, envelope.type_meta)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(from_pb, from_json, "{name}: typed decode differs");

    // Untyped: the very JSON value (keys, nulls, omissions), not only what
    // the typed value keeps.
    let json_value: Value = serde_json::from_slice(&json).unwrap();
    let pb_value: Value = protobuf::decode(envelope.raw, envelope.type_meta).unwrap();
    assert_eq!(pb_value, json_value, "{name}: JSON value differs");
    let transcoded = protobuf::to_json(envelope.raw, envelope.type_meta).unwrap();
    let transcoded: Value = serde_json::from_slice(&transcoded).unwrap();
    assert_eq!(transcoded, json_value, "{name}: transcoded JSON differs");

    // Cached objects: same metadata and key, same typed value, same JSON.
    let j: CachedObject<K> = CachedObject::from_bytes(json.clone()).unwrap();
    let p: CachedObject<K> =
        CachedObject::from_protobuf_envelope_with(pb.clone(), &ObjectOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(p.format(), Format::Protobuf);
    assert_eq!(j.format(), Format::Json);
    assert_eq!(p.meta(), j.meta(), "{name}: metadata differs");
    assert_eq!(p.key(), j.key());
    assert_eq!(p.decode().unwrap(), from_json);
    let p_json: Value = serde_json::from_slice(&p.json().unwrap()).unwrap();
    assert_eq!(p_json, json_value);
    assert_eq!(p.to_json_bytes().unwrap(), p.json().unwrap().as_ref());
    assert!(p.json_len() < j.json_len(), "{name}: protobuf is smaller");

    // managedFields cut from protobuf bytes: same as cut from JSON.
    let strip = ObjectOptions {
        strip_managed_fields: true,
        ..ObjectOptions::default()
    };
    let js: CachedObject<Value> = CachedObject::from_bytes_with(json.clone(), &strip).unwrap();
    let ps: CachedObject<Value> =
        CachedObject::from_protobuf_envelope_with(pb.clone(), &strip).unwrap();
    assert_eq!(
        ps.decode().unwrap(),
        js.decode().unwrap(),
        "{name}: stripped"
    );
    assert_eq!(ps.meta(), js.meta());
    assert!(
        ps.decode().unwrap()["metadata"]
            .get("managedFields")
            .is_none()
    );
    let later = p.cast::<Value>().without_managed_fields().unwrap();
    assert_eq!(later.format(), Format::Protobuf);
    assert_eq!(later.decode().unwrap(), js.decode().unwrap());

    // Compressed protobuf (the dictionary learned from this object).
    let compressed = ObjectOptions {
        compression: Compression::lz4(),
        ..ObjectOptions::default()
    };
    let pc: CachedObject<K> =
        CachedObject::from_protobuf_envelope_with(pb.clone(), &compressed).unwrap();
    assert_eq!(pc.decode().unwrap(), from_json);
    assert_eq!(pc.meta(), j.meta());
}

#[test]
fn protobuf_decode_equals_json_decode() {
    check::<Pod>("pod");
    check::<Pod>("pod-minimal");
    check::<Deployment>("deployment");
    check::<Service>("service");
    check::<ConfigMap>("configmap");
    check::<ConfigMap>("configmap-deleting");
    check::<Secret>("secret");
    check::<Node>("node");
    check::<Lease>("lease");
    check::<Event>("event");
    check::<k8s_openapi::api::events::v1::Event>("event-events-k8s-io");
    check::<PersistentVolumeClaim>("pvc");
    check::<ControllerRevision>("controllerrevision");
}

#[test]
fn the_corpus_has_every_special_type() {
    // Guards the corpus itself: a regenerated corpus must still carry what
    // the decode test is meant to cover.
    let pod: Pod = serde_json::from_slice(&data("pod.json")).unwrap();
    let m = &pod.metadata;
    assert_eq!(m.managed_fields.as_ref().map(Vec::len), Some(2));
    let c = &pod.spec.as_ref().unwrap().containers[0];
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    assert!(matches!(
        c.readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .port,
        IntOrString::Int(8080)
    ));
    assert!(matches!(
        &c.liveness_probe.as_ref().unwrap().tcp_socket.as_ref().unwrap().port,
        IntOrString::String(s) if s == "http"
    ));
    assert!(pod.status.as_ref().unwrap().start_time.is_some());
    let secret: Secret = serde_json::from_slice(&data("secret.json")).unwrap();
    assert!(
        secret
            .data
            .unwrap()
            .values()
            .any(|v| std::str::from_utf8(&v.0).is_err())
    );
    let cm: ConfigMap = serde_json::from_slice(&data("configmap.json")).unwrap();
    assert!(cm.binary_data.is_some());
    let lease: Lease = serde_json::from_slice(&data("lease.json")).unwrap();
    assert!(lease.spec.unwrap().acquire_time.is_some());
    let event: Value = serde_json::from_slice(&data("event.json")).unwrap();
    assert!(event["eventTime"].is_null());
    let node: Node = serde_json::from_slice(&data("node.json")).unwrap();
    assert!(node.status.unwrap().capacity.unwrap().contains_key("cpu"));
    let cr: ControllerRevision = serde_json::from_slice(&data("controllerrevision.json")).unwrap();
    assert!(cr.data.0.is_object());
    let deleting: ConfigMap = serde_json::from_slice(&data("configmap-deleting.json")).unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
}

#[test]
fn protobuf_list_items_equal_json_list_items() {
    let pb = data("podlist.pb");
    let json: Value = serde_json::from_slice(&data("podlist.json")).unwrap();
    let envelope = Unknown::decode(&pb).unwrap();
    assert_eq!(envelope.type_meta.kind, "PodList");
    let list = List::decode(envelope.raw).unwrap();
    assert_eq!(
        Some(list.meta.resource_version),
        json["metadata"]["resourceVersion"].as_str()
    );
    assert_eq!(list.meta.continue_token, "");
    let item_type = TypeMeta {
        api_version: envelope.type_meta.api_version,
        kind: protobuf::item_kind(envelope.type_meta.kind).unwrap(),
    };
    let items: Vec<&[u8]> = list.items().collect();
    let json_items = json["items"].as_array().unwrap();
    assert_eq!(items.len(), json_items.len());
    assert_eq!(list.len(), 2);
    for (item, json_item) in items.iter().zip(json_items) {
        let from_pb: Pod = protobuf::decode(item, item_type).unwrap();
        let from_json: Pod = serde_json::from_value(json_item.clone()).unwrap();
        assert_eq!(from_pb, from_json);
        let obj: CachedObject<Pod> = CachedObject::from_protobuf_with(
            bytes::Bytes::copy_from_slice(item),
            item_type,
            &ObjectOptions::default(),
        )
        .unwrap();
        let from_json_obj: CachedObject<Pod> =
            CachedObject::from_bytes(serde_json::to_vec(json_item).unwrap()).unwrap();
        // JSON list items carry no apiVersion/kind; protobuf items get the
        // list's.
        assert_eq!(obj.meta().kind(), Some("Pod"));
        assert_eq!(obj.name(), from_json_obj.name());
        assert_eq!(obj.labels(), from_json_obj.labels());
        assert_eq!(
            obj.meta().owner_references(),
            from_json_obj.meta().owner_references()
        );
    }
}

fn frames(stream: &[u8]) -> Vec<WatchEvent<'_>> {
    let mut out = Vec::new();
    let mut rest = stream;
    while let Some((frame, used)) = split_frame(rest, 1 << 20).unwrap() {
        out.push(WatchEvent::decode(frame).unwrap());
        rest = &rest[used..];
    }
    assert!(rest.is_empty(), "a partial frame at the end");
    out
}

#[test]
fn protobuf_watch_frames_from_the_apiserver() {
    let stream = data("watch-configmaps.pb");
    let events = frames(&stream);
    let types: Vec<&str> = events.iter().map(|e| e.event_type).collect();
    assert!(types.contains(&"ADDED"), "{types:?}");
    assert!(types.contains(&"MODIFIED"), "{types:?}");
    for e in &events {
        let obj: CachedObject<ConfigMap> =
            CachedObject::from_protobuf_envelope_with(e.object.to_vec(), &ObjectOptions::default())
                .unwrap();
        assert_eq!(obj.namespace(), Some("corpus"));
        obj.decode().unwrap();
    }
    // The deleted ConfigMap's last state carries its deletionTimestamp.
    let deleting = events
        .iter()
        .map(|e| {
            CachedObject::<ConfigMap>::from_protobuf_envelope_with(
                e.object.to_vec(),
                &ObjectOptions::default(),
            )
            .unwrap()
        })
        .rfind(|o| o.name() == "deleting")
        .unwrap();
    assert!(deleting.meta().deletion_timestamp().is_some());
    assert_eq!(deleting.meta().finalizers(), ["example.com/cleanup"]);

    // Streaming list: initial ADDED events, then a BOOKMARK whose object
    // carries the initial-events-end annotation and the list's version.
    let stream = data("streaming-list-configmaps.pb");
    let events = frames(&stream);
    let last = events.last().unwrap();
    assert_eq!(last.event_type, "BOOKMARK");
    assert!(
        events[..events.len() - 1]
            .iter()
            .all(|e| e.event_type == "ADDED")
    );
    let bookmark = last.envelope().unwrap();
    assert_eq!(bookmark.type_meta.kind, "ConfigMap");
    // A bookmark's object has no name: read its metadata through the
    // typed decode.
    let cm: ConfigMap = protobuf::decode(bookmark.raw, bookmark.type_meta).unwrap();
    assert_eq!(
        cm.metadata
            .annotations
            .unwrap()
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
    assert!(cm.metadata.resource_version.is_some());
    let b = protobuf::Bookmark::decode(bookmark.raw).unwrap();
    assert!(b.initial_events_end);
    assert_eq!(
        Some(b.resource_version),
        cm.metadata.resource_version.as_deref()
    );
    // Other events are not initial-events-end bookmarks.
    let first = events[0].envelope().unwrap();
    assert!(
        !protobuf::Bookmark::decode(first.raw)
            .unwrap()
            .initial_events_end
    );
    assert!(matches!(
        CachedObject::<ConfigMap>::from_protobuf_envelope_with(
            last.object.to_vec(),
            &ObjectOptions::default()
        ),
        Err(ObjectError::MissingName)
    ));

    // ERROR: a Status 410 Expired.
    let stream = data("watch-expired.pb");
    let events = frames(&stream);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "ERROR");
    let status = Status::from_envelope(events[0].object).unwrap().unwrap();
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert!(status.message.contains("too old resource version"));

    // A Status error body.
    let status = Status::from_envelope(&data("status-not-found.pb"))
        .unwrap()
        .unwrap();
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.details.unwrap().name, "absent");
}

#[test]
fn field_paths_on_protobuf_equal_json() {
    let paths = FieldPaths::new([
        "/spec/nodeName",
        "/status/phase",
        "/status/podIP",
        "/spec/containers/0/image",
        "/spec/containers/0/ports/0/containerPort",
        "/spec/containers/0/resources/requests/cpu",
        "/spec/containers/0/readinessProbe/httpGet/port",
        "/spec/containers/0/livenessProbe/tcpSocket/port",
        "/spec/volumes/0/configMap/name",
        "/spec/enableServiceLinks",
        "/status/startTime",
        "/status/containerStatuses/0/restartCount",
        "/status/podIPs",
        "/spec/containers/0/env/1/value",
        "/spec/absent",
        "/spec/containers/7/image",
        "/metadata/labels/app",
        "/metadata/uid",
        "/kind",
    ])
    .unwrap();
    let options = ObjectOptions {
        field_paths: Some(paths.clone()),
        ..ObjectOptions::default()
    };
    let j: CachedObject<Value> = CachedObject::from_bytes_with(data("pod.json"), &options).unwrap();
    let p: CachedObject<Value> =
        CachedObject::from_protobuf_envelope_with(data("pod.pb"), &options).unwrap();
    for path in paths.paths() {
        let (a, b) = (j.field(path), p.field(path));
        // Composite values are JSON text: compare them as JSON.
        match (
            a.map(serde_json::from_str::<Value>),
            b.map(serde_json::from_str::<Value>),
        ) {
            (Some(Ok(x)), Some(Ok(y))) => assert_eq!(x, y, "{path}"),
            _ => assert_eq!(a, b, "{path}"),
        }
    }
    assert_eq!(
        p.field("/spec/volumes/0/configMap/name"),
        Some("web-config")
    );
    assert_eq!(
        p.field("/spec/containers/0/ports/0/containerPort"),
        Some("8080")
    );
    assert_eq!(p.field("/spec/enableServiceLinks"), Some("false"));
    assert_eq!(p.field("/spec/absent"), None);
}

#[test]
fn a_protobuf_pod_costs_less_memory_than_its_json() {
    for strip in [false, true] {
        let options = ObjectOptions {
            strip_managed_fields: strip,
            copy_bytes: true,
            ..ObjectOptions::default()
        };
        let j: CachedObject<Pod> =
            CachedObject::from_bytes_with(data("pod.json"), &options).unwrap();
        let p: CachedObject<Pod> =
            CachedObject::from_protobuf_envelope_with(data("pod.pb"), &options).unwrap();
        println!(
            "strip_managed_fields={strip}: JSON {} B, protobuf {} B held",
            j.heap_size(),
            p.heap_size()
        );
        assert!(p.heap_size() < j.heap_size());
        assert_eq!(p.bytes().len(), p.json_len());
    }
}

#[test]
fn unknown_kinds_and_malformed_objects_are_errors() {
    let pb = data("configmap.pb");
    let envelope = Unknown::decode(&pb).unwrap();
    let crd = TypeMeta {
        api_version: "samplecontroller.k8s.io/v1alpha1",
        kind: "Foo",
    };
    assert!(!protobuf::is_builtin_kind(crd.api_version, crd.kind));
    assert!(protobuf::is_builtin_kind("v1", "ConfigMap"));
    assert!(matches!(
        CachedObject::<Value>::from_protobuf(envelope.raw.to_vec(), crd),
        Err(ObjectError::UnknownProtobufKind { .. })
    ));
    assert!(protobuf::decode::<Value>(envelope.raw, crd).is_err());
    // An envelope whose payload says it is JSON.
    let mut json_envelope = pb[..pb.len()].to_vec();
    json_envelope.extend_from_slice(b"\x22\x10application/json");
    assert!(matches!(
        CachedObject::<Value>::from_protobuf_envelope_with(
            json_envelope,
            &ObjectOptions::default()
        ),
        Err(ObjectError::Protobuf(_))
    ));
    // JSON where protobuf is expected.
    assert!(matches!(
        CachedObject::<Value>::from_protobuf_envelope_with(
            data("configmap.json"),
            &ObjectOptions::default()
        ),
        Err(ObjectError::Protobuf(_))
    ));
}

/// Every truncation and many byte flips of real bodies: an error or a
/// (shorter) valid result, never a panic; a truncated object never decodes
/// into something the full one is not.
#[test]
fn truncated_and_corrupted_bodies_never_panic() {
    for name in [
        "pod.pb",
        "deployment.pb",
        "secret.pb",
        "podlist.pb",
        "lease.pb",
    ] {
        let body = data(name);
        let full = Unknown::decode(&body).unwrap();
        for cut in 0..body.len() {
            let part = &body[..cut];
            let Ok(u) = Unknown::decode(part) else {
                continue;
            };
            // The envelope's raw field ends before the envelope does: only
            // the trailing empty contentEncoding/contentType can be cut.
            assert_eq!(u.raw, full.raw, "{name} cut at {cut}");
        }
        // Cuts inside the object itself.
        let raw = full.raw;
        for cut in 0..raw.len() {
            let part = &raw[..cut];
            if full.type_meta.kind.ends_with("List") {
                let _ = List::decode(part);
                continue;
            }
            let obj = CachedObject::<Value>::from_protobuf(part.to_vec(), full.type_meta);
            if let Ok(obj) = obj {
                // Well-formed prefix: it decodes, or fails cleanly.
                let _ = obj.decode();
                let _ = obj.json();
            }
            let _ = protobuf::decode::<Value>(part, full.type_meta);
        }
        // Byte flips.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut bad = raw.to_vec();
            let at = (x % bad.len() as u64) as usize;
            bad[at] ^= (x >> 32) as u8 | 1;
            if let Ok(obj) = CachedObject::<Value>::from_protobuf(bad.clone(), full.type_meta) {
                let _ = obj.decode();
                let _ = obj.json();
            }
            let _ = protobuf::decode::<Pod>(&bad, full.type_meta);
            let _ = List::decode(&bad).map(|l| l.items().count());
        }
    }
    // Watch streams cut anywhere: frames complete or not yet, never a panic.
    for name in [
        "watch-configmaps.pb",
        "streaming-list-configmaps.pb",
        "watch-expired.pb",
    ] {
        let stream = data(name);
        for cut in 0..stream.len() {
            let mut rest = &stream[..cut];
            while let Ok(Some((frame, used))) = split_frame(rest, 1 << 20) {
                WatchEvent::decode(frame).unwrap();
                rest = &rest[used..];
            }
            assert!(rest.len() < stream.len() + 1);
        }
    }
}
