//! Fuzzing support, not a stable API: entry points into the snapshot file
//! format for kcache's fuzz targets (`fuzz/`) and their stable smoke test
//! (`tests/fuzz-checks`), behind the `fuzzing` feature; may change in any
//! release.

use std::io;
use std::time::SystemTime;

use kcache_core::{CachedObject, ObjectOptions};

use crate::snapshot::{self, Fingerprint, SnapshotError};

/// A snapshot read back by [`decode_snapshot`].
#[derive(Debug)]
pub struct DecodedSnapshot<K> {
    /// The resourceVersion the snapshot reflects.
    pub resource_version: String,
    /// When it was written (millisecond precision).
    pub written_at: SystemTime,
    /// The objects, in file order.
    pub objects: Vec<CachedObject<K>>,
}

/// The bytes of a snapshot file of `objects`, exactly as an informer writes
/// them.
pub fn encode_snapshot<K>(
    fingerprint: &Fingerprint,
    resource_version: &str,
    written_at: SystemTime,
    objects: &[CachedObject<K>],
) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    snapshot::encode(&mut out, fingerprint, resource_version, written_at, objects)?;
    Ok(out)
}

/// Reads and checks the snapshot file `bytes` (all of it) as an informer
/// does on start: format, checksums, that it is a cache of `expected`;
/// objects are built with `options`.
pub fn decode_snapshot<K>(
    bytes: &[u8],
    expected: &Fingerprint,
    options: &ObjectOptions,
) -> Result<DecodedSnapshot<K>, SnapshotError> {
    let loaded = snapshot::decode(bytes, bytes.len() as u64, expected, options)?;
    Ok(DecodedSnapshot {
        resource_version: loaded.resource_version,
        written_at: loaded.written_at,
        objects: loaded.objects,
    })
}
