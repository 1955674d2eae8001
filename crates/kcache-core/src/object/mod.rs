//! The cached object: the bytes as received (JSON, or protobuf or CBOR for
//! built-in types) plus metadata extracted once.
//!
//! This module holds [`CachedObject`] itself (its JSON constructors and
//! accessors), its errors and [`ObjectOptions`]. The rest is split by
//! concept:
//!
//! - `metadata`: [`Metadata`], [`OwnerReference`] and the one-allocation
//!   string block behind them;
//! - `field_trie`: [`FieldPaths`], the JSON-pointer trie the partial
//!   decode follows;
//! - `meta_visitor`: the serde visitors of the partial, borrowing JSON
//!   decode (metadata plus declared field paths);
//! - `protobuf` and `cbor`: the constructors from Kubernetes protobuf and
//!   CBOR.

mod cbor;
pub(crate) mod error;
mod field_trie;
mod meta_visitor;
mod metadata;
mod protobuf;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use serde::de::{self, DeserializeOwned, Deserializer};

use crate::codec::Codec;
use crate::compression::{self, Compression, CompressionDictionary, Payload};
use crate::managed_fields;
use crate::protobuf::{TypeMeta, meta::ObjectMetaView};
use crate::string_map::StringMap;

pub use crate::codec::Format;
pub use error::ObjectError;
pub use field_trie::FieldPaths;
pub use metadata::{Metadata, OwnerReference};

use field_trie::PathNode;
use meta_visitor::{TopVisitor, build_meta, span_in};
use metadata::field_from_meta;

/// Error decoding a [`CachedObject`] into its typed value `K`.
///
/// For a compressed object whose stored bytes fail to decompress (see
/// [`ObjectError::Decompress`]), `source` is a custom serde error saying so.
#[derive(Debug, thiserror::Error)]
#[error(
    "decoding object {key:?} into {type_name} failed (does the type match the resource's schema and apiVersion?)"
)]
pub struct DecodeError {
    /// The key of the object that failed to decode.
    pub key: String,
    /// The Rust type that was requested.
    pub type_name: &'static str,
    /// The underlying serde error.
    #[source]
    pub source: serde_json::Error,
}

