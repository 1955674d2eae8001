//! Finding the items of a list body without decoding them.
//!
//! A list page is `{"kind":..,"metadata":{..},"items":[{..},{..},..]}`.
//! Decoding it with serde (items as `RawValue`) scans every item once to
//! find its end, then each item is scanned again by the metadata decode.
//! [`split_list`] finds the item boundaries with a structural scan that only
//! tracks strings and brackets (memchr-fast, no validation), and cuts the
//! items array out of the body so the envelope can be decoded (and
//! validated) by serde on its own. Every item is then validated by the
//! metadata decode, which checks it is one complete JSON document, and the
//! separators between items are checked here: together that is the whole
//! body validated, with one full scan instead of two.
//!
//! Anything the scanner does not expect returns `None`, and the caller
//! falls back to the plain serde decode, which reports the error.

use std::collections::VecDeque;
#[cfg(any(test, feature = "fuzzing"))]
use std::ops::Range;

use bytes::Bytes;

#[cfg(any(test, feature = "fuzzing"))]
/// Where the items are in a list body.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SplitList {
    /// The body with the items array replaced by `[]`.
    pub(crate) envelope: Vec<u8>,
    /// Each item's byte range in the body.
    pub(crate) items: Vec<Range<usize>>,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

#[cfg(any(test, feature = "fuzzing"))]
fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_ws(s[i]) {
        i += 1;
    }
    i
}

#[cfg(any(test, feature = "fuzzing"))]
/// The index just past the string starting at `s[i] == b'"'`.
fn string_end(s: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    // Most strings in an object are short keys and values: a plain loop
    // beats setting up a vectorized search; long ones switch to memchr.
    let short_end = (j + 24).min(s.len());
    while j < short_end {
        match s[j] {
            b'"' => return Some(j + 1),
            b'\\' => j += 2, // an escape: skip the escaped byte (\u's digits are plain)
            _ => j += 1,
        }
    }
    loop {
        j += memchr::memchr2(b'"', b'\\', s.get(j..)?)?;
        if s[j] == b'"' {
            return Some(j + 1);
        }
        j += 2;
    }
}

