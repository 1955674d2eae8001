//! A protobuf list body read as it arrives: each item is cut as soon as its
//! bytes are in, so a body of any size is never held whole.
//!
//! The body is `k8s\0` + `runtime.Unknown` {1 typeMeta, 2 raw, 3
//! contentEncoding, 4 contentType}, and `raw` is the list {1 ListMeta,
//! 2 items...}. Every length prefix comes before the bytes it counts, so
//! the reader knows where each item ends before the item has arrived: it
//! keeps only the chunks of the item being cut (and of the small envelope
//! fields), and hands every complete item out at once.
//!
//! What it accepts is what [`Unknown::decode`] then [`List::decode`] accept
//! on the whole body, with the same errors, plus three rules a reader that
//! hands items out before the end needs: `typeMeta` and `raw` appear at
//! most once, and `typeMeta` names a list kind (`...List`).
//!
//! [`Unknown::decode`]: super::Unknown::decode
//! [`List::decode`]: super::List::decode

use std::collections::VecDeque;

use bytes::Bytes;

use super::envelope::{CONTENT_TYPE, MAGIC, TypeMeta, item_kind, list_meta, type_meta};
use super::wire::WireError;

/// The longest field header: a tag (at most 10 bytes) and a varint value
/// or length prefix (at most 10 bytes); a fixed64 needs 18.
const MAX_HEADER: usize = 20;

/// One item of a list, cut from the body by [`ListReader`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListItem {
    /// The item's own protobuf message (its type: [`ListReader::item_type`]).
    pub bytes: Bytes,
    /// Whether `bytes` is a slice of a chunk given to [`ListReader::push`]
    /// (it keeps that whole chunk alive: copy it to keep it long), rather
    /// than a buffer of its own holding exactly the item (an item that
    /// spanned chunks).
    pub shares_chunk: bool,
}

/// What a list body said besides its items, once it has been read whole
/// ([`ListReader::finish`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ListSummary {
    /// The list's `apiVersion` (`v1`, `apps/v1`...).
    pub api_version: String,
    /// The list's kind (`PodList`...).
    pub kind: String,
    /// `metadata.resourceVersion` (empty when absent).
    pub resource_version: String,
    /// `metadata.continue` (empty: the last page).
    pub continue_token: String,
    /// `metadata.remainingItemCount`, when the server sent it.
    pub remaining_item_count: Option<i64>,
    /// `metadata.shardInfo.selector` (KEP-5866), when the server filtered.
    pub shard_selector: Option<String>,
    /// How many items the list had.
    pub items: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The 4 magic bytes.
    Magic,
    /// Between the envelope's fields.
    Envelope,
    /// Between the list's fields; the list ends at this stream offset.
    List { end: u64 },
    /// Skipping a field's value up to this offset, then back to the list
    /// (ending at `list_end`) or the envelope.
    Skip { until: u64, list_end: Option<u64> },
}

/// A field's tag and what follows it up to its value (or the value itself
/// when it is a varint or fixed-size).
#[derive(Debug, Clone, Copy)]
struct Header {
    number: u64,
    wire_type: u8,
    /// Bytes of the tag and, for a length-delimited field, its length
    /// prefix; for the other wire types, the whole field.
    len: usize,
    /// The length of a length-delimited value.
    value_len: u64,
}

/// Reads a protobuf list body chunk by chunk, cutting each item out as soon
/// as its bytes have arrived.
///
/// ```
/// use bytes::Bytes;
/// use kcache_core::protobuf::ListReader;
///
/// let body = kcache_core::protobuf::doc_example_pod_list();
/// let mut reader = ListReader::new();
/// let mut names = Vec::new();
/// for chunk in body.chunks(5) {
///     reader.push(Bytes::copy_from_slice(chunk));
///     while let Some(item) = reader.next_item()? {
///         let tm = reader.item_type().expect("known once an item is out");
///         let pod: serde_json::Value = kcache_core::protobuf::decode(&item.bytes, tm)?;
///         names.push(pod["metadata"]["name"].as_str().unwrap().to_owned());
///     }
/// }
/// let summary = reader.finish()?;
/// assert_eq!(names, ["web-0"]);
/// assert_eq!((summary.kind.as_str(), summary.resource_version.as_str()), ("PodList", "42"));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ListReader {
    chunks: VecDeque<Bytes>,
    /// Bytes in `chunks`.
    buffered: usize,
    /// Stream offset of the first byte in `chunks`.
    pos: u64,
    stage: Stage,
    /// `typeMeta`, once read.
    type_meta: Option<(String, String)>,
    content_encoding: String,
    content_type: String,
    have_raw: bool,
    /// The list's `ListMeta` message, once read.
    meta: Option<Bytes>,
    /// Items cut before `typeMeta` was read (a body that sends `raw` first).
    held: VecDeque<ListItem>,
    items: usize,
}

