//! The reflector's list splitter (the fast path of `decode_list`), which
//! finds the items of a list body with a structural scan instead of a full
//! decode.
//!
//! - It never panics, on any bytes.
//! - Whatever it returns is made of the input: every item is a non-empty
//!   byte range of the body, in order, not overlapping; the envelope is
//!   the body with one bracketed range holding all the items replaced by
//!   `[]`.
//! - On a body serde_json accepts, it agrees with serde_json: a JSON object
//!   with exactly one member written `"items"` whose value is an array is
//!   split, into exactly the byte ranges of that array's elements as
//!   serde_json finds them (`RawValue`), and the envelope is the body with
//!   that array replaced by `[]`; any other valid JSON is not split (the
//!   caller then decodes it with serde, which reports what is wrong).

use std::fmt;
use std::ops::Range;

use kcache_reflector::fuzzing::split_list;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::preview;

/// One member of a JSON object as serde_json reads it: the key decoded,
/// whether it was written without escapes, the raw value.
struct Member<'a> {
    key: String,
    literal: bool,
    value: &'a RawValue,
}

/// A JSON object's members in order, duplicates kept.
struct Members<'a>(Vec<Member<'a>>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MembersVisitor)
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Members<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some((key, literal)) = map.next_key_seed(KeySeed)? {
            let value: &'de RawValue = map.next_value()?;
            members.push(Member {
                key,
                literal,
                value,
            });
        }
        Ok(Members(members))
    }
}

/// A key, and whether serde_json could borrow it from the input (it was
/// written without escapes).
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = (String, bool);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = (String, bool);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok((s.to_owned(), true))
    }

    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok((s.to_owned(), false))
    }
}

/// The byte range of `part` (borrowed from `body`) in `body`.
fn range_in(body: &[u8], part: &str) -> Range<usize> {
    let start = (part.as_ptr() as usize)
        .checked_sub(body.as_ptr() as usize)
        .filter(|s| s + part.len() <= body.len())
        .expect("serde_json borrowed a value from the body");
    start..start + part.len()
}

/// What holds for any answer, valid JSON or not.
fn check_shape(body: &[u8], envelope: &[u8], items: &[Range<usize>]) {
    let mut prev_end = None;
    for r in items {
        assert!(
            r.start < r.end && r.end <= body.len(),
            "item range {r:?} is not a non-empty range of the {}-byte body",
            body.len()
        );
        if let Some(end) = prev_end {
            assert!(
                r.start > end,
                "item {r:?} overlaps or touches the one before"
            );
        }
        prev_end = Some(r.end);
    }
    // envelope == body[..a] + "[]" + body[b..], with body[a..b] a bracketed
    // range around every item
    let (n, m) = (body.len(), envelope.len());
    assert!(
        m >= 2 && m - 2 <= n,
        "an envelope of {m} bytes cannot come from a {n}-byte body"
    );
    let prefix = body
        .iter()
        .zip(envelope)
        .take_while(|(a, b)| a == b)
        .count();
    let suffix = body
        .iter()
        .rev()
        .zip(envelope.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let found = ((m - 2).saturating_sub(suffix)..=prefix.min(m - 2)).any(|a| {
        let b = n - (m - 2 - a);
        &envelope[a..a + 2] == b"[]"
            && b >= a + 2
            && body[a] == b'['
            && body[b - 1] == b']'
            && items.first().is_none_or(|f| f.start > a)
            && items.last().is_none_or(|l| l.end < b)
    });
    assert!(
        found,
        "the envelope is not the body with its items array replaced by []: {}",
        preview(envelope)
    );
}

/// The target's check: panics when a property does not hold.
pub fn check(body: &[u8]) {
    let split = split_list(body);
    if let Some((envelope, items)) = &split {
        check_shape(body, envelope, items);
    }
    let Ok(Members(members)) = serde_json::from_slice::<Members<'_>>(body) else {
        // not JSON, or not JSON the reference can read (invalid UTF-8 in
        // a key): any answer will do, the caller's serde decode reports the
        // error; but valid JSON that is not an object is never split
        if serde_json::from_slice::<IgnoredAny>(body).is_ok()
            && body.trim_ascii_start().first() != Some(&b'{')
        {
            assert!(
                split.is_none(),
                "split valid JSON that is not an object: {}",
                preview(body)
            );
        }
        return;
    };
    let literal: Vec<&Member<'_>> = members
        .iter()
        .filter(|m| m.literal && m.key == "items")
        .collect();
    let array = match literal.as_slice() {
        [m] if m.value.get().starts_with('[') => Some(m.value.get()),
        _ => None,
    };
    match (array, split) {
        (None, None) => {}
        (None, Some(_)) => panic!(
            "split an object with {} members written \"items\", not one array: {}",
            literal.len(),
            preview(body)
        ),
        (Some(_), None) => panic!("fell back on a well-formed list: {}", preview(body)),
        (Some(array), Some((envelope, items))) => {
            let elements: Vec<&RawValue> =
                serde_json::from_str(array).expect("serde_json read it as an array");
            let want: Vec<Range<usize>> =
                elements.iter().map(|e| range_in(body, e.get())).collect();
            assert_eq!(
                items,
                want,
                "item ranges differ from serde_json's in {}",
                preview(body)
            );
            let r = range_in(body, array);
            let mut want_envelope = body[..r.start].to_vec();
            want_envelope.extend_from_slice(b"[]");
            want_envelope.extend_from_slice(&body[r.end..]);
            assert!(
                envelope == want_envelope,
                "envelope {} is not the body without its items {}",
                preview(&envelope),
                preview(&want_envelope)
            );
        }
    }
}
