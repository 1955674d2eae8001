//! Wiring: the informer factory, the controller (owning ConfigMaps), the
//! events recorder, leader election on a Lease and the health probes.

use std::future::Future;
use std::net::TcpListener;
use std::sync::Arc;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kcache::prelude::*;
use kube::Client;

use crate::crd::Greeting;
use crate::reconcile::{Context, NAME, reconcile};

/// How a replica runs.
#[derive(Debug)]
pub struct Settings {
    /// Watch Greetings and ConfigMaps in this namespace only (default:
    /// all, as the ClusterRole of `manifests/rbac.yaml` allows).
    pub namespace: Option<String>,
    /// The namespace of the Lease `hello-operator` (the operator's own).
    pub lease_namespace: String,
    /// This replica's identity in the Lease (the Pod's name).
    pub identity: String,
    /// Serves `/healthz`, `/readyz` and `/metrics`.
    pub probes: TcpListener,
}

impl Settings {
    /// From the environment the Deployment of `manifests/deployment.yaml`
    /// sets: `POD_NAMESPACE`, `POD_NAME`, optional `WATCH_NAMESPACE` and
    /// `PROBE_ADDR` (default `0.0.0.0:8080`).
    pub fn from_env() -> anyhow::Result<Settings> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let addr = var("PROBE_ADDR").unwrap_or_else(|| "0.0.0.0:8080".to_owned());
        Ok(Settings {
            namespace: var("WATCH_NAMESPACE"),
            lease_namespace: var("POD_NAMESPACE").unwrap_or_else(|| "default".to_owned()),
            identity: var("POD_NAME")
                .or_else(|| var("HOSTNAME"))
                .context("set POD_NAME (the Deployment sets it from metadata.name)")?,
            probes: TcpListener::bind(&addr).with_context(|| format!("binding {addr}"))?,
        })
    }
}

// ANCHOR: run
/// Runs the operator until SIGTERM/SIGINT or `stop` completes. Only the
/// replica holding the Lease reconciles; the others keep their caches warm
/// and take over within the lease duration. Returns an error when the
/// lease is lost (the process exits, the kubelet restarts it).
pub async fn run(
    client: Client,
    settings: Settings,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let mut config = InformerConfig::default();
    config.watch.namespace = settings.namespace.clone();
    config.watch.object_options.strip_managed_fields = true;
    let factory = SharedInformerFactory::builder(client.clone())
        .config(config)
        .build();
    let controller = Controller::<Greeting>::new(&factory, Config::default().name(NAME))
        // Reconcile a Greeting when the ConfigMap it controls changes.
        .owns::<ConfigMap>()
        // Skip our own status writes (they change neither the generation
        // nor the annotations); see the `unmanaged` annotation.
        .with_predicate(Predicate::generation_changed() | Predicate::annotations_changed())
        .leader_election(
            LeaderElectionConfig::new(settings.identity.clone()),
            KubeLeaseLock::new(client.clone(), &settings.lease_namespace, NAME),
        )
        .metrics(MetricsRegistry::new())
        .serve_metrics_on(settings.probes)
        .shutdown_on_signal()
        .shutdown_on(stop);
    // Writes go through the lease's fence: refused once the lease may be lost.
    let client = controller.handle().fenced_client(client);
    let ctx = Arc::new(Context {
        client: client.clone(),
        config_maps: factory.informer::<ConfigMap>(),
        recorder: Recorder::new(client, Reporter::new(NAME).instance(settings.identity)),
    });
    let result = controller.run(reconcile, ctx).await;
    factory.shutdown().await;
    result.context("the Greeting controller")
}
// ANCHOR_END: run
