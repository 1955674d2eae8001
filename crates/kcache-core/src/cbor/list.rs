//! A CBOR list body (`{"kind": "WidgetList", "items": [...], "metadata":
//! {...}}`) read as it arrives: each item cut as soon as its last byte is
//! in, the envelope read at the end; and the parts of a CBOR watch event.

use std::borrow::Cow;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use serde::Deserialize;

use super::CborError;
use super::reader::{Item, Reader, key_content};

/// What a CBOR list says besides its items.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListSummary {
    /// `kind`, when present.
    pub kind: Option<String>,
    /// `apiVersion`, when present.
    pub api_version: Option<String>,
    /// `metadata.resourceVersion` (empty when absent).
    pub resource_version: String,
    /// `metadata.continue` (empty when absent).
    pub continue_token: String,
    /// `metadata.shardInfo.selector`: the shard selector the apiserver
    /// filtered the list with (KEP-5866).
    pub shard_selector: Option<String>,
}

#[derive(Deserialize, Default)]
struct ListMetaWire {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
    #[serde(default, rename = "shardInfo")]
    shard_info: Option<ShardInfoWire>,
}

#[derive(Deserialize, Default)]
struct ShardInfoWire {
    #[serde(default)]
    selector: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the top-level map's head.
    Head,
    /// Between entries of the top-level map (`None`: indefinite length).
    Entries(Option<u64>),
    /// Inside `items`, then the entries left after it.
    Items {
        items: Option<u64>,
        entries: Option<u64>,
    },
    /// After the top-level map.
    Done,
}

/// Reads a CBOR list body chunk by chunk (what a reflector does with a
/// list response of `application/cbor`): [`next_item`](Self::next_item)
/// cuts each item of `items` as soon as its last byte has been pushed, so
/// the body is never held whole; [`finish`](Self::finish) reads the rest
/// of the envelope. The top-level map's keys are checked for duplicates,
/// each item only for being one well-formed data item (its object is
/// checked when it is built).
///
/// ```
/// use bytes::Bytes;
/// use kcache_core::cbor::ListReader;
/// // {"items": [{"a": 1}], "metadata": {"resourceVersion": "7"}}, byte-string keys
/// let body = b"\xd9\xd9\xf7\xa2\x45items\x81\xa1\x41a\x01\x48metadata\xa1\x4fresourceVersion\x417";
/// let mut reader = ListReader::new();
/// let mut items = Vec::new();
/// for chunk in body.chunks(5) {
///     reader.push(chunk);
///     while let Some(item) = reader.next_item()? {
///         items.push(item);
///     }
/// }
/// assert_eq!(items, [Bytes::from_static(b"\xa1\x41a\x01")]);
/// assert_eq!(reader.finish()?.resource_version, "7");
/// # Ok::<_, kcache_core::cbor::CborError>(())
/// ```
#[derive(Debug)]
pub struct ListReader {
    buf: BytesMut,
    /// Stream offset of `buf[0]` (for error offsets).
    offset: usize,
    stage: Stage,
    /// Whether bytes were pushed since the last attempt found the front
    /// item incomplete (it is not rescanned until they were).
    grown: bool,
    keys: Vec<Vec<u8>>,
    summary: ListSummary,
    metadata: Option<Bytes>,
}

impl Default for ListReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ListReader {
    /// A reader at the start of a body.
    pub fn new() -> Self {
        ListReader {
            buf: BytesMut::new(),
            offset: 0,
            stage: Stage::Head,
            grown: true,
            keys: Vec::new(),
            summary: ListSummary::default(),
            metadata: None,
        }
    }

