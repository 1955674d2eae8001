//! [`ApiError`]: a `metav1.Status` failure the apiserver answered with,
//! read from its wire form ([`StatusWire`], JSON or CBOR; protobuf in the
//! crate's `codec` module), with the classifications the reflector's
//! recovery rules use.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::{MAX_DISPLAYED_MESSAGE, Truncated};

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
    /// How long the server asked the client to wait before retrying: the
    /// response's `Retry-After` header (whole seconds), else the Status's
    /// `details.retryAfterSeconds` (the apiserver sends both with a 429).
    /// The reflector waits at least this long (at most its backoff cap)
    /// before it retries.
    pub retry_after: Option<Duration>,
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
    #[serde(default, rename = "retryAfterSeconds")]
    retry_after_seconds: Option<i64>,
}

#[derive(Deserialize)]
struct CauseWire {
    #[serde(default, rename = "reason")]
    reason: Option<String>,
}

impl ApiError {
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
                    retry_after: None,
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
            retry_after: s
                .details
                .as_ref()
                .and_then(|d| d.retry_after_seconds)
                .and_then(retry_after_seconds),
            causes: s
                .details
                .map(|d| d.causes.into_iter().filter_map(|c| c.reason).collect())
                .unwrap_or_default(),
        }
    }

    /// This error with the wait a `Retry-After` response header asks for
    /// (whole seconds; an HTTP date or anything else is ignored), which
    /// takes precedence over the body's `retryAfterSeconds`.
    pub(crate) fn with_retry_after_header(mut self, headers: &http::HeaderMap) -> Self {
        let header = headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
            .and_then(retry_after_seconds);
        if header.is_some() {
            self.retry_after = header;
        }
        self
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

/// A server's retry-after in seconds as a wait: positive values only.
fn retry_after_seconds(secs: i64) -> Option<Duration> {
    u64::try_from(secs)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}
