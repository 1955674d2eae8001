//! The snapshot file format: encode and decode, checksums, the format
//! version (see the [module docs](super) for the layout).

use std::fmt;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crc::{CRC_64_XZ, Crc, Digest, Table};
use kcache_core::protobuf::TypeMeta;
use kcache_core::{CachedObject, Format, ObjectOptions};

use super::{Fingerprint, SnapshotError};

/// The snapshot format this version of kcache reads and writes.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 3;

/// Format tag of an object stored as JSON.
pub(super) const OBJECT_JSON: u8 = 0;
/// Format tag of an object stored as protobuf.
pub(super) const OBJECT_PROTOBUF: u8 = 1;
/// Format tag of an object stored as CBOR.
pub(super) const OBJECT_CBOR: u8 = 2;

pub(super) const MAGIC: [u8; 8] = *b"\x89KCSNAP\n";
pub(super) const END: [u8; 8] = *b"KCSNEND\n";
pub(super) const MAX_HEADER: u32 = 1 << 20;

/// The snapshot checksum: CRC-64/XZ (ECMA-182 polynomial, reflected; check
/// value `0x995DC9BBDF1939FA`), the variant snapshot files have used since
/// format version 1. It detects every burst of up to 64 flipped bits.
static CRC64: Crc<u64, Table<16>> = Crc::<u64, Table<16>>::new(&CRC_64_XZ);

/// A running CRC-64/XZ of the bytes written or read so far.
#[derive(Clone)]
pub(super) struct Crc64(Digest<'static, u64, Table<16>>);

impl Crc64 {
    pub(super) fn new() -> Self {
        Crc64(CRC64.digest())
    }
    pub(super) fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }
    /// The checksum of everything so far (the digest goes on).
    pub(super) fn finish(&self) -> u64 {
        self.0.clone().finalize()
    }
}

pub(super) struct CrcWriter<W> {
    inner: W,
    crc: Crc64,
    written: u64,
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) -> io::Result<()> {
    let len = u32::try_from(s.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "string too long"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

pub(super) fn put_opt(out: &mut Vec<u8>, s: &Option<String>) -> io::Result<()> {
    match s {
        Some(s) => {
            out.push(1);
            put_str(out, s)
        }
        None => {
            out.push(0);
            Ok(())
        }
    }
}

pub(super) fn unix_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Writes a snapshot of `objects` (the state at `resource_version`) to `w`;
/// returns the bytes written.
pub(crate) fn encode<K, W: Write>(
    w: W,
    fingerprint: &Fingerprint,
    resource_version: &str,
    written_at: SystemTime,
    objects: &[CachedObject<K>],
) -> io::Result<u64> {
    let f = fingerprint;
    let mut header = Vec::with_capacity(256);
    put_str(&mut header, &f.cluster_uid)?;
    put_opt(&mut header, &f.server_url)?;
    put_str(&mut header, &f.group)?;
    put_str(&mut header, &f.version)?;
    put_str(&mut header, &f.resource)?;
    header.push(u8::from(f.metadata_only));
    put_opt(&mut header, &f.namespace)?;
    put_opt(&mut header, &f.label_selector)?;
    put_opt(&mut header, &f.field_selector)?;
    put_opt(&mut header, &f.shard_selector)?;
    put_opt(&mut header, &f.transform_id)?;
    header.push(u8::from(f.strip_managed_fields));
    put_str(&mut header, resource_version)?;
    header.extend_from_slice(&unix_millis(written_at).to_le_bytes());
    header.extend_from_slice(&(objects.len() as u64).to_le_bytes());
    let header_len = u32::try_from(header.len())
        .ok()
        .filter(|l| *l <= MAX_HEADER)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "snapshot header too large"))?;

    let mut w = CrcWriter {
        inner: w,
        crc: Crc64::new(),
        written: 0,
    };
    w.write_all(&MAGIC)?;
    w.write_all(&SNAPSHOT_FORMAT_VERSION.to_le_bytes())?;
    w.write_all(&header_len.to_le_bytes())?;
    w.write_all(&header)?;
    let header_crc = w.crc.finish();
    w.write_all(&header_crc.to_le_bytes())?;
    let mut type_meta = Vec::new();
    for o in objects {
        // The bytes in their format, decompressed when stored compressed.
        let invalid = |e| io::Error::new(io::ErrorKind::InvalidData, e);
        let b = match o.format() {
            Format::Protobuf => {
                type_meta.clear();
                put_str(&mut type_meta, o.meta().api_version().unwrap_or(""))?;
                put_str(&mut type_meta, o.meta().kind().unwrap_or(""))?;
                w.write_all(&[OBJECT_PROTOBUF])?;
                w.write_all(&type_meta)?;
                o.encoded().map_err(invalid)?
            }
            Format::Cbor => {
                w.write_all(&[OBJECT_CBOR])?;
                o.encoded().map_err(invalid)?
            }
            // JSON, and any later format as its JSON
            _ => {
                w.write_all(&[OBJECT_JSON])?;
                o.json().map_err(invalid)?
            }
        };
        let len = u32::try_from(b.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("object {} is larger than 4 GiB", o.key()),
            )
        })?;
        w.write_all(&len.to_le_bytes())?;
        w.write_all(&b)?;
    }
    w.write_all(&END)?;
    let crc = w.crc.finish();
    w.inner.write_all(&crc.to_le_bytes())?;
    w.inner.flush()?;
    Ok(w.written + 8)
}

