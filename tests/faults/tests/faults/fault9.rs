#![allow(clippy::disallowed_names)] // the custom resource is called Foo

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kcache_envtest::proxy::FaultProxy;
use kcache_envtest::{AuditPolicy, ControlPlane};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rand::Rng;
use rand::rngs::StdRng;
use sample_controller::{
    FINALIZER, Foo, FooSpec, LocalOptions, Observed, crds, observe, start_local,
};

use crate::support::{Churn, DriverReport, Mix, churn, full, seeded};
use tokio_util::sync::CancellationToken;

/// The churn of Foos: each Foo's Deployment is `<foo>-dep`; an update
/// changes the replicas.
struct Foos(Api<Foo>);

impl Churn for Foos {
    async fn create(&self, name: &str, _: u64, rng: &mut StdRng) -> kube::Result<()> {
        let spec = FooSpec {
            deployment_name: format!("{name}-dep"),
            replicas: Some(rng.random_range(1..4)),
        };
        let foo = Foo::new(name, spec);
        self.0
            .create(&PostParams::default(), &foo)
            .await
            .map(|_| ())
    }
    async fn update(&self, name: &str, _: u64, rng: &mut StdRng) -> kube::Result<()> {
        let patch = serde_json::json!({ "spec": { "replicas": rng.random_range(1..6) } });
        self.0
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }
    async fn delete(&self, name: &str) -> kube::Result<()> {
        self.0
            .delete(name, &DeleteParams::default())
            .await
            .map(|_| ())
    }
}

/// Creates, updates (replicas) and deletes Foos `foo<n>`, seeded, with
/// pauses of up to 9 ms.
async fn drive(api: Api<Foo>, seed: u64, ops: u64) -> DriverReport {
    let mix = Mix {
        min_live: 10,
        create: 0.4,
    };
    let pace = Duration::from_millis(9);
    churn(
        &Foos(api),
        "foo",
        mix,
        seed,
        ops,
        pace,
        &CancellationToken::new(),
    )
    .await
}

/// What the sample controller guarantees once quiet: every live Foo has
/// exactly its Deployment (name from its spec, controlled by it, with
/// its replicas) and no other Deployment exists; every deleted Foo is
/// gone (its finalizer ran) and so is its Deployment.
async fn state(client: &Client, ns: &str, deleted: &BTreeSet<String>) -> Result<usize, String> {
    let Observed {
        foos,
        deployments: mut deps_by_name,
    } = observe(client, ns).await.map_err(|e| e.to_string())?;
    let mut bad = Vec::new();
    for f in &foos {
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
        Ok(foos.len())
    } else {
        bad.truncate(20);
        Err(bad.join("; "))
    }
}

/// One event of the apiserver's audit log (a write, when received or when
/// answered).
struct Audited {
    /// When it happened: received, or answered.
    at: String,
    answered: bool,
    verb: String,
    resource: String,
    subresource: String,
    name: String,
    code: i64,
    /// The metadata of the object the write answered with.
    meta: serde_json::Value,
    /// The finalizers the request body sets, if any.
    request_finalizers: Option<serde_json::Value>,
}

fn audit_events(log: &Path, ns: &str) -> Vec<Audited> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut events: Vec<Audited> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["objectRef"]["namespace"] == ns)
        .map(|e| {
            let str_of = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            let answered = e["stage"] == "ResponseComplete";
            Audited {
                at: str_of(if answered {
                    &e["stageTimestamp"]
                } else {
                    &e["requestReceivedTimestamp"]
                }),
                answered,
                verb: str_of(&e["verb"]),
                resource: str_of(&e["objectRef"]["resource"]),
                subresource: str_of(&e["objectRef"]["subresource"]),
                name: str_of(&e["objectRef"]["name"]),
                code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
                meta: e["responseObject"]["metadata"].clone(),
                request_finalizers: e["requestObject"]["metadata"].get("finalizers").cloned(),
            }
        })
        .collect();
    events.sort_by(|a, b| a.at.cmp(&b.at));
    events
}

