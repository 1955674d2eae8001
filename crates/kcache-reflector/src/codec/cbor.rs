//! Kubernetes CBOR (KEP-4222): `application/cbor` lists and objects,
//! `application/cbor-seq` watches (one data item per event), which the
//! apiserver serves, custom resources included, when its feature gate
//! `CBORServingAndStorage` is on. The objects' own bytes are
//! `kcache_core::cbor`'s.

use std::collections::HashMap;

use bytes::{Buf, Bytes, BytesMut};
use kcache_core::cbor::{self as cb, CborError, ListReader};
use kcache_core::{CachedObject, Format, ObjectOptions};
use serde::Deserialize;

use super::{Target, WireCodec};
use crate::decode::{
    Bookmark, EventDecoder, ListPage, ListParser, PageParser, WatchEvent, bad, hex_preview,
    marks_initial_events_end,
};
use crate::error::{ApiError, BadEvent, BadEventKind, StatusWire};
use crate::framing::{FrameError, FrameTooLarge, Framer};

/// `Accept` of a list, a watch or a streaming list that prefers CBOR (the
/// apiserver answers a watch as `application/cbor-seq`).
pub(crate) const ACCEPT: &str = "application/cbor, application/json";

/// The self-described CBOR tag the apiserver writes in front of every
/// object, list, event and `Status`.
const SELF_DESCRIBED: &[u8] = &[0xd9, 0xd9, 0xf7];

/// Kubernetes CBOR, for custom resources.
pub(crate) struct Cbor;

impl<K: 'static> WireCodec<K> for Cbor {
    fn format(&self) -> Format {
        Format::Cbor
    }

    fn answers(&self, media_type: &str) -> bool {
        media_type == cb::CONTENT_TYPE || media_type == cb::SEQ_CONTENT_TYPE
    }

    /// Custom resources: a known kind kcache has no protobuf tables of
    /// (built-in types get protobuf, which the apiserver has served for
    /// years).
    fn preferred_for(&self, t: Target<'_>) -> bool {
        match (t.api_version, t.kind) {
            (Some(v), Some(k)) if !t.metadata_only => !kcache_core::protobuf::is_builtin_kind(v, k),
            _ => false,
        }
    }

    fn accept(&self, _watch: bool) -> &'static str {
        ACCEPT
    }

    fn is_status(&self, body: &[u8]) -> bool {
        body.starts_with(SELF_DESCRIBED)
    }

    fn status(&self, http_status: Option<u16>, body: &[u8]) -> ApiError {
        match cb::decode::<StatusWire>(body) {
            Ok(s) => ApiError::from_status_wire(http_status, s),
            Err(e) => ApiError {
                code: http_status.unwrap_or(500),
                reason: String::new(),
                message: format!("an undecodable CBOR Status: {e}"),
                causes: Vec::new(),
                retry_after: None,
            },
        }
    }

    fn framer(&self, max_frame: usize) -> Box<dyn Framer> {
        Box::new(CborSeqFramer::with_max_frame(max_frame))
    }

    fn list_parser(&self) -> Box<dyn ListParser<K>> {
        Box::new(CborPage::default())
    }

    fn decode_event(
        &self,
        decoder: &EventDecoder<K>,
        frame: Bytes,
    ) -> Result<WatchEvent<K>, BadEvent> {
        decoder.decode_cbor_event(frame)
    }
}

/// Splits a CBOR sequence (RFC 8742: `application/cbor-seq`, a CBOR
/// watch) into its data items, one event each, whatever the chunk
/// boundaries. Every frame is an exact-size buffer of its own. An event
/// longer than the maximum fails as soon as that many bytes are buffered
/// without completing it; a malformed item fails the stream (a sequence
/// has no other way to find the next item).
#[derive(Debug)]
pub(crate) struct CborSeqFramer {
    buf: BytesMut,
    max_frame: usize,
    /// Whether bytes were pushed since the last scan found the front event
    /// incomplete (it is not rescanned until they were).
    grown: bool,
}

impl CborSeqFramer {
    /// A framer that fails on events longer than `max_frame` bytes.
    pub(crate) fn with_max_frame(max_frame: usize) -> Self {
        CborSeqFramer {
            buf: BytesMut::new(),
            max_frame,
            grown: false,
        }
    }
}

impl Framer for CborSeqFramer {
    fn push(&mut self, chunk: Bytes) {
        self.buf.extend_from_slice(&chunk);
        self.grown |= !chunk.is_empty();
    }

    fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.buf.is_empty() || !self.grown {
            return Ok(None);
        }
        match cb::item_len(&self.buf) {
            Ok(Some(n)) if n > self.max_frame => Err(self.too_large()),
            Ok(Some(n)) => {
                let frame = Bytes::copy_from_slice(&self.buf[..n]);
                self.buf.advance(n);
                Ok(Some(frame))
            }
            Ok(None) if self.buf.len() > self.max_frame => Err(self.too_large()),
            Ok(None) => {
                self.grown = false;
                Ok(None)
            }
            Err(e) => {
                self.buf.clear();
                Err(FrameError::Malformed(Box::new(e)))
            }
        }
    }

    fn finish(&mut self) -> Result<Option<Bytes>, usize> {
        match self.buf.len() {
            0 => Ok(None),
            n => Err(n),
        }
    }
}

impl CborSeqFramer {
    fn too_large(&mut self) -> FrameError {
        self.buf.clear();
        FrameError::TooLarge(FrameTooLarge {
            limit: self.max_frame,
        })
    }
}

/// A CBOR list page read as it arrives: items cut by a [`ListReader`] and
/// built (or skipped) one by one.
#[derive(Default)]
pub(crate) struct CborPage {
    reader: ListReader,
    skipped: Vec<BadEvent>,
}

impl<K> PageParser<K> for CborPage {
    type Error = CborError;

    fn push(&mut self, chunk: Bytes) {
        self.reader.push(&chunk);
    }

    fn next_object(
        &mut self,
        decoder: &EventDecoder<K>,
    ) -> Result<Option<CachedObject<K>>, CborError> {
        while let Some(item) = self.reader.next_item()? {
            // a slice of the reader's buffer: made independent of it
            let (bytes, options) = decoder.detach_list_item(item);
            match decoder.cbor_object(bytes, options) {
                Ok(o) => return Ok(Some(o)),
                Err(bad) => self.skipped.push(bad),
            }
        }
        Ok(None)
    }

    fn finish(self, _: &EventDecoder<K>) -> Result<ListPage<K>, CborError> {
        let s = self.reader.finish()?;
        Ok(ListPage::streamed(
            s.resource_version,
            s.continue_token,
            s.shard_selector,
            self.skipped,
        ))
    }
}

#[derive(Deserialize)]
struct BookmarkWire {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
    #[serde(default)]
    metadata: Option<BookmarkMeta>,
}

#[derive(Deserialize)]
struct BookmarkMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default)]
    annotations: Option<HashMap<String, String>>,
}

impl<K> EventDecoder<K> {
    /// Builds the cached object of a CBOR object (a list item or a watch
    /// event's `object`).
    pub(crate) fn cbor_object(
        &self,
        bytes: Bytes,
        options: &ObjectOptions,
    ) -> Result<CachedObject<K>, BadEvent> {
        let obj = CachedObject::from_cbor_with(bytes.clone(), options).map_err(|e| BadEvent {
            kind: BadEventKind::InvalidObject,
            detail: hex_preview(&bytes),
            source: Some(e),
        })?;
        self.check_kind(obj.meta().kind(), obj.meta().api_version())?;
        Ok(obj)
    }

    /// Decodes one CBOR watch event (one item of an `application/cbor-seq`
    /// stream): the event type, and the object into a cached object (a
    /// zero-copy slice of `frame`), a bookmark, or the `Status` of an
    /// `ERROR` event. Bad events are [`BadEvent`]s of the same kinds as a
    /// bad JSON line.
    pub(crate) fn decode_cbor_event(&self, frame: Bytes) -> Result<WatchEvent<K>, BadEvent> {
        let (ty, object) = cb::watch_event(&frame).map_err(|e| {
            bad(
                BadEventKind::Undecodable,
                format!("CBOR: {e}: {}", hex_preview(&frame)),
            )
        })?;
        let object = frame.slice(object);
        match &*ty {
            "ADDED" => self
                .cbor_object(object, &self.options)
                .map(WatchEvent::Added),
            "MODIFIED" => self
                .cbor_object(object, &self.options)
                .map(WatchEvent::Modified),
            "DELETED" => self
                .cbor_object(object, &self.options)
                .map(WatchEvent::Deleted),
            "BOOKMARK" => self.cbor_bookmark(&object).map(WatchEvent::Bookmark),
            "ERROR" => Ok(WatchEvent::Error(ApiError::from_status_bytes(
                None, &object,
            ))),
            other => Err(bad(
                BadEventKind::UnknownType,
                format!("event type {other:?}"),
            )),
        }
    }

