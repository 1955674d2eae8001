//! The informer's snapshot reader (warm restart), on arbitrary and on
//! corrupted files.
//!
//! - It never panics, on any bytes.
//! - It never allocates more than the file can justify: the largest single
//!   allocation while reading an `n`-byte file is at most
//!   [`allocation_limit`]`(n)` (64 KiB + 16 × n), so every length in the
//!   file is checked against the bytes left before a buffer is sized by it.
//! - It accepts only what the writer writes: a file it reads back,
//!   written again from what was read, gives the same bytes.
//! - The input is read three ways: as it is; with its two checksums
//!   recomputed (so that mutations reach the structure behind them); and
//!   as the material of a snapshot (fingerprint, resourceVersion, objects
//!   made from its bytes), which is written, must read back equal, and
//!   must be refused when cut short, when a byte is changed, or when read
//!   for another informer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kcache_core::protobuf::TypeMeta;
use kcache_core::{CachedObject, ObjectOptions};
use kcache_informer::fuzzing::{decode_snapshot, encode_snapshot};
use kcache_informer::snapshot::Fingerprint;

use crate::alloc::largest_allocation;
use crate::preview;

/// The fingerprint the seed snapshots are written with and arbitrary
/// inputs are read against.
pub fn fingerprint() -> Fingerprint {
    let mut f = Fingerprint::default();
    f.cluster_uid = "0b0d2b9a-7d5e-4a51-9c3f-2a1e0c6d8f10".into();
    f.server_url = Some("https://127.0.0.1:6443".into());
    f.version = "v1".into();
    f.resource = "configmaps".into();
    f.namespace = Some("default".into());
    f.label_selector = Some("app=web".into());
    f.strip_managed_fields = true;
    f
}

/// The largest single allocation allowed while reading an `n`-byte file:
/// every buffer the reader sizes is bounded by the bytes it has (a string,
/// an object: at most `n`; the object list: 8 bytes per 4 bytes of file;
/// an object's metadata: a few times the JSON it comes from).
pub fn allocation_limit(n: usize) -> usize {
    64 * 1024 + 16 * n
}

const CRC_POLY: u64 = 0xC96C_5795_D787_0F42;

/// One byte's CRC step, bit by bit.
const fn crc_byte(mut c: u64) -> u64 {
    let mut k = 0;
    while k < 8 {
        c = if c & 1 != 0 {
            (c >> 1) ^ CRC_POLY
        } else {
            c >> 1
        };
        k += 1;
    }
    c
}

static CRC_TABLE: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = crc_byte(i as u64);
        i += 1;
    }
    t
};

