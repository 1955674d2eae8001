//! Warm restart: an informer's cache persisted to disk, and loaded back on
//! start instead of a full relist.
//!
//! # The file format (version 3)
//!
//! All integers are little-endian.
//!
//! ```text
//! magic            8 bytes  89 'K' 'C' 'S' 'N' 'A' 'P' '\n'
//! format version   u32      3
//! header length    u32      at most 1 MiB
//! header           fields in a fixed order (strings: u32 length + UTF-8;
//!                  optional strings: u8 0/1 then the string; booleans: u8):
//!                  cluster uid, server url?, group, version, resource,
//!                  metadata-only, namespace?, label selector?, field
//!                  selector?, shard selector?, transform id?, strip
//!                  managedFields,
//!                  resourceVersion, written at (u64 ms since the Unix
//!                  epoch), object count (u64)
//! header checksum  u64      CRC-64/XZ of every byte before it
//! objects          object count times: u8 format, then
//!                  0 (JSON): u32 length + the object's JSON;
//!                  1 (protobuf): apiVersion, kind (strings), u32 length +
//!                  the object's own protobuf message (no envelope)
//! end marker       8 bytes  'K' 'C' 'S' 'N' 'E' 'N' 'D' '\n'
//! checksum         u64      CRC-64/XZ of every byte before it
//! ```
//!
//! The header is checked (magic, version, header checksum, fingerprint)
//! before any object is read, so a snapshot of something else is rejected
//! without reading it all. The objects are exactly the bytes the cache
//! held, in the format it held them in (JSON, or protobuf for the built-in
//! types the apiserver sent as protobuf; after the transform and the
//! managedFields cut, decompressed), so loading one is the same partial
//! decode as a list, without the network, and an object comes back in the
//! format it was written in. Files of other versions (1: JSON only,
//! written before protobuf objects existed; 2: before shard selectors) are
//! refused as an unsupported version: the informer starts cold once, with
//! a warning, and writes a version 3 snapshot when synced. A file is written
//! to a temporary file in the same folder, fsynced, renamed over the old one
//! and the folder fsynced: a reader sees the old snapshot or the new one,
//! never a mix.
//!
//! # File safety (Unix)
//!
//! A snapshot holds the objects as the apiserver sent them. Folders are
//! created with mode 0700, files with mode 0600. The temporary file has an
//! unpredictable name (64 random bits) and is opened with exclusive create
//! (`O_CREAT|O_EXCL`) and `O_NOFOLLOW`: a file or symlink planted at that
//! name is never followed, truncated or written through (another name is
//! tried). The snapshot itself is read with `O_NOFOLLOW` (a symlink there
//! gives a cold start with a warning), and the rename replaces whatever
//! is at the snapshot's path without following it. A snapshot folder that
//! others may write into (mode `& 0o022`, where another user could replace
//! a snapshot and so forge the cache) is reported with one WARN per folder;
//! kcache does not change the mode of a folder it did not create.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kcache_core::protobuf::TypeMeta;
use kcache_core::{CachedObject, Format, ObjectOptions};

/// The snapshot format this version of kcache reads and writes.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 3;

/// Format tag of an object stored as JSON.
const OBJECT_JSON: u8 = 0;
/// Format tag of an object stored as protobuf.
const OBJECT_PROTOBUF: u8 = 1;

/// How often a synced informer writes its snapshot by default.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(300);

/// File name extension of snapshots written into a folder.
pub const SNAPSHOT_EXTENSION: &str = "kcsnap";

const MAGIC: [u8; 8] = *b"\x89KCSNAP\n";
const END: [u8; 8] = *b"KCSNEND\n";
const MAX_HEADER: u32 = 1 << 20;

// ------------------------------------------------------------------ CRC-64

const POLY: u64 = 0xC96C_5795_D787_0F42; // CRC-64/XZ (ECMA-182), reflected

