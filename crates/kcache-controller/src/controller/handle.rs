//! [`ControllerHandle`]: queue a key by hand, stop the controller, check
//! its health, fence its writes ([`NotLeading`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use kcache_core::ShardSelector;
use kcache_informer::{SharedIndexInformer, SharedInformerFactory};
use kcache_lease::LeaderElector;
use kube::Resource;
use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;

use crate::consistency::WriteLedger;
use crate::reconciler::Trigger;
use crate::server::Health;
use crate::source::Enqueuer;

/// A handle on a controller: queue a key by hand, stop it, check health.
#[derive(Clone)]
pub struct ControllerHandle {
    pub(super) enqueuer: Arc<OnceLock<Enqueuer>>,
    pub(super) stop: CancellationToken,
    pub(super) health: Health,
    /// Set by `leader_election`.
    pub(super) leader_elected: Arc<AtomicBool>,
    /// The elector, once `run` created it.
    pub(super) lease: Arc<OnceLock<Arc<LeaderElector>>>,
    /// The factory whose informers the controller caches with now (with
    /// sharded informers: the current ranges' factory).
    pub(super) factory: Arc<RwLock<SharedInformerFactory>>,
    /// What the controller's writes returned (see [`Consistency`]).
    pub(crate) ledger: Arc<WriteLedger>,
}

impl fmt::Debug for ControllerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerHandle")
            .field("running", &self.enqueuer.get().is_some())
            .field("stopped", &self.stop.is_cancelled())
            .finish()
    }
}

impl ControllerHandle {
    /// Queues `key` for a reconcile; `false` when the controller is not
    /// running (not started yet, or stopping).
    pub fn enqueue(&self, key: impl Into<String>) -> bool {
        match self.enqueuer.get() {
            Some(e) if !e.queue.shutting_down() => {
                e.enqueue(key.into(), Trigger::Manual, false);
                true
            }
            _ => false,
        }
    }
    /// The informer of `C` the controller caches with now: its factory's;
    /// with [`shard_informers`](crate::Controller::shard_informers), the informer
    /// of the replica's current hash ranges (it changes when the ranges
    /// move: ask again in every reconcile rather than keeping it).
    pub fn informer<C>(&self) -> SharedIndexInformer<C>
    where
        C: Resource + Send + Sync + 'static,
        C::DynamicType: Default + Clone + Send + Sync + 'static,
    {
        let factory = self.factory.read().clone();
        factory.informer::<C>()
    }

    /// The shard selector of the controller's current informers (`None`
    /// unless they are sharded and have synced once).
    pub fn shard_selector(&self) -> Option<ShardSelector> {
        self.factory.read().shard_selector().cloned()
    }

    /// Starts a graceful shutdown.
    pub fn stop(&self) {
        self.stop.cancel();
    }
    /// The controller's readiness.
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Whether this replica may act now: always without leader election;
    /// with it, only while it leads and its renew deadline has not passed
    /// on this process's clock (see [`LeaderElector::may_act`]).
    pub fn may_act(&self) -> bool {
        if !self.leader_elected.load(Ordering::SeqCst) {
            return true;
        }
        self.lease.get().is_some_and(|e| e.may_act())
    }

    /// `client`, fenced by this controller's lease and recording its
    /// writes. Give it to the reconciler for its writes.
    ///
    /// Fenced: its writes (POST, PUT, PATCH, DELETE) are not sent, and
    /// fail with [`NotLeading`], while this replica may not act
    /// ([`may_act`](Self::may_act)); reads always pass. A leader that lost
    /// its lease (cut off, or paused and resumed after a standby took
    /// over) then cannot write, even from a reconcile that ignores its
    /// cancellation. A write already sent is not recalled: keep writes
    /// guarded by the apiserver's preconditions (resourceVersion, uid).
    /// Without leader election the fence lets everything through.
    ///
    /// Recording: while the controller runs, what each successful write
    /// returned is recorded for the reconcile it was made in (and for the
    /// written object, or its controlling owner, when that is a primary),
    /// so that the next reconcile of that key waits for the caches to
    /// catch up and reads the written objects back (see [`Consistency`](crate::Consistency)).
    /// Writes from a task the reconcile spawned are recorded for the
    /// written object only.
    pub fn fenced_client(&self, client: kube::Client) -> kube::Client {
        let namespace = client.default_namespace().to_owned();
        let handle = self.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (client, handle) = (client.clone(), handle.clone());
            async move {
                let method = req.method().clone();
                let write = !matches!(
                    method,
                    http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
                );
                if write && !handle.may_act() {
                    return Err(kube::Error::Service(Box::new(NotLeading {
                        path: req.uri().path().to_owned(),
                        method,
                    })));
                }
                if !write || !handle.ledger.recording() {
                    return client.send(req).await;
                }
                // read on this task (the reconcile's), before the request
                let reconciling = crate::consistency::current_key(&handle.ledger);
                let path = req.uri().path().to_owned();
                let response = client.send(req).await?;
                crate::consistency::record_response(
                    &handle.ledger,
                    reconciling,
                    &method,
                    &path,
                    response,
                )
                .await
            }
        });
        kube::Client::new(service, namespace)
    }
}

/// A write refused by a [`ControllerHandle::fenced_client`]: this replica
/// does not lead (or its lease may already have been taken over).
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: {method} {path}: this replica is not the leader (or its renew deadline passed), so another replica may be acting"
)]
pub struct NotLeading {
    /// The request's method.
    pub method: http::Method,
    /// The request's path.
    pub path: String,
}
