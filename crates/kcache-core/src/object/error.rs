//! [`ObjectError`]: why bytes or a value did not make a cached object (in a
//! file of its own: the codec, compression and managedFields code below the
//! object return it).

use crate::protobuf::{ProtoDecodeError, WireError};

/// Error building a [`CachedObject`](crate::CachedObject) from bytes or from a value.
///
/// Malformed input always yields one of these; construction never panics.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectError {
    /// The bytes are not a JSON object, or a metadata field has the wrong type.
    #[error("malformed object JSON")]
    Json(#[source] serde_json::Error),
    /// The object has no `metadata.name` (or an empty one), so it has no key.
    #[error("object has no metadata.name")]
    MissingName,
    /// A declared field path is not a valid JSON pointer (it must start with `/`).
    #[error("invalid field path {path:?}: {reason}")]
    InvalidFieldPath {
        /// The path as given.
        path: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// Serializing a typed value (in [`CachedObject::from_object`](crate::CachedObject::from_object)) failed.
    #[error("serializing the object to JSON failed")]
    Serialize(#[source] serde_json::Error),
    /// The metadata's strings (name, namespace, uid, resourceVersion,
    /// apiVersion, kind, deletionTimestamp) add up to 4 GiB or more: no
    /// apiserver sends such an object.
    #[error("the object's metadata strings are 4 GiB or longer")]
    MetadataTooLarge,
    /// A compressed object's stored bytes could not be decompressed.
    ///
    /// kcache produces those bytes itself, so this means memory corruption
    /// or a bug, never bad input from the network; it is still an error
    /// rather than a panic.
    #[error("decompressing the stored object failed: {0}")]
    Decompress(String),
    /// The bytes are not a well-formed Kubernetes protobuf object (or
    /// envelope).
    #[error("malformed object protobuf")]
    Protobuf(#[source] WireError),
    /// A protobuf object of a kind kcache has no field tables for (not a
    /// built-in type of the pinned k8s.io/api): it cannot be decoded.
    #[error(
        "no protobuf tables for {api_version} {kind}: it is not a built-in kind; ask the apiserver for JSON for this resource"
    )]
    UnknownProtobufKind {
        /// `apiVersion` of the object.
        api_version: String,
        /// `kind` of the object.
        kind: String,
    },
    /// Transcoding a protobuf object to JSON failed (e.g. a `RawExtension`
    /// holding protobuf rather than JSON).
    #[error("transcoding the protobuf object to JSON failed")]
    Transcode(#[source] ProtoDecodeError),
    /// The bytes are not a well-formed Kubernetes CBOR object.
    #[error("malformed object CBOR")]
    Cbor(#[source] crate::cbor::CborError),
}