impl From<DecodeError> for std::io::Error {
    /// A reconciler returning `std::io::Error` can use `?` on a decode.
    fn from(e: DecodeError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// Options for [`CachedObject::from_bytes_with`].
///
/// Build them once per resource type and share them: clones share the field
/// paths and the compression dictionary.
///
/// # Compression
///
/// By default an object keeps its JSON as given. With
/// [`compression`](Self::compression) set to [`Compression::lz4()`] it keeps
/// the JSON LZ4-compressed against a dictionary learned from the first
/// object built with these options (shared by all of them): on realistic
/// Pods the stored JSON shrinks to a small fraction of its size (4.3 KB
/// after the managedFields cut to about 0.5 KB; memory held per Pod from
/// 5.6 KB to 1.8 KB, see the `cached_object` bench). The
/// metadata, key and field paths are extracted before compressing, so keys,
/// labels, selectors, indexes and field paths cost nothing more; every
/// [`decode`](CachedObject::decode) and [`json`](CachedObject::json) first
/// decompresses (LZ4 decompresses at GB/s: about 1.2 µs for such a Pod,
/// next to 25-30 µs of serde decode into a k8s-openapi `Pod`), and
/// every build compresses (a few µs). The trade-off is therefore CPU per
/// decode (and per build, to compress) against memory per cached object.
/// An object that would not shrink by at least 1/8 stays plain.
///
/// ```
/// use kcache_core::{CachedObject, Compression, ObjectOptions};
///
/// let options = ObjectOptions {
///     strip_managed_fields: true,
///     compression: Compression::lz4(),
///     ..ObjectOptions::default()
/// };
/// let pod = |i: usize| format!(
///     r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web-{i}","namespace":"prod",
///     "labels":{{"app":"web","tier":"frontend"}},"managedFields":[{{"manager":"kubectl"}}]}},
///     "spec":{{"nodeName":"node-{i}","containers":[{{"name":"app","image":"registry.example.com/web:1.2.3",
///     "ports":[{{"containerPort":8080,"protocol":"TCP"}}]}}]}},"status":{{"phase":"Running"}}}}"#
/// );
/// let first: CachedObject<serde_json::Value> = CachedObject::from_bytes_with(pod(1), &options)?;
/// let second: CachedObject<serde_json::Value> = CachedObject::from_bytes_with(pod(2), &options)?;
///
/// assert!(second.is_compressed());
/// assert!(second.bytes().len() < second.json_len() / 2); // stored compressed
/// assert_eq!(second.key(), "prod/web-2"); // metadata needs no decompression
/// assert_eq!(second.labels().get("app"), Some("web"));
/// let value = second.decode()?; // decompresses, then serde
/// assert_eq!(value["spec"]["nodeName"], "node-2");
/// assert!(value["metadata"].get("managedFields").is_none());
/// // One dictionary, learned from the first object, shared by all.
/// let dict = options.compression.dictionary().unwrap();
/// assert!(first.dictionary().unwrap().ptr_eq(dict));
/// assert!(second.dictionary().unwrap().ptr_eq(dict));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ObjectOptions {
    /// Cut `metadata.managedFields` out of the stored bytes (default: keep
    /// them).
    pub strip_managed_fields: bool,
    /// Copy the bytes into a buffer of their own instead of keeping the
    /// given `Bytes`. Set it when the input is a slice of a larger buffer
    /// (e.g. one item of a whole list response): a kept slice keeps the
    /// whole buffer alive for as long as any object built from it lives.
    /// (Bytes rebuilt by the managedFields cut, and compressed bytes, are
    /// always a buffer of their own.)
    pub copy_bytes: bool,
    /// Extract these field paths during the partial decode (default:
    /// none).
    pub field_paths: Option<FieldPaths>,
    /// Store the JSON compressed ([`Compression::lz4()`]) or as given
    /// ([`Compression::none()`], the default). See
    /// [Compression](Self#compression) for the trade-off. Once learned, the
    /// dictionary is shared by every object built with these options.
    pub compression: Compression,
}

impl<K> CachedObject<K> {
    /// The common end of building a cached object from a binary format
    /// (protobuf, CBOR), once its metadata is read: the bytes kept (`cut`,
    /// the managedFields cut of `object`, or `object`), the declared field
    /// paths (from the metadata, or `scan`ned in the bytes), and the
    /// payload (compressed, copied or kept as given, as `options` say).
    pub(super) fn from_binary_parts(
        object: Bytes,
        cut: Option<Bytes>,
        meta: Metadata,
        codec: crate::codec::Codec,
        options: &ObjectOptions,
        scan: impl Fn(&Bytes, &[String]) -> Result<Option<Box<str>>, ObjectError>,
    ) -> Result<Self, ObjectError> {
        let own_buffer = cut.is_some();
        let bytes = cut.unwrap_or(object);
        let fields = match &options.field_paths {
            Some(fp) => {
                let mut out = vec![None; fp.len()];
                for (i, segs) in &fp.inner.from_meta {
                    out[*i] = metadata::field_from_meta(&meta, segs);
                }
                for (i, segs) in &fp.inner.scanned {
                    out[*i] = scan(&bytes, segs)?;
                }
                Some((fp.clone(), out.into_boxed_slice()))
            }
            None => None,
        };
        let payload = stored_payload(bytes, own_buffer, options);
        Ok(CachedObject {
            inner: Arc::new(Inner {
                payload,
                codec,
                meta,
                fields,
            }),
            _kind: PhantomData,
        })
    }
}

/// What an object keeps of `bytes` (its wire bytes after any
/// managedFields cut; `own_buffer` when that cut made them a buffer of
/// their own): compressed, copied out of a larger buffer, or as given, as
/// `options` say.
fn stored_payload(bytes: Bytes, own_buffer: bool, options: &ObjectOptions) -> Payload {
    match options.compression.compress(&bytes) {
        Some(compressed) => compressed,
        None if options.copy_bytes && !own_buffer => Payload::Plain(Bytes::copy_from_slice(&bytes)),
        None => Payload::Plain(bytes),
    }
}

/// Declared paths plus the values extracted for them, in the same order.
type FieldValues = (FieldPaths, Box<[Option<Box<str>>]>);

struct Inner {
    payload: Payload,
    /// The format of the bytes, and what it can do with them.
    codec: Codec,
    /// Holds the key too (see [`MetaStrings`]).
    meta: Metadata,
    fields: Option<FieldValues>,
}

/// A Kubernetes object as cached by kcache: the JSON bytes as received plus
/// [`Metadata`] extracted once; the typed `K` is decoded on demand.
///
/// Cloning is one reference-count increment. `K` is only a marker
/// (`PhantomData<fn() -> K>`), so the type is `Send + Sync + Clone` for any `K`.
///
/// ```
/// use kcache_core::CachedObject;
/// # #[derive(serde::Deserialize)] struct Pod { metadata: serde_json::Value }
/// let obj: CachedObject<Pod> = CachedObject::from_bytes(
///     &br#"{"metadata":{"name":"web","namespace":"prod","labels":{"app":"web"}}}"#[..],
/// )?;
/// assert_eq!(obj.key(), "prod/web");
/// assert_eq!(obj.labels().get("app"), Some("web"));
/// let pod: Pod = obj.decode()?;
/// assert_eq!(pod.metadata["name"], "web");
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub struct CachedObject<K> {
    inner: Arc<Inner>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for CachedObject<K> {
    fn clone(&self) -> Self {
        CachedObject {
            inner: self.inner.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for CachedObject<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedObject")
            .field("key", &self.key())
            .field("format", &self.format())
            .field("resource_version", &self.resource_version())
            .field("bytes", &self.inner.payload.stored().len())
            .field("compressed", &self.is_compressed())
            .finish()
    }
}

/// Two cached objects are equal when they have the same format and the
/// same bytes, whether stored compressed or not (two objects compressed
/// against the same dictionary are compared without decompressing: LZ4
/// compression is deterministic). A JSON object never equals a protobuf
/// one. An object whose stored bytes fail to decompress equals only itself.
impl<K> PartialEq for CachedObject<K> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
            || (self.format() == other.format()
                && self.inner.payload.same_json(&other.inner.payload))
    }
}
impl<K> Eq for CachedObject<K> {}

impl<K> CachedObject<K> {
    /// Builds a cached object from an object's JSON bytes, keeping them as given.
    ///
    /// Fails with [`ObjectError`] on malformed JSON, a non-object document,
    /// wrongly typed metadata fields or a missing `metadata.name`.
    pub fn from_bytes(bytes: impl Into<Bytes>) -> Result<Self, ObjectError> {
        Self::from_bytes_with(bytes, &ObjectOptions::default())
    }

