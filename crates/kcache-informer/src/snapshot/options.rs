//! Where and when an informer persists its cache, and the warm-restart
//! status it reports.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{DEFAULT_SNAPSHOT_INTERVAL, Fingerprint};

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
