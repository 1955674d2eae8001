//! Why a snapshot could not be used or written.

use std::io;
use std::path::PathBuf;

use super::SNAPSHOT_FORMAT_VERSION;

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
    #[error("snapshot I/O failed on {path}; check the folder exists and is writable")]
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
