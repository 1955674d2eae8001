//! The CBOR tokenizer (RFC 8949): one data item head at a time, strings
//! borrowed from the input, skipping without building anything.

use std::borrow::Cow;

use super::CborError;

/// Nesting deeper than this is rejected (what the apiserver's decoder
/// allows: `MaxNestedLevels: 64`).
pub(crate) const MAX_DEPTH: usize = 64;

/// Tag 55799: "self-described CBOR", the three bytes the apiserver puts in
/// front of every object it encodes.
pub(crate) const TAG_SELF_DESCRIBED: u64 = 55799;
/// Tag 21: the byte string is expected to be written out as base64url.
pub(crate) const TAG_BASE64URL: u64 = 21;
/// Tag 22: the byte string is expected to be written out as base64 (a Go
/// `[]byte`, which JSON writes as base64).
pub(crate) const TAG_BASE64: u64 = 22;
/// Tag 23: the byte string is expected to be written out as base16.
pub(crate) const TAG_BASE16: u64 = 23;

/// One data item's head, with a string's content.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item<'a> {
    /// Major type 0.
    Uint(u64),
    /// Major type 1: the value is `-1 - n`.
    Nint(u64),
    /// Major type 2 (the apiserver writes every Go string as one).
    Bytes(Cow<'a, [u8]>),
    /// Major type 3, its UTF-8 checked.
    Text(Cow<'a, str>),
    /// Major type 4: `None` for an indefinite-length array.
    Array(Option<u64>),
    /// Major type 5: `None` for an indefinite-length map.
    Map(Option<u64>),
    /// Major type 6: the tag number; the tagged item follows.
    Tag(u64),
    /// `false` / `true`.
    Bool(bool),
    /// `null`.
    Null,
    /// `undefined` (read as `null`).
    Undefined,
    /// A half, single or double precision float.
    Float(f64),
    /// The "break" ending an indefinite-length item.
    Break,
}

/// A cursor over a CBOR buffer.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn at(buf: &'a [u8], pos: usize) -> Self {
        Reader { buf, pos }
    }

    /// Where the next item starts.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn buffer(&self) -> &'a [u8] {
        self.buf
    }

    /// Whether the whole buffer has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(crate) fn error(&self, reason: &'static str) -> CborError {
        CborError::Invalid {
            offset: self.pos,
            reason,
        }
    }

    fn truncated(&self) -> CborError {
        CborError::Truncated { offset: self.pos }
    }

    fn byte(&mut self) -> Result<u8, CborError> {
        let b = *self.buf.get(self.pos).ok_or_else(|| self.truncated())?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], CborError> {
        let n = usize::try_from(n).map_err(|_| self.truncated())?;
        let end = self.pos.checked_add(n).ok_or_else(|| self.truncated())?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.truncated())?;
        self.pos = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, CborError> {
        let s = self.take(n as u64)?;
        Ok(s.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    /// The next byte without reading it.
    pub(crate) fn peek_byte(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// Reads a head: major type and argument (`None`: indefinite length).
    fn head(&mut self) -> Result<(u8, u8, Option<u64>), CborError> {
        let start = self.pos;
        let b = self.byte()?;
        let (major, info) = (b >> 5, b & 0x1f);
        let arg = match info {
            0..=23 => Some(u64::from(info)),
            24 => Some(self.uint(1)?),
            25 => Some(self.uint(2)?),
            26 => Some(self.uint(4)?),
            27 => Some(self.uint(8)?),
            31 => None,
            _ => {
                self.pos = start;
                return Err(self.error("reserved additional information (28-30)"));
            }
        };
        Ok((major, info, arg))
    }

    /// Reads the next item's head (and a string's content).
    pub(crate) fn next(&mut self) -> Result<Item<'a>, CborError> {
        let start = self.pos;
        let (major, info, arg) = self.head()?;
        let bad = |r: &mut Self, reason| {
            r.pos = start;
            Err(r.error(reason))
        };
        Ok(match (major, arg) {
            (0, Some(n)) => Item::Uint(n),
            (1, Some(n)) => Item::Nint(n),
            (2, Some(n)) => Item::Bytes(Cow::Borrowed(self.take(n)?)),
            (2, None) => Item::Bytes(Cow::Owned(self.chunks(2)?)),
            (3, Some(n)) => {
                let s = self.take(n)?;
                match std::str::from_utf8(s) {
                    Ok(t) => Item::Text(Cow::Borrowed(t)),
                    Err(_) => return bad(self, "a text string that is not UTF-8"),
                }
            }
            (3, None) => match String::from_utf8(self.chunks(3)?) {
                Ok(t) => Item::Text(Cow::Owned(t)),
                Err(_) => return bad(self, "a text string that is not UTF-8"),
            },
            (4, n) => Item::Array(n),
            (5, n) => Item::Map(n),
            (6, Some(t)) => Item::Tag(t),
            (7, _) => match info {
                20 => Item::Bool(false),
                21 => Item::Bool(true),
                22 => Item::Null,
                23 => Item::Undefined,
                25 => Item::Float(f16_to_f64(arg.unwrap_or(0) as u16)),
                26 => Item::Float(f64::from(f32::from_bits(arg.unwrap_or(0) as u32))),
                27 => Item::Float(f64::from_bits(arg.unwrap_or(0))),
                31 => Item::Break,
                _ => return bad(self, "a simple value JSON has no equivalent of"),
            },
            _ => return bad(self, "an indefinite length on an integer or a tag"),
        })
    }

    /// The content of an indefinite-length string: definite-length chunks of
    /// the same major type up to a break.
    fn chunks(&mut self, major: u8) -> Result<Vec<u8>, CborError> {
        let mut out = Vec::new();
        loop {
            let start = self.pos;
            let (m, info, arg) = self.head()?;
            if m == 7 && info == 31 {
                return Ok(out);
            }
            match (m == major, arg) {
                (true, Some(n)) => out.extend_from_slice(self.take(n)?),
                _ => {
                    self.pos = start;
                    return Err(
                        self.error("a chunk of an indefinite-length string of another type")
                    );
                }
            }
        }
    }

    /// Skips the next data item (tags and nested items included) without
    /// building anything; checks it is well formed.
    pub(crate) fn skip(&mut self) -> Result<(), CborError> {
        self.skip_at(0)
    }

    fn skip_at(&mut self, depth: usize) -> Result<(), CborError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested deeper than 64 levels"));
        }
        let start = self.pos;
        let (major, info, arg) = self.head()?;
        match (major, arg) {
            (0 | 1, Some(_)) => {}
            // a byte string's content needs no check: jump over it
            (2, Some(n)) => {
                self.take(n)?;
            }
            (3, Some(n)) => {
                if std::str::from_utf8(self.take(n)?).is_err() {
                    self.pos = start;
                    return Err(self.error("a text string that is not UTF-8"));
                }
            }
            (4, Some(n)) => {
                self.check_count(n)?;
                for _ in 0..n {
                    self.skip_at(depth + 1)?;
                }
            }
            (5, Some(n)) => {
                self.check_count(n)?;
                for _ in 0..n {
                    self.skip_at(depth + 1)?;
                    self.skip_at(depth + 1)?;
                }
            }
            (6, Some(_)) => self.skip_at(depth + 1)?,
            (7, _) if matches!(info, 20..=23 | 25..=27) => {}
            // the rare items (indefinite lengths, simple values, breaks):
            // through the general reader
            _ => {
                self.pos = start;
                match self.next()? {
                    Item::Array(None) => {
                        while !self.at_break()? {
                            self.skip_at(depth + 1)?;
                        }
                    }
                    Item::Map(None) => {
                        while !self.at_break()? {
                            self.skip_at(depth + 1)?;
                            self.skip_at(depth + 1)?;
                        }
                    }
                    Item::Break => {
                        self.pos = start;
                        return Err(self.error("a break outside an indefinite-length item"));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Inside an indefinite-length item: consumes the break and answers
    /// true when it comes next.
    pub(crate) fn at_break(&mut self) -> Result<bool, CborError> {
        match self.peek_byte() {
            Some(0xff) => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) => Ok(false),
            None => Err(self.truncated()),
        }
    }

    /// Steps through the entries of a container of `left` entries (`None`:
    /// of indefinite length, ended by a break, which this consumes):
    /// whether another entry follows.
    pub(crate) fn next_entry(&mut self, left: &mut Option<u64>) -> Result<bool, CborError> {
        match left {
            Some(0) => Ok(false),
            Some(n) => {
                *n -= 1;
                Ok(true)
            }
            None => Ok(!self.at_break()?),
        }
    }

    /// A definite count of items cannot exceed the bytes left (each takes
    /// at least one): rejects absurd counts before looping on them.
    pub(crate) fn check_count(&self, n: u64) -> Result<(), CborError> {
        let left = (self.buf.len() - self.pos.min(self.buf.len())) as u64;
        if n > left {
            Err(self.truncated())
        } else {
            Ok(())
        }
    }

    /// Skips a leading self-described CBOR tag (55799), if present.
    pub(crate) fn skip_self_described(&mut self) {
        if self.buf.get(self.pos..self.pos + 3) == Some(&[0xd9, 0xd9, 0xf7]) {
            self.pos += 3;
        }
    }

    /// Reads the next item as a string: a byte string (the apiserver's
    /// strings) or a text string. Invalid UTF-8 in a byte string reads as
    /// U+FFFD, as the apiserver's JSON writes it.
    pub(crate) fn string(&mut self) -> Result<Cow<'a, str>, CborError> {
        let start = self.pos;
        match self.next()? {
            Item::Bytes(b) => Ok(bytes_to_str(b)),
            Item::Text(t) => Ok(t),
            Item::Tag(TAG_SELF_DESCRIBED) => self.string(),
            _ => {
                self.pos = start;
                Err(self.error("expected a string"))
            }
        }
    }
}

/// The content a map key is compared by, as the decode reads the key: a
/// string's bytes (byte and text strings alike) under any tags (a
/// later-encoding tag on a byte string: the encoded text), any other key's
/// encoding.
pub(crate) fn key_content<'a>(r: &mut Reader<'a>) -> Result<Cow<'a, [u8]>, CborError> {
    loop {
        let at = r.position();
        match r.next()? {
            Item::Bytes(b) => return Ok(b),
            Item::Text(Cow::Borrowed(t)) => return Ok(Cow::Borrowed(t.as_bytes())),
            Item::Text(Cow::Owned(t)) => return Ok(Cow::Owned(t.into_bytes())),
            Item::Tag(t @ (TAG_BASE64 | TAG_BASE64URL | TAG_BASE16)) => {
                let content = r.position();
                if let Item::Bytes(b) = r.next()? {
                    let text = later_encoding(t, &b).unwrap_or_default();
                    return Ok(Cow::Owned(text.into_bytes()));
                }
                *r = Reader::at(r.buffer(), content);
            }
            // any other tag (each one consumes bytes, so this ends)
            Item::Tag(_) => {}
            _ => {
                let mut again = Reader::at(r.buffer(), at);
                again.skip()?;
                *r = Reader::at(r.buffer(), again.position());
                return Ok(Cow::Borrowed(&r.buffer()[at..again.position()]));
            }
        }
    }
}