/// A snapshot read back.
pub(crate) struct Loaded<K> {
    pub(crate) resource_version: String,
    pub(crate) written_at: SystemTime,
    pub(crate) objects: Vec<CachedObject<K>>,
}

impl<K> fmt::Debug for Loaded<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Loaded")
            .field("resource_version", &self.resource_version)
            .field("objects", &self.objects.len())
            .finish()
    }
}

pub(super) struct CrcReader<R> {
    inner: R,
    crc: Crc64,
    read: u64,
    total: u64,
}

impl<R: Read> CrcReader<R> {
    fn exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), SnapshotError> {
        if (buf.len() as u64) > self.total.saturating_sub(self.read) {
            return Err(SnapshotError::Truncated(what));
        }
        self.inner.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => SnapshotError::Truncated(what),
            _ => SnapshotError::Io {
                path: PathBuf::new(),
                source: e,
            },
        })?;
        self.crc.update(buf);
        self.read += buf.len() as u64;
        Ok(())
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, SnapshotError> {
        let mut b = [0u8; 1];
        self.exact(&mut b, what)?;
        Ok(b[0])
    }
    /// A length-prefixed string (its length checked against the bytes
    /// left before a buffer is sized by it).
    fn string(&mut self, what: &'static str) -> Result<String, SnapshotError> {
        let bytes = self.bytes(what)?;
        String::from_utf8(bytes).map_err(|_| SnapshotError::Corrupt(format!("{what}: not UTF-8")))
    }
    /// A u32 length, then that many bytes.
    fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, SnapshotError> {
        let len = self.u32(what)?;
        if u64::from(len) > self.remaining() {
            return Err(SnapshotError::Truncated(what));
        }
        let mut bytes = vec![0u8; len as usize];
        self.exact(&mut bytes, what)?;
        Ok(bytes)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, SnapshotError> {
        let mut b = [0u8; 4];
        self.exact(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, SnapshotError> {
        let mut b = [0u8; 8];
        self.exact(&mut b, what)?;
        Ok(u64::from_le_bytes(b))
    }
    fn remaining(&self) -> u64 {
        self.total.saturating_sub(self.read)
    }
}

pub(super) struct HeaderCursor<'a>(&'a [u8]);

pub(super) fn bad_header() -> SnapshotError {
    SnapshotError::Corrupt("malformed header".to_owned())
}

impl HeaderCursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], SnapshotError> {
        if self.0.len() < n {
            return Err(bad_header());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take(1)?[0])
    }
    fn boolean(&mut self) -> Result<bool, SnapshotError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad_header()),
        }
    }
    fn u64(&mut self) -> Result<u64, SnapshotError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn string(&mut self) -> Result<String, SnapshotError> {
        let b = self.take(4)?;
        let mut a = [0u8; 4];
        a.copy_from_slice(b);
        let len = u32::from_le_bytes(a) as usize;
        let s = self.take(len)?;
        String::from_utf8(s.to_vec()).map_err(|_| bad_header())
    }
    fn opt(&mut self) -> Result<Option<String>, SnapshotError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.string()?)),
            _ => Err(bad_header()),
        }
    }
}

/// Reads and checks a snapshot of `total_len` bytes from `r`: format,
/// checksums, and that it is a cache of `expected`. Objects are built with
/// `options`.
pub(crate) fn decode<K, R: Read>(
    r: R,
    total_len: u64,
    expected: &Fingerprint,
    options: &ObjectOptions,
) -> Result<Loaded<K>, SnapshotError> {
    let mut r = CrcReader {
        inner: r,
        crc: Crc64::new(),
        read: 0,
        total: total_len,
    };
    let header = read_header_bytes(&mut r, total_len)?;
    let Header {
        fingerprint: found,
        resource_version,
        written_at,
        count,
    } = parse_header(&header)?;
    if let Some((field, found, expected)) = found.first_difference(expected) {
        return Err(SnapshotError::Mismatch {
            field,
            found,
            expected,
        });
    }
    if resource_version.is_empty() {
        return Err(SnapshotError::Corrupt("empty resourceVersion".to_owned()));
    }
    let objects = read_objects(&mut r, count, options)?;
    read_trailer(&mut r)?;
    Ok(Loaded {
        resource_version,
        written_at,
        objects,
    })
}

