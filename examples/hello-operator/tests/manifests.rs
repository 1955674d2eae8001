//! The manifests match the code: the CRD is the one `Greeting` derives,
//! and the Deployment runs as the ServiceAccount of the RBAC manifest with
//! probes on the endpoint the operator serves.

use hello_operator::{NAME, crd_yaml};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use serde::Deserialize as _;
use serde_json::Value;

const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests");

fn docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{MANIFESTS}/{file}")).expect("manifest");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

fn of_kind<K: serde::de::DeserializeOwned>(file: &str, kind: &str) -> K {
    let doc = docs(file)
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("{file} has no {kind}"));
    serde_json::from_value(doc).expect("a valid object")
}

#[test]
fn crd_manifest_is_generated_from_the_code() {
    let file = std::fs::read_to_string(format!("{MANIFESTS}/crd.yaml")).expect("crd.yaml");
    assert!(
        file == crd_yaml().expect("CRD YAML"),
        "manifests/crd.yaml is stale: run `cargo run -p hello-operator -- crd > examples/hello-operator/manifests/crd.yaml`"
    );
}

#[test]
fn deployment_runs_as_the_rbac_service_account_with_probes() {
    let sa: ServiceAccount = of_kind("rbac.yaml", "ServiceAccount");
    let deployment: Deployment = of_kind("deployment.yaml", "Deployment");
    assert_eq!(sa.metadata.name.as_deref(), Some(NAME));
    assert_eq!(deployment.metadata.namespace, sa.metadata.namespace);
    let pod = deployment.spec.template.spec.expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
    let container = &pod.containers[0];
    let env: Vec<&str> = container
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect();
    for needed in ["POD_NAME", "POD_NAMESPACE", "PROBE_ADDR"] {
        assert!(env.contains(&needed), "{needed} not set: {env:?}");
    }
    let port = container.ports.iter().flatten().next().expect("a port");
    assert_eq!(port.container_port, 8080);
    let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(path(&container.liveness_probe).as_deref(), Some("/healthz"));
    assert_eq!(path(&container.readiness_probe).as_deref(), Some("/readyz"));
}

/// The lines of `path` (relative to the repository root) between
/// `// ANCHOR: name` and `// ANCHOR_END: name`, or the whole file.
fn quoted(spec: &str) -> String {
    let (path, anchor) = spec.split_once('#').unwrap_or((spec, ""));
    let text = std::fs::read_to_string(format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    if anchor.is_empty() {
        return text;
    }
    let start = format!("// ANCHOR: {anchor}");
    let end = format!("// ANCHOR_END: {anchor}");
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim() != start)
        .skip(1)
        .take_while(|l| l.trim() != end)
        .peekable();
    assert!(lines.peek().is_some(), "{path} has no anchor {anchor:?}");
    lines.map(|l| format!("{l}\n")).collect()
}

/// The `<!-- quote: path#anchor -->` blocks of `docs/<doc>`: (spec, body).
fn quotes(doc: &str) -> Vec<(String, String)> {
    let path = format!("{}/../../docs/{doc}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("docs/{doc}: {e}"));
    let mut lines = text.lines();
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        let Some(spec) = line
            .strip_prefix("<!-- quote: ")
            .and_then(|l| l.strip_suffix(" -->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "docs/{doc}: a code block after {line}"
        );
        let body: String = lines
            .by_ref()
            .take_while(|l| *l != "```")
            .map(|l| format!("{l}\n"))
            .collect();
        out.push((spec.to_owned(), body));
    }
    out
}

/// docs/getting-started.md and docs/from-kube-runtime.md quote the
/// example as it is: what they show compiles and is what the integration
/// test runs.
#[test]
fn guide_quotes_the_example() {
    for (doc, at_least) in [("getting-started.md", 10), ("from-kube-runtime.md", 4)] {
        let quotes = quotes(doc);
        assert!(
            quotes.len() >= at_least,
            "docs/{doc}: only {} quotes",
            quotes.len()
        );
        for (spec, body) in quotes {
            assert!(
                body.trim_end() == quoted(&spec).trim_end(),
                "docs/{doc} quotes {spec} as it no longer is: copy the file's current text into the block"
            );
        }
    }
}
