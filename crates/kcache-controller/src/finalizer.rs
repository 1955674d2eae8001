//! Finalizers: run cleanup before an object goes away (controller-runtime's
//! `controllerutil` finalizer helpers, kube-runtime's `finalizer`).
//!
//! [`finalizer`] wraps a reconcile:
//!
//! | object | finalizer | what happens |
//! |---|---|---|
//! | not being deleted | missing | the finalizer is added, then `Apply` runs |
//! | not being deleted | present | `Apply` runs |
//! | being deleted | present | `Cleanup` runs; on success the finalizer is removed |
//! | being deleted | missing | nothing (someone else's finalizer holds it) |
//!
//! Finalizers are written with a JSON merge patch that carries the
//! object's `resourceVersion`: the apiserver applies it only to that
//! version and answers 409 Conflict otherwise, so a concurrent change of the
//! finalizer list is never overwritten. A conflict is returned as an error:
//! the controller retries with the newer object from its cache.

use std::fmt;
use std::future::Future;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::action::Action;

/// What the wrapped reconcile is asked to do.
#[derive(Debug, Clone)]
pub enum FinalizerEvent<K> {
    /// The object is live: make the world match it.
    Apply(K),
    /// The object is being deleted: clean up what it owns outside of
    /// Kubernetes' garbage collection. The finalizer is removed when this
    /// succeeds.
    Cleanup(K),
}

/// Why [`finalizer`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FinalizerError<E: fmt::Debug + fmt::Display> {
    /// The apply reconcile failed.
    #[error("apply failed: {0}")]
    ApplyFailed(E),
    /// The cleanup failed (the finalizer stays).
    #[error("cleanup failed: {0}")]
    CleanupFailed(E),
    /// Adding the finalizer failed (a conflict included).
    #[error("adding finalizer failed: {0}")]
    AddFinalizer(#[source] kube::Error),
    /// Removing the finalizer failed (a conflict included).
    #[error("removing finalizer failed: {0}")]
    RemoveFinalizer(#[source] kube::Error),
    /// The object has no name or resourceVersion.
    #[error("the object has no name or resourceVersion")]
    UnnamedObject,
    /// The finalizer name is not a valid qualified name.
    #[error("invalid finalizer name {0:?} (expected a qualified name such as example.com/cleanup)")]
    InvalidFinalizerName(String),
}

/// Whether `obj` carries `finalizer_name`.
pub fn has_finalizer<K: Resource>(obj: &K, finalizer_name: &str) -> bool {
    obj.finalizers().iter().any(|f| f == finalizer_name)
}

async fn patch_finalizers<K>(
    api: &Api<K>,
    name: &str,
    resource_version: &str,
    finalizers: &[String],
) -> Result<K, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug,
{
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": resource_version,
            "finalizers": finalizers,
        }
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

fn valid_finalizer_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 316
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '/' || c == '_')
        && name.matches('/').count() <= 1
}

