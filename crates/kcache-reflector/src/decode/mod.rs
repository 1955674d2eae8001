//! Byte-level decoding: watch events and list bodies into cached objects,
//! without any typed decode.
//!
//! This module holds the [`EventDecoder`] and the JSON watch event decode
//! (with its fast path for the apiserver's usual layout); `list` holds
//! list pages ([`ListPage`], the chunked page parsers the reflector reads
//! list bodies with, and the JSON list decode). The other formats'
//! events and lists are decoded in the crate's `codec` module.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use bytes::Bytes;
use kcache_core::{ByteBlocks, CachedObject, ObjectOptions};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{ApiError, BadEvent, BadEventKind, INITIAL_EVENTS_END_ANNOTATION};

mod list;
#[cfg(test)]
mod tests;

pub use list::ListPage;
#[cfg(any(test, feature = "fuzzing"))]
pub use list::PageContent;
pub(crate) use list::{JsonPage, ListParser, PageParser};

/// A watch bookmark: only moves the resource version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bookmark {
    /// The bookmark's `metadata.resourceVersion`.
    pub resource_version: String,
    /// Whether it carries `k8s.io/initial-events-end: "true"` (the end of a
    /// streaming list's initial events).
    pub initial_events_end: bool,
}

/// One decoded watch event.
pub enum WatchEvent<K> {
    /// `ADDED`.
    Added(CachedObject<K>),
    /// `MODIFIED`.
    Modified(CachedObject<K>),
    /// `DELETED` (the object's last state).
    Deleted(CachedObject<K>),
    /// `BOOKMARK`.
    Bookmark(Bookmark),
    /// `ERROR`: the Status the server ended the watch with.
    Error(ApiError),
}

impl<K> fmt::Debug for WatchEvent<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchEvent::Added(o) => f.debug_tuple("Added").field(&o.key()).finish(),
            WatchEvent::Modified(o) => f.debug_tuple("Modified").field(&o.key()).finish(),
            WatchEvent::Deleted(o) => f.debug_tuple("Deleted").field(&o.key()).finish(),
            WatchEvent::Bookmark(b) => f.debug_tuple("Bookmark").field(b).finish(),
            WatchEvent::Error(e) => f.debug_tuple("Error").field(e).finish(),
        }
    }
}

/// Decodes watch lines and list bodies into [`CachedObject`]s: the event
/// envelope is read without decoding the object, the object's metadata is
/// extracted by `kcache-core`'s partial decode, and objects of another kind
/// are rejected.
///
/// ```
/// use bytes::Bytes;
/// use kcache_core::ObjectOptions;
/// use kcache_reflector::{EventDecoder, WatchEvent};
///
/// let decoder = EventDecoder::<serde_json::Value>::new(ObjectOptions::default(), Some("ConfigMap"), Some("v1"));
/// let line = Bytes::from_static(br#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}}"#);
/// match decoder.decode_event(line)? {
///     WatchEvent::Added(obj) => {
///         assert_eq!(obj.key(), "ns/a");
///         assert_eq!(obj.resource_version(), Some("7"));
///     }
///     other => panic!("unexpected {other:?}"),
/// }
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct EventDecoder<K> {
    pub(crate) options: ObjectOptions,
    /// `options` with `copy_bytes`: list items are given as slices of the
    /// page and must end up in buffers of their own (when `blocks` are not
    /// used).
    list_options: ObjectOptions,
    /// Where list items are copied when the object keeps its bytes as
    /// given (no managedFields cut, no compression at ingest: those build
    /// a buffer of their own anyway): packed into shared blocks, which the
    /// allocator can hand back to the system once background compression
    /// replaced their objects (see [`ByteBlocks`]).
    blocks: Option<std::sync::Mutex<ByteBlocks>>,
    kind: Option<String>,
    api_version: Option<String>,
    _k: std::marker::PhantomData<fn() -> K>,
}

#[derive(Deserialize)]
struct EventWire<'a> {
    #[serde(borrow, rename = "type")]
    type_: Cow<'a, str>,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct BookmarkWire<'a> {
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "apiVersion")]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    metadata: Option<BookmarkMeta<'a>>,
}

#[derive(Deserialize)]
struct BookmarkMeta<'a> {
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    annotations: Option<HashMap<Cow<'a, str>, Cow<'a, str>>>,
}

