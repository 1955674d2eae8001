//! The cached object: the bytes as received (JSON, or protobuf for built-in
//! types) plus metadata extracted once.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess,
    Visitor,
};
use serde_json::value::RawValue;

use crate::codec::Codec;
use crate::compression::{self, Compression, CompressionDictionary, Payload};
use crate::managed_fields;
use crate::protobuf::{self, ProtoDecodeError, TypeMeta, WireError, meta::ObjectMetaView};
use crate::string_map::StringMap;

/// Error building a [`CachedObject`] from bytes or from a value.
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
    /// Serializing a typed value (in [`CachedObject::from_object`]) failed.
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

/// The encoding of a cached object's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// JSON (`application/json`): any resource.
    Json,
    /// Kubernetes protobuf (`application/vnd.kubernetes.protobuf`): the
    /// object's own message, without the `k8s\0` envelope. Built-in types
    /// only (see [`protobuf::is_builtin_kind`]).
    Protobuf,
    /// Kubernetes CBOR (`application/cbor`, KEP-4222): custom resources
    /// and built-in types, from an apiserver with CBOR serving on.
    Cbor,
}

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

/// An entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// API version of the owner (`apps/v1`).
    #[serde(default)]
    pub api_version: String,
    /// Kind of the owner (`ReplicaSet`).
    #[serde(default)]
    pub kind: String,
    /// Name of the owner.
    #[serde(default)]
    pub name: String,
    /// UID of the owner.
    #[serde(default)]
    pub uid: String,
    /// Whether this reference points to the managing controller.
    #[serde(default)]
    pub controller: Option<bool>,
    /// Whether the owner cannot be deleted before this object.
    #[serde(default)]
    pub block_owner_deletion: Option<bool>,
}

/// The metadata extracted from an object's JSON in one partial decode.
///
/// Everything here is owned; the rest of the object stays as bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Metadata {
    /// The key, name, namespace, uid, resourceVersion, apiVersion, kind
    /// and deletionTimestamp.
    strings: MetaStrings,
    generation: Option<i64>,
    labels: StringMap,
    annotations: StringMap,
    owner_references: Vec<OwnerReference>,
    finalizers: Vec<String>,
}

/// The parts of [`MetaStrings`] after the key, in the order of its text.
#[derive(Debug, Clone, Copy)]
enum Part {
    Uid = 1,
    ResourceVersion,
    ApiVersion,
    Kind,
    DeletionTimestamp,
}

/// The scalar strings of [`Metadata`] in one allocation: the key
/// (`namespace/name`, or `name`), then uid, resourceVersion, apiVersion,
/// kind and deletionTimestamp, one after the other. One buffer instead of
/// eight small ones (the key repeated name and namespace): each small
/// allocation costs the allocator's header and rounding and its pointer,
/// and a cache of 100,000 Pods holds 100,000 of each.
#[derive(Clone, PartialEq, Eq, Default)]
struct MetaStrings {
    text: Box<str>,
    /// Length of the namespace at the start of the key (0: none; a
    /// namespace is never empty).
    ns_len: u32,
    /// Where the key and each [`Part`] end in `text`.
    ends: [u32; 6],
    /// Bit `p`: [`Part`] `p` is present (it may be present and empty).
    present: u8,
}

impl MetaStrings {
    /// `parts` in the order of [`Part`]; `None` for an absent part.
    fn new(
        namespace: Option<&str>,
        name: &str,
        parts: [Option<&str>; 5],
    ) -> Result<Self, ObjectError> {
        let namespace = namespace.filter(|ns| !ns.is_empty());
        let len = namespace.map_or(0, |ns| ns.len() + 1)
            + name.len()
            + parts.iter().flatten().map(|p| p.len()).sum::<usize>();
        let at = |n: usize| u32::try_from(n).map_err(|_| ObjectError::MetadataTooLarge);
        at(len)?;
        let mut text = String::with_capacity(len);
        if let Some(ns) = namespace {
            text.push_str(ns);
            text.push('/');
        }
        text.push_str(name);
        let mut ends = [0; 6];
        ends[0] = at(text.len())?;
        let mut present = 0;
        for (i, part) in parts.iter().enumerate() {
            if let Some(p) = part {
                text.push_str(p);
                present |= 1 << (i + 1);
            }
            ends[i + 1] = at(text.len())?;
        }
        Ok(MetaStrings {
            text: text.into_boxed_str(),
            ns_len: at(namespace.map_or(0, str::len))?,
            ends,
            present,
        })
    }