const fn crc_tables() -> [[u64; 256]; 8] {
    let mut t = [[0u64; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u64;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut j = 1;
        while j < 8 {
            let prev = t[j - 1][i];
            t[j][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            j += 1;
        }
        i += 1;
    }
    t
}

static CRC_TABLES: [[u64; 256]; 8] = crc_tables();

/// CRC-64/XZ, slicing by 8 (detects every burst of up to 64 flipped bits).
#[derive(Clone, Copy)]
struct Crc64(u64);

impl Crc64 {
    fn new() -> Self {
        Crc64(!0)
    }
    fn update(&mut self, mut data: &[u8]) {
        let t = &CRC_TABLES;
        let mut crc = self.0;
        while let Some((chunk, rest)) = data.split_first_chunk::<8>() {
            let v = u64::from_le_bytes(*chunk) ^ crc;
            crc = t[7][(v & 0xff) as usize]
                ^ t[6][((v >> 8) & 0xff) as usize]
                ^ t[5][((v >> 16) & 0xff) as usize]
                ^ t[4][((v >> 24) & 0xff) as usize]
                ^ t[3][((v >> 32) & 0xff) as usize]
                ^ t[2][((v >> 40) & 0xff) as usize]
                ^ t[1][((v >> 48) & 0xff) as usize]
                ^ t[0][(v >> 56) as usize];
            data = rest;
        }
        for &b in data {
            crc = t[0][((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
        }
        self.0 = crc;
    }
    fn finish(self) -> u64 {
        !self.0
    }
}

// ------------------------------------------------------------- fingerprint

/// What a snapshot is a cache of. A snapshot is used only when every field
/// equals the starting informer's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Fingerprint {
    /// The cluster: the `kube-system` namespace's UID, or the id given with
    /// [`SnapshotOptions::cluster_id`].
    pub cluster_uid: String,
    /// The apiserver URL, when given ([`SnapshotOptions::server_url`]).
    pub server_url: Option<String>,
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Metadata-only objects (`PartialObjectMeta`).
    pub metadata_only: bool,
    /// The namespace watched (`None`: all).
    pub namespace: Option<String>,
    /// The label selector.
    pub label_selector: Option<String>,
    /// The field selector.
    pub field_selector: Option<String>,
    /// The shard selector (server-side sharding), in the apiserver's
    /// syntax: a snapshot of one shard is never loaded for another.
    pub shard_selector: Option<String>,
    /// The transform's id (`None`: no transform).
    pub transform_id: Option<String>,
    /// Whether `managedFields` are cut from cached objects.
    pub strip_managed_fields: bool,
}

fn show(v: &Option<String>) -> String {
    match v {
        Some(s) => format!("{s:?}"),
        None => "none".to_owned(),
    }
}

impl Fingerprint {
    fn fields(&self) -> [(&'static str, String); 12] {
        [
            ("cluster", format!("{:?}", self.cluster_uid)),
            ("server URL", show(&self.server_url)),
            ("API group", format!("{:?}", self.group)),
            ("API version", format!("{:?}", self.version)),
            ("resource", format!("{:?}", self.resource)),
            ("metadata-only", self.metadata_only.to_string()),
            ("namespace", show(&self.namespace)),
            ("label selector", show(&self.label_selector)),
            ("field selector", show(&self.field_selector)),
            ("shard selector", show(&self.shard_selector)),
            ("transform id", show(&self.transform_id)),
            ("strip managedFields", self.strip_managed_fields.to_string()),
        ]
    }

    /// The first field that differs, as (name, found in the snapshot,
    /// expected).
    fn first_difference(&self, expected: &Fingerprint) -> Option<(&'static str, String, String)> {
        self.fields()
            .into_iter()
            .zip(expected.fields())
            .find(|(a, b)| a.1 != b.1)
            .map(|(a, b)| (a.0, a.1, b.1))
    }

    /// A file name for this fingerprint's snapshot in a folder: resource,
    /// group, version, namespace, and a hash of the rest (selectors,
    /// transform, representation), so that two informers never share one.
    pub fn file_name(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |s: &str| {
            for b in s.bytes().chain([0xff]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for (name, value) in self.fields().iter().skip(2) {
            feed(name);
            feed(value);
        }
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        let mut name = format!("{}.{}.{}", self.resource, group, self.version);
        if let Some(ns) = &self.namespace {
            name.push_str(".ns-");
            name.push_str(ns);
        }
        let mut name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        name.push_str(&format!(".{:08x}.{SNAPSHOT_EXTENSION}", h as u32));
        name
    }
}

// ------------------------------------------------------------------ errors

/// Why a snapshot could not be used (the informer then starts cold) or
/// written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// There is no snapshot yet (first start, or snapshots were just
    /// enabled): the informer lists, and writes one once synced.
    #[error("no snapshot at {0} yet; it is written once the informer has synced")]
    Missing(PathBuf),
    /// The file could not be read or written.
    #[error("snapshot I/O failed on {path}: {source}; check the folder exists and is writable")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The file does not start with the snapshot magic bytes.
    #[error("not a kcache snapshot (bad magic bytes); it will be replaced by the next snapshot")]
    NotASnapshot,
    /// Written by a kcache with another format version.
    #[error(
        "snapshot format version {found} is not supported (this kcache reads version {SNAPSHOT_FORMAT_VERSION}); it will be replaced by the next snapshot"
    )]
    UnsupportedVersion {
        /// The file's version.
        found: u32,
    },
    /// The file ends early (an interrupted copy, a full disk).
    #[error("the snapshot is truncated ({0}); it will be replaced by the next snapshot")]
    Truncated(&'static str),
    /// A checksum or structure check failed.
    #[error("the snapshot is corrupt ({0}); it will be replaced by the next snapshot")]
    Corrupt(String),
    /// The snapshot is a cache of something else.
    #[error(
        "the snapshot is of something else: its {field} is {found}, this informer's is {expected}; it will be replaced by the next snapshot"
    )]
    Mismatch {
        /// The first differing field of the fingerprint.
        field: &'static str,
        /// The snapshot's value.
        found: String,
        /// The informer's value.
        expected: String,
    },
    /// The cluster's identity could not be read.
    #[error(
        "the cluster identity (the kube-system namespace's UID) could not be read: {0}; grant `get` on namespaces/kube-system or set SnapshotOptions::cluster_id"
    )]
    ClusterIdentity(String),
    /// The informer has a transform but no transform id.
    #[error(
        "the informer has a transform but no transform id, so a snapshot cannot be checked against it; set SnapshotOptions::transform_id (change it whenever the transform changes)"
    )]
    TransformWithoutId,
}

