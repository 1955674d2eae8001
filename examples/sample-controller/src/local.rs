//! The Foo controller and the Deployment simulator together in this
//! process, on one namespace: how the tests, the fault suite and `cargo
//! xtask demo` run the sample controller against a local control plane
//! (which has no Deployment controller of its own).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::Deployment;
use kcache_controller::{Config, ControllerError, ControllerHandle, MetricsRegistry};
use kcache_informer::SharedInformerFactory;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::{Context, Foo, build_controller, simulator};

/// How [`start_local`] runs the two controllers.
#[derive(Debug)]
pub struct LocalOptions {
    /// Concurrent reconciles of the Foo controller.
    pub workers: usize,
    /// Where both controllers and the informers' reflectors record their
    /// metrics (`None`: not recorded).
    pub metrics: Option<MetricsRegistry>,
    /// Serve the Foo controller's `/metrics`, `/healthz` and `/readyz`
    /// on this listener.
    pub serve_metrics_on: Option<std::net::TcpListener>,
}

impl Default for LocalOptions {
    /// 2 workers (as the command line), no metrics.
    fn default() -> Self {
        LocalOptions {
            workers: 2,
            metrics: None,
            serve_metrics_on: None,
        }
    }
}

/// The Foo controller and the simulator, running (see [`start_local`]).
pub struct Local {
    /// The informer factory both share (caching without managedFields).
    pub factory: SharedInformerFactory,
    /// The Foo controller's handle (its health, its informers).
    pub controller: ControllerHandle,
    /// The Foo controller's reconcile context.
    pub context: Arc<Context>,
    simulator: ControllerHandle,
    tasks: Vec<(&'static str, JoinHandle<Result<(), ControllerError>>)>,
}

impl std::fmt::Debug for Local {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Local").finish_non_exhaustive()
    }
}

impl Local {
    /// Stops both controllers (gracefully: running reconciles finish),
    /// then the informers. Returns the first failure of either
    /// controller (its `run` failed, or its task panicked).
    pub async fn stop(self) -> anyhow::Result<()> {
        self.controller.stop();
        self.simulator.stop();
        let mut result = Ok(());
        for (name, task) in self.tasks {
            let ended = match task.await {
                Ok(run) => run.with_context(|| format!("the {name} failed")),
                Err(e) => Err(e).with_context(|| format!("the {name} task")),
            };
            if result.is_ok() {
                result = ended;
            }
        }
        self.factory.shutdown().await;
        result
    }
}

/// Starts the Foo controller ([`crate::reconcile`]) and the Deployment
/// status simulator on `client`, watching `namespace` only, on one shared
/// informer factory.
pub fn start_local(client: &Client, namespace: &str, options: LocalOptions) -> Local {
    let mut builder = SharedInformerFactory::builder(client.clone())
        .namespace(namespace)
        .strip_managed_fields(true);
    if let Some(metrics) = &options.metrics {
        builder = builder.reflector_metrics(metrics.reflector_provider());
    }
    let factory = builder.build();
    let config = Config::default().workers(options.workers);
    let (mut controller, context) = build_controller(&factory, client.clone(), config);
    let (mut sim, sim_ctx) = simulator::build_simulator(&factory, client.clone());
    if let Some(metrics) = options.metrics {
        controller = controller.metrics(metrics.clone());
        sim = sim.metrics(metrics);
    }
    if let Some(listener) = options.serve_metrics_on {
        controller = controller.serve_metrics_on(listener);
    }
    let (handle, sim_handle) = (controller.handle(), sim.handle());
    let foo_task = tokio::spawn(controller.run(crate::reconcile, context.clone()));
    let sim_task = tokio::spawn(sim.run(simulator::reconcile, sim_ctx));
    Local {
        factory,
        controller: handle,
        context,
        simulator: sim_handle,
        tasks: vec![
            ("foo controller", foo_task),
            ("deployment simulator", sim_task),
        ],
    }
}

/// What a namespace holds, read from the apiserver (not a cache): for
/// checking what the controllers did.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The Foos.
    pub foos: Vec<Foo>,
    /// The Deployments, by name.
    pub deployments: BTreeMap<String, Deployment>,
}

/// Lists the Foos and the Deployments of `namespace`.
pub async fn observe(client: &Client, namespace: &str) -> Result<Observed, kube::Error> {
    let params = ListParams::default();
    let foos = Api::<Foo>::namespaced(client.clone(), namespace)
        .list(&params)
        .await?;
    let deployments = Api::<Deployment>::namespaced(client.clone(), namespace)
        .list(&params)
        .await?;
    Ok(Observed {
        foos: foos.items,
        deployments: deployments
            .items
            .into_iter()
            .map(|d| (d.name_any(), d))
            .collect(),
    })
}
