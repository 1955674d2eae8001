//! The protobuf path: length-delimited watch frames cut from arbitrary
//! chunks, `WatchEvent`s, `k8s\0` + `runtime.Unknown` envelopes, list
//! bodies, `Status`, and objects built and decoded from them.
//!
//! Properties, besides "never panics": frames come out the same whatever
//! the chunk boundaries, from `split_frame` and from the reflector's
//! `ProtobufFramer`; a list body read chunk by chunk by `ListReader`
//! gives the items and metadata of the whole-body decode, and it accepts
//! only what the whole-body decode accepts (refusing in addition only
//! what a reader that hands items out early must: a repeated `typeMeta`
//! or `raw`, a kind that is not a list); an object that builds has the key
//! of its metadata;
//! the JSON transcoded from an object is valid JSON and equals the object's
//! decode into `serde_json::Value` (one fails exactly when the other does).
//! The first input byte picks the mode: even, a watch stream (the rest of
//! the byte sets the chunk size); odd, one body (envelope).

use bytes::Bytes;
use kcache_core::protobuf::{
    List, ListReader, Status, TypeMeta, Unknown, WatchEvent, WireError, item_kind, split_frame,
};
use kcache_core::{CachedObject, ObjectOptions};
use kcache_reflector::ProtobufFramer;

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
    let options = ObjectOptions {
        strip_managed_fields: true,
        ..ObjectOptions::default()
    };
    if let Ok(obj) = CachedObject::from_protobuf_envelope_with(body.to_vec(), &options) {
        check_object(&obj);
    }
    if let Ok(obj) =
        CachedObject::from_protobuf_envelope_with(body.to_vec(), &ObjectOptions::default())
    {
        check_object(&obj);
        if let Ok(cut) = obj.without_managed_fields() {
            check_object(&cut);
        }
    }
}

/// Reads `body` with a [`ListReader`] in chunks of `chunk` bytes.
fn read_list(body: &[u8], chunk: usize) -> Result<(Vec<Vec<u8>>, String, String), WireError> {
    let mut r = ListReader::new();
    let mut items = Vec::new();
    for piece in body.chunks(chunk.max(1)) {
        r.push(Bytes::copy_from_slice(piece));
        while let Some(item) = r.next_item()? {
            assert!(r.item_type().is_some(), "an item before its type");
            items.push(item.bytes.to_vec());
        }
    }
    let s = r.finish()?;
    assert_eq!(s.items, items.len());
    Ok((items, s.kind, s.resource_version))
}

/// The chunked list reader agrees with the whole-body decode.
fn list_reader_agrees(body: &[u8], chunk: usize) {
    let whole = Unknown::decode(body).and_then(|u| Ok((u, List::decode(u.raw)?)));
    for size in [chunk, body.len()] {
        match (&whole, read_list(body, size)) {
            (Ok((u, l)), Ok((items, kind, rv))) => {
                let want: Vec<Vec<u8>> = l.items().map(<[u8]>::to_vec).collect();
                assert_eq!(items, want, "items read in chunks of {size}");
                assert_eq!(kind, u.type_meta.kind);
                assert_eq!(rv, l.meta.resource_version);
            }
            (Err(e), Ok(_)) => panic!(
                "the list reader accepted a body the whole-body decode refuses ({e}): {}",
                crate::preview(body)
            ),
            (Ok(_), Err(e)) => assert!(
                matches!(
                    e,
                    WireError::Duplicate {
                        message: "Unknown",
                        ..
                    } | WireError::Invalid {
                        message: "Unknown",
                        ..
                    }
                ),
                "the list reader refused a body the whole-body decode accepts: {e}: {}",
                crate::preview(body)
            ),
            (Err(_), Err(_)) => {}
        }
    }
}

/// The reflector's framer over `stream` in chunks of `chunk` bytes (until
/// its first error).
fn framer_frames(stream: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let mut f = ProtobufFramer::with_max_frame(MAX_FRAME);
    let mut out = Vec::new();
    for piece in stream.chunks(chunk.max(1)) {
        f.push(Bytes::copy_from_slice(piece));
        loop {
            match f.next_frame() {
                Ok(Some(frame)) => out.push(frame.to_vec()),
                Ok(None) => break,
                Err(_) => return out,
            }
        }
    }
    out
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
        let framed = framer_frames(rest, usize::from(mode >> 1) + 1);
        assert_eq!(framed, whole, "ProtobufFramer disagrees with split_frame");
        for frame in &whole {
            if let Ok(event) = WatchEvent::decode(frame) {
                envelope(event.object);
            }
        }
    } else {
        envelope(rest);
        list_reader_agrees(rest, usize::from(mode >> 1) + 1);
    }
}
