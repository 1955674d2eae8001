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
//! - [`raw_http`]: one plain HTTP request, for kcache's own endpoints.
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
#![warn(missing_docs)]

pub mod builders;
pub mod envtest;
mod eventually;
pub mod fake;
pub mod logs;
pub mod raw_http;

pub use eventually::{eventually, eventually_async, eventually_ok};
