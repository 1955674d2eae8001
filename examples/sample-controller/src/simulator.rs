//! A stand-in for kube-controller-manager's Deployment controller, for the
//! local control plane (which has none): it reports every Deployment's
//! replicas as available by writing its status. Built with kcache's own
//! controller, on the same shared informer as the Foo controller.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use kcache_controller::{Action, Config, Controller, Request};
use kcache_informer::SharedInformerFactory;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

/// Builds the simulator controller on `factory`.
pub fn build_simulator(
    factory: &SharedInformerFactory,
    client: Client,
) -> (Controller<Deployment>, Arc<Client>) {
    let controller = Controller::<Deployment>::new(
        factory,
        Config::default().name("deployment-simulator").workers(2),
    );
    (controller, Arc::new(client))
}

/// Sets `status` so that all `spec.replicas` are available.
pub async fn reconcile(
    req: Request<Deployment>,
    client: Arc<Client>,
) -> Result<Action, kube::Error> {
    let Some(d) = req.object else {
        return Ok(Action::await_change());
    };
    let want = d.spec.replicas.unwrap_or(1);
    let generation = d.metadata.generation.unwrap_or(0);
    let status = d.status.clone().unwrap_or_default();
    if status.available_replicas == Some(want) && status.observed_generation == Some(generation) {
        return Ok(Action::await_change());
    }
    let patch = serde_json::json!({ "status": {
        "observedGeneration": generation,
        "replicas": want,
        "updatedReplicas": want,
        "readyReplicas": want,
        "availableReplicas": want,
    }});
    Api::<Deployment>::namespaced((*client).clone(), &d.namespace().unwrap_or_default())
        .patch_status(
            &d.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(Action::await_change())
}