impl SnapshotError {
    /// A short reason, e.g. for a metric label: `missing`, `io`,
    /// `not_a_snapshot`, `version`, `truncated`, `corrupt`, `mismatch`,
    /// `cluster_identity`, `transform_without_id`.
    pub fn reason(&self) -> &'static str {
        match self {
            SnapshotError::Missing(_) => "missing",
            SnapshotError::Io { .. } => "io",
            SnapshotError::NotASnapshot => "not_a_snapshot",
            SnapshotError::UnsupportedVersion { .. } => "version",
            SnapshotError::Truncated(_) => "truncated",
            SnapshotError::Corrupt(_) => "corrupt",
            SnapshotError::Mismatch { .. } => "mismatch",
            SnapshotError::ClusterIdentity(_) => "cluster_identity",
            SnapshotError::TransformWithoutId => "transform_without_id",
        }
    }
}

// ----------------------------------------------------------------- options

#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    File(PathBuf),
    Dir(PathBuf),
}

/// Where and when an informer persists its cache for warm restarts.
///
/// On start, a matching snapshot is loaded into the cache, its objects are
/// delivered to handlers as initial-list adds, and the watch resumes from
/// the snapshot's resourceVersion instead of listing. A missing, foreign,
/// truncated or corrupt snapshot is ignored with one warning. See
/// [Warm restarts](https://github.com/kcache/kcache/blob/main/docs/warm-restart.md).
///
/// ```
/// use std::time::Duration;
/// use kcache_informer::SnapshotOptions;
///
/// let options = SnapshotOptions::dir("/var/lib/my-controller/cache")
///     .interval(Duration::from_secs(120))
///     .server_url("https://10.0.0.1:6443");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOptions {
    location: Location,
    pub(crate) interval: Duration,
    pub(crate) write_on_shutdown: bool,
    pub(crate) transform_id: Option<String>,
    pub(crate) cluster_id: Option<String>,
    pub(crate) server_url: Option<String>,
}

impl SnapshotOptions {
    /// Snapshots in this exact file.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self::with_location(Location::File(path.into()))
    }

    /// Snapshots in this folder, one file per informer named after what it
    /// caches ([`Fingerprint::file_name`]); what a factory needs.
    pub fn dir(dir: impl Into<PathBuf>) -> Self {
        Self::with_location(Location::Dir(dir.into()))
    }

    fn with_location(location: Location) -> Self {
        SnapshotOptions {
            location,
            interval: DEFAULT_SNAPSHOT_INTERVAL,
            write_on_shutdown: true,
            transform_id: None,
            cluster_id: None,
            server_url: None,
        }
    }

    /// How often a synced informer writes its snapshot (default: 5
    /// minutes; zero: only on shutdown).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Write a snapshot when the informer stops gracefully (default: true).
    pub fn write_on_shutdown(mut self, write: bool) -> Self {
        self.write_on_shutdown = write;
        self
    }

    /// The id of the informer's transform, recorded in the snapshot: change
    /// it whenever the transform changes. An informer with a transform and
    /// no id neither loads nor writes snapshots.
    pub fn transform_id(mut self, id: impl Into<String>) -> Self {
        self.transform_id = Some(id.into());
        self
    }

    /// The cluster's identity, instead of the `kube-system` namespace's UID
    /// (read with one GET at start, which needs `get` on that namespace).
    pub fn cluster_id(mut self, id: impl Into<String>) -> Self {
        self.cluster_id = Some(id.into());
        self
    }

    /// The apiserver URL, recorded in the fingerprint (e.g.
    /// `config.cluster_url.to_string()`): a snapshot taken through another
    /// URL is then not used.
    pub fn server_url(mut self, url: impl Into<String>) -> Self {
        self.server_url = Some(url.into());
        self
    }

    /// The file used for `fingerprint`.
    pub fn path_for(&self, fingerprint: &Fingerprint) -> PathBuf {
        match &self.location {
            Location::File(p) => p.clone(),
            Location::Dir(d) => d.join(fingerprint.file_name()),
        }
    }

    /// Whether the location is a folder.
    pub fn is_dir(&self) -> bool {
        matches!(self.location, Location::Dir(_))
    }

    /// The same options with a folder location (a file's folder).
    pub(crate) fn into_dir(mut self) -> Self {
        if let Location::File(p) = &self.location {
            let dir = p
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            tracing::warn!(file = %p.display(), dir = %dir.display(), "a factory needs a snapshot folder, not a file; using the file's folder");
            self.location = Location::Dir(dir);
        }
        self
    }
}

// ------------------------------------------------------------------ status

/// How an informer started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartKind {
    /// Not started yet.
    #[default]
    NotStarted,
    /// Listed from the apiserver (no usable snapshot, or none configured).
    Cold,
    /// Loaded a snapshot and resumed the watch from it.
    Warm,
}

/// One snapshot write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteStats {
    /// Objects written.
    pub objects: u64,
    /// File size in bytes.
    pub bytes: u64,
    /// Time to encode, write, fsync and rename.
    pub duration: Duration,
    /// The resourceVersion the snapshot reflects.
    pub resource_version: String,
}

