//! The real-apiserver side of the harness (`cargo xtask bench-compare
//! --real`): the Pods loaded into the local control plane, and the line
//! protocol between the harness and a client process.
//!
//! A client run against the real apiserver goes through three phases, each
//! a JSON line on stdout ([`Phase`]):
//!
//! 1. `synced`: the handler has seen `--expect` adds (every Pod of the
//!    cluster). The harness samples the kube-apiserver's CPU at this line.
//! 2. `updated` (only with `--expect-updates M`): the handler has seen M
//!    updates after the sync (the update load the harness drives through
//!    the apiserver). Each update's resourceVersion and the wall-clock time
//!    the handler saw it go to `--watch-log` when the client stops.
//! 3. `done`: after the harness writes a line (or closes stdin), the client
//!    waits `--settle-ms`, reads its steady RSS and prints the last line.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The `sync` scenario's options, the same in every client (flattened
/// into each client's arguments).
#[derive(clap::Args, Debug)]
pub struct SyncArgs {
    /// Sync: `paged` (list + watch) or `streaming` (watch with
    /// `sendInitialEvents`).
    #[arg(long, default_value = "paged")]
    pub mode: String,
    /// Sync: the number of Pods in the cluster (synced when the handler has
    /// seen as many adds).
    #[arg(long, default_value_t = 0)]
    pub expect: u64,
    /// Sync: updates to wait for after the sync (0: none).
    #[arg(long, default_value_t = 0)]
    pub expect_updates: u64,
    /// Sync: where to write `resourceVersion unix_micros` per update seen.
    #[arg(long)]
    pub watch_log: Option<std::path::PathBuf>,
}

impl SyncArgs {
    /// Whether the initial list is a streaming list (`--mode streaming`).
    pub fn streaming(&self) -> bool {
        self.mode == "streaming"
    }
}

/// The namespaces the loaded Pods are spread over.
pub const REAL_NAMESPACES: usize = 20;

/// The field manager that creates the Pods (owns spec and metadata).
pub const CREATE_MANAGER: &str = "kube-controller-manager";

/// The field manager that writes their status (as a kubelet would).
pub const STATUS_MANAGER: &str = "kubelet";

/// The namespace of Pod `i`.
pub fn real_namespace(i: usize) -> String {
    format!("bench-{:02}", i % REAL_NAMESPACES)
}

/// The name of Pod `i` (as in [`crate::pod`]).
pub fn real_pod_name(i: usize) -> String {
    format!("checkout-{:x}-{:05x}", 0x5f00_0000u64 + (i / 25) as u64, i)
}

/// Pod `i` as created through the API: the replay data set's Pod (see
/// [`crate::pod`]) without what the server sets (uid, resourceVersion,
/// creationTimestamp, managedFields, status), with a third container and
/// more environment, so that with the server's defaults and two managers'
/// managedFields it is about 11.5 KB of JSON.
pub fn real_pod(i: usize) -> Value {
    let mut p = crate::pod(i, 0, 0);
    p["metadata"]["namespace"] = json!(real_namespace(i));
    if let Some(m) = p["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generateName",
        ] {
            m.remove(k);
        }
    }
    if let Some(o) = p.as_object_mut() {
        o.remove("status");
    }
    let env: Vec<Value> = (0..16)
        .map(|k| {
            json!({"name": format!("FEATURE_FLAG_{k:02}_ENABLED"),
                   "value": if (i + k).is_multiple_of(3) { "false" } else { "true" }})
        })
        .collect();
    if let Some(c) = p["spec"]["containers"][0]["env"].as_array_mut() {
        c.extend(env);
    }
    let agent = json!({
        "name": "log-shipper", "image": "docker.io/fluent/fluent-bit:3.2.4",
        "args": ["--config", "/fluent-bit/etc/fluent-bit.yaml"],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "20m", "memory": "64Mi"}},
        "volumeMounts": [{"name": "varlog", "mountPath": "/var/log", "readOnly": true}],
        "securityContext": {"readOnlyRootFilesystem": true, "runAsUser": 10001}
    });
    if let Some(c) = p["spec"]["containers"].as_array_mut() {
        c.push(agent);
    }
    if let Some(v) = p["spec"]["volumes"].as_array_mut() {
        v.push(json!({"name": "varlog", "hostPath": {"path": "/var/log", "type": "Directory"}}));
    }
    p
}

/// The status of Pod `i` as the kubelet would write it (`generation`
/// counts the status updates: it changes readiness now and then and the
/// message every time).
pub fn real_pod_status(i: usize, generation: usize) -> Value {
    let full = crate::pod(i, 0, generation);
    let mut status = full["status"].clone();
    let statuses = status["containerStatuses"].clone();
    if let Some(s) = statuses.as_array().and_then(|a| a.first()) {
        let mut envoy = s.clone();
        envoy["name"] = json!("envoy");
        envoy["image"] = json!("docker.io/envoyproxy/envoy:v1.33.2");
        envoy["imageID"] = json!(
            "docker.io/envoyproxy/envoy@sha256:1f0b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
        );
        let mut shipper = s.clone();
        shipper["name"] = json!("log-shipper");
        shipper["image"] = json!("docker.io/fluent/fluent-bit:3.2.4");
        shipper["imageID"] = json!(
            "docker.io/fluent/fluent-bit@sha256:0a9b8c7d6e5f40312a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f40312a1b0c9d"
        );
        if let Some(a) = status["containerStatuses"].as_array_mut() {
            a.push(envoy);
            a.push(shipper);
        }
    }
    status["message"] = json!(format!("status update {generation}"));
    status
}

