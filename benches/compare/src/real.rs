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
    /// Sync: `pods`, or `applications` (the custom resource of
    /// [`real_cr`], as `DynamicObject` / the dynamic informer).
    #[arg(long, default_value = "pods")]
    pub resource: String,
}

impl SyncArgs {
    /// Whether the initial list is a streaming list (`--mode streaming`).
    pub fn streaming(&self) -> bool {
        self.mode == "streaming"
    }

    /// Whether the client syncs the custom resource (`--resource applications`).
    pub fn custom_resource(&self) -> bool {
        is_custom_resource(&self.resource)
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

/// The custom resource of the custom-resource mode (issue 31): a
/// GitOps-style `Application` (`apps.kcache.dev/v1`, namespaced, with a
/// status subresource).
pub const CR_GROUP: &str = "apps.kcache.dev";
/// Its version.
pub const CR_VERSION: &str = "v1";
/// Its kind.
pub const CR_KIND: &str = "Application";
/// Its plural (the resource of its URLs).
pub const CR_PLURAL: &str = "applications";

/// The field manager that creates the custom resources (owns spec and
/// metadata), as a GitOps tool applying them would.
pub const CR_CREATE_MANAGER: &str = "gitops-applier";

/// The field manager that writes their status (the controller).
pub const CR_STATUS_MANAGER: &str = "application-controller";

/// The [`kube::api::ApiResource`] of [`CR_KIND`], for `DynamicObject` APIs.
pub fn cr_api_resource() -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: CR_GROUP.into(),
        version: CR_VERSION.into(),
        api_version: format!("{CR_GROUP}/{CR_VERSION}"),
        kind: CR_KIND.into(),
        plural: CR_PLURAL.into(),
    }
}

/// What the harness and the clients sync: `pods` or `applications`.
pub fn is_custom_resource(resource: &str) -> bool {
    resource == CR_PLURAL
}

/// The CustomResourceDefinition of [`CR_KIND`]: spec and status keep
/// unknown fields (as most operators' CRDs under active development do),
/// a status subresource, a printer column.
pub fn real_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{CR_PLURAL}.{CR_GROUP}")},
        "spec": {
            "group": CR_GROUP, "scope": "Namespaced",
            "names": {"plural": CR_PLURAL, "singular": "application", "kind": CR_KIND,
                      "listKind": format!("{CR_KIND}List")},
            "versions": [{
                "name": CR_VERSION, "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Health", "type": "string",
                                              "jsonPath": ".status.health.status"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    })
}

/// The name of custom resource `i`.
pub fn real_cr_name(i: usize) -> String {
    format!("app-{:03}-{:05}", i % 997, i)
}

/// Custom resource `i` as the GitOps tool creates it: a source with Helm
/// parameters, a destination, a sync policy (about 2 KB of JSON).
pub fn real_cr(i: usize) -> Value {
    let team = ["payments", "search", "checkout", "identity", "platform"][i % 5];
    let params: Vec<Value> = (0..14)
        .map(|k| {
            json!({"name": format!("values.component{k:02}.replicas"),
                   "value": ((i + k) % 7 + 1).to_string(), "forceString": k % 3 == 0})
        })
        .collect();
    json!({
        "apiVersion": format!("{CR_GROUP}/{CR_VERSION}"), "kind": CR_KIND,
        "metadata": {
            "name": real_cr_name(i), "namespace": real_namespace(i),
            "labels": {"app.kubernetes.io/part-of": team, "environment": "production",
                       "tier": format!("tier-{}", i % 3)},
            "annotations": {"notifications.kcache.dev/subscribe.on-sync-failed.slack": format!("{team}-alerts"),
                            "link.kcache.dev/dashboard": format!("https://grafana.example.com/d/{team}/{i}")},
            "finalizers": ["resources-finalizer.apps.kcache.dev"]
        },
        "spec": {
            "project": team,
            "source": {
                "repoURL": format!("https://git.example.com/{team}/deployments.git"),
                "path": format!("charts/service-{i}"), "targetRevision": "main",
                "helm": {"releaseName": real_cr_name(i), "valueFiles": ["values.yaml", "values-production.yaml"],
                         "parameters": params}
            },
            "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("{team}-{}", i % 40)},
            "syncPolicy": {"automated": {"prune": true, "selfHeal": true, "allowEmpty": false},
                           "syncOptions": ["CreateNamespace=true", "ServerSideApply=true", "PruneLast=true"],
                           "retry": {"limit": 5, "backoff": {"duration": "5s", "factor": 2, "maxDuration": "3m"}}},
            "revisionHistoryLimit": 5,
            "weight": 0.5 + (i % 4) as f64 * 0.125
        }
    })
}