/// Warm-restart state of an informer (see
/// [`SharedIndexInformer::snapshot_status`](crate::SharedIndexInformer::snapshot_status)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotStatus {
    /// Warm or cold start.
    pub start: StartKind,
    /// Why the start was cold although snapshots are configured.
    pub cold_reason: Option<String>,
    /// Objects loaded from the snapshot.
    pub objects_loaded: u64,
    /// Age of the loaded snapshot when it was loaded.
    pub snapshot_age: Option<Duration>,
    /// The resumed watch was refused (410 Gone / Expired) and the informer
    /// relisted.
    pub resume_relisted: bool,
    /// Time from the start of `run` until the informer had synced.
    pub time_to_synced: Option<Duration>,
    /// Snapshots written.
    pub writes: u64,
    /// Snapshot writes that failed.
    pub write_failures: u64,
    /// The last successful write.
    pub last_write: Option<WriteStats>,
}

// ------------------------------------------------------------------ encode

struct CrcWriter<W> {
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

fn put_str(out: &mut Vec<u8>, s: &str) -> io::Result<()> {
    let len = u32::try_from(s.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "string too long"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_opt(out: &mut Vec<u8>, s: &Option<String>) -> io::Result<()> {
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

fn unix_millis(t: SystemTime) -> u64 {
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

// ------------------------------------------------------------------ decode

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

struct CrcReader<R> {
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

struct HeaderCursor<'a>(&'a [u8]);

fn bad_header() -> SnapshotError {
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
struct Header {
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
fn read_header_bytes<R: Read>(
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
fn parse_header(header: &[u8]) -> Result<Header, SnapshotError> {
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
fn read_objects<K, R: Read>(
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
fn read_trailer<R: Read>(r: &mut CrcReader<R>) -> Result<(), SnapshotError> {
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

// ------------------------------------------------------------------- files

/// Reads and checks the snapshot at `path`.
pub(crate) fn read_file<K>(
    path: &Path,
    expected: &Fingerprint,
    options: &ObjectOptions,
) -> Result<Loaded<K>, SnapshotError> {
    let io_err = |source| SnapshotError::Io {
        path: path.to_owned(),
        source,
    };
    let file = match open_no_follow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SnapshotError::Missing(path.to_owned()));
        }
        Err(e) => return Err(io_err(e)),
    };
    let len = file.metadata().map_err(io_err)?.len();
    decode(
        BufReader::with_capacity(1 << 20, file),
        len,
        expected,
        options,
    )
    .map_err(|e| match e {
        SnapshotError::Io { source, .. } => io_err(source),
        other => other,
    })
}

/// Opens `path` for reading without following a symlink there (Unix).
fn open_no_follow(path: &Path) -> io::Result<File> {
    let mut open = OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.custom_flags(libc::O_NOFOLLOW);
    }
    open.open(path)
}

/// Creates a new file at `path` for writing: exclusive create (fails if
/// anything, a symlink included, is there), no symlink followed, mode 0600
/// (Unix).
fn create_private(path: &Path) -> io::Result<File> {
    let mut open = OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    open.open(path)
}

/// Creates `dir` and its missing parents with mode 0700 (Unix); an existing
/// folder is left as it is.
fn create_dir_private(dir: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

/// How many random names are tried for a temporary file before giving up
/// (a clash of 64 random bits means someone keeps planting files).
const TEMP_ATTEMPTS: usize = 8;

/// Creates the temporary file of a write to `path`: in the same folder,
/// named [`temp_prefix`] + `name()`, with [`create_private`]; on a clash,
/// tries another name.
fn create_temp(path: &Path, mut name: impl FnMut() -> String) -> io::Result<(PathBuf, File)> {
    let dir = parent_dir(path);
    let prefix = temp_prefix(path);
    let mut last = None;
    for _ in 0..TEMP_ATTEMPTS {
        let tmp = dir.join(format!("{prefix}{}", name()));
        match create_private(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary file name left")))
}

/// 64 random bits, as 16 hex digits.
fn random_name() -> String {
    format!("{:016x}", rand::random::<u64>())
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn temp_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "snapshot".to_owned());
    format!(".{name}.tmp-")
}

/// The mode bits of the folder of `path` if others than its owner may
/// write into it (they could replace a snapshot, forging the cache);
/// `None` if not, if it does not exist, or off Unix.
pub(crate) fn loose_folder_mode(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(parent_dir(path)).ok()?.permissions().mode() & 0o7777;
        (mode & 0o022 != 0).then_some(mode)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Warns once per folder (per process) that others may write into the
/// snapshot folder of `path`.
pub(crate) fn warn_if_loose_folder(informer: &str, path: &Path) {
    static WARNED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let Some(mode) = loose_folder_mode(path) else {
        return;
    };
    let dir = parent_dir(path);
    let mut warned = WARNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if warned.contains(&dir) {
        return;
    }
    warned.push(dir.clone());
    tracing::warn!(
        informer,
        dir = %dir.display(),
        mode = %format!("{mode:04o}"),
        "other users may write into the snapshot folder and could replace a snapshot (the cache is loaded from it on start); run `chmod 700` on it or use a folder only this user can write (kcache creates missing folders 0700)"
    );
}

/// Removes the temporary files a crash in the middle of a write left next
/// to `path` (they can be as large as a snapshot); returns how many.
pub(crate) fn remove_stale_temp_files(path: &Path) -> usize {
    let dir = parent_dir(path);
    let prefix = temp_prefix(path);
    let Ok(entries) = fs::read_dir(&dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) && fs::remove_file(e.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// Writes a snapshot atomically: a temporary file in the same folder
/// (exclusive create, no-follow, 0600, unpredictable name), fsync, rename
/// over `path`, fsync of the folder (created 0700 if missing).
pub(crate) fn write_file<K>(
    path: &Path,
    fingerprint: &Fingerprint,
    resource_version: &str,
    objects: &[CachedObject<K>],
) -> Result<WriteStats, SnapshotError> {
    write_file_named(path, fingerprint, resource_version, objects, random_name)
}

/// [`write_file`] with the temporary names from `temp_name`.
fn write_file_named<K>(
    path: &Path,
    fingerprint: &Fingerprint,
    resource_version: &str,
    objects: &[CachedObject<K>],
    temp_name: impl FnMut() -> String,
) -> Result<WriteStats, SnapshotError> {
    let started = Instant::now();
    let io_err = |p: &Path, source| SnapshotError::Io {
        path: p.to_owned(),
        source,
    };
    let dir = parent_dir(path);
    create_dir_private(&dir).map_err(|e| io_err(&dir, e))?;
    let (tmp, file) = create_temp(path, temp_name).map_err(|e| io_err(&dir, e))?;
    let written = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        let n = encode(
            &mut w,
            fingerprint,
            resource_version,
            SystemTime::now(),
            objects,
        )?;
        w.flush()?;
        drop(w);
        file.sync_all()?;
        Ok::<u64, io::Error>(n)
    })();
    drop(file);
    let bytes = match written {
        Ok(n) => n,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&tmp, e));
        }
    };
    // rename(2) replaces what is at `path` (a symlink included) without
    // following it
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(path, e));
    }
    // the rename itself is durable once the folder is synced
    if let Err(e) = File::open(&dir).and_then(|d| d.sync_all()) {
        tracing::debug!(dir = %dir.display(), error = %e, "could not fsync the snapshot folder");
    }
    Ok(WriteStats {
        objects: objects.len() as u64,
        bytes,
        duration: started.elapsed(),
        resource_version: resource_version.to_owned(),
    })
}

// ------------------------------------------------------------------- tests

#[cfg(test)]
mod tests {
    use super::*;

    struct Cm;

    fn fp() -> Fingerprint {
        Fingerprint {
            cluster_uid: "uid-1".into(),
            server_url: Some("https://127.0.0.1:6443".into()),
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
            metadata_only: false,
            namespace: Some("ns".into()),
            label_selector: Some("app=web".into()),
            field_selector: None,
            shard_selector: None,
            transform_id: None,
            strip_managed_fields: true,
        }
    }

    fn obj(name: &str, rv: u32) -> CachedObject<Cm> {
        CachedObject::from_bytes(format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"data":{{"k":"v\u00e9"}}}}"#
        ))
        .unwrap()
    }

    fn sample() -> (Vec<u8>, Vec<CachedObject<Cm>>) {
        let objects = vec![obj("a", 3), obj("b", 7), obj("c", 9)];
        let mut out = Vec::new();
        let n = encode(&mut out, &fp(), "42", SystemTime::now(), &objects).unwrap();
        assert_eq!(n, out.len() as u64);
        (out, objects)
    }

    fn load(bytes: &[u8], expected: &Fingerprint) -> Result<Loaded<Cm>, SnapshotError> {
        decode(
            bytes,
            bytes.len() as u64,
            expected,
            &ObjectOptions::default(),
        )
    }

    #[test]
    fn crc64_check_value() {
        let mut c = Crc64::new();
        c.update(b"123456789");
        assert_eq!(c.finish(), 0x995D_C9BB_DF19_39FA);
        // split updates give the same result as one
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut one = Crc64::new();
        one.update(&data);
        let mut parts = Crc64::new();
        for chunk in data.chunks(13) {
            parts.update(chunk);
        }
        assert_eq!(one.finish(), parts.finish());
    }

    #[test]
    fn round_trip() {
        let (bytes, objects) = sample();
        let before = SystemTime::now() - Duration::from_secs(1);
        let loaded = load(&bytes, &fp()).unwrap();
        assert_eq!(loaded.resource_version, "42");
        assert!(loaded.written_at >= before);
        assert_eq!(loaded.objects, objects);
        let keys: Vec<_> = loaded.objects.iter().map(|o| o.key().to_owned()).collect();
        assert_eq!(keys, ["ns/a", "ns/b", "ns/c"]);
        assert_eq!(loaded.objects[1].resource_version(), Some("7"));
    }

    /// A ConfigMap's protobuf (its own message): name, namespace,
    /// resourceVersion, a managedFields entry, data {k: v}.
    fn proto_cm(name: &str, rv: &str) -> Vec<u8> {
        fn field(out: &mut Vec<u8>, n: u8, b: &[u8]) {
            out.push(n << 3 | 2);
            out.push(b.len() as u8);
            out.extend_from_slice(b);
        }
        let mut mf = Vec::new();
        field(&mut mf, 1, b"kubectl");
        let mut meta = Vec::new();
        field(&mut meta, 1, name.as_bytes());
        field(&mut meta, 3, b"ns");
        field(&mut meta, 6, rv.as_bytes());
        meta.extend_from_slice(&[17 << 3 | 2, 1, mf.len() as u8]);
        meta.extend_from_slice(&mf);
        let mut entry = Vec::new();
        field(&mut entry, 1, b"k");
        field(&mut entry, 2, b"v");
        let mut cm = Vec::new();
        field(&mut cm, 1, &meta);
        field(&mut cm, 2, &entry);
        cm
    }

    #[test]
    fn objects_come_back_in_their_format() {
        let tm = TypeMeta {
            api_version: "v1",
            kind: "ConfigMap",
        };
        let pb: CachedObject<Cm> = CachedObject::from_protobuf(proto_cm("p", "5"), tm).unwrap();
        let objects = vec![obj("a", 3), pb.clone(), obj("b", 7)];
        let mut out = Vec::new();
        encode(&mut out, &fp(), "42", SystemTime::now(), &objects).unwrap();
        let loaded = load(&out, &fp()).unwrap();
        assert_eq!(loaded.objects, objects);
        let formats: Vec<_> = loaded.objects.iter().map(|o| o.format()).collect();
        assert_eq!(formats, [Format::Json, Format::Protobuf, Format::Json]);
        let back = &loaded.objects[1];
        assert_eq!(back.bytes(), pb.bytes(), "the protobuf as written");
        assert_eq!(back.meta(), pb.meta());
        assert_eq!(back.key(), "ns/p");
        // rebuilt with the informer's options, in its format
        let strip = ObjectOptions::new().strip_managed_fields(true);
        let loaded: Loaded<Cm> = decode(&out[..], out.len() as u64, &fp(), &strip).unwrap();
        let back = &loaded.objects[1];
        assert_eq!(back.format(), Format::Protobuf);
        assert!(back.bytes().len() < pb.bytes().len(), "managedFields cut");
        // a protobuf object of a kind without tables, or an unknown format
        // tag, is a corrupt snapshot (the informer starts cold)
        let n = out.len();
        let kind_at = out.windows(9).position(|w| w == b"ConfigMap").unwrap();
        let mut bad = out.clone();
        bad[kind_at] = b'X';
        let crc = |b: &[u8]| {
            let mut c = Crc64::new();
            c.update(b);
            c.finish()
        };
        let fixed = crc(&bad[..n - 8]);
        bad[n - 8..].copy_from_slice(&fixed.to_le_bytes());
        match load(&bad, &fp()) {
            Err(SnapshotError::Corrupt(m)) => assert!(m.contains("object 1"), "{m}"),
            other => panic!("{other:?}"),
        }
        let header_len = u32::from_le_bytes(out[12..16].try_into().unwrap()) as usize;
        let mut bad = out.clone();
        bad[16 + header_len + 8] = 7;
        let fixed = crc(&bad[..n - 8]);
        bad[n - 8..].copy_from_slice(&fixed.to_le_bytes());
        match load(&bad, &fp()) {
            Err(SnapshotError::Corrupt(m)) => assert!(m.contains("unknown format 7"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn empty_snapshot_round_trips() {
        let mut out = Vec::new();
        encode::<Cm, _>(&mut out, &fp(), "5", SystemTime::now(), &[]).unwrap();
        let loaded = load(&out, &fp()).unwrap();
        assert!(loaded.objects.is_empty());
        assert_eq!(loaded.resource_version, "5");
    }

    #[test]
    fn objects_are_rebuilt_with_the_informer_options() {
        let with_mf: CachedObject<Cm> = CachedObject::from_bytes(
            &br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"1","managedFields":[{"manager":"x"}]}}"#[..],
        )
        .unwrap();
        let mut out = Vec::new();
        encode(&mut out, &fp(), "1", SystemTime::now(), &[with_mf]).unwrap();
        let loaded: Loaded<Cm> = decode(
            &out[..],
            out.len() as u64,
            &fp(),
            &ObjectOptions::new().strip_managed_fields(true),
        )
        .unwrap();
        assert!(!String::from_utf8_lossy(loaded.objects[0].bytes()).contains("managedFields"));
    }

    #[test]
    fn truncation_at_every_byte_is_rejected() {
        let (bytes, _) = sample();
        for cut in 0..bytes.len() {
            match load(&bytes[..cut], &fp()) {
                Err(SnapshotError::Truncated(_)) => {}
                // a cut inside the header is seen by the header length
                // check before the read: still not a success
                Err(e) => panic!("cut at {cut}: expected Truncated, got {e}"),
                Ok(_) => panic!("cut at {cut} was accepted"),
            }
        }
        // a file that claims more bytes than it has (size from metadata,
        // shorter content) is truncated too
        let short = &bytes[..bytes.len() - 3];
        assert!(matches!(
            decode::<Cm, _>(short, bytes.len() as u64, &fp(), &ObjectOptions::default()),
            Err(SnapshotError::Truncated(_))
        ));
    }

    #[test]
    fn a_header_length_beyond_the_file_is_truncated() {
        // under the header limit, but more than the file holds: refused
        // before a buffer of that size is made (the fuzz smoke's
        // allocation check guards the order: fuzz/corpus/snapshot/
        // regression_header_len_beyond_file)
        let (mut bytes, _) = sample();
        bytes[12..16].copy_from_slice(&(MAX_HEADER - 1).to_le_bytes());
        assert!(matches!(
            load(&bytes, &fp()),
            Err(SnapshotError::Truncated("header"))
        ));
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let (bytes, _) = sample();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(
                    load(&b, &fp()).is_err(),
                    "flip of bit {bit} of byte {i} was accepted"
                );
            }
        }
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let (mut bytes, _) = sample();
        bytes.push(0);
        assert!(matches!(
            load(&bytes, &fp()),
            Err(SnapshotError::Corrupt(_))
        ));
    }

    #[test]
    fn other_format_versions_are_rejected() {
        // version 1 (JSON only, before protobuf objects) and a later one
        for v in [1u32, 2, 4] {
            let (mut bytes, _) = sample();
            bytes[8..12].copy_from_slice(&v.to_le_bytes());
            match load(&bytes, &fp()) {
                Err(e @ SnapshotError::UnsupportedVersion { found }) => {
                    assert_eq!(found, v);
                    assert_eq!(e.reason(), "version");
                    assert!(e.to_string().contains(&format!("version {v}")), "{e}");
                    assert!(e.to_string().contains("reads version 3"), "{e}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            load(b"{\"not\":\"a snapshot\"}", &fp()),
            Err(SnapshotError::NotASnapshot)
        ));
    }

    #[test]
    fn a_different_fingerprint_is_rejected_naming_the_field() {
        let (bytes, _) = sample();
        type Change = Box<dyn Fn(&mut Fingerprint)>;
        let cases: Vec<(&str, Change)> = vec![
            ("cluster", Box::new(|f| f.cluster_uid = "uid-2".into())),
            ("server URL", Box::new(|f| f.server_url = None)),
            ("API group", Box::new(|f| f.group = "apps".into())),
            ("API version", Box::new(|f| f.version = "v2".into())),
            ("resource", Box::new(|f| f.resource = "secrets".into())),
            ("metadata-only", Box::new(|f| f.metadata_only = true)),
            ("namespace", Box::new(|f| f.namespace = None)),
            (
                "label selector",
                Box::new(|f| f.label_selector = Some("app=db".into())),
            ),
            (
                "field selector",
                Box::new(|f| f.field_selector = Some("metadata.name=a".into())),
            ),
            (
                "shard selector",
                Box::new(|f| {
                    f.shard_selector = Some(
                        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
                            .into(),
                    )
                }),
            ),
            (
                "transform id",
                Box::new(|f| f.transform_id = Some("v1".into())),
            ),
            (
                "strip managedFields",
                Box::new(|f| f.strip_managed_fields = false),
            ),
        ];
        for (name, change) in cases {
            let mut expected = fp();
            change(&mut expected);
            match load(&bytes, &expected) {
                Err(SnapshotError::Mismatch { field, .. }) => assert_eq!(field, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn file_names_differ_by_selector_and_are_safe() {
        let a = fp();
        let mut b = fp();
        b.label_selector = Some("app=db".into());
        assert_ne!(a.file_name(), b.file_name());
        let mut shard = fp();
        shard.shard_selector = Some(
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')".into(),
        );
        assert_ne!(a.file_name(), shard.file_name());
        let mut c = fp();
        c.cluster_uid = "another".into();
        assert_eq!(
            a.file_name(),
            c.file_name(),
            "the cluster is checked, not named"
        );
        let mut d = fp();
        d.namespace = Some("../../etc".into());
        d.group = "example.com".into();
        let name = d.file_name();
        assert!(!name.contains('/'), "{name}");
        assert!(
            name.starts_with("configmaps.example.com.v1.ns-.._.._etc."),
            "{name}"
        );
        assert!(name.ends_with(".kcsnap"));
    }

    /// A fresh folder for one file test (not created).
    fn test_dir(test: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "kcache-snapshot-unit-{test}-{}-{}",
            std::process::id(),
            random_name()
        ))
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn write_errors_are_reported_and_stale_temp_files_removed() {
        let dir = test_dir("err");
        fs::create_dir_all(&dir).unwrap();
        // the folder is a file: the write fails with an I/O error
        let not_a_dir = dir.join("file");
        fs::write(&not_a_dir, b"x").unwrap();
        let err =
            write_file(&not_a_dir.join("cms.kcsnap"), &fp(), "1", &[obj("a", 1)]).unwrap_err();
        assert_eq!(err.reason(), "io", "{err}");
        assert!(err.to_string().contains("writable"), "{err}");
        // leftovers of a crashed write are removed; other files are not
        let path = dir.join("cms.kcsnap");
        let stale = [
            dir.join(".cms.kcsnap.tmp-1-0"),
            dir.join(".cms.kcsnap.tmp-0123456789abcdef"),
        ];
        for f in &stale {
            fs::write(f, b"half a snapshot").unwrap();
        }
        fs::write(dir.join(".other.kcsnap.tmp-1-0"), b"not ours").unwrap();
        assert_eq!(remove_stale_temp_files(&path), 2);
        assert!(stale.iter().all(|f| !f.exists()));
        assert!(dir.join(".other.kcsnap.tmp-1-0").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn atomic_write_and_read_back() {
        let dir = test_dir("atomic");
        let path = dir.join("sub").join("cms.kcsnap");
        assert!(matches!(
            read_file::<Cm>(&path, &fp(), &ObjectOptions::default()),
            Err(SnapshotError::Missing(_))
        ));
        let objects = vec![obj("a", 1), obj("b", 2)];
        let stats = write_file(&path, &fp(), "2", &objects).unwrap();
        assert_eq!(stats.objects, 2);
        assert_eq!(stats.bytes, fs::metadata(&path).unwrap().len());
        // overwritten in place, no temporary file left behind
        let stats = write_file(&path, &fp(), "3", &objects[..1]).unwrap();
        assert_eq!(stats.objects, 1);
        let loaded = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap();
        assert_eq!(loaded.resource_version, "3");
        assert_eq!(loaded.objects.len(), 1);
        assert_eq!(entries(path.parent().unwrap()), ["cms.kcsnap"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Files 0600; every folder the write creates 0700.
    #[cfg(unix)]
    #[test]
    fn snapshot_files_are_0600_and_new_folders_0700() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| {
            format!(
                "{:o}",
                fs::metadata(p).unwrap().permissions().mode() & 0o7777
            )
        };
        let dir = test_dir("modes");
        let path = dir.join("a").join("b").join("cms.kcsnap");
        write_file(&path, &fp(), "2", &[obj("a", 1)]).unwrap();
        assert_eq!(mode(&path), "600");
        for d in [dir.clone(), dir.join("a"), dir.join("a/b")] {
            assert_eq!(mode(&d), "700", "{}", d.display());
        }
        // a rewrite is a new file: 0600 again even if the old one was not
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write_file(&path, &fp(), "3", &[obj("a", 1)]).unwrap();
        assert_eq!(mode(&path), "600");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temp_names_are_unpredictable() {
        let a = random_name();
        let b = random_name();
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    }

    /// Names handed out in order, for planting files at the temp path.
    fn names(list: &[&str]) -> impl FnMut() -> String {
        let mut it = list
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .into_iter();
        move || it.next().unwrap_or_else(|| "exhausted".to_owned())
    }

    /// A symlink planted at the temporary file's path (to an existing file,
    /// and a dangling one) is not followed: neither target is written or
    /// created, the symlinks stay, and the write goes to a fresh name.
    #[cfg(unix)]
    #[test]
    fn a_symlink_planted_at_the_temp_path_is_not_followed() {
        let dir = test_dir("symlink");
        fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, b"victim").unwrap();
        let absent = dir.join("absent");
        let planted = dir.join(".cms.kcsnap.tmp-planted");
        let dangling = dir.join(".cms.kcsnap.tmp-dangling");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        std::os::unix::fs::symlink(&absent, &dangling).unwrap();
        // the open itself refuses both
        for link in [&planted, &dangling] {
            let err = create_private(link).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        }
        let path = dir.join("cms.kcsnap");
        write_file_named(
            &path,
            &fp(),
            "5",
            &[obj("a", 1)],
            names(&["planted", "dangling", "fresh"]),
        )
        .unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"victim");
        assert!(!absent.exists());
        assert!(fs::symlink_metadata(&planted).unwrap().is_symlink());
        assert!(fs::symlink_metadata(&dangling).unwrap().is_symlink());
        let loaded = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap();
        assert_eq!(loaded.resource_version, "5");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A regular file planted at the temporary path is neither truncated
    /// nor written; when every name tried is taken, the write fails.
    #[test]
    fn a_file_planted_at_the_temp_path_is_left_alone() {
        let dir = test_dir("planted");
        fs::create_dir_all(&dir).unwrap();
        let planted = dir.join(".cms.kcsnap.tmp-planted");
        fs::write(&planted, b"someone else's").unwrap();
        let path = dir.join("cms.kcsnap");
        write_file_named(&path, &fp(), "5", &[obj("a", 1)], names(&["planted", "x"])).unwrap();
        assert_eq!(fs::read(&planted).unwrap(), b"someone else's");
        assert!(path.exists());
        let err =
            write_file_named(&path, &fp(), "6", &[obj("a", 1)], || "planted".into()).unwrap_err();
        assert_eq!(err.reason(), "io", "{err}");
        assert_eq!(fs::read(&planted).unwrap(), b"someone else's");
        // the snapshot from before is intact
        let loaded = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap();
        assert_eq!(loaded.resource_version, "5");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A symlink at the snapshot's own path is not read through (the start
    /// is cold, reason `io`), and the next write replaces the symlink, not
    /// its target.
    #[cfg(unix)]
    #[test]
    fn a_symlink_at_the_snapshot_path_is_not_followed() {
        let dir = test_dir("snaplink");
        let real = dir.join("elsewhere.kcsnap");
        write_file(&real, &fp(), "7", &[obj("a", 1)]).unwrap();
        let before = fs::read(&real).unwrap();
        let path = dir.join("cms.kcsnap");
        std::os::unix::fs::symlink(&real, &path).unwrap();
        let err = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap_err();
        assert_eq!(err.reason(), "io", "{err}");
        write_file(&path, &fp(), "8", &[obj("b", 2)]).unwrap();
        assert!(!fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(fs::read(&real).unwrap(), before);
        let loaded = read_file::<Cm>(&path, &fp(), &ObjectOptions::default()).unwrap();
        assert_eq!(loaded.resource_version, "8");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A folder others may write into is reported; 0700 and 0755 are not.
    #[cfg(unix)]
    #[test]
    fn folders_others_can_write_are_detected() {
        use std::os::unix::fs::PermissionsExt;
        let dir = test_dir("loose");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cms.kcsnap");
        for (mode, loose) in [
            (0o700, false),
            (0o755, false),
            (0o775, true),
            (0o777, true),
            (0o1777, true),
        ] {
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(loose_folder_mode(&path), loose.then_some(mode), "{mode:o}");
        }
        assert_eq!(loose_folder_mode(&test_dir("absent").join("x")), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