    /// Adds the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
        self.grown |= !chunk.is_empty();
    }

    /// The bytes pushed and not yet cut.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    fn consume(&mut self, n: usize) -> Bytes {
        self.offset += n;
        self.buf.split_to(n).freeze()
    }

    fn shift(&self, e: CborError) -> CborError {
        match e {
            CborError::Truncated { offset } => CborError::Truncated {
                offset: offset + self.offset,
            },
            CborError::Invalid { offset, reason } => CborError::Invalid {
                offset: offset + self.offset,
                reason,
            },
            other => other,
        }
    }

    /// The length of the complete data item at the front, `None` when more
    /// bytes are needed.
    fn complete(&mut self) -> Result<Option<usize>, CborError> {
        if !self.grown {
            return Ok(None);
        }
        match super::item_len(&self.buf) {
            Ok(Some(n)) => Ok(Some(n)),
            Ok(None) => {
                self.grown = false;
                Ok(None)
            }
            Err(e) => Err(self.shift(e)),
        }
    }

    /// A head at the front (a map's, an array's): its item and length, or
    /// `None` when more bytes are needed.
    fn head(&self) -> Result<Option<(Item<'_>, usize)>, CborError> {
        let mut r = Reader::new(&self.buf);
        match r.next() {
            Ok(item) => Ok(Some((item, r.position()))),
            Err(CborError::Truncated { .. }) => Ok(None),
            Err(e) => Err(self.shift(e)),
        }
    }

    /// The next item of `items` the chunks pushed so far complete, as a
    /// slice of the reader's buffer (copy it to keep it beyond the page):
    /// `None` when more bytes are needed, or when the items are over. A
    /// malformed body is an error.
    pub fn next_item(&mut self) -> Result<Option<Bytes>, CborError> {
        loop {
            match self.stage {
                Stage::Done => return Ok(None),
                Stage::Head => {
                    // the self-described tag, as many times as it comes
                    // (the decode reads through each): consumed as each
                    // arrives, so the chunking cannot change how many
                    while self.buf.starts_with(&[0xd9, 0xd9, 0xf7]) {
                        self.consume(3);
                    }
                    if self.buf.len() < 3 && [0xd9, 0xd9, 0xf7].starts_with(&self.buf) {
                        return Ok(None);
                    }
                    let Some((item, len)) = self.head()? else {
                        return Ok(None);
                    };
                    let Item::Map(n) = item else {
                        return Err(self.shift(CborError::Invalid {
                            offset: 0,
                            reason: "a list body that is not a map",
                        }));
                    };
                    self.consume(len);
                    self.stage = Stage::Entries(n);
                }
                Stage::Entries(Some(0)) => self.stage = Stage::Done,
                Stage::Entries(left) => {
                    if left.is_none() {
                        match self.buf.first() {
                            None => return Ok(None),
                            Some(0xff) => {
                                self.consume(1);
                                self.stage = Stage::Done;
                                continue;
                            }
                            Some(_) => {}
                        }
                    }
                    if !self.entry(left)? {
                        return Ok(None);
                    }
                }
                Stage::Items { items, entries } => {
                    let over = match items {
                        Some(n) => n == 0,
                        None => match self.buf.first() {
                            None => return Ok(None),
                            Some(0xff) => {
                                self.consume(1);
                                true
                            }
                            Some(_) => false,
                        },
                    };
                    if over {
                        self.stage = Stage::Entries(entries);
                        continue;
                    }
                    let Some(n) = self.complete()? else {
                        return Ok(None);
                    };
                    let item = self.consume(n);
                    self.stage = Stage::Items {
                        items: items.map(|n| n - 1),
                        entries,
                    };
                    return Ok(Some(item));
                }
            }
        }
    }

    /// Reads one entry of the top-level map: its key, and its value unless
    /// it is `items` (then the array's head). `false` when more bytes are
    /// needed.
    fn entry(&mut self, left: Option<u64>) -> Result<bool, CborError> {
        let entries = left.map(|n| n - 1);
        let mut r = Reader::new(&self.buf);
        let key = match key_content(&mut r) {
            Ok(k) => k.into_owned(),
            Err(CborError::Truncated { .. }) => return Ok(false),
            Err(e) => return Err(self.shift(e)),
        };
        let key_len = r.position();
        if key == b"items" {
            let mut r = Reader::at(&self.buf, key_len);
            let items = match r.next() {
                Ok(Item::Array(n)) => n,
                Ok(Item::Null) => Some(0),
                Ok(_) => {
                    return Err(self.shift(CborError::Invalid {
                        offset: key_len,
                        reason: "list items that are not an array",
                    }));
                }
                Err(CborError::Truncated { .. }) => return Ok(false),
                Err(e) => return Err(self.shift(e)),
            };
            let head = r.position();
            self.check_key(key)?;
            self.consume(head);
            self.stage = Stage::Items { items, entries };
            return Ok(true);
        }
        let value_len = match super::item_len(&self.buf[key_len..]) {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(false),
            Err(e) => {
                let e = match e {
                    CborError::Invalid { offset, reason } => CborError::Invalid {
                        offset: offset + key_len,
                        reason,
                    },
                    other => other,
                };
                return Err(self.shift(e));
            }
        };
        self.check_key(key.clone())?;
        self.consume(key_len);
        let value = self.consume(value_len);
        self.stage = Stage::Entries(entries);
        let string = || super::decode::<Option<String>>(&value);
        match key.as_slice() {
            b"kind" => self.summary.kind = string()?,
            b"apiVersion" => self.summary.api_version = string()?,
            b"metadata" => self.metadata = Some(value),
            _ => {}
        }
        Ok(true)
    }

    fn check_key(&mut self, key: Vec<u8>) -> Result<(), CborError> {
        if self.keys.contains(&key) {
            return Err(CborError::Invalid {
                offset: self.offset,
                reason: "a duplicate key in the list",
            });
        }
        self.keys.push(key);
        Ok(())
    }

    /// The end of the body: the list's kind and metadata. A body that ends
    /// inside the list, or has bytes after it, is an error; call
    /// [`next_item`](Self::next_item) until it returns `None` first (items
    /// left uncut are an error too).
    pub fn finish(mut self) -> Result<ListSummary, CborError> {
        if self.stage != Stage::Done {
            let cut = self.next_item()?;
            let done = self.stage == Stage::Done;
            if cut.is_some() || !done {
                return Err(CborError::Truncated {
                    offset: self.offset,
                });
            }
        }
        if !self.buf.is_empty() {
            return Err(CborError::Trailing(self.buf.len()));
        }
        if let Some(meta) = self.metadata.take() {
            let m: Option<ListMetaWire> = super::decode(&meta)?;
            let m = m.unwrap_or_default();
            self.summary.resource_version = m.resource_version.unwrap_or_default();
            self.summary.continue_token = m.continue_.unwrap_or_default();
            self.summary.shard_selector = m.shard_info.and_then(|s| s.selector);
        }
        Ok(self.summary)
    }
}

