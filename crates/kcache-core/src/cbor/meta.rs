//! A CBOR object's metadata, read without decoding the rest; field values
//! by path; the object without `metadata.managedFields`.

use std::borrow::Cow;
use std::ops::Range;

use super::CborError;
use super::de::decode_at;
use super::json::value_json;
use super::reader::{Item, KeyCheck, Reader};
use crate::object::OwnerReference;
use crate::string_map::StringMap;

/// What [`CachedObject`](crate::CachedObject) keeps of a CBOR object's
/// top level and `metadata`.
#[derive(Debug, Default)]
pub(crate) struct CborMeta<'a> {
    pub(crate) api_version: Option<Cow<'a, str>>,
    pub(crate) kind: Option<Cow<'a, str>>,
    pub(crate) name: Option<Cow<'a, str>>,
    pub(crate) namespace: Option<Cow<'a, str>>,
    pub(crate) uid: Option<Cow<'a, str>>,
    pub(crate) resource_version: Option<Cow<'a, str>>,
    pub(crate) deletion_timestamp: Option<Cow<'a, str>>,
    pub(crate) generation: Option<i64>,
    pub(crate) labels: Option<StringMap>,
    pub(crate) annotations: Option<StringMap>,
    pub(crate) owner_references: Option<Vec<OwnerReference>>,
    pub(crate) finalizers: Option<Vec<String>>,
    /// The `managedFields` entry (key and value) in the buffer.
    managed_fields: Option<Range<usize>>,
    /// The metadata map's head and its definite entry count.
    metadata_head: Option<(Range<usize>, Option<u64>)>,
}

fn opt_string<'a>(r: &mut Reader<'a>) -> Result<Option<Cow<'a, str>>, CborError> {
    match r.peek_byte() {
        Some(0xf6 | 0xf7) => {
            r.next()?;
            Ok(None)
        }
        _ => r.string().map(Some),
    }
}

/// Reads a map's entries, calling `entry` with the reader at each value
/// (which it must consume); keys checked for duplicates.
fn entries<'a>(
    r: &mut Reader<'a>,
    mut entry: impl FnMut(&mut Reader<'a>, &str, usize) -> Result<(), CborError>,
) -> Result<(), CborError> {
    let n = match r.next()? {
        Item::Map(n) => n,
        Item::Tag(super::reader::TAG_SELF_DESCRIBED) => return entries(r, entry),
        _ => return Err(r.error("an object that is not a map")),
    };
    if let Some(n) = n {
        r.check_count(n)?;
    }
    let mut keys = KeyCheck::new(r.position());
    let mut left = n;
    loop {
        match &mut left {
            Some(0) => return Ok(()),
            Some(n) => *n -= 1,
            None => {
                if r.at_break()? {
                    return Ok(());
                }
            }
        }
        keys.check(r)?;
        let key_start = r.position();
        let key = r.string()?;
        entry(r, &key, key_start)?;
    }
}

/// Scans the top level and `metadata` of a CBOR object.
pub(crate) fn scan(bytes: &[u8]) -> Result<CborMeta<'_>, CborError> {
    let mut r = Reader::new(bytes);
    r.skip_self_described();
    let mut m = CborMeta::default();
    entries(&mut r, |r, key, _| {
        match key {
            "apiVersion" => m.api_version = opt_string(r)?,
            "kind" => m.kind = opt_string(r)?,
            "metadata" if r.peek_byte() == Some(0xf6) => {
                r.next()?;
            }
            "metadata" => {
                let head_start = r.position();
                let mut peek = r.clone();
                let count = match peek.next()? {
                    Item::Map(n) => n,
                    _ => None,
                };
                m.metadata_head = Some((head_start..peek.position(), count));
                entries(r, |r, key, key_start| {
                    match key {
                        "name" => m.name = opt_string(r)?,
                        "namespace" => m.namespace = opt_string(r)?,
                        "uid" => m.uid = opt_string(r)?,
                        "resourceVersion" => m.resource_version = opt_string(r)?,
                        "deletionTimestamp" => m.deletion_timestamp = opt_string(r)?,
                        "generation" => m.generation = decode_at(r)?,
                        "labels" => m.labels = decode_at(r)?,
                        "annotations" => m.annotations = decode_at(r)?,
                        "ownerReferences" => m.owner_references = decode_at(r)?,
                        "finalizers" => m.finalizers = decode_at(r)?,
                        "managedFields" => {
                            r.skip()?;
                            m.managed_fields = Some(key_start..r.position());
                        }
                        _ => r.skip()?,
                    }
                    Ok(())
                })?;
            }
            _ => r.skip()?,
        }
        Ok(())
    })?;
    if !r.is_empty() {
        return Err(CborError::Trailing(bytes.len() - r.position()));
    }
    Ok(m)
}

