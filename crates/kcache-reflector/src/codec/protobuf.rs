//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), the
//! format the apiserver serves built-in types in: `Accept`, the
//! length-prefixed watch frames, the list reader's items, events,
//! bookmarks and `Status`. The objects' own messages are
//! `kcache_core::protobuf`'s.

use bytes::Bytes;
use kcache_core::protobuf::{self as pb, ListItem, ListReader, TypeMeta, WireError};
use kcache_core::{CachedObject, Format};

use super::{Target, WireCodec};
use crate::decode::{
    Bookmark, EventDecoder, ListPage, ListParser, PageParser, WatchEvent, bad, hex_preview,
};
use crate::error::{ApiError, BadEvent, BadEventKind};
use crate::framing::{Framer, ProtobufFramer};

/// `Accept` of a list that prefers protobuf.
pub(crate) const ACCEPT_LIST: &str = "application/vnd.kubernetes.protobuf, application/json";

/// `Accept` of a watch (or streaming list) that prefers protobuf.
pub(crate) const ACCEPT_WATCH: &str =
    "application/vnd.kubernetes.protobuf;stream=watch, application/json";

/// Kubernetes protobuf, for the built-in types kcache has tables of.
pub(crate) struct Protobuf;

impl<K: 'static> WireCodec<K> for Protobuf {
    fn format(&self) -> Format {
        Format::Protobuf
    }

    fn answers(&self, media_type: &str) -> bool {
        media_type == pb::CONTENT_TYPE
    }

    fn preferred_for(&self, t: Target<'_>) -> bool {
        match (t.api_version, t.kind) {
            (Some(v), Some(k)) if !t.metadata_only => pb::is_builtin_kind(v, k),
            _ => false,
        }
    }

    fn accept(&self, watch: bool) -> &'static str {
        if watch { ACCEPT_WATCH } else { ACCEPT_LIST }
    }

    fn is_status(&self, body: &[u8]) -> bool {
        body.starts_with(pb::MAGIC)
    }

    fn status(&self, http_status: Option<u16>, body: &[u8]) -> ApiError {
        status(http_status, body)
    }

    fn framer(&self, max_frame: usize) -> Box<dyn Framer> {
        Box::new(ProtobufFramer::with_max_frame(max_frame))
    }

    fn list_parser(&self) -> Box<dyn ListParser<K>> {
        Box::new(ProtobufPage::default())
    }

    fn decode_event(
        &self,
        decoder: &EventDecoder<K>,
        frame: Bytes,
    ) -> Result<WatchEvent<K>, BadEvent> {
        decoder.decode_protobuf_event(frame)
    }
}

