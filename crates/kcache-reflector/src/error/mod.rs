//! Typed errors: what went wrong, and what to do about it.
//!
//! This module holds the error types a reflector reports
//! ([`ReflectorError`], its metrics label [`ErrorReason`], [`Operation`],
//! [`TimeoutPhase`], [`BadEvent`], [`ListBodyError`]); `api` holds the
//! apiserver's `Status` answer ([`ApiError`]) and its wire decode,
//! `chain` the error-chain tests (a refused connection, a probable end
//! of stream), `truncated` the bounded display of server-provided text.

use std::fmt;

use kcache_core::protobuf::WireError;
use kcache_core::{BoxError, ObjectError, StoreError};

mod api;
mod chain;
#[cfg(test)]
mod tests;
mod truncated;

pub use api::ApiError;
pub(crate) use api::StatusWire;
pub(crate) use chain::{is_connection_refused, is_probable_eof};
pub(crate) use truncated::Truncated;

/// The annotation a streaming list's last bookmark carries.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// How many bytes of a server-provided message ([`ApiError::message`])
/// the `Display` of an error shows; the rest is cut, with a note of the
/// full length. The field itself keeps the whole message.
pub const MAX_DISPLAYED_MESSAGE: usize = 512;

/// How many bytes of an error a reflector's log line shows.
pub(crate) const MAX_LOGGED_ERROR: usize = 2048;

/// What a reflector was doing when an error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Operation {
    /// A (paged) list.
    List,
    /// A watch.
    Watch,
    /// A streaming list (watch with `sendInitialEvents=true`).
    WatchList,
    /// A periodic resync.
    Resync,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::List => "list",
            Operation::Watch => "watch",
            Operation::WatchList => "streaming list",
            Operation::Resync => "resync",
        })
    }
}

/// What a request was waiting for when it timed out (see
/// [`RequestTimeouts`](crate::RequestTimeouts)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeoutPhase {
    /// The response headers of a LIST page, a watch or a streaming list.
    ResponseHeaders,
    /// The next byte of a LIST page body (the body stalled).
    ListBodyIdle,
    /// The end of a LIST page body (it kept trickling).
    ListBody,
}

impl TimeoutPhase {
    /// The [`RequestTimeouts`](crate::RequestTimeouts) setting that bounds
    /// this phase.
    pub fn setting(self) -> &'static str {
        match self {
            TimeoutPhase::ResponseHeaders => "response_headers",
            TimeoutPhase::ListBodyIdle => "list_body_idle",
            TimeoutPhase::ListBody => "list_body",
        }
    }
}

impl fmt::Display for TimeoutPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutPhase::ResponseHeaders => "the response headers",
            TimeoutPhase::ListBodyIdle => "the next byte of the list body",
            TimeoutPhase::ListBody => "the end of the list body",
        })
    }
}

/// Why a watch event was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BadEventKind {
    /// The line is not a watch event (`{"type":...,"object":...}`).
    Undecodable,
    /// The event's object has no usable metadata (no name, wrong types...).
    InvalidObject,
    /// The object's kind or apiVersion is not the reflector's.
    WrongKind,
    /// The event type is not ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
    UnknownType,
}

impl fmt::Display for BadEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BadEventKind::Undecodable => "undecodable event",
            BadEventKind::InvalidObject => "object without valid metadata",
            BadEventKind::WrongKind => "object of an unexpected kind",
            BadEventKind::UnknownType => "unknown event type",
        })
    }
}

/// A watch event (or list item) that was reported and skipped.
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {detail} (skipped; the reflector keeps running)")]
pub struct BadEvent {
    /// What was wrong.
    pub kind: BadEventKind,
    /// Details (the decode error, the kinds...).
    pub detail: String,
    /// The underlying object error, if any.
    #[source]
    pub source: Option<ObjectError>,
}

/// Why a list body is not a valid list.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListBodyError {
    /// A JSON list body: malformed JSON (the envelope, or an item), or not
    /// a list.
    #[error(transparent)]
    Json(serde_json::Error),
    /// A protobuf list body: a malformed envelope or list message, or not
    /// a list (an item's own bytes do not fail the page: a bad item is
    /// skipped, as its length prefix still says where the next one starts).
    #[error("protobuf: {0}")]
    Protobuf(WireError),
    /// A CBOR list body: malformed CBOR (the envelope, or an item that is
    /// not one well-formed data item), or not a list.
    #[error("CBOR: {0}")]
    Cbor(kcache_core::cbor::CborError),
}

