//! What the hello-operator tests share: the manifests.

use serde::Deserialize as _;
use serde_json::Value;

/// The example's `manifests/` folder.
pub const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests");

/// The YAML documents of `manifests/<file>`, as JSON values (empty
/// documents left out).
pub fn yaml_docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{MANIFESTS}/{file}")).expect("manifest");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}
