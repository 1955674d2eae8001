//! Content negotiation: which format the reflector asks for, and which one
//! the apiserver answered with.

use http::HeaderMap;
use kcache_core::protobuf;

/// The format a reflector asks the apiserver for (set with
/// [`ListOptions::wire_format`](crate::ListOptions::wire_format)).
///
/// With [`Auto`](Self::Auto) (the default) the lists, watches and streaming
/// lists of a built-in type (one the apiserver serves as protobuf: see
/// [`kcache_core::protobuf::is_builtin_kind`]) accept
/// `application/vnd.kubernetes.protobuf` with JSON as the fallback, as
/// client-go's generated clients do; custom resources, unknown kinds and
/// metadata-only reflectors ask for JSON. Whatever was asked, each
/// response is decoded as its `Content-Type` says, so a server that
/// answers JSON is read as JSON.
///
/// ```
/// use kcache_reflector::WireFormat;
/// assert_eq!(WireFormat::default(), WireFormat::Auto);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WireFormat {
    /// Protobuf for built-in types, JSON for everything else (the default).
    #[default]
    Auto,
    /// JSON always (e.g. to compare, or behind a proxy that mangles
    /// protobuf).
    Json,
}

/// `Accept` of a list that prefers protobuf.
pub(crate) const ACCEPT_PROTOBUF_LIST: &str =
    "application/vnd.kubernetes.protobuf, application/json";

/// `Accept` of a watch (or streaming list) that prefers protobuf.
pub(crate) const ACCEPT_PROTOBUF_WATCH: &str =
    "application/vnd.kubernetes.protobuf;stream=watch, application/json";

/// The format of a response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyFormat {
    Json,
    Protobuf,
}

impl BodyFormat {
    /// What a response's `Content-Type` says: protobuf for
    /// `application/vnd.kubernetes.protobuf` (with or without parameters,
    /// `;stream=watch` for a watch), JSON for anything else, a missing
    /// header included (what the reflector read before it asked for
    /// protobuf).
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        let Some(ct) = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
        else {
            return BodyFormat::Json;
        };
        let media = ct.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case(protobuf::CONTENT_TYPE) {
            BodyFormat::Protobuf
        } else {
            BodyFormat::Json
        }
    }
}

/// Whether a reflector of this kind asks for protobuf.
pub(crate) fn wants_protobuf(
    format: WireFormat,
    metadata_only: bool,
    api_version: Option<&str>,
    kind: Option<&str>,
) -> bool {
    match (format, api_version, kind) {
        (WireFormat::Auto, Some(v), Some(k)) if !metadata_only => protobuf::is_builtin_kind(v, k),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ct(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::CONTENT_TYPE, v.parse().unwrap());
        h
    }

    #[test]
    fn the_content_type_decides() {
        assert_eq!(
            BodyFormat::of(&ct("application/vnd.kubernetes.protobuf")),
            BodyFormat::Protobuf
        );
        assert_eq!(
            BodyFormat::of(&ct("application/vnd.kubernetes.protobuf;stream=watch")),
            BodyFormat::Protobuf
        );
        assert_eq!(
            BodyFormat::of(&ct("Application/Vnd.Kubernetes.Protobuf ; stream=watch")),
            BodyFormat::Protobuf
        );
        assert_eq!(BodyFormat::of(&ct("application/json")), BodyFormat::Json);
        assert_eq!(
            BodyFormat::of(&ct("application/json;stream=watch")),
            BodyFormat::Json
        );
        assert_eq!(BodyFormat::of(&HeaderMap::new()), BodyFormat::Json);
    }

    #[test]
    fn protobuf_only_for_built_in_kinds_in_auto() {
        let auto = WireFormat::Auto;
        assert!(wants_protobuf(auto, false, Some("v1"), Some("Pod")));
        assert!(wants_protobuf(
            auto,
            false,
            Some("apps/v1"),
            Some("Deployment")
        ));
        assert!(!wants_protobuf(
            WireFormat::Json,
            false,
            Some("v1"),
            Some("Pod")
        ));
        assert!(!wants_protobuf(auto, true, Some("v1"), Some("Pod")));
        assert!(!wants_protobuf(
            auto,
            false,
            Some("example.com/v1"),
            Some("Pod")
        ));
        assert!(!wants_protobuf(auto, false, Some("v1"), None));
    }
}
