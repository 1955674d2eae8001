//! Test support for the kcache workspace (not published).
//!
//! - [`fake`]: one scripted fake apiserver behind a `kube::Client` (a test
//!   queues list pages, watch events, errors, raw or protobuf bodies per
//!   request and inspects the requests received), and [`fake::FakeApi`], a
//!   stateful ConfigMap apiserver on it.
//! - [`builders`]: ConfigMap, Secret, Pod, Deployment and Lease builders.
//! - [`eventually()`]: wait for a condition, panic naming what was awaited.
//! - [`logs`]: capture what the code under test logs.
//! - [`envtest`]: a namespace on the shared local control plane.
//! - [`state`]: key -> resourceVersion maps of a server and a cache.
//! - [`raw_http`]: one plain HTTP request, for kcache's own endpoints.
//! - [`yaml_documents`]: the documents of a manifest file.
//! - [`proc_status_kib`]: this process's RSS or peak RSS (`/proc/self/status`).
//!
//! It sits low in the dependency graph (kcache-core and kcache-envtest
//! only), so the tests of every crate can use it without a cycle.
//!
//! ```
//! use kcache_testing::fake::{Fake, Reply, End, cm, ev, list};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // the first list returns one ConfigMap at rv 5; every watch sends one
//! // event and closes
//! let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
//!     (false, _) => list("5", "", vec![cm("a", "5")]),
//!     (true, _) => Reply::Stream(vec![ev("ADDED", cm("b", "6"))], End::Close),
//! });
//! let req = http::Request::get("/api/v1/namespaces/ns/configmaps")
//!     .body(Vec::new())
//!     .unwrap();
//! let page: serde_json::Value = fake.client.request(req).await.unwrap();
//! assert_eq!(page["metadata"]["resourceVersion"], "5");
//! assert_eq!(fake.lists().len(), 1);
//! # }
//! ```
#![deny(missing_docs)]

pub mod builders;
pub mod envtest;
mod eventually;
pub mod fake;
pub mod logs;
pub mod raw_http;
pub mod state;

pub use eventually::{count_reaches, eventually, eventually_async, eventually_ok};

use serde::Deserialize as _;

/// A field of this process's `/proc/self/status` (`VmRSS`: resident set
/// now, `VmHWM`: peak), in KiB; 0 where unknown (not Linux, no such field).
///
/// ```
/// let rss = kcache_testing::proc_status_kib("VmRSS");
/// assert!(cfg!(not(target_os = "linux")) || rss > 0);
/// assert_eq!(kcache_testing::proc_status_kib("NoSuchField"), 0);
/// ```
pub fn proc_status_kib(field: &str) -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The documents of a multi-document YAML file (manifests), as JSON
/// values, empty documents skipped. Panics naming the file if it cannot be
/// read or parsed.
pub fn yaml_documents(path: impl AsRef<std::path::Path>) -> Vec<serde_json::Value> {
    let path = path.as_ref();
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            serde_json::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("YAML in {}: {e}", path.display()))
        })
        .filter(|v| !v.is_null())
        .collect()
}