    /// Builds a cached object with options (strip managedFields, field
    /// paths, compression).
    ///
    /// The metadata, key and field paths are extracted from the JSON (after
    /// the managedFields cut) before it is compressed.
    pub fn from_bytes_with(
        bytes: impl Into<Bytes>,
        options: &ObjectOptions,
    ) -> Result<Self, ObjectError> {
        let bytes = bytes.into();
        let empty = PathNode::default();
        let trie = options
            .field_paths
            .as_ref()
            .map(|f| &f.inner.trie)
            .unwrap_or(&empty);
        let mut field_out: Vec<Option<Box<str>>> = match &options.field_paths {
            Some(f) => vec![None; f.len()],
            None => Vec::new(),
        };
        // serde_json skips the strings it does not decode (everything but
        // metadata) without checking their UTF-8: check the whole document
        // here, so that only valid JSON enters the cache (found by fuzzing).
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            ObjectError::Json(<serde_json::Error as serde::de::Error>::custom(
                format_args!("invalid UTF-8 at byte {}", e.valid_up_to()),
            ))
        })?;
        let (meta, managed_span) = {
            let mut de = serde_json::Deserializer::from_str(text);
            let top = de
                .deserialize_map(TopVisitor {
                    trie,
                    out: &mut field_out,
                })
                .map_err(ObjectError::Json)?;
            de.end().map_err(ObjectError::Json)?;
            let span = top
                .managed_fields
                .and_then(|raw| span_in(&bytes, raw.get()));
            (build_meta(top)?, span)
        };
        let (bytes, own_buffer) = match (options.strip_managed_fields, managed_span) {
            (true, Some((start, end))) => {
                let cut = match managed_fields::cut_member(&bytes, start, end, b"managedFields") {
                    Some(v) => v,
                    None => managed_fields::strip_with_value(&bytes)?,
                };
                (Bytes::from(cut), true)
            }
            _ => (bytes, false),
        };
        let payload = stored_payload(bytes, own_buffer, options);
        let fields = options.field_paths.as_ref().map(|fp| {
            for (i, segs) in &fp.inner.from_meta {
                field_out[*i] = field_from_meta(&meta, segs);
            }
            (fp.clone(), field_out.into_boxed_slice())
        });
        Ok(CachedObject {
            inner: Arc::new(Inner {
                payload,
                codec: Codec::Json,
                meta,
                fields,
            }),
            _kind: PhantomData,
        })
    }

    /// The encoding of the stored bytes.
    pub fn format(&self) -> Format {
        self.inner.codec.format()
    }

    /// The object's bytes in its [`format`](Self::format), uncompressed:
    /// borrowed when stored as given, decompressed when compressed.
    pub fn encoded(&self) -> Result<Cow<'_, [u8]>, ObjectError> {
        self.inner.payload.json()
    }

    fn type_meta(&self) -> TypeMeta<'_> {
        TypeMeta {
            api_version: self.inner.meta.api_version().unwrap_or(""),
            kind: self.inner.meta.kind().unwrap_or(""),
        }
    }

    fn transcode(&self) -> Result<Vec<u8>, ObjectError> {
        let mut out = Vec::new();
        self.inner
            .payload
            .with_json(|b| self.inner.codec.write_json(b, self.type_meta(), &mut out))??;
        Ok(out)
    }

    /// The default key: `namespace/name`, or `name` for cluster-scoped objects.
    pub fn key(&self) -> &str {
        self.inner.meta.strings.key()
    }
    /// The extracted metadata.
    pub fn meta(&self) -> &Metadata {
        &self.inner.meta
    }
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.inner.meta.name()
    }
    /// `metadata.namespace` (`None` for cluster-scoped objects).
    pub fn namespace(&self) -> Option<&str> {
        self.inner.meta.namespace()
    }
    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.inner.meta.uid()
    }
    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.inner.meta.resource_version()
    }
    /// `metadata.labels`.
    pub fn labels(&self) -> &StringMap {
        self.inner.meta.labels()
    }
    /// `metadata.annotations`.
    pub fn annotations(&self) -> &StringMap {
        self.inner.meta.annotations()
    }
    /// The stored bytes: the JSON or protobuf (without managedFields when
    /// stripped) for an object stored as given, the compressed block for a
    /// compressed one (see [`is_compressed`](Self::is_compressed) and
    /// [`format`](Self::format)).
    ///
    /// To read or write out the JSON of any object, use
    /// [`json`](Self::json) or [`to_json_bytes`](Self::to_json_bytes).
    pub fn bytes(&self) -> &Bytes {
        self.inner.payload.stored()
    }
    /// The JSON (without managedFields when stripped): borrowed when stored
    /// as given, decompressed into a new buffer when compressed.
    ///
    /// A protobuf object is transcoded directly from its bytes (no typed
    /// value): the same keys and values as the apiserver's JSON,
    /// `apiVersion` and `kind` first, then the fields in protobuf field
    /// order.
    ///
    /// Fails only when a compressed object's stored bytes do not
    /// decompress ([`ObjectError::Decompress`]), or a protobuf object does
    /// not transcode ([`ObjectError::Transcode`]).
    pub fn json(&self) -> Result<Cow<'_, [u8]>, ObjectError> {
        if self.inner.codec.is_json() {
            self.inner.payload.json()
        } else {
            self.transcode().map(Cow::Owned)
        }
    }
    /// The JSON as [`Bytes`]: the stored buffer itself (a reference-count
    /// increment) when stored as given, decompressed when compressed,
    /// transcoded for a protobuf object (see [`json`](Self::json)).
    pub fn to_json_bytes(&self) -> Result<Bytes, ObjectError> {
        if !self.inner.codec.is_json() {
            return self.transcode().map(Bytes::from);
        }
        match &self.inner.payload {
            Payload::Plain(b) => Ok(b.clone()),
            compressed => compressed.json().map(|j| Bytes::from(j.into_owned())),
        }
    }
    /// Length of the stored bytes uncompressed: the JSON, or for a
    /// protobuf object its protobuf (see [`format`](Self::format)).
    pub fn json_len(&self) -> usize {
        self.inner.payload.json_len()
    }
    /// Whether the JSON is stored compressed.
    pub fn is_compressed(&self) -> bool {
        self.inner.payload.dictionary().is_some()
    }
    /// The dictionary a compressed object was compressed against (shared by
    /// every object built with the same options); `None` when stored as given.
    pub fn dictionary(&self) -> Option<&CompressionDictionary> {
        self.inner.payload.dictionary()
    }
    /// The value extracted for a declared field path (see [`FieldPaths`]).
    ///
    /// Strings are unescaped; numbers, booleans, objects and arrays are given
    /// as their JSON text; `None` when the path is absent, `null` or was not
    /// declared.
    pub fn field(&self, path: &str) -> Option<&str> {
        let (paths, values) = self.inner.fields.as_ref()?;
        let i = paths.position(path)?;
        values.get(i)?.as_deref()
    }
    /// The value for the `i`-th declared field path.
    pub fn field_at(&self, i: usize) -> Option<&str> {
        let (_, values) = self.inner.fields.as_ref()?;
        values.get(i)?.as_deref()
    }
    /// The field paths this object was built with.
    pub fn field_paths(&self) -> Option<&FieldPaths> {
        self.inner.fields.as_ref().map(|(p, _)| p)
    }
    /// Whether two handles share the same allocation.
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
    /// Reinterprets the object as another typed view (e.g. `DynamicObject`),
    /// sharing the same allocation.
    pub fn cast<K2>(&self) -> CachedObject<K2> {
        CachedObject {
            inner: self.inner.clone(),
            _kind: PhantomData,
        }
    }
    /// A copy without `metadata.managedFields` (shares nothing with `self`
    /// when there was something to cut; returns a clone otherwise). A
    /// compressed object's copy is compressed against the same dictionary.
    /// A protobuf object's copy stays protobuf.
    pub fn without_managed_fields(&self) -> Result<Self, ObjectError> {
        let options = ObjectOptions {
            strip_managed_fields: true,
            copy_bytes: false,
            field_paths: self.field_paths().cloned(),
            compression: match self.dictionary() {
                Some(dict) => Compression::lz4_with_dictionary(dict.clone()),
                None => Compression::none(),
            },
        };
        if let Codec::Cbor = self.inner.codec {
            let bytes = Bytes::from(self.encoded()?.into_owned());
            return Self::from_cbor_with(bytes, &options);
        }
        if let Codec::Protobuf(_) = self.inner.codec {
            let bytes = Bytes::from(self.encoded()?.into_owned());
            let view = ObjectMetaView::scan(&bytes).map_err(ObjectError::Protobuf)?;
            if view.managed_fields.is_empty() {
                return Ok(self.clone());
            }
            drop(view);
            let type_meta = self.type_meta();
            return Self::from_protobuf_with(bytes.clone(), type_meta, &options);
        }
        let json = self.to_json_bytes()?;
        if !managed_fields::may_contain(&json) {
            return Ok(self.clone());
        }
        Self::from_bytes_with(json, &options)
    }
    /// The compressed twin of a plain object: the same key, metadata, field
    /// values and [`format`](Self::format) (JSON or protobuf), its stored
    /// bytes LZ4-compressed against `dictionary`, built without parsing
    /// anything again (the bytes are compressed, the rest is copied).
    ///
    /// `None` when there is nothing to gain: the object is compressed
    /// already, or its bytes are too short or would not shrink by at least
    /// 1/8. The twin equals `self` (`==`) and decodes to the same value;
    /// it shares no allocation with `self`, so once every handle on `self`
    /// is dropped only the twin's (smaller) memory remains. What an
    /// informer's background compression swaps into its cache for objects
    /// that have been quiet for a while.
    ///
    /// ```
    /// use kcache_core::{CachedObject, CompressionDictionary};
    ///
    /// let pod = |i: usize| format!(
    ///     r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web-{i}","namespace":"prod",
    ///     "labels":{{"app":"web"}}}},"spec":{{"nodeName":"node-{i}","containers":[{{"name":"app",
    ///     "image":"registry.example.com/web:1.2.3"}}]}},"status":{{"phase":"Running"}}}}"#
    /// );
    /// let first: CachedObject<serde_json::Value> = CachedObject::from_bytes(pod(1))?;
    /// let dict = CompressionDictionary::new(first.encoded()?);
    /// let plain: CachedObject<serde_json::Value> = CachedObject::from_bytes(pod(2))?;
    /// let twin = plain.compressed_with(&dict).expect("it shrinks");
    ///
    /// assert!(twin.is_compressed() && !plain.is_compressed());
    /// assert!(twin.bytes().len() < plain.bytes().len() / 2);
    /// assert_eq!(twin, plain);
    /// assert_eq!(twin.key(), "prod/web-2");
    /// assert_eq!(twin.decode()?, plain.decode()?);
    /// assert!(twin.compressed_with(&dict).is_none()); // compressed already
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn compressed_with(&self, dictionary: &CompressionDictionary) -> Option<Self> {
        let Payload::Plain(bytes) = &self.inner.payload else {
            return None;
        };
        let payload = compression::compress_with(dictionary, bytes)?;
        let inner = &self.inner;
        Some(CachedObject {
            inner: Arc::new(Inner {
                payload,
                codec: inner.codec,
                meta: inner.meta.clone(),
                fields: inner.fields.clone(),
            }),
            _kind: PhantomData,
        })
    }
    /// Approximate heap bytes held by this object (stored bytes + metadata),
    /// not counting other handles' share.
    ///
    /// For a compressed object the stored bytes are the compressed block;
    /// the [`CompressionDictionary`] is not counted, as it is shared by every
    /// object built with the same options (count it once per options).
    pub fn heap_size(&self) -> usize {
        let m = &self.inner.meta;
        std::mem::size_of::<Inner>()
            + 16
            + self.inner.payload.stored().len()
            + m.strings.heap_size()
            + m.labels.heap_size()
            + m.annotations.heap_size()
            + m.finalizers
                .iter()
                .map(|f| f.capacity() + 24)
                .sum::<usize>()
            + m.owner_references
                .iter()
                .map(|o| {
                    std::mem::size_of::<OwnerReference>()
                        + o.api_version.capacity()
                        + o.kind.capacity()
                        + o.name.capacity()
                        + o.uid.capacity()
                })
                .sum::<usize>()
    }
}

