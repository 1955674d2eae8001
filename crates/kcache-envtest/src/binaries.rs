//! Building kube-apiserver and etcd from the pinned Kubernetes Go modules.
//!
//! The Go wrapper module lives in this crate's `controlplane/` folder
//! (go.mod + go.sum pin `k8s.io/kubernetes` and the etcd server module; it
//! is inside the crate so that the published crate carries it, and its
//! module path still says `xtask/controlplane`, where it used to live:
//! changing a byte would change the fingerprint below and rebuild every
//! cached control plane); its files are embedded in this crate, so a build
//! works from any directory. The
//! binaries are built once into the cache directory (`target/controlplane/`
//! of the workspace, or `$KCACHE_CONTROLPLANE_DIR`) under a folder named by a
//! hash of those files: they are rebuilt only when go.mod, go.sum or the
//! wrapper sources change.

use std::fs;
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::error::{EnvtestError, tail};

/// The Kubernetes release the local kube-apiserver is built from.
pub const KUBERNETES_VERSION: &str = "v1.37.2";
/// The etcd release the local etcd is built from (the one in that Kubernetes
/// release's module graph).
pub const ETCD_VERSION: &str = "v3.7.0";

/// The wrapper module's files, embedded at compile time.
const SOURCES: &[(&str, &str)] = &[
    ("go.mod", include_str!("../controlplane/go.mod")),
    ("go.sum", include_str!("../controlplane/go.sum")),
    (
        "cmd/kube-apiserver/main.go",
        include_str!("../controlplane/cmd/kube-apiserver/main.go"),
    ),
    (
        "cmd/etcd/main.go",
        include_str!("../controlplane/cmd/etcd/main.go"),
    ),
    (
        "internal/parentwatch/parentwatch.go",
        include_str!("../controlplane/internal/parentwatch/parentwatch.go"),
    ),
];

/// Paths of the two control-plane executables.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The kube-apiserver executable.
    pub kube_apiserver: PathBuf,
    /// The etcd executable.
    pub etcd: PathBuf,
}

/// The folder where the control plane is built and where runs keep their data
/// and logs: `$KCACHE_CONTROLPLANE_DIR`, else `target/controlplane` of this
/// workspace.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KCACHE_CONTROLPLANE_DIR") {
        return PathBuf::from(dir);
    }
    // crates/kcache-envtest -> the workspace root
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    dir.pop();
    dir.pop();
    dir.join("target").join("controlplane")
}

