//! The Foo controller and the Deployment simulator together in this
//! process, on one namespace: how the tests, the fault suite and `cargo
//! xtask demo` run the sample controller against a local control plane
//! (which has no Deployment controller of its own).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::Deployment;
use kcache_controller::{
    Config, Controller, ControllerError, ControllerHandle, MetricsRegistry, Reconciler,
};
use kcache_informer::{BackgroundCompression, SharedInformerFactory};
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
    /// The informers' background compression (default: on, quiet 30 s;
    /// the demo shortens the quiet time to show it within its run).
    pub background_compression: BackgroundCompression,
}

impl Default for LocalOptions {
    /// 2 workers (as the command line), no metrics.
    fn default() -> Self {
        LocalOptions {
            workers: 2,
            metrics: None,
            serve_metrics_on: None,
            background_compression: BackgroundCompression::default(),
        }
    }
}

/// Controllers running in this process on one informer factory: the Foo
/// controller (from [`start_local`] or [`crate::start_replica`]) and, from
/// [`start_local`], the Deployment simulator.
pub struct Running {
    /// The informer factory they share (unsharded informers live here).
    pub factory: SharedInformerFactory,
    /// The Foo controller's handle: its health, its current informers
    /// ([`ControllerHandle::informer`]).
    pub handle: ControllerHandle,
    /// The Foo controller's reconcile context.
    pub context: Arc<Context>,
    tasks: Vec<Task>,
}

/// A controller's task.
struct Task {
    name: &'static str,
    handle: ControllerHandle,
    join: JoinHandle<Result<(), ControllerError>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tasks.iter().map(|t| t.name).collect();
        f.debug_struct("Running")
            .field("controllers", &names)
            .finish_non_exhaustive()
    }
}

impl Running {
    /// Spawns the Foo controller, reconciling with `reconciler`.
    pub(crate) fn spawn<R>(
        factory: SharedInformerFactory,
        controller: Controller<Foo>,
        context: Arc<Context>,
        reconciler: R,
    ) -> Running
    where
        R: Reconciler<Foo, Context>,
    {
        let handle = controller.handle();
        let join = tokio::spawn(controller.run(reconciler, context.clone()));
        let task = Task {
            name: "foo controller",
            handle: handle.clone(),
            join,
        };
        Running {
            factory,
            handle,
            context,
            tasks: vec![task],
        }
    }

    /// Whether the Foo controller's task ended.
    pub fn finished(&self) -> bool {
        self.tasks[0].join.is_finished()
    }

    /// Stops the controllers (gracefully: running reconciles finish), then
    /// the informers. Returns the first failure of a controller (its `run`
    /// failed, or its task panicked).
    pub async fn stop(self) -> anyhow::Result<()> {
        for task in &self.tasks {
            task.handle.stop();
        }
        let mut result = Ok(());
        for Task { name, join, .. } in self.tasks {
            let ended = match join.await {
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
/// informer factory (caching without managedFields).
pub fn start_local(client: &Client, namespace: &str, options: LocalOptions) -> Running {
    let mut builder =
        SharedInformerFactory::builder(client.clone()).config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                namespace: Some(namespace.into()),
                object_options: kcache_core::ObjectOptions {
                    strip_managed_fields: true,
                    ..Default::default()
                },
                ..kcache_reflector::WatchConfig::default()
            },
            background_compression: options.background_compression.clone(),
            ..kcache_informer::InformerConfig::default()
        });
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
    let mut running = Running::spawn(factory, controller, context, crate::reconcile);
    running.tasks.push(Task {
        name: "deployment simulator",
        handle: sim.handle(),
        join: tokio::spawn(sim.run(simulator::reconcile, sim_ctx)),
    });
    running
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