    fn slice(&self, start: u32, end: u32) -> &str {
        self.text.get(start as usize..end as usize).unwrap_or("")
    }

    fn key(&self) -> &str {
        self.slice(0, self.ends[0])
    }

    fn namespace(&self) -> Option<&str> {
        (self.ns_len > 0).then(|| self.slice(0, self.ns_len))
    }

    fn name(&self) -> &str {
        let start = if self.ns_len > 0 { self.ns_len + 1 } else { 0 };
        self.slice(start, self.ends[0])
    }

    fn part(&self, part: Part) -> Option<&str> {
        let i = part as usize;
        (self.present & (1 << i) != 0).then(|| self.slice(self.ends[i - 1], self.ends[i]))
    }

    fn heap_size(&self) -> usize {
        self.text.len()
    }
}

#[cfg(test)]
mod meta_strings_tests {
    use super::*;

    #[test]
    fn parts_read_back_from_one_buffer() {
        let m = MetaStrings::new(
            Some("prod"),
            "web-0",
            [
                Some("u-1"),
                Some("42"),
                None,
                Some(""),
                Some("2026-01-01T00:00:00Z"),
            ],
        )
        .unwrap();
        assert_eq!(m.key(), "prod/web-0");
        assert_eq!((m.namespace(), m.name()), (Some("prod"), "web-0"));
        assert_eq!(m.part(Part::Uid), Some("u-1"));
        assert_eq!(m.part(Part::ResourceVersion), Some("42"));
        assert_eq!(m.part(Part::ApiVersion), None, "absent");
        assert_eq!(m.part(Part::Kind), Some(""), "present and empty");
        assert_eq!(
            m.part(Part::DeletionTimestamp),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(m.heap_size(), "prod/web-0u-1422026-01-01T00:00:00Z".len());
    }

    #[test]
    fn cluster_scoped_and_empty_namespace_have_the_name_as_key() {
        for ns in [None, Some("")] {
            let m = MetaStrings::new(ns, "node-1", [None; 5]).unwrap();
            assert_eq!(
                (m.key(), m.name(), m.namespace()),
                ("node-1", "node-1", None)
            );
            assert_eq!(m.part(Part::Uid), None);
        }
        let d = MetaStrings::default();
        assert_eq!((d.key(), d.name(), d.namespace()), ("", "", None));
    }
}

impl fmt::Debug for MetaStrings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetaStrings")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("uid", &self.part(Part::Uid))
            .field("resource_version", &self.part(Part::ResourceVersion))
            .field("api_version", &self.part(Part::ApiVersion))
            .field("kind", &self.part(Part::Kind))
            .field("deletion_timestamp", &self.part(Part::DeletionTimestamp))
            .finish()
    }
}

