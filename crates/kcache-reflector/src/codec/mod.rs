//! The wire formats the reflector reads, each behind one trait: what it
//! asks for (`Accept`), how a watch stream is framed, how a list body is
//! cut into items, how a watch event and a `Status` are decoded. The
//! reflector decides the format of each response once, from its
//! `Content-Type` ([`of_response`]), and then only calls the codec.
//!
//! A format is a module here and one line in [`registry`]; the object's
//! own bytes (metadata, typed decode, JSON) are `kcache-core`'s codec.

use std::sync::atomic::{AtomicU8, Ordering};

use bytes::Bytes;
use http::HeaderMap;
use kcache_core::Format;
use tracing::{debug, info};

use crate::decode::{EventDecoder, ListParser, WatchEvent};
use crate::error::{ApiError, BadEvent};
use crate::framing::Framer;
use crate::wire_format::WireFormat;

mod cbor;
mod json;
mod protobuf;

/// What the reflector lists and watches: the target of the `Accept`
/// choice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    /// `apiVersion` of the type, when known.
    pub(crate) api_version: Option<&'a str>,
    /// `kind` of the type, when known.
    pub(crate) kind: Option<&'a str>,
    /// A metadata-only reflector (`PartialObjectMetadata`), which asks for
    /// its own JSON media type.
    pub(crate) metadata_only: bool,
}

/// One wire format as the reflector uses it.
pub(crate) trait WireCodec<K>: Sync {
    /// The format, as the cached objects it builds report it.
    fn format(&self) -> Format;

    /// Whether a response's media type (without parameters, lower case)
    /// is this format.
    fn answers(&self, media_type: &str) -> bool;

    /// Whether [`WireFormat::Auto`] asks for this format for `target`.
    fn preferred_for(&self, target: Target<'_>) -> bool;

    /// The `Accept` of a list (`watch = false`) or of a watch or
    /// streaming list that prefers this format, JSON as the fallback.
    fn accept(&self, watch: bool) -> &'static str;

    /// Whether `body` (an error response, an `ERROR` event's object) looks
    /// like this format's `Status`.
    fn is_status(&self, body: &[u8]) -> bool;

    /// The error a `Status` body of this format says.
    fn status(&self, http_status: Option<u16>, body: &[u8]) -> ApiError;

    /// A framer of this format's watch stream.
    fn framer(&self, max_frame: usize) -> Box<dyn Framer>;

    /// A parser of this format's list body, read as it arrives.
    fn list_parser(&self) -> Box<dyn ListParser<K>>;

    /// Decodes one watch event, as cut by [`framer`](Self::framer).
    fn decode_event(
        &self,
        decoder: &EventDecoder<K>,
        frame: Bytes,
    ) -> Result<WatchEvent<K>, BadEvent>;
}

/// Every format the reflector reads, JSON first (the fallback for a
/// response of any other media type, and for a missing `Content-Type`).
fn registry<K: 'static>() -> [&'static dyn WireCodec<K>; 3] {
    [&json::Json, &protobuf::Protobuf, &cbor::Cbor]
}

/// A registered format, as a value that does not name the object type
/// (what a reflector keeps; [`get`](Self::get) gives its codec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CodecId(usize);

impl CodecId {
    /// JSON.
    pub(crate) const JSON: CodecId = CodecId(0);

    /// The codec.
    pub(crate) fn get<K: 'static>(self) -> &'static dyn WireCodec<K> {
        let all = registry::<K>();
        all.get(self.0).copied().unwrap_or(all[0])
    }

    /// Its format.
    pub(crate) fn format(self) -> Format {
        self.get::<()>().format()
    }
}

/// The format of a response: what its `Content-Type` names (parameters
/// such as `;stream=watch` ignored), JSON for anything else.
pub(crate) fn of_response(headers: &HeaderMap) -> CodecId {
    let media = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| ct.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase());
    media
        .and_then(|m| registry::<()>().iter().position(|c| c.answers(&m)))
        .map_or(CodecId::JSON, CodecId)
}

/// The format a reflector asks for: with [`WireFormat::Auto`], the first
/// registered format preferred for `target` (protobuf for built-in types,
/// CBOR for custom resources), else JSON.
pub(crate) fn preferred(format: WireFormat, target: Target<'_>) -> CodecId {
    match format {
        WireFormat::Auto => registry::<()>()[1..]
            .iter()
            .position(|c| c.preferred_for(target))
            .map_or(CodecId::JSON, |i| CodecId(i + 1)),
        WireFormat::Json => CodecId::JSON,
    }
}

/// The error a `Status` body says, in whichever registered format it is
/// (told by its first bytes; JSON or plain text otherwise).
pub(crate) fn status(http_status: Option<u16>, body: &[u8]) -> ApiError {
    let all = registry::<()>();
    all[1..]
        .iter()
        .find(|c| c.is_status(body))
        .unwrap_or(&all[0])
        .status(http_status, body)
}