/// A short, stable fingerprint of the wrapper module (FNV-1a over every file).
fn sources_fingerprint() -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, text) in SOURCES {
        for b in name.bytes().chain([0u8]).chain(text.bytes()).chain([0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{KUBERNETES_VERSION}-{h:016x}")
}

impl Binaries {
    /// Returns the executables, building them first if they are not built yet
    /// for the current go.mod/go.sum. Blocking: call it from a blocking
    /// context (see [`Binaries::ensure_async`]).
    ///
    /// `KCACHE_KUBE_APISERVER` and `KCACHE_ETCD` name prebuilt executables
    /// and skip the build.
    pub fn ensure() -> Result<Binaries, EnvtestError> {
        if let (Some(api), Some(etcd)) = (
            std::env::var_os("KCACHE_KUBE_APISERVER"),
            std::env::var_os("KCACHE_ETCD"),
        ) {
            return Ok(Binaries {
                kube_apiserver: api.into(),
                etcd: etcd.into(),
            });
        }
        let root = cache_dir();
        let dir = root.join(format!("bin-{}", sources_fingerprint()));
        let bins = Binaries {
            kube_apiserver: dir.join("kube-apiserver"),
            etcd: dir.join("etcd"),
        };
        if bins.exist() {
            return Ok(bins);
        }
        fs::create_dir_all(&root).map_err(|e| EnvtestError::io("creating", &root, e))?;
        // One build at a time across processes (parallel test binaries).
        let lock_path = root.join("build.lock");
        let lock = fs::File::create(&lock_path)
            .map_err(|e| EnvtestError::io("creating lock file", &lock_path, e))?;
        lock.lock()
            .map_err(|e| EnvtestError::io("locking", &lock_path, e))?;
        if bins.exist() {
            return Ok(bins);
        }
        let result = build(&root, &dir);
        drop(lock);
        result.map(|()| bins)
    }

    /// [`Binaries::ensure`] on tokio's blocking pool.
    pub async fn ensure_async() -> Result<Binaries, EnvtestError> {
        tokio::task::spawn_blocking(Binaries::ensure)
            .await
            .map_err(|e| EnvtestError::State(format!("control-plane build task failed: {e}")))?
    }

    fn exist(&self) -> bool {
        self.kube_apiserver.is_file() && self.etcd.is_file()
    }
}

/// The `go` command to use: `$KCACHE_GO` or `go` on PATH.
fn go_command() -> PathBuf {
    std::env::var_os("KCACHE_GO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("go"))
}

fn check_go() -> Result<String, EnvtestError> {
    let out = Command::new(go_command())
        .arg("version")
        .env("GOTOOLCHAIN", "local")
        .output()
        .map_err(|e| EnvtestError::GoMissing(e.to_string()))?;
    if !out.status.success() {
        return Err(EnvtestError::GoMissing(format!(
            "`go version` exited with {}",
            out.status
        )));
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // "go version go1.26.8 linux/amd64"
    let minor = version
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.strip_prefix("go1."))
        .and_then(|v| v.split('.').next())
        .and_then(|v| v.parse::<u32>().ok());
    match minor {
        Some(m) if m >= 26 => Ok(version),
        _ => Err(EnvtestError::GoMissing(format!(
            "found `{version}`, but Kubernetes {KUBERNETES_VERSION} needs Go >= 1.26"
        ))),
    }
}

fn build(root: &Path, out_dir: &Path) -> Result<(), EnvtestError> {
    let go_version = check_go()?;
    let src = write_sources(root)?;
    let tmp_out = root.join(format!("bin-tmp-{}", std::process::id()));
    fs::create_dir_all(&tmp_out).map_err(|e| EnvtestError::io("creating", &tmp_out, e))?;
    let log_path = root.join("build.log");
    let mut log =
        fs::File::create(&log_path).map_err(|e| EnvtestError::io("creating", &log_path, e))?;
    let ldflags = ldflags();
    eprintln!(
        "[kcache-envtest] building kube-apiserver {KUBERNETES_VERSION} and etcd {ETCD_VERSION} \
         from Go modules with {go_version}\n[kcache-envtest]   into {}\n[kcache-envtest]   \
         a cold build downloads the modules and compiles a few thousand packages: it takes \
         several minutes on 2 cores (log: {})",
        out_dir.display(),
        log_path.display()
    );
    let _ = writeln!(log, "# {go_version}\n# ldflags: {ldflags}");
    let started = Instant::now();
    // Phase 1: module download and the package count (what "how far" is
    // measured against).
    let total = count_packages(&src, &mut log);
    // Phase 2: `go build -v` names each package as it compiles it.
    let ticker = ProgressTicker::start(total, started);
    let status = go_build(&src, &tmp_out, &ldflags, &mut log, &ticker.built);
    ticker.stop();
    let status = status.map_err(|e| EnvtestError::GoMissing(e.to_string()))?;
    if !status.success() {
        return Err(EnvtestError::BuildFailed {
            status: status.to_string(),
            log: log_path.clone(),
            tail: tail(&log_path, 30),
        });
    }
    // Publish atomically: a reader sees both binaries or neither.
    if out_dir.exists() {
        let _ = fs::remove_dir_all(out_dir);
    }
    fs::rename(&tmp_out, out_dir).map_err(|e| EnvtestError::io("renaming into", out_dir, e))?;
    eprintln!(
        "[kcache-envtest] control plane built in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Writes the Go module that builds the binaries into a directory of
/// `root` named by the sources' fingerprint; that directory.
fn write_sources(root: &Path) -> Result<PathBuf, EnvtestError> {
    let src = root.join(format!("src-{}", sources_fingerprint()));
    for (name, text) in SOURCES {
        let path = src.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| EnvtestError::io("creating", parent, e))?;
        }
        fs::write(&path, text).map_err(|e| EnvtestError::io("writing", &path, e))?;
    }
    Ok(src)
}

/// The linker flags: stripped binaries that report
/// [`KUBERNETES_VERSION`] as their version.
fn ldflags() -> String {
    let minor = KUBERNETES_VERSION
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .unwrap_or("0");
    format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION} \
         -X k8s.io/component-base/version.gitMajor=1 \
         -X k8s.io/component-base/version.gitMinor={minor} \
         -X k8s.io/component-base/version.gitTreeState=clean"
    )
}

/// A thread printing the build's progress every 15 s until stopped.
struct ProgressTicker {
    /// Packages compiled so far (counted by the build's reader).
    built: Arc<AtomicUsize>,
    /// Set to stop the thread.
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl ProgressTicker {
    /// Starts the thread: `total` packages to compile (if known), the
    /// build having started at `started`.
    fn start(total: Option<usize>, started: Instant) -> Self {
        let built = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let (done, built) = (done.clone(), built.clone());
            std::thread::spawn(move || {
                let compiling = Instant::now();
                let mut last = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                    if last.elapsed() >= Duration::from_secs(15) {
                        last = Instant::now();
                        eprintln!(
                            "[kcache-envtest]   {}",
                            progress_line(
                                built.load(Ordering::Relaxed),
                                total,
                                compiling.elapsed(),
                                started.elapsed()
                            )
                        );
                    }
                }
            })
        };
        ProgressTicker {
            built,
            done,
            thread,
        }
    }

    /// Stops the thread and waits for it.
    fn stop(self) {
        self.done.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// Runs `go build -v` of both binaries from `src` into `tmp_out`,
/// copying its output into `log` and counting each package it compiles
/// in `built`; its exit status.
fn go_build(
    src: &Path,
    tmp_out: &Path,
    ldflags: &str,
    log: &mut fs::File,
    built: &AtomicUsize,
) -> std::io::Result<std::process::ExitStatus> {
    let child = Command::new(go_command())
        .current_dir(src)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .args([
            "build",
            "-v",
            "-trimpath",
            "-mod=readonly",
            "-ldflags",
            ldflags,
            "-o",
        ])
        .arg(tmp_out)
        .args(["./cmd/kube-apiserver", "./cmd/etcd"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    child.and_then(|mut child| {
        // `-v` writes package names to stderr; compiler errors go there too.
        let stderr = child.stderr.take();
        let stdout = child.stdout.take();
        let mut log_out = log.try_clone()?;
        let out_thread = std::thread::spawn(move || {
            if let Some(mut out) = stdout {
                let _ = std::io::copy(&mut out, &mut log_out);
            }
        });
        if let Some(err) = stderr {
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                if is_package_path(&line) {
                    built.fetch_add(1, Ordering::Relaxed);
                }
                let _ = writeln!(log, "{line}");
            }
        }
        let _ = out_thread.join();
        child.wait()
    })
}

/// Downloads the modules and counts the packages the build compiles
/// (`go list -deps`); `None` when that fails (the build then reports
/// packages built without a total).
fn count_packages(src: &Path, log: &mut fs::File) -> Option<usize> {
    eprintln!("[kcache-envtest]   downloading the Go modules and listing the packages to build...");
    let listed = Command::new(go_command())
        .current_dir(src)
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .args([
            "list",
            "-mod=readonly",
            "-deps",
            "-f",
            "{{.ImportPath}}",
            "./cmd/kube-apiserver",
            "./cmd/etcd",
        ])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let _ = log.write_all(&listed.stderr);
    if !listed.status.success() {
        return None;
    }
    let total = listed
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    eprintln!(
        "[kcache-envtest]   {total} packages to compile (fewer when Go's build cache has some)"
    );
    Some(total)
}

/// Whether a line of `go build -v` names a package (not an error line).
fn is_package_path(line: &str) -> bool {
    !line.is_empty() && !line.starts_with('#') && !line.contains(' ') && !line.contains(':')
}

/// "built 1234 of 3456 packages (36%), about 4 min left (2 min so far)".
fn progress_line(built: usize, total: Option<usize>, compiling: Duration, all: Duration) -> String {
    let so_far = format_minutes(all);
    match total {
        Some(total) if total > 0 && built > 0 => {
            let fraction = (built as f64 / total as f64).min(1.0);
            let left = compiling.as_secs_f64() * (1.0 - fraction) / fraction;
            format!(
                "built {built} of {total} packages ({:.0}%), about {} left ({so_far} so far)",
                fraction * 100.0,
                format_minutes(Duration::from_secs_f64(left))
            )
        }
        _ => format!("built {built} packages ({so_far} so far)"),
    }
}

fn format_minutes(d: Duration) -> String {
    let secs = d.as_secs();
    if secs < 90 {
        format!("{secs} s")
    } else {
        format!("{} min", (secs + 30) / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_reads_as_a_person_would_say_it() {
        assert_eq!(
            progress_line(
                1000,
                Some(4000),
                Duration::from_secs(60),
                Duration::from_secs(80)
            ),
            "built 1000 of 4000 packages (25%), about 3 min left (80 s so far)"
        );
        assert_eq!(
            progress_line(10, None, Duration::from_secs(5), Duration::from_secs(5)),
            "built 10 packages (5 s so far)"
        );
        assert!(is_package_path("k8s.io/apiserver/pkg/server"));
        assert!(!is_package_path("# k8s.io/foo"));
        assert!(!is_package_path("./x.go:3:1: syntax error"));
    }

    #[test]
    fn fingerprint_is_stable_and_names_the_version() {
        let a = sources_fingerprint();
        assert_eq!(a, sources_fingerprint());
        assert!(a.starts_with(KUBERNETES_VERSION));
    }

    #[test]
    fn embedded_go_mod_pins_the_versions() {
        let go_mod = SOURCES[0].1;
        assert!(go_mod.contains(&format!("k8s.io/kubernetes {KUBERNETES_VERSION}")));
        assert!(go_mod.contains(&format!("go.etcd.io/etcd/server/v3 {ETCD_VERSION}")));
        // every staging module is replaced by its published v0.x release
        let staging_minor = format!("v0.{}", &KUBERNETES_VERSION[3..]);
        assert!(go_mod.contains(&format!("k8s.io/api => k8s.io/api {staging_minor}")));
    }
}