/// CRC-64/XZ, as the snapshot format uses: reflected, polynomial
/// 0x42F0E1EBA9EA3693, initial value and final xor all ones. Byte by byte:
/// independent of the reader's slicing-by-8 implementation.
pub fn crc64(data: &[u8]) -> u64 {
    let mut crc = !0u64;
    for &b in data {
        crc = CRC_TABLE[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// `data` with both checksums recomputed, when it is long enough to have
/// them where its header length says: header checksum after
/// `16 + header length` bytes, the file checksum in the last 8.
pub fn fix_checksums(data: &[u8]) -> Option<Vec<u8>> {
    let header_len = u32::from_le_bytes(data.get(12..16)?.try_into().ok()?) as usize;
    let header_end = 16usize.checked_add(header_len)?;
    if header_end + 8 > data.len() {
        return None;
    }
    let mut fixed = data.to_vec();
    let crc = crc64(&fixed[..header_end]);
    fixed[header_end..header_end + 8].copy_from_slice(&crc.to_le_bytes());
    let n = fixed.len();
    if n >= header_end + 16 {
        let crc = crc64(&fixed[..n - 8]);
        fixed[n - 8..].copy_from_slice(&crc.to_le_bytes());
    }
    Some(fixed)
}

/// Reads `data` against `expected`: bounded allocation, and if accepted,
/// written again it gives the same bytes.
fn read_checked(data: &[u8], expected: &Fingerprint) {
    let (result, largest) =
        largest_allocation(|| decode_snapshot::<()>(data, expected, &ObjectOptions::default()));
    let limit = allocation_limit(data.len());
    assert!(
        largest <= limit,
        "reading a {}-byte file allocated {largest} bytes at once (limit {limit}): a length \
         from the file sized a buffer before it was checked against the bytes left; input {}",
        data.len(),
        preview(data)
    );
    if let Ok(read) = result {
        let again = encode_snapshot(
            expected,
            &read.resource_version,
            read.written_at,
            &read.objects,
        )
        .expect("what was read can be written");
        assert!(
            again == data,
            "accepted a file that the writer would write differently: {}",
            preview(data)
        );
    }
}

/// FNV-1a, to derive positions and values from the input.
fn hash(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn pb_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn pb_field(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    pb_varint(out, number << 3 | 2);
    pb_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A ConfigMap as protobuf (its own message, as the apiserver sends it in
/// a list): name, namespace (when given), resourceVersion, data {v: value}.
pub fn protobuf_config_map(name: &str, namespace: Option<&str>, rv: &str, value: &str) -> Vec<u8> {
    let mut meta = Vec::new();
    pb_field(&mut meta, 1, name.as_bytes());
    if let Some(ns) = namespace {
        pb_field(&mut meta, 3, ns.as_bytes());
    }
    pb_field(&mut meta, 6, rv.as_bytes());
    let mut entry = Vec::new();
    pb_field(&mut entry, 1, b"v");
    pb_field(&mut entry, 2, value.as_bytes());
    let mut cm = Vec::new();
    pb_field(&mut cm, 1, &meta);
    pb_field(&mut cm, 2, &entry);
    cm
}

/// The type of the protobuf seed objects.
pub const CONFIG_MAP: TypeMeta<'static> = TypeMeta {
    api_version: "v1",
    kind: "ConfigMap",
};

/// A snapshot's material made from `data`: its NUL-separated fields are
/// the fingerprint's strings, the resourceVersion and up to 16 objects
/// (every third one protobuf, the others JSON).
fn material(data: &[u8]) -> (Fingerprint, String, SystemTime, Vec<CachedObject<()>>) {
    let fields: Vec<String> = data
        .split(|b| *b == 0)
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    let field = |i: usize| fields.get(i).cloned().unwrap_or_default();
    let opt = |i: usize| fields.get(i).filter(|f| !f.is_empty()).cloned();
    let h = hash(data);
    let mut fp = Fingerprint::default();
    fp.cluster_uid = field(0);
    fp.server_url = opt(1);
    fp.group = field(2);
    fp.version = field(3);
    fp.resource = field(4);
    fp.metadata_only = h & 1 != 0;
    fp.namespace = opt(5);
    fp.label_selector = opt(6);
    fp.field_selector = opt(7);
    fp.transform_id = opt(8);
    fp.strip_managed_fields = h & 2 != 0;
    // an informer writes only once synced: never an empty resourceVersion
    let rv = opt(9).unwrap_or_else(|| "1".to_owned());
    let written_at = UNIX_EPOCH + Duration::from_millis(h >> 24);
    let objects = fields
        .iter()
        .skip(10)
        .take(16)
        .enumerate()
        .map(|(i, f)| {
            let name = if f.is_empty() { "x" } else { f.as_str() };
            if i % 3 == 1 {
                let ns = (i % 2 == 0).then(|| fp.namespace.clone().unwrap_or_default());
                let pb = protobuf_config_map(name, ns.as_deref(), &i.to_string(), f);
                return CachedObject::from_protobuf(pb, CONFIG_MAP).expect("an object with a name");
            }
            let mut meta = serde_json::json!({"name": name, "resourceVersion": i.to_string()});
            if i % 2 == 0 {
                meta["namespace"] = fp.namespace.clone().unwrap_or_default().into();
            }
            let json = serde_json::json!({"kind": "ConfigMap", "metadata": meta, "data": {"v": f}});
            CachedObject::from_bytes(serde_json::to_vec(&json).expect("a Value serializes"))
                .expect("an object with a name")
        })
        .collect();
    (fp, rv, written_at, objects)
}

/// Writes a snapshot made from `data`, reads it back, and corrupts it.
fn round_trip(data: &[u8]) {
    let (fp, rv, written_at, objects) = material(data);
    let file = encode_snapshot(&fp, &rv, written_at, &objects).expect("a snapshot can be written");
    let back = decode_snapshot::<()>(&file, &fp, &ObjectOptions::default())
        .unwrap_or_else(|e| panic!("a written snapshot does not read back: {e}"));
    assert_eq!(back.resource_version, rv);
    assert_eq!(back.written_at, written_at);
    assert_eq!(back.objects, objects, "objects differ after a round trip");
    let keys = |o: &[CachedObject<()>]| o.iter().map(|o| o.key().to_owned()).collect::<Vec<_>>();
    assert_eq!(keys(&back.objects), keys(&objects));

    let h = hash(data);
    let mut other = fp.clone();
    other.resource.push('x');
    assert!(
        decode_snapshot::<()>(&file, &other, &ObjectOptions::default()).is_err(),
        "read for another informer"
    );
    let cut = (h as usize) % file.len();
    assert!(
        decode_snapshot::<()>(&file[..cut], &fp, &ObjectOptions::default()).is_err(),
        "accepted the file cut at {cut} of {}",
        file.len()
    );
    let mut flipped = file.clone();
    let at = ((h >> 16) as usize) % file.len();
    flipped[at] ^= 1 << ((h >> 8) % 8);
    assert!(
        decode_snapshot::<()>(&flipped, &fp, &ObjectOptions::default()).is_err(),
        "accepted the file with a bit of byte {at} flipped"
    );
    let mut longer = file;
    longer.push(h as u8);
    assert!(
        decode_snapshot::<()>(&longer, &fp, &ObjectOptions::default()).is_err(),
        "accepted the file with a byte appended"
    );
}

/// The target's check: panics when a property does not hold.
pub fn check(data: &[u8]) {
    let fp = fingerprint();
    read_checked(data, &fp);
    if let Some(fixed) = fix_checksums(data) {
        read_checked(&fixed, &fp);
    }
    round_trip(data);
}

/// The written seed snapshots of `fuzz/corpus/snapshot/`, by file name
/// (the smoke test checks the checked-in files are these bytes).
pub fn seed_files() -> Vec<(&'static str, Vec<u8>)> {
    let fp = fingerprint();
    let at = UNIX_EPOCH + Duration::from_millis(1_767_225_600_000);
    let obj = |json: &str| {
        CachedObject::<()>::from_bytes(json.as_bytes().to_vec()).expect("a seed object")
    };
    let three = vec![
        obj(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"default","resourceVersion":"3","labels":{"app":"web"}},"data":{"k":"v"}}"#,
        ),
        obj(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","namespace":"default","resourceVersion":"7","uid":"u-b"},"data":{"k":"v\u00e9 \"quoted\""}}"#,
        ),
        obj(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"default","resourceVersion":"9","ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"u-p","controller":true}]}}"#,
        ),
    ];
    let write = |rv: &str, objects: &[CachedObject<()>]| {
        encode_snapshot(&fp, rv, at, objects).expect("a seed snapshot")
    };
    let pb = |name: &str, rv: &str, value: &str| {
        CachedObject::<()>::from_protobuf(
            protobuf_config_map(name, Some("default"), rv, value),
            CONFIG_MAP,
        )
        .expect("a seed object")
    };
    let mixed = vec![
        three[0].clone(),
        pb("p", "11", "v\u{e9}"),
        three[1].clone(),
        pb("q", "12", ""),
    ];
    vec![
        ("three_objects", write("42", &three)),
        ("mixed_formats", write("43", &mixed)),
        ("empty", write("5", &[])),
        ("one_object", write("9", &three[2..])),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_check_value() {
        assert_eq!(crc64(b"123456789"), 0x995D_C9BB_DF19_39FA);
    }

    #[test]
    fn fixing_the_checksums_of_a_written_file_changes_nothing() {
        for (name, file) in seed_files() {
            assert_eq!(fix_checksums(&file).as_deref(), Some(&file[..]), "{name}");
            let read = decode_snapshot::<()>(&file, &fingerprint(), &ObjectOptions::default());
            assert!(read.is_ok(), "{name}: {read:?}");
        }
    }
}
