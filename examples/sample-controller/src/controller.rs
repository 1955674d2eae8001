//! The Foo controller: reconcile, context and wiring.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kcache_controller::events::{Event, Recorder, Reporter};
use kcache_controller::finalizer::{FinalizerError, FinalizerEvent, finalizer};
use kcache_controller::{Action, Config, Controller, ControllerHandle, Predicate, Request};
use kcache_core::sync::lock;
use kcache_informer::{SharedIndexInformer, SharedInformerFactory};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};

use crate::crd::Foo;

/// The finalizer that deletes a Foo's Deployment before the Foo goes away.
pub const FINALIZER: &str = "samplecontroller.k8s.io/deployment-cleanup";

/// The controller name (events' reportingController, metrics label).
pub const CONTROLLER_NAME: &str = "foo-controller";

/// What a reconcile can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// The Deployment name is taken by a Deployment the Foo does not control.
    #[error("Resource {0:?} already exists and is not managed by Foo")]
    ResourceExists(String),
    /// A cached Deployment could not be decoded.
    #[error("{0}")]
    Decode(#[from] kcache_core::DecodeError),
    /// Finalizer handling failed.
    #[error("{0}")]
    Finalizer(Box<FinalizerError<Error>>),
    /// The Foo is being deleted, its Deployment is not there, but a create
    /// of it whose answer was lost may still land: the finalizer stays for
    /// now (retried until [`UNKNOWN_CREATE_GRACE`] has passed).
    #[error(
        "a create of Deployment {0:?} whose outcome is unknown may still land; keeping the finalizer for now"
    )]
    CreateMayStillLand(String),
}

/// How long after a create whose answer was lost (the connection broke)
/// the cleanup waits for that Deployment to show up before it lets the Foo
/// go: without a garbage collector, a create landing after the finalizer is
/// removed would leave the Deployment behind for good. The apiserver
/// finishes a request within seconds; this bounds the wait, it is not a
/// proof (the fault suite's sample_controller_under_churn leaked one
/// Deployment this way, once, on a loaded machine).
pub const UNKNOWN_CREATE_GRACE: Duration = Duration::from_secs(15);

/// Creates whose outcome is unknown, by Foo uid, with when they failed.
#[derive(Debug, Default)]
pub struct UnknownCreates(Mutex<HashMap<String, Instant>>);

impl UnknownCreates {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        lock(&self.0)
    }
    /// A create for this Foo failed without an answer from the apiserver.
    pub fn record(&self, foo_uid: &str, at: Instant) {
        self.map().insert(foo_uid.to_owned(), at);
    }
    /// The outcome of the Foo's create is known (its Deployment was seen,
    /// or the apiserver answered).
    pub fn forget(&self, foo_uid: &str) {
        self.map().remove(foo_uid);
    }
    /// Whether a create for this Foo may still land at `now`; forgets it
    /// once the grace has passed.
    pub fn may_still_land(&self, foo_uid: &str, now: Instant) -> bool {
        let mut map = self.map();
        match map.get(foo_uid) {
            Some(at) if now.saturating_duration_since(*at) < UNKNOWN_CREATE_GRACE => true,
            Some(_) => {
                map.remove(foo_uid);
                false
            }
            None => false,
        }
    }
}

/// What every reconcile shares.
#[derive(Clone)]
pub struct Context {
    /// The client to write with.
    pub client: Client,
    /// The controller's handle: its Deployments cache
    /// ([`Context::deployments`]) follows a sharded controller's ranges.
    pub handle: ControllerHandle,
    /// Events about Foos.
    pub recorder: Recorder,
    /// Deployment creates whose answer was lost.
    pub unknown_creates: Arc<UnknownCreates>,
    /// Deployments the orphan sweeper deleted (see `delete_orphans`): each
    /// one a Foo that went away without its finalizer's cleanup.
    pub orphans_deleted: Arc<AtomicU64>,
}

/// Builds the Foo controller (owning Deployments) and its context on
/// `factory`. Add leader election, metrics or shutdown hooks to the
/// returned controller, then `.run(reconcile, ctx)`.
pub fn build_controller(
    factory: &SharedInformerFactory,
    client: Client,
    config: Config,
) -> (Controller<Foo>, Arc<Context>) {
    let controller = Controller::<Foo>::new(factory, config.name(CONTROLLER_NAME))
        .owns::<Deployment>()
        // Our own status writes do not change the generation: skip them.
        .with_predicate(Predicate::generation_changed() | Predicate::labels_changed());
    // Writes go through the controller's fence: with leader election, a
    // replica that lost (or may have lost) its lease sends none.
    let client = controller.handle().fenced_client(client);
    let ctx = Arc::new(Context {
        client: client.clone(),
        handle: controller.handle(),
        recorder: Recorder::new(client, Reporter::new(CONTROLLER_NAME)),
        unknown_creates: Arc::default(),
        orphans_deleted: Arc::default(),
    });
    (controller, ctx)
}

