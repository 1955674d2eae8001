//! The reflector's CBOR list decode (`application/cbor` list bodies, as a
//! custom-resource LIST answers with `CBORServingAndStorage` on), with the
//! plain decoder (no kind check) and a strict one (kind `Widget`,
//! apiVersion `example.com/v1`, managedFields cut); and the same bytes as
//! one CBOR watch event.
//!
//! - It never panics, on any bytes.
//! - The page read in chunks, as the reflector reads a body while it
//!   arrives, equals the page of the whole body (the same items with the
//!   same keys and bytes, the same skipped count, resourceVersion and
//!   continue token), or both fail.
//! - Every kept item is one well-formed CBOR data item that builds a
//!   cached object on its own, with the key of its own metadata; no item
//!   naming another kind is kept by the strict decoder.
//! - An accepted page agrees with a full decode of the body into
//!   `serde_json::Value` when that succeeds (with `metadata` a map): as many items (kept plus
//!   skipped) as its `items` array, the page's resourceVersion and
//!   continue token are the body's (`""` and none when absent or empty).
//!
//! The first input byte sets the chunk size (1..=64).

use bytes::Bytes;
use kcache_core::{CachedObject, ObjectOptions, cbor};
use kcache_reflector::{EventDecoder, ListPage};
use serde_json::Value;

use crate::preview;

fn decoders() -> [EventDecoder<Value>; 2] {
    [
        EventDecoder::new(ObjectOptions::default(), None, None),
        EventDecoder::new(
            ObjectOptions {
                strip_managed_fields: true,
                ..ObjectOptions::default()
            },
            Some("Widget"),
            Some("example.com/v1"),
        ),
    ]
}

fn check_items(page: &ListPage<Value>, strict: bool, data: &[u8]) {
    for item in &page.items {
        let bytes = item.bytes();
        assert_eq!(
            cbor::item_len(bytes).ok().flatten(),
            Some(bytes.len()),
            "a kept item is not one CBOR data item: {}",
            preview(data)
        );
        let expected = match item.namespace() {
            Some(ns) => format!("{ns}/{}", item.name()),
            None => item.name().to_owned(),
        };
        assert_eq!(item.key(), expected, "key of {}", preview(data));
        if strict {
            // list items may omit kind (the apiserver does for built-in
            // types); one that names a kind names the expected one
            let kind = item.meta().kind();
            assert!(
                matches!(kind, None | Some("Widget")),
                "{kind:?}: {}",
                preview(data)
            );
        } else {
            // the plain decoder keeps exactly what builds on its own
            let alone = CachedObject::<Value>::from_cbor(bytes.to_vec());
            assert!(alone.is_ok(), "kept item does not build alone");
        }
    }
}

/// What a full decode of the body says, when it reads as a list.
fn reference(data: &[u8]) -> Option<(usize, String, Option<String>)> {
    let value: Value = cbor::decode(data).ok()?;
    let map = value.as_object()?;
    let items = match map.get("items") {
        Some(Value::Array(a)) => a.len(),
        None | Some(Value::Null) => 0,
        Some(_) => return None,
    };
    let meta = match map.get("metadata") {
        // (an array reads as a struct's fields in order, as serde reads
        // one: no reference for that)
        Some(m @ Value::Object(_)) => Some(m),
        None | Some(Value::Null) => None,
        Some(_) => return None,
    };
    let text = |k: &str| -> Option<Option<String>> {
        match meta.and_then(|m| m.get(k)) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => Some(Some(s.clone())),
            Some(_) => None,
        }
    };
    let rv = text("resourceVersion")?.unwrap_or_default();
    let cont = text("continue")?.filter(|c| !c.is_empty());
    Some((items, rv, cont))
}

/// Panics when a property of the CBOR list decode fails.
pub fn check(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(first % 64) + 1;
    let body = Bytes::copy_from_slice(rest);
    for (i, decoder) in decoders().iter().enumerate() {
        let whole = decoder.decode_cbor_list_chunks([body.clone()]);
        let parts = body.chunks(chunk).map(Bytes::copy_from_slice);
        let chunked = decoder.decode_cbor_list_chunks(parts);
        match (&whole, &chunked) {
            (Ok(w), Ok(c)) => assert_eq!(
                w.same_content(),
                c.same_content(),
                "chunks of {chunk} changed the page of {}",
                preview(rest)
            ),
            (Err(_), Err(_)) => {}
            (w, c) => panic!(
                "whole {:?} vs chunks of {chunk} {:?}: {}",
                w.as_ref().map(|p| p.items.len()),
                c.as_ref().map(|p| p.items.len()),
                preview(rest)
            ),
        }
        if let Ok(page) = &whole {
            check_items(page, i == 1, rest);
            if let Some((n, rv, cont)) = reference(rest) {
                assert_eq!(
                    page.items.len() + page.skipped.len(),
                    n,
                    "item count of {}",
                    preview(rest)
                );
                assert_eq!(page.resource_version, rv, "rv of {}", preview(rest));
                assert_eq!(page.continue_token, cont, "continue of {}", preview(rest));
            }
        }
        // the same bytes as one watch event: no panic, and an object
        // event carries the key of its metadata
        if let Ok(
            kcache_reflector::WatchEvent::Added(o)
            | kcache_reflector::WatchEvent::Modified(o)
            | kcache_reflector::WatchEvent::Deleted(o),
        ) = decoder.decode_cbor_watch_event(body.clone())
        {
            let expected = match o.namespace() {
                Some(ns) => format!("{ns}/{}", o.name()),
                None => o.name().to_owned(),
            };
            assert_eq!(o.key(), expected);
        }
    }
}
