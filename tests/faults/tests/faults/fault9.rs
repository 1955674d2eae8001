#![allow(clippy::disallowed_names)] // the custom resource is called Foo

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kcache_controller::{Config, ControllerHandle};
use kcache_envtest::proxy::FaultProxy;
use kcache_envtest::{AuditPolicy, ControlPlane};
use kcache_informer::SharedInformerFactory;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sample_controller::simulator::{self, build_simulator};
use sample_controller::{FINALIZER, Foo, FooSpec, build_controller, crds, reconcile};

use crate::support::{full, seed};

struct Running {
    factory: SharedInformerFactory,
    handles: Vec<ControllerHandle>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Deployments the controller's orphan sweeper deleted.
    orphans_deleted: Arc<AtomicU64>,
}

fn start(client: &Client, ns: &str) -> Running {
    let factory = SharedInformerFactory::builder(client.clone())
        .namespace(ns)
        .build();
    let (controller, ctx) =
        build_controller(&factory, client.clone(), Config::default().workers(4));
    let (sim, sim_ctx) = build_simulator(&factory, client.clone());
    let orphans_deleted = ctx.orphans_deleted.clone();
    let handles = vec![controller.handle(), sim.handle()];
    let tasks = vec![
        tokio::spawn(async move { controller.run(reconcile, ctx).await.expect("controller") }),
        tokio::spawn(async move {
            sim.run(simulator::reconcile, sim_ctx)
                .await
                .expect("simulator")
        }),
    ];
    Running {
        factory,
        handles,
        tasks,
        orphans_deleted,
    }
}

#[derive(Default, Debug)]
struct FooDriverReport {
    ok: u64,
    failed: u64,
    /// Foos whose delete was accepted.
    deleted: BTreeSet<String>,
}

/// Creates, updates (replicas) and deletes Foos, seeded; names never
/// reused; each Foo's Deployment is `<foo>-dep`.
async fn drive(api: Api<Foo>, seed: u64, ops: u64) -> FooDriverReport {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut live: Vec<String> = Vec::new();
    let mut next = 0u64;
    let mut r = FooDriverReport::default();
    for _ in 0..ops {
        let roll: f64 = rng.random();
        let res = if live.len() < 10 || roll < 0.4 {
            let name = format!("foo{next}");
            next += 1;
            let foo = Foo::new(
                &name,
                FooSpec {
                    deployment_name: format!("{name}-dep"),
                    replicas: Some(rng.random_range(1..4)),
                },
            );
            let res = api.create(&PostParams::default(), &foo).await;
            if res.is_ok() {
                live.push(name);
            }
            res.map(|_| ())
        } else {
            let idx = rng.random_range(0..live.len());
            if roll < 0.75 {
                let patch = serde_json::json!({ "spec": { "replicas": rng.random_range(1..6) } });
                api.patch(&live[idx], &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            } else {
                let name = live.swap_remove(idx);
                let res = api.delete(&name, &DeleteParams::default()).await;
                if res.is_ok() {
                    r.deleted.insert(name);
                }
                res.map(|_| ())
            }
        };
        match res {
            Ok(()) => r.ok += 1,
            Err(_) => r.failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..10))).await;
    }
    r
}

/// What the sample controller guarantees once quiet: every live Foo has
/// exactly its Deployment (name from its spec, controlled by it, with
/// its replicas) and no other Deployment exists; every deleted Foo is
/// gone (its finalizer ran) and so is its Deployment.
async fn state(client: &Client, ns: &str, deleted: &BTreeSet<String>) -> Result<usize, String> {
    let foos: Api<Foo> = Api::namespaced(client.clone(), ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let foo_list = foos
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let dep_list = deps
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut deps_by_name: BTreeMap<String, &Deployment> =
        dep_list.items.iter().map(|d| (d.name_any(), d)).collect();
    let mut bad = Vec::new();
    for f in &foo_list.items {
        let name = f.name_any();
        if deleted.contains(&name) || f.metadata.deletion_timestamp.is_some() {
            bad.push(format!(
                "{name}: deleted but still there (finalizer not done)"
            ));
            continue;
        }
        let Some(d) = deps_by_name.remove(&f.spec.deployment_name) else {
            bad.push(format!("{name}: no deployment"));
            continue;
        };
        let owner = d
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone());
        if owner.as_deref() != f.metadata.uid.as_deref() {
            bad.push(format!("{name}: deployment not controlled by it"));
        }
        let want = f.spec.replicas.unwrap_or(1);
        if d.spec.replicas != Some(want) {
            bad.push(format!("{name}: replicas != {want}"));
        }
    }
    for (name, _) in deps_by_name {
        bad.push(format!("deployment {name} has no live Foo (leaked)"));
    }
    if bad.is_empty() {
        Ok(foo_list.items.len())
    } else {
        bad.truncate(20);
        Err(bad.join("; "))
    }
}