impl Metadata {
    /// `apiVersion` of the object, when present.
    pub fn api_version(&self) -> Option<&str> {
        self.strings.part(Part::ApiVersion)
    }
    /// `kind` of the object, when present.
    pub fn kind(&self) -> Option<&str> {
        self.strings.part(Part::Kind)
    }
    /// `metadata.name` (never empty).
    pub fn name(&self) -> &str {
        self.strings.name()
    }
    /// `metadata.namespace`; `None` for cluster-scoped objects (an empty namespace is `None`).
    pub fn namespace(&self) -> Option<&str> {
        self.strings.namespace()
    }
    /// `metadata.uid`, when present.
    pub fn uid(&self) -> Option<&str> {
        self.strings.part(Part::Uid)
    }
    /// `metadata.resourceVersion`, when present.
    pub fn resource_version(&self) -> Option<&str> {
        self.strings.part(Part::ResourceVersion)
    }
    /// `metadata.generation`, when present.
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }
    /// `metadata.labels` (empty when absent).
    pub fn labels(&self) -> &StringMap {
        &self.labels
    }
    /// `metadata.annotations` (empty when absent).
    pub fn annotations(&self) -> &StringMap {
        &self.annotations
    }
    /// `metadata.ownerReferences` (empty when absent).
    pub fn owner_references(&self) -> &[OwnerReference] {
        &self.owner_references
    }
    /// The owner reference with `controller: true`, if any.
    pub fn controller_ref(&self) -> Option<&OwnerReference> {
        self.owner_references
            .iter()
            .find(|o| o.controller == Some(true))
    }
    /// `metadata.finalizers` (empty when absent).
    pub fn finalizers(&self) -> &[String] {
        &self.finalizers
    }
    /// `metadata.deletionTimestamp` as sent (RFC 3339), when the object is being deleted.
    pub fn deletion_timestamp(&self) -> Option<&str> {
        self.strings.part(Part::DeletionTimestamp)
    }
}

/// A parsed list of JSON-pointer field paths (e.g. `/spec/nodeName`) to
/// extract during the partial decode, for field indexes.
///
/// Build one per resource type and share it (it is cheap to clone): every
/// [`CachedObject`] built with it keeps a reference to find values by path.
#[derive(Debug, Clone)]
pub struct FieldPaths {
    inner: Arc<FieldPathsInner>,
}

#[derive(Debug)]
struct FieldPathsInner {
    paths: Vec<String>,
    /// Paths resolved from the extracted metadata instead of the byte scan.
    from_meta: Vec<(usize, Vec<String>)>,
    /// The other paths, for objects held as protobuf (JSON objects use
    /// `trie` during their one scan).
    scanned: Vec<(usize, Vec<String>)>,
    trie: PathNode,
}

#[derive(Debug, Default)]
struct PathNode {
    leaf: Option<usize>,
    children: Vec<(String, PathNode)>,
}

impl PathNode {
    fn child(&self, name: &str) -> Option<&PathNode> {
        self.children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c)
    }
    fn insert(&mut self, segments: &[String], index: usize) {
        match segments.split_first() {
            None => {
                if self.leaf.is_none() {
                    self.leaf = Some(index);
                }
            }
            Some((first, rest)) => {
                let pos = match self.children.iter().position(|(n, _)| n == first) {
                    Some(p) => p,
                    None => {
                        self.children.push((first.clone(), PathNode::default()));
                        self.children.len() - 1
                    }
                };
                self.children[pos].1.insert(rest, index);
            }
        }
    }
}

fn parse_pointer(path: &str) -> Result<Vec<String>, ObjectError> {
    let invalid = |reason| ObjectError::InvalidFieldPath {
        path: path.to_owned(),
        reason,
    };
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| invalid("a field path must start with '/'"))?;
    if rest.is_empty() {
        return Err(invalid("the whole document cannot be a field path"));
    }
    rest.split('/')
        .map(|seg| {
            let mut out = String::with_capacity(seg.len());
            let mut chars = seg.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err(invalid("'~' must be followed by '0' or '1'")),
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        })
        .collect()
}

