//! The protobuf adapter of [`CachedObject`]: its constructors from a
//! Kubernetes protobuf object or envelope, and the [`Metadata`] read from
//! `ObjectMeta` without decoding the rest.

use bytes::Bytes;

use super::metadata::MetaStrings;
use super::{CachedObject, Metadata, ObjectError, ObjectOptions, OwnerReference};
use crate::codec::Codec;
use crate::protobuf::{self, TypeMeta, WireError, meta::ObjectMetaView};

/// The [`Metadata`] of a protobuf object, as the JSON route builds it from
/// the apiserver's JSON of the same object (JSON omits the empty strings
/// and zero generation protobuf carries).
fn proto_metadata<'a>(
    m: &ObjectMetaView<'a>,
    type_meta: TypeMeta<'a>,
) -> Result<Metadata, ObjectError> {
    if m.name.is_empty() {
        return Err(ObjectError::MissingName);
    }
    let opt = |s: &'a str| (!s.is_empty()).then_some(s);
    let deletion_timestamp = m
        .deletion_timestamp
        .map(|secs| {
            protobuf::format_time(secs, None).ok_or(ObjectError::Protobuf(WireError::Invalid {
                message: "ObjectMeta",
                field: 9,
                reason: "timestamp outside years 0-9999",
            }))
        })
        .transpose()?;
    Ok(Metadata {
        strings: MetaStrings::new(
            opt(m.namespace),
            m.name,
            [
                opt(m.uid),
                opt(m.resource_version),
                opt(type_meta.api_version),
                opt(type_meta.kind),
                deletion_timestamp.as_ref().map(|t| t.as_str()),
            ],
        )?,
        generation: (m.generation != 0).then_some(m.generation),
        labels: m.labels.iter().copied().collect(),
        annotations: m.annotations.iter().copied().collect(),
        owner_references: m
            .owner_references
            .iter()
            .map(|o| OwnerReference {
                api_version: o.api_version.to_owned(),
                kind: o.kind.to_owned(),
                name: o.name.to_owned(),
                uid: o.uid.to_owned(),
                controller: o.controller,
                block_owner_deletion: o.block_owner_deletion,
            })
            .collect(),
        finalizers: m.finalizers.iter().map(|f| (*f).to_owned()).collect(),
    })
}

impl<K> CachedObject<K> {
    /// Builds a cached object from a protobuf object: its own message (an
    /// item of a [`protobuf::List`], the `raw` of a [`protobuf::Unknown`]),
    /// of the type `type_meta` names. See
    /// [`from_protobuf_with`](Self::from_protobuf_with).
    pub fn from_protobuf(
        object: impl Into<Bytes>,
        type_meta: TypeMeta<'_>,
    ) -> Result<Self, ObjectError> {
        Self::from_protobuf_with(object, type_meta, &ObjectOptions::default())
    }

    /// Builds a cached object from a protobuf object, with options (strip
    /// managedFields, field paths, compression; as for JSON).
    ///
    /// The [`Metadata`] is read from `ObjectMeta` (field 1) without decoding
    /// the rest, and equals what [`from_bytes_with`](Self::from_bytes_with)
    /// extracts from the apiserver's JSON of the same object; `apiVersion`
    /// and `kind` come from `type_meta`. Fails on malformed protobuf
    /// ([`ObjectError::Protobuf`]), a kind kcache has no protobuf tables for
    /// ([`ObjectError::UnknownProtobufKind`]) and a missing name.
    pub fn from_protobuf_with(
        object: impl Into<Bytes>,
        type_meta: TypeMeta<'_>,
        options: &ObjectOptions,
    ) -> Result<Self, ObjectError> {
        let object = object.into();
        let msg =
            protobuf::kind_message(type_meta.api_version, type_meta.kind).ok_or_else(|| {
                ObjectError::UnknownProtobufKind {
                    api_version: type_meta.api_version.to_owned(),
                    kind: type_meta.kind.to_owned(),
                }
            })?;
        let view = ObjectMetaView::scan(&object).map_err(ObjectError::Protobuf)?;
        let meta = proto_metadata(&view, type_meta)?;
        let stripped = if options.strip_managed_fields {
            view.without_managed_fields(&object)
        } else {
            None
        };
        drop(view);
        CachedObject::from_binary_parts(
            object,
            stripped.map(Bytes::from),
            meta,
            Codec::Protobuf(msg),
            options,
            |bytes, segs| protobuf::field_value(bytes, msg, segs).map_err(ObjectError::Transcode),
        )
    }

    /// Builds a cached object from a protobuf envelope: `k8s\0` +
    /// `runtime.Unknown` (a single-object response body, or the object of a
    /// watch event). Without [`ObjectOptions::copy_bytes`] the object keeps
    /// a slice of `body`.
    pub fn from_protobuf_envelope_with(
        body: impl Into<Bytes>,
        options: &ObjectOptions,
    ) -> Result<Self, ObjectError> {
        let body = body.into();
        let u = protobuf::Unknown::decode(&body).map_err(ObjectError::Protobuf)?;
        if !(u.content_type.is_empty() || u.content_type.starts_with(protobuf::CONTENT_TYPE)) {
            return Err(ObjectError::Protobuf(WireError::Invalid {
                message: "Unknown",
                field: 4,
                reason: "the envelope holds an object that is not protobuf",
            }));
        }
        let raw = body.slice_ref(u.raw);
        Self::from_protobuf_with(raw, u.type_meta, options)
    }
}