/// Whether a bookmark's annotations mark the end of a streaming list's
/// initial events (`k8s.io/initial-events-end: "true"`).
pub(crate) fn marks_initial_events_end<Q, V>(annotations: Option<&HashMap<Q, V>>) -> bool
where
    Q: std::borrow::Borrow<str> + std::hash::Hash + Eq,
    V: AsRef<str>,
{
    annotations
        .and_then(|a| a.get(INITIAL_EVENTS_END_ANNOTATION))
        .is_some_and(|v| v.as_ref() == "true")
}

/// The sub-slice `inner` of `outer`, as a zero-copy slice of `outer`'s
/// buffer when `inner` points into it.
pub(crate) fn subslice(outer: &Bytes, inner: &[u8]) -> Bytes {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize);
    match start {
        Some(s) if s + inner.len() <= outer.len() => outer.slice(s..s + inner.len()),
        _ => Bytes::copy_from_slice(inner),
    }
}

/// The first bytes of a protobuf message, in hex (for a log line).
pub(crate) fn hex_preview(bytes: &[u8]) -> String {
    let cut = bytes.len().min(48);
    let mut s = String::with_capacity(cut * 3 + 3);
    for b in &bytes[..cut] {
        s.push_str(&format!("{b:02x} "));
    }
    s.pop();
    if bytes.len() > cut {
        s.push_str("...");
    }
    s
}

pub(crate) fn bad(kind: BadEventKind, detail: impl Into<String>) -> BadEvent {
    BadEvent {
        kind,
        detail: detail.into(),
        source: None,
    }
}

pub(crate) fn preview(bytes: &[u8]) -> String {
    let cut = bytes.len().min(120);
    let mut s = String::from_utf8_lossy(&bytes[..cut]).into_owned();
    if bytes.len() > cut {
        s.push_str("...");
    }
    s
}

impl<K> EventDecoder<K> {
    /// A decoder that keeps objects as `options` says and rejects objects
    /// whose `kind` / `apiVersion` (when present) differ from the given ones.
    pub fn new(options: ObjectOptions, kind: Option<&str>, api_version: Option<&str>) -> Self {
        EventDecoder {
            list_options: ObjectOptions {
                copy_bytes: true,
                ..options.clone()
            },
            blocks: (!options.strip_managed_fields && !options.compression.is_enabled())
                .then(|| std::sync::Mutex::new(ByteBlocks::new())),
            options,
            kind: kind.map(str::to_owned),
            api_version: api_version.map(str::to_owned),
            _k: std::marker::PhantomData,
        }
    }

    /// `item` copied into the current block, when list items are packed.
    pub(crate) fn packed(&self, item: &[u8]) -> Option<Bytes> {
        let blocks = self.blocks.as_ref()?;
        Some(
            blocks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .copy(item),
        )
    }

    /// A list item the reader assembled from several chunks (a buffer of
    /// its own): packed into a block too when it is short enough (one more
    /// copy of a few KiB; its own buffer would sit between the small
    /// allocations of the metadata, see [`ByteBlocks`]), with the options
    /// to build its object with.
    pub(crate) fn pack_assembled_item(&self, item: Bytes) -> (Bytes, &ObjectOptions) {
        let packed = (item.len() <= ByteBlocks::MAX_PACKED)
            .then(|| self.packed(&item))
            .flatten();
        (packed.unwrap_or(item), &self.options)
    }

    /// A list item (a slice of the page) made independent of the page, and
    /// the options to build its object with.
    pub(crate) fn detach_list_item(&self, item: Bytes) -> (Bytes, &ObjectOptions) {
        match self.packed(&item) {
            Some(copy) => (copy, &self.options),
            None => (item, &self.list_options),
        }
    }

    #[cfg(any(test, feature = "fuzzing"))]
    /// The object options in use.
    pub fn options(&self) -> &ObjectOptions {
        &self.options
    }

    pub(crate) fn check_kind(
        &self,
        kind: Option<&str>,
        api_version: Option<&str>,
    ) -> Result<(), BadEvent> {
        if let (Some(want), Some(got)) = (&self.kind, kind)
            && want != got
        {
            return Err(bad(
                BadEventKind::WrongKind,
                format!("expected kind {want:?}, got {got:?}"),
            ));
        }
        if let (Some(want), Some(got)) = (&self.api_version, api_version)
            && want != got
        {
            return Err(bad(
                BadEventKind::WrongKind,
                format!("expected apiVersion {want:?}, got {got:?}"),
            ));
        }
        Ok(())
    }

    /// Decodes one object (a list item or a watch event's `object`).
    pub fn decode_object(&self, bytes: Bytes) -> Result<CachedObject<K>, BadEvent> {
        self.decode_object_with(bytes, &self.options)
    }

