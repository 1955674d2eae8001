//! [`KubeMembershipStore`]: the membership Leases of sharding
//! ([`kcache_lease::shard`]) on `coordination.k8s.io/v1`, changes watched
//! with a kcache informer. It lives here, not in kcache-lease, so that
//! leader election stays below the informer: kcache-lease defines the
//! [`MembershipStore`] trait, this crate wires it to an informer.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kcache_core::CachedObject;
use kcache_informer::{ResourceEventHandlerFuncs, SharedIndexInformer};
use kcache_lease::shard::{
    ACK_ANNOTATION, GROUP_LABEL, INSTANCE_ANNOTATION, MemberRecord, MembershipStore,
    ShardStoreError, StoredMember,
};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A [`MembershipStore`] on `coordination.k8s.io/v1` Leases in one
/// namespace, labelled [`GROUP_LABEL`]`=<group>`. Changes are watched with a
/// kcache informer on that label selector.
#[derive(Clone)]
pub struct KubeMembershipStore {
    client: kube::Client,
    api: Api<Lease>,
    namespace: String,
}

impl fmt::Debug for KubeMembershipStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeMembershipStore")
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl KubeMembershipStore {
    /// Membership Leases in `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            client,
            namespace: namespace.to_owned(),
        }
    }

    fn to_lease(&self, group: &str, name: &str, record: &MemberRecord, rv: Option<&str>) -> Lease {
        let mut annotations = BTreeMap::new();
        annotations.insert(INSTANCE_ANNOTATION.to_owned(), record.instance.clone());
        if let Some(acked) = &record.acked {
            annotations.insert(
                ACK_ANNOTATION.to_owned(),
                serde_json::Value::from(acked.clone()).to_string(),
            );
        }
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                resource_version: rv.map(str::to_owned),
                labels: Some([(GROUP_LABEL.to_owned(), group.to_owned())].into()),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(record.identity.clone()),
                lease_duration_seconds: Some(record.lease_duration_seconds),
                acquire_time: record.acquire_time.map(MicroTime),
                renew_time: record.renew_time.map(MicroTime),
                ..LeaseSpec::default()
            }),
        }
    }
}

/// Reads the acknowledged view from the annotation; a malformed value
/// counts as "acknowledged nothing" (never as a claim on keys).
fn parse_ack(annotations: Option<&BTreeMap<String, String>>) -> Option<Vec<String>> {
    let raw = annotations?.get(ACK_ANNOTATION)?;
    match serde_json::from_str::<Vec<String>>(raw) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(value = %raw, error = %e, "ignoring a malformed shard acknowledgement");
            None
        }
    }
}

fn stored_of(lease: &Lease) -> StoredMember {
    let spec = lease.spec.clone().unwrap_or_default();
    let annotations = lease.metadata.annotations.as_ref();
    StoredMember {
        name: lease.metadata.name.clone().unwrap_or_default(),
        resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
        record: MemberRecord {
            identity: spec.holder_identity.unwrap_or_default(),
            instance: annotations
                .and_then(|a| a.get(INSTANCE_ANNOTATION))
                .cloned()
                .unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire_time: spec.acquire_time.map(|t| t.0),
            renew_time: spec.renew_time.map(|t| t.0),
            acked: parse_ack(annotations),
        },
    }
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn other(e: kube::Error) -> ShardStoreError {
    ShardStoreError::Other(Box::new(e))
}

/// The error of a write with a precondition (a replace or delete at a
/// resource version): 409 a conflict, 404 the Lease is gone.
fn precondition_error(e: kube::Error) -> ShardStoreError {
    match status_code(&e) {
        Some(409) => ShardStoreError::Conflict,
        Some(404) => ShardStoreError::NotFound,
        _ => other(e),
    }
}

fn selector(group: &str) -> String {
    format!("{GROUP_LABEL}={group}")
}

/// Whether an update changed something a peer acts on (not a renewal).
fn significant_change<K>(old: &CachedObject<K>, new: &CachedObject<K>) -> bool {
    let a = |o: &CachedObject<K>| {
        (
            o.annotations().get(ACK_ANNOTATION).map(str::to_owned),
            o.annotations().get(INSTANCE_ANNOTATION).map(str::to_owned),
        )
    };
    a(old) != a(new)
}

#[async_trait]
impl MembershipStore for KubeMembershipStore {
    async fn list(&self, group: &str) -> Result<Vec<StoredMember>, ShardStoreError> {
        // No resourceVersion: a consistent read from etcd, not a cache.
        let list = self
            .api
            .list(&ListParams::default().labels(&selector(group)))
            .await
            .map_err(other)?;
        Ok(list.items.iter().map(stored_of).collect())
    }

    async fn create(
        &self,
        group: &str,
        name: &str,
        record: &MemberRecord,
    ) -> Result<String, ShardStoreError> {
        match self
            .api
            .create(
                &PostParams::default(),
                &self.to_lease(group, name, record, None),
            )
            .await
        {
            Ok(l) => Ok(l.metadata.resource_version.unwrap_or_default()),
            Err(e) if status_code(&e) == Some(409) => Err(ShardStoreError::AlreadyExists),
            Err(e) => Err(other(e)),
        }
    }

    async fn update(
        &self,
        group: &str,
        name: &str,
        record: &MemberRecord,
        resource_version: &str,
    ) -> Result<String, ShardStoreError> {
        let lease = self.to_lease(group, name, record, Some(resource_version));
        let replaced = self.api.replace(name, &PostParams::default(), &lease).await;
        let replaced = replaced.map_err(precondition_error)?;
        Ok(replaced.metadata.resource_version.unwrap_or_default())
    }

    async fn delete(
        &self,
        _group: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<(), ShardStoreError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version.to_owned()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        self.api
            .delete(name, &params)
            .await
            .map_err(precondition_error)?;
        Ok(())
    }

    async fn watch(&self, group: &str, wake: Arc<Notify>, stop: CancellationToken) {
        let informer = SharedIndexInformer::<Lease>::builder(self.client.clone())
            .config(kcache_informer::InformerConfig {
                watch: kcache_reflector::WatchConfig {
                    namespace: Some(self.namespace.clone()),
                    label_selector: Some(selector(group)),
                    ..kcache_reflector::WatchConfig::default()
                },
                name: Some(format!("shard-leases/{}/{group}", self.namespace)),
                ..kcache_informer::InformerConfig::default()
            })
            .build();
        let (w1, w2, w3) = (wake.clone(), wake.clone(), wake);
        let handler = ResourceEventHandlerFuncs::<Lease>::new()
            .add_func(move |_, _| w1.notify_one())
            .update_func(move |old, new| {
                if significant_change(old, new) {
                    w2.notify_one();
                }
            })
            .delete_func(move |_| w3.notify_one());
        if let Err(e) = informer.add_event_handler(handler) {
            tracing::warn!(error = %e, "cannot watch shard leases; relying on periodic lists");
            stop.cancelled().await;
            return;
        }
        if let Err(e) = informer.run(stop.clone()).await {
            tracing::warn!(error = %e, "the shard lease watch stopped; relying on periodic lists");
            stop.cancelled().await;
        }
    }

    fn describe(&self) -> String {
        format!("leases in namespace {}", self.namespace)
    }
}
