//! Typed errors: what went wrong, and what to do about it.

use std::fmt;

use kcache_core::protobuf::WireError;
use kcache_core::{BoxError, ObjectError, StoreError};
use serde::Deserialize;

/// The annotation a streaming list's last bookmark carries.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// How many bytes of a server-provided message ([`ApiError::message`])
/// the `Display` of an error shows; the rest is cut, with a note of the
/// full length. The field itself keeps the whole message.
pub const MAX_DISPLAYED_MESSAGE: usize = 512;

/// How many bytes of an error a reflector's log line shows.
pub(crate) const MAX_LOGGED_ERROR: usize = 2048;

/// Displays at most `.1` bytes of what `.0` displays (cut at a character
/// boundary), then a note of the full length. Nothing beyond the kept part
/// is stored: a message of any size costs at most `.1` bytes to log.
pub(crate) struct Truncated<'a, T: ?Sized>(pub(crate) &'a T, pub(crate) usize);

impl<T: fmt::Display + ?Sized> fmt::Display for Truncated<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Cut {
            kept: String,
            room: usize,
            total: usize,
        }
        impl fmt::Write for Cut {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                self.total += s.len();
                if self.room > 0 {
                    let mut end = self.room.min(s.len());
                    while !s.is_char_boundary(end) {
                        end -= 1;
                    }
                    self.kept.push_str(&s[..end]);
                    // once something did not fit, keep nothing more
                    self.room = if end < s.len() { 0 } else { self.room - end };
                }
                Ok(())
            }
        }
        let mut cut = Cut {
            kept: String::new(),
            room: self.1,
            total: 0,
        };
        let _ = fmt::Write::write_fmt(&mut cut, format_args!("{}", self.0));
        f.write_str(&cut.kept)?;
        if cut.total > cut.kept.len() {
            write!(f, "... [cut: {} bytes in all]", cut.total)?;
        }
        Ok(())
    }
}

/// A `metav1.Status` failure the apiserver answered with (an HTTP error
/// status or an `ERROR` watch event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code (`code` of the Status, or the HTTP status).
    pub code: u16,
    /// Machine-readable reason (`Expired`, `Gone`, `Forbidden`, `TooManyRequests`...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The cause types of `details.causes` (e.g. `ResourceVersionTooLarge`).
    pub causes: Vec<String>,
}

/// A `metav1.Status` as serde reads it (from JSON or CBOR).
#[derive(Deserialize)]
pub(crate) struct StatusWire {
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    details: Option<DetailsWire>,
}

#[derive(Deserialize)]
struct DetailsWire {
    #[serde(default)]
    causes: Vec<CauseWire>,
}

#[derive(Deserialize)]
struct CauseWire {
    #[serde(default, rename = "reason")]
    reason: Option<String>,
}

impl ApiError {
    /// Builds the error from a `Status` body in any format the reflector
    /// reads: JSON, protobuf (`k8s\0` + `runtime.Unknown` holding a
    /// `Status`) or CBOR (what the apiserver answers to a request that
    /// accepts them), told by its first bytes. `http_status` is used when
    /// the body has no code, and a body that is not a Status becomes the
    /// message.
    pub fn from_status_bytes(http_status: Option<u16>, body: &[u8]) -> Self {
        crate::codec::status(http_status, body)
    }

    /// A JSON `Status` body (or any body: a body that is not a Status
    /// becomes the message).
    pub(crate) fn from_json_status(http_status: Option<u16>, body: &[u8]) -> Self {
        match serde_json::from_slice::<StatusWire>(body) {
            Ok(s) => Self::from_status_wire(http_status, s),
            Err(_) => {
                let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
                ApiError {
                    code: http_status.unwrap_or(500),
                    reason: String::new(),
                    message: text,
                    causes: Vec::new(),
                }
            }
        }
    }

    /// The error a decoded `Status` says.
    pub(crate) fn from_status_wire(http_status: Option<u16>, s: StatusWire) -> Self {
        ApiError {
            code: s.code.filter(|c| *c != 0).or(http_status).unwrap_or(500),
            reason: s.reason.unwrap_or_default(),
            message: s.message.unwrap_or_default(),
            causes: s
                .details
                .map(|d| d.causes.into_iter().filter_map(|c| c.reason).collect())
                .unwrap_or_default(),
        }
    }

