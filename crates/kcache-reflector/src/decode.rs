//! Byte-level decoding: watch events and list bodies into cached objects,
//! without any typed decode.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use bytes::Bytes;
use kcache_core::{ByteBlocks, CachedObject, ObjectError, ObjectOptions};
use serde::Deserialize;
use serde_json::error::Category;
use serde_json::value::RawValue;

use crate::error::{
    ApiError, BadEvent, BadEventKind, INITIAL_EVENTS_END_ANNOTATION, ListBodyError,
};
use crate::split::JsonListReader;

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
/// let decoder = EventDecoder::<serde_json::Value>::new(ObjectOptions::new(), Some("ConfigMap"), Some("v1"));
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

#[derive(Deserialize)]
struct ListWire<'a> {
    #[serde(borrow, default)]
    metadata: Option<ListMetaWire<'a>>,
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct ListMetaWire<'a> {
    #[serde(borrow, default, rename = "resourceVersion")]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "continue")]
    continue_: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "shardInfo")]
    shard_info: Option<ShardInfoWire<'a>>,
}

/// `metadata.shardInfo` of a list the apiserver filtered (KEP-5866).
#[derive(Deserialize)]
struct ShardInfoWire<'a> {
    #[serde(borrow, default)]
    selector: Option<Cow<'a, str>>,
}

impl ListMetaWire<'_> {
    #[cfg(any(test, feature = "fuzzing"))]
    fn into_owned(self) -> ListMetaWire<'static> {
        ListMetaWire {
            resource_version: self.resource_version.map(|c| Cow::Owned(c.into_owned())),
            continue_: self.continue_.map(|c| Cow::Owned(c.into_owned())),
            shard_info: self.shard_info.map(|i| ShardInfoWire {
                selector: i.selector.map(|c| Cow::Owned(c.into_owned())),
            }),
        }
    }

    /// resourceVersion, continue token, shard selector echo.
    fn parts(self) -> (String, Option<String>, Option<String>) {
        (
            self.resource_version
                .map(Cow::into_owned)
                .unwrap_or_default(),
            self.continue_
                .filter(|c| !c.is_empty())
                .map(Cow::into_owned),
            self.shard_info
                .and_then(|i| i.selector)
                .map(Cow::into_owned),
        )
    }
}

/// One decoded list page.
pub struct ListPage<K> {
    /// The items that decoded.
    pub items: Vec<CachedObject<K>>,
    /// The list's `metadata.resourceVersion`.
    pub resource_version: String,
    /// The list's `metadata.continue`, when non-empty.
    pub continue_token: Option<String>,
    /// The list's `metadata.shardInfo.selector`: the shard selector the
    /// apiserver filtered the list with (server-side sharding, KEP-5866).
    pub shard_selector: Option<String>,
    /// Items that were skipped.
    pub skipped: Vec<BadEvent>,
}

impl<K> ListPage<K> {
    /// A JSON list page: its items and what its `metadata` says.
    fn from_wire(
        items: Vec<CachedObject<K>>,
        skipped: Vec<BadEvent>,
        metadata: Option<ListMetaWire<'_>>,
    ) -> Self {
        let (resource_version, continue_token, shard_selector) =
            metadata.map(ListMetaWire::parts).unwrap_or_default();
        ListPage {
            items,
            resource_version,
            continue_token,
            shard_selector,
            skipped,
        }
    }
}

/// What [`ListPage::same_content`] compares: each item's key and bytes,
/// the number of skipped items, the resourceVersion and the continue token.
#[cfg(any(test, feature = "fuzzing"))]
pub type PageContent<'a> = (Vec<(&'a str, &'a Bytes)>, usize, &'a str, Option<&'a str>);

#[cfg(any(test, feature = "fuzzing"))]
impl<K> ListPage<K> {
    /// What two reads of one list body (whole, or in chunks as the
    /// reflector reads it while it arrives) must agree on: the items'
    /// keys and bytes in order, how many items were skipped, the
    /// resourceVersion and the continue token. For tests and fuzz checks.
    pub fn same_content(&self) -> PageContent<'_> {
        (
            self.items.iter().map(|o| (o.key(), o.bytes())).collect(),
            self.skipped.len(),
            &self.resource_version,
            self.continue_token.as_deref(),
        )
    }
}

impl<K> fmt::Debug for ListPage<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListPage")
            .field("items", &self.items.len())
            .field("resource_version", &self.resource_version)
            .field("continue_token", &self.continue_token)
            .field("shard_selector", &self.shard_selector)
            .field("skipped", &self.skipped.len())
            .finish()
    }
}

