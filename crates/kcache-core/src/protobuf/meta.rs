//! `metav1.ObjectMeta` read from an object's protobuf bytes (field 1 of
//! every top-level object), borrowing, without decoding the rest.
//!
//! Field numbers, from k8s.io/apimachinery v0.37.2
//! `pkg/apis/meta/v1/generated.proto`: ObjectMeta {1 name, 2 generateName,
//! 3 namespace, 4 selfLink, 5 uid, 6 resourceVersion, 7 generation,
//! 8 creationTimestamp, 9 deletionTimestamp, 10 deletionGracePeriodSeconds,
//! 11 labels, 12 annotations (map entries {1 key, 2 value}),
//! 13 ownerReferences, 14 finalizers, 17 managedFields};
//! OwnerReference {1 kind, 3 name, 4 uid, 5 apiVersion, 6 controller,
//! 7 blockOwnerDeletion}; Time {1 seconds, 2 nanos}.

use std::ops::Range;

use super::encode::put_varint;
use super::wire::{Reader, WireError, WireValue, read_message};

/// One `ownerReferences` entry, borrowed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OwnerRefView<'a> {
    pub(crate) api_version: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) name: &'a str,
    pub(crate) uid: &'a str,
    pub(crate) controller: Option<bool>,
    pub(crate) block_owner_deletion: Option<bool>,
}

/// The metadata of one object, borrowed from its bytes.
///
/// Strings are as sent: the apiserver writes every non-pointer string of
/// ObjectMeta even when empty, and JSON omits those (`omitempty`), so an
/// empty string here is "absent" for the JSON route.
#[derive(Debug, Default)]
pub(crate) struct ObjectMetaView<'a> {
    pub(crate) name: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) uid: &'a str,
    pub(crate) resource_version: &'a str,
    pub(crate) generation: i64,
    /// Seconds since the epoch; `None` when absent or the zero time.
    pub(crate) creation_timestamp: Option<i64>,
    /// Seconds since the epoch; `None` when absent or the zero time.
    pub(crate) deletion_timestamp: Option<i64>,
    pub(crate) labels: Vec<(&'a str, &'a str)>,
    pub(crate) annotations: Vec<(&'a str, &'a str)>,
    pub(crate) owner_references: Vec<OwnerRefView<'a>>,
    pub(crate) finalizers: Vec<&'a str>,
    /// Where ObjectMeta is in the object: its tag's offset, its value's
    /// offsets.
    pub(crate) meta_field: Range<usize>,
    pub(crate) meta_value: Range<usize>,
    /// The `managedFields` entries (tag to end), as offsets in the object.
    pub(crate) managed_fields: Vec<Range<usize>>,
}

const M: &str = "ObjectMeta";

fn time_seconds(b: &[u8]) -> Result<Option<i64>, WireError> {
    let mut r = Reader::new(b);
    let mut seconds = None;
    while let Some(f) = r.field()? {
        if f.number == 1 {
            seconds = Some(f.varint("Time")? as i64);
        }
    }
    Ok(seconds)
}

fn map_entry(b: &[u8]) -> Result<(&str, &str), WireError> {
    read_message(b, |(k, v): &mut (&str, &str), f| {
        match f.number {
            1 => *k = f.str("map entry")?,
            2 => *v = f.str("map entry")?,
            _ => {}
        }
        Ok(())
    })
}

fn owner_ref(b: &[u8]) -> Result<OwnerRefView<'_>, WireError> {
    read_message(b, |o: &mut OwnerRefView<'_>, f| {
        match f.number {
            1 => o.kind = f.str("OwnerReference")?,
            3 => o.name = f.str("OwnerReference")?,
            4 => o.uid = f.str("OwnerReference")?,
            5 => o.api_version = f.str("OwnerReference")?,
            6 => o.controller = Some(f.varint("OwnerReference")? != 0),
            7 => o.block_owner_deletion = Some(f.varint("OwnerReference")? != 0),
            _ => {}
        }
        Ok(())
    })
}

impl<'a> ObjectMetaView<'a> {
    /// Reads field 1 (`metadata`) of a top-level object and walks the other
    /// top-level fields (so a truncated object fails here).
    pub(crate) fn scan(object: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(object);
        let mut found = None;
        while let Some(f) = r.field()? {
            if f.number == 1 {
                if found.is_some() {
                    return Err(WireError::Duplicate {
                        message: "object",
                        field: 1,
                    });
                }
                let WireValue::Bytes(b) = f.value else {
                    return Err(WireError::WireType {
                        message: "object",
                        field: 1,
                        wire_type: f.value.wire_type(),
                    });
                };
                found = Some((f.start..f.end, f.end - b.len()..f.end));
            }
        }
        let (meta_field, meta_value) = found.ok_or(WireError::Missing {
            message: "object",
            field: "metadata",
        })?;
        let mut m = ObjectMetaView {
            meta_field,
            meta_value: meta_value.clone(),
            ..Default::default()
        };
        let base = meta_value.start;
        let mut r = Reader::new(&object[meta_value]);
        while let Some(f) = r.field()? {
            match f.number {
                1 => m.name = f.str(M)?,
                3 => m.namespace = f.str(M)?,
                5 => m.uid = f.str(M)?,
                6 => m.resource_version = f.str(M)?,
                7 => m.generation = f.varint(M)? as i64,
                8 => m.creation_timestamp = time_seconds(f.bytes(M)?)?,
                9 => m.deletion_timestamp = time_seconds(f.bytes(M)?)?,
                11 => m.labels.push(map_entry(f.bytes(M)?)?),
                12 => m.annotations.push(map_entry(f.bytes(M)?)?),
                13 => m.owner_references.push(owner_ref(f.bytes(M)?)?),
                14 => m.finalizers.push(f.str(M)?),
                17 => {
                    f.bytes(M)?;
                    m.managed_fields.push(base + f.start..base + f.end);
                }
                _ => {}
            }
        }
        Ok(m)
    }

