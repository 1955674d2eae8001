//! Realistic Pod JSON generators (~8 KB with managedFields), shared by the
//! tests and the benchmarks.

#![allow(dead_code)]

use serde_json::{Value, json};

/// A realistic Pod, `i` making names, uids and resource versions unique.
pub fn realistic_pod_value(i: usize, namespace: &str) -> Value {
    let name = format!("web-frontend-7d9f8c6b5-{i:05x}");
    let uid = format!("{:08x}-1a2b-4c3d-8e9f-{:012x}", i, i * 7919);
    let env: Vec<Value> = (0..20)
        .map(|e| json!({"name": format!("FEATURE_FLAG_{e}"), "value": format!("enabled-{e}-{i}")}))
        .collect();
    let mut env_fields = serde_json::Map::new();
    env_fields.insert(".".into(), json!({}));
    for e in 0..20 {
        env_fields.insert(
            format!("k:{{\"name\":\"FEATURE_FLAG_{e}\"}}"),
            json!({".": {}, "f:name": {}, "f:value": {}}),
        );
    }
    let fields_v1 = json!({
        "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:tier": {}, "f:version": {}},
            "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{uid}\"}}"): {}}},
        "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:env": env_fields,
            "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
            "f:readinessProbe": {".": {}, "f:failureThreshold": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}}, "f:periodSeconds": {}},
            "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
            "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {".": {}, "k:{\"mountPath\":\"/etc/config\"}": {".": {}, "f:mountPath": {}, "f:name": {}}}}},
            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {},
            "f:volumes": {".": {}, "k:{\"name\":\"config\"}": {".": {}, "f:configMap": {".": {}, "f:defaultMode": {}, "f:name": {}}, "f:name": {}}}}
    });
    let status_fields = json!({"f:status": {"f:conditions": {
        "k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
        "k:{\"type\":\"Initialized\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
        "k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}},
        "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"10.244.1.17\"}": {".": {}, "f:ip": {}}}, "f:startTime": {}}});
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": "web-frontend-7d9f8c6b5-",
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": format!("{}", 100000 + i),
            "creationTimestamp": "2026-11-30T10:15:42Z",
            "labels": {"app": "web-frontend", "pod-template-hash": "7d9f8c6b5", "tier": "frontend", "version": "v2.14.3", "app.kubernetes.io/part-of": "shop"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-29T08:00:00Z", "prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-frontend-7d9f8c6b5", "uid": "5e0c1c9e-1111-4a4a-9b9b-0123456789ab", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T10:15:42Z", "fieldsType": "FieldsV1", "fieldsV1": fields_v1},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T10:15:49Z", "fieldsType": "FieldsV1", "fieldsV1": status_fields, "subresource": "status"}
            ]
        },
        "spec": {
            "volumes": [{"name": "config", "configMap": {"name": "web-frontend-config", "defaultMode": 420}},
                        {"name": "kube-api-access-x7k2p", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}, {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}], "defaultMode": 420}}],
            "containers": [{
                "name": "app",
                "image": "registry.example.com/shop/web-frontend:v2.14.3",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": env,
                "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}, "requests": {"cpu": "250m", "memory": "256Mi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}, {"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": format!("worker-node-{:03}", i % 100),
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:15:42Z"},
                {"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:15:49Z"},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:15:49Z"},
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:15:42Z"}
            ],
            "hostIP": "172.18.0.3",
            "podIP": "10.244.1.17",
            "podIPs": [{"ip": "10.244.1.17"}],
            "startTime": "2026-11-30T10:15:42Z",
            "containerStatuses": [{
                "name": "app",
                "state": {"running": {"startedAt": "2026-11-30T10:15:45Z"}},
                "lastState": {},
                "ready": true,
                "restartCount": 0,
                "image": "registry.example.com/shop/web-frontend:v2.14.3",
                "imageID": "registry.example.com/shop/web-frontend@sha256:4f53c1a0d9b2e8f7a6c5b4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3",
                "containerID": "containerd://9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b",
                "started": true
            }],
            "qosClass": "Burstable"
        }
    })
}

/// The same Pod as JSON bytes.
pub fn realistic_pod(i: usize, namespace: &str) -> Vec<u8> {
    serde_json::to_vec(&realistic_pod_value(i, namespace)).expect("serialize pod")
}

/// A realistic Pod (labels, annotations, ownerReferences, managedFields,
/// containers, status) whose per-instance fields differ the way they do in a
/// real cluster: timestamps, IPs, container IDs, node, env values.
pub fn varied_pod(i: usize) -> Vec<u8> {
    let mut v = realistic_pod_value(i, &format!("ns-{}", i % 7));
    // A cheap deterministic pseudo-random hex string per pod.
    let hex = |seed: usize, len: usize| -> String {
        let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from_digit((x % 16) as u32, 16).unwrap_or('0')
            })
            .collect()
    };
    let ts = |s: usize| {
        format!(
            "2026-11-{:02}T{:02}:{:02}:{:02}Z",
            1 + s % 28,
            s % 24,
            (s / 7) % 60,
            (s / 3) % 60
        )
    };
    let ip = format!("10.244.{}.{}", (i / 250) % 250, i % 250 + 2);
    v["metadata"]["creationTimestamp"] = json!(ts(i * 13));
    v["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = json!(ts(i * 29));
    v["metadata"]["labels"]["pod-template-hash"] = json!(hex(i / 10 + 1, 10));
    v["status"]["podIP"] = json!(ip);
    v["status"]["podIPs"] = json!([{ "ip": ip }]);
    v["status"]["hostIP"] = json!(format!("172.18.{}.{}", i % 5, i % 200 + 3));
    v["status"]["startTime"] = json!(ts(i * 13 + 1));
    v["status"]["containerStatuses"][0]["containerID"] =
        json!(format!("containerd://{}", hex(i + 7, 64)));
    v["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] = json!(ts(i * 13 + 3));
    for c in v["status"]["conditions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        c["lastTransitionTime"] = json!(ts(i * 13 + 2));
    }
    serde_json::to_vec(&v).unwrap()
}
