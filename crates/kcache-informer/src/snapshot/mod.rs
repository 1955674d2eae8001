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
//!
//! # The module
//!
//! `format` reads and writes the bytes (with a CRC-64 from the `crc`
//! crate), `file` the files (atomic, private writes), `fingerprint` says
//! what a snapshot is a cache of, and `driver` is the informer's side: the
//! load on start, the periodic and final writes.

mod driver;
mod error;
pub(crate) mod file;
mod fingerprint;
pub(crate) mod format;
mod options;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub(crate) use driver::{PushTracker, SnapshotPlan, SnapshotWriter, join_write};
pub use error::SnapshotError;
pub use fingerprint::Fingerprint;
pub(crate) use format::Loaded;
pub use format::SNAPSHOT_FORMAT_VERSION;
pub use options::{SnapshotOptions, SnapshotStatus, StartKind, WriteStats};

/// How often a synced informer writes its snapshot by default.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(300);

/// File name extension of snapshots written into a folder.
pub const SNAPSHOT_EXTENSION: &str = "kcsnap";