    /// The object's bytes without the `managedFields` entries (ObjectMeta's
    /// length prefix rewritten); `None` when there are none.
    pub(crate) fn without_managed_fields(&self, object: &[u8]) -> Option<Vec<u8>> {
        if self.managed_fields.is_empty() {
            return None;
        }
        let cut: usize = self.managed_fields.iter().map(|r| r.len()).sum();
        let meta_len = self.meta_value.len() - cut;
        let mut out = Vec::with_capacity(object.len() - cut);
        out.extend_from_slice(&object[..self.meta_field.start]);
        out.push(0x0a); // field 1, length-delimited
        put_varint(&mut out, meta_len as u64);
        let mut at = self.meta_value.start;
        for r in &self.managed_fields {
            out.extend_from_slice(&object[at..r.start]);
            at = r.end;
        }
        out.extend_from_slice(&object[at..self.meta_value.end]);
        out.extend_from_slice(&object[self.meta_field.end..]);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::encode::{bytes_field, varint_field};

    fn object() -> Vec<u8> {
        let mut om = Vec::new();
        bytes_field(&mut om, 1, b"web-0");
        bytes_field(&mut om, 2, b"");
        bytes_field(&mut om, 3, b"prod");
        bytes_field(&mut om, 5, b"u-1");
        bytes_field(&mut om, 6, b"42");
        varint_field(&mut om, 7, 3);
        let mut t = Vec::new();
        varint_field(&mut t, 1, 1_795_947_342);
        bytes_field(&mut om, 8, &t);
        let mut e = Vec::new();
        bytes_field(&mut e, 1, b"app");
        bytes_field(&mut e, 2, b"web");
        bytes_field(&mut om, 11, &e);
        let mut mf = Vec::new();
        bytes_field(&mut mf, 1, b"kubectl");
        bytes_field(&mut om, 17, &mf);
        bytes_field(&mut om, 14, b"example.com/f");
        bytes_field(&mut om, 17, &mf);
        let mut o = Vec::new();
        bytes_field(&mut o, 1, b"ReplicaSet");
        bytes_field(&mut o, 3, b"web");
        bytes_field(&mut o, 4, b"u-0");
        bytes_field(&mut o, 5, b"apps/v1");
        varint_field(&mut o, 6, 1);
        bytes_field(&mut om, 13, &o);
        let mut obj = Vec::new();
        bytes_field(&mut obj, 1, &om);
        bytes_field(&mut obj, 2, b"\x52\x02n1"); // spec { nodeName: "n1" }
        obj
    }

    #[test]
    fn scans_and_strips_managed_fields() {
        let obj = object();
        let m = ObjectMetaView::scan(&obj).unwrap();
        assert_eq!(
            (m.name, m.namespace, m.uid, m.resource_version, m.generation),
            ("web-0", "prod", "u-1", "42", 3)
        );
        assert_eq!(m.creation_timestamp, Some(1_795_947_342));
        assert_eq!(m.deletion_timestamp, None);
        assert_eq!(m.labels, [("app", "web")]);
        assert_eq!(m.finalizers, ["example.com/f"]);
        assert_eq!(m.owner_references[0].kind, "ReplicaSet");
        assert_eq!(m.owner_references[0].controller, Some(true));
        assert_eq!(m.owner_references[0].block_owner_deletion, None);
        assert_eq!(m.managed_fields.len(), 2);
        let stripped = m.without_managed_fields(&obj).unwrap();
        // Two entries of 12 bytes (a 2-byte tag: field 17).
        assert_eq!(stripped.len(), obj.len() - 2 * 12);
        let s = ObjectMetaView::scan(&stripped).unwrap();
        assert!(s.managed_fields.is_empty());
        assert_eq!(s.finalizers, m.finalizers);
        assert_eq!(s.owner_references, m.owner_references);
        assert_eq!(&stripped[s.meta_field.end..], b"\x12\x04\x52\x02n1");
        assert!(s.without_managed_fields(&stripped).is_none());
    }

    #[test]
    fn every_truncation_is_an_error() {
        let obj = object();
        // Cut inside ObjectMeta or inside another field: an error. Cut
        // between two top-level fields after ObjectMeta: a shorter object
        // with the same metadata (see envelope's test for why).
        let ok_cuts = crate::protobuf::envelope::tests::field_ends(&obj, 0);
        let full = ObjectMetaView::scan(&obj).unwrap();
        for cut in 0..obj.len() {
            if let Ok(m) = ObjectMetaView::scan(&obj[..cut]) {
                assert!(ok_cuts.contains(&cut), "cut at {cut} accepted");
                assert_eq!((m.name, m.meta_value), (full.name, full.meta_value.clone()));
            }
        }
        // Metadata twice, or not a message.
        let mut twice = obj.clone();
        twice.extend_from_slice(&obj);
        assert!(matches!(
            ObjectMetaView::scan(&twice),
            Err(WireError::Duplicate { .. })
        ));
        assert!(matches!(
            ObjectMetaView::scan(&[0x08, 0x01]),
            Err(WireError::WireType { .. })
        ));
    }
}