impl FieldPaths {
    /// Parses JSON pointers such as `/spec/nodeName` or `/spec/containers/0/image`.
    ///
    /// Paths under `/metadata` (name, namespace, uid, resourceVersion,
    /// generation, deletionTimestamp, `labels/<key>`, `annotations/<key>`),
    /// `/kind` and `/apiVersion` are answered from the extracted metadata.
    pub fn new<I, S>(paths: I) -> Result<Self, ObjectError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut inner = FieldPathsInner {
            paths: Vec::new(),
            from_meta: Vec::new(),
            scanned: Vec::new(),
            trie: PathNode::default(),
        };
        for (i, p) in paths.into_iter().enumerate() {
            let p = p.into();
            let segs = parse_pointer(&p)?;
            if matches!(segs[0].as_str(), "metadata" | "kind" | "apiVersion") {
                inner.from_meta.push((i, segs));
            } else {
                inner.trie.insert(&segs, i);
                inner.scanned.push((i, segs));
            }
            inner.paths.push(p);
        }
        Ok(FieldPaths {
            inner: Arc::new(inner),
        })
    }

    /// The paths, in declaration order.
    pub fn paths(&self) -> &[String] {
        &self.inner.paths
    }

    /// Position of `path` in [`paths`](Self::paths).
    pub fn position(&self, path: &str) -> Option<usize> {
        self.inner.paths.iter().position(|p| p == path)
    }

    /// Number of declared paths.
    pub fn len(&self) -> usize {
        self.inner.paths.len()
    }

    /// Whether no path is declared.
    pub fn is_empty(&self) -> bool {
        self.inner.paths.is_empty()
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
/// [`compression`](Self::compression)`(`[`Compression::lz4()`]`)` it keeps
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
/// let options = ObjectOptions::new()
///     .strip_managed_fields(true)
///     .compression(Compression::lz4());
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
/// let dict = options.compression_mode().dictionary().unwrap();
/// assert!(first.dictionary().unwrap().ptr_eq(dict));
/// assert!(second.dictionary().unwrap().ptr_eq(dict));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct ObjectOptions {
    strip_managed_fields: bool,
    copy_bytes: bool,
    field_paths: Option<FieldPaths>,
    compression: Compression,
}

