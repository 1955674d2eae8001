//! The reconciler: a Greeting's ConfigMap, its status, its events, and
//! the finalizer that deletes the ConfigMap first when the Greeting goes.

// ANCHOR: imports
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kcache::controller::finalizer::FinalizerError;
use kcache::prelude::*;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, Resource, ResourceExt};

use crate::crd::Greeting;
// ANCHOR_END: imports

/// The operator's name: its field manager, its events' reporting
/// controller, its metrics label.
pub const NAME: &str = "hello-operator";

/// Held by every Greeting this operator manages, until its ConfigMap is
/// deleted.
pub const FINALIZER: &str = "demo.kcache.dev/cleanup";

/// `"true"` on a Greeting: the operator lets go of it (removes its
/// finalizer and no longer touches it or its ConfigMap).
pub const UNMANAGED: &str = "demo.kcache.dev/unmanaged";

/// The ConfigMap key holding the message.
pub const MESSAGE_KEY: &str = "message";

// ANCHOR: context
/// What every reconcile shares.
pub struct Context {
    /// The client for writes (fenced by the lease under leader election:
    /// a replica that lost it cannot write).
    pub client: Client,
    /// The ConfigMaps cache: the informer the controller's `owns` watches.
    pub config_maps: SharedIndexInformer<ConfigMap>,
    /// Publishes events about Greetings.
    pub recorder: Recorder,
}
// ANCHOR_END: context

/// What a reconcile can fail with (logged, counted and retried with
/// backoff).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An API request failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A cached ConfigMap could not be decoded.
    #[error(transparent)]
    Decode(#[from] kcache::core::DecodeError),
    /// The ConfigMap's name is taken by one this Greeting does not control.
    #[error("ConfigMap {0:?} exists and is not controlled by this Greeting: rename or delete it")]
    NameTaken(String),
    /// Adding or removing the finalizer failed, or the wrapped apply or
    /// cleanup did.
    #[error(transparent)]
    Finalizer(Box<FinalizerError<Error>>),
}

/// The name of a Greeting's ConfigMap.
pub fn config_map_name(greeting: &Greeting) -> String {
    format!("{}-greeting", greeting.name_any())
}

/// The ConfigMap a Greeting asks for, controlled by it (an ownerReference
/// with `controller: true`: what `Controller::owns` maps back to the
/// Greeting, and what the garbage collector follows).
pub fn desired_config_map(greeting: &Greeting) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(greeting)),
            namespace: greeting.namespace(),
            owner_references: greeting.controller_owner_ref(&()).map(|r| vec![r]),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                NAME.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            MESSAGE_KEY.to_owned(),
            greeting.spec.message(),
        )])),
        ..ConfigMap::default()
    }
}

