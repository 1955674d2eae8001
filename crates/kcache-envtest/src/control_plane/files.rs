//! The control plane's private files and folders (mode 0600 and 0700 on
//! Unix), the pruning of earlier runs, and the processes' log files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::pid::pid_alive;
use crate::error::EnvtestError;

/// Writes `text` to `path`, readable and writable by this user only (mode
/// 0600 on Unix): the control plane's files are private keys, a kubeconfig
/// with the admin's client key, and what points at them. An existing file is
/// truncated and its mode tightened before anything is written into it.
pub(super) fn write_file(path: &Path, text: &str) -> Result<(), EnvtestError> {
    use std::io::Write as _;
    let err = |e| EnvtestError::io("writing", path, e);
    let mut open = fs::OpenOptions::new();
    open.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(0o600);
    }
    let mut f = open.open(path).map_err(err)?;
    #[cfg(unix)]
    {
        // `mode` applies only to a file the open creates
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(err)?;
    }
    f.write_all(text.as_bytes()).map_err(err)
}

/// Creates `dir` and its missing parents with mode 0700 (Unix), then sets
/// 0700 on `dir` and on each of `tighten` (folders under the run folder that
/// may exist from an earlier run, e.g. the detached control plane's).
pub(super) fn create_private_dir(dir: &Path, tighten: &[&Path]) -> Result<(), EnvtestError> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
        .map_err(|e| EnvtestError::io("creating", dir, e))?;
    #[cfg(unix)]
    for d in tighten.iter().copied().chain([dir]) {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(d, fs::Permissions::from_mode(0o700))
            .map_err(|e| EnvtestError::io("setting the mode of", d, e))?;
    }
    #[cfg(not(unix))]
    let _ = tighten;
    Ok(())
}

/// Removes the data of earlier runs whose process is gone, and keeps at most
/// 20 run folders (their logs) around.
pub(super) fn prune_runs(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    let mut dirs: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        let owner = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = owner
            && !pid_alive(pid)
        {
            let _ = fs::remove_dir_all(path.join("data"));
            let mtime = e
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            dirs.push((mtime, path));
        }
    }
    dirs.sort();
    if dirs.len() > 20 {
        for (_, p) in &dirs[..dirs.len() - 20] {
            let _ = fs::remove_dir_all(p);
        }
    }
}

pub(super) fn open_log(path: &Path) -> Result<(Stdio, Stdio), EnvtestError> {
    let mut open = fs::OpenOptions::new();
    open.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        open.mode(0o600);
    }
    let f = open
        .open(path)
        .map_err(|e| EnvtestError::io("opening log", path, e))?;
    let f2 = f
        .try_clone()
        .map_err(|e| EnvtestError::io("opening log", path, e))?;
    Ok((Stdio::from(f), Stdio::from(f2)))
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> String {
        format!(
            "{:o}",
            fs::metadata(p).unwrap().permissions().mode() & 0o7777
        )
    }

    #[test]
    fn files_are_written_0600_and_folders_0700_tightening_old_ones() {
        let root = std::env::temp_dir().join(format!(
            "kcache-envtest-modes-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        // an earlier run left a loose folder and a loose file behind
        let run = root.join("run");
        fs::create_dir_all(run.join("data")).unwrap();
        fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).unwrap();
        let pki = run.join("data/pki");
        create_private_dir(&pki, &[&run, &run.join("data")]).unwrap();
        for d in [&run, &run.join("data"), &pki] {
            assert_eq!(mode(d), "700", "{}", d.display());
        }
        let key = pki.join("sa.key");
        fs::write(&key, "old").unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
        write_file(&key, "new key").unwrap();
        assert_eq!(mode(&key), "600");
        assert_eq!(fs::read_to_string(&key).unwrap(), "new key");
        let fresh = pki.join("kubeconfig");
        write_file(&fresh, "config").unwrap();
        assert_eq!(mode(&fresh), "600");
        // a fresh tree: every level created 0700
        let fresh_tree = root.join("a/b/c");
        create_private_dir(&fresh_tree, &[]).unwrap();
        for d in [root.join("a"), root.join("a/b"), fresh_tree] {
            assert_eq!(mode(&d), "700", "{}", d.display());
        }
        fs::remove_dir_all(&root).unwrap();
    }
}
