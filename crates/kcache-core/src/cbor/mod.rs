//! Kubernetes CBOR (`application/cbor`, KEP-4222), read byte-backed: the
//! object's [`Metadata`](crate::Metadata) scanned without a full decode,
//! objects decoded on demand into any serde type through a `Deserializer`
//! that presents them as the JSON the apiserver would have sent, and a
//! transcoder to that JSON.
//!
//! What the apiserver's encoder writes, and this module reads as its JSON
//! equivalent: every Go string (field names and map keys too) as a CBOR
//! *byte* string, read as text (invalid UTF-8 as U+FFFD, as Go's JSON
//! writes it); a Go `[]byte` as a byte string under tag 22, read as its
//! base64 text (tags 21 and 23: base64url and base16); floats in the
//! shortest width that keeps their value (half floats included), integral
//! ones read as integers, as JSON writes them; the self-described tag
//! 55799 in front. As its decoder does, this one rejects duplicate map
//! keys, text strings that are not UTF-8, NaN and infinities, and nesting
//! deeper than 64; it accepts indefinite-length items, which other
//! encoders may write.
//!
//! ```
//! use kcache_core::cbor;
//! // {"kind": "ConfigMap", "metadata": {"name": "web"}} as the apiserver
//! // writes it: tag 55799, byte-string keys and values.
//! let obj = b"\xd9\xd9\xf7\xa2\x44kind\x49ConfigMap\x48metadata\xa1\x44name\x43web";
//! assert_eq!(cbor::to_json(obj)?, br#"{"kind":"ConfigMap","metadata":{"name":"web"}}"#);
//! let v: serde_json::Value = cbor::decode(obj)?;
//! assert_eq!(v["metadata"]["name"], "web");
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

mod de;
mod json;
mod list;
pub(crate) mod meta;
mod reader;

pub use de::decode;
pub use json::to_json;
pub(crate) use json::write_json;
pub use list::{ListReader, ListSummary, watch_event};
pub use reader::item_len;

/// The media type of a CBOR object or list.
pub const CONTENT_TYPE: &str = "application/cbor";
/// The media type of a CBOR watch: a CBOR sequence (RFC 8742) of events.
pub const SEQ_CONTENT_TYPE: &str = "application/cbor-seq";

/// Malformed or unsupported CBOR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CborError {
    /// The input ends inside a data item.
    #[error("CBOR input is truncated: it ends inside the data item at byte {offset}")]
    Truncated {
        /// Where the unfinished item's part starts.
        offset: usize,
    },
    /// Well-formed or not, not what a Kubernetes object can be.
    #[error("invalid CBOR at byte {offset}: {reason}")]
    Invalid {
        /// Where the offending item starts.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Bytes follow the object.
    #[error("CBOR object followed by {0} more bytes")]
    Trailing(usize),
    /// The typed decode failed (the shape does not fit the type).
    #[error("{0}")]
    Decode(String),
}

impl serde::de::Error for CborError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        CborError::Decode(msg.to_string())
    }
}