    fn cbor_bookmark(&self, object: &[u8]) -> Result<Bookmark, BadEvent> {
        let wire: BookmarkWire = cb::decode(object).map_err(|e| {
            bad(
                BadEventKind::InvalidObject,
                format!("bookmark: CBOR: {e}: {}", hex_preview(object)),
            )
        })?;
        let meta = wire.metadata.as_ref().map(|m| {
            let end = marks_initial_events_end(m.annotations.as_ref());
            (m.resource_version.as_deref(), end)
        });
        self.bookmark(wire.kind.as_deref(), wire.api_version.as_deref(), meta)
    }

    #[cfg(any(test, feature = "fuzzing"))]
    /// A CBOR list body read in `chunks`, as the reflector reads it: items
    /// cut and built as they arrive. A malformed body fails the page; an
    /// item that is well formed but not a usable object is skipped.
    pub fn decode_cbor_list_chunks(
        &self,
        chunks: impl IntoIterator<Item = Bytes>,
    ) -> Result<ListPage<K>, CborError> {
        self.parse_chunks(CborPage::default(), chunks)
    }

    #[cfg(any(test, feature = "fuzzing"))]
    /// Decodes one CBOR watch event (one item of an `application/cbor-seq`
    /// stream), for fuzz checks and tests.
    pub fn decode_cbor_watch_event(&self, frame: Bytes) -> Result<WatchEvent<K>, BadEvent> {
        self.decode_cbor_event(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CBOR byte string (how the apiserver writes strings).
    fn bs(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        match s.len() {
            n @ 0..=23 => v.push(0x40 | n as u8),
            n => v.extend([0x58, n as u8]),
        }
        v.extend_from_slice(s.as_bytes());
        v
    }

    /// A map of string pairs, values given as encoded items.
    fn map(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut v = SELF_DESCRIBED.to_vec();
        v.push(0xa0 | entries.len() as u8);
        for (k, val) in entries {
            v.extend(bs(k));
            v.extend(val);
        }
        v
    }

    fn widget(name: &str, rv: &str) -> Vec<u8> {
        map(&[
            ("apiVersion", bs("example.com/v1")),
            ("kind", bs("Widget")),
            (
                "metadata",
                map(&[
                    ("name", bs(name)),
                    ("namespace", bs("ns")),
                    ("resourceVersion", bs(rv)),
                ]),
            ),
        ])
    }

    fn event(ty: &str, object: Vec<u8>) -> Vec<u8> {
        // the apiserver's order: object, then type
        map(&[("object", object), ("type", bs(ty))])
    }

    fn dec() -> EventDecoder<serde_json::Value> {
        EventDecoder::new(
            ObjectOptions::default(),
            Some("Widget"),
            Some("example.com/v1"),
        )
    }

    #[test]
    fn events_bookmarks_and_errors() {
        let d = dec();
        match d.decode_cbor_event(Bytes::from(event("MODIFIED", widget("a", "7")))) {
            Ok(WatchEvent::Modified(o)) => {
                assert_eq!((o.key(), o.resource_version()), ("ns/a", Some("7")));
                assert_eq!(o.format(), Format::Cbor);
                assert_eq!(o.decode().unwrap()["metadata"]["name"], "a");
            }
            other => panic!("{other:?}"),
        }
        let bm = map(&[
            ("apiVersion", bs("example.com/v1")),
            ("kind", bs("Widget")),
            (
                "metadata",
                map(&[
                    ("resourceVersion", bs("9")),
                    (
                        "annotations",
                        map(&[("k8s.io/initial-events-end", bs("true"))]),
                    ),
                ]),
            ),
        ]);
        match d.decode_cbor_event(Bytes::from(event("BOOKMARK", bm))) {
            Ok(WatchEvent::Bookmark(b)) => {
                assert_eq!(b.resource_version, "9");
                assert!(b.initial_events_end);
            }
            other => panic!("{other:?}"),
        }
        let status = map(&[
            ("code", vec![0x19, 0x01, 0x9a]),
            ("reason", bs("Expired")),
            ("message", bs("too old resource version: 1 (216)")),
        ]);
        match d.decode_cbor_event(Bytes::from(event("ERROR", status))) {
            Ok(WatchEvent::Error(e)) => {
                assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
                assert!(e.is_expired());
            }
            other => panic!("{other:?}"),
        }
        let kind = |r: Result<WatchEvent<_>, BadEvent>| r.unwrap_err().kind;
        assert_eq!(
            kind(d.decode_cbor_event(Bytes::from_static(b"\xa1\x41a"))),
            BadEventKind::Undecodable
        );
        assert_eq!(
            kind(d.decode_cbor_event(Bytes::from(event("WEIRD", widget("a", "1"))))),
            BadEventKind::UnknownType
        );
        let gadget = map(&[
            ("kind", bs("Gadget")),
            ("metadata", map(&[("name", bs("g"))])),
        ]);
        assert_eq!(
            kind(d.decode_cbor_event(Bytes::from(event("ADDED", gadget)))),
            BadEventKind::WrongKind
        );
        let nameless = map(&[("kind", bs("Widget"))]);
        assert_eq!(
            kind(d.decode_cbor_event(Bytes::from(event("ADDED", nameless)))),
            BadEventKind::InvalidObject
        );
    }

    fn list(items: &[Vec<u8>]) -> Vec<u8> {
        let mut arr = vec![0x80 | items.len() as u8];
        for i in items {
            arr.extend(i);
        }
        map(&[
            ("apiVersion", bs("example.com/v1")),
            ("kind", bs("WidgetList")),
            (
                "metadata",
                map(&[("continue", bs("c")), ("resourceVersion", bs("12"))]),
            ),
            ("items", arr),
        ])
    }

    #[test]
    fn lists_in_chunks_own_buffers_and_bad_items_skipped() {
        let d = dec();
        let nameless = map(&[("kind", bs("Widget"))]);
        let body = Bytes::from(list(&[widget("a", "1"), nameless, widget("b", "2")]));
        let whole = d.decode_cbor_list_chunks([body.clone()]).unwrap();
        assert_eq!(whole.items.len(), 2);
        assert_eq!(whole.skipped.len(), 1);
        assert_eq!(whole.resource_version, "12");
        assert_eq!(whole.continue_token.as_deref(), Some("c"));
        for size in [1, 7, 64] {
            let chunks = body.chunks(size).map(Bytes::copy_from_slice);
            let page = d.decode_cbor_list_chunks(chunks).unwrap();
            assert_eq!(
                page.same_content(),
                whole.same_content(),
                "chunks of {size}"
            );
        }
        for item in &whole.items {
            // no item keeps the page's buffer
            let b = item.bytes();
            let inside = body.as_ptr_range().contains(&b.as_ptr());
            assert!(!inside, "an item points into the body");
            assert_eq!(item.format(), Format::Cbor);
        }
        assert!(
            d.decode_cbor_list_chunks([body.slice(..body.len() - 2)])
                .is_err()
        );
    }

    #[test]
    fn the_sequence_framer_cuts_events_at_every_split_point() {
        let a = event("ADDED", widget("a", "1"));
        let b = event("DELETED", widget("b", "2"));
        let stream: Vec<u8> = [a.clone(), b.clone()].concat();
        for i in 0..stream.len() {
            for j in i..stream.len() {
                let mut f = CborSeqFramer::with_max_frame(1024);
                let mut out = Vec::new();
                for part in [&stream[..i], &stream[i..j], &stream[j..]] {
                    f.push(Bytes::copy_from_slice(part));
                    while let Some(fr) = f.next_frame().unwrap() {
                        out.push(fr);
                    }
                }
                assert_eq!(f.finish(), Ok(None));
                assert_eq!(out, [Bytes::from(a.clone()), Bytes::from(b.clone())]);
            }
        }
        // a truncated last event, an event over the limit, a malformed item
        let mut f = CborSeqFramer::with_max_frame(1024);
        f.push(Bytes::copy_from_slice(&stream[..stream.len() - 1]));
        assert!(f.next_frame().unwrap().is_some());
        assert!(f.next_frame().unwrap().is_none());
        assert_eq!(f.finish(), Err(b.len() - 1));
        let mut f = CborSeqFramer::with_max_frame(10);
        f.push(Bytes::from(a.clone()));
        assert!(matches!(f.next_frame(), Err(FrameError::TooLarge(_))));
        let mut f = CborSeqFramer::with_max_frame(1024);
        f.push(Bytes::from_static(b"\x1c"));
        assert!(matches!(f.next_frame(), Err(FrameError::Malformed(_))));
    }
}