// ANCHOR: reconcile
/// Reconciles one Greeting.
pub async fn reconcile(req: Request<Greeting>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(greeting) = req.object else {
        // Deleted: the finalizer already removed its ConfigMap.
        return Ok(Action::await_change());
    };
    let ns = req.namespace.clone().unwrap_or_default();
    let greetings: Api<Greeting> = Api::namespaced(ctx.client.clone(), &ns);
    if greeting.annotations().get(UNMANAGED).map(String::as_str) == Some("true") {
        return unmanage(&greetings, &greeting, &ctx).await;
    }
    finalizer(&greetings, FINALIZER, greeting, |event| async {
        match event {
            FinalizerEvent::Apply(g) => apply(&g, &ns, &ctx).await,
            FinalizerEvent::Cleanup(g) => cleanup(&g, &ns, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}
// ANCHOR_END: reconcile

// ANCHOR: apply
/// Creates or updates the ConfigMap, then the status.
async fn apply(greeting: &Greeting, ns: &str, ctx: &Context) -> Result<Action, Error> {
    let name = config_map_name(greeting);
    let want = desired_config_map(greeting);
    // Read the cache, not the apiserver: write only when something differs.
    let cached = ctx
        .config_maps
        .indexer()
        .get_by_key(&format!("{ns}/{name}"));
    let up_to_date = match &cached {
        Some(cm) => {
            let ours = cm
                .meta()
                .controller_ref()
                .is_some_and(|r| Some(&r.uid) == greeting.uid().as_ref());
            if !ours {
                let note = format!("ConfigMap {name:?} exists and is not ours");
                publish(ctx, greeting, Event::warning("NameTaken", note)).await;
                return Err(Error::NameTaken(name));
            }
            let have: ConfigMap = cm.decode()?;
            have.data == want.data
        }
        None => false,
    };
    if !up_to_date {
        // Server-side apply: creates it, or updates the fields we own.
        let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
        let params = PatchParams::apply(NAME).force();
        config_maps
            .patch(&name, &params, &Patch::Apply(&want))
            .await?;
        tracing::info!(configmap = %format!("{ns}/{name}"), "applied");
        let note = format!("ConfigMap {name:?} says {:?}", greeting.spec.message());
        publish(ctx, greeting, Event::normal("Synced", note).action("Apply")).await;
    }
    let status = serde_json::json!({ "status": {
        "configMap": name,
        "message": greeting.spec.message(),
        "observedGeneration": greeting.metadata.generation,
    }});
    let current = serde_json::to_value(&greeting.status).unwrap_or_default();
    if Some(&current) != status.get("status") {
        let greetings: Api<Greeting> = Api::namespaced(ctx.client.clone(), ns);
        let params = PatchParams::default();
        greetings
            .patch_status(&greeting.name_any(), &params, &Patch::Merge(&status))
            .await?;
    }
    Ok(Action::await_change())
}
// ANCHOR_END: apply

// ANCHOR: unmanage
/// The Greeting is no longer ours: remove the finalizer (so it can be
/// deleted without us) and leave it and its ConfigMap alone.
async fn unmanage(
    api: &Api<Greeting>,
    greeting: &Greeting,
    ctx: &Context,
) -> Result<Action, Error> {
    if finalizer::remove(api, greeting, FINALIZER).await?.is_some() {
        let note = "no longer managed: finalizer removed";
        publish(
            ctx,
            greeting,
            Event::normal("Unmanaged", note).action("Unmanage"),
        )
        .await;
    }
    Ok(Action::await_change())
}
// ANCHOR_END: unmanage

// ANCHOR: cleanup
/// The Greeting is being deleted: deletes its ConfigMap (the garbage
/// collector would too, later; a cluster without one, such as the local
/// control plane of the tests, relies on this).
async fn cleanup(greeting: &Greeting, ns: &str, ctx: &Context) -> Result<Action, Error> {
    let name = config_map_name(greeting);
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    // Ask the apiserver, not the cache: once the finalizer is gone nothing
    // would delete a ConfigMap the cache has not seen yet.
    let Some(cm) = config_maps.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    let ours = cm
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && Some(&r.uid) == greeting.uid().as_ref());
    if ours {
        let params = DeleteParams {
            // only the ConfigMap read above, not one re-created since
            preconditions: Some(Preconditions {
                uid: cm.uid(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match config_maps.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(configmap = %format!("{ns}/{name}"), "deleted");
        let note = format!("ConfigMap {name:?} deleted");
        publish(
            ctx,
            greeting,
            Event::normal("Deleted", note).action("Cleanup"),
        )
        .await;
    }
    Ok(Action::await_change())
}
// ANCHOR_END: cleanup

// ANCHOR: publish
/// Publishes an event about `greeting`; a failure is logged, not returned
/// (an event is worth no retry of the reconcile).
async fn publish(ctx: &Context, greeting: &Greeting, event: Event) {
    if let Err(e) = ctx.recorder.publish_for(greeting, &event).await {
        tracing::warn!(greeting = %greeting.name_any(), error = %e, "publishing an event failed");
    }
}
// ANCHOR_END: publish