/// Rejects a duplicate key in one map, for free while the keys come in the
/// canonical order the apiserver writes (RFC 8949 4.2.1: shorter first,
/// then bytewise) or in plain bytewise order; a map in neither is checked
/// through a set.
#[derive(Debug)]
pub(crate) struct KeyCheck<'a> {
    /// Where the map's first key starts.
    body: usize,
    /// Keys seen so far.
    count: u64,
    prev: Option<Cow<'a, [u8]>>,
    /// The keys so far are in canonical order (shorter first, then bytewise).
    canonical: bool,
    /// The keys so far are in bytewise order (what encoders that sort like
    /// a `BTreeMap` write).
    lexical: bool,
    seen: Option<std::collections::HashSet<Cow<'a, [u8]>>>,
}

impl<'a> KeyCheck<'a> {
    /// For the map whose first key starts at `body`.
    pub(crate) fn new(body: usize) -> Self {
        KeyCheck {
            body,
            count: 0,
            prev: None,
            canonical: true,
            lexical: true,
            seen: None,
        }
    }

    /// Checks the key that starts where `r` is, without moving `r`.
    pub(crate) fn check(&mut self, r: &Reader<'a>) -> Result<(), CborError> {
        let key = key_content(&mut r.clone())?;
        let dup = || CborError::Invalid {
            offset: r.position(),
            reason: "a duplicate map key",
        };
        if let Some(seen) = &mut self.seen {
            if !seen.insert(key) {
                return Err(dup());
            }
        } else {
            if let Some(p) = &self.prev {
                self.canonical &= (p.len(), &p[..]) < (key.len(), &key[..]);
                self.lexical &= p[..] < key[..];
            }
            if self.canonical || self.lexical {
                self.prev = Some(key);
            } else {
                // out of canonical order: every key so far into a set
                let mut seen = std::collections::HashSet::new();
                let mut scan = Reader::at(r.buffer(), self.body);
                for _ in 0..self.count {
                    seen.insert(key_content(&mut scan)?);
                    scan.skip()?;
                }
                if !seen.insert(key) {
                    return Err(dup());
                }
                self.seen = Some(seen);
                self.prev = None;
            }
        }
        self.count += 1;
        Ok(())
    }
}

