//! Cutting `metadata.managedFields` out of an object's JSON bytes without a
//! full decode.

use crate::object::error::ObjectError;

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Whether the bytes may hold a `managedFields` member (cheap pre-check).
pub(crate) fn may_contain(bytes: &[u8]) -> bool {
    bytes.windows(13).any(|w| w == b"managedFields")
}

/// Removes the object member whose value spans `[val_start, val_end)` and
/// whose key is `key` (unescaped), with one adjacent comma, so the result
/// stays valid JSON. Returns `None` when the bytes around the value are not
/// the expected `"key" : value` shape (e.g. an escaped key): the caller then
/// falls back to a full decode.
pub(crate) fn cut_member(
    src: &[u8],
    val_start: usize,
    val_end: usize,
    key: &[u8],
) -> Option<Vec<u8>> {
    if val_start > val_end || val_end > src.len() {
        return None;
    }
    // Walk back over `ws : ws` to the key's closing quote.
    let mut i = val_start;
    while i > 0 && is_ws(src[i - 1]) {
        i -= 1;
    }
    if i == 0 || src[i - 1] != b':' {
        return None;
    }
    i -= 1;
    while i > 0 && is_ws(src[i - 1]) {
        i -= 1;
    }
    // src[..i] must end with `"key"`.
    let quoted_len = key.len() + 2;
    if i < quoted_len + 1 {
        return None;
    }
    let key_start = i - quoted_len;
    if src[key_start] != b'"' || src[i - 1] != b'"' || &src[key_start + 1..i - 1] != key {
        return None;
    }
    // The byte before the key (skipping whitespace) must be `{` or `,`.
    let mut before = key_start;
    while before > 0 && is_ws(src[before - 1]) {
        before -= 1;
    }
    if before == 0 {
        return None;
    }
    let prev = src[before - 1];
    // Walk forward over whitespace after the value.
    let mut after = val_end;
    while after < src.len() && is_ws(src[after]) {
        after += 1;
    }
    let next = *src.get(after)?;
    let (cut_start, cut_end) = match (prev, next) {
        // `{"k":v, ...` or `..., "k":v, ...`: drop the member and the following comma.
        (b'{' | b',', b',') => (key_start, after + 1),
        // `..., "k":v}`: drop the preceding comma and the member.
        (b',', b'}') => (before - 1, val_end),
        // `{"k":v}`: the only member.
        (b'{', b'}') => (key_start, val_end),
        _ => return None,
    };
    let mut out = Vec::with_capacity(src.len() - (cut_end - cut_start));
    out.extend_from_slice(&src[..cut_start]);
    out.extend_from_slice(&src[cut_end..]);
    Some(out)
}

/// Fallback: full decode to `serde_json::Value`, remove the field, re-encode.
pub(crate) fn strip_with_value(src: &[u8]) -> Result<Vec<u8>, ObjectError> {
    let mut v: serde_json::Value = serde_json::from_slice(src).map_err(ObjectError::Json)?;
    if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
    serde_json::to_vec(&v).map_err(ObjectError::Serialize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(src: &str) -> Option<String> {
        let start = src.find("[1]").unwrap();
        cut_member(src.as_bytes(), start, start + 3, b"managedFields")
            .map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn cut_first_middle_last_only() {
        assert_eq!(cut(r#"{"managedFields":[1],"a":2}"#).unwrap(), r#"{"a":2}"#);
        assert_eq!(
            cut(r#"{"a":1,"managedFields":[1],"b":2}"#).unwrap(),
            r#"{"a":1,"b":2}"#
        );
        assert_eq!(cut(r#"{"a":1,"managedFields":[1]}"#).unwrap(), r#"{"a":1}"#);
        assert_eq!(cut(r#"{"managedFields":[1]}"#).unwrap(), r#"{}"#);
        assert_eq!(
            cut("{ \"a\" : 1 ,\n  \"managedFields\" :\t[1] \n}").unwrap(),
            "{ \"a\" : 1  \n}"
        );
    }

    #[test]
    fn escaped_key_is_not_cut() {
        assert!(cut(r#"{"a":1,"managed\u0046ields":[1]}"#).is_none());
    }
}