/// One write of the apiserver's audit log.
struct Write {
    received: String,
    completed: String,
    verb: String,
    resource: String,
    name: String,
    code: i64,
    /// resourceVersion, finalizers and deletionTimestamp of the object the
    /// write answered with.
    response: String,
    /// The request body's finalizers, if it set some.
    request_finalizers: Option<String>,
    /// The object the answer carried.
    response_object: serde_json::Value,
}

fn audit_writes(log: &Path, ns: &str) -> Vec<Write> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut writes: Vec<Write> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["objectRef"]["namespace"] == ns)
        .map(|e| {
            let str_of = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            let obj = e["responseObject"].clone();
            let meta = &obj["metadata"];
            Write {
                received: str_of(&e["requestReceivedTimestamp"]),
                completed: str_of(&e["stageTimestamp"]),
                verb: str_of(&e["verb"]),
                resource: str_of(&e["objectRef"]["resource"]),
                name: str_of(&e["objectRef"]["name"]),
                code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
                response: format!(
                    "rv {} finalizers {} deletionTimestamp {}",
                    meta["resourceVersion"], meta["finalizers"], meta["deletionTimestamp"]
                ),
                request_finalizers: e["requestObject"]["metadata"]
                    .get("finalizers")
                    .map(|f| f.to_string()),
                response_object: obj,
            }
        })
        .collect();
    writes.sort_by(|a, b| a.received.cmp(&b.received));
    writes
}

