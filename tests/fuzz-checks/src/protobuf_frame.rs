//! The protobuf path: length-delimited watch frames cut from arbitrary
//! chunks, `WatchEvent`s, `k8s\0` + `runtime.Unknown` envelopes, list
//! bodies, `Status`, and objects built and decoded from them.
//!
//! Properties, besides "never panics": frames come out the same whatever
//! the chunk boundaries; an object that builds has the key of its metadata;
//! the JSON transcoded from an object is valid JSON and equals the object's
//! decode into `serde_json::Value` (one fails exactly when the other does).
//! The first input byte picks the mode: even, a watch stream (the rest of
//! the byte sets the chunk size); odd, one body (envelope).

use kcache_core::protobuf::{List, Status, TypeMeta, Unknown, WatchEvent, item_kind, split_frame};
use kcache_core::{CachedObject, ObjectOptions};

const MAX_FRAME: usize = 1 << 16;

fn check_object(obj: &CachedObject<serde_json::Value>) {
    let expected_key = match obj.namespace() {
        Some(ns) => format!("{ns}/{}", obj.name()),
        None => obj.name().to_owned(),
    };
    assert_eq!(obj.key(), expected_key);
    let decoded = obj.decode();
    let json = obj.json();
    match (decoded, json) {
        (Ok(value), Ok(json)) => {
            let parsed: serde_json::Value =
                serde_json::from_slice(&json).expect("transcoded JSON must parse");
            assert_eq!(parsed, value, "transcode and decode disagree");
        }
        // Both see the same bytes: one fails only if the other does.
        (Err(_), Err(_)) => {}
        (d, j) => panic!("decode {:?} vs json {:?}", d.is_ok(), j.is_ok()),
    }
}

fn envelope(body: &[u8]) {
    let Ok(u) = Unknown::decode(body) else {
        return;
    };
    if u.type_meta.kind == "Status" {
        let _ = Status::decode(u.raw);
        return;
    }
    if let Some(kind) = item_kind(u.type_meta.kind) {
        if let Ok(list) = List::decode(u.raw) {
            assert_eq!(list.items().count(), list.len());
            let tm = TypeMeta {
                api_version: u.type_meta.api_version,
                kind,
            };
            for item in list.items() {
                if let Ok(obj) = CachedObject::from_protobuf(item.to_vec(), tm) {
                    check_object(&obj);
                }
            }
        }
        return;
    }
    let options = ObjectOptions::new().strip_managed_fields(true);
    if let Ok(obj) = CachedObject::from_protobuf_envelope_with(body.to_vec(), &options) {
        check_object(&obj);
    }
    if let Ok(obj) = CachedObject::from_protobuf_envelope_with(body.to_vec(), &ObjectOptions::new())
    {
        check_object(&obj);
        if let Ok(cut) = obj.without_managed_fields() {
            check_object(&cut);
        }
    }
}

fn frames(stream: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for piece in stream.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match split_frame(&buf, MAX_FRAME) {
                Ok(Some((frame, used))) => {
                    out.push(frame.to_vec());
                    buf.drain(..used);
                }
                Ok(None) => break,
                Err(_) => return out,
            }
        }
    }
    out
}

/// Checks one input (see the module docs).
pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        let whole = frames(rest, rest.len());
        let chunked = frames(rest, usize::from(mode >> 1) + 1);
        assert_eq!(whole, chunked, "framing depends on chunk boundaries");
        for frame in &whole {
            if let Ok(event) = WatchEvent::decode(frame) {
                envelope(event.object);
            }
        }
    } else {
        envelope(rest);
    }
}