    /// `410 Gone` / reason `Expired` or `Gone`: the resourceVersion (or
    /// continue token) is older than what the server keeps.
    pub fn is_expired(&self) -> bool {
        self.code == 410 || self.reason == "Expired" || self.reason == "Gone"
    }

    /// "Too large resource version": the server (its watch cache) has not
    /// reached the requested resourceVersion yet.
    pub fn is_too_large_resource_version(&self) -> bool {
        if self.causes.iter().any(|c| c == "ResourceVersionTooLarge") {
            return true;
        }
        (self.code == 504 || self.reason == "Timeout")
            && self.message.contains("Too large resource version")
    }

    /// `429 Too Many Requests`.
    pub fn is_too_many_requests(&self) -> bool {
        self.code == 429 || self.reason == "TooManyRequests"
    }

    /// `500` / reason `InternalError`.
    pub fn is_internal_error(&self) -> bool {
        self.reason == "InternalError" || (self.code == 500 && self.reason.is_empty())
    }

    /// `403 Forbidden`.
    pub fn is_forbidden(&self) -> bool {
        self.code == 403 || self.reason == "Forbidden"
    }

    /// `400 BadRequest` / `422 Invalid`: what an apiserver that does not
    /// support a parameter (such as `sendInitialEvents`) answers.
    pub fn is_invalid(&self) -> bool {
        matches!(self.code, 400 | 422) || self.reason == "Invalid" || self.reason == "BadRequest"
    }

    fn hint(&self) -> &'static str {
        if self.is_expired() {
            "the resourceVersion is too old; the reflector relists"
        } else if self.is_too_large_resource_version() {
            "the server has not reached that resourceVersion; the reflector relists from the newest state"
        } else if self.is_too_many_requests() {
            "the server is throttling; the reflector backs off and retries"
        } else if self.is_forbidden() || self.code == 401 {
            "grant the client's user `list` and `watch` on this resource (RBAC); the reflector keeps retrying with backoff"
        } else if self.code == 404 {
            "the resource type is not served: check the group/version/plural (CRD installed?)"
        } else {
            "the reflector retries with backoff"
        }
    }
}

/// Shows the code, the reason and at most [`MAX_DISPLAYED_MESSAGE`] bytes
/// of the message (a Status message can be as large as a watch event), then
/// what the reflector does about it.
impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {} ({})",
            self.code,
            Truncated(self.reason.as_str(), 128),
            Truncated(self.message.as_str(), MAX_DISPLAYED_MESSAGE),
            self.hint()
        )
    }
}

impl std::error::Error for ApiError {}

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
        /// The cap ([`ListOptions::max_list_page_bytes`](crate::ListOptions::max_list_page_bytes)).
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
        /// The cap ([`ListOptions::max_initial_events_bytes`](crate::ListOptions::max_initial_events_bytes)).
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

    /// client-go's `isWatchErrorRetriable`: connection refused or 429 when
    /// opening a watch means "back off and watch again", without a relist.
    pub fn is_watch_retriable(&self) -> bool {
        self.is_connection_refused() || self.is_too_many_requests()
    }
}

/// Walks an error's source chain looking for a refused connection.
pub(crate) fn is_connection_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("connection refused") {
            return true;
        }
        cur = e.source();
    }
    false
}

