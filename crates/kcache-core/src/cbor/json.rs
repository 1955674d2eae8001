//! CBOR to the JSON the apiserver would have sent, straight from the
//! bytes (no value built in between).

use std::io::Write;

use super::CborError;
use super::de::{Number, float, negative};
use super::reader::{
    Item, KeyCheck, MAX_DEPTH, Reader, TAG_BASE16, TAG_BASE64, TAG_BASE64URL, TAG_SELF_DESCRIBED,
    bytes_to_str, later_encoding,
};

/// Transcodes one CBOR object (the self-described tag in front optional)
/// to JSON: map entries in their CBOR order, strings escaped as JSON
/// escapes them, integral floats as integers, tag 22 byte strings as
/// base64. The same errors as [`decode`](super::decode).
pub fn to_json(bytes: &[u8]) -> Result<Vec<u8>, CborError> {
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 4);
    write_json(bytes, &mut out)?;
    Ok(out)
}

/// [`to_json`] appending to `out`.
pub(crate) fn write_json(bytes: &[u8], out: &mut Vec<u8>) -> Result<(), CborError> {
    let mut r = Reader::new(bytes);
    r.skip_self_described();
    value(&mut r, out, 0)?;
    if !r.is_empty() {
        return Err(CborError::Trailing(bytes.len() - r.position()));
    }
    Ok(())
}

/// Writes the JSON of the item at `r`, moving `r` past it.
pub(crate) fn value_json(r: &mut Reader<'_>, out: &mut Vec<u8>) -> Result<(), CborError> {
    value(r, out, 0)
}

fn string(out: &mut Vec<u8>, s: &str) {
    // serde_json's escaping: what the JSON route's bytes would hold
    let _ = serde_json::to_writer(&mut *out, s);
}

fn value(r: &mut Reader<'_>, out: &mut Vec<u8>, depth: usize) -> Result<(), CborError> {
    if depth > MAX_DEPTH {
        return Err(r.error("nested deeper than 64 levels"));
    }
    let start = r.position();
    match r.next()? {
        Item::Uint(n) => {
            let _ = write!(out, "{n}");
        }
        Item::Nint(n) => {
            let _ = write!(out, "{}", negative(n, r)?);
        }
        Item::Bytes(b) => string(out, &bytes_to_str(b)),
        Item::Text(t) => string(out, &t),
        Item::Array(n) => array(r, out, depth, n)?,
        Item::Map(n) => map(r, out, depth, n)?,
        Item::Tag(TAG_SELF_DESCRIBED) => value(r, out, depth + 1)?,
        Item::Tag(t @ (TAG_BASE64 | TAG_BASE64URL | TAG_BASE16)) => {
            let at = r.position();
            match r.next()? {
                Item::Bytes(b) => string(out, &later_encoding(t, &b).unwrap_or_default()),
                _ => {
                    *r = Reader::at(r.buffer(), at);
                    value(r, out, depth + 1)?;
                }
            }
        }
        Item::Tag(_) => value(r, out, depth + 1)?,
        Item::Bool(true) => out.extend_from_slice(b"true"),
        Item::Bool(false) => out.extend_from_slice(b"false"),
        Item::Null | Item::Undefined => out.extend_from_slice(b"null"),
        Item::Float(f) => match float(f, r)? {
            Number::U(n) => {
                let _ = write!(out, "{n}");
            }
            Number::I(n) => {
                let _ = write!(out, "{n}");
            }
            Number::F(f) => {
                let _ = serde_json::to_writer(&mut *out, &f);
            }
        },
        Item::Break => {
            *r = Reader::at(r.buffer(), start);
            return Err(r.error("a break outside an indefinite-length item"));
        }
    }
    Ok(())
}

/// An array of `n` items (`None`: indefinite length), as a JSON array.
fn array(
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
    depth: usize,
    n: Option<u64>,
) -> Result<(), CborError> {
    out.push(b'[');
    let mut first = true;
    let mut left = n;
    if let Some(n) = n {
        r.check_count(n)?;
    }
    while r.next_entry(&mut left)? {
        if !first {
            out.push(b',');
        }
        first = false;
        value(r, out, depth + 1)?;
    }
    out.push(b']');
    Ok(())
}

/// A map of `n` entries (`None`: indefinite length), as a JSON object:
/// duplicate keys and keys that are not strings are errors.
fn map(
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
    depth: usize,
    n: Option<u64>,
) -> Result<(), CborError> {
    out.push(b'{');
    let mut keys = KeyCheck::new(r.position());
    let mut first = true;
    let mut left = n;
    if let Some(n) = n {
        r.check_count(n)?;
    }
    while r.next_entry(&mut left)? {
        if !first {
            out.push(b',');
        }
        first = false;
        keys.check(r)?;
        // a key reads as the decode reads it (tags and all): it
        // must come out a JSON string
        let (at, written) = (r.position(), out.len());
        value(r, out, depth + 1)?;
        if out.get(written) != Some(&b'"') {
            *r = Reader::at(r.buffer(), at);
            return Err(r.error("a map key that is not a string"));
        }
        out.push(b':');
        value(r, out, depth + 1)?;
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcodes_to_the_json_the_decode_sees() {
        // {_ "a": [1, -2, 1.5, true, null], "b": 22(h'010203'), "c": "x\"y"}
        let buf = [
            0xd9, 0xd9, 0xf7, 0xbf, 0x41, b'a', 0x85, 0x01, 0x21, 0xf9, 0x3e, 0x00, 0xf5, 0xf6,
            0x41, b'b', 0xd6, 0x43, 1, 2, 3, 0x61, b'c', 0x63, b'x', b'"', b'y', 0xff,
        ];
        let json = to_json(&buf).unwrap();
        assert_eq!(
            std::str::from_utf8(&json).unwrap(),
            r#"{"a":[1,-2,1.5,true,null],"b":"AQID","c":"x\"y"}"#
        );
        let from_json: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let decoded: serde_json::Value = super::super::decode(&buf).unwrap();
        assert_eq!(from_json, decoded);
    }

    #[test]
    fn a_tagged_key_reads_as_the_decode_reads_it() {
        // {55799("a"): 1} (found by the fuzz smoke: the decode read it)
        let buf = [0xa1, 0xd9, 0xd9, 0xf7, 0x41, b'a', 0x01];
        assert_eq!(to_json(&buf).unwrap(), br#"{"a":1}"#);
        let v: serde_json::Value = super::super::decode(&buf).unwrap();
        assert_eq!(v, serde_json::json!({"a": 1}));
    }

    #[test]
    fn refuses_what_json_cannot_hold() {
        assert!(to_json(&[0xa1, 0x01, 0x01]).is_err(), "an integer key");
        assert!(
            to_json(&[0xa2, 0x41, b'a', 1, 0x41, b'a', 2]).is_err(),
            "a duplicate key"
        );
        assert!(to_json(&[0xf9, 0x7e, 0x00]).is_err(), "NaN");
        assert!(to_json(&[0x82, 0x01]).is_err(), "truncated");
    }
}
