//! What the sample-controller tests share.
#![allow(dead_code)] // each test file uses a part

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use kcache_envtest::ControlPlane;
use kube::Api;
use kube::api::{Patch, PatchParams};
use parking_lot::Mutex;
use sample_controller::{Foo, FooSpec};

/// Installs the sample's CRDs on `cp`.
pub async fn install_sample_crds(cp: &ControlPlane) {
    let crds: Vec<_> = sample_controller::crds()
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    cp.install_crds(&crds).await.expect("CRD");
}

/// The verdict of a convergence check that collected what is still off in
/// `bad`: `Ok` when nothing is, else how many are and the first three.
pub fn converged(bad: Vec<String>) -> Result<(), String> {
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} not converged, e.g. {:?}",
            bad.len(),
            &bad[..bad.len().min(3)]
        ))
    }
}

/// A Foo asking for `replicas` replicas of Deployment `<name>-deploy`.
pub fn foo(name: &str, replicas: i32) -> Foo {
    Foo::new(
        name,
        FooSpec {
            deployment_name: format!("{name}-deploy"),
            replicas: Some(replicas),
        },
    )
}

/// Polls `f` every 100 ms until it is `Ok`; panics with its last error
/// after `timeout`.
pub async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<(), String>) {
    let started = Instant::now();
    loop {
        match f() {
            Ok(()) => return,
            Err(why) if started.elapsed() > timeout => {
                panic!("{what}: not after {timeout:?}: {why}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Which replicas reconcile which key right now, and every time a replica
/// started a key another one was still reconciling.
#[derive(Default)]
pub struct Reconciling {
    /// key -> replicas reconciling it now
    active: Mutex<HashMap<String, Vec<String>>>,
    /// `<key>: <id> started while <other> reconciles it`
    pub violations: Mutex<Vec<String>>,
}

impl Reconciling {
    /// Replica `id` starts reconciling `key`.
    pub fn begin(&self, id: &str, key: &str) {
        let mut active = self.active.lock();
        let v = active.entry(key.to_owned()).or_default();
        if let Some(other) = v.iter().find(|r| *r != id) {
            self.violations
                .lock()
                .push(format!("{key}: {id} started while {other} reconciles it"));
        }
        v.push(id.to_owned());
    }

    /// Replica `id` is done with `key`.
    pub fn end(&self, id: &str, key: &str) {
        if let Some(v) = self.active.lock().get_mut(key)
            && let Some(i) = v.iter().position(|r| r == id)
        {
            v.remove(i);
        }
    }
}

/// Sends `requests` `width` at a time; panics naming `what` if one fails.
pub async fn all_succeed<T, E: std::fmt::Debug>(
    what: &str,
    width: usize,
    requests: impl IntoIterator<Item = impl Future<Output = Result<T, E>>>,
) {
    futures::stream::iter(requests)
        .buffer_unordered(width)
        .try_collect::<Vec<_>>()
        .await
        .unwrap_or_else(|e| panic!("{what}: {e:?}"));
}

/// Sets `spec.replicas` of Foo `name` through `api` (a merge patch).
pub async fn patch_replicas(api: &Api<Foo>, name: &str, replicas: i32) -> kube::Result<Foo> {
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}
