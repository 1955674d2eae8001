//! List pages: [`ListPage`], the page parsers a list body is read with
//! as it arrives ([`PageParser`], and [`ListParser`], the one type the
//! reflector holds for every format), the JSON page parser
//! ([`JsonPage`]) and the whole-body JSON list decode
//! ([`EventDecoder::decode_list`]).

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use kcache_core::{CachedObject, ObjectError};
use serde::Deserialize;
use serde_json::error::Category;
use serde_json::value::RawValue;

use super::{EventDecoder, subslice};
use crate::error::{BadEvent, ListBodyError};
use crate::split::JsonListReader;
#[cfg(doc)]
use kcache_core::ByteBlocks;

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
    /// A page whose items were handed out one by one (a streamed binary
    /// list): what its `metadata` said, an empty `continue` as none, and
    /// the items it skipped.
    pub(crate) fn streamed(
        resource_version: String,
        continue_token: String,
        shard_selector: Option<String>,
        skipped: Vec<BadEvent>,
    ) -> Self {
        ListPage {
            items: Vec::new(),
            resource_version,
            continue_token: (!continue_token.is_empty()).then_some(continue_token),
            shard_selector,
            skipped,
        }
    }

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

impl<K> EventDecoder<K> {
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
    /// Splits a list body into items without decoding them, then builds
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
