//! The CBOR adapter of [`CachedObject`]: its constructors from a Kubernetes
//! CBOR object (KEP-4222), the [`Metadata`] read without decoding the rest.

use bytes::Bytes;

use super::metadata::MetaStrings;
use super::{CachedObject, Metadata, ObjectError, ObjectOptions};
use crate::codec::Codec;

impl<K> CachedObject<K> {
    /// Builds a cached object from a Kubernetes CBOR object (the
    /// self-described tag in front optional), with options (strip
    /// managedFields, field paths, compression; as for JSON).
    ///
    /// The [`Metadata`] is read without decoding the rest and equals what
    /// [`from_bytes_with`](Self::from_bytes_with) extracts from the
    /// apiserver's JSON of the same object. Fails on malformed CBOR
    /// ([`ObjectError::Cbor`]: duplicate keys and text that is not UTF-8
    /// included) and a missing name.
    ///
    /// ```
    /// use kcache_core::{CachedObject, Format};
    /// let body = &b"\xd9\xd9\xf7\xa2\x44kind\x46Widget\x48metadata\xa2\x44name\x41w\x49namespace\x44prod"[..];
    /// let obj: CachedObject<serde_json::Value> = CachedObject::from_cbor(body)?;
    /// assert_eq!((obj.key(), obj.format()), ("prod/w", Format::Cbor));
    /// assert_eq!(obj.decode()?["kind"], "Widget");
    /// assert_eq!(&obj.json()?[..], br#"{"kind":"Widget","metadata":{"name":"w","namespace":"prod"}}"#);
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_cbor(object: impl Into<Bytes>) -> Result<Self, ObjectError> {
        Self::from_cbor_with(object, &ObjectOptions::default())
    }

    /// [`from_cbor`](Self::from_cbor) with options.
    pub fn from_cbor_with(
        object: impl Into<Bytes>,
        options: &ObjectOptions,
    ) -> Result<Self, ObjectError> {
        let object = object.into();
        let m = crate::cbor::meta::scan(&object).map_err(ObjectError::Cbor)?;
        let name = match m.name.as_deref() {
            Some(n) if !n.is_empty() => n,
            _ => return Err(ObjectError::MissingName),
        };
        let meta = Metadata {
            strings: MetaStrings::new(
                m.namespace.as_deref(),
                name,
                [
                    m.uid.as_deref(),
                    m.resource_version.as_deref(),
                    m.api_version.as_deref(),
                    m.kind.as_deref(),
                    m.deletion_timestamp.as_deref(),
                ],
            )?,
            generation: m.generation,
            labels: m.labels.clone().unwrap_or_default(),
            annotations: m.annotations.clone().unwrap_or_default(),
            owner_references: m.owner_references.clone().unwrap_or_default(),
            finalizers: m.finalizers.clone().unwrap_or_default(),
        };
        let stripped = if options.strip_managed_fields {
            crate::cbor::meta::without_managed_fields(&object, &m)
        } else {
            None
        };
        drop(m);
        CachedObject::from_binary_parts(
            object,
            stripped.map(Bytes::from),
            meta,
            Codec::Cbor,
            options,
            |bytes, segs| crate::cbor::meta::field_value(bytes, segs).map_err(ObjectError::Cbor),
        )
    }
}
