//! Where membership Leases are kept: the [`MembershipStore`] trait and what
//! a Lease records. The `coordination.k8s.io/v1` implementation, which
//! watches the Leases with an informer, is kcache-controller's
//! `KubeMembershipStore` (this crate sits below the informer); the
//! `testing` feature adds an in-memory one.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::jiff::Timestamp;
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
        "membership lease request failed (check connectivity and that the controller may get, list, watch, create, update and delete coordination.k8s.io leases in the shard namespace)"
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