/// A byte string's content as text: borrowed when it is UTF-8, with U+FFFD
/// for invalid sequences otherwise (what Go's encoding/json writes).
pub(crate) fn bytes_to_str(b: Cow<'_, [u8]>) -> Cow<'_, str> {
    match b {
        Cow::Borrowed(s) => String::from_utf8_lossy(s),
        Cow::Owned(v) => match String::from_utf8(v) {
            Ok(s) => Cow::Owned(s),
            Err(e) => Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()),
        },
    }
}

/// IEEE 754 half precision to double.
pub(crate) fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f64::from(h & 0x3ff);
    let v = match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    };
    sign * v
}

/// The length of the first complete data item of `buf` (an event of a
/// CBOR sequence): `Ok(None)` when `buf` ends inside it.
pub fn item_len(buf: &[u8]) -> Result<Option<usize>, CborError> {
    let mut r = Reader::new(buf);
    match r.skip() {
        Ok(()) => Ok(Some(r.position())),
        Err(CborError::Truncated { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a tag 21/22/23 byte string reads as: its expected text encoding.
pub(crate) fn later_encoding(tag: u64, b: &[u8]) -> Option<String> {
    match tag {
        TAG_BASE64 => Some(base64(b, BASE64, true)),
        TAG_BASE64URL => Some(base64(b, BASE64URL, false)),
        TAG_BASE16 => Some(b.iter().map(|x| format!("{x:02x}")).collect()),
        _ => None,
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

pub(crate) fn base64(b: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, x)| acc | (u32::from(*x) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..4 {
            if i < chars {
                out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabets() {
        assert_eq!(base64(b"", BASE64, true), "");
        assert_eq!(base64(b"f", BASE64, true), "Zg==");
        assert_eq!(base64(b"fo", BASE64, true), "Zm8=");
        assert_eq!(base64(b"foo", BASE64, true), "Zm9v");
        assert_eq!(base64(&[0xfb, 0xff], BASE64URL, false), "-_8");
    }

    #[test]
    fn heads_of_every_major_type() {
        let mut r = Reader::new(&[
            0x17, 0x18, 0x18, 0x20, 0x43, b'a', b'b', b'c', 0x62, b'h', b'i', 0x82, 0xa1, 0xc1,
            0xf4, 0xf5, 0xf6, 0xf7, 0xf9, 0x3c, 0x00, 0xfa, 0x3f, 0x80, 0x00, 0x00, 0xfb, 0x3f,
            0xf8, 0, 0, 0, 0, 0, 0,
        ]);
        assert_eq!(r.next().unwrap(), Item::Uint(23));
        assert_eq!(r.next().unwrap(), Item::Uint(24));
        assert_eq!(r.next().unwrap(), Item::Nint(0));
        assert_eq!(r.next().unwrap(), Item::Bytes(Cow::Borrowed(b"abc")));
        assert_eq!(r.next().unwrap(), Item::Text(Cow::Borrowed("hi")));
        assert_eq!(r.next().unwrap(), Item::Array(Some(2)));
        assert_eq!(r.next().unwrap(), Item::Map(Some(1)));
        assert_eq!(r.next().unwrap(), Item::Tag(1));
        assert_eq!(r.next().unwrap(), Item::Bool(false));
        assert_eq!(r.next().unwrap(), Item::Bool(true));
        assert_eq!(r.next().unwrap(), Item::Null);
        assert_eq!(r.next().unwrap(), Item::Undefined);
        assert_eq!(r.next().unwrap(), Item::Float(1.0));
        assert_eq!(r.next().unwrap(), Item::Float(1.0));
        assert_eq!(r.next().unwrap(), Item::Float(1.5));
        assert!(r.is_empty());
    }

    #[test]
    fn half_floats() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0xc000), -2.0);
        assert_eq!(f16_to_f64(0x4a40), 12.5);
        assert_eq!(f16_to_f64(0x0001), 5.960464477539063e-8);
        assert_eq!(f16_to_f64(0x7bff), 65504.0);
        assert!(f16_to_f64(0x7c00).is_infinite());
        assert!(f16_to_f64(0x7e00).is_nan());
    }

    #[test]
    fn indefinite_items_and_strings() {
        // (_ h'01', h'02') then [_ 1, [2]] then {_ "a": 1}
        let buf = [
            0x5f, 0x41, 1, 0x41, 2, 0xff, 0x9f, 0x01, 0x81, 0x02, 0xff, 0xbf, 0x61, b'a', 0x01,
            0xff,
        ];
        let mut r = Reader::new(&buf);
        assert_eq!(r.next().unwrap(), Item::Bytes(Cow::Owned(vec![1, 2])));
        r.skip().unwrap();
        r.skip().unwrap();
        assert!(r.is_empty());
        assert_eq!(item_len(&buf[6..]).unwrap(), Some(5));
    }

    #[test]
    fn truncated_and_malformed_input_is_an_error() {
        assert_eq!(item_len(&[0x82, 0x01]).unwrap(), None);
        assert_eq!(item_len(&[0x5a, 0xff, 0xff, 0xff, 0xff]).unwrap(), None);
        assert_eq!(
            item_len(&[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).unwrap(),
            None
        );
        assert!(item_len(&[0x1c]).is_err(), "reserved");
        assert!(item_len(&[0xff]).is_err(), "a lone break");
        assert!(
            item_len(&[0x62, 0xff, 0xfe]).is_err(),
            "text that is not UTF-8"
        );
        assert!(
            item_len(&[0x5f, 0x61, b'a', 0xff]).is_err(),
            "a text chunk in bytes"
        );
        assert!(item_len(&[0x3f]).is_err(), "an indefinite integer");
        let deep = vec![0x81; MAX_DEPTH + 2];
        assert!(matches!(item_len(&deep), Err(CborError::Invalid { .. })));
    }

    #[test]
    fn duplicate_keys_are_found_in_and_out_of_order() {
        fn check(buf: &[u8]) -> Result<(), CborError> {
            let mut r = Reader::new(buf);
            let Item::Map(Some(n)) = r.next()? else {
                panic!()
            };
            let mut keys = KeyCheck::new(r.position());
            for _ in 0..n {
                keys.check(&r)?;
                r.skip()?;
                r.skip()?;
            }
            Ok(())
        }
        // {"a":1,"b":2,"aa":3}: canonical
        check(&[0xa3, 0x41, b'a', 1, 0x41, b'b', 2, 0x42, b'a', b'a', 3]).unwrap();
        // {"aa":1,"b":2}: bytewise, not canonical
        check(&[0xa2, 0x42, b'a', b'a', 1, 0x41, b'b', 2]).unwrap();
        assert!(
            check(&[
                0xa3, 0x42, b'a', b'a', 1, 0x41, b'b', 2, 0x42, b'a', b'a', 3
            ])
            .is_err()
        );
        // {"b":1,"a":2}: out of order, no duplicate
        check(&[0xa2, 0x41, b'b', 1, 0x41, b'a', 2]).unwrap();
        // {"a":1,"a":2} as a byte and a text string
        assert!(check(&[0xa2, 0x41, b'a', 1, 0x61, b'a', 2]).is_err());
        // {"b":1,"a":2,"b":3}
        assert!(check(&[0xa3, 0x41, b'b', 1, 0x41, b'a', 2, 0x41, b'b', 3]).is_err());
    }

    #[test]
    fn byte_strings_read_as_text() {
        let mut r = Reader::new(&[0x43, b'a', 0xff, b'b', 0x42, b'o', b'k']);
        assert_eq!(r.string().unwrap(), "a\u{fffd}b");
        assert!(matches!(r.string().unwrap(), Cow::Borrowed("ok")));
    }
}
