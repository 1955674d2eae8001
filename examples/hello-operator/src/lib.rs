//! **hello-operator**: the operator of
//! [docs/getting-started.md](https://github.com/kcache/kcache/blob/main/docs/getting-started.md).
//!
//! A [`Greeting`] (`demo.kcache.dev/v1`, spec `name` and optional
//! `greeting`) asks for a ConfigMap `<greeting>-greeting` holding
//! `message: "Hello, world!"`. The operator creates and updates that
//! ConfigMap (controlled by the Greeting), writes the Greeting's status,
//! records events, holds a finalizer that deletes the ConfigMap when the
//! Greeting is deleted, runs under leader election and serves `/healthz`,
//! `/readyz` and `/metrics`.
//!
//! | module | what it is |
//! |---|---|
//! | [`crd`] | the `Greeting` custom resource |
//! | [`reconcile`] | the reconciler: ConfigMap, status, events, finalizer |
//! | [`run`](mod@run) | wiring: factory, controller, leader election, probes |
//! | [`recipes`] | compiled recipes of the guide (cross-namespace children, same type primary and watched, indexes) |
//!
//! `manifests/` holds the CRD, the RBAC (exactly what the operator uses;
//! `tests/operator.rs` runs the operator as the ServiceAccount bound by it)
//! and the Deployment.

pub mod crd;
pub mod recipes;
pub mod reconcile;
pub mod run;

pub use crd::{Greeting, GreetingSpec, GreetingStatus, crd_yaml};
pub use reconcile::{Context, Error, FINALIZER, NAME, reconcile};
pub use run::{Settings, run};