impl Default for ListReader {
    fn default() -> Self {
        Self::new()
    }
}

/// A varint at the start of `b`: `Ok(None)` when `b` ends inside it.
fn varint(b: &[u8], offset: u64) -> Result<Option<(u64, usize)>, WireError> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let Some(&byte) = b.get(i) else {
            return Ok(None);
        };
        if i == 9 && byte > 1 {
            return Err(WireError::Varint {
                offset: offset as usize,
            });
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Ok(Some((value, i + 1)));
        }
    }
    Err(WireError::Varint {
        offset: offset as usize,
    })
}

/// The field header at the start of `b` (`Ok(None)`: `b` ends inside it).
fn header(b: &[u8], offset: u64) -> Result<Option<Header>, WireError> {
    let Some((tag, tag_len)) = varint(b, offset)? else {
        return Ok(None);
    };
    let number = tag >> 3;
    let wire_type = (tag & 7) as u8;
    if number == 0 || number > u64::from(u32::MAX >> 3) {
        return Err(WireError::Tag {
            tag,
            offset: offset as usize,
        });
    }
    let rest = &b[tag_len..];
    let (len, value_len) = match wire_type {
        0 => match varint(rest, offset + tag_len as u64)? {
            Some((_, n)) => (tag_len + n, 0),
            None => return Ok(None),
        },
        1 => (tag_len + 8, 0),
        5 => (tag_len + 4, 0),
        2 => match varint(rest, offset + tag_len as u64)? {
            Some((v, n)) => (tag_len + n, v),
            None => return Ok(None),
        },
        _ => {
            return Err(WireError::Tag {
                tag,
                offset: offset as usize,
            });
        }
    };
    if wire_type != 2 && len > b.len() {
        return Ok(None);
    }
    Ok(Some(Header {
        number,
        wire_type,
        len,
        value_len,
    }))
}

impl ListReader {
    /// A reader at the start of a body.
    pub fn new() -> Self {
        ListReader {
            chunks: VecDeque::new(),
            buffered: 0,
            pos: 0,
            stage: Stage::Magic,
            type_meta: None,
            content_encoding: String::new(),
            content_type: String::new(),
            have_raw: false,
            meta: None,
            held: VecDeque::new(),
            items: 0,
        }
    }

