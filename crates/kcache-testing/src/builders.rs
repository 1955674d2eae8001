//! Object builders: a name, then metadata setters and a few per-kind
//! setters, then [`Builder::build`] (the typed object) or
//! [`Builder::json`] (its JSON with `apiVersion` and `kind`, as the
//! apiserver serves it).
//!
//! ```
//! use kcache_testing::builders::config_map;
//! let cm = config_map("a").namespace("ns").resource_version("7").data("k", "v").build();
//! assert_eq!(cm.metadata.resource_version.as_deref(), Some("7"));
//! assert_eq!(config_map("a").json()["kind"], "ConfigMap");
//! ```

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, PodTemplateSpec, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Resource;
use serde::Serialize;
use serde_json::Value;

/// An object under construction.
#[derive(Clone, Debug)]
pub struct Builder<K> {
    obj: K,
}

fn named<K: Resource + Default>(name: &str) -> Builder<K> {
    let mut obj = K::default();
    obj.meta_mut().name = Some(name.to_owned());
    Builder { obj }
}

/// A ConfigMap named `name`.
pub fn config_map(name: &str) -> Builder<ConfigMap> {
    named(name)
}

/// A Secret named `name`.
pub fn secret(name: &str) -> Builder<Secret> {
    named(name)
}

/// A Pod named `name` with one container `main` (image `busybox`).
pub fn pod(name: &str) -> Builder<Pod> {
    let mut b: Builder<Pod> = named(name);
    b.obj.spec = Some(PodSpec {
        containers: vec![container("main", "busybox")],
        ..PodSpec::default()
    });
    b
}

/// A Deployment named `name`: one replica of a container `main` (image
/// `busybox`), selecting and labelling its pods `app=<name>`.
pub fn deployment(name: &str) -> Builder<Deployment> {
    let mut b: Builder<Deployment> = named(name);
    let labels = BTreeMap::from([("app".to_owned(), name.to_owned())]);
    b.obj.spec = DeploymentSpec {
        replicas: Some(1),
        selector: LabelSelector {
            match_labels: Some(labels.clone()),
            ..LabelSelector::default()
        },
        template: PodTemplateSpec {
            metadata: Some(kube::api::ObjectMeta {
                labels: Some(labels),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![container("main", "busybox")],
                ..PodSpec::default()
            }),
        },
        ..DeploymentSpec::default()
    };
    b
}

/// A Lease named `name` with an empty spec.
pub fn lease(name: &str) -> Builder<Lease> {
    let mut b: Builder<Lease> = named(name);
    b.obj.spec = Some(LeaseSpec::default());
    b
}

/// A namespaced CustomResourceDefinition `<plural>.<group>` of kind `kind`,
/// one version `v1` (served, stored) validated by `schema` (an
/// `openAPIV3Schema`).
pub fn crd(group: &str, kind: &str, plural: &str, schema: Value) -> CustomResourceDefinition {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": format!("{plural}.{group}") },
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": { "plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                       "listKind": format!("{kind}List") },
            "versions": [{ "name": "v1", "served": true, "storage": true,
                           "schema": { "openAPIV3Schema": schema } }]
        }
    }))
    .expect("a valid CustomResourceDefinition")
}

fn container(name: &str, image: &str) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(image.to_owned()),
        ..Container::default()
    }
}

impl<K: Resource<DynamicType = ()> + Serialize> Builder<K> {
    /// Sets the namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.obj.meta_mut().namespace = Some(ns.to_owned());
        self
    }
    /// Adds a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        let labels = self.obj.meta_mut().labels.get_or_insert_default();
        labels.insert(key.to_owned(), value.to_owned());
        self
    }
    /// Adds an annotation.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        let annotations = self.obj.meta_mut().annotations.get_or_insert_default();
        annotations.insert(key.to_owned(), value.to_owned());
        self
    }
    /// Sets the resourceVersion.
    pub fn resource_version(mut self, rv: &str) -> Self {
        self.obj.meta_mut().resource_version = Some(rv.to_owned());
        self
    }
    /// Sets the uid.
    pub fn uid(mut self, uid: &str) -> Self {
        self.obj.meta_mut().uid = Some(uid.to_owned());
        self
    }
    /// Adds a finalizer.
    pub fn finalizer(mut self, finalizer: &str) -> Self {
        let finalizers = self.obj.meta_mut().finalizers.get_or_insert_default();
        finalizers.push(finalizer.to_owned());
        self
    }
    /// Changes the object in place (for fields without a setter).
    pub fn with(mut self, f: impl FnOnce(&mut K)) -> Self {
        f(&mut self.obj);
        self
    }
    /// The object.
    pub fn build(self) -> K {
        self.obj
    }
    /// The object's JSON, with `apiVersion` and `kind`.
    pub fn json(self) -> Value {
        let mut v = serde_json::to_value(&self.obj).expect("a k8s-openapi object serializes");
        v["apiVersion"] = Value::from(K::api_version(&()).into_owned());
        v["kind"] = Value::from(K::kind(&()).into_owned());
        v
    }
}

impl Builder<ConfigMap> {
    /// Adds a data entry.
    pub fn data(mut self, key: &str, value: &str) -> Self {
        let data = self.obj.data.get_or_insert_default();
        data.insert(key.to_owned(), value.to_owned());
        self
    }
}

impl Builder<Secret> {
    /// Adds a (binary) data entry.
    pub fn data(mut self, key: &str, value: &[u8]) -> Self {
        let data = self.obj.data.get_or_insert_default();
        data.insert(key.to_owned(), ByteString(value.to_vec()));
        self
    }
    /// Adds a `stringData` entry.
    pub fn string_data(mut self, key: &str, value: &str) -> Self {
        let data = self.obj.string_data.get_or_insert_default();
        data.insert(key.to_owned(), value.to_owned());
        self
    }
}

impl Builder<Pod> {
    /// Sets the image of the first container.
    pub fn image(mut self, image: &str) -> Self {
        if let Some(c) = self
            .obj
            .spec
            .as_mut()
            .and_then(|s| s.containers.first_mut())
        {
            c.image = Some(image.to_owned());
        }
        self
    }
}

impl Builder<Lease> {
    /// Sets the holder identity.
    pub fn holder(mut self, holder: &str) -> Self {
        self.obj.spec.get_or_insert_default().holder_identity = Some(holder.to_owned());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_setters_and_json() {
        let v = config_map("a")
            .namespace("ns")
            .label("app", "x")
            .annotation("note", "y")
            .resource_version("3")
            .uid("u-1")
            .finalizer("f")
            .data("k", "v")
            .json();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["metadata"]["namespace"], "ns");
        assert_eq!(v["metadata"]["labels"]["app"], "x");
        assert_eq!(v["metadata"]["annotations"]["note"], "y");
        assert_eq!(v["metadata"]["resourceVersion"], "3");
        assert_eq!(v["metadata"]["uid"], "u-1");
        assert_eq!(v["metadata"]["finalizers"][0], "f");
        assert_eq!(v["data"]["k"], "v");
        assert_eq!(deployment("d").json()["apiVersion"], "apps/v1");
        assert_eq!(
            lease("l").holder("me").json()["spec"]["holderIdentity"],
            "me"
        );
        assert_eq!(
            pod("p").image("nginx").json()["spec"]["containers"][0]["image"],
            "nginx"
        );
        let s = secret("s")
            .data("b", b"\xff")
            .string_data("u", "admin")
            .build();
        assert_eq!(s.data.unwrap()["b"].0, b"\xff");
    }
}