/// client-go's `IsProbableEOF` / `IsTimeout` for errors while reading a
/// watch body: the stream ended, not a real failure.
pub(crate) fn is_probable_eof(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::TimedOut
            )
        {
            return true;
        }
        let text = e.to_string().to_ascii_lowercase();
        if [
            "eof",
            "connection reset",
            "broken pipe",
            "closed",
            "timed out",
            "timeout",
        ]
        .iter()
        .any(|p| text.contains(p))
        {
            return true;
        }
        cur = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status() {
        let e = ApiError::from_status_bytes(
            Some(410),
            br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}"#,
        );
        assert!(e.is_expired());
        assert_eq!(e.code, 410);
        let e = ApiError::from_status_bytes(
            Some(504),
            br#"{"kind":"Status","status":"Failure","message":"Too large resource version: 20, current: 10","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}]},"code":504}"#,
        );
        assert!(e.is_too_large_resource_version());
        let e = ApiError::from_status_bytes(Some(502), b"<html>bad gateway</html>");
        assert_eq!(e.code, 502);
        assert!(e.message.contains("bad gateway"));
        assert!(
            ApiError::from_status_bytes(Some(403), b"{}")
                .to_string()
                .contains("RBAC")
        );
    }

    #[test]
    fn parses_a_protobuf_status() {
        // what the apiserver sent for an expired watch (tests/data of
        // kcache-core): k8s\0 + Unknown{Status}
        let mut status = Vec::new();
        let field = |out: &mut Vec<u8>, n: u8, b: &[u8]| {
            out.push(n << 3 | 2);
            out.push(b.len() as u8);
            out.extend_from_slice(b);
        };
        field(&mut status, 2, b"Failure");
        field(&mut status, 3, b"too old resource version: 1 (5)");
        field(&mut status, 4, b"Expired");
        let mut cause = Vec::new();
        field(&mut cause, 1, b"ResourceVersionTooLarge");
        let mut details = Vec::new();
        field(&mut details, 4, &cause);
        field(&mut status, 5, &details);
        status.extend_from_slice(&[6 << 3, 0x9a, 0x03]); // code 410
        let mut tm = Vec::new();
        field(&mut tm, 1, b"v1");
        field(&mut tm, 2, b"Status");
        let mut body = kcache_core::protobuf::MAGIC.to_vec();
        field(&mut body, 1, &tm);
        field(&mut body, 2, &status);
        let e = ApiError::from_status_bytes(Some(200), &body);
        assert_eq!(e.code, 410);
        assert_eq!(e.reason, "Expired");
        assert!(e.is_expired());
        assert_eq!(e.message, "too old resource version: 1 (5)");
        assert!(e.is_too_large_resource_version(), "causes: {:?}", e.causes);
        // not a Status, or malformed: the HTTP code, a message saying so
        let e = ApiError::from_status_bytes(Some(503), b"k8s\0\x0a\x05");
        assert_eq!(e.code, 503);
        assert!(e.message.contains("undecodable protobuf Status"), "{e}");
    }

    #[test]
    fn truncated_keeps_short_text_and_cuts_long_text_at_a_char_boundary() {
        assert_eq!(Truncated("short", 10).to_string(), "short");
        assert_eq!(Truncated("exactly10!", 10).to_string(), "exactly10!");
        assert_eq!(
            Truncated("abcdefghijkl", 5).to_string(),
            "abcde... [cut: 12 bytes in all]"
        );
        // "é" is 2 bytes: never split a character
        assert_eq!(
            Truncated("aéééé", 4).to_string(),
            "aé... [cut: 9 bytes in all]"
        );
        // pieces written by a Display impl: nothing kept after the first cut
        let e = ApiError {
            code: 500,
            reason: "InternalError".into(),
            message: "m".repeat(10),
            causes: vec![],
        };
        let t = Truncated(&e, 8).to_string();
        assert_eq!(
            t,
            format!("500 Inte... [cut: {} bytes in all]", e.to_string().len())
        );
    }

    #[test]
    fn api_error_display_cuts_a_huge_message_but_keeps_it_in_the_field() {
        let huge = "x".repeat(10 << 20);
        let body =
            serde_json::json!({"kind":"Status","code":500,"reason":"InternalError","message":huge})
                .to_string();
        let e = ApiError::from_status_bytes(Some(200), body.as_bytes());
        assert_eq!(e.message.len(), 10 << 20, "the error keeps the message");
        let shown = e.to_string();
        assert!(shown.len() < MAX_DISPLAYED_MESSAGE + 300, "{}", shown.len());
        assert!(shown.contains("[cut: 10485760 bytes in all]"), "{shown}");
        assert!(
            shown.contains("the reflector retries with backoff"),
            "{shown}"
        );
        let e = ReflectorError::Api {
            op: Operation::Watch,
            resource: "configmaps".into(),
            error: e,
        };
        assert!(e.to_string().len() < MAX_DISPLAYED_MESSAGE + 400);
        // a short message is shown whole
        let e = ApiError::from_status_bytes(
            Some(410),
            br#"{"code":410,"reason":"Expired","message":"too old"}"#,
        );
        assert!(e.to_string().starts_with("410 Expired: too old ("), "{e}");
    }

    #[test]
    fn reasons_have_distinct_labels() {
        let mut labels: Vec<_> = ErrorReason::ALL.iter().map(|r| r.as_str()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), ErrorReason::ALL.len());
        for (i, r) in ErrorReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }
}