#[cfg(any(test, feature = "fuzzing"))]
/// The index just past the value starting at `s[i]` (not whitespace).
/// Strings and brackets are tracked; everything else is skipped unchecked.
fn value_end(s: &[u8], i: usize) -> Option<usize> {
    match *s.get(i)? {
        b'"' => string_end(s, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match *s.get(j)? {
                    b'"' => {
                        j = string_end(s, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        // a scalar: up to the next separator
        _ => {
            let mut j = i;
            while j < s.len() && !matches!(s[j], b',' | b'}' | b']') && !is_ws(s[j]) {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(any(test, feature = "fuzzing"))]
/// Splits a list body; `None` when it does not have the expected shape
/// (then decode it with serde, which reports what is wrong).
pub(crate) fn split_list(body: &[u8]) -> Option<SplitList> {
    let mut i = skip_ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut items_span: Option<(Range<usize>, Vec<Range<usize>>)> = None;
    loop {
        i = skip_ws(body, i);
        match *body.get(i)? {
            b'}' if items_span.is_none() => return None,
            b'}' => break,
            b'"' => {}
            _ => return None,
        }
        let key_end = string_end(body, i)?;
        let is_items = &body[i..key_end] == b"\"items\"";
        i = skip_ws(body, key_end);
        if body.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(body, i + 1);
        if is_items {
            if items_span.is_some() || body.get(i) != Some(&b'[') {
                return None;
            }
            let start = i;
            let mut items = Vec::new();
            i = skip_ws(body, i + 1);
            if body.get(i) == Some(&b']') {
                i += 1;
            } else {
                loop {
                    let end = value_end(body, i)?;
                    items.push(i..end);
                    i = skip_ws(body, end);
                    match *body.get(i)? {
                        b',' => i = skip_ws(body, i + 1),
                        b']' => {
                            i += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
            }
            items_span = Some((start..i, items));
        } else {
            i = value_end(body, i)?;
        }
        i = skip_ws(body, i);
        match *body.get(i)? {
            b',' => i += 1,
            b'}' => {
                i += 1;
                break;
            }
            _ => return None,
        }
    }
    let (span, items) = items_span?;
    let mut envelope = Vec::with_capacity(body.len() - span.len() + 2);
    envelope.extend_from_slice(&body[..span.start]);
    envelope.extend_from_slice(b"[]");
    envelope.extend_from_slice(&body[span.end..]);
    // anything after the closing brace is left for serde to reject
    let _ = i;
    Some(SplitList { envelope, items })
}

/// Where a value being scanned is (see [`ValueScan::feed`]).
#[derive(Debug, Clone, Copy, Default)]
struct ValueScan {
    started: bool,
    /// Container depth (`{`/`[` minus `}`/`]`).
    depth: usize,
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escape: bool,
    /// A scalar (number, literal): it ends at a separator or whitespace.
    scalar: bool,
}

impl ValueScan {
    /// Feeds the next bytes of a value (the first call starts at its first
    /// byte, not whitespace). `Ok(Some(n))`: the value ends after `n` bytes
    /// of `s`; `Ok(None)`: all of `s` belongs to it; `Err(())`: there is no
    /// value here (a separator). The same rules as [`value_end`]: strings
    /// and brackets are tracked, the rest is skipped unchecked.
    fn feed(&mut self, s: &[u8]) -> Result<Option<usize>, ()> {
        let mut i = 0;
        if !self.started {
            let Some(&first) = s.first() else {
                return Ok(None);
            };
            self.started = true;
            match first {
                b'"' => {
                    self.in_string = true;
                    i = 1;
                }
                b'{' | b'[' => {}
                b',' | b'}' | b']' => return Err(()),
                _ => self.scalar = true,
            }
        }
        if self.scalar {
            return Ok(s[i..]
                .iter()
                .position(|&b| matches!(b, b',' | b'}' | b']') || is_ws(b))
                .map(|p| i + p));
        }
        while i < s.len() {
            if self.in_string {
                if self.escape {
                    self.escape = false;
                    i += 1;
                    continue;
                }
                match memchr::memchr2(b'"', b'\\', &s[i..]) {
                    None => return Ok(None),
                    Some(p) => {
                        i += p;
                        if s[i] == b'\\' {
                            self.escape = true;
                        } else {
                            self.in_string = false;
                            if self.depth == 0 {
                                return Ok(Some(i + 1));
                            }
                        }
                        i += 1;
                    }
                }
                continue;
            }
            match s[i] {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Ok(Some(i + 1));
                    }
                }
                _ => {}
            }
            i += 1;
        }
        Ok(None)
    }
}

/// Where a [`JsonListReader`] is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the top-level `{`.
    Open,
    /// Not an object at the top: everything goes to the envelope (serde
    /// reports what is wrong).
    Verbatim,
    /// After `{` (`first`) or a `,`: a key, or `}` after `{`.
    BeforeKey { first: bool },
    /// Inside a key.
    Key,
    /// After a key: `:`.
    Colon { items: bool },
    /// After `:`.
    BeforeValue { items: bool },
    /// Inside a member's value (copied to the envelope).
    MemberValue,
    /// After the `[` of the items: an item or `]`.
    ItemsOpen,
    /// After a `,` between items: an item.
    BeforeItem,
    /// Inside an item: its scan has reached chunk `idx`, offset `off`.
    Item { idx: usize, off: usize },
    /// After an item: `,` or `]`.
    AfterItem,
    /// After a member's value: `,` or `}`.
    AfterValue,
    /// After the closing `}` (serde rejects anything but whitespace).
    Trailing,
}

/// Reads a JSON list body chunk by chunk, cutting each item of its
/// `items` array out as soon as the item's last byte has arrived: the
/// streaming twin of [`split_list`], with the same rules.
///
/// The items are found by a structural scan (strings and brackets only)
/// and handed out unvalidated (the caller validates each, as the metadata
/// decode does); everything else (the envelope, with the items array
/// replaced by `[]`) is kept and decoded by serde at the end, which
/// validates it. Only the bytes of an incomplete item, and the envelope
/// (a few hundred bytes), stay buffered. A structural error (a missing
/// separator, an empty item) fails at once with a serde error, as serde
/// would fail on the whole body.
#[derive(Debug)]
pub(crate) struct JsonListReader {
    chunks: VecDeque<Bytes>,
    /// Stream offset of the first byte in `chunks`.
    pos: u64,
    stage: Stage,
    scan: ValueScan,
    envelope: Vec<u8>,
    /// The current key's first bytes and length (to recognize `"items"`).
    key: [u8; 7],
    key_len: usize,
}

/// A structural error at stream offset `at`.
fn syntax(at: u64, expected: &str) -> serde_json::Error {
    <serde_json::Error as serde::de::Error>::custom(format_args!(
        "malformed list body at byte {at}: expected {expected}"
    ))
}

impl JsonListReader {
    pub(crate) fn new() -> Self {
        JsonListReader {
            chunks: VecDeque::new(),
            pos: 0,
            stage: Stage::Open,
            scan: ValueScan::default(),
            envelope: Vec::new(),
            key: [0; 7],
            key_len: 0,
        }
    }

    /// Adds the next chunk; call [`next_item`](Self::next_item) until it
    /// returns `None` before pushing the next one.
    pub(crate) fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.chunks.push_back(chunk);
        }
    }

    /// Bytes held (an incomplete item, the envelope).
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum::<usize>() + self.envelope.len()
    }

    /// Drops the first `n` bytes of the front chunk.
    fn advance(&mut self, n: usize) {
        if let Some(front) = self.chunks.front_mut() {
            let _ = front.split_to(n);
            if front.is_empty() {
                self.chunks.pop_front();
            }
            self.pos += n as u64;
        }
    }

    /// Copies the first `n` bytes of the front chunk to the envelope and
    /// drops them.
    fn copy(&mut self, n: usize) {
        if let Some(front) = self.chunks.front() {
            self.envelope.extend_from_slice(&front[..n]);
        }
        self.advance(n);
    }

    /// The next complete item and whether it is a slice of a pushed chunk
    /// (else a buffer of its own), or `None` when more bytes are needed.
    ///
    /// The reader's state machine over [`Stage`]: one match with an arm
    /// per stage and byte, kept whole (over 100 lines) so that every
    /// transition reads next to the others.
    pub(crate) fn next_item(&mut self) -> Result<Option<(Bytes, bool)>, serde_json::Error> {
        loop {
            if let Stage::Item { idx, off } = self.stage {
                return self.scan_item(idx, off);
            }
            let Some(front) = self.chunks.front() else {
                return Ok(None);
            };
            let b = front[0];
            match self.stage {
                Stage::Verbatim | Stage::Trailing => {
                    let n = front.len();
                    self.copy(n);
                    continue;
                }
                Stage::Item { .. } => unreachable!("handled above"),
                _ if is_ws(b) && !matches!(self.stage, Stage::Key | Stage::MemberValue) => {
                    let n = front.iter().position(|&b| !is_ws(b)).unwrap_or(front.len());
                    self.advance(n);
                    continue;
                }
                _ => {}
            }
            let at = self.pos;
            match self.stage {
                Stage::Open if b == b'{' => {
                    self.copy(1);
                    self.stage = Stage::BeforeKey { first: true };
                }
                Stage::Open => self.stage = Stage::Verbatim,
                Stage::BeforeKey { first: true } if b == b'}' => {
                    self.copy(1);
                    self.stage = Stage::Trailing;
                }
                Stage::BeforeKey { .. } if b == b'"' => {
                    self.scan = ValueScan::default();
                    self.key_len = 0;
                    self.stage = Stage::Key;
                }
                Stage::BeforeKey { .. } => return Err(syntax(at, "a key")),
                Stage::Key | Stage::MemberValue => {
                    let front = self.chunks.front().map_or(&[][..], |c| &c[..]);
                    let len = front.len();
                    let done = self.scan.feed(front).map_err(|()| syntax(at, "a value"))?;
                    let n = done.unwrap_or(len);
                    if self.stage == Stage::Key {
                        for &k in &front[..n] {
                            if self.key_len < self.key.len() {
                                self.key[self.key_len] = k;
                            }
                            self.key_len += 1;
                        }
                    }
                    self.copy(n);
                    if done.is_some() {
                        self.stage = match self.stage {
                            Stage::Key => Stage::Colon {
                                items: self.key_len == 7 && &self.key == b"\"items\"",
                            },
                            _ => Stage::AfterValue,
                        };
                    }
                }
                Stage::Colon { items } if b == b':' => {
                    self.copy(1);
                    self.stage = Stage::BeforeValue { items };
                }
                Stage::Colon { .. } => return Err(syntax(at, "`:`")),
                Stage::BeforeValue { items: true } if b == b'[' => {
                    self.envelope.extend_from_slice(b"[]");
                    self.advance(1);
                    self.stage = Stage::ItemsOpen;
                }
                Stage::BeforeValue { .. } => {
                    self.scan = ValueScan::default();
                    self.stage = Stage::MemberValue;
                }
                Stage::ItemsOpen if b == b']' => {
                    self.advance(1);
                    self.stage = Stage::AfterValue;
                }
                Stage::ItemsOpen | Stage::BeforeItem => {
                    self.scan = ValueScan::default();
                    self.stage = Stage::Item { idx: 0, off: 0 };
                }
                Stage::AfterItem if b == b',' => {
                    self.advance(1);
                    self.stage = Stage::BeforeItem;
                }
                Stage::AfterItem if b == b']' => {
                    self.advance(1);
                    self.stage = Stage::AfterValue;
                }
                Stage::AfterItem => return Err(syntax(at, "`,` or `]` after an item")),
                Stage::AfterValue if b == b',' => {
                    self.copy(1);
                    self.stage = Stage::BeforeKey { first: false };
                }
                Stage::AfterValue if b == b'}' => {
                    self.copy(1);
                    self.stage = Stage::Trailing;
                }
                Stage::AfterValue => return Err(syntax(at, "`,` or `}`")),
                Stage::Verbatim | Stage::Trailing | Stage::Item { .. } => {
                    unreachable!("handled above")
                }
            }
        }
    }

    /// Scans an item from chunk `idx`, offset `off` on; hands it out when
    /// its end is in.
    fn scan_item(
        &mut self,
        mut idx: usize,
        mut off: usize,
    ) -> Result<Option<(Bytes, bool)>, serde_json::Error> {
        while let Some(chunk) = self.chunks.get(idx) {
            let at = self.pos;
            match self
                .scan
                .feed(&chunk[off..])
                .map_err(|()| syntax(at, "an item"))?
            {
                None => {
                    idx += 1;
                    off = 0;
                }
                Some(n) => {
                    let end = off + n;
                    let item = if idx == 0 {
                        let front = self.chunks.front_mut().expect("chunk 0");
                        let item = front.split_to(end);
                        if front.is_empty() {
                            self.chunks.pop_front();
                        }
                        self.pos += end as u64;
                        (item, true)
                    } else {
                        let len: usize =
                            self.chunks.iter().take(idx).map(Bytes::len).sum::<usize>() + end;
                        let mut out = Vec::with_capacity(len);
                        for _ in 0..idx {
                            let c = self.chunks.pop_front().expect("counted");
                            out.extend_from_slice(&c);
                        }
                        let front = self.chunks.front_mut().expect("chunk idx");
                        out.extend_from_slice(&front.split_to(end));
                        if front.is_empty() {
                            self.chunks.pop_front();
                        }
                        self.pos += len as u64;
                        (Bytes::from(out), false)
                    };
                    self.stage = Stage::AfterItem;
                    return Ok(Some(item));
                }
            }
        }
        self.stage = Stage::Item { idx, off };
        Ok(None)
    }

    /// Ends the body: the envelope (everything but the items, with the
    /// items array as `[]`), to be decoded by serde, which reports what is
    /// wrong with it. Fails when the body ended inside its object.
    pub(crate) fn finish(self) -> Result<Vec<u8>, serde_json::Error> {
        match self.stage {
            Stage::Trailing | Stage::Verbatim => Ok(self.envelope),
            // nothing but whitespace: serde's EOF error
            Stage::Open => Ok(self.envelope),
            _ => Err(syntax(self.pos, "more of the list body (it ended early)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items<'a>(body: &'a [u8], s: &SplitList) -> Vec<&'a str> {
        s.items
            .iter()
            .map(|r| std::str::from_utf8(&body[r.clone()]).unwrap())
            .collect()
    }

    #[test]
    fn finds_items_and_cuts_them_out_of_the_envelope() {
        let body = br#" { "kind" : "PodList", "metadata":{"continue":"a]b\"}","resourceVersion":"7"},
            "items" : [ {"metadata":{"name":"x{["}} , {"a":"\\","b":[1,{"c":"]"}]},"s",12.5e3,null ] , "z":[{}] } "#;
        let s = split_list(body).unwrap();
        assert_eq!(
            items(body, &s),
            [
                r#"{"metadata":{"name":"x{["}}"#,
                r#"{"a":"\\","b":[1,{"c":"]"}]}"#,
                r#""s""#,
                "12.5e3",
                "null"
            ]
        );
        let env: serde_json::Value = serde_json::from_slice(&s.envelope).unwrap();
        assert_eq!(env["items"], serde_json::json!([]));
        assert_eq!(env["metadata"]["continue"], "a]b\"}");
        assert_eq!(env["z"], serde_json::json!([{}]));
    }

    #[test]
    fn empty_and_absent_items() {
        let s = split_list(br#"{"items":[ ],"metadata":{}}"#).unwrap();
        assert!(s.items.is_empty());
        assert_eq!(s.envelope, br#"{"items":[],"metadata":{}}"#);
        // no items member, or null: left to serde
        assert_eq!(split_list(br#"{"metadata":{}}"#), None);
        assert_eq!(split_list(br#"{"items":null}"#), None);
    }

    #[test]
    fn unexpected_shapes_fall_back() {
        for body in [
            &br#"[]"#[..],
            br#"{"items":[{"a":1} {"b":2}]}"#,
            br#"{"items":[{"a":1},]"#,
            br#"{"items":[{"a":1}}"#,
            br#"{"items":[{"a":"unterminated}]}"#,
            br#"{"items":[],"items":[]}"#,
            br#"{"items":[] "x":1}"#,
            br#"{items:[]}"#,
            br#"{"items":[1,2"#,
            br#"{"items":[{"a":"\"#,
            b"",
        ] {
            assert_eq!(
                split_list(body),
                None,
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn the_reader_holds_only_an_incomplete_item() {
        let item = format!(
            r#"{{"metadata":{{"name":"x"}},"data":{{"v":"{}"}}}}"#,
            "y".repeat(460)
        );
        let items = vec![item.as_str(); 50].join(",");
        let body =
            format!(r#"{{"kind":"List","metadata":{{"resourceVersion":"1"}},"items":[{items}]}}"#);
        for size in [100, 1000, 4096] {
            let mut r = JsonListReader::new();
            let (mut n, mut most) = (0, 0);
            for c in body.as_bytes().chunks(size) {
                r.push(Bytes::copy_from_slice(c));
                while let Some((cut, _)) = r.next_item().unwrap() {
                    assert_eq!(cut, item.as_bytes());
                    n += 1;
                }
                most = most.max(r.buffered());
            }
            assert_eq!(n, 50);
            assert!(
                most < item.len() + size + 64,
                "held {most} bytes with chunks of {size}"
            );
            let envelope = r.finish().unwrap();
            assert_eq!(
                envelope,
                br#"{"kind":"List","metadata":{"resourceVersion":"1"},"items":[]}"#
            );
        }
    }

    #[test]
    fn every_cut_of_a_list_is_rejected_or_yields_complete_items() {
        let body = br#"{"metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b","labels":{"x":"}"}}}]}"#;
        for cut in 0..body.len() {
            if let Some(s) = split_list(&body[..cut]) {
                // only a cut after the items array can split; every item is whole
                for r in &s.items {
                    serde_json::from_slice::<serde_json::Value>(&body[r.clone()]).unwrap();
                }
            }
        }
    }
}
