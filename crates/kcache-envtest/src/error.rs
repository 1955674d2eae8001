//! Errors of the local control plane.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while building, starting or talking to the
/// local control plane. Each variant says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvtestError {
    /// The `go` toolchain is not on `PATH` (and `KCACHE_GO` does not name one).
    #[error(
        "the Go toolchain was not found ({0}); install Go >= 1.26 and put `go` on PATH \
         (or set KCACHE_GO to its path): it builds kube-apiserver and etcd from the pinned Kubernetes modules"
    )]
    GoMissing(String),

    /// `go build` of kube-apiserver or etcd failed.
    #[error(
        "building the control plane failed (exit status {status}); the full build log is at {log}:\n{tail}"
    )]
    BuildFailed {
        /// Exit status of `go build`.
        status: String,
        /// Path of the build log.
        log: PathBuf,
        /// The last lines of the log.
        tail: String,
    },

    /// A control-plane process could not be started or exited early.
    #[error(
        "{process} failed to start or exited early ({detail}); its log is at {log}, last lines:\n{tail}"
    )]
    ProcessFailed {
        /// `etcd` or `kube-apiserver`.
        process: &'static str,
        /// What happened.
        detail: String,
        /// Path of the process's log file.
        log: PathBuf,
        /// The last lines of the log.
        tail: String,
    },

    /// A process did not become ready in time.
    #[error("{process} was not ready after {waited:?}; its log is at {log}, last lines:\n{tail}")]
    ReadinessTimeout {
        /// `etcd` or `kube-apiserver`.
        process: &'static str,
        /// How long we waited.
        waited: Duration,
        /// Path of the process's log file.
        log: PathBuf,
        /// The last lines of the log.
        tail: String,
    },

    /// No free loopback port could be found.
    #[error("could not reserve a free loopback port (is the loopback interface up?)")]
    NoFreePort(#[source] std::io::Error),

    /// Generating certificates or keys failed.
    #[error("generating the control plane's certificates failed")]
    Certificates(#[from] rcgen::Error),

    /// A file-system operation failed.
    #[error("{action} {path} failed (check the path's permissions and free space)")]
    Io {
        /// What we were doing.
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The kubeconfig could not be turned into a client configuration.
    #[error("the generated kubeconfig was rejected by kube")]
    Kubeconfig(#[from] kube::config::KubeconfigError),

    /// A Kubernetes API call failed.
    #[error("Kubernetes API call failed while {action}")]
    Api {
        /// What we were doing.
        action: String,
        /// The underlying error.
        #[source]
        source: kube::Error,
    },

    /// A CustomResourceDefinition did not become Established in time.
    #[error("CustomResourceDefinition {name} was not Established after {waited:?}")]
    CrdNotEstablished {
        /// CRD name.
        name: String,
        /// How long we waited.
        waited: Duration,
    },

    /// The control plane was asked to do something in a state where it cannot
    /// (e.g. `start_apiserver` while it is running).
    #[error("invalid control-plane state: {0}")]
    State(String),

    /// A fault operation was asked of an external cluster.
    #[error("`{0}` needs a local control plane started by kcache-envtest, not an external cluster")]
    External(&'static str),

    /// No detached control plane was found (for `cargo xtask controlplane stop|status`).
    #[error(
        "no local control plane is running (no state file at {0}); start one with `cargo xtask controlplane start`"
    )]
    NotRunning(PathBuf),
}

impl EnvtestError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        EnvtestError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn api(action: impl Into<String>, source: kube::Error) -> Self {
        EnvtestError::Api {
            action: action.into(),
            source,
        }
    }
}

/// The last `n` lines of a file, for error messages (empty if unreadable).
pub(crate) fn tail(path: &std::path::Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            lines[start..].join("\n")
        }
        Err(e) => format!("(log unreadable: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::ProxyError;

    /// A source is printed once in a chain: no message repeats its
    /// source's (issue 17).
    #[test]
    fn no_error_prints_its_source() {
        let leaf = || std::io::Error::other("the leaf error's own message");
        let kube_err = || kube::Error::Service(Box::new(leaf()));
        let errors: Vec<Box<dyn std::error::Error>> = vec![
            Box::new(EnvtestError::NoFreePort(leaf())),
            Box::new(EnvtestError::io("writing", "/tmp/x", leaf())),
            Box::new(EnvtestError::api("creating a namespace", kube_err())),
            Box::new(ProxyError::Bind(leaf())),
            Box::new(ProxyError::Client(kube_err())),
            Box::new(ProxyError::Upstream(kube_err())),
        ];
        for e in errors {
            let source = e.source().expect("has a source").to_string();
            assert!(!e.to_string().contains(&source), "{e} repeats {source}");
        }
    }
}