/// A protobuf `Status` (`k8s\0` + `runtime.Unknown`).
fn status(http_status: Option<u16>, body: &[u8]) -> ApiError {
    match pb::Status::from_envelope(body) {
        Ok(Some(s)) => ApiError {
            code: u16::try_from(s.code)
                .ok()
                .filter(|c| *c != 0)
                .or(http_status)
                .unwrap_or(500),
            reason: s.reason,
            message: s.message,
            retry_after: s
                .details
                .as_ref()
                .and_then(|d| d.retry_after_seconds)
                .and_then(|secs| u64::try_from(secs).ok())
                .filter(|secs| *secs > 0)
                .map(std::time::Duration::from_secs),
            causes: s
                .details
                .map(|d| {
                    d.causes
                        .into_iter()
                        .map(|c| c.reason)
                        .filter(|r| !r.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        },
        Ok(None) => ApiError {
            code: http_status.unwrap_or(500),
            reason: String::new(),
            message: "a protobuf body that is not a Status".to_owned(),
            causes: Vec::new(),
            retry_after: None,
        },
        Err(e) => ApiError {
            code: http_status.unwrap_or(500),
            reason: String::new(),
            message: format!("an undecodable protobuf Status: {e}"),
            causes: Vec::new(),
            retry_after: None,
        },
    }
}

/// A protobuf list page (the `k8s\0` magic and a `runtime.Unknown`
/// holding e.g. a `PodList`) read as it arrives: items cut by a
/// [`ListReader`] and built (or skipped) one by one. An item whose own
/// bytes are not a usable object is skipped (its length prefix still says
/// where the next item starts).
#[derive(Default)]
pub(crate) struct ProtobufPage {
    reader: ListReader,
    skipped: Vec<BadEvent>,
}

impl<K> PageParser<K> for ProtobufPage {
    type Error = WireError;

    fn push(&mut self, chunk: Bytes) {
        self.reader.push(chunk);
    }

    fn next_object(
        &mut self,
        decoder: &EventDecoder<K>,
    ) -> Result<Option<CachedObject<K>>, WireError> {
        while let Some(item) = self.reader.next_item()? {
            let Some(tm) = self.reader.item_type() else {
                continue;
            };
            match decoder.decode_protobuf_item(item, tm) {
                Ok(o) => return Ok(Some(o)),
                Err(bad) => self.skipped.push(bad),
            }
        }
        Ok(None)
    }

    fn finish(self, _: &EventDecoder<K>) -> Result<ListPage<K>, WireError> {
        let s = self.reader.finish()?;
        Ok(ListPage::streamed(
            s.resource_version,
            s.continue_token,
            s.shard_selector,
            self.skipped,
        ))
    }
}

impl<K> EventDecoder<K> {
    /// Decodes one protobuf watch frame (a `WatchEvent`, as cut by
    /// [`ProtobufFramer`](crate::ProtobufFramer)): the event type, and the
    /// object's `k8s\0` + `runtime.Unknown` envelope into a cached object
    /// (a zero-copy slice of `frame`), a bookmark, or the `Status` of an
    /// `ERROR` event. Bad frames are [`BadEvent`]s of the same kinds as a
    /// bad JSON line.
    pub fn decode_protobuf_event(&self, frame: Bytes) -> Result<WatchEvent<K>, BadEvent> {
        let ev = pb::WatchEvent::decode(&frame).map_err(|e| {
            bad(
                BadEventKind::Undecodable,
                format!("protobuf: {e}: {}", hex_preview(&frame)),
            )
        })?;
        match ev.event_type {
            "ADDED" | "MODIFIED" | "DELETED" => {
                let object = frame.slice_ref(ev.object);
                let obj = CachedObject::from_protobuf_envelope_with(object, &self.options)
                    .map_err(|e| BadEvent {
                        kind: BadEventKind::InvalidObject,
                        detail: hex_preview(ev.object),
                        source: Some(e),
                    })?;
                self.check_kind(obj.meta().kind(), obj.meta().api_version())?;
                Ok(match ev.event_type {
                    "ADDED" => WatchEvent::Added(obj),
                    "MODIFIED" => WatchEvent::Modified(obj),
                    _ => WatchEvent::Deleted(obj),
                })
            }
            "BOOKMARK" => self
                .decode_protobuf_bookmark(ev.object)
                .map(WatchEvent::Bookmark),
            "ERROR" => Ok(WatchEvent::Error(ApiError::from_status_bytes(
                None, ev.object,
            ))),
            other => Err(bad(
                BadEventKind::UnknownType,
                format!("event type {other:?}"),
            )),
        }
    }

    fn decode_protobuf_bookmark(&self, object: &[u8]) -> Result<Bookmark, BadEvent> {
        let invalid = |e: WireError| {
            bad(
                BadEventKind::InvalidObject,
                format!("bookmark: protobuf: {e}: {}", hex_preview(object)),
            )
        };
        let u = pb::Unknown::decode(object).map_err(invalid)?;
        self.check_kind(Some(u.type_meta.kind), Some(u.type_meta.api_version))?;
        let b = pb::Bookmark::decode(u.raw).map_err(invalid)?;
        if b.resource_version.is_empty() {
            return Err(bad(
                BadEventKind::InvalidObject,
                "bookmark without metadata.resourceVersion",
            ));
        }
        Ok(Bookmark {
            resource_version: b.resource_version.to_owned(),
            initial_events_end: b.initial_events_end,
        })
    }

    /// Builds the cached object of one item of a protobuf list (cut by a
    /// [`ListReader`]; `type_meta` is [`ListReader::item_type`]). An item
    /// that is a slice of a network chunk is copied into a buffer of its
    /// own (or, when managedFields are cut, only the cut result is kept),
    /// so that no long-lived object keeps a chunk alive.
    pub fn decode_protobuf_item(
        &self,
        item: ListItem,
        type_meta: TypeMeta<'_>,
    ) -> Result<CachedObject<K>, BadEvent> {
        let (bytes, options) = if item.shares_chunk {
            self.detach_list_item(item.bytes.clone())
        } else {
            self.pack_assembled_item(item.bytes.clone())
        };
        let obj =
            CachedObject::from_protobuf_with(bytes, type_meta, options).map_err(|e| BadEvent {
                kind: BadEventKind::InvalidObject,
                detail: hex_preview(&item.bytes),
                source: Some(e),
            })?;
        self.check_kind(obj.meta().kind(), obj.meta().api_version())?;
        Ok(obj)
    }

    #[cfg(any(test, feature = "fuzzing"))]
    /// [`decode_list`](Self::decode_list) for a protobuf list body (the
    /// `k8s\0` magic and a `runtime.Unknown` holding e.g. a `PodList`),
    /// read whole. A
    /// malformed envelope or list fails the page; an item whose own bytes
    /// are not a usable object is skipped (its length prefix still says
    /// where the next item starts). The reflector reads list bodies with a
    /// [`ListReader`] as they arrive instead.
    pub fn decode_protobuf_list(&self, body: &Bytes) -> Result<ListPage<K>, WireError> {
        self.parse_chunks(ProtobufPage::default(), [body.clone()])
    }
}