/// Runs `reconcile` with finalizer handling (see the [module docs](self)).
///
/// `api` must be an `Api` for the object's namespace (or cluster scope).
///
/// ```no_run
/// use kcache_controller::Action;
/// use kcache_controller::finalizer::{finalizer, FinalizerEvent};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::Api;
///
/// # async fn run(api: Api<ConfigMap>, cm: ConfigMap) -> Result<(), Box<dyn std::error::Error>> {
/// let action = finalizer(&api, "example.com/cleanup", cm, |event| async move {
///     match event {
///         FinalizerEvent::Apply(cm) => { /* create what it needs */ }
///         FinalizerEvent::Cleanup(cm) => { /* delete what it created */ }
///     }
///     Ok::<_, std::io::Error>(Action::await_change())
/// })
/// .await?;
/// # let _ = action;
/// # Ok(())
/// # }
/// ```
pub async fn finalizer<K, F, Fut, E>(
    api: &Api<K>,
    finalizer_name: &str,
    obj: K,
    reconcile: F,
) -> Result<Action, FinalizerError<E>>
where
    K: Resource + Clone + DeserializeOwned + Serialize + fmt::Debug,
    F: FnOnce(FinalizerEvent<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
    E: fmt::Debug + fmt::Display,
{
    if !valid_finalizer_name(finalizer_name) {
        return Err(FinalizerError::InvalidFinalizerName(
            finalizer_name.to_owned(),
        ));
    }
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(FinalizerError::UnnamedObject)?;
    let rv = obj
        .meta()
        .resource_version
        .clone()
        .ok_or(FinalizerError::UnnamedObject)?;
    let present = has_finalizer(&obj, finalizer_name);
    let deleting = obj.meta().deletion_timestamp.is_some();
    match (deleting, present) {
        (false, true) => reconcile(FinalizerEvent::Apply(obj))
            .await
            .map_err(FinalizerError::ApplyFailed),
        (false, false) => {
            let mut finalizers = obj.finalizers().to_vec();
            finalizers.push(finalizer_name.to_owned());
            let updated = patch_finalizers(api, &name, &rv, &finalizers)
                .await
                .map_err(FinalizerError::AddFinalizer)?;
            tracing::debug!(object = %name, finalizer = finalizer_name, "added finalizer");
            reconcile(FinalizerEvent::Apply(updated))
                .await
                .map_err(FinalizerError::ApplyFailed)
        }
        (true, true) => {
            let finalizers: Vec<String> = obj
                .finalizers()
                .iter()
                .filter(|f| *f != finalizer_name)
                .cloned()
                .collect();
            let action = reconcile(FinalizerEvent::Cleanup(obj))
                .await
                .map_err(FinalizerError::CleanupFailed)?;
            match patch_finalizers(api, &name, &rv, &finalizers).await {
                Ok(_) => {}
                // Already gone: nothing left to hold.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(FinalizerError::RemoveFinalizer(e)),
            }
            tracing::debug!(object = %name, finalizer = finalizer_name, "removed finalizer");
            Ok(action)
        }
        (true, false) => Ok(Action::await_change()),
    }
}

/// Removes `finalizer_name` from `obj`, if it carries it: what a controller
/// does when it stops managing an object (it is no longer selected, its
/// owner was unset) so that the object can be deleted without it. The
/// patch carries `obj`'s resourceVersion: a conflict (409) means the
/// object changed since it was read; retry with the newer object. Returns
/// the updated object, or `None` when there was nothing to remove or the
/// object is already gone.
///
/// ```no_run
/// use kcache_controller::finalizer;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::Api;
///
/// # async fn run(api: Api<ConfigMap>, cm: ConfigMap) -> Result<(), Box<dyn std::error::Error>> {
/// // this ConfigMap is no longer ours: let it go
/// finalizer::remove(&api, &cm, "example.com/cleanup").await?;
/// # Ok(())
/// # }
/// ```
pub async fn remove<K>(
    api: &Api<K>,
    obj: &K,
    finalizer_name: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + fmt::Debug,
{
    if !has_finalizer(obj, finalizer_name) {
        return Ok(None);
    }
    let (Some(name), Some(rv)) = (&obj.meta().name, &obj.meta().resource_version) else {
        return Ok(None);
    };
    let finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer_name)
        .cloned()
        .collect();
    match patch_finalizers(api, name, rv, &finalizers).await {
        Ok(updated) => {
            tracing::debug!(object = %name, finalizer = finalizer_name, "removed finalizer");
            Ok(Some(updated))
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Adds `finalizer_name` to `obj` if it does not carry it yet (with `obj`'s
/// resourceVersion as precondition, like [`remove`]). Returns the updated
/// object, or `None` when it was already there.
pub async fn add<K>(api: &Api<K>, obj: &K, finalizer_name: &str) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + fmt::Debug,
{
    if has_finalizer(obj, finalizer_name) {
        return Ok(None);
    }
    let (Some(name), Some(rv)) = (&obj.meta().name, &obj.meta().resource_version) else {
        return Ok(None);
    };
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(finalizer_name.to_owned());
    patch_finalizers(api, name, rv, &finalizers).await.map(Some)
}
