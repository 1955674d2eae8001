//! The one place a cached object's format is looked at: what each format
//! does with the object's bytes (its format tag, its JSON, its typed
//! decode). Each format's code is its own module (`protobuf`, `cbor`, and
//! serde_json for JSON); a format is one variant here.

use serde::de::{self, DeserializeOwned};

use crate::object::error::ObjectError;
use crate::protobuf::{self, TypeMeta};

/// The encoding of a cached object's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// JSON (`application/json`): any resource.
    Json,
    /// Kubernetes protobuf (`application/vnd.kubernetes.protobuf`): the
    /// object's own message, without the `k8s\0` envelope. Built-in types
    /// only (see [`protobuf::is_builtin_kind`](crate::protobuf::is_builtin_kind)).
    Protobuf,
    /// Kubernetes CBOR (`application/cbor`, KEP-4222): custom resources
    /// and built-in types, from an apiserver with CBOR serving on.
    Cbor,
}

/// How a cached object's bytes are encoded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Codec {
    /// JSON.
    Json,
    /// Kubernetes protobuf: the object's own message.
    Protobuf(&'static protobuf::Message),
    /// Kubernetes CBOR (KEP-4222).
    Cbor,
}

impl Codec {
    /// The public name of the format.
    pub(crate) fn format(self) -> Format {
        match self {
            Codec::Json => Format::Json,
            Codec::Protobuf(_) => Format::Protobuf,
            Codec::Cbor => Format::Cbor,
        }
    }

    /// Whether the bytes are the object's JSON already.
    pub(crate) fn is_json(self) -> bool {
        matches!(self, Codec::Json)
    }

    /// Appends the object's JSON (as the apiserver would have sent it) to
    /// `out`: the bytes themselves for JSON.
    pub(crate) fn write_json(
        self,
        bytes: &[u8],
        type_meta: TypeMeta<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), ObjectError> {
        match self {
            Codec::Json => {
                out.extend_from_slice(bytes);
                Ok(())
            }
            Codec::Protobuf(msg) => {
                out.reserve(bytes.len() * 2);
                protobuf::message_to_json(bytes, msg, type_meta, out)
                    .map_err(ObjectError::Transcode)
            }
            Codec::Cbor => crate::cbor::write_json(bytes, out).map_err(ObjectError::Cbor),
        }
    }

    /// Decodes the bytes into `K` (errors carried as serde_json errors, as
    /// [`DecodeError`](crate::DecodeError) holds them).
    pub(crate) fn decode<K: DeserializeOwned>(
        self,
        bytes: &[u8],
        type_meta: TypeMeta<'_>,
    ) -> Result<K, serde_json::Error> {
        match self {
            Codec::Json => serde_json::from_slice::<K>(bytes),
            Codec::Protobuf(msg) => protobuf::decode_message::<K>(bytes, msg, type_meta)
                .map_err(<serde_json::Error as de::Error>::custom),
            Codec::Cbor => {
                crate::cbor::decode::<K>(bytes).map_err(<serde_json::Error as de::Error>::custom)
            }
        }
    }
}