/// From the audit log: the Foos that the apiserver deleted while they
/// carried the controller's finalizer and had no deletionTimestamp (a
/// finalizer must hold an object: such a delete skipped it), each with
/// the writes on that Foo and its Deployment, in the order the apiserver
/// received them.
fn finalizer_bypasses(log: &Path, ns: &str) -> Vec<String> {
    let writes = audit_writes(log, ns);
    let mut out = Vec::new();
    for d in writes.iter().filter(|w| {
        w.resource == "foos"
            && w.verb == "delete"
            && w.code == 200
            && w.response_object["metadata"]["deletionTimestamp"].is_null()
            && w.response_object["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
    }) {
        let dep = format!("{}-dep", d.name);
        let lines: Vec<String> = writes
            .iter()
            .filter(|w| {
                (w.resource == "foos" && w.name == d.name)
                    || (w.resource == "deployments" && w.name == dep)
            })
            .map(|w| {
                format!(
                    "  received {} completed {} {} {} {} -> {} ({}){}",
                    w.received,
                    w.completed,
                    w.verb,
                    w.resource,
                    w.name,
                    w.code,
                    w.response,
                    w.request_finalizers
                        .as_ref()
                        .map(|f| format!(", request sets finalizers {f}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        out.push(format!(
            "Foo {} deleted with its finalizer and no deletionTimestamp:\n{}",
            d.name,
            lines.join("\n")
        ));
    }
    out
}

/// Fault 9: the sample controller (and the Deployment status simulator)
/// behind the proxy while a driver creates, updates and deletes Foos
/// (200 operations; 1,000 in the full form) and faults 1-3 happen:
/// connection resets, an apiserver restart, and a disconnection
/// (connections refused) during which the apiserver restarts and etcd is
/// compacted past the controller's resourceVersions (410 Gone, relist).
/// Then: every live Foo has exactly its Deployment, no Deployment is left
/// without its Foo, every deleted Foo is gone. The control plane has no
/// garbage collector: Deployments are deleted by the controller's
/// finalizer, not by ownerReferences. The RESULT line reports how many
/// Deployments the controller's orphan sweeper (its safety net for a Foo
/// gone without its cleanup) deleted, and, from the apiserver's audit log,
/// how many Foos were deleted while they carried the finalizer (each
/// printed with the writes on it and its Deployment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_controller_under_churn() {
    let seed = seed("fault9::sample_controller_under_churn");
    let mut rng = StdRng::seed_from_u64(seed);
    let ops = if full() { 1000 } else { 200 };
    let cp = ControlPlane::builder()
        .audit_log(AuditPolicy::Writes)
        .start()
        .await
        .expect("control plane");
    let crds: Vec<_> = crds().into_iter().map(|(_, c)| c).collect();
    cp.install_crds(&crds).await.expect("CRD");
    let ns = cp
        .create_namespace("fault-sample")
        .await
        .expect("namespace");
    let proxy = FaultProxy::for_url(&cp.server_url()).await.expect("proxy");
    let client = proxy.client(cp.config()).expect("client");
    let running = start(&client, &ns);
    let direct = cp.client().expect("client");
    let driver = tokio::spawn(drive(Api::namespaced(direct.clone(), &ns), seed, ops));

    // faults 1-3, seeded times, while the driver runs; each counted if the
    // injector shows it bit
    let mut injected = Vec::new();
    let plan = ["cut", "cut", "restart", "compaction", "cut"];
    for what in plan {
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..1500))).await;
        let before = (proxy.stats(), cp.pids().1);
        let bit = match what {
            "cut" => {
                proxy.cut_all();
                tokio::time::sleep(Duration::from_millis(200)).await;
                proxy.stats().cut > before.0.cut
            }
            "restart" => {
                cp.restart_apiserver().await.expect("restart");
                cp.pids().1 != before.1
            }
            _ => {
                proxy.unlisten(true);
                proxy.cut_all();
                tokio::time::sleep(Duration::from_millis(rng.random_range(1000..3000))).await;
                cp.restart_apiserver().await.expect("restart");
                let rev = cp.compact_etcd().await.expect("compact");
                eprintln!("compacted etcd at revision {rev} while disconnected");
                proxy.unlisten(false);
                rev > 0 && cp.pids().1 != before.1
            }
        };
        if bit {
            injected.push(what);
        }
    }
    let done = driver.await.expect("driver");
    eprintln!(
        "sample_controller_under_churn: driver ops ok {} failed {}, {} Foos deleted; \
         faults {injected:?}",
        done.ok,
        done.failed,
        done.deleted.len()
    );
    let started = Instant::now();
    let within = Duration::from_secs(180);
    let live = loop {
        match state(&direct, &ns, &done.deleted).await {
            Ok(n) => break n,
            Err(why) if started.elapsed() > within => {
                panic!("the sample controller did not converge within {within:?}: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    let converged = started.elapsed();
    let swept = running.orphans_deleted.load(Ordering::Relaxed);
    let audit = cp.audit_log_path().expect("audit log");
    let bypasses = finalizer_bypasses(audit, &ns);
    for b in &bypasses {
        eprintln!("{b}");
    }
    eprintln!(
        "RESULT sample_controller_under_churn: faults injected {} ({}), driver ops ok {} \
         failed {}, live Foos {live} each with exactly its Deployment, deleted Foos {} \
         (Deployments gone), leaked 0, orphans swept {swept}, Foos deleted with the \
         finalizer on {}, converged in {:.1}s",
        injected.len(),
        injected.join(", "),
        done.ok,
        done.failed,
        done.deleted.len(),
        bypasses.len(),
        converged.as_secs_f64()
    );
    assert_eq!(
        injected.len(),
        plan.len(),
        "every fault must bite: {injected:?} of {plan:?}"
    );
    for h in &running.handles {
        h.stop();
    }
    for t in running.tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("the controller stopped")
            .expect("controller task");
    }
    running.factory.shutdown().await;
}