/// A list page body parsed as it arrives, chunk by chunk, so that the
/// body is never held whole (the apiserver sends a list at
/// resourceVersion "0" as one body, whatever its size): [`JsonPage`] or
/// a format's page parser (see `codec`). The reflector reads every list
/// page through one, as a [`ListParser`].
pub(crate) trait PageParser<K> {
    /// What a malformed body fails with (the source of a
    /// [`ReflectorError::InvalidList`](crate::ReflectorError::InvalidList)).
    type Error: Into<ListBodyError>;

    /// Adds the next chunk of the body.
    fn push(&mut self, chunk: Bytes);

    /// The next item the chunks pushed so far complete that is an
    /// object; items before it that are not usable objects are skipped
    /// (returned by [`finish`](Self::finish)). `None` when more bytes are
    /// needed; a syntax error fails the page.
    fn next_object(
        &mut self,
        decoder: &EventDecoder<K>,
    ) -> Result<Option<CachedObject<K>>, Self::Error>;

    /// The end of the body: the page, with the items the envelope held
    /// itself (not returned by [`next_object`](Self::next_object)), every
    /// skipped item and the list's metadata.
    fn finish(self, decoder: &EventDecoder<K>) -> Result<ListPage<K>, Self::Error>;

    /// Parses the next chunk of the body, handing each object it completes
    /// to `take` as soon as the object's last byte is in.
    fn feed(
        &mut self,
        chunk: Bytes,
        decoder: &EventDecoder<K>,
        mut take: impl FnMut(CachedObject<K>),
    ) -> Result<(), Self::Error> {
        self.push(chunk);
        while let Some(obj) = self.next_object(decoder)? {
            take(obj);
        }
        Ok(())
    }
}

/// A [`PageParser`] as the reflector holds it: one type for every format,
/// its errors as [`ListBodyError`].
pub(crate) trait ListParser<K>: Send {
    /// [`PageParser::feed`].
    fn feed_chunk(
        &mut self,
        chunk: Bytes,
        decoder: &EventDecoder<K>,
        take: &mut dyn FnMut(CachedObject<K>),
    ) -> Result<(), ListBodyError>;

    /// [`PageParser::finish`].
    fn finish_page(
        self: Box<Self>,
        decoder: &EventDecoder<K>,
    ) -> Result<ListPage<K>, ListBodyError>;
}

impl<K, P: PageParser<K> + Send> ListParser<K> for P {
    fn feed_chunk(
        &mut self,
        chunk: Bytes,
        decoder: &EventDecoder<K>,
        take: &mut dyn FnMut(CachedObject<K>),
    ) -> Result<(), ListBodyError> {
        self.feed(chunk, decoder, take).map_err(Into::into)
    }

    fn finish_page(
        self: Box<Self>,
        decoder: &EventDecoder<K>,
    ) -> Result<ListPage<K>, ListBodyError> {
        (*self).finish(decoder).map_err(Into::into)
    }
}

/// A JSON list page read as it arrives: items cut by a
/// [`JsonListReader`] and built (or skipped) one by one.
pub(crate) struct JsonPage {
    reader: JsonListReader,
    skipped: Vec<BadEvent>,
}

impl JsonPage {
    pub(crate) fn new() -> Self {
        JsonPage {
            reader: JsonListReader::new(),
            skipped: Vec::new(),
        }
    }
}

impl<K> PageParser<K> for JsonPage {
    type Error = serde_json::Error;

    fn push(&mut self, chunk: Bytes) {
        self.reader.push(chunk);
    }

    fn next_object(
        &mut self,
        decoder: &EventDecoder<K>,
    ) -> Result<Option<CachedObject<K>>, serde_json::Error> {
        while let Some((item, shares)) = self.reader.next_item()? {
            match decoder.json_list_item(item, shares)? {
                Ok(o) => return Ok(Some(o)),
                Err(bad) => self.skipped.push(bad),
            }
        }
        Ok(None)
    }