impl ObjectOptions {
    /// Default options: keep the bytes as given, extract no field path.
    pub fn new() -> Self {
        Self::default()
    }
    /// Cut `metadata.managedFields` out of the stored bytes.
    pub fn strip_managed_fields(mut self, strip: bool) -> Self {
        self.strip_managed_fields = strip;
        self
    }
    /// Copy the bytes into a buffer of their own instead of keeping the
    /// given `Bytes`. Set it when the input is a slice of a larger buffer
    /// (e.g. one item of a whole list response): a kept slice keeps the
    /// whole buffer alive for as long as any object built from it lives.
    /// (Bytes rebuilt by the managedFields cut, and compressed bytes, are
    /// always a buffer of their own.)
    pub fn copy_bytes(mut self, copy: bool) -> Self {
        self.copy_bytes = copy;
        self
    }
    /// Whether the bytes are copied.
    pub fn copies_bytes(&self) -> bool {
        self.copy_bytes
    }
    /// Extract these field paths during the partial decode.
    pub fn field_paths(mut self, paths: FieldPaths) -> Self {
        self.field_paths = Some(paths);
        self
    }
    /// Whether managedFields are cut.
    pub fn strips_managed_fields(&self) -> bool {
        self.strip_managed_fields
    }
    /// The declared field paths, if any.
    pub fn declared_field_paths(&self) -> Option<&FieldPaths> {
        self.field_paths.as_ref()
    }
    /// Store the JSON compressed ([`Compression::lz4()`]) or as given
    /// ([`Compression::none()`], the default). See
    /// [Compression](Self#compression) for the trade-off.
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }
    /// The compression setting (and, once learned, its dictionary).
    pub fn compression_mode(&self) -> &Compression {
        &self.compression
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
        let payload = match options.compression.compress(&bytes) {
            Some(compressed) => compressed,
            None if options.copy_bytes && !own_buffer => {
                Payload::Plain(Bytes::copy_from_slice(&bytes))
            }
            None => Payload::Plain(bytes),
        };
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
        let own_buffer = stripped.is_some();
        let bytes = match stripped {
            Some(cut) => Bytes::from(cut),
            None => object,
        };
        let fields = match &options.field_paths {
            Some(fp) => {
                let mut out = vec![None; fp.len()];
                for (i, segs) in &fp.inner.from_meta {
                    out[*i] = field_from_meta(&meta, segs);
                }
                for (i, segs) in &fp.inner.scanned {
                    out[*i] =
                        protobuf::field_value(&bytes, msg, segs).map_err(ObjectError::Transcode)?;
                }
                Some((fp.clone(), out.into_boxed_slice()))
            }
            None => None,
        };
        let payload = match options.compression.compress(&bytes) {
            Some(compressed) => compressed,
            None if options.copy_bytes && !own_buffer => {
                Payload::Plain(Bytes::copy_from_slice(&bytes))
            }
            None => Payload::Plain(bytes),
        };
        Ok(CachedObject {
            inner: Arc::new(Inner {
                payload,
                codec: Codec::Protobuf(msg),
                meta,
                fields,
            }),
            _kind: PhantomData,
        })
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
        let own_buffer = stripped.is_some();
        let bytes = match stripped {
            Some(cut) => Bytes::from(cut),
            None => object,
        };
        let fields = match &options.field_paths {
            Some(fp) => {
                let mut out = vec![None; fp.len()];
                for (i, segs) in &fp.inner.from_meta {
                    out[*i] = field_from_meta(&meta, segs);
                }
                for (i, segs) in &fp.inner.scanned {
                    out[*i] =
                        crate::cbor::meta::field_value(&bytes, segs).map_err(ObjectError::Cbor)?;
                }
                Some((fp.clone(), out.into_boxed_slice()))
            }
            None => None,
        };
        let payload = match options.compression.compress(&bytes) {
            Some(compressed) => compressed,
            None if options.copy_bytes && !own_buffer => {
                Payload::Plain(Bytes::copy_from_slice(&bytes))
            }
            None => Payload::Plain(bytes),
        };
        Ok(CachedObject {
            inner: Arc::new(Inner {
                payload,
                codec: Codec::Cbor,
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

fn span_in(bytes: &[u8], part: &str) -> Option<(usize, usize)> {
    let base = bytes.as_ptr() as usize;
    let start = (part.as_ptr() as usize).checked_sub(base)?;
    let end = start.checked_add(part.len())?;
    (end <= bytes.len()).then_some((start, end))
}

fn field_from_meta(meta: &Metadata, segs: &[String]) -> Option<Box<str>> {
    let own = |s: Option<&str>| s.map(Box::from);
    match segs {
        [k] if k == "kind" => own(meta.kind()),
        [k] if k == "apiVersion" => own(meta.api_version()),
        [m, f] if m == "metadata" => match f.as_str() {
            "name" => own(Some(meta.name())),
            "namespace" => own(meta.namespace()),
            "uid" => own(meta.uid()),
            "resourceVersion" => own(meta.resource_version()),
            "generation" => meta.generation.map(|g| g.to_string().into_boxed_str()),
            "deletionTimestamp" => own(meta.deletion_timestamp()),
            _ => None,
        },
        [m, map, key] if m == "metadata" && map == "labels" => meta.labels.get(key).map(Box::from),
        [m, map, key] if m == "metadata" && map == "annotations" => {
            meta.annotations.get(key).map(Box::from)
        }
        _ => None,
    }
}

/// A string borrowed from the input when it has no escapes, owned otherwise.
pub(crate) struct CowStr<'a>(pub(crate) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for CowStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta<'a> {
    #[serde(borrow, default)]
    name: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    namespace: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    uid: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    resource_version: Option<CowStr<'a>>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<StringMap>,
    #[serde(default)]
    annotations: Option<StringMap>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(borrow, default)]
    deletion_timestamp: Option<CowStr<'a>>,
    #[serde(borrow, default, deserialize_with = "raw_any")]
    managed_fields: Option<&'a RawValue>,
}

/// Captures any value (including `null`) as raw JSON text.
fn raw_any<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

struct Top<'a> {
    meta: Option<RawMeta<'a>>,
    api_version: Option<CowStr<'a>>,
    kind: Option<CowStr<'a>>,
    managed_fields: Option<&'a RawValue>,
}

fn build_meta(top: Top<'_>) -> Result<Metadata, ObjectError> {
    let m = top.meta.ok_or(ObjectError::MissingName)?;
    let name = match &m.name {
        Some(n) if !n.0.is_empty() => n.0.as_ref(),
        _ => return Err(ObjectError::MissingName),
    };
    fn s<'c>(c: &'c Option<CowStr<'_>>) -> Option<&'c str> {
        c.as_ref().map(|c| c.0.as_ref())
    }
    Ok(Metadata {
        strings: MetaStrings::new(
            s(&m.namespace),
            name,
            [
                s(&m.uid),
                s(&m.resource_version),
                s(&top.api_version),
                s(&top.kind),
                s(&m.deletion_timestamp),
            ],
        )?,
        generation: m.generation,
        labels: m.labels.unwrap_or_default(),
        annotations: m.annotations.unwrap_or_default(),
        owner_references: m.owner_references.unwrap_or_default(),
        finalizers: m.finalizers.unwrap_or_default(),
    })
}

struct TopVisitor<'t> {
    trie: &'t PathNode,
    out: &'t mut Vec<Option<Box<str>>>,
}

impl<'de, 't> Visitor<'de> for TopVisitor<'t> {
    type Value = Top<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object (a JSON object)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut top = Top {
            meta: None,
            api_version: None,
            kind: None,
            managed_fields: None,
        };
        while let Some(key) = map.next_key::<CowStr<'de>>()? {
            match key.0.as_ref() {
                "metadata" => {
                    if top.meta.is_some() {
                        return Err(de::Error::duplicate_field("metadata"));
                    }
                    let m: Option<RawMeta<'de>> = map.next_value()?;
                    top.managed_fields = m.as_ref().and_then(|m| m.managed_fields);
                    top.meta = m;
                }
                "apiVersion" => top.api_version = map.next_value()?,
                "kind" => top.kind = map.next_value()?,
                other => next_value_under(&mut map, self.trie.child(other), self.out)?,
            }
        }
        Ok(top)
    }
}

