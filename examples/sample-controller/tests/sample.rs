//! The sample controller against the local control plane: convergence of
//! 200 Foos, replicas updates, deletion through the finalizer, and the
//! warning for a Deployment name taken by someone else.

// The custom resource of k8s.io/sample-controller is called Foo.
#![allow(clippy::disallowed_names)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use kcache_envtest::ControlPlane;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use sample_controller::{Foo, FooSpec, LocalOptions, Running, observe, start_local};

async fn setup(prefix: &str) -> (Client, String) {
    let cp = ControlPlane::shared().await.expect("control plane");
    common::install_sample_crds(cp).await;
    let ns = cp.create_namespace(prefix).await.expect("namespace");
    (cp.client().expect("client"), ns)
}

fn start(client: &Client, ns: &str, workers: usize) -> Running {
    let options = LocalOptions {
        workers,
        ..LocalOptions::default()
    };
    start_local(client, ns, options)
}

fn foo(name: &str, deployment: &str, replicas: i32) -> Foo {
    Foo::new(
        name,
        FooSpec {
            deployment_name: deployment.to_owned(),
            replicas: Some(replicas),
        },
    )
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    loop {
        match check().await {
            Ok(()) => return,
            Err(why) if started.elapsed() > timeout => {
                panic!("{what}: not after {timeout:?}: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn converged(client: &Client, ns: &str, want: &BTreeMap<String, i32>) -> Result<(), String> {
    let now = observe(client, ns).await.map_err(|e| e.to_string())?;
    let mut bad = Vec::new();
    for (name, replicas) in want {
        let Some(f) = now.foos.iter().find(|f| &f.name_any() == name) else {
            bad.push(format!("{name}: no foo"));
            continue;
        };
        let dep_name = &f.spec.deployment_name;
        match now.deployments.get(dep_name) {
            None => bad.push(format!("{name}: no deployment")),
            Some(d) => {
                if d.spec.replicas != Some(*replicas) {
                    bad.push(format!("{name}: deployment replicas {:?}", d.spec.replicas));
                }
                let owner = d.metadata.owner_references.clone().unwrap_or_default();
                if !owner
                    .iter()
                    .any(|o| o.controller == Some(true) && Some(&o.uid) == f.metadata.uid.as_ref())
                {
                    bad.push(format!("{name}: deployment not controlled by its foo"));
                }
            }
        }
        if f.status.as_ref().map(|s| s.available_replicas) != Some(*replicas) {
            bad.push(format!("{name}: status {:?}", f.status));
        }
        if !f
            .finalizers()
            .iter()
            .any(|x| x == sample_controller::FINALIZER)
        {
            bad.push(format!("{name}: no finalizer"));
        }
    }
    common::converged(bad)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_foos_converge() {
    let (client, ns) = setup("foos200").await;
    let running = start(&client, &ns, 4);
    let foos: Api<Foo> = Api::namespaced(client.clone(), &ns);
    let want: BTreeMap<String, i32> = (0..200)
        .map(|i| (format!("foo-{i:03}"), 1 + i % 3))
        .collect();
    let started = Instant::now();
    futures::stream::iter(want.iter())
        .map(|(name, replicas)| {
            let foos = foos.clone();
            let f = foo(name, &format!("{name}-deploy"), *replicas);
            async move { foos.create(&PostParams::default(), &f).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("create foos");
    eventually("200 foos converge", Duration::from_secs(90), || {
        converged(&client, &ns, &want)
    })
    .await;
    eprintln!("200 foos converged in {:?}", started.elapsed());
    running.stop().await.expect("the controllers stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_update_propagates_and_delete_removes_the_deployment() {
    let (client, ns) = setup("foo-update").await;
    let running = start(&client, &ns, 2);
    let foos: Api<Foo> = Api::namespaced(client.clone(), &ns);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    for (name, r) in [("a", 1), ("b", 2)] {
        foos.create(
            &PostParams::default(),
            &foo(name, &format!("{name}-deploy"), r),
        )
        .await
        .unwrap();
    }
    let mut want: BTreeMap<String, i32> = [("a".to_owned(), 1), ("b".to_owned(), 2)].into();
    eventually("created", Duration::from_secs(30), || {
        converged(&client, &ns, &want)
    })
    .await;

    // spec.replicas update propagates to the Deployment and back to the status
    let patch = serde_json::json!({"spec": {"replicas": 5}});
    foos.patch("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    want.insert("a".into(), 5);
    eventually("replicas updated", Duration::from_secs(30), || {
        converged(&client, &ns, &want)
    })
    .await;

    // deleting a Foo deletes its Deployment (finalizer), then the Foo goes
    foos.delete("b", &DeleteParams::default()).await.unwrap();
    eventually(
        "deployment and foo deleted",
        Duration::from_secs(30),
        || {
            let (foos, deps) = (foos.clone(), deps.clone());
            async move {
                let d = deps.get_opt("b-deploy").await.map_err(|e| e.to_string())?;
                let f = foos.get_opt("b").await.map_err(|e| e.to_string())?;
                match (d, f) {
                    (None, None) => Ok(()),
                    (d, f) => Err(format!(
                        "deployment present: {}, foo present: {}",
                        d.is_some(),
                        f.is_some()
                    )),
                }
            }
        },
    )
    .await;
    // the other one is untouched
    assert!(deps.get_opt("a-deploy").await.unwrap().is_some());
    running.stop().await.expect("the controllers stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_it_does_not_own_gets_a_warning_event() {
    let (client, ns) = setup("foo-conflict").await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    // someone else's Deployment, same name
    let mut other = sample_controller::controller::new_deployment(&foo("x", "taken", 1));
    other.metadata.owner_references = None;
    deps.create(&PostParams::default(), &other).await.unwrap();
    let running = start(&client, &ns, 1);
    let foos: Api<Foo> = Api::namespaced(client.clone(), &ns);
    foos.create(&PostParams::default(), &foo("x", "taken", 3))
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    eventually("warning event", Duration::from_secs(30), || {
        let events = events.clone();
        async move {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let found = list.items.iter().any(|e| {
                e.reason.as_deref() == Some("ErrResourceExists")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("x")
                    && e.note.as_deref().is_some_and(|n| {
                        n.contains("\"taken\" already exists and is not managed by Foo")
                    })
            });
            if found {
                Ok(())
            } else {
                Err(format!("{} events, none matching", list.items.len()))
            }
        }
    })
    .await;
    // the stranger's deployment is left alone
    let d = deps.get("taken").await.unwrap();
    assert_eq!(d.spec.replicas, Some(1));
    assert!(d.metadata.owner_references.is_none());
    running.stop().await.expect("the controllers stopped");
}
