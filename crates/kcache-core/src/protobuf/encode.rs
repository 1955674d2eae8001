//! Writing protobuf as the apiserver writes it: fields, the `k8s\0` +
//! `runtime.Unknown` envelope and watch frames.
//!
//! kcache itself only reads protobuf (it writes one varint, where it cuts
//! `managedFields` out of an object); these are for fakes, tests and
//! benchmarks that play the apiserver.
//!
//! ```
//! use kcache_core::protobuf::{self, encode};
//!
//! let mut meta = Vec::new();
//! encode::bytes_field(&mut meta, 1, b"web-0"); // ObjectMeta.name
//! let mut pod = Vec::new();
//! encode::bytes_field(&mut pod, 1, &meta); // Pod.metadata
//! let body = encode::envelope("v1", "Pod", &pod);
//! let unknown = protobuf::Unknown::decode(&body)?;
//! assert_eq!(unknown.type_meta.kind, "Pod");
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

use super::envelope::MAGIC;

/// Appends `v` as a base-128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends field `number` as a length-delimited field (wire type 2: a
/// string, bytes or an embedded message).
pub fn bytes_field(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_varint(out, u64::from(number) << 3 | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends field `number` as a varint field (wire type 0).
pub fn varint_field(out: &mut Vec<u8>, number: u32, v: u64) {
    put_varint(out, u64::from(number) << 3);
    put_varint(out, v);
}

/// `k8s\0` + `runtime.Unknown` {typeMeta {apiVersion, kind}, raw,
/// contentEncoding "", contentType ""}: a whole protobuf body of an object
/// or a list whose message bytes are `raw`.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::new();
    bytes_field(&mut type_meta, 1, api_version.as_bytes());
    bytes_field(&mut type_meta, 2, kind.as_bytes());
    let mut out = MAGIC.to_vec();
    bytes_field(&mut out, 1, &type_meta);
    bytes_field(&mut out, 2, raw);
    bytes_field(&mut out, 3, b"");
    bytes_field(&mut out, 4, b"");
    out
}

/// One watch frame: a 4-byte big-endian length, then a `WatchEvent`
/// {type: `event_type`, object: `RawExtension` {raw: `object`}}, `object`
/// being an [`envelope`]d body. (An event of 4 GiB or more has no valid
/// length: its length is written modulo 2^32.)
pub fn watch_frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    let mut raw_extension = Vec::new();
    bytes_field(&mut raw_extension, 1, object);
    let mut event = Vec::new();
    bytes_field(&mut event, 1, event_type.as_bytes());
    bytes_field(&mut event, 2, &raw_extension);
    let mut out = (event.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&event);
    out
}