/// One line of the protocol between the harness and a client.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Phase {
    /// `synced`, `updated` or `done`.
    pub phase: String,
    /// Which client (`kcache`, `client-go`, `kube-runtime`).
    pub client: String,
    /// Objects (adds) the handler saw up to `synced`; updates up to `updated`.
    pub objects: u64,
    /// Seconds from just before the informer started to this phase.
    pub secs: f64,
    /// The client process's CPU time (user + system) since just before the
    /// informer started, in microseconds (`getrusage`: the kernel's
    /// nanosecond run time of all the process's threads, where
    /// `/proc/self/stat` rounds to 10 ms clock ticks, 7% of a quick run's
    /// sync).
    pub cpu_us: u64,
    /// Peak RSS (`VmHWM`), KiB.
    pub peak_rss_kb: u64,
    /// RSS now (`VmRSS`), KiB: the steady RSS in `done`.
    pub rss_kb: u64,
    /// RSS before the informer started, KiB.
    pub baseline_rss_kb: u64,
    /// Bytes the process read since just before the informer started
    /// (`rchar` of `/proc/self/io`: mostly the apiserver's responses).
    pub read_bytes: u64,
    /// Objects in the cache.
    pub cached: u64,
    /// kcache only: heap bytes live now (its counting allocator).
    #[serde(default)]
    pub heap_live_bytes: u64,
    /// kcache only: heap bytes live before the informer started.
    #[serde(default)]
    pub baseline_heap_bytes: u64,
    /// kcache only: seconds waited for background compression before
    /// `done` (`--wait-compressed`).
    #[serde(default)]
    pub waited_secs: f64,
    /// client-go only: the requests it made, `VERB path?query accept=... -> content-type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<String>,
}

/// Counters of this process at one instant, for [`Phase`] lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// user + system CPU, microseconds.
    pub cpu_us: u64,
    /// `rchar` of `/proc/self/io`.
    pub read_bytes: u64,
}

impl Sample {
    /// Reads this process's counters now.
    pub fn now() -> Sample {
        Sample {
            cpu_us: crate::self_cpu_us(),
            read_bytes: proc_io_field("self", "rchar").unwrap_or(0),
        }
    }
}

/// A field of `/proc/<pid>/io` (`rchar`, `wchar`...).
pub fn proc_io_field(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// Microseconds since the Unix epoch (the clock the harness and every
/// client share on one machine, for watch lag).
pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Measures a client run: time, CPU and bytes read since [`Meter::start`].
#[derive(Debug, Clone, Copy)]
pub struct Meter {
    started: std::time::Instant,
    at_start: Sample,
    baseline_rss_kb: u64,
}

impl Meter {
    /// Starts measuring now (call it just before the informer starts).
    pub fn start() -> Meter {
        Meter {
            baseline_rss_kb: crate::proc_status_kb("VmRSS"),
            at_start: Sample::now(),
            started: std::time::Instant::now(),
        }
    }

    /// A protocol line for `phase` with this process's counters now.
    pub fn phase(&self, phase: &str, client: &str, objects: u64, cached: u64) -> Phase {
        let now = Sample::now();
        Phase {
            phase: phase.into(),
            client: client.into(),
            objects,
            secs: self.started.elapsed().as_secs_f64(),
            cpu_us: now.cpu_us.saturating_sub(self.at_start.cpu_us),
            peak_rss_kb: crate::proc_status_kb("VmHWM"),
            rss_kb: crate::proc_status_kb("VmRSS"),
            baseline_rss_kb: self.baseline_rss_kb,
            read_bytes: now.read_bytes.saturating_sub(self.at_start.read_bytes),
            cached,
            heap_live_bytes: 0,
            baseline_heap_bytes: 0,
            waited_secs: 0.0,
            requests: Vec::new(),
        }
    }
}

/// Prints one protocol line and flushes stdout.
pub fn emit(p: &Phase) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, p);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Resolves when the harness writes a line to stdin or closes it.
pub async fn stop_requested() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        let _ = tx.send(());
    });
    let _ = rx.await;
}

/// Writes `rv unix_micros` lines (one per update the handler saw).
pub fn write_watch_log(path: &std::path::Path, seen: &[(u64, u64)]) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (rv, t) in seen {
        writeln!(w, "{rv} {t}")?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_pod_has_no_server_fields_and_a_third_container() {
        let p = real_pod(7);
        assert!(p["metadata"]["uid"].is_null());
        assert!(p["metadata"]["managedFields"].is_null());
        assert!(p["status"].is_null());
        assert_eq!(p["metadata"]["namespace"], "bench-07");
        assert_eq!(p["metadata"]["name"], real_pod_name(7).as_str());
        assert_eq!(p["spec"]["containers"].as_array().map(Vec::len), Some(3));
        let s = real_pod_status(7, 3);
        assert_eq!(s["containerStatuses"].as_array().map(Vec::len), Some(3));
        assert_eq!(s["message"], "status update 3");
    }
}
