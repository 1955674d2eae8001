//! The lease record and how it is read and written: client-go's
//! `tools/leaderelection/resourcelock` for `coordination.k8s.io/v1`
//! Leases.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

/// The state a Lease records (client-go's `LeaderElectionRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaderElectionRecord {
    /// Identity of the holder; empty when released.
    pub holder_identity: String,
    /// How long the lease lasts without renewal, in seconds.
    pub lease_duration_seconds: i32,
    /// When the current holder acquired the lease.
    pub acquire_time: Option<Timestamp>,
    /// When the current holder last renewed the lease.
    pub renew_time: Option<Timestamp>,
    /// How many times the lease changed hands.
    pub leader_transitions: i32,
}

/// Why a lease operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Someone else wrote the lease since it was read (HTTP 409 on update).
    #[error("the lease was changed by someone else (conflict)")]
    Conflict,
    /// The lease already exists (HTTP 409 on create).
    #[error("the lease already exists")]
    AlreadyExists,
    /// The apiserver refused the request (HTTP 403): RBAC does not grant
    /// the verb on Leases to this client.
    #[error(
        "forbidden to {verb} the lease {lease}: grant the controller's service account the verbs get, create and update on leases.coordination.k8s.io in that namespace (a Role and RoleBinding) ({message})"
    )]
    Forbidden {
        /// The refused verb (`get`, `create`, `update`).
        verb: &'static str,
        /// `namespace/name` of the lease.
        lease: String,
        /// The apiserver's message.
        message: String,
    },
    /// The lease's namespace does not exist (HTTP 404 on create).
    #[error(
        "cannot create the lease {lease}: namespace {namespace:?} does not exist; create it or choose an existing namespace for the lease"
    )]
    NamespaceNotFound {
        /// `namespace/name` of the lease.
        lease: String,
        /// The missing namespace.
        namespace: String,
    },
    /// The request got no answer within its deadline.
    #[error(
        "the lease request did not complete within {after:?}: is the apiserver reachable and not overloaded?"
    )]
    Timeout {
        /// The deadline that passed.
        after: Duration,
    },
    /// Any other error (network, server, ...). Its message is part of
    /// this error's message (not repeated as its `source`).
    #[error("lease request failed: {0}")]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl LeaseError {
    /// Whether this is ordinary contention between candidates (a conflict
    /// or a lost create race), not a failure anyone has to fix.
    pub fn is_contention(&self) -> bool {
        matches!(self, LeaseError::Conflict | LeaseError::AlreadyExists)
    }
}

/// Reads and writes the lease record: the only thing leader election needs
/// from the apiserver (client-go's `resourcelock.Interface`).
#[async_trait]
pub trait LeaseLock: Send + Sync + 'static {
    /// The current record and its resourceVersion; `None` when the lease
    /// does not exist.
    async fn get(&self) -> Result<Option<(LeaderElectionRecord, String)>, LeaseError>;
    /// Creates the lease; returns the new resourceVersion.
    async fn create(&self, record: &LeaderElectionRecord) -> Result<String, LeaseError>;
    /// Replaces the record if the lease is still at `resource_version`;
    /// returns the new resourceVersion, or [`LeaseError::Conflict`].
    async fn update(
        &self,
        record: &LeaderElectionRecord,
        resource_version: &str,
    ) -> Result<String, LeaseError>;
    /// `namespace/name` of the lease, for logs.
    fn describe(&self) -> String;
}

/// A [`LeaseLock`] on a `coordination.k8s.io/v1` Lease.
#[derive(Clone, Debug)]
pub struct KubeLeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl KubeLeaseLock {
    /// The lease `namespace/name`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    fn to_lease(&self, record: &LeaderElectionRecord, rv: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                resource_version: rv.map(str::to_owned),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(record.holder_identity.clone()),
                lease_duration_seconds: Some(record.lease_duration_seconds),
                acquire_time: record.acquire_time.map(MicroTime),
                renew_time: record.renew_time.map(MicroTime),
                lease_transitions: Some(record.leader_transitions),
                ..LeaseSpec::default()
            }),
        }
    }
}

fn record_of(lease: &Lease) -> LeaderElectionRecord {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaderElectionRecord {
        holder_identity: spec.holder_identity.unwrap_or_default(),
        lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
        acquire_time: spec.acquire_time.map(|t| t.0),
        renew_time: spec.renew_time.map(|t| t.0),
        leader_transitions: spec.lease_transitions.unwrap_or_default(),
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl KubeLeaseLock {
    /// Maps a failed `verb` on the lease to the [`LeaseError`] that says
    /// what to fix.
    fn classify(&self, verb: &'static str, e: kube::Error) -> LeaseError {
        match &e {
            kube::Error::Api(s) if s.code == 403 => LeaseError::Forbidden {
                verb,
                lease: self.describe(),
                message: s.message.clone(),
            },
            // A create answered 404 names the namespace, the only parent a
            // Lease has.
            kube::Error::Api(s) if s.code == 404 && verb == "create" => {
                LeaseError::NamespaceNotFound {
                    lease: self.describe(),
                    namespace: self.namespace.clone(),
                }
            }
            _ => LeaseError::Other(Box::new(e)),
        }
    }
}

#[async_trait]
impl LeaseLock for KubeLeaseLock {
    async fn get(&self) -> Result<Option<(LeaderElectionRecord, String)>, LeaseError> {
        let lease = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.classify("get", e))?;
        Ok(lease.map(|l| {
            let rv = l.metadata.resource_version.clone().unwrap_or_default();
            (record_of(&l), rv)
        }))
    }

    async fn create(&self, record: &LeaderElectionRecord) -> Result<String, LeaseError> {
        match self
            .api
            .create(&PostParams::default(), &self.to_lease(record, None))
            .await
        {
            Ok(l) => Ok(l.metadata.resource_version.unwrap_or_default()),
            Err(e) if is_conflict(&e) => Err(LeaseError::AlreadyExists),
            Err(e) => Err(self.classify("create", e)),
        }
    }

    async fn update(
        &self,
        record: &LeaderElectionRecord,
        resource_version: &str,
    ) -> Result<String, LeaseError> {
        match self
            .api
            .replace(
                &self.name,
                &PostParams::default(),
                &self.to_lease(record, Some(resource_version)),
            )
            .await
        {
            Ok(l) => Ok(l.metadata.resource_version.unwrap_or_default()),
            Err(e) if is_conflict(&e) => Err(LeaseError::Conflict),
            Err(e) => Err(self.classify("update", e)),
        }
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