/// The parts of one CBOR watch event (`{"type": "ADDED", "object":
/// {...}}`, one item of an `application/cbor-seq` stream): its type and
/// where its object is in `event`. Keys are checked for duplicates; the
/// object is only checked for being one well-formed data item.
///
/// ```
/// use kcache_core::cbor;
/// let event = b"\xa2\x44type\x45ADDED\x46object\xa1\x41a\x01";
/// let (ty, object) = cbor::watch_event(event)?;
/// assert_eq!(ty, "ADDED");
/// assert_eq!(&event[object], b"\xa1\x41a\x01");
/// # Ok::<_, kcache_core::cbor::CborError>(())
/// ```
pub fn watch_event(event: &[u8]) -> Result<(Cow<'_, str>, Range<usize>), CborError> {
    let mut r = Reader::new(event);
    r.skip_self_described();
    let n = match r.next()? {
        Item::Map(n) => n,
        _ => return Err(r.error("a watch event that is not a map")),
    };
    let mut ty = None;
    let mut object = None;
    let mut left = n;
    while r.next_entry(&mut left)? {
        let at = r.position();
        let key = key_content(&mut r)?;
        let slot_taken = match key.as_ref() {
            b"type" => {
                let taken = ty.is_some();
                ty = Some(r.string()?);
                taken
            }
            b"object" => {
                let taken = object.is_some();
                let start = r.position();
                r.skip()?;
                object = Some(start..r.position());
                taken
            }
            _ => {
                r.skip()?;
                false
            }
        };
        if slot_taken {
            return Err(CborError::Invalid {
                offset: at,
                reason: "a duplicate key in a watch event",
            });
        }
    }
    if !r.is_empty() {
        return Err(CborError::Trailing(event.len() - r.position()));
    }
    match (ty, object) {
        (Some(t), Some(o)) => Ok((t, o)),
        (None, _) => Err(r.error("a watch event without type")),
        (_, None) => Err(r.error("a watch event without object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CBOR byte string (how the apiserver writes strings).
    fn bs(s: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        match s.len() {
            n @ 0..=23 => v.push(0x40 | n as u8),
            n if n < 256 => v.extend([0x58, n as u8]),
            n => v.extend([0x59, (n >> 8) as u8, n as u8]),
        }
        v.extend_from_slice(s);
        v
    }

    fn obj(name: &str) -> Vec<u8> {
        let mut v = vec![0xa1];
        v.extend(bs(b"metadata"));
        v.push(0xa1);
        v.extend(bs(b"name"));
        v.extend(bs(name.as_bytes()));
        v
    }

    /// A list in the apiserver's canonical key order (kind, items,
    /// metadata, apiVersion).
    fn list(items: &[Vec<u8>], indefinite: bool) -> Vec<u8> {
        let mut v = vec![0xd9, 0xd9, 0xf7, 0xa4];
        v.extend(bs(b"kind"));
        v.extend(bs(b"WidgetList"));
        v.extend(bs(b"items"));
        if indefinite {
            v.push(0x9f);
        } else {
            v.push(0x80 | items.len() as u8);
        }
        for i in items {
            v.extend(i);
        }
        if indefinite {
            v.push(0xff);
        }
        v.extend(bs(b"metadata"));
        v.push(0xa2);
        v.extend(bs(b"continue"));
        v.extend(bs(b"tok"));
        v.extend(bs(b"resourceVersion"));
        v.extend(bs(b"42"));
        v.extend(bs(b"apiVersion"));
        v.extend(bs(b"example.com/v1"));
        v
    }

    fn read(chunks: &[&[u8]]) -> Result<(Vec<Bytes>, ListSummary), CborError> {
        let mut r = ListReader::new();
        let mut items = Vec::new();
        for c in chunks {
            r.push(c);
            while let Some(i) = r.next_item()? {
                items.push(i);
            }
        }
        Ok((items, r.finish()?))
    }

    #[test]
    fn items_and_envelope_at_every_split_point() {
        let items = [obj("a"), obj("b"), obj("c")];
        for indefinite in [false, true] {
            let body = list(&items, indefinite);
            let (whole, summary) = read(&[&body]).unwrap();
            assert_eq!(whole.len(), 3);
            assert_eq!(whole[1].as_ref(), items[1].as_slice());
            assert_eq!(summary.kind.as_deref(), Some("WidgetList"));
            assert_eq!(summary.api_version.as_deref(), Some("example.com/v1"));
            assert_eq!(summary.resource_version, "42");
            assert_eq!(summary.continue_token, "tok");
            for i in 0..body.len() {
                for j in i..body.len() {
                    let (cut, s) = read(&[&body[..i], &body[i..j], &body[j..]]).unwrap();
                    assert_eq!(cut, whole, "cut at {i}, {j}");
                    assert_eq!(s, summary);
                }
            }
        }
    }

    #[test]
    fn a_repeated_self_described_tag_reads_the_same_in_any_chunks() {
        // 55799(55799({...})) (found by the cbor_list fuzz smoke: whole, the
        // second tag failed the body; in chunks of 4, each tag was consumed
        // on its own push and the body read)
        let mut body = vec![0xd9, 0xd9, 0xf7];
        body.extend(list(&[obj("a")], false));
        for size in [1, 2, 3, 4, 5, body.len()] {
            let mut reader = ListReader::new();
            let mut items = Vec::new();
            for chunk in body.chunks(size) {
                reader.push(chunk);
                while let Some(item) = reader.next_item().unwrap() {
                    items.push(item);
                }
            }
            assert_eq!(items, [Bytes::from(obj("a"))], "chunks of {size}");
            reader.finish().unwrap();
        }
    }

    #[test]
    fn a_tagged_key_reads_as_the_decode_reads_it() {
        // {13("items"): [obj], "metadata": {"resourceVersion": "3"}} (found
        // by the cbor_list fuzz smoke: the decode read `items` through the
        // tag, the list reader saw an unknown key and no items)
        let mut body = vec![0xa2, 0xcd];
        body.extend(bs(b"items"));
        body.push(0x81);
        body.extend(obj("a"));
        body.extend(bs(b"metadata"));
        body.push(0xa1);
        body.extend(bs(b"resourceVersion"));
        body.extend(bs(b"3"));
        let mut reader = ListReader::new();
        reader.push(&body);
        assert_eq!(reader.next_item().unwrap(), Some(Bytes::from(obj("a"))));
        assert_eq!(reader.next_item().unwrap(), None);
        assert_eq!(reader.finish().unwrap().resource_version, "3");
        let v: serde_json::Value = super::super::decode(&body).unwrap();
        assert_eq!(v["items"][0]["metadata"]["name"], "a");
    }

    #[test]
    fn every_truncation_is_an_error() {
        let body = list(&[obj("a"), obj("b")], false);
        for i in 0..body.len() {
            assert!(read(&[&body[..i]]).is_err(), "truncated at {i}");
        }
        let mut long = body.clone();
        long.push(0x01);
        assert_eq!(read(&[&long]).unwrap_err(), CborError::Trailing(1));
    }

    #[test]
    fn bad_shapes_and_duplicate_keys_fail() {
        assert!(read(&[b"\x81\x01"]).is_err()); // an array, not a map
        let mut items_not_array = vec![0xa1];
        items_not_array.extend(bs(b"items"));
        items_not_array.push(0x01);
        assert!(read(&[&items_not_array]).is_err());
        let mut dup = vec![0xa2];
        for _ in 0..2 {
            dup.extend(bs(b"kind"));
            dup.extend(bs(b"X"));
        }
        assert!(matches!(
            read(&[&dup]),
            Err(CborError::Invalid { reason, .. }) if reason.contains("duplicate")
        ));
        // an empty list, items null
        let mut empty = vec![0xa1];
        empty.extend(bs(b"items"));
        empty.push(0xf6);
        assert!(read(&[&empty]).unwrap().0.is_empty());
        // an item that is not well formed: the page fails
        let bad = list(&[vec![0x1c]], false);
        assert!(read(&[&bad]).is_err());
    }

    #[test]
    fn a_long_item_is_cut_once_complete_and_scanned_once_per_chunk() {
        let big = obj(&"x".repeat(60_000));
        let body = list(std::slice::from_ref(&big), false);
        let mut r = ListReader::new();
        let mut got = None;
        for c in body.chunks(100) {
            r.push(c);
            if let Some(i) = r.next_item().unwrap() {
                got = Some(i);
            }
            // no rescan without new bytes
            assert!(!r.grown || got.is_some());
            assert_eq!(r.next_item().unwrap(), None);
        }
        assert_eq!(got.unwrap().as_ref(), big.as_slice());
        r.finish().unwrap();
    }

    #[test]
    fn watch_event_parts() {
        let mut ev = vec![0xa2];
        ev.extend(bs(b"type"));
        ev.extend(bs(b"MODIFIED"));
        ev.extend(bs(b"object"));
        let o = obj("a");
        ev.extend(&o);
        let (ty, range) = watch_event(&ev).unwrap();
        assert_eq!(ty, "MODIFIED");
        assert_eq!(&ev[range], o.as_slice());
        assert!(watch_event(&ev[..ev.len() - 1]).is_err());
        let mut dup = ev.clone();
        dup[0] = 0xa3;
        dup.extend(bs(b"type"));
        dup.extend(bs(b"ADDED"));
        assert!(watch_event(&dup).is_err());
        let mut no_object = vec![0xa1];
        no_object.extend(bs(b"type"));
        no_object.extend(bs(b"ADDED"));
        assert!(watch_event(&no_object).is_err());
    }
}
