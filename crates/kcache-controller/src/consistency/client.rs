//! Recording the controller's writes: the reconcile a write is made in (a
//! task-local the workers set), and reading a write's response to record
//! what it returned.

use std::future::Future;
use std::sync::Arc;

use http_body_util::{BodyExt as _, Limited};
use kube::client::Body;

use super::ledger::WriteLedger;

/// The largest write response read to be recorded: an object the
/// apiserver stores is at most 1.5 MiB (etcd's default request limit), so
/// a larger answer is not an object.
pub(crate) const MAX_RECORDED_RESPONSE: usize = 16 << 20;

/// The reconcile running on this task: which controller's, which key.
#[derive(Clone)]
struct Reconciling {
    ledger: usize,
    key: Arc<str>,
}

tokio::task_local! {
    static RECONCILING: Reconciling;
}

fn id(ledger: &WriteLedger) -> usize {
    std::ptr::from_ref(ledger) as usize
}

/// Runs `f` (a reconcile of `key`) so that the writes it makes through
/// the controller's client are recorded for `key`.
pub(crate) async fn reconciling<F: Future>(ledger: &WriteLedger, key: &str, f: F) -> F::Output {
    let scope = Reconciling {
        ledger: id(ledger),
        key: Arc::from(key),
    };
    RECONCILING.scope(scope, f).await
}

/// The key of the reconcile of `ledger`'s controller running on this task.
pub(crate) fn current_key(ledger: &WriteLedger) -> Option<Arc<str>> {
    RECONCILING
        .try_with(|r| (r.ledger == id(ledger)).then(|| r.key.clone()))
        .ok()
        .flatten()
}

/// Whether `response` answers a write with an object worth recording.
fn recordable(response: &http::Response<Body>) -> bool {
    response.status().is_success()
        && response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/json"))
}

/// A write's response (to a `method` request on `path`), recorded in `ledger` (for the reconcile of
/// `reconciling`, if it was made in one) and handed back unchanged. A body
/// that cannot be read fails the request, as it would have failed the
/// caller reading it.
pub(crate) async fn record_response(
    ledger: &WriteLedger,
    reconciling: Option<Arc<str>>,
    method: &http::Method,
    path: &str,
    response: http::Response<Body>,
) -> Result<http::Response<Body>, kube::Error> {
    if !recordable(&response) {
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let bytes = Limited::new(body, MAX_RECORDED_RESPONSE)
        .collect()
        .await
        .map_err(kube::Error::Service)?
        .to_bytes();
    ledger.record(reconciling.as_deref(), method, path, bytes.clone());
    Ok(http::Response::from_parts(parts, Body::from(bytes)))
}