impl<K: DeserializeOwned> CachedObject<K> {
    /// Decodes the bytes into the typed `K` (a full serde decode; a
    /// compressed object is first decompressed into a scratch buffer).
    ///
    /// A protobuf object is decoded straight from its protobuf through the
    /// generated field tables: the result equals what decoding the
    /// apiserver's JSON of the same object gives. A protobuf decode error
    /// is carried as a custom `serde_json::Error` in [`DecodeError`].
    pub fn decode(&self) -> Result<K, DecodeError> {
        crate::compression::count_decode();
        let decoded = self
            .inner
            .payload
            .with_json(|bytes| self.inner.codec.decode::<K>(bytes, self.type_meta()))
            .unwrap_or_else(|e| Err(<serde_json::Error as de::Error>::custom(e)));
        decoded.map_err(|source| DecodeError {
            key: self.key().to_owned(),
            type_name: std::any::type_name::<K>(),
            source,
        })
    }
}

impl<K: serde::Serialize> CachedObject<K> {
    /// Serializes a typed value and builds a cached object from the JSON.
    pub fn from_object(obj: &K) -> Result<Self, ObjectError> {
        let v = serde_json::to_vec(obj).map_err(ObjectError::Serialize)?;
        Self::from_bytes(v)
    }
    /// Like [`from_object`](Self::from_object), with options.
    pub fn from_object_with(obj: &K, options: &ObjectOptions) -> Result<Self, ObjectError> {
        let v = serde_json::to_vec(obj).map_err(ObjectError::Serialize)?;
        Self::from_bytes_with(v, options)
    }
}