impl Context {
    /// The Deployments cache the controller reads now (with sharded
    /// informers, the one of its current hash ranges).
    pub fn deployments(&self) -> SharedIndexInformer<Deployment> {
        self.handle.informer::<Deployment>()
    }
}

fn labels(foo: &Foo) -> std::collections::BTreeMap<String, String> {
    [
        ("app".to_owned(), "nginx".to_owned()),
        ("controller".to_owned(), foo.name_any()),
    ]
    .into()
}

/// The Deployment a Foo wants (sample-controller's `newDeployment`).
pub fn new_deployment(foo: &Foo) -> Deployment {
    let labels = labels(foo);
    Deployment {
        metadata: ObjectMeta {
            name: Some(foo.spec.deployment_name.clone()),
            namespace: foo.namespace(),
            owner_references: foo.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: DeploymentSpec {
            replicas: Some(foo.spec.replicas.unwrap_or(1)),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "nginx".to_owned(),
                        image: Some("nginx:latest".to_owned()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        status: None,
    }
}

async fn publish(ctx: &Context, foo: &Foo, event: Event) {
    if let Err(e) = ctx.recorder.publish_for(foo, &event).await {
        tracing::warn!(foo = %foo.name_any(), error = %e, "publishing an event failed");
    }
}

/// Reconciles one Foo (sample-controller's `syncHandler`, plus the
/// finalizer).
pub async fn reconcile(req: Request<Foo>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(foo) = req.object else {
        // Deleted: normally the finalizer already removed its Deployment.
        return delete_orphans(
            &req.name,
            req.namespace.as_deref().unwrap_or_default(),
            &ctx,
        )
        .await;
    };
    let ns = req.namespace.clone().unwrap_or_default();
    let foos: Api<Foo> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&foos, FINALIZER, foo, |event| async {
        match event {
            FinalizerEvent::Apply(foo) => apply(foo, &ns, &ctx).await,
            FinalizerEvent::Cleanup(foo) => cleanup(foo, &ns, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

/// The Foo `name` is gone: deletes the Deployments still controlled by a
/// Foo of that name that no longer exists. The finalizer normally leaves
/// none, but a Foo deleted in the very moment its finalizer is being added
/// can go without its cleanup running (the fault suite's
/// sample_controller_under_churn saw it under load: the finalizer was
/// added, the Deployment created, and the Foo deleted without ever showing
/// a deletionTimestamp), and nothing else deletes a Deployment here (no
/// garbage collector). Reads the apiserver, not the caches, which may lag.
async fn delete_orphans(name: &str, ns: &str, ctx: &Context) -> Result<Action, Error> {
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let foos: Api<Foo> = Api::namespaced(ctx.client.clone(), ns);
    let live_uid = foos.get_opt(name).await?.and_then(|f| f.metadata.uid);
    for d in deployments.list(&ListParams::default()).await? {
        let Some(owner) = d
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == "Foo" && o.name == name)
        else {
            continue;
        };
        if live_uid.as_deref() == Some(owner.uid.as_str()) {
            continue; // its Foo is still there (the cache lags)
        }
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: d.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let dep = d.name_any();
        match deployments.delete(&dep, &params).await {
            Ok(_) => {
                ctx.orphans_deleted.fetch_add(1, Ordering::Relaxed);
                tracing::info!(deployment = %format!("{ns}/{dep}"), foo = %name, "deleted the deployment of a Foo that is gone")
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Action::await_change())
}

fn controlled_by(meta: &kcache_core::Metadata, foo: &Foo) -> bool {
    meta.controller_ref()
        .is_some_and(|r| Some(r.uid.as_str()) == foo.metadata.uid.as_deref())
}

async fn apply(foo: Foo, ns: &str, ctx: &Context) -> Result<Action, Error> {
    let name = foo.spec.deployment_name.clone();
    if name.is_empty() {
        publish(
            ctx,
            &foo,
            Event::warning("InvalidSpec", "spec.deploymentName must be specified"),
        )
        .await;
        return Ok(Action::await_change());
    }
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let mut changed = false;
    let key = format!("{ns}/{name}");
    let deployment = match ctx.deployments().indexer().get_by_key(&key) {
        None => {
            let foo_uid = foo.metadata.uid.clone().unwrap_or_default();
            let created = match deployments
                .create(&PostParams::default(), &new_deployment(&foo))
                .await
            {
                Ok(created) => created,
                Err(e) => {
                    if matches!(e, kube::Error::Api(_)) {
                        ctx.unknown_creates.forget(&foo_uid);
                    } else {
                        // no answer: the create may or may not have happened
                        ctx.unknown_creates.record(&foo_uid, Instant::now());
                    }
                    return Err(e.into());
                }
            };
            ctx.unknown_creates.forget(&foo_uid);
            tracing::info!(deployment = %key, "created deployment");
            changed = true;
            created
        }
        Some(cached) => {
            if let Some(uid) = &foo.metadata.uid {
                ctx.unknown_creates.forget(uid);
            }
            if !controlled_by(cached.meta(), &foo) {
                let msg = format!("Resource {name:?} already exists and is not managed by Foo");
                publish(ctx, &foo, Event::warning("ErrResourceExists", msg)).await;
                return Err(Error::ResourceExists(name));
            }
            let current: Deployment = cached.decode()?;
            let want = foo.spec.replicas.unwrap_or(1);
            let have = current.spec.replicas;
            if have != Some(want) {
                tracing::info!(deployment = %key, ?have, want, "updating deployment replicas");
                let patch = serde_json::json!({ "spec": { "replicas": want } });
                changed = true;
                deployments
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?
            } else {
                current
            }
        }
    };
    let available = deployment
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    let current = foo.status.as_ref().map(|s| s.available_replicas);
    if current != Some(available) {
        let patch = serde_json::json!({ "status": { "availableReplicas": available } });
        Api::<Foo>::namespaced(ctx.client.clone(), ns)
            .patch_status(
                &foo.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        changed = true;
    }
    if changed {
        publish(
            ctx,
            &foo,
            Event::normal("Synced", "Foo synced successfully"),
        )
        .await;
    }
    Ok(Action::await_change())
}

async fn cleanup(foo: Foo, ns: &str, ctx: &Context) -> Result<Action, Error> {
    let name = foo.spec.deployment_name.clone();
    let key = format!("{ns}/{name}");
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    // Decide from the apiserver, not the cache: once the finalizer is gone
    // nothing else deletes the Deployment (no garbage collector here), and
    // the Deployments cache may not show one that exists yet (a create
    // whose answer was lost, or the Foos informer relisted before the
    // Deployments one). The fault suite's sample_controller_under_churn
    // leaked Deployments that way.
    let controlled_uid = match deployments.get_opt(&name).await? {
        Some(d) => d
            .owner_references()
            .iter()
            .any(|r| r.controller == Some(true) && Some(&r.uid) == foo.metadata.uid.as_ref())
            .then(|| d.metadata.uid.clone())
            .flatten(),
        None => None,
    };
    let foo_uid = foo.metadata.uid.clone().unwrap_or_default();
    if controlled_uid.is_none() && ctx.unknown_creates.may_still_land(&foo_uid, Instant::now()) {
        return Err(Error::CreateMayStillLand(name));
    }
    if let Some(uid) = controlled_uid {
        ctx.unknown_creates.forget(&foo_uid);
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match deployments.delete(&name, &params).await {
            Ok(_) => tracing::info!(deployment = %key, "deleted deployment"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        publish(
            ctx,
            &foo,
            Event::normal("Deleted", format!("Deployment {name:?} deleted")).action("Cleanup"),
        )
        .await;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_create_holds_the_cleanup_for_its_grace_only() {
        let creates = UnknownCreates::default();
        let t0 = Instant::now();
        assert!(!creates.may_still_land("uid-1", t0));
        creates.record("uid-1", t0);
        assert!(creates.may_still_land("uid-1", t0 + Duration::from_secs(1)));
        assert!(!creates.may_still_land("uid-2", t0));
        // past the grace: no longer held, and forgotten
        assert!(!creates.may_still_land("uid-1", t0 + UNKNOWN_CREATE_GRACE));
        assert!(creates.map().is_empty());
        // a known outcome releases it at once
        creates.record("uid-3", t0);
        creates.forget("uid-3");
        assert!(!creates.may_still_land("uid-3", t0));
    }
}