    pub(crate) fn decode_object_with(
        &self,
        bytes: Bytes,
        options: &ObjectOptions,
    ) -> Result<CachedObject<K>, BadEvent> {
        let obj = match CachedObject::from_bytes_with(bytes.clone(), options) {
            Ok(o) => o,
            Err(e) => {
                return Err(BadEvent {
                    kind: BadEventKind::InvalidObject,
                    detail: preview(&bytes),
                    source: Some(e),
                });
            }
        };
        self.check_kind(obj.meta().kind(), obj.meta().api_version())?;
        Ok(obj)
    }

    pub(crate) fn decode_bookmark(&self, bytes: &[u8]) -> Result<Bookmark, BadEvent> {
        let wire: BookmarkWire<'_> = serde_json::from_slice(bytes).map_err(|e| {
            bad(
                BadEventKind::InvalidObject,
                format!("bookmark: {e}: {}", preview(bytes)),
            )
        })?;
        let meta = wire.metadata.as_ref().map(|m| {
            let end = marks_initial_events_end(m.annotations.as_ref());
            (m.resource_version.as_deref(), end)
        });
        self.bookmark(wire.kind.as_deref(), wire.api_version.as_deref(), meta)
    }

    /// A bookmark from the fields of its wire form (any format): its kind
    /// and apiVersion, checked, and its metadata's resourceVersion and
    /// whether it carries the `initial-events-end` annotation.
    pub(crate) fn bookmark(
        &self,
        kind: Option<&str>,
        api_version: Option<&str>,
        meta: Option<(Option<&str>, bool)>,
    ) -> Result<Bookmark, BadEvent> {
        self.check_kind(kind, api_version)?;
        let (rv, end) =
            meta.ok_or_else(|| bad(BadEventKind::InvalidObject, "bookmark without metadata"))?;
        let rv = rv.filter(|rv| !rv.is_empty()).ok_or_else(|| {
            bad(
                BadEventKind::InvalidObject,
                "bookmark without metadata.resourceVersion",
            )
        })?;
        Ok(Bookmark {
            resource_version: rv.to_owned(),
            initial_events_end: end,
        })
    }

    pub(crate) fn typed(
        &self,
        ty: &[u8],
        object: Bytes,
    ) -> Option<Result<WatchEvent<K>, BadEvent>> {
        Some(match ty {
            b"ADDED" => self.decode_object(object).map(WatchEvent::Added),
            b"MODIFIED" => self.decode_object(object).map(WatchEvent::Modified),
            b"DELETED" => self.decode_object(object).map(WatchEvent::Deleted),
            b"BOOKMARK" => self.decode_bookmark(&object).map(WatchEvent::Bookmark),
            b"ERROR" => Ok(WatchEvent::Error(ApiError::from_status_bytes(
                None, &object,
            ))),
            _ => return None,
        })
    }

    /// Decodes one watch line (`{"type":"...","object":{...}}`).
    ///
    /// The apiserver's usual layout is recognized without parsing the
    /// envelope (the object is then validated by the metadata decode);
    /// anything else goes through a borrowing serde decode.
    pub fn decode_event(&self, line: Bytes) -> Result<WatchEvent<K>, BadEvent> {
        const PREFIX: &[u8] = b"{\"type\":\"";
        const OBJECT: &[u8] = b",\"object\":";
        if let Some(rest) = line.strip_prefix(PREFIX)
            && let Some(q) = memchr::memchr(b'"', rest)
            && rest[q + 1..].starts_with(OBJECT)
            && line.ends_with(b"}")
        {
            let start = PREFIX.len() + q + 1 + OBJECT.len();
            let end = line.len() - 1;
            if start < end {
                let object = line.slice(start..end);
                if let Some(result) = self.typed(&rest[..q], object) {
                    match result {
                        Err(BadEvent {
                            kind: BadEventKind::InvalidObject,
                            ..
                        }) => {} // maybe not the usual layout: full decode below
                        other => return other,
                    }
                }
            }
        }
        let wire: EventWire<'_> = serde_json::from_slice(&line).map_err(|e| {
            bad(
                BadEventKind::Undecodable,
                format!("{e}: {}", preview(&line)),
            )
        })?;
        let object = match wire.object {
            Some(raw) => subslice(&line, raw.get().as_bytes()),
            None => {
                return Err(bad(
                    BadEventKind::Undecodable,
                    format!("event {:?} without object", wire.type_),
                ));
            }
        };
        match self.typed(wire.type_.as_bytes(), object) {
            Some(r) => r,
            None => Err(bad(
                BadEventKind::UnknownType,
                format!("event type {:?}", wire.type_),
            )),
        }
    }
}
