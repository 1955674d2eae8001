//! Snapshot files: read with no symlink followed, written atomically
//! (temporary file, fsync, rename, folder fsync) and privately (0600 files,
//! 0700 folders).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use kcache_core::{CachedObject, ObjectOptions};

use super::format::{Loaded, decode, encode};
use super::{Fingerprint, SnapshotError, WriteStats};

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
pub(super) fn open_no_follow(path: &Path) -> io::Result<File> {
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
pub(super) fn create_private(path: &Path) -> io::Result<File> {
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
pub(super) fn create_dir_private(dir: &Path) -> io::Result<()> {
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
pub(super) const TEMP_ATTEMPTS: usize = 8;

/// Creates the temporary file of a write to `path`: in the same folder,
/// named [`temp_prefix`] + `name()`, with [`create_private`]; on a clash,
/// tries another name.
pub(super) fn create_temp(
    path: &Path,
    mut name: impl FnMut() -> String,
) -> io::Result<(PathBuf, File)> {
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
pub(super) fn random_name() -> String {
    format!("{:016x}", rand::random::<u64>())
}

pub(super) fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

pub(super) fn temp_prefix(path: &Path) -> String {
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
pub(super) fn write_file_named<K>(
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