impl From<kcache_core::cbor::CborError> for ListBodyError {
    fn from(e: kcache_core::cbor::CborError) -> Self {
        ListBodyError::Cbor(e)
    }
}

impl From<serde_json::Error> for ListBodyError {
    fn from(e: serde_json::Error) -> Self {
        ListBodyError::Json(e)
    }
}

impl From<WireError> for ListBodyError {
    fn from(e: WireError) -> Self {
        ListBodyError::Protobuf(e)
    }
}

/// An error a reflector reports to its watch-error handler.
///
/// The reflector handles every error itself (relist, rewatch, backoff: see
/// the crate docs); the handler is for logging, metrics and alerting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReflectorError {
    /// The apiserver answered with a failure Status.
    ///
    /// The Status is the apiserver's answer rather than an underlying
    /// cause: it is shown in the message (with what to do), not as a
    /// `source`, so a handler that prints the error sees the code.
    #[error("{op} {resource} failed: {error}")]
    Api {
        /// What was being done.
        op: Operation,
        /// The resource (`kind` or `plural`, with namespace).
        resource: String,
        /// The Status (shown in the message, not as a source).
        error: ApiError,
    },
    /// The request could not be sent or got no response (connection
    /// refused, TLS, auth plugin...).
    #[error(
        "{op} {resource}: request failed (check connectivity and credentials; the reflector retries with backoff)"
    )]
    Transport {
        /// What was being done.
        op: Operation,
        /// The resource.
        resource: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Reading a response body failed.
    #[error("{op} {resource}: reading the response failed (the reflector retries)")]
    Body {
        /// What was being done.
        op: Operation,
        /// The resource.
        resource: String,
        /// The body error.
        #[source]
        source: BoxError,
    },
    /// A list response was not a valid list (in its format).
    #[error("list {resource}: invalid list body (is the URL right? the reflector retries)")]
    InvalidList {
        /// The resource.
        resource: String,
        /// The decode error.
        #[source]
        source: ListBodyError,
    },
    /// A watch event or list item was skipped.
    #[error("{op} {resource}: skipped an event or list item")]
    BadEvent {
        /// What was being done.
        op: Operation,
        /// The resource.
        resource: String,
        /// What was wrong.
        #[source]
        source: BadEvent,
    },
    /// The store refused a write; the reflector logs it and goes on (a
    /// failed `replace` makes it relist).
    #[error(
        "{op} {resource}: the store refused a write (a failed replace makes the reflector relist)"
    )]
    Store {
        /// What was being done.
        op: Operation,
        /// The resource.
        resource: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// A watch ended in under a second without any event: treated as an
    /// error, the reflector relists after a backoff.
    #[error(
        "{op} {resource}: very short watch: the watch closed in under a second with no events (the reflector relists after a backoff)"
    )]
    VeryShortWatch {
        /// What was being done.
        op: Operation,
        /// The resource.
        resource: String,
    },
    /// No byte arrived on a watch for longer than the idle limit (a
    /// stalled connection): the watch was abandoned and is re-opened from
    /// the last resourceVersion.
    #[error(
        "{op} {resource}: no data for {idle:?}: the watch connection stalled (the reflector opens a new watch; set `watch_idle_timeout` to detect this sooner)"
    )]
    WatchStalled {
        /// What was being done.
        op: Operation,
        /// The resource.
        resource: String,
        /// The idle limit that was exceeded.
        idle: std::time::Duration,
    },
    /// A watch line exceeded the maximum event size.
    #[error(
        "{op} {resource}: watch event larger than {limit} bytes (raise `max_event_size`; the reflector relists)"
    )]
    EventTooLarge {
        /// What was being done.
        op: Operation,
        /// The resource.
        resource: String,
        /// The configured limit.
        limit: usize,
    },
    /// A request missed a deadline of
    /// [`RequestTimeouts`](crate::RequestTimeouts): no response headers,
    /// or a LIST page body that stalled or took too long. The reflector
    /// retries as after any failed request: a relist after a backoff step.
    #[error(
        "{op} {resource}: timed out after {after:?} waiting for {phase}: the apiserver or the connection stalled (the reflector retries with backoff; if the apiserver is only slow, raise `RequestTimeouts::{}`)",
        phase.setting()
    )]
    Timeout {
        /// What was being done.
        op: Operation,
        /// The resource.
        resource: String,
        /// What the request was waiting for.
        phase: TimeoutPhase,
        /// The deadline that passed.
        after: std::time::Duration,
    },
    /// A LIST page body was larger than the cap; it was not read further.
    #[error(
        "list {resource}: a list page is larger than {limit} bytes (raise `max_list_page_bytes` on the reflector builder if the collection really is that large; the reflector relists after a backoff)"
    )]
    ListPageTooLarge {
        /// The resource.
        resource: String,
        /// The cap ([`Limits::max_list_page_bytes`](crate::Limits::max_list_page_bytes)).
        limit: usize,
    },
    /// The objects a streaming list buffered before its initial-events-end
    /// bookmark add up to more than the cap; the stream was abandoned.
    #[error(
        "streaming list {resource}: the initial events add up to more than {limit} bytes (raise `max_initial_events_bytes` on the reflector builder if the collection really is that large; the reflector relists after a backoff)"
    )]
    InitialEventsTooLarge {
        /// The resource.
        resource: String,
        /// The cap ([`Limits::max_initial_events_bytes`](crate::Limits::max_initial_events_bytes)).
        limit: usize,
    },
    /// The apiserver rejected the reflector's shard selector (`500 invalid
    /// shard selector`, or a `400`/`422` naming it). Not transient: the
    /// reflector retries with backoff, but only a fixed selector (or an
    /// apiserver that accepts its syntax) helps.
    #[error(
        "{op} {resource}: the apiserver rejected the shard selector `{}`: {} {} (build the selector with kcache_core::ShardSelector and check that the apiserver supports server-side sharding (Kubernetes 1.36+); the reflector retries with backoff)",
        Truncated(.selector.as_str(), 512),
        .error.code,
        Truncated(.error.message.as_str(), MAX_DISPLAYED_MESSAGE)
    )]
    ShardSelectorRejected {
        /// What was being done.
        op: Operation,
        /// The resource.
        resource: String,
        /// The selector sent, in the apiserver's syntax.
        selector: String,
        /// The apiserver's Status (shown in the message, not as a source).
        error: Box<ApiError>,
    },
    /// The request could not be built (invalid selector or parameters).
    #[error("{resource}: cannot build the request (fix the reflector's configuration)")]
    Request {
        /// The resource.
        resource: String,
        /// kube's request error.
        #[source]
        source: kube::core::request::Error,
    },
}