    /// Adds the next chunk of the body. Call [`next_item`](Self::next_item)
    /// until it returns `None` before pushing the next one, so that only
    /// the bytes of an incomplete item stay buffered.
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.buffered += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    /// Bytes pushed and not handed out or skipped yet.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// The type of the items (the list's `apiVersion`, its kind without
    /// `List`), once the envelope's `typeMeta` has been read; always known
    /// when [`next_item`](Self::next_item) has returned an item.
    pub fn item_type(&self) -> Option<TypeMeta<'_>> {
        let (api_version, kind) = self.type_meta.as_ref()?;
        Some(TypeMeta {
            api_version,
            kind: item_kind(kind)?,
        })
    }

    /// The next complete item, or `None` when more bytes are needed.
    ///
    /// Fails on a malformed body (the error of [`Unknown::decode`] or
    /// [`List::decode`] for the same bytes, where they have one); the
    /// reader must then be dropped.
    ///
    /// [`Unknown::decode`]: super::Unknown::decode
    /// [`List::decode`]: super::List::decode
    pub fn next_item(&mut self) -> Result<Option<ListItem>, WireError> {
        loop {
            if self.type_meta.is_some()
                && let Some(item) = self.held.pop_front()
            {
                return Ok(Some(item));
            }
            match self.stage {
                Stage::Magic => {
                    if self.buffered < MAGIC.len() {
                        return Ok(None);
                    }
                    let mut magic = [0u8; 4];
                    self.copy_front(&mut magic);
                    if &magic != MAGIC {
                        return Err(WireError::Magic);
                    }
                    self.consume(MAGIC.len());
                    self.stage = Stage::Envelope;
                }
                Stage::Envelope => {
                    if self.buffered == 0 {
                        return Ok(None);
                    }
                    let Some(h) = self.header(None)? else {
                        return Ok(None);
                    };
                    if !self.envelope_field(h)? {
                        return Ok(None);
                    }
                }
                Stage::List { end } => {
                    if self.pos == end {
                        self.stage = Stage::Envelope;
                        continue;
                    }
                    let Some(h) = self.header(Some(end))? else {
                        return Ok(None);
                    };
                    match self.list_field(h, end)? {
                        ListStep::Wait => return Ok(None),
                        ListStep::Item(item) => {
                            self.items += 1;
                            if self.type_meta.is_some() {
                                return Ok(Some(item));
                            }
                            self.held.push_back(item);
                        }
                        ListStep::Next => {}
                    }
                }
                Stage::Skip { until, list_end } => {
                    let n = (until - self.pos).min(self.buffered as u64) as usize;
                    self.consume(n);
                    if self.pos < until {
                        return Ok(None);
                    }
                    self.stage = match list_end {
                        Some(end) => Stage::List { end },
                        None => Stage::Envelope,
                    };
                }
            }
        }
    }

    /// Ends the body: checks it was complete and well-formed, and returns
    /// what it said besides its items. Call it once [`next_item`] has
    /// returned `None` after the last chunk.
    ///
    /// [`next_item`]: Self::next_item
    pub fn finish(mut self) -> Result<ListSummary, WireError> {
        let offset = (self.pos + self.buffered as u64) as usize;
        match self.stage {
            Stage::Magic => return Err(WireError::Magic),
            Stage::Envelope if self.buffered == 0 => {}
            Stage::Envelope => {
                return Err(WireError::Truncated {
                    what: "a field of Unknown",
                    offset,
                });
            }
            Stage::List { .. } | Stage::Skip { .. } => {
                return Err(WireError::Truncated {
                    what: "a length-delimited field",
                    offset,
                });
            }
        }
        if !self.have_raw {
            return Err(WireError::Missing {
                message: "Unknown",
                field: "raw",
            });
        }
        let Some((api_version, kind)) = self.type_meta.take() else {
            return Err(WireError::Missing {
                message: "Unknown",
                field: "typeMeta.kind",
            });
        };
        if !self.content_encoding.is_empty() {
            return Err(WireError::ContentEncoding(std::mem::take(
                &mut self.content_encoding,
            )));
        }
        if !(self.content_type.is_empty() || self.content_type.starts_with(CONTENT_TYPE)) {
            return Err(WireError::Invalid {
                message: "Unknown",
                field: 4,
                reason: "the envelope holds a list that is not protobuf",
            });
        }
        let meta = match &self.meta {
            Some(b) => list_meta(b)?,
            None => Default::default(),
        };
        Ok(ListSummary {
            resource_version: meta.resource_version.to_owned(),
            continue_token: meta.continue_token.to_owned(),
            remaining_item_count: meta.remaining_item_count,
            shard_selector: meta.shard_selector.map(str::to_owned),
            items: self.items,
            api_version,
            kind,
        })
    }

    /// Handles one field of the envelope; `false` when its value has not
    /// fully arrived yet.
    fn envelope_field(&mut self, h: Header) -> Result<bool, WireError> {
        if h.wire_type != 2 {
            if matches!(h.number, 1..=4) {
                return Err(WireError::WireType {
                    message: "Unknown",
                    field: h.number as u32,
                    wire_type: h.wire_type,
                });
            }
            self.consume(h.len);
            return Ok(true);
        }
        match h.number {
            2 => {
                if self.have_raw {
                    return Err(WireError::Duplicate {
                        message: "Unknown",
                        field: 2,
                    });
                }
                self.have_raw = true;
                self.consume(h.len);
                self.stage = Stage::List {
                    end: self.pos.saturating_add(h.value_len),
                };
            }
            1 | 3 | 4 => {
                if (self.buffered as u64) < (h.len as u64).saturating_add(h.value_len) {
                    return Ok(false);
                }
                self.consume(h.len);
                let value = self.take(h.value_len as usize).bytes;
                match h.number {
                    1 => {
                        if self.type_meta.is_some() {
                            return Err(WireError::Duplicate {
                                message: "Unknown",
                                field: 1,
                            });
                        }
                        let tm = type_meta(&value)?;
                        if tm.kind.is_empty() {
                            return Err(WireError::Missing {
                                message: "Unknown",
                                field: "typeMeta.kind",
                            });
                        }
                        if item_kind(tm.kind).is_none() {
                            return Err(WireError::Invalid {
                                message: "Unknown",
                                field: 1,
                                reason: "the body is not a list (its kind does not end in List)",
                            });
                        }
                        self.type_meta = Some((tm.api_version.to_owned(), tm.kind.to_owned()));
                    }
                    3 => self.content_encoding = utf8(&value, 3)?.to_owned(),
                    _ => self.content_type = utf8(&value, 4)?.to_owned(),
                }
            }
            _ => {
                self.consume(h.len);
                self.stage = Stage::Skip {
                    until: self.pos.saturating_add(h.value_len),
                    list_end: None,
                };
            }
        }
        Ok(true)
    }

    /// Handles one field of the list (ending at `end`).
    fn list_field(&mut self, h: Header, end: u64) -> Result<ListStep, WireError> {
        let field_end = (self.pos + h.len as u64).saturating_add(h.value_len);
        if field_end > end {
            return Err(WireError::Truncated {
                what: "a length-delimited field",
                offset: end as usize,
            });
        }
        if h.wire_type != 2 {
            if matches!(h.number, 1 | 2) {
                return Err(WireError::WireType {
                    message: "List",
                    field: h.number as u32,
                    wire_type: h.wire_type,
                });
            }
            self.consume(h.len);
            return Ok(ListStep::Next);
        }
        match h.number {
            1 | 2 => {
                if (self.buffered as u64) < (h.len as u64).saturating_add(h.value_len) {
                    return Ok(ListStep::Wait);
                }
                self.consume(h.len);
                let item = self.take(h.value_len as usize);
                if h.number == 2 {
                    return Ok(ListStep::Item(item));
                }
                if self.meta.is_some() {
                    return Err(WireError::Duplicate {
                        message: "List",
                        field: 1,
                    });
                }
                list_meta(&item.bytes)?;
                self.meta = Some(item.bytes);
            }
            _ => {
                self.consume(h.len);
                self.stage = Stage::Skip {
                    until: field_end,
                    list_end: Some(end),
                };
            }
        }
        Ok(ListStep::Next)
    }

    /// The header of the next field, which must end by `end` (a list's
    /// end) when given.
    fn header(&self, end: Option<u64>) -> Result<Option<Header>, WireError> {
        let limit = end.map_or(usize::MAX, |e| (e - self.pos) as usize);
        let mut buf = [0u8; MAX_HEADER];
        let front = self.chunks.front().map_or(&[][..], |c| &c[..]);
        let avail = self.buffered.min(limit);
        let b: &[u8] = if front.len() >= MAX_HEADER.min(avail) {
            &front[..front.len().min(avail)]
        } else {
            let n = avail.min(MAX_HEADER);
            self.copy_front(&mut buf[..n]);
            &buf[..n]
        };
        match header(b, self.pos)? {
            Some(h) if h.len <= limit => Ok(Some(h)),
            // the list ends inside this header
            Some(_) => Err(WireError::Truncated {
                what: "a field of List",
                offset: limit + self.pos as usize,
            }),
            None if limit <= self.buffered => Err(WireError::Truncated {
                what: "a field of List",
                offset: (self.pos + limit as u64) as usize,
            }),
            None => Ok(None),
        }
    }

    /// Copies the first `out.len()` buffered bytes (there are that many).
    fn copy_front(&self, out: &mut [u8]) {
        let mut filled = 0;
        for c in &self.chunks {
            let n = (out.len() - filled).min(c.len());
            out[filled..filled + n].copy_from_slice(&c[..n]);
            filled += n;
            if filled == out.len() {
                break;
            }
        }
    }

    /// Drops the first `n` buffered bytes (there are that many).
    fn consume(&mut self, mut n: usize) {
        self.buffered -= n;
        self.pos += n as u64;
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            if front.len() <= n {
                n -= front.len();
                self.chunks.pop_front();
            } else {
                let _ = front.split_to(n);
                n = 0;
            }
        }
    }

    /// Takes the first `n` buffered bytes (there are that many): a slice
    /// of the first chunk when it holds them all, else a buffer of its own.
    fn take(&mut self, n: usize) -> ListItem {
        if let Some(front) = self.chunks.front_mut()
            && front.len() >= n
        {
            let bytes = front.split_to(n);
            if front.is_empty() {
                self.chunks.pop_front();
            }
            self.buffered -= n;
            self.pos += n as u64;
            return ListItem {
                bytes,
                shares_chunk: true,
            };
        }
        let mut out = vec![0u8; n];
        self.copy_front(&mut out);
        self.consume(n);
        ListItem {
            bytes: Bytes::from(out),
            shares_chunk: false,
        }
    }
}

