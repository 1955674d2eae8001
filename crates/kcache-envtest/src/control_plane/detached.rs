//! The detached control plane of `cargo xtask controlplane`: its state
//! file, and stopping it by PID.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::ControlPlane;
use super::files::write_file;
use super::pid::pid_alive;
use crate::binaries::cache_dir;
use crate::error::EnvtestError;

/// What `cargo xtask controlplane start` records about a detached control
/// plane, so that `stop` and `status` find it later.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DetachedState {
    /// PID of etcd.
    pub etcd_pid: u32,
    /// PID of kube-apiserver.
    pub apiserver_pid: u32,
    /// The run folder (data, certificates, logs).
    pub run_dir: PathBuf,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The apiserver URL.
    pub server: String,
}

/// Path of the state file of the detached control plane.
pub fn detached_state_path() -> PathBuf {
    cache_dir().join("detached.json")
}

/// Reads the state of the detached control plane, if one was started.
pub fn detached_state() -> Result<DetachedState, EnvtestError> {
    let path = detached_state_path();
    let text = fs::read_to_string(&path).map_err(|_| EnvtestError::NotRunning(path.clone()))?;
    serde_json::from_str(&text)
        .map_err(|e| EnvtestError::State(format!("unreadable state file {}: {e}", path.display())))
}

/// Stops the detached control plane started by `cargo xtask controlplane
/// start`, and removes its data.
pub fn stop_detached() -> Result<DetachedState, EnvtestError> {
    let state = detached_state()?;
    for pid in [state.apiserver_pid, state.etcd_pid] {
        terminate_pid(pid);
    }
    let _ = fs::remove_dir_all(state.run_dir.join("data"));
    let _ = fs::remove_file(detached_state_path());
    Ok(state)
}

/// SIGTERM, then SIGKILL after 5 s.
fn terminate_pid(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let Ok(raw) = i32::try_from(pid) else { return };
    let p = Pid::from_raw(raw);
    if kill(p, Signal::SIGTERM).is_err() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pid_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if pid_alive(pid) {
        let _ = kill(p, Signal::SIGKILL);
    }
}

impl ControlPlane {
    /// Records a detached control plane's PIDs and paths in the state file
    /// that `cargo xtask controlplane stop|status` read.
    #[doc(hidden)] // cargo xtask controlplane start
    pub fn write_state(&self) -> Result<DetachedState, EnvtestError> {
        let (etcd, api) = self.pids();
        let state = DetachedState {
            etcd_pid: etcd.ok_or_else(|| EnvtestError::State("etcd is not running".into()))?,
            apiserver_pid: api
                .ok_or_else(|| EnvtestError::State("kube-apiserver is not running".into()))?,
            run_dir: self.run_dir.clone(),
            kubeconfig: self.kubeconfig_path.clone(),
            server: self.server_url(),
        };
        let path = detached_state_path();
        let text = serde_json::to_string_pretty(&state)
            .map_err(|e| EnvtestError::State(format!("state file: {e}")))?;
        write_file(&path, &text)?;
        Ok(state)
    }
}
