//! The cached Kubernetes object (the apiserver's bytes + metadata, typed on
//! demand), key functions, label selectors, shard selectors, tombstones and
//! the store traits every kcache layer shares.
//!
//! A [`CachedObject<K>`] keeps the bytes the apiserver sent (JSON, CBOR,
//! or protobuf for built-in types; optionally with `metadata.managedFields`
//! cut out) plus the [`Metadata`] every layer needs, extracted once by a
//! partial, borrowing decode. The typed `K`
//! (a k8s-openapi type, a custom resource, `DynamicObject`...) is decoded on
//! demand with [`CachedObject::decode`]. With
//! [`ObjectOptions::compression`] the JSON is kept LZ4-compressed against a
//! dictionary shared by all objects built with the same options: less memory
//! per cached object, a decompression before every decode (see
//! [`ObjectOptions`](ObjectOptions#compression) for the trade-off).
//!
//! A [`ShardSelector`] is the filter of the apiserver's server-side sharded
//! list and watch (KEP-5866): a field ([`ShardField`]: uid or namespace) and
//! hash ranges ([`ShardRange`]), rendered to the `shardSelector` syntax,
//! parsed back from the `metadata.shardInfo.selector` echo, and matched on
//! the client with the apiserver's hash ([`shard_hash`], FNV-1a 64) where the
//! server does not filter.
//!
//! ```
//! use kcache_core::{CachedObject, FieldPaths, ObjectOptions, Selector, split_meta_namespace_key};
//!
//! let json = br#"{"apiVersion":"v1","kind":"Pod",
//!   "metadata":{"name":"web-0","namespace":"prod","labels":{"app":"web"},
//!               "managedFields":[{"manager":"kubectl"}]},
//!   "spec":{"nodeName":"node-7"}}"#;
//! let options = ObjectOptions {
//!     strip_managed_fields: true,
//!     field_paths: Some(FieldPaths::new(["/spec/nodeName"])?),
//!     ..ObjectOptions::default()
//! };
//! let pod: CachedObject<serde_json::Value> = CachedObject::from_bytes_with(&json[..], &options)?;
//!
//! assert_eq!(pod.key(), "prod/web-0");
//! assert_eq!(pod.field("/spec/nodeName"), Some("node-7"));
//! assert!(Selector::parse("app in (web,api)")?.matches(pod.labels()));
//! assert_eq!(split_meta_namespace_key(pod.key())?, ("prod", "web-0"));
//! let typed = pod.decode()?; // full decode only when asked
//! assert!(typed["metadata"].get("managedFields").is_none());
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

// docs.rs (rustdoc --cfg docsrs, nightly): items behind a feature carry a
// badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The wire readers (`cbor`, `protobuf`) and the lock helper (`sync`) are
// plumbing for the kcache crates above (the reflector's codecs, every
// crate's locks): public so that those crates can use them, hidden from the
// docs and outside semver. A user reaches the wire formats through
// `CachedObject` and the reflector's `WireFormat`.
mod byte_blocks;
#[doc(hidden)]
pub mod cbor;
mod codec;
mod compression;
mod error_chain;
mod key;
mod managed_fields;
pub mod metrics;
mod object;
#[doc(hidden)]
pub mod protobuf;
mod resource_version;
mod selector;
mod shard_selector;
mod store;
mod string_map;
#[doc(hidden)]
pub mod sync;
mod tombstone;

pub use byte_blocks::ByteBlocks;
pub use compression::{Compression, CompressionDictionary, decodes, decompressions};
pub use error_chain::ErrorChain;
pub use key::{
    BoxError, KeyError, KeyFunc, deletion_handling_key, deletion_handling_meta_namespace_key,
    meta_namespace_key, split_meta_namespace_key,
};
pub use object::{
    CachedObject, DecodeError, FieldPaths, Format, Metadata, ObjectError, ObjectOptions,
    OwnerReference,
};
pub use resource_version::{IncomparableResourceVersion, ResourceVersion};
pub use selector::{LabelSet, Operator, Requirement, Selector, SelectorError};
pub use shard_selector::{
    HASH_SPACE_END, MAX_QUERY_VALUE_LEN, MAX_SELECTOR_LEN, MAX_SHARDS, ShardField, ShardRange,
    ShardSelector, ShardSelectorError, ShardSlots, shard_hash,
};
pub use store::{KeyListerGetter, ReflectorStore, StoreError};
pub use string_map::StringMap;
pub use tombstone::{DeletedFinalStateUnknown, ObjectOrTombstone};
