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

use std::ops::Range;

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

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_ws(s[i]) {
        i += 1;
    }
    i
}

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
