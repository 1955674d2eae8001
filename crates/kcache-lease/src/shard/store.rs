//! Where membership Leases are kept: the [`MembershipStore`] trait, the
//! `coordination.k8s.io/v1` implementation ([`KubeMembershipStore`]); the
//! `testing` feature adds an in-memory one.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kcache_core::CachedObject;
use kcache_informer::{ResourceEventHandlerFuncs, SharedIndexInformer};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The label that puts a membership Lease in a shard group (its value is
/// the group name).
pub const GROUP_LABEL: &str = "kcache.io/shard-group";
/// The annotation holding the members view a replica acknowledged (a JSON
/// array of identities); absent when it acknowledged none yet.
pub const ACK_ANNOTATION: &str = "kcache.io/shard-ack";
/// The annotation holding the id of the process that holds the Lease (to
/// tell a restarted replica from a second one with the same identity).
pub const INSTANCE_ANNOTATION: &str = "kcache.io/shard-instance";

/// What a membership Lease records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberRecord {
    /// The replica's identity (`spec.holderIdentity`); empty when released.
    pub identity: String,
    /// The id of the process holding the Lease.
    pub instance: String,
    /// How long the Lease lasts without renewal (`spec.leaseDurationSeconds`).
    pub lease_duration_seconds: i32,
    /// When the Lease was taken (`spec.acquireTime`).
    pub acquire_time: Option<Timestamp>,
    /// When the Lease was last renewed (`spec.renewTime`).
    pub renew_time: Option<Timestamp>,
    /// The members view this replica acknowledged: it reconciles no key
    /// that another member owns in this view. `None`: no view yet (it
    /// reconciles nothing).
    pub acked: Option<Vec<String>>,
}

/// A membership Lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMember {
    /// The Lease's name.
    pub name: String,
    /// Its content.
    pub record: MemberRecord,
    /// Its resourceVersion (changes on every write, renewals included).
    pub resource_version: String,
}

/// Why a membership store request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardStoreError {
    /// The Lease changed since it was read (HTTP 409 on update or delete).
    #[error("the membership lease was changed by someone else (conflict); it is read again")]
    Conflict,
    /// The Lease already exists (HTTP 409 on create).
    #[error("the membership lease already exists")]
    AlreadyExists,
    /// The Lease does not exist (HTTP 404).
    #[error("the membership lease does not exist")]
    NotFound,
    /// Anything else (network, authorization, ...).
    #[error(
        "membership lease request failed: {0} (check connectivity and that the controller may get, list, watch, create, update and delete coordination.k8s.io leases in the shard namespace)"
    )]
    Other(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Reads and writes the membership Leases of shard groups.
///
/// `list` must be a fresh read (not from a cache): the handover protocol
/// relies on a replica seeing every acknowledgement written before its
/// list.
#[async_trait]
pub trait MembershipStore: Send + Sync + 'static {
    /// Every membership Lease of `group`, read fresh.
    async fn list(&self, group: &str) -> Result<Vec<StoredMember>, ShardStoreError>;
    /// Creates the Lease `name` in `group`; returns its resourceVersion.
    async fn create(
        &self,
        group: &str,
        name: &str,
        record: &MemberRecord,
    ) -> Result<String, ShardStoreError>;
    /// Replaces the Lease if it is still at `resource_version`; returns the
    /// new resourceVersion.
    async fn update(
        &self,
        group: &str,
        name: &str,
        record: &MemberRecord,
        resource_version: &str,
    ) -> Result<String, ShardStoreError>;
    /// Deletes the Lease if it is still at `resource_version`.
    async fn delete(
        &self,
        group: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<(), ShardStoreError>;
    /// Notifies `wake` when a Lease of `group` is created, deleted or
    /// changes other than by a renewal, until `stop` is cancelled. A store
    /// without notifications may just wait for `stop` (replicas then notice
    /// changes at their next retry period).
    async fn watch(&self, group: &str, wake: Arc<Notify>, stop: CancellationToken);
    /// Where the Leases are, for logs.
    fn describe(&self) -> String;
}

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
        match self
            .api
            .replace(
                name,
                &PostParams::default(),
                &self.to_lease(group, name, record, Some(resource_version)),
            )
            .await
        {
            Ok(l) => Ok(l.metadata.resource_version.unwrap_or_default()),
            Err(e) if status_code(&e) == Some(409) => Err(ShardStoreError::Conflict),
            Err(e) if status_code(&e) == Some(404) => Err(ShardStoreError::NotFound),
            Err(e) => Err(other(e)),
        }
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
        match self.api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(409) => Err(ShardStoreError::Conflict),
            Err(e) if status_code(&e) == Some(404) => Err(ShardStoreError::NotFound),
            Err(e) => Err(other(e)),
        }
    }

    async fn watch(&self, group: &str, wake: Arc<Notify>, stop: CancellationToken) {
        let informer = SharedIndexInformer::<Lease>::builder(self.client.clone())
            .namespace(self.namespace.clone())
            .label_selector(selector(group))
            .name(format!("shard-leases/{}/{group}", self.namespace))
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