// Here, beside the registry it asks (the error module stays below the
// codecs, which build its values).
impl ApiError {
    /// Builds the error from a `Status` body in any format the reflector
    /// reads: JSON, protobuf (`k8s\0` + `runtime.Unknown` holding a
    /// `Status`) or CBOR (what the apiserver answers to a request that
    /// accepts them), told by its first bytes. `http_status` is used when
    /// the body has no code, and a body that is not a Status becomes the
    /// message.
    pub fn from_status_bytes(http_status: Option<u16>, body: &[u8]) -> Self {
        status(http_status, body)
    }
}

/// Formats whose JSON answer was logged at INFO (one bit per format):
/// once per process, the other reflectors at DEBUG.
static JSON_ANSWER_LOGGED: AtomicU8 = AtomicU8::new(0);

/// Says (once per process and format) that a server answered JSON to a
/// request preferring `asked`: the reflector asks for JSON from now on.
pub(crate) fn log_json_answer(asked: Format, resource: &str) {
    let bit = match asked {
        Format::Protobuf => 1,
        Format::Cbor => 2,
        _ => 4,
    };
    let hint = match asked {
        Format::Cbor => {
            "the apiserver does not serve CBOR for it (its feature gate CBORServingAndStorage is off)"
        }
        _ => "the apiserver (or a proxy) does not serve that format for it",
    };
    if JSON_ANSWER_LOGGED.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
        info!(
            resource,
            asked = ?asked,
            "the apiserver answered JSON to a request preferring {asked:?}: {hint}; this reflector (and any other in this process that sees the same) asks for JSON from now on"
        );
    } else {
        debug!(resource, asked = ?asked, "answered JSON: asking for JSON from now on");
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

    fn format_of(v: Option<&str>) -> Format {
        let h = v.map(ct).unwrap_or_default();
        of_response(&h).format()
    }

    #[test]
    fn the_content_type_decides() {
        for (ct, want) in [
            (
                Some("application/vnd.kubernetes.protobuf"),
                Format::Protobuf,
            ),
            (
                Some("application/vnd.kubernetes.protobuf;stream=watch"),
                Format::Protobuf,
            ),
            (
                Some("Application/Vnd.Kubernetes.Protobuf ; stream=watch"),
                Format::Protobuf,
            ),
            (Some("application/cbor"), Format::Cbor),
            (Some("application/cbor-seq"), Format::Cbor),
            (Some("Application/CBOR; charset=binary"), Format::Cbor),
            (Some("application/json"), Format::Json),
            (Some("application/json;stream=watch"), Format::Json),
            (Some("text/plain"), Format::Json),
            (None, Format::Json),
        ] {
            assert_eq!(format_of(ct), want, "{ct:?}");
        }
    }

    fn asks(format: WireFormat, metadata_only: bool, v: Option<&str>, k: Option<&str>) -> Format {
        let target = Target {
            api_version: v,
            kind: k,
            metadata_only,
        };
        preferred(format, target).format()
    }

    #[test]
    fn protobuf_for_built_in_kinds_cbor_for_custom_resources_in_auto() {
        let auto = WireFormat::Auto;
        assert_eq!(asks(auto, false, Some("v1"), Some("Pod")), Format::Protobuf);
        assert_eq!(
            asks(auto, false, Some("apps/v1"), Some("Deployment")),
            Format::Protobuf
        );
        assert_eq!(
            asks(auto, false, Some("example.com/v1"), Some("Widget")),
            Format::Cbor
        );
        // a kind of a built-in name in another group is a custom resource
        assert_eq!(
            asks(auto, false, Some("example.com/v1"), Some("Pod")),
            Format::Cbor
        );
        assert_eq!(
            asks(WireFormat::Json, false, Some("v1"), Some("Pod")),
            Format::Json
        );
        assert_eq!(
            asks(
                WireFormat::Json,
                false,
                Some("example.com/v1"),
                Some("Widget")
            ),
            Format::Json
        );
        assert_eq!(asks(auto, true, Some("v1"), Some("Pod")), Format::Json);
        assert_eq!(
            asks(auto, true, Some("example.com/v1"), Some("Widget")),
            Format::Json
        );
        assert_eq!(asks(auto, false, Some("v1"), None), Format::Json);
        assert_eq!(asks(auto, false, None, None), Format::Json);
    }

    #[test]
    fn a_status_in_any_format() {
        let json = status(
            Some(500),
            br#"{"kind":"Status","code":410,"reason":"Expired"}"#,
        );
        assert_eq!((json.code, json.reason.as_str()), (410, "Expired"));
        // {"code": 404, "reason": "NotFound"} as the apiserver's CBOR
        let cbor = status(
            Some(500),
            b"\xd9\xd9\xf7\xa2\x44code\x19\x01\x94\x46reason\x48NotFound",
        );
        assert_eq!((cbor.code, cbor.reason.as_str()), (404, "NotFound"));
        let text = status(Some(502), b"<html>bad gateway</html>");
        assert_eq!(text.code, 502);
        assert!(text.message.contains("bad gateway"));
    }
}
