//! A port of [k8s.io/sample-controller](https://github.com/kubernetes/sample-controller)
//! on kcache.
//!
//! For every [`Foo`] (`samplecontroller.k8s.io/v1alpha1`; spec
//! `deploymentName` and `replicas`) the controller keeps a Deployment of
//! that name, controlled by the Foo (ownerReference with `controller:
//! true`), with that many replicas, and copies the Deployment's
//! `availableReplicas` into the Foo's status. It records events
//! (`events.k8s.io/v1`), warns with `ErrResourceExists` when the name is
//! taken by a Deployment it does not control, and deletes the Deployment
//! through a finalizer when the Foo is deleted (so it works without a
//! garbage collector).
//!
//! [`simulator`] is a stand-in for the Deployment controller of a real
//! cluster (the local control plane has none): it sets a Deployment's
//! status as if all its replicas were available.

// The custom resource of k8s.io/sample-controller is called Foo.
#![allow(clippy::disallowed_names)]

pub mod cli;
pub mod controller;
pub mod crd;
pub mod local;
pub mod replica;
pub mod simulator;

pub use controller::{Context, Error, FINALIZER, build_controller, reconcile};
pub use crd::{Foo, FooSpec, FooStatus};
pub use local::{LocalOptions, Observed, Running, observe, start_local};
pub use replica::{Replica, ReplicaConfig, Sharding, counting_client, start_replica};

/// The CRDs this crate defines, for `cargo xtask codegen` (file name,
/// definition).
pub fn crds() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![("samplecontroller.k8s.io_foos.yaml", foo_crd())]
}

/// The Foo CRD, with the approval annotation that `*.k8s.io` groups need
/// (the same one k8s.io/sample-controller carries).
pub fn foo_crd() -> CustomResourceDefinition {
    use kube::CustomResourceExt as _;
    let mut crd = Foo::crd();
    crd.metadata.annotations.get_or_insert_default().insert(
        "api-approved.kubernetes.io".to_owned(),
        "unapproved, experimental-only; please get an approval from Kubernetes API reviewers if you're trying to develop a CRD in the *.k8s.io or *.kubernetes.io groups".to_owned(),
    );
    crd
}

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
