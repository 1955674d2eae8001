//! Retry control: errors that retrying cannot fix, and how reconcile
//! errors are described in logs.
//!
//! A reconcile that fails is retried through the rate limiter (per-key
//! exponential backoff). Some failures cannot get better by waiting: the
//! apiserver refused the object as invalid (422), the request was
//! malformed (400), the spec asks for something impossible. Return those as
//! a [`TerminalError`] (controller-runtime's `reconcile.TerminalError`):
//! the failure is logged and counted in
//! `controller_runtime_terminal_reconcile_errors_total`, the key's backoff
//! is reset, and the key is not retried; the next change of the object (or
//! of what it owns or watches) reconciles it again.
//!
//! ```
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kcache_controller::{Action, Request, TerminalError};
//! # async fn apply(_: &ConfigMap) -> Result<(), kube::Error> { Ok(()) }
//!
//! async fn reconcile(
//!     req: Request<ConfigMap>,
//!     _ctx: Arc<()>,
//! ) -> Result<Action, Box<dyn std::error::Error + Send + Sync>> {
//!     let Some(cm) = &req.object else { return Ok(Action::await_change()) };
//!     if cm.data.as_ref().is_some_and(|d| d.contains_key("bad")) {
//!         // no retry will make this valid
//!         return Err(TerminalError::new("data key \"bad\" is not allowed").into());
//!     }
//!     // a 400/422 answer from the apiserver becomes terminal, anything
//!     // else (a conflict, a timeout) is retried with backoff
//!     apply(cm).await.map_err(TerminalError::if_invalid)?;
//!     Ok(Action::await_change())
//! }
//! # fn check<R: kcache_controller::Reconciler<ConfigMap, ()>>(_: R) {}
//! # check(reconcile);
//! ```

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;

/// A boxed error, as reconcilers often return: kcache-core's, the one
/// `BoxError` of the workspace.
use kcache_core::BoxError;

/// A reconcile error that retrying cannot fix: counted, logged, not
/// retried (see the [module docs](self)).
///
/// The controller recognizes it when the reconciler's error type is
/// `TerminalError`, or a `Box<dyn Error + Send + Sync>` (or `+ Send`)
/// whose chain of sources contains one; a reconciler with its own error
/// type says which of its errors are terminal with
/// [`Reconciler::is_terminal`](crate::Reconciler::is_terminal).
#[derive(Debug)]
pub struct TerminalError {
    error: BoxError,
}

impl TerminalError {
    /// Marks `error` as terminal.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self {
            error: error.into(),
        }
    }

    /// `error` as a terminal error when the apiserver refused the request
    /// as invalid (400 BadRequest, 422 Invalid: retrying the same request
    /// gets the same answer), else `error` unchanged.
    pub fn if_invalid(error: kube::Error) -> BoxError {
        if is_invalid(&error) {
            Box::new(TerminalError::new(error))
        } else {
            Box::new(error)
        }
    }

    /// The error that was marked terminal.
    pub fn inner(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.error
    }
}

impl fmt::Display for TerminalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The wrapped error is printed here, once: `source()` does not
        // repeat it.
        f.write_str(&describe_std(&*self.error))
    }
}

impl StdError for TerminalError {}

impl From<kcache_core::DecodeError> for TerminalError {
    /// An object that does not decode into the reconciler's type will not
    /// decode better on a retry: `?` on a decode in a reconciler returning
    /// `TerminalError` (or boxing it) makes it terminal.
    fn from(e: kcache_core::DecodeError) -> Self {
        TerminalError::new(e)
    }
}

/// Whether the apiserver answered 400 BadRequest or 422 Invalid.
pub fn is_invalid(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 400 || s.code == 422)
}

/// Whether `error` is, or wraps, a [`TerminalError`] (for the error types
/// the controller can look into: `TerminalError` itself and boxed
/// `std::error::Error`s).
pub fn is_terminal_error<E: 'static>(error: &E) -> bool {
    let any = error as &dyn Any;
    if any.is::<TerminalError>() {
        return true;
    }
    let chain: Option<&(dyn StdError + 'static)> = any
        .downcast_ref::<BoxError>()
        .map(|b| &**b as &(dyn StdError + 'static))
        .or_else(|| {
            any.downcast_ref::<Box<dyn StdError + Send>>()
                .map(|b| &**b as &(dyn StdError + 'static))
        });
    let mut next = chain;
    while let Some(e) = next {
        if e.is::<TerminalError>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// A reconcile error as one log line: a Kubernetes Status answer as
/// `code Reason: message` (not kube's debug dump of the whole Status),
/// anything else as its text, with its sources.
pub(crate) fn describe<E: fmt::Display + 'static>(error: &E) -> String {
    let any = error as &dyn Any;
    if let Some(k) = any.downcast_ref::<kube::Error>() {
        return describe_kube(k);
    }
    if let Some(t) = any.downcast_ref::<TerminalError>() {
        return t.to_string();
    }
    if let Some(b) = any.downcast_ref::<BoxError>() {
        return describe_std(&**b);
    }
    error.to_string()
}

fn describe_kube(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                "Failure"
            } else {
                &s.reason
            };
            format!("{} {reason}: {}", s.code, s.message)
        }
        other => other.to_string(),
    }
}

/// An error and its sources, each described once (a Kubernetes Status
/// answer ends the chain: its description is complete).
fn describe_std(error: &(dyn StdError + 'static)) -> String {
    let mut out = String::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let (text, last) = match e.downcast_ref::<kube::Error>() {
            Some(k) => (describe_kube(k), true),
            None => (e.to_string(), false),
        };
        // Errors that print their source in their own message are not
        // repeated.
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        if last {
            break;
        }
        next = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": message, "reason": reason, "code": code});
        kube::Error::Api(serde_json::from_value(body).expect("a Status"))
    }

    #[test]
    fn terminal_errors_are_recognized_through_boxes_and_chains() {
        assert!(is_terminal_error(&TerminalError::new("bad spec")));
        let boxed: BoxError = TerminalError::new("bad spec").into();
        assert!(is_terminal_error(&boxed));
        let send_only: Box<dyn StdError + Send> = Box::new(TerminalError::new("bad spec"));
        assert!(is_terminal_error(&send_only));
        let plain: BoxError = "not terminal".into();
        assert!(!is_terminal_error(&plain));
        assert!(!is_terminal_error(&std::io::Error::other("io")));
        // a 422 is made terminal, a 409 is not
        assert!(is_terminal_error(&TerminalError::if_invalid(status(
            422,
            "Invalid",
            "spec.replicas: Invalid value"
        ))));
        assert!(!is_terminal_error(&TerminalError::if_invalid(status(
            409,
            "Conflict",
            "the object has been modified"
        ))));
    }

    #[test]
    fn status_errors_are_described_as_reason_and_message() {
        let e = status(
            422,
            "Invalid",
            "Deployment.apps \"x\" is invalid: spec.replicas: Invalid value: -1",
        );
        let text = describe(&e);
        assert_eq!(
            text,
            "422 Invalid: Deployment.apps \"x\" is invalid: spec.replicas: Invalid value: -1"
        );
        assert!(!text.contains("Status {"), "no debug dump: {text}");
        let boxed = TerminalError::if_invalid(e);
        assert_eq!(
            describe(&boxed),
            "422 Invalid: Deployment.apps \"x\" is invalid: spec.replicas: Invalid value: -1"
        );
    }
}
