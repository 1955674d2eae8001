//! Peak memory of a reflector's first list of many Pods against the local
//! control plane (not a timed assertion: it prints figures). Ignored; run
//! with
//!
//! ```text
//! KCACHE_RSS_PODS=20000 cargo test --release -p kcache-reflector --test rss -- --ignored --nocapture list_peak_rss
//! ```
//!
//! The test loads realistic Pods (the corpus Pod of kcache-core's tests:
//! labels, annotations, an owner, two containers, status written by a
//! second field manager) into a fresh control plane, then runs one child
//! process per wire format (this test binary again, under
//! `/usr/bin/time -v` when it exists). Each child lists the Pods once at
//! resourceVersion "0", which the apiserver's watch cache serves as one
//! body whatever the page size, keeps every object in a store (as an
//! informer's cache would), and prints its peak RSS (`VmHWM`) before and
//! after the list.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kcache_core::{CachedObject, ObjectOrTombstone, ReflectorStore, StoreError};
use kcache_envtest::ControlPlane;
use kcache_reflector::{Reflector, WatchConfig, WireFormat};
use kube::api::{Api, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A store that keeps the listed objects and says when the list is in.
#[derive(Default)]
struct Keep {
    objects: Mutex<HashMap<String, CachedObject<Pod>>>,
    listed: tokio::sync::Notify,
}

impl ReflectorStore<Pod> for Keep {
    fn add(&self, obj: CachedObject<Pod>) -> Result<(), StoreError> {
        self.objects.lock().insert(obj.key().to_owned(), obj);
        Ok(())
    }
    fn update(&self, obj: CachedObject<Pod>) -> Result<(), StoreError> {
        self.add(obj)
    }
    fn delete(&self, obj: ObjectOrTombstone<Pod>) -> Result<(), StoreError> {
        self.objects.lock().remove(obj.key());
        Ok(())
    }
    fn replace(&self, items: Vec<CachedObject<Pod>>, _rv: String) -> Result<(), StoreError> {
        let mut o = self.objects.lock();
        o.clear();
        for i in items {
            o.insert(i.key().to_owned(), i);
        }
        drop(o);
        self.listed.notify_one();
        Ok(())
    }
    fn resync(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// `VmHWM` / `VmRSS` of this process, in KiB.
fn proc_status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The corpus Pod without what the server sets, and its status.
fn template() -> (Value, Value) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kcache-core/tests/data/protobuf/pod.json"
    );
    let mut pod: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let meta = pod["metadata"].as_object_mut().unwrap();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "finalizers",
        "generateName",
        "namespace",
        "generation",
    ] {
        meta.remove(k);
    }
    let status = json_take(&mut pod, "status");
    (pod, serde_json::json!({ "status": status }))
}

fn json_take(v: &mut Value, k: &str) -> Value {
    v.as_object_mut().unwrap().remove(k).unwrap_or(Value::Null)
}

async fn load(cp: &ControlPlane, ns: &str, n: usize) {
    let api: Api<Pod> = Api::namespaced(cp.client().unwrap(), ns);
    let (pod, status) = template();
    let t = Instant::now();
    let create = PostParams {
        field_manager: Some("kube-controller-manager".into()),
        ..Default::default()
    };
    let kubelet = PatchParams {
        field_manager: Some("kubelet".into()),
        ..Default::default()
    };
    futures::stream::iter(0..n)
        .map(|i| {
            let (api, create, kubelet) = (&api, &create, &kubelet);
            let mut pod = pod.clone();
            let status = status.clone();
            async move {
                let name = format!("web-{i:05}");
                pod["metadata"]["name"] = name.clone().into();
                let pod: Pod = serde_json::from_value(pod).unwrap();
                api.create(create, &pod).await.unwrap();
                api.patch_status(&name, kubelet, &Patch::Merge(status))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<()>()
        .await;
    eprintln!("loaded {n} Pods in {:.0} s", t.elapsed().as_secs_f64());
}

/// The child: one list at resourceVersion "0", then the figures.
async fn child(format: &str) {
    let kubeconfig = std::env::var("KCACHE_RSS_KUBECONFIG").unwrap();
    let ns = std::env::var("KCACHE_RSS_NS").unwrap();
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let store = Arc::new(Keep::default());
    let wire = if format == "json" {
        WireFormat::Json
    } else {
        WireFormat::Auto
    };
    let reflector = Reflector::<Pod>::builder(client, store.clone())
        .config(WatchConfig {
            namespace: Some(ns),
            use_watch_list: false,
            wire_format: wire,
            ..WatchConfig::default()
        })
        .build();
    let before = proc_status("VmHWM:");
    let t = Instant::now();
    let stop = CancellationToken::new();
    let listed = store.listed.notified();
    tokio::select! {
        _ = reflector.run(stop.clone()) => {}
        _ = listed => {}
    }
    let secs = t.elapsed().as_secs_f64();
    let items = store.objects.lock().len();
    let held: usize = store.objects.lock().values().map(|o| o.heap_size()).sum();
    let format_seen = store.objects.lock().values().next().map(|o| o.format());
    println!(
        "RSS {format}: {items} Pods ({format_seen:?}) listed in {secs:.1} s; VmHWM before {} MiB, after {} MiB; VmRSS now {} MiB; objects hold {} MiB",
        before / 1024,
        proc_status("VmHWM:") / 1024,
        proc_status("VmRSS:") / 1024,
        held >> 20
    );
}

/// Runs a child per wire format and prints its figures (see the module
/// docs). Set `KCACHE_RSS_PODS` (default 20000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "loads thousands of Pods into a control plane; prints figures"]
async fn list_peak_rss() {
    if let Ok(format) = std::env::var("KCACHE_RSS_CHILD") {
        child(&format).await;
        return;
    }
    let n: usize = std::env::var("KCACHE_RSS_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let cp = ControlPlane::start().await.unwrap();
    let ns = cp.create_namespace("rss").await.unwrap();
    load(&cp, &ns, n).await;
    // let the watch cache settle
    tokio::time::sleep(Duration::from_secs(2)).await;
    let exe = std::env::current_exe().unwrap();
    let time = std::path::Path::new("/usr/bin/time");
    for format in ["json", "protobuf", "json", "protobuf"] {
        let mut cmd = if time.exists() {
            let mut c = Command::new(time);
            c.arg("-v").arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd
            .args(["--exact", "list_peak_rss", "--ignored", "--nocapture"])
            .env("KCACHE_RSS_CHILD", format)
            .env("KCACHE_RSS_KUBECONFIG", cp.kubeconfig_path())
            .env("KCACHE_RSS_NS", &ns)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        for l in stdout.lines().filter(|l| l.starts_with("RSS ")) {
            println!("{l}");
        }
        for l in stderr
            .lines()
            .filter(|l| l.contains("Maximum resident") || l.contains("Elapsed (wall"))
        {
            println!("  {format}: {}", l.trim());
        }
        assert!(out.status.success(), "{stdout}\n{stderr}");
    }
}