    fn finish(self, decoder: &EventDecoder<K>) -> Result<ListPage<K>, serde_json::Error> {
        let envelope = self.reader.finish()?;
        let mut page = decoder.json_list_end(envelope)?;
        let mut skipped = self.skipped;
        skipped.append(&mut page.skipped);
        page.skipped = skipped;
        Ok(page)
    }
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

/// A list item that failed its metadata decode: `Ok` (skip it) when it is
/// well-formed JSON that is not a usable object, `Err` (fail the page) when
/// it is malformed. The metadata decode stops at its first error, which can
/// be a type error before a syntax error, or invalid UTF-8 (a data error):
/// then the item is checked on its own (found by fuzzing; only on this
/// error path).
pub(crate) fn malformed_item(item: &[u8], e: BadEvent) -> Result<BadEvent, serde_json::Error> {
    match e.source {
        Some(ObjectError::Json(json))
            if matches!(json.classify(), Category::Syntax | Category::Eof) =>
        {
            Err(json)
        }
        Some(ObjectError::Json(_)) => {
            match serde_json::from_str::<serde::de::IgnoredAny>(utf8(item)?) {
                Ok(_) => Ok(e),
                Err(syntax) => Err(syntax),
            }
        }
        _ => Ok(e),
    }
}

/// `bytes` as text: serde_json does not check the UTF-8 of the strings it
/// skips (a list's members other than metadata and items), so a list is
/// checked whole (found by fuzzing: the envelope, or the body on the
/// fallback path; items are checked by their metadata decode).
pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, serde_json::Error> {
    std::str::from_utf8(bytes).map_err(|u| {
        <serde_json::Error as serde::de::Error>::custom(format_args!(
            "invalid UTF-8 at byte {}",
            u.valid_up_to()
        ))
    })
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
            list_options: options.clone().copy_bytes(true),
            blocks: (!options.strips_managed_fields() && !options.compression_mode().is_enabled())
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
        self.check_kind(wire.kind.as_deref(), wire.api_version.as_deref())?;
        let meta = wire
            .metadata
            .ok_or_else(|| bad(BadEventKind::InvalidObject, "bookmark without metadata"))?;
        let rv = meta
            .resource_version
            .filter(|rv| !rv.is_empty())
            .ok_or_else(|| {
                bad(
                    BadEventKind::InvalidObject,
                    "bookmark without metadata.resourceVersion",
                )
            })?;
        let end = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(INITIAL_EVENTS_END_ANNOTATION))
            .is_some_and(|v| v == "true");
        Ok(Bookmark {
            resource_version: rv.into_owned(),
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

    #[cfg(any(test, feature = "fuzzing"))]
    /// The page `parser` makes of a body given in `chunks`, with the items
    /// it completes as it goes followed by the ones the envelope held.
    pub(crate) fn parse_chunks<P: PageParser<K>>(
        &self,
        mut parser: P,
        chunks: impl IntoIterator<Item = Bytes>,
    ) -> Result<ListPage<K>, P::Error> {
        let mut items = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, self, |o| items.push(o))?;
        }
        let mut page = parser.finish(self)?;
        items.append(&mut page.items);
        page.items = items;
        Ok(page)
    }

    /// One item cut by a [`JsonListReader`]: `Ok(Ok)` an object,
    /// `Ok(Err)` an item that is well-formed JSON but not a usable object
    /// (skipped), `Err` malformed JSON (the page fails), as in
    /// [`decode_list`](Self::decode_list).
    fn json_list_item(
        &self,
        item: Bytes,
        shares_chunk: bool,
    ) -> Result<Result<CachedObject<K>, BadEvent>, serde_json::Error> {
        let (bytes, options) = if shares_chunk {
            self.detach_list_item(item.clone())
        } else {
            self.pack_assembled_item(item.clone())
        };
        match self.decode_object_with(bytes, options) {
            Ok(o) => Ok(Ok(o)),
            Err(e) => malformed_item(&item, e).map(Err),
        }
    }

    /// The end of a JSON list read by a [`JsonListReader`]: its envelope
    /// decoded (and so validated) by serde, and the items it holds itself
    /// (a body whose items member is not a literal `"items"` array, which
    /// serde reads).
    fn json_list_end(&self, envelope: Vec<u8>) -> Result<ListPage<K>, serde_json::Error> {
        let envelope = Bytes::from(envelope);
        let wire: ListWire<'_> = serde_json::from_str(utf8(&envelope)?)?;
        let mut items = Vec::new();
        let mut skipped = Vec::new();
        for raw in wire.items.unwrap_or_default() {
            let item = subslice(&envelope, raw.get().as_bytes());
            let (item, options) = self.detach_list_item(item);
            match self.decode_object_with(item, options) {
                Ok(o) => items.push(o),
                Err(e) => skipped.push(e),
            }
        }
        Ok(ListPage::from_wire(items, skipped, wire.metadata))
    }