/// The value of the current map entry: read through `node` (a wanted
/// path goes on below this key) into `out`, or skipped.
fn next_value_under<'de, A: MapAccess<'de>>(
    map: &mut A,
    node: Option<&PathNode>,
    out: &mut Vec<Option<Box<str>>>,
) -> Result<(), A::Error> {
    match node {
        Some(node) => map.next_value_seed(NodeSeed { node, out }),
        None => map.next_value::<IgnoredAny>().map(drop),
    }
}

struct NodeSeed<'t> {
    node: &'t PathNode,
    out: &'t mut Vec<Option<Box<str>>>,
}

fn leaf_value<E: de::Error>(raw: &RawValue) -> Result<Option<Box<str>>, E> {
    let text = raw.get();
    if text.starts_with('"') {
        let s: CowStr<'_> = serde_json::from_str(text).map_err(E::custom)?;
        Ok(Some(Box::from(s.0.as_ref())))
    } else if text == "null" {
        Ok(None)
    } else {
        Ok(Some(Box::from(text)))
    }
}

impl<'de, 't> DeserializeSeed<'de> for NodeSeed<'t> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if let Some(idx) = self.node.leaf {
            let raw: &RawValue = <&RawValue>::deserialize(d)?;
            if let Some(slot) = self.out.get_mut(idx) {
                *slot = leaf_value(raw)?;
            }
            if !self.node.children.is_empty() {
                let mut inner = serde_json::Deserializer::from_str(raw.get());
                inner
                    .deserialize_any(NodeVisitor {
                        node: self.node,
                        out: self.out,
                    })
                    .map_err(de::Error::custom)?;
            }
            Ok(())
        } else {
            d.deserialize_any(NodeVisitor {
                node: self.node,
                out: self.out,
            })
        }
    }
}

struct NodeVisitor<'t> {
    node: &'t PathNode,
    out: &'t mut Vec<Option<Box<str>>>,
}

impl<'de, 't> Visitor<'de> for NodeVisitor<'t> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<CowStr<'de>>()? {
            next_value_under(&mut map, self.node.child(&key.0), self.out)?;
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let name = i.to_string();
            match self.node.child(&name) {
                Some(node) => {
                    if seq
                        .next_element_seed(NodeSeed {
                            node,
                            out: &mut *self.out,
                        })?
                        .is_none()
                    {
                        break;
                    }
                }
                None => {
                    if seq.next_element::<IgnoredAny>()?.is_none() {
                        break;
                    }
                }
            }
            i += 1;
        }
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}