/// The status the controller writes for custom resource `i`: the
/// resources it manages, their health, the last syncs (about 3 KB of
/// JSON; `generation` changes the revision and the message).
pub fn real_cr_status(i: usize, generation: usize) -> Value {
    let kinds = [
        ("apps", "Deployment"),
        ("", "Service"),
        ("", "ConfigMap"),
        ("", "ServiceAccount"),
        ("networking.k8s.io", "Ingress"),
        ("autoscaling", "HorizontalPodAutoscaler"),
        ("policy", "PodDisruptionBudget"),
        ("monitoring.coreos.com", "ServiceMonitor"),
    ];
    let ns = format!(
        "{}-{}",
        ["payments", "search", "checkout", "identity", "platform"][i % 5],
        i % 40
    );
    let resources: Vec<Value> = kinds
        .iter()
        .enumerate()
        .map(|(k, (group, kind))| {
            json!({"group": group, "version": "v1", "kind": kind, "namespace": ns,
                   "name": format!("service-{i}-{k}"), "status": "Synced",
                   "health": {"status": if (i + k).is_multiple_of(11) { "Progressing" } else { "Healthy" }}})
        })
        .collect();
    let revision = |g: usize| format!("{:040x}", (i as u128) << 64 | g as u128);
    let history: Vec<Value> = (0..4)
        .map(|h| {
            json!({"id": generation * 4 + h, "revision": revision(generation * 4 + h),
                   "deployedAt": format!("2026-12-0{}T1{}:00:00Z", 1 + h, h),
                   "deployStartedAt": format!("2026-12-0{}T1{}:59:30Z", 1 + h, h)})
        })
        .collect();
    json!({
        "sync": {"status": "Synced", "revision": revision(generation * 4 + 3)},
        "health": {"status": "Healthy", "lastTransitionTime": "2026-12-04T10:00:00Z"},
        "resources": resources,
        "history": history,
        "operationState": {"phase": "Succeeded", "message": format!("successfully synced (all tasks run), round {generation}"),
                           "startedAt": "2026-12-04T10:00:00Z", "finishedAt": "2026-12-04T10:00:07Z",
                           "syncResult": {"revision": revision(generation * 4 + 3)}},
        "reconciledAt": "2026-12-04T10:00:07Z",
        "observedGeneration": 1
    })
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

    #[test]
    fn the_custom_resource_has_spec_and_status_of_about_5_kb() {
        let cr = real_cr(7);
        assert_eq!(cr["metadata"]["name"], real_cr_name(7).as_str());
        assert_eq!(cr["metadata"]["namespace"], "bench-07");
        let status = real_cr_status(7, 2);
        assert_eq!(status["resources"].as_array().map(Vec::len), Some(8));
        let n = serde_json::to_vec(&cr).unwrap().len() + serde_json::to_vec(&status).unwrap().len();
        // managedFields of the two managers and the server's metadata come on top
        assert!((3000..5000).contains(&n), "{n}");
        assert_eq!(real_crd()["spec"]["names"]["plural"], CR_PLURAL);
    }
}