fn has_finalizer(meta: &serde_json::Value) -> bool {
    meta["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// From the audit log: the Foos that vanished while they carried the
/// controller's finalizer. A finalizer holds an object: a delete sets its
/// deletionTimestamp and the object goes only when the last finalizer is
/// removed. A Foo whose finalizer was added (a write answered with it), is
/// gone now (not in `live`), and never had a deletionTimestamp in any
/// answer was deleted by the apiserver in spite of its finalizer. Each is
/// returned with the writes on it and its Deployment, in order.
fn finalizer_bypasses(log: &Path, ns: &str, live: &BTreeSet<String>) -> Vec<String> {
    let events = audit_events(log, ns);
    let foos: BTreeSet<&str> = events
        .iter()
        .filter(|e| e.resource == "foos")
        .map(|e| e.name.as_str())
        .collect();
    let mut out = Vec::new();
    for name in foos.into_iter().filter(|n| !live.contains(*n)) {
        let on_foo = || {
            events
                .iter()
                .filter(move |e| e.resource == "foos" && e.name == name && e.answered)
        };
        let finalized = on_foo().any(|e| e.code == 200 && has_finalizer(&e.meta));
        let deleting = on_foo().any(|e| !e.meta["deletionTimestamp"].is_null());
        if !finalized || deleting {
            continue;
        }
        let dep = format!("{name}-dep");
        let lines: Vec<String> = events
            .iter()
            .filter(|e| {
                (e.resource == "foos" && e.name == name)
                    || (e.resource == "deployments" && e.name == dep)
            })
            .map(|e| {
                let what = format!(
                    "{} {}{}",
                    e.verb,
                    e.resource,
                    if e.subresource.is_empty() {
                        String::new()
                    } else {
                        format!("/{}", e.subresource)
                    }
                );
                if e.answered {
                    format!(
                        "  {} answered {what}: {} (rv {}, finalizers {}){}",
                        e.at,
                        e.code,
                        e.meta["resourceVersion"],
                        e.meta["finalizers"],
                        e.request_finalizers
                            .as_ref()
                            .map(|f| format!(", the request sets finalizers {f}"))
                            .unwrap_or_default()
                    )
                } else {
                    format!("  {} received {what}", e.at)
                }
            })
            .collect();
        out.push(format!(
            "Foo {name} vanished with its finalizer on (never a deletionTimestamp):\n{}",
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
    let (seed, mut rng) = seeded("fault9::sample_controller_under_churn");
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
    let running = start_local(
        &client,
        &ns,
        LocalOptions {
            workers: 4,
            ..LocalOptions::default()
        },
    );
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
                // after a disconnection the informers may be in their
                // backoff: a cut bites only where a connection is open
                let open_since = Instant::now();
                while proxy.stats().open == 0 && open_since.elapsed() < Duration::from_secs(60) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let before = proxy.stats();
                proxy.cut_all();
                tokio::time::sleep(Duration::from_millis(200)).await;
                proxy.stats().cut > before.cut
            }
            "restart" => {
                cp.restart_apiserver().await.expect("restart");
                cp.pids().1 != before.1
            }
            _ => {
                proxy.unlisten(true);
                let since = Instant::now();
                while !proxy.stats().unlistened && since.elapsed() < Duration::from_secs(5) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
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
    let swept = running.context.orphans_deleted.load(Ordering::Relaxed);
    let audit = cp.audit_log_path().expect("audit log");
    let live_foos: BTreeSet<String> = Api::<Foo>::namespaced(direct.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("list Foos")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let bypasses = finalizer_bypasses(audit, &ns, &live_foos);
    for b in &bypasses {
        eprintln!("{b}");
    }
    eprintln!(
        "RESULT sample_controller_under_churn: faults injected {} ({}), driver ops ok {} \
         failed {}, live Foos {live} each with exactly its Deployment, deleted Foos {} \
         (Deployments gone), leaked 0, orphans swept {swept}, Foos that vanished with \
         their finalizer on {}, converged in {:.1}s",
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
    // the sweeper is a safety net: each of its deletions must be explained
    // by a Foo the apiserver deleted in spite of its finalizer
    assert!(
        swept <= bypasses.len() as u64,
        "the orphan sweeper deleted {swept} Deployments, but only {} Foos vanished with \
         their finalizer on: the controller leaked Deployments in another way \
         (audit log: {})",
        bypasses.len(),
        audit.display()
    );
    tokio::time::timeout(Duration::from_secs(60), running.stop())
        .await
        .expect("the controllers stopped within 60 s")
        .expect("the controllers ran without a failure");
}