enum ListStep {
    /// The field's value has not fully arrived.
    Wait,
    /// An item.
    Item(ListItem),
    /// The field was handled (or is being skipped).
    Next,
}

fn utf8(b: &[u8], field: u32) -> Result<&str, WireError> {
    std::str::from_utf8(b).map_err(|_| WireError::Utf8 {
        message: "Unknown",
        field,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::encode::{bytes_field, envelope, varint_field};
    use crate::protobuf::envelope::MAGIC;

    /// The items, kind and resourceVersion as the whole-body decode reads them.
    fn whole_body_items(body: &[u8]) -> Result<(Vec<&[u8]>, String, String), WireError> {
        let u = crate::protobuf::Unknown::decode(body)?;
        let list = crate::protobuf::List::decode(u.raw)?;
        Ok((
            list.items().collect(),
            u.type_meta.kind.to_owned(),
            list.meta.resource_version.to_owned(),
        ))
    }

    fn pod(name: &str, pad: usize) -> Vec<u8> {
        let mut om = Vec::new();
        bytes_field(&mut om, 1, name.as_bytes());
        let mut pod = Vec::new();
        bytes_field(&mut pod, 1, &om);
        bytes_field(&mut pod, 2, &vec![b'x'; pad]);
        pod
    }

    fn list_body(items: &[Vec<u8>], meta_first: bool) -> Vec<u8> {
        let mut meta = Vec::new();
        bytes_field(&mut meta, 2, b"4711");
        bytes_field(&mut meta, 3, b"next");
        varint_field(&mut meta, 4, 9);
        let mut list = Vec::new();
        if meta_first {
            bytes_field(&mut list, 1, &meta);
        }
        // an unknown varint and an unknown message, skipped
        varint_field(&mut list, 7, 300);
        for it in items {
            bytes_field(&mut list, 2, it);
        }
        bytes_field(&mut list, 9, &[1, 2, 3]);
        if !meta_first {
            bytes_field(&mut list, 1, &meta);
        }
        envelope("v1", "PodList", &list)
    }

    /// Every item, read from `body` cut into chunks of `size` bytes, and
    /// the most bytes the reader held between chunks.
    fn read_max(
        body: &[u8],
        size: usize,
    ) -> Result<(Vec<ListItem>, ListSummary, usize), WireError> {
        let mut r = ListReader::new();
        let mut out = Vec::new();
        let mut most = 0;
        for c in body.chunks(size.max(1)) {
            r.push(Bytes::copy_from_slice(c));
            while let Some(i) = r.next_item()? {
                assert!(r.item_type().is_some());
                out.push(i);
            }
            most = most.max(r.buffered());
        }
        Ok((out, r.finish()?, most))
    }

    fn read(body: &[u8], size: usize) -> Result<(Vec<ListItem>, ListSummary), WireError> {
        read_max(body, size).map(|(i, s, _)| (i, s))
    }

    #[test]
    fn items_are_cut_whatever_the_chunks() {
        let items: Vec<_> = (0..6)
            .map(|i| pod(&format!("p{i}"), 40 * i + 150))
            .collect();
        for meta_first in [true, false] {
            let body = list_body(&items, meta_first);
            let (want, kind, rv) = whole_body_items(&body).unwrap();
            assert_eq!((kind.as_str(), rv.as_str()), ("PodList", "4711"));
            for size in 1..body.len() + 1 {
                let (got, summary) = read(&body, size).unwrap();
                let got: Vec<&[u8]> = got.iter().map(|i| &i.bytes[..]).collect();
                assert_eq!(got, want, "chunks of {size}");
                assert_eq!(summary.resource_version, "4711");
                assert_eq!(summary.continue_token, "next");
                assert_eq!(summary.remaining_item_count, Some(9));
                assert_eq!(summary.items, 6);
                assert_eq!(
                    (summary.api_version.as_str(), summary.kind.as_str()),
                    ("v1", "PodList")
                );
            }
        }
    }

    #[test]
    fn only_an_incomplete_item_stays_buffered() {
        let items: Vec<_> = (0..50).map(|i| pod(&format!("p{i}"), 500)).collect();
        let body = list_body(&items, true);
        for size in [100, 1000, 4096] {
            let (got, _, most) = read_max(&body, size).unwrap();
            assert_eq!(got.len(), 50);
            // at most one item (about 520 bytes) plus the last chunk
            assert!(most < 530 + size, "held {most} bytes with chunks of {size}");
        }
    }

    #[test]
    fn items_in_one_chunk_are_slices_and_others_own_buffers() {
        let items = vec![pod("a", 10), pod("b", 500)];
        let body = list_body(&items, true);
        let (got, _) = read(&body, body.len()).unwrap();
        assert!(got.iter().all(|i| i.shares_chunk));
        let (got, _) = read(&body, 64).unwrap();
        assert!(!got[1].shares_chunk);
        assert_eq!(got[1].bytes.len(), items[1].len());
    }

    #[test]
    fn every_truncation_fails() {
        // Protobuf has no end marker: a cut between two of the envelope's
        // fields after `raw` is a well-formed shorter body (the HTTP body's
        // end is what says it is complete); every other cut fails.
        let body = list_body(&[pod("a", 30), pod("b", 3)], true);
        let ok_cuts = crate::protobuf::envelope::tests::field_ends(&body, 4);
        for cut in 0..body.len() {
            let whole = whole_body_items(&body[..cut]).is_ok();
            match read(&body[..cut], 7) {
                Ok(_) => assert!(whole && ok_cuts.contains(&cut), "cut at {cut} accepted"),
                Err(_) => assert!(!whole, "cut at {cut}: the whole-body decode accepts it"),
            }
        }
    }

    #[test]
    fn a_type_after_the_items_holds_them_back() {
        let mut tm = Vec::new();
        bytes_field(&mut tm, 1, b"v1");
        bytes_field(&mut tm, 2, b"ConfigMapList");
        let mut list = Vec::new();
        bytes_field(&mut list, 2, &pod("a", 1));
        let mut body = MAGIC.to_vec();
        bytes_field(&mut body, 2, &list);
        bytes_field(&mut body, 1, &tm);
        let (got, summary) = read(&body, 3).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(summary.kind, "ConfigMapList");
    }

    #[test]
    fn malformed_bodies_are_errors() {
        let ok = list_body(&[pod("a", 1)], true);
        let fail = |body: &[u8]| {
            for size in [1, 5, body.len().max(1)] {
                assert!(read(body, size).is_err(), "accepted {body:?}");
            }
        };
        // bad magic, encoded payload, not a list, no raw, two raws
        let mut b = ok.clone();
        b[0] = b'j';
        fail(&b);
        let mut b = ok.clone();
        bytes_field(&mut b, 3, b"gzip");
        fail(&b);
        fail(&envelope("v1", "Status", &[]));
        let mut tm = Vec::new();
        bytes_field(&mut tm, 2, b"PodList");
        let mut b = MAGIC.to_vec();
        bytes_field(&mut b, 1, &tm);
        fail(&b);
        let mut b = ok.clone();
        bytes_field(&mut b, 2, &[]);
        fail(&b);
        // an item that is a varint; an item longer than the list
        let mut list = Vec::new();
        varint_field(&mut list, 2, 7);
        fail(&envelope("v1", "PodList", &list));
        let list = vec![0x12, 0x05, 1, 2];
        let mut b = MAGIC.to_vec();
        let mut tm = Vec::new();
        bytes_field(&mut tm, 1, b"v1");
        bytes_field(&mut tm, 2, b"PodList");
        bytes_field(&mut b, 1, &tm);
        bytes_field(&mut b, 2, &list);
        bytes_field(&mut b, 3, b"");
        fail(&b);
        // a bad tag; an overlong varint
        let mut b = ok.clone();
        b.push(0x00);
        fail(&b);
        let mut b = ok.clone();
        b.extend_from_slice(&[
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        ]);
        fail(&b);
        // two ListMetas
        let mut meta = Vec::new();
        bytes_field(&mut meta, 2, b"1");
        let mut list = Vec::new();
        bytes_field(&mut list, 1, &meta);
        bytes_field(&mut list, 1, &meta);
        fail(&envelope("v1", "PodList", &list));
        // an empty list is fine
        let (items, s) = read(&envelope("v1", "PodList", &[]), 2).unwrap();
        assert!(items.is_empty());
        assert_eq!(s.resource_version, "");
    }
}
