//! What the hello-operator tests share: the manifests.

use serde_json::Value;

/// The example's `manifests/` folder.
pub const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests");

/// The YAML documents of `manifests/<file>`, as JSON values (empty
/// documents left out).
pub fn yaml_docs(file: &str) -> Vec<Value> {
    kcache_testing::yaml_documents(format!("{MANIFESTS}/{file}"))
}