/// The reason label of the errors counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorReason {
    /// 410 Gone / Expired.
    Expired,
    /// "Too large resource version".
    TooLargeResourceVersion,
    /// 429.
    TooManyRequests,
    /// 401/403.
    Forbidden,
    /// Any other API Status.
    Api,
    /// Connection or client failure.
    Transport,
    /// Reading a body failed.
    Body,
    /// Invalid list body.
    InvalidList,
    /// Skipped event.
    BadEvent,
    /// Store error.
    Store,
    /// Very short watch.
    VeryShortWatch,
    /// A watch stalled (no data past the idle limit).
    WatchStalled,
    /// Event too large.
    EventTooLarge,
    /// Request build failure.
    Request,
    /// A request missed a deadline ([`ReflectorError::Timeout`]).
    Timeout,
    /// A LIST page over the cap.
    ListPageTooLarge,
    /// A streaming list's initial events over the cap.
    InitialEventsTooLarge,
}

impl ErrorReason {
    /// Every reason, in label order.
    pub const ALL: [ErrorReason; 17] = [
        ErrorReason::Expired,
        ErrorReason::TooLargeResourceVersion,
        ErrorReason::TooManyRequests,
        ErrorReason::Forbidden,
        ErrorReason::Api,
        ErrorReason::Transport,
        ErrorReason::Body,
        ErrorReason::InvalidList,
        ErrorReason::BadEvent,
        ErrorReason::Store,
        ErrorReason::VeryShortWatch,
        ErrorReason::WatchStalled,
        ErrorReason::EventTooLarge,
        ErrorReason::Request,
        ErrorReason::Timeout,
        ErrorReason::ListPageTooLarge,
        ErrorReason::InitialEventsTooLarge,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorReason::Expired => "expired",
            ErrorReason::TooLargeResourceVersion => "too_large_resource_version",
            ErrorReason::TooManyRequests => "too_many_requests",
            ErrorReason::Forbidden => "forbidden",
            ErrorReason::Api => "api_error",
            ErrorReason::Transport => "transport",
            ErrorReason::Body => "body",
            ErrorReason::InvalidList => "invalid_list",
            ErrorReason::BadEvent => "bad_event",
            ErrorReason::Store => "store",
            ErrorReason::VeryShortWatch => "very_short_watch",
            ErrorReason::WatchStalled => "watch_stalled",
            ErrorReason::EventTooLarge => "event_too_large",
            ErrorReason::Request => "request",
            ErrorReason::Timeout => "timeout",
            ErrorReason::ListPageTooLarge => "list_page_too_large",
            ErrorReason::InitialEventsTooLarge => "initial_events_too_large",
        }
    }

    pub(crate) fn index(self) -> usize {
        Self::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

impl ReflectorError {
    /// The API Status, if the apiserver answered with one.
    pub fn api_error(&self) -> Option<&ApiError> {
        match self {
            ReflectorError::Api { error, .. } => Some(error),
            ReflectorError::ShardSelectorRejected { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The reason label for metrics.
    pub fn reason(&self) -> ErrorReason {
        match self {
            ReflectorError::Api { error, .. } => {
                if error.is_expired() {
                    ErrorReason::Expired
                } else if error.is_too_large_resource_version() {
                    ErrorReason::TooLargeResourceVersion
                } else if error.is_too_many_requests() {
                    ErrorReason::TooManyRequests
                } else if error.is_forbidden() || error.code == 401 {
                    ErrorReason::Forbidden
                } else {
                    ErrorReason::Api
                }
            }
            // under the existing label: a shard selector is an API error
            ReflectorError::ShardSelectorRejected { .. } => ErrorReason::Api,
            ReflectorError::Transport { .. } => ErrorReason::Transport,
            ReflectorError::Body { .. } => ErrorReason::Body,
            ReflectorError::InvalidList { .. } => ErrorReason::InvalidList,
            ReflectorError::BadEvent { .. } => ErrorReason::BadEvent,
            ReflectorError::Store { .. } => ErrorReason::Store,
            ReflectorError::VeryShortWatch { .. } => ErrorReason::VeryShortWatch,
            ReflectorError::WatchStalled { .. } => ErrorReason::WatchStalled,
            ReflectorError::EventTooLarge { .. } => ErrorReason::EventTooLarge,
            ReflectorError::Request { .. } => ErrorReason::Request,
            ReflectorError::Timeout { .. } => ErrorReason::Timeout,
            ReflectorError::ListPageTooLarge { .. } => ErrorReason::ListPageTooLarge,
            ReflectorError::InitialEventsTooLarge { .. } => ErrorReason::InitialEventsTooLarge,
        }
    }

    /// Expired / Gone.
    pub fn is_expired(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_expired)
    }

    /// "Too large resource version".
    pub fn is_too_large_resource_version(&self) -> bool {
        self.api_error()
            .is_some_and(ApiError::is_too_large_resource_version)
    }

    /// 429.
    pub fn is_too_many_requests(&self) -> bool {
        self.api_error().is_some_and(ApiError::is_too_many_requests)
    }

    /// A connection-refused failure to send the request.
    pub fn is_connection_refused(&self) -> bool {
        match self {
            ReflectorError::Transport { source, .. } => is_connection_refused(source),
            _ => false,
        }
    }

    /// How long the server asked to wait before a retry (`Retry-After` of
    /// an API error answer, e.g. a 429 from a consistent LIST that the
    /// watch cache cannot serve yet).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.api_error().and_then(|e| e.retry_after)
    }

    /// client-go's `isWatchErrorRetriable`: connection refused or 429 when
    /// opening a watch means "back off and watch again", without a relist.
    pub fn is_watch_retriable(&self) -> bool {
        self.is_connection_refused() || self.is_too_many_requests()
    }
}