/// What a snapshot's header says, besides its checksum.
pub(super) struct Header {
    /// Which cache the snapshot is of.
    fingerprint: Fingerprint,
    /// The resourceVersion the cache reflected.
    resource_version: String,
    /// When the snapshot was written.
    written_at: SystemTime,
    /// How many objects follow.
    count: u64,
}

/// Reads the magic, the format version and the header (length, bytes,
/// checksum) of a snapshot of `total_len` bytes; the header's bytes,
/// checked against their checksum.
pub(super) fn read_header_bytes<R: Read>(
    r: &mut CrcReader<R>,
    total_len: u64,
) -> Result<Vec<u8>, SnapshotError> {
    let mut magic = [0u8; 8];
    let head = total_len.min(8) as usize;
    r.exact(&mut magic[..head], "magic")?;
    if magic[..head] != MAGIC[..head] {
        return Err(SnapshotError::NotASnapshot);
    }
    if head < 8 {
        return Err(SnapshotError::Truncated("magic"));
    }
    let version = r.u32("format version")?;
    if version != SNAPSHOT_FORMAT_VERSION {
        return Err(SnapshotError::UnsupportedVersion { found: version });
    }
    let header_len = r.u32("header length")?;
    if header_len > MAX_HEADER {
        return Err(SnapshotError::Corrupt(format!(
            "header length {header_len} is over the limit"
        )));
    }
    // checked before the buffer is sized by it (found by fuzzing: a
    // 300-byte file made the reader allocate 100 KiB)
    if u64::from(header_len) > r.remaining() {
        return Err(SnapshotError::Truncated("header"));
    }
    let mut header = vec![0u8; header_len as usize];
    r.exact(&mut header, "header")?;
    let computed = r.crc.finish();
    let stored = r.u64("header checksum")?;
    if computed != stored {
        return Err(SnapshotError::Corrupt(
            "header checksum mismatch".to_owned(),
        ));
    }
    Ok(header)
}

/// Parses the header's bytes, all of them.
pub(super) fn parse_header(header: &[u8]) -> Result<Header, SnapshotError> {
    let mut h = HeaderCursor(header);
    let fingerprint = Fingerprint {
        cluster_uid: h.string()?,
        server_url: h.opt()?,
        group: h.string()?,
        version: h.string()?,
        resource: h.string()?,
        metadata_only: h.boolean()?,
        namespace: h.opt()?,
        label_selector: h.opt()?,
        field_selector: h.opt()?,
        shard_selector: h.opt()?,
        transform_id: h.opt()?,
        strip_managed_fields: h.boolean()?,
    };
    let resource_version = h.string()?;
    let written_at = UNIX_EPOCH + Duration::from_millis(h.u64()?);
    let count = h.u64()?;
    if !h.0.is_empty() {
        return Err(bad_header());
    }
    Ok(Header {
        fingerprint,
        resource_version,
        written_at,
        count,
    })
}

/// Reads the `count` objects that follow the header, each JSON or
/// protobuf, built with `options`.
pub(super) fn read_objects<K, R: Read>(
    r: &mut CrcReader<R>,
    count: u64,
    options: &ObjectOptions,
) -> Result<Vec<CachedObject<K>>, SnapshotError> {
    // every object takes at least its format byte and 4-byte length
    let capacity = count.min(r.remaining() / 5);
    let mut objects = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
    for i in 0..count {
        let obj = match r.u8("object format")? {
            OBJECT_JSON => CachedObject::from_bytes_with(r.bytes("object")?, options),
            OBJECT_CBOR => CachedObject::from_cbor_with(r.bytes("object")?, options),
            OBJECT_PROTOBUF => {
                let api_version = r.string("object apiVersion")?;
                let kind = r.string("object kind")?;
                let tm = TypeMeta {
                    api_version: &api_version,
                    kind: &kind,
                };
                CachedObject::from_protobuf_with(r.bytes("object")?, tm, options)
            }
            other => {
                return Err(SnapshotError::Corrupt(format!(
                    "object {i}: unknown format {other}"
                )));
            }
        }
        .map_err(|e| SnapshotError::Corrupt(format!("object {i}: {e}")))?;
        objects.push(obj);
    }
    Ok(objects)
}

/// Reads the end marker and the whole-file checksum, and checks that
/// nothing follows them.
pub(super) fn read_trailer<R: Read>(r: &mut CrcReader<R>) -> Result<(), SnapshotError> {
    let mut end = [0u8; 8];
    r.exact(&mut end, "end marker")?;
    if end != END {
        return Err(SnapshotError::Corrupt("bad end marker".to_owned()));
    }
    let computed = r.crc.finish();
    let mut stored = [0u8; 8];
    r.exact(&mut stored, "checksum")?;
    if u64::from_le_bytes(stored) != computed {
        return Err(SnapshotError::Corrupt("checksum mismatch".to_owned()));
    }
    if r.remaining() > 0 {
        return Err(SnapshotError::Corrupt(
            "bytes after the checksum".to_owned(),
        ));
    }
    Ok(())
}
