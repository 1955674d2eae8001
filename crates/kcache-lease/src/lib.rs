//! Leader election and shard membership on `coordination.k8s.io/v1`
//! Leases, with client-go's semantics (`tools/leaderelection`): the
//! apiserver is the only coordination point.
//!
//! * [`LeaseTimings`]: lease duration, renew deadline and retry period,
//!   validated once by client-go's rules, shared by both protocols.
//! * [`LeaderElector`]: one active replica at a time ([`leader_election`]).
//! * [`Shard`]: every replica active on its share of the keys, handed over
//!   so that a key is never worked by two replicas at once ([`shard`]).
//! * [`LeaseLock`] and [`MembershipStore`](shard::MembershipStore): where
//!   the records live; [`KubeLeaseLock`] talks to the apiserver
//!   (kcache-controller's `KubeMembershipStore` does for membership, with
//!   an informer: this crate sits below the informer), and the `testing`
//!   feature adds in-memory ones ([`testing`]).
//!
//! kcache-controller composes this crate (`Controller::leader_election`,
//! `Controller::sharded`); it can also be used on its own:
//!
//! ```no_run
//! use std::sync::Arc;
//! use kcache_lease::{KubeLeaseLock, LeaderCallbacks, LeaderElectionConfig, LeaderElector};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let lock = KubeLeaseLock::new(client, "kube-system", "my-controller");
//! let elector = LeaderElector::new(LeaderElectionConfig::new("pod-a"), Arc::new(lock))?;
//! let lost = elector
//!     .run(
//!         CancellationToken::new(),
//!         LeaderCallbacks {
//!             on_started_leading: Box::new(|leading| {
//!                 // work until `leading` is cancelled
//!                 tokio::spawn(async move { leading.cancelled().await });
//!             }),
//!             ..LeaderCallbacks::default()
//!         },
//!     )
//!     .await;
//! assert!(lost, "run returns when leadership is lost (or when cancelled)");
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod leader_election;
pub mod resource_lock;
pub mod shard;
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod timings;

pub use leader_election::{
    LeaderCallbacks, LeaderElectionConfig, LeaderElectionConfigError, LeaderElector, LeaderStatus,
    NewLeaderFn,
};
pub use resource_lock::{KubeLeaseLock, LeaderElectionRecord, LeaseError, LeaseLock};
pub use shard::{Shard, ShardConfig, ShardConfigError, ShardError};
pub use timings::{JITTER_FACTOR, LeaseTimings, LeaseTimingsError};
