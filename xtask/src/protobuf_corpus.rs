//! `cargo xtask protobuf-corpus`: regenerates the protobuf test corpus of
//! kcache-core (`crates/kcache-core/tests/data/protobuf/`) from a real
//! local control plane.
//!
//! It starts kube-apiserver + etcd (kcache-envtest; `KCACHE_KUBE_APISERVER`
//! and `KCACHE_ETCD` name prebuilt binaries), creates built-in objects that
//! carry every special type of the protobuf decoding (Time, MicroTime,
//! Quantity, IntOrString, RawExtension, FieldsV1, byte fields, maps,
//! inlined structs, pointers to zero values), writes their status through a
//! second field manager (so managedFields hold two managers, as on a real
//! cluster), then GETs each one twice at the same resourceVersion: as
//! protobuf (`<name>.pb`, the body as sent: `k8s\0` + `runtime.Unknown`) and
//! as JSON (`<name>.json`). It also keeps a `PodList` both ways, a protobuf
//! watch stream, a protobuf streaming list (with its initial-events-end
//! bookmark) and the ERROR event of a watch from a resourceVersion that is
//! too old.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use kcache_envtest::ControlPlane;
use serde_json::{Value, json};

use crate::run::workspace_root;

#[derive(Args)]
pub struct CorpusArgs {
    /// Write the files here instead of the checked-in folder.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The checked-in corpus folder.
pub fn corpus_dir() -> PathBuf {
    workspace_root().join("crates/kcache-core/tests/data/protobuf")
}

const NS: &str = "corpus";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
const JSON: &str = "application/json";
const TIMEOUT: Duration = Duration::from_secs(30);

pub fn run(args: CorpusArgs) -> anyhow::Result<()> {
    let out = args.out.unwrap_or_else(corpus_dir);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let cp = ControlPlane::start()
            .await
            .context("starting the local control plane")?;
        let result = tokio::time::timeout(Duration::from_secs(300), generate(&cp, &out))
            .await
            .context("corpus generation took more than 5 minutes")?;
        drop(cp); // stops kube-apiserver and etcd
        result
    })
}

struct Http {
    client: kube::Client,
}

struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Http {
    async fn call(
        &self,
        method: &str,
        path: &str,
        accept: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<Answer> {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("Accept", accept)
            .header("Content-Type", content_type)
            .body(kube::client::Body::from(body))?;
        let res = tokio::time::timeout(TIMEOUT, self.client.send(req))
            .await
            .with_context(|| format!("{method} {path} timed out"))??;
        let status = res.status().as_u16();
        let content_type = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut stream = res.into_body().into_data_stream();
        let mut body = Vec::new();
        while let Some(chunk) = tokio::time::timeout(TIMEOUT, stream.next())
            .await
            .with_context(|| format!("reading {path} timed out"))?
        {
            body.extend_from_slice(&chunk?);
        }
        Ok(Answer {
            status,
            content_type,
            body,
        })
    }

    /// A GET of `path` asking for `accept`.
    async fn get(&self, path: &str, accept: &str) -> anyhow::Result<Answer> {
        self.call("GET", path, accept, JSON, Vec::new()).await
    }

    async fn json(&self, method: &str, path: &str, ct: &str, body: Value) -> anyhow::Result<Value> {
        let a = self
            .call(method, path, JSON, ct, serde_json::to_vec(&body)?)
            .await?;
        if !(200..300).contains(&a.status) {
            bail!(
                "{method} {path}: HTTP {}: {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            );
        }
        Ok(serde_json::from_slice(&a.body)?)
    }

    async fn create(&self, collection: &str, manager: &str, obj: Value) -> anyhow::Result<Value> {
        self.json(
            "POST",
            &format!("{collection}?fieldManager={manager}"),
            JSON,
            obj,
        )
        .await
    }

    async fn patch_status(
        &self,
        object: &str,
        manager: &str,
        patch: Value,
    ) -> anyhow::Result<Value> {
        self.json(
            "PATCH",
            &format!("{object}/status?fieldManager={manager}"),
            "application/merge-patch+json",
            patch,
        )
        .await
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
    Ok(())
}

/// GETs `path` as protobuf and as JSON at the same resourceVersion and
/// writes `<name>.pb` and `<name>.json`.
/// Writes the body of an error answer (whatever its status) as `name`,
/// printing what came back for `what`.
fn save_error(dir: &Path, name: &str, what: &str, answer: &Answer) -> anyhow::Result<()> {
    eprintln!("{what}: HTTP {} {}", answer.status, answer.content_type);
    write(dir, name, &answer.body)
}

async fn save_both(http: &Http, dir: &Path, name: &str, path: &str) -> anyhow::Result<()> {
    for _ in 0..5 {
        let pb = http.get(path, PROTOBUF).await?;
        let js = http.get(path, JSON).await?;
        if pb.status != 200 || js.status != 200 {
            bail!("GET {path}: HTTP {} / {}", pb.status, js.status);
        }
        if !pb.content_type.starts_with(PROTOBUF) {
            bail!("GET {path} as protobuf answered {}", pb.content_type);
        }
        let rv = |v: &Value| v["metadata"]["resourceVersion"].as_str().map(str::to_owned);
        let json: Value = serde_json::from_slice(&js.body)?;
        let again = http.get(path, JSON).await?;
        let again: Value = serde_json::from_slice(&again.body)?;
        if rv(&json) == rv(&again) {
            write(dir, &format!("{name}.pb"), &pb.body)?;
            write(dir, &format!("{name}.json"), &js.body)?;
            return Ok(());
        }
    }
    bail!("{path} kept changing")
}

async fn generate(cp: &ControlPlane, dir: &Path) -> anyhow::Result<()> {
    let http = Http {
        client: cp.client()?,
    };
    http.create(
        "/api/v1/namespaces",
        "corpus",
        json!({"metadata": {"name": NS}}),
    )
    .await?;
    let start_rv = http
        .json(
            "GET",
            &format!("/api/v1/namespaces/{NS}/configmaps"),
            JSON,
            Value::Null,
        )
        .await?["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("0")
        .to_owned();
    let ns = format!("/api/v1/namespaces/{NS}");
    let apps = format!("/apis/apps/v1/namespaces/{NS}");

    http.create(
        &format!("{ns}/serviceaccounts"),
        "kubectl",
        json!({"metadata": {"name": "web"}}),
    )
    .await?;
    // --- Pod: managedFields of a controller and of the kubelet, status.
    let owner_uid = "5e0c1c9e-1111-4a4a-9b9b-0123456789ab";
    http.create(&format!("{ns}/pods"), "kube-controller-manager", json!({
        "metadata": {
            "name": "web-0", "generateName": "web-",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d9f8c6b5"},
            "annotations": {"prometheus.io/scrape": "true", "kubectl.kubernetes.io/restartedAt": "2026-11-29T08:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8c6b5", "uid": owner_uid, "controller": true, "blockOwnerDeletion": true}],
            "finalizers": ["example.com/keep"]
        },
        "spec": {
            "nodeName": "node-1",
            "volumes": [
                {"name": "config", "configMap": {"name": "web-config", "defaultMode": 420, "optional": false}},
                {"name": "cache", "emptyDir": {"sizeLimit": "512Mi"}},
                {"name": "token", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]}}
            ],
            "initContainers": [{"name": "init", "image": "busybox:1.36", "command": ["sh", "-c", "true"]}],
            "containers": [{
                "name": "app", "image": "registry.example.com/web:1.2.3",
                "args": ["--port=8080", "--verbose"],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}, {"name": "metrics", "containerPort": 9090}],
                "env": [
                    {"name": "MODE", "value": "production"},
                    {"name": "EMPTY", "value": ""},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}}
                ],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2G"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "periodSeconds": 5, "failureThreshold": 3},
                "livenessProbe": {"tcpSocket": {"port": "http"}, "initialDelaySeconds": 10},
                "startupProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1, "failureThreshold": 30},
                "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
                "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/config", "readOnly": true}, {"name": "cache", "mountPath": "/cache"}]
            }],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}, "topologyKey": "kubernetes.io/hostname"}}]}},
            "securityContext": {"fsGroup": 2000, "seccompProfile": {"type": "RuntimeDefault"}},
            "serviceAccountName": "web",
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 30
        }
    })).await?;
    http.patch_status(&format!("{ns}/pods/web-0"), "kubelet", json!({"status": {
        "phase": "Running",
        "conditions": [
            {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:15:43Z"},
            {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:15:49Z"},
            {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:15:42Z"}
        ],
        "hostIP": "10.0.0.17", "hostIPs": [{"ip": "10.0.0.17"}],
        "podIP": "10.244.1.17", "podIPs": [{"ip": "10.244.1.17"}, {"ip": "fd00::17"}],
        "startTime": "2026-11-30T10:15:42Z",
        "qosClass": "Burstable",
        "initContainerStatuses": [{"name": "init", "ready": true, "restartCount": 0, "image": "busybox:1.36", "imageID": "docker.io/library/busybox@sha256:0123", "containerID": "containerd://aa", "started": false,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2026-11-30T10:15:42Z", "finishedAt": "2026-11-30T10:15:43Z", "containerID": "containerd://aa"}}}],
        "containerStatuses": [{"name": "app", "ready": true, "restartCount": 2, "image": "registry.example.com/web:1.2.3", "imageID": "registry.example.com/web@sha256:4567", "containerID": "containerd://bb", "started": true,
            "state": {"running": {"startedAt": "2026-11-30T10:15:44Z"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-11-30T10:10:00Z", "finishedAt": "2026-11-30T10:15:40Z"}},
            "allocatedResources": {"cpu": "250m", "memory": "256Mi"}}]
    }})).await?;
    http.create(
        &format!("{ns}/pods"),
        "kubectl",
        json!({
            "metadata": {"name": "minimal"},
            "spec": {"containers": [{"name": "c", "image": "pause"}]}
        }),
    )
    .await?;
    save_both(&http, dir, "pod", &format!("{ns}/pods/web-0")).await?;
    save_both(&http, dir, "pod-minimal", &format!("{ns}/pods/minimal")).await?;

    // --- Deployment: IntOrString in the strategy, probes, quantities.
    http.create(&format!("{apps}/deployments"), "kubectl-client-side-apply", json!({
        "metadata": {"name": "web", "labels": {"app": "web"}, "annotations": {"deployment.kubernetes.io/revision": "3"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "revisionHistoryLimit": 5,
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "registry.example.com/web:1.2.3",
                    "resources": {"requests": {"cpu": "0.5", "memory": "128974848"}},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}}}]}
            }
        }
    })).await?;
    http.patch_status(&format!("{apps}/deployments/web"), "kube-controller-manager", json!({"status": {
        "observedGeneration": 1, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2, "unavailableReplicas": 1,
        "conditions": [{"type": "Available", "status": "False", "lastUpdateTime": "2026-11-30T10:15:42Z", "lastTransitionTime": "2026-11-30T10:15:42Z", "reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability."}]
    }})).await?;
    save_both(&http, dir, "deployment", &format!("{apps}/deployments/web")).await?;

    // --- Service: ports with int and string targetPort.
    http.create(&format!("{ns}/services"), "kubectl", json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]}
    })).await?;
    save_both(&http, dir, "service", &format!("{ns}/services/web")).await?;

    // --- ConfigMap with binaryData; Secret with bytes that are not UTF-8.
    http.create(&format!("{ns}/configmaps"), "kubectl", json!({
        "metadata": {"name": "web-config", "labels": {"app": "web"}},
        "data": {"app.properties": "mode=production\nport=8080\n", "empty": "", "unicode": "h\u{e9}llo \u{2603}"},
        "binaryData": {"logo.bin": "AAECA/8=", "empty.bin": ""}
    })).await?;
    let path = format!("{ns}/configmaps/web-config");
    save_both(&http, dir, "configmap", &path).await?;
    http.create(&format!("{ns}/secrets"), "kubectl", json!({
        "metadata": {"name": "web-tls"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t", "tls.key": "/wD+AQ==", "empty": ""},
        "stringData": {"note": "written as stringData"},
        "immutable": false
    })).await?;
    save_both(&http, dir, "secret", &format!("{ns}/secrets/web-tls")).await?;

    // --- A ConfigMap being deleted: deletionTimestamp, finalizers.
    http.create(
        &format!("{ns}/configmaps"),
        "kubectl",
        json!({
            "metadata": {"name": "deleting", "finalizers": ["example.com/cleanup"]},
            "data": {"k": "v"}
        }),
    )
    .await?;
    http.json(
        "DELETE",
        &format!("{ns}/configmaps/deleting"),
        JSON,
        Value::Null,
    )
    .await?;
    let path = format!("{ns}/configmaps/deleting");
    save_both(&http, dir, "configmap-deleting", &path).await?;

    // --- Node: quantities in capacity/allocatable, taints with timeAdded.
    http.create("/api/v1/nodes", "kubelet", json!({
        "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1", "node-role.kubernetes.io/worker": ""}},
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"], "providerID": "kind://docker/kind/node-1",
            "taints": [{"key": "example.com/dedicated", "value": "web", "effect": "NoSchedule"},
                       {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-30T10:00:00Z"}]}
    })).await?;
    http.patch_status("/api/v1/nodes/node-1", "kubelet", json!({"status": {
        "capacity": {"cpu": "4", "memory": "16393504Ki", "pods": "110", "ephemeral-storage": "102350Mi", "hugepages-2Mi": "0"},
        "allocatable": {"cpu": "3800m", "memory": "15.5Gi", "pods": "110", "ephemeral-storage": "94.5G", "hugepages-2Mi": "0"},
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-30T10:15:00Z", "lastTransitionTime": "2026-11-30T09:00:00Z", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.17"}, {"type": "Hostname", "address": "node-1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1.0", "osImage": "Debian", "containerRuntimeVersion": "containerd://2.0.0", "kubeletVersion": "v1.37.2", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
        "images": [{"names": ["registry.example.com/web@sha256:4567", "registry.example.com/web:1.2.3"], "sizeBytes": 123456789}]
    }})).await?;
    save_both(&http, dir, "node", "/api/v1/nodes/node-1").await?;

    // --- Lease: MicroTime.
    http.create(&format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"), "kcache", json!({
        "metadata": {"name": "controller-leader"},
        "spec": {"holderIdentity": "replica-0_1234", "leaseDurationSeconds": 15, "acquireTime": "2026-11-30T10:15:42.123456Z", "renewTime": "2026-11-30T10:16:02.000001Z", "leaseTransitions": 3}
    })).await?;
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/controller-leader");
    save_both(&http, dir, "lease", &path).await?;

    // --- Events: core/v1 (zero eventTime: JSON null) and events.k8s.io/v1 (MicroTime).
    http.create(&format!("{ns}/events"), "kubelet", json!({
        "metadata": {"name": "web-0.1234"},
        "involvedObject": {"kind": "Pod", "namespace": NS, "name": "web-0", "uid": "u", "apiVersion": "v1", "resourceVersion": "1", "fieldPath": "spec.containers{app}"},
        "reason": "Pulled", "message": "Container image already present on machine", "type": "Normal",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": "2026-11-30T10:15:43Z", "lastTimestamp": "2026-11-30T10:15:50Z", "count": 2
    })).await?;
    save_both(&http, dir, "event", &format!("{ns}/events/web-0.1234")).await?;
    http.create(&format!("/apis/events.k8s.io/v1/namespaces/{NS}/events"), "kube-scheduler", json!({
        "metadata": {"name": "web-0.5678"},
        "eventTime": "2026-11-30T10:15:42.654321Z",
        "series": {"count": 3, "lastObservedTime": "2026-11-30T10:15:52.000100Z"},
        "reportingController": "default-scheduler", "reportingInstance": "scheduler-0",
        "action": "Binding", "reason": "Scheduled", "note": "Successfully assigned corpus/web-0 to node-1", "type": "Normal",
        "regarding": {"kind": "Pod", "namespace": NS, "name": "web-0"}
    })).await?;
    let path = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events/web-0.5678");
    save_both(&http, dir, "event-events-k8s-io", &path).await?;

    // --- PersistentVolumeClaim: quantities, status.
    http.create(&format!("{ns}/persistentvolumeclaims"), "kubectl", json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}, "storageClassName": "standard", "volumeMode": "Filesystem"}
    })).await?;
    http.patch_status(
        &format!("{ns}/persistentvolumeclaims/data"),
        "kube-controller-manager",
        json!({"status": {
            "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"}
        }}),
    )
    .await?;
    let path = format!("{ns}/persistentvolumeclaims/data");
    save_both(&http, dir, "pvc", &path).await?;

    // --- ControllerRevision: RawExtension.
    http.create(&format!("{apps}/controllerrevisions"), "kube-controller-manager", json!({
        "metadata": {"name": "web-7d9f8c6b5"},
        "revision": 2,
        "data": {"spec": {"template": {"$patch": "replace", "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "web:1.2.3"}]}}}, "n": 1.5, "list": [1, "two", null, true]}
    })).await?;
    let path = format!("{apps}/controllerrevisions/web-7d9f8c6b5");
    save_both(&http, dir, "controllerrevision", &path).await?;

    // --- A list, both ways.
    save_both(&http, dir, "podlist", &format!("{ns}/pods")).await?;

    // --- A protobuf watch from before everything above, with bookmarks.
    let watch = http
        .get(
            &format!("{ns}/configmaps?watch=true&resourceVersion={start_rv}&allowWatchBookmarks=true&timeoutSeconds=1"),
            PROTOBUF_WATCH,
        )
        .await?;
    if !watch.content_type.contains("stream=watch") {
        bail!("watch answered {}", watch.content_type);
    }
    write(dir, "watch-configmaps.pb", &watch.body)?;
    // --- A protobuf streaming list: initial events, then the bookmark
    // with the initial-events-end annotation.
    let stream = http
        .get(
            &format!("{ns}/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"),
            PROTOBUF_WATCH,
        )
        .await?;
    write(dir, "streaming-list-configmaps.pb", &stream.body)?;
    // --- A watch from a resourceVersion etcd compacted away: an ERROR
    // event (410 Expired) in the stream, or a Status body.
    // (The watch cache serves old versions it still holds: restart the
    // apiserver so that its cache starts after the compaction.)
    cp.compact_etcd().await.context("compacting etcd")?;
    cp.restart_apiserver()
        .await
        .context("restarting kube-apiserver")?;
    let http = Http {
        client: cp.client()?,
    };
    let expired = http
        .get(
            &format!("{ns}/configmaps?watch=true&resourceVersion={start_rv}&timeoutSeconds=1"),
            PROTOBUF_WATCH,
        )
        .await?;
    save_error(
        dir,
        "watch-expired.pb",
        "watch from a compacted resourceVersion",
        &expired,
    )?;
    // --- A Status error body as protobuf.
    let missing = http.get(&format!("{ns}/pods/absent"), PROTOBUF).await?;
    save_error(dir, "status-not-found.pb", "GET of an absent pod", &missing)
}