/// The object without its `metadata.managedFields` entry (`None` when it
/// has none): the entry cut out, the metadata map's count lowered.
pub(crate) fn without_managed_fields(bytes: &[u8], m: &CborMeta<'_>) -> Option<Vec<u8>> {
    let cut = m.managed_fields.clone()?;
    let (head, count) = m.metadata_head.clone()?;
    let mut out = Vec::with_capacity(bytes.len() - cut.len());
    out.extend_from_slice(&bytes[..head.start]);
    match count {
        Some(n) => put_head(&mut out, 5, n.saturating_sub(1)),
        None => out.extend_from_slice(&bytes[head.clone()]),
    }
    out.extend_from_slice(&bytes[head.end..cut.start]);
    out.extend_from_slice(&bytes[cut.end..]);
    Some(out)
}

fn put_head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    match n {
        0..=23 => out.push(m | n as u8),
        24..=0xff => out.extend_from_slice(&[m | 24, n as u8]),
        0x100..=0xffff => {
            out.push(m | 25);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(m | 26);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(m | 27);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// The value at a field path (`["spec", "nodeName"]`; array elements by
/// index): a string as its text, anything else as its JSON, `None` when
/// absent or `null`.
pub(crate) fn field_value(
    bytes: &[u8],
    segments: &[String],
) -> Result<Option<Box<str>>, CborError> {
    let mut r = Reader::new(bytes);
    r.skip_self_described();
    for seg in segments {
        match r.next()? {
            Item::Map(n) => {
                let mut found = false;
                let mut left = n;
                while r.next_entry(&mut left)? {
                    if r.string()? == seg.as_str() {
                        found = true;
                        break;
                    }
                    r.skip()?;
                }
                if !found {
                    return Ok(None);
                }
            }
            Item::Array(n) => {
                let Ok(want) = seg.parse::<u64>() else {
                    return Ok(None);
                };
                let mut i = 0;
                loop {
                    match n {
                        Some(n) if i >= n => return Ok(None),
                        None if r.at_break()? => return Ok(None),
                        _ => {}
                    }
                    if i == want {
                        break;
                    }
                    r.skip()?;
                    i += 1;
                }
            }
            _ => return Ok(None),
        }
    }
    match r.peek_byte() {
        Some(0xf6 | 0xf7) => Ok(None),
        Some(b) if b >> 5 == 2 || b >> 5 == 3 => Ok(Some(Box::from(r.string()?.as_ref()))),
        _ => {
            let mut out = Vec::new();
            value_json(&mut r, &mut out)?;
            Ok(Some(Box::from(String::from_utf8_lossy(&out).as_ref())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bs(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        put_head(&mut v, 2, s.len() as u64);
        v.extend_from_slice(s.as_bytes());
        v
    }
    fn map(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut v = Vec::new();
        put_head(&mut v, 5, entries.len() as u64);
        for (k, val) in entries {
            v.extend(bs(k));
            v.extend_from_slice(val);
        }
        v
    }

    fn object() -> Vec<u8> {
        let mut v = vec![0xd9, 0xd9, 0xf7];
        v.extend(map(&[
            ("kind", bs("Widget")),
            (
                "spec",
                map(&[
                    ("size", vec![0x05]),
                    ("node", bs("n1")),
                    ("tags", vec![0x82, 0x41, b'a', 0x41, b'b']),
                ]),
            ),
            ("apiVersion", bs("example.com/v1")),
            (
                "metadata",
                map(&[
                    ("uid", bs("u-1")),
                    ("name", bs("w")),
                    ("labels", map(&[("app", bs("web"))])),
                    ("namespace", bs("prod")),
                    ("generation", vec![0x03]),
                    ("finalizers", vec![0x81, 0x41, b'f']),
                    ("managedFields", vec![0x81, 0xa1, 0x41, b'm', 0x41, b'x']),
                    ("resourceVersion", bs("42")),
                    (
                        "ownerReferences",
                        vec![0x81]
                            .into_iter()
                            .chain(map(&[
                                ("kind", bs("Set")),
                                ("name", bs("s")),
                                ("uid", bs("u-0")),
                                ("apiVersion", bs("v1")),
                                ("controller", vec![0xf5]),
                            ]))
                            .collect(),
                    ),
                ]),
            ),
        ]));
        v
    }

    #[test]
    fn scans_the_metadata() {
        let b = object();
        let m = scan(&b).unwrap();
        assert_eq!(m.kind.as_deref(), Some("Widget"));
        assert_eq!(m.api_version.as_deref(), Some("example.com/v1"));
        assert_eq!(m.name.as_deref(), Some("w"));
        assert_eq!(m.namespace.as_deref(), Some("prod"));
        assert_eq!(m.uid.as_deref(), Some("u-1"));
        assert_eq!(m.resource_version.as_deref(), Some("42"));
        assert_eq!(m.generation, Some(3));
        assert_eq!(m.labels.as_ref().unwrap().get("app"), Some("web"));
        assert_eq!(m.finalizers.as_deref(), Some(&["f".to_owned()][..]));
        let o = &m.owner_references.as_ref().unwrap()[0];
        assert_eq!((o.kind.as_str(), o.controller), ("Set", Some(true)));
    }

    #[test]
    fn cuts_managed_fields_and_nothing_else() {
        let b = object();
        let m = scan(&b).unwrap();
        let cut = without_managed_fields(&b, &m).unwrap();
        let before: serde_json::Value = super::super::decode(&b).unwrap();
        let after: serde_json::Value = super::super::decode(&cut).unwrap();
        let mut expected = before.clone();
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(after, expected);
        assert!(without_managed_fields(&cut, &scan(&cut).unwrap()).is_none());
    }

    #[test]
    fn field_values_by_path() {
        let b = object();
        let f = |p: &[&str]| {
            field_value(&b, &p.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
        };
        assert_eq!(f(&["spec", "node"]).as_deref(), Some("n1"));
        assert_eq!(f(&["spec", "size"]).as_deref(), Some("5"));
        assert_eq!(f(&["spec", "tags", "1"]).as_deref(), Some("b"));
        assert_eq!(f(&["spec", "tags"]).as_deref(), Some(r#"["a","b"]"#));
        assert_eq!(f(&["spec", "missing"]), None);
        assert_eq!(f(&["spec", "tags", "9"]), None);
    }

    #[test]
    fn a_cbor_object_caches_as_its_json_does() {
        use crate::{CachedObject, FieldPaths, Format, ObjectOptions};
        let b = object();
        let json = super::super::to_json(&b).unwrap();
        let options = ObjectOptions {
            strip_managed_fields: true,
            field_paths: Some(
                FieldPaths::new(["/spec/node", "/spec/tags/0", "/metadata/name"]).unwrap(),
            ),
            ..ObjectOptions::default()
        };
        let c: CachedObject<serde_json::Value> =
            CachedObject::from_cbor_with(b.clone(), &options).unwrap();
        let j: CachedObject<serde_json::Value> =
            CachedObject::from_bytes_with(json, &options).unwrap();
        assert_eq!(c.format(), Format::Cbor);
        assert_eq!(format!("{:?}", c.meta()), format!("{:?}", j.meta()));
        assert_eq!(c.decode().unwrap(), j.decode().unwrap());
        let cj: serde_json::Value = serde_json::from_slice(&c.json().unwrap()).unwrap();
        assert_eq!(cj, j.decode().unwrap());
        for p in ["/spec/node", "/spec/tags/0", "/metadata/name"] {
            assert_eq!(c.field(p), j.field(p), "{p}");
        }
        assert_eq!(c.field("/spec/node"), Some("n1"));
        let full: CachedObject<serde_json::Value> = CachedObject::from_cbor(b).unwrap();
        let cut = full.without_managed_fields().unwrap();
        assert_eq!(cut.format(), Format::Cbor);
        assert_eq!(cut.decode().unwrap(), c.decode().unwrap());
    }

    #[test]
    fn malformed_metadata_is_an_error() {
        assert!(scan(&[0x01]).is_err(), "not a map");
        assert!(scan(&map(&[("metadata", map(&[("name", vec![0x01])]))])).is_err());
        assert!(
            scan(&map(&[("kind", bs("a")), ("kind", bs("b"))])).is_err(),
            "duplicate"
        );
        let mut trailing = map(&[("kind", bs("a"))]);
        trailing.push(0x00);
        assert!(matches!(scan(&trailing), Err(CborError::Trailing(1))));
    }
}