    #[cfg(any(test, feature = "fuzzing"))]
    /// [`decode_list`](Self::decode_list) over a body given in chunks, as
    /// the reflector reads it: items are cut and built as they arrive. The
    /// same page (items, skipped items, metadata) and the same acceptance
    /// as `decode_list` of the whole body.
    #[doc(hidden)]
    pub fn decode_list_chunks(
        &self,
        chunks: impl IntoIterator<Item = Bytes>,
    ) -> Result<ListPage<K>, serde_json::Error> {
        self.parse_chunks(JsonPage::new(), chunks)
    }

    #[cfg(any(test, feature = "fuzzing"))]
    /// Splits a list body into items without decoding them, then builds    /// Splits a list body into items without decoding them, then builds
    /// each item's cached object. Items that fail are skipped and returned
    /// in [`ListPage::skipped`].
    ///
    /// No item keeps the page alive, so that one long-lived object does
    /// not keep a whole page (up to 500 objects) in memory: its bytes are
    /// copied once (packed into a shared block of 64 KiB, see
    /// [`ByteBlocks`]), or, when managedFields are cut, only the cut result
    /// is kept (no copy before the cut).
    ///
    /// The items are found by a structural scan (strings and brackets only)
    /// and each is validated by its metadata decode, so the body is scanned
    /// once; a body of another shape goes through a plain serde decode.
    /// Either way a syntax error anywhere fails the whole page, and an item
    /// that is valid JSON but not a usable object is skipped.
    pub fn decode_list(&self, body: &Bytes) -> Result<ListPage<K>, serde_json::Error> {
        let mut skipped = Vec::new();
        let (items, metadata) = match crate::split::split_list(body) {
            Some(split) => {
                let wire: ListWire<'_> = serde_json::from_str(utf8(&split.envelope)?)?;
                let mut items = Vec::with_capacity(split.items.len());
                for range in split.items {
                    let item = body.slice(range);
                    let (bytes, options) = self.detach_list_item(item.clone());
                    match self.decode_object_with(bytes, options) {
                        Ok(o) => items.push(o),
                        Err(e) => match malformed_item(&item, e) {
                            Ok(e) => skipped.push(e),
                            Err(syntax) => return Err(syntax),
                        },
                    }
                }
                (items, wire.metadata.map(ListMetaWire::into_owned))
            }
            None => {
                let wire: ListWire<'_> = serde_json::from_str(utf8(body)?)?;
                let raw_items = wire.items.unwrap_or_default();
                let mut items = Vec::with_capacity(raw_items.len());
                for raw in raw_items {
                    let item = subslice(body, raw.get().as_bytes());
                    let (item, options) = self.detach_list_item(item);
                    match self.decode_object_with(item, options) {
                        Ok(o) => items.push(o),
                        Err(e) => skipped.push(e),
                    }
                }
                (items, wire.metadata.map(ListMetaWire::into_owned))
            }
        };
        Ok(ListPage::from_wire(items, skipped, metadata))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type V = serde_json::Value;

    fn dec() -> EventDecoder<V> {
        EventDecoder::new(ObjectOptions::new(), Some("ConfigMap"), Some("v1"))
    }

    fn ev(s: &str) -> Result<WatchEvent<V>, BadEvent> {
        dec().decode_event(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn fast_and_slow_paths_agree() {
        let fast = r#"{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"3"}}}"#;
        let slow = r#"{ "object": {"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"3"}}, "type": "MODIFIED" }"#;
        for s in [fast, slow] {
            match ev(s).unwrap() {
                WatchEvent::Modified(o) => {
                    assert_eq!(o.key(), "a");
                    assert_eq!(o.resource_version(), Some("3"));
                    assert!(o.bytes().starts_with(b"{\"kind\""));
                }
                other => panic!("{other:?}"),
            }
        }
        // extra member after the object: the fast path must not accept a
        // truncated object
        let extra =
            r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"b"}},"x":1}"#;
        match ev(extra).unwrap() {
            WatchEvent::Added(o) => assert_eq!(
                o.bytes().as_ref(),
                br#"{"kind":"ConfigMap","metadata":{"name":"b"}}"#
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bookmarks_errors_and_bad_input() {
        match ev(r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#).unwrap() {
            WatchEvent::Bookmark(b) => assert_eq!(b, Bookmark { resource_version: "12".into(), initial_events_end: true }),
            other => panic!("{other:?}"),
        }
        match ev(r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}"#).unwrap() {
            WatchEvent::Error(e) => assert!(e.is_expired()),
            other => panic!("{other:?}"),
        }
        assert_eq!(ev("not json").unwrap_err().kind, BadEventKind::Undecodable);
        assert_eq!(
            ev(r#"{"type":"ADDED"}"#).unwrap_err().kind,
            BadEventKind::Undecodable
        );
        assert_eq!(
            ev(r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{}}}"#)
                .unwrap_err()
                .kind,
            BadEventKind::InvalidObject
        );
        assert_eq!(
            ev(r#"{"type":"ADDED","object":{"kind":"Secret","metadata":{"name":"s"}}}"#)
                .unwrap_err()
                .kind,
            BadEventKind::WrongKind
        );
        assert_eq!(
            ev(r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v2","metadata":{"name":"s"}}}"#).unwrap_err().kind,
            BadEventKind::WrongKind
        );
        assert_eq!(
            ev(r#"{"type":"WEIRD","object":{"metadata":{"name":"s"}}}"#)
                .unwrap_err()
                .kind,
            BadEventKind::UnknownType
        );
        assert_eq!(
            ev(r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{}}}"#)
                .unwrap_err()
                .kind,
            BadEventKind::InvalidObject
        );
    }

    #[test]
    fn list_syntax_errors_fail_the_page_and_unusable_items_are_skipped() {
        let d = dec();
        // a syntax error inside an item fails the whole page, whichever path
        for body in [
            &br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":tru}}]}"#[..],
            br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"} x}]}"#,
            br#"{"metadata":{"resourceVersion":9x},"items":[]}"#,
            br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"}}]} trailing"#,
            br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a\q"}}]}"#,
        ] {
            assert!(
                d.decode_list(&Bytes::copy_from_slice(body)).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // valid JSON that is not a usable object: skipped, the rest kept
        let body = Bytes::from_static(
            br#"{"metadata":{"resourceVersion":"9"},"items":[7,{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":1}},"s",{"kind":"Secret","metadata":{"name":"b"}}]}"#,
        );
        let page = d.decode_list(&body).unwrap();
        assert_eq!(page.resource_version, "9");
        assert_eq!(
            page.items.iter().map(|o| o.key()).collect::<Vec<_>>(),
            ["n/a"]
        );
        assert_eq!(page.skipped.len(), 4);
        // the envelope's other members are still decoded
        let body = Bytes::from_static(
            br#"{"kind":"ConfigMapList","items":[{"metadata":{"name":"a"}}],"metadata":{"continue":"c","resourceVersion":"3"}}"#,
        );
        let page = d.decode_list(&body).unwrap();
        assert_eq!(page.continue_token.as_deref(), Some("c"));
        assert_eq!(page.resource_version, "3");
        assert_eq!(page.items.len(), 1);
    }

    #[test]
    fn malformed_items_and_invalid_utf8_fail_the_page() {
        // found by fuzzing (tests/fuzz-checks, list_decode): the metadata
        // decode stops at a type error before a syntax error or reports
        // invalid UTF-8 as a data error, and serde skips the envelope's
        // other members without checking their UTF-8
        let d = dec();
        for body in [
            &br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":1} x}]}"#[..],
            br#"{"metadata":{"resourceVersion":"9"},"items":[1.2.3]}"#,
            b"{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[{\"\xff\x00\":{\"name\":\"a\"}}]}",
            b"{\"kind\":\"L\xffist\",\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[]}",
            // not split (no items member): the serde path
            b"{\"kind\":\"L\xffist\",\"metadata\":{\"resourceVersion\":\"9\"}}",
        ] {
            assert!(
                d.decode_list(&Bytes::copy_from_slice(body)).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // well-formed items that are not usable objects are still skipped
        let page = d
            .decode_list(&Bytes::from_static(
                br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":1}},1.5,{"metadata":{"name":"a"}}]}"#,
            ))
            .unwrap();
        assert_eq!((page.items.len(), page.skipped.len()), (1, 2));
    }

    /// The page of `body` read in chunks of `size` equals the page of the
    /// whole body (or both fail).
    fn same_page(d: &EventDecoder<V>, body: &[u8], size: usize) {
        let whole = d.decode_list(&Bytes::copy_from_slice(body));
        let chunks: Vec<Bytes> = body
            .chunks(size.max(1))
            .map(Bytes::copy_from_slice)
            .collect();
        let chunked = d.decode_list_chunks(chunks);
        let show = || format!("{} in chunks of {size}", String::from_utf8_lossy(body));
        match (whole, chunked) {
            (Ok(a), Ok(b)) => assert_eq!(a.same_content(), b.same_content(), "{}", show()),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("{}: whole {:?}, chunked {:?}", show(), a.is_ok(), b.is_ok()),
        }
    }

    #[test]
    fn json_lists_read_in_chunks_equal_the_whole_body() {
        let bodies: [&[u8]; 22] = [
            br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"9","continue":"a]b\"}"},"items":[{"metadata":{"name":"a","namespace":"n","labels":{"x":"}]"}}},7,{"metadata":{}},"s",{"metadata":{"name":"b"}},null ] , "z":[{}] }  "#,
            br#" {"items":[ ],"metadata":{"resourceVersion":"1"}}"#,
            br#"{"metadata":{"resourceVersion":"1"}}"#,
            br#"{"items":null,"metadata":{"resourceVersion":"1"}}"#,
            br#"{"it\u0065ms":[{"metadata":{"name":"e"}}],"metadata":{}}"#,
            br#"{"items":[{"metadata":{"name":"a"}}],"items":[]}"#,
            br#"{"items":[{"metadata":{"name":"a"}} {"metadata":{"name":"b"}}]}"#,
            br#"{"items":[{"metadata":{"name":"a"}},]}"#,
            br#"{"items":[,]}"#,
            br#"{"items":[1.2.3]}"#,
            br#"{"items":[{"metadata":{"name":"a"}}}"#,
            br#"{"items":[{"metadata":{"name":tru}}]}"#,
            br#"{"items":[]} trailing"#,
            br#"{"items":[] "x":1}"#,
            br#"{items:[]}"#,
            br#"{"items":[1,2"#,
            br#"[{"metadata":{"name":"a"}}]"#,
            br#""#,
            br#"   "#,
            br#"{}"#,
            br#"{"metadata":{"resourceVersion":9x},"items":[]}"#,
            b"{\"kind\":\"L\xffist\",\"items\":[{\"metadata\":{\"name\":\"a\"}}]}",
        ];
        for options in [
            ObjectOptions::new(),
            ObjectOptions::new().strip_managed_fields(true),
        ] {
            let d = EventDecoder::<V>::new(options, None, None);
            for body in bodies {
                for size in 1..=body.len().max(1) {
                    same_page(&d, body, size);
                }
            }
        }
    }

    #[test]
    fn json_list_items_read_in_chunks_own_their_bytes() {
        let body = br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":"b","namespace":"n"}}]}"#;
        for size in [7, 40, body.len()] {
            let chunks: Vec<Bytes> = body.chunks(size).map(Bytes::copy_from_slice).collect();
            let ranges: Vec<_> = chunks
                .iter()
                .map(|c| c.as_ptr() as usize..c.as_ptr() as usize + c.len())
                .collect();
            let page = dec().decode_list_chunks(chunks.clone()).unwrap();
            assert_eq!(page.items.len(), 2);
            for item in &page.items {
                let p = item.bytes().as_ptr() as usize;
                assert!(ranges.iter().all(|r| !r.contains(&p)), "chunks of {size}");
            }
            assert_eq!(
                page.items[1].bytes().as_ref(),
                br#"{"metadata":{"name":"b","namespace":"n"}}"#
            );
            // items cut from one chunk and items assembled from several
            // are packed one after the other into a shared block (see
            // ByteBlocks), not a buffer each
            let (a, b) = (page.items[0].bytes(), page.items[1].bytes());
            assert_eq!(
                a.as_ptr().wrapping_add(a.len()),
                b.as_ptr(),
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn list_items_get_buffers_of_their_own_when_compressed_at_ingest() {
        let d = EventDecoder::<V>::new(
            ObjectOptions::new().compression(kcache_core::Compression::lz4()),
            None,
            None,
        );
        let body = Bytes::from_static(br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":"b","namespace":"n"}}]}"#);
        let page = d.decode_list(&body).unwrap();
        assert_eq!(page.items.len(), 2);
        assert!(d.blocks.is_none());
    }

    #[test]
    fn list_shard_info_echo_is_read_by_every_json_path() {
        let sel = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
        let with = Bytes::from(format!(
            r#"{{"kind":"ConfigMapList","metadata":{{"resourceVersion":"9","shardInfo":{{"selector":"{sel}"}}}},"items":[{{"metadata":{{"name":"a"}}}}]}}"#
        ));
        let without = Bytes::from_static(
            br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"9"},"items":[]}"#,
        );
        let d = dec();
        for (body, expect) in [(&with, Some(sel)), (&without, None)] {
            let whole = d.decode_list(body).unwrap();
            assert_eq!(whole.shard_selector.as_deref(), expect);
            let chunks = body.chunks(5).map(Bytes::copy_from_slice);
            let streamed = d.decode_list_chunks(chunks).unwrap();
            assert_eq!(streamed.shard_selector.as_deref(), expect);
        }
    }

    #[test]
    fn list_items_are_exact_size_copies() {
        let body = Bytes::from_static(br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"9","continue":"abc"},"items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{}},{"metadata":{"name":"b"}}]}"#);
        let page = dec().decode_list(&body).unwrap();
        assert_eq!(page.resource_version, "9");
        assert_eq!(page.continue_token.as_deref(), Some("abc"));
        assert_eq!(page.items.len(), 2);
        assert_eq!(page.skipped.len(), 1);
        let p = page.items[0].bytes().as_ptr() as usize;
        assert!(!(p > body.as_ptr() as usize && p < body.as_ptr() as usize + body.len()));
        assert_eq!(
            page.items[0].bytes().as_ref(),
            br#"{"metadata":{"name":"a","namespace":"n"}}"#
        );
        let empty = dec()
            .decode_list(&Bytes::from_static(
                br#"{"metadata":{"resourceVersion":"1","continue":""},"items":null}"#,
            ))
            .unwrap();
        assert!(empty.items.is_empty() && empty.continue_token.is_none());
    }

    fn pb(out: &mut Vec<u8>, n: u8, b: &[u8]) {
        out.push(n << 3 | 2);
        out.push(b.len() as u8);
        out.extend_from_slice(b);
    }

    /// A ConfigMap's protobuf: name, namespace "n", a managedFields entry.
    fn pb_cm(name: &str) -> Vec<u8> {
        let mut mf = Vec::new();
        pb(&mut mf, 1, b"kubectl");
        let mut meta = Vec::new();
        pb(&mut meta, 1, name.as_bytes());
        pb(&mut meta, 3, b"n");
        meta.extend_from_slice(&[17 << 3 | 2, 1, mf.len() as u8]);
        meta.extend_from_slice(&mf);
        let mut cm = Vec::new();
        pb(&mut cm, 1, &meta);
        cm
    }

    fn pb_list(kind: &str, items: &[Vec<u8>]) -> Bytes {
        let mut meta = Vec::new();
        pb(&mut meta, 2, b"9");
        let mut list = Vec::new();
        pb(&mut list, 1, &meta);
        for i in items {
            pb(&mut list, 2, i);
        }
        let mut tm = Vec::new();
        pb(&mut tm, 1, b"v1");
        pb(&mut tm, 2, kind.as_bytes());
        let mut body = b"k8s\0".to_vec();
        pb(&mut body, 1, &tm);
        body.extend_from_slice(&[2 << 3 | 2]);
        let mut len = Vec::new();
        let mut v = list.len();
        while v >= 0x80 {
            len.push((v as u8) | 0x80);
            v >>= 7;
        }
        len.push(v as u8);
        body.extend_from_slice(&len);
        body.extend_from_slice(&list);
        Bytes::from(body)
    }

    #[test]
    fn protobuf_list_items_are_own_buffers_and_bad_ones_skipped() {
        let nameless = {
            let mut cm = Vec::new();
            pb(&mut cm, 1, &[]);
            cm
        };
        let body = pb_list(
            "ConfigMapList",
            &[pb_cm("a"), nameless, vec![0x0a, 0x7f], pb_cm("b")],
        );
        for options in [
            ObjectOptions::new(),
            ObjectOptions::new().strip_managed_fields(true),
        ] {
            let dec = EventDecoder::<V>::new(options.clone(), Some("ConfigMap"), Some("v1"));
            let page = dec.decode_protobuf_list(&body).unwrap();
            assert_eq!(page.resource_version, "9");
            assert_eq!(page.continue_token, None);
            let keys: Vec<_> = page.items.iter().map(|o| o.key()).collect();
            assert_eq!(keys, ["n/a", "n/b"]);
            assert_eq!(page.skipped.len(), 2);
            assert!(
                page.skipped
                    .iter()
                    .all(|b| b.kind == BadEventKind::InvalidObject)
            );
            // no item keeps the body alive
            let range = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
            for item in &page.items {
                assert_eq!(item.format(), kcache_core::Format::Protobuf);
                assert!(!range.contains(&(item.bytes().as_ptr() as usize)));
                let v = item.decode().unwrap();
                assert_eq!(v["kind"], "ConfigMap");
                assert_eq!(
                    v["metadata"].get("managedFields").is_some(),
                    !options.strips_managed_fields()
                );
            }
        }
        // items of another kind are skipped as such; a malformed list fails
        let page = dec()
            .decode_protobuf_list(&pb_list("SecretList", &[pb_cm("a")]))
            .unwrap();
        assert_eq!(page.skipped[0].kind, BadEventKind::WrongKind);
        assert!(
            dec()
                .decode_protobuf_list(&body.slice(..body.len() - 3))
                .is_err()
        );
        assert!(
            dec()
                .decode_protobuf_list(&Bytes::from_static(b"{}"))
                .is_err()
        );
    }

    #[test]
    fn protobuf_events_bookmarks_and_errors() {
        let frame = |ty: &str, object: &[u8]| {
            let mut raw = Vec::new();
            pb(&mut raw, 1, object);
            let mut ev = Vec::new();
            pb(&mut ev, 1, ty.as_bytes());
            pb(&mut ev, 2, &raw);
            Bytes::from(ev)
        };
        let envelope = |kind: &str, raw: &[u8]| {
            let mut tm = Vec::new();
            pb(&mut tm, 1, b"v1");
            pb(&mut tm, 2, kind.as_bytes());
            let mut out = b"k8s\0".to_vec();
            pb(&mut out, 1, &tm);
            pb(&mut out, 2, raw);
            out
        };
        let d = dec();
        match d.decode_protobuf_event(frame("MODIFIED", &envelope("ConfigMap", &pb_cm("a")))) {
            Ok(WatchEvent::Modified(o)) => {
                assert_eq!(o.key(), "n/a");
                assert_eq!(o.format(), kcache_core::Format::Protobuf);
            }
            other => panic!("{other:?}"),
        }
        let mut meta = Vec::new();
        pb(&mut meta, 6, b"12");
        let mut entry = Vec::new();
        pb(&mut entry, 1, b"k8s.io/initial-events-end");
        pb(&mut entry, 2, b"true");
        pb(&mut meta, 12, &entry);
        let mut bm = Vec::new();
        pb(&mut bm, 1, &meta);
        match d.decode_protobuf_event(frame("BOOKMARK", &envelope("ConfigMap", &bm))) {
            Ok(WatchEvent::Bookmark(b)) => assert_eq!(
                b,
                Bookmark {
                    resource_version: "12".into(),
                    initial_events_end: true
                }
            ),
            other => panic!("{other:?}"),
        }
        let mut st = Vec::new();
        pb(&mut st, 4, b"Expired");
        st.extend_from_slice(&[6 << 3, 0x9a, 0x03]);
        match d.decode_protobuf_event(frame("ERROR", &envelope("Status", &st))) {
            Ok(WatchEvent::Error(e)) => assert!(e.is_expired() && e.code == 410),
            other => panic!("{other:?}"),
        }
        let kind = |r: Result<WatchEvent<V>, BadEvent>| r.unwrap_err().kind;
        assert_eq!(
            kind(d.decode_protobuf_event(Bytes::from_static(b"\x0a\x09A"))),
            BadEventKind::Undecodable
        );
        assert_eq!(
            kind(d.decode_protobuf_event(frame("WEIRD", &envelope("ConfigMap", &pb_cm("a"))))),
            BadEventKind::UnknownType
        );
        assert_eq!(
            kind(d.decode_protobuf_event(frame("ADDED", &envelope("Secret", &pb_cm("a"))))),
            BadEventKind::WrongKind
        );
        assert_eq!(
            kind(d.decode_protobuf_event(frame("ADDED", b"{\"kind\":\"ConfigMap\"}"))),
            BadEventKind::InvalidObject
        );
        assert_eq!(
            kind(d.decode_protobuf_event(frame("BOOKMARK", &envelope("ConfigMap", &[])))),
            BadEventKind::InvalidObject
        );
    }

    #[test]
    fn list_items_are_own_buffers_when_stripping_managed_fields() {
        let dec = EventDecoder::<V>::new(
            ObjectOptions::new().strip_managed_fields(true),
            Some("ConfigMap"),
            Some("v1"),
        );
        let body = Bytes::from_static(br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a","managedFields":[{"manager":"m"}]}},{"metadata":{"name":"b"}}]}"#);
        let page = dec.decode_list(&body).unwrap();
        assert_eq!(page.items.len(), 2);
        let range = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
        for item in &page.items {
            assert!(!range.contains(&(item.bytes().as_ptr() as usize)));
        }
        assert_eq!(
            page.items[0].bytes().as_ref(),
            br#"{"metadata":{"name":"a"}}"#
        );
        assert_eq!(
            page.items[1].bytes().as_ref(),
            br#"{"metadata":{"name":"b"}}"#
        );
    }
}
