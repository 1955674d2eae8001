//! The reflector's list decode (`EventDecoder::decode_list`), with the
//! plain decoder (no kind check) and a strict one (kind `ConfigMap`,
//! apiVersion `v1`, managedFields cut).
//!
//! - It never panics, on any bytes.
//! - The page read in chunks, as the reflector reads a body while it
//!   arrives, equals the page of the whole body.
//! - It accepts a page exactly when serde_json does: a syntax error
//!   anywhere (envelope or item, invalid UTF-8 included) fails the whole
//!   page, and a body serde_json reads as a list (`metadata` with string
//!   `resourceVersion` and `continue`, `items` an array or null) is
//!   accepted. (A lone surrogate escape, which RFC 8259 leaves to the
//!   reader, may go either way: see [`json_text`](crate::json_text).)
//! - An accepted page agrees with serde_json: as many items (kept plus
//!   skipped) as the `items` array has; the kept ones are, in order, the
//!   elements that decode on their own as objects, with the same key,
//!   resourceVersion and bytes, and serde_json's `metadata.name`; the
//!   page's resourceVersion and continue token are serde_json's
//!   (`""` and none when absent, no continue token when empty).

use bytes::Bytes;
use kcache_core::{CachedObject, ObjectOptions};
use kcache_reflector::{EventDecoder, ListPage};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::{json_text, preview};

/// A list as serde_json reads it (only what the reflector uses).
#[derive(Deserialize)]
struct RefList<'a> {
    #[serde(default)]
    metadata: Option<RefMeta>,
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct RefMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

fn decoders() -> [EventDecoder<Value>; 2] {
    [
        EventDecoder::new(ObjectOptions::default(), None, None),
        EventDecoder::new(
            ObjectOptions {
                strip_managed_fields: true,
                ..ObjectOptions::default()
            },
            Some("ConfigMap"),
            Some("v1"),
        ),
    ]
}

fn compare(
    decoder: &EventDecoder<Value>,
    page: &ListPage<Value>,
    list: &RefList<'_>,
    value: &Value,
    data: &[u8],
) {
    let meta = list.metadata.as_ref();
    assert_eq!(
        page.resource_version,
        meta.and_then(|m| m.resource_version.clone())
            .unwrap_or_default(),
        "resourceVersion of {}",
        preview(data)
    );
    assert_eq!(
        page.continue_token,
        meta.and_then(|m| m.continue_token.clone())
            .filter(|c| !c.is_empty()),
        "continue token of {}",
        preview(data)
    );
    let raw = list.items.as_deref().unwrap_or_default();
    assert_eq!(
        page.items.len() + page.skipped.len(),
        raw.len(),
        "kept + skipped is not the item count of {}",
        preview(data)
    );
    // each element decoded on its own
    let want: Vec<(usize, CachedObject<Value>)> = raw
        .iter()
        .enumerate()
        .filter_map(|(i, item)| {
            let bytes = Bytes::copy_from_slice(item.get().as_bytes());
            decoder.decode_object(bytes).ok().map(|o| (i, o))
        })
        .collect();
    assert_eq!(
        page.items.len(),
        want.len(),
        "kept items differ from the elements that decode alone in {}",
        preview(data)
    );
    for (got, (i, want)) in page.items.iter().zip(&want) {
        assert_eq!(got.key(), want.key(), "item {i} of {}", preview(data));
        assert_eq!(got.resource_version(), want.resource_version());
        assert_eq!(got.bytes(), want.bytes(), "item {i} of {}", preview(data));
        let name = value
            .get("items")
            .and_then(|items| items.get(i))
            .and_then(|item| item.pointer("/metadata/name"))
            .and_then(Value::as_str);
        assert_eq!(
            Some(got.name()),
            name,
            "item {i}'s name is not serde_json's in {}",
            preview(data)
        );
    }
}

/// The page read in chunks (as the reflector reads a body while it
/// arrives; the chunk size from the input) equals the page of the whole
/// body: both fail, or the same items, skipped count and metadata.
fn chunked_equals_whole(
    decoder: &EventDecoder<Value>,
    whole: &Result<ListPage<Value>, serde_json::Error>,
    data: &[u8],
) {
    let size = 1 + data.iter().fold(0usize, |h, b| {
        h.wrapping_mul(31).wrapping_add(usize::from(*b))
    }) % 64;
    let chunks: Vec<Bytes> = data.chunks(size).map(Bytes::copy_from_slice).collect();
    let chunked = decoder.decode_list_chunks(chunks);
    match (whole, &chunked) {
        (Ok(a), Ok(b)) => assert!(
            a.same_content() == b.same_content(),
            "the page read in chunks of {size} differs: {a:?} vs {b:?}: {}",
            preview(data)
        ),
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "whole body {}, in chunks of {size} {}: {}",
            if a.is_ok() { "accepted" } else { "refused" },
            if b.is_ok() { "accepted" } else { "refused" },
            preview(data)
        ),
    }
}

/// The target's check: panics when a property does not hold.
pub fn check(data: &[u8]) {
    let body = Bytes::copy_from_slice(data);
    let list = serde_json::from_slice::<RefList<'_>>(data);
    let text = json_text(data);
    // strict: serde_json's Value also refuses lone surrogate escapes
    // (see `json_text`); a page that has one may go either way
    let value = serde_json::from_slice::<Value>(data);
    for decoder in &decoders() {
        let page = decoder.decode_list(&body);
        match (&page, &list, &text) {
            (Ok(page), Err(e), _) => panic!(
                "accepted a page ({page:?}) that serde_json does not read as a list ({e}): {}",
                preview(data)
            ),
            (Ok(page), _, Err(e)) => panic!(
                "accepted a page ({page:?}) that is not JSON ({e}): {}",
                preview(data)
            ),
            _ => {}
        }
        chunked_equals_whole(decoder, &page, data);
        match (&page, &list, &value) {
            (Ok(page), Ok(list), Ok(value)) => compare(decoder, page, list, value, data),
            (Err(e), Ok(_), Ok(_)) => panic!(
                "rejected a page serde_json reads as a list ({e}): {}",
                preview(data)
            ),
            _ => {}
        }
    }
}
