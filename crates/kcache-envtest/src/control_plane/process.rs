//! The two processes of a local control plane: spawning them with their
//! logs, checking they are alive and ready, stopping and starting
//! kube-apiserver, and the shutdown when the handle is dropped.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::ControlPlane;
use super::files::open_log;
use crate::error::{EnvtestError, tail};
use crate::lock;
use crate::raw_http;

impl ControlPlane {
    fn log_path(&self, process: &str) -> PathBuf {
        self.run_dir.join(format!("{process}.log"))
    }

    pub(super) fn spawn(
        &self,
        process: &'static str,
        bin: &Path,
        args: &[OsString],
    ) -> Result<Child, EnvtestError> {
        let log = self.log_path(process);
        let (out, err) = open_log(&log)?;
        let mut cmd = Command::new(bin);
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        if !self.detached {
            cmd.env("KCACHE_PARENT_PID", std::process::id().to_string());
        } else {
            cmd.env_remove("KCACHE_PARENT_PID");
        }
        cmd.spawn().map_err(|e| EnvtestError::ProcessFailed {
            process,
            detail: format!("spawning {}: {e}", bin.display()),
            tail: tail(&log, 20),
            log,
        })
    }

    /// Fails with the log's tail if the process has exited.
    fn check_alive(&self, process: &'static str) -> Result<(), EnvtestError> {
        let slot = if process == "etcd" {
            &self.etcd
        } else {
            &self.apiserver
        };
        let mut guard = lock(slot);
        let exited = match guard.as_mut() {
            Some(child) => child.try_wait().ok().flatten(),
            None => return Err(EnvtestError::State(format!("{process} is not running"))),
        };
        if let Some(status) = exited {
            *guard = None;
            let log = self.log_path(process);
            return Err(EnvtestError::ProcessFailed {
                process,
                detail: format!("exited with {status}"),
                tail: tail(&log, 30),
                log,
            });
        }
        Ok(())
    }

    /// [`EnvtestError::ReadinessTimeout`] (with the tail of its log) once
    /// `process`, started at `started`, has not become ready within the
    /// start timeout.
    fn check_start_timeout(
        &self,
        process: &'static str,
        started: Instant,
    ) -> Result<(), EnvtestError> {
        if started.elapsed() <= self.start_timeout {
            return Ok(());
        }
        let log = self.log_path(process);
        Err(EnvtestError::ReadinessTimeout {
            process,
            waited: started.elapsed(),
            tail: tail(&log, 30),
            log,
        })
    }

    pub(super) async fn wait_etcd_ready(&self) -> Result<(), EnvtestError> {
        let started = Instant::now();
        loop {
            self.check_alive("etcd")?;
            if let Ok(body) = raw_http::get(self.etcd_port, "/health").await
                && body.contains("\"health\":\"true\"")
            {
                return Ok(());
            }
            self.check_start_timeout("etcd", started)?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_apiserver_ready(&self) -> Result<(), EnvtestError> {
        let started = Instant::now();
        let client = self.client()?;
        loop {
            self.check_alive("kube-apiserver")?;
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| EnvtestError::State(format!("building the readiness request: {e}")))?;
            if let Ok(text) = client.request_text(req).await
                && text.trim() == "ok"
            {
                return Ok(());
            }
            self.check_start_timeout("kube-apiserver", started)?;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops kube-apiserver (SIGKILL: open connections are cut, as in a
    /// crash). etcd and its data stay.
    pub async fn stop_apiserver(&self) -> Result<(), EnvtestError> {
        self.local_binaries("stop_apiserver")?;
        let child = lock(&self.apiserver).take();
        let Some(mut child) = child else {
            return Err(EnvtestError::State("kube-apiserver is not running".into()));
        };
        tokio::task::spawn_blocking(move || {
            let _ = child.kill();
            let _ = child.wait();
        })
        .await
        .map_err(|e| EnvtestError::State(format!("stopping kube-apiserver: {e}")))?;
        Ok(())
    }

    /// Starts kube-apiserver again (same port, certificates and etcd) and
    /// waits until it is ready.
    pub async fn start_apiserver(&self) -> Result<(), EnvtestError> {
        let bin = self
            .local_binaries("start_apiserver")?
            .kube_apiserver
            .clone();
        if lock(&self.apiserver).is_some() {
            return Err(EnvtestError::State(
                "kube-apiserver is already running".into(),
            ));
        }
        let child = self.spawn("kube-apiserver", &bin, &self.apiserver_args)?;
        *lock(&self.apiserver) = Some(child);
        self.wait_apiserver_ready().await
    }

    /// Stops and starts kube-apiserver; etcd keeps its data.
    pub async fn restart_apiserver(&self) -> Result<(), EnvtestError> {
        self.stop_apiserver().await?;
        self.start_apiserver().await
    }

    /// Whether kube-apiserver is running (started and not exited).
    pub fn apiserver_running(&self) -> bool {
        self.check_alive("kube-apiserver").is_ok()
    }

    /// PIDs of (etcd, kube-apiserver), where running.
    pub fn pids(&self) -> (Option<u32>, Option<u32>) {
        (
            lock(&self.etcd).as_ref().map(Child::id),
            lock(&self.apiserver).as_ref().map(Child::id),
        )
    }

    fn shutdown(&self) {
        for slot in [&self.apiserver, &self.etcd] {
            if let Some(mut child) = lock(slot).take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = fs::remove_dir_all(self.run_dir.join("data"));
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if !self.detached {
            self.shutdown();
        }
    }
}
