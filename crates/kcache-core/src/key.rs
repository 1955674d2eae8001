//! Key functions: how an object maps to its cache key.

use std::error::Error as StdError;

use crate::object::CachedObject;
use crate::tombstone::ObjectOrTombstone;

/// A boxed error from user code (key, index or transform functions).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Failure to compute or parse a key. Never a panic.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A key given to [`split_meta_namespace_key`] has more than two `/`-separated parts.
    #[error("unexpected key format: {key:?}")]
    UnexpectedFormat {
        /// The offending key.
        key: String,
    },
    /// A key function failed for an object.
    #[error("couldn't create key for object {object}")]
    Object {
        /// A short description of the object (usually its default key).
        object: String,
        /// The key function's error, reachable through `Error::source`.
        #[source]
        source: BoxError,
    },
}

impl KeyError {
    /// Wraps a key function's error for `obj` (client-go's `KeyError{Obj, Err}`).
    pub fn for_object<K>(obj: &CachedObject<K>, source: impl Into<BoxError>) -> Self {
        KeyError::Object {
            object: obj.key().to_owned(),
            source: source.into(),
        }
    }
}

/// A function giving an object's key. Implemented by every
/// `Fn(&CachedObject<K>) -> Result<String, KeyError> + Send + Sync`, e.g.
/// [`meta_namespace_key`]. The FIFOs and the indexer take one as
/// `Arc<dyn KeyFunc<K>>`.
pub trait KeyFunc<K>: Send + Sync {
    /// The key of `obj`.
    fn key(&self, obj: &CachedObject<K>) -> Result<String, KeyError>;
}

impl<K, F> KeyFunc<K> for F
where
    F: Fn(&CachedObject<K>) -> Result<String, KeyError> + Send + Sync,
{
    fn key(&self, obj: &CachedObject<K>) -> Result<String, KeyError> {
        self(obj)
    }
}

/// The default key function: `namespace/name`, or `name` for cluster-scoped
/// objects (client-go's `MetaNamespaceKeyFunc`).
///
/// ```
/// use kcache_core::{CachedObject, meta_namespace_key};
/// let o: CachedObject<()> = CachedObject::from_bytes(&br#"{"metadata":{"name":"a","namespace":"ns"}}"#[..])?;
/// assert_eq!(meta_namespace_key(&o)?, "ns/a");
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub fn meta_namespace_key<K>(obj: &CachedObject<K>) -> Result<String, KeyError> {
    Ok(obj.key().to_owned())
}

/// Like [`meta_namespace_key`], but a tombstone gives its recorded key
/// (client-go's `DeletionHandlingMetaNamespaceKeyFunc`).
pub fn deletion_handling_meta_namespace_key<K>(
    obj: &ObjectOrTombstone<K>,
) -> Result<String, KeyError> {
    match obj {
        ObjectOrTombstone::Tombstone(t) => Ok(t.key.clone()),
        ObjectOrTombstone::Object(o) => meta_namespace_key(o),
    }
}

/// Applies `key_func` to an object, or takes a tombstone's recorded key.
pub fn deletion_handling_key<K>(
    key_func: &dyn KeyFunc<K>,
    obj: &ObjectOrTombstone<K>,
) -> Result<String, KeyError> {
    match obj {
        ObjectOrTombstone::Tombstone(t) => Ok(t.key.clone()),
        ObjectOrTombstone::Object(o) => key_func.key(o),
    }
}

/// Splits a `namespace/name` key; a key without `/` is a cluster-scoped
/// name and gives namespace `""`. More than one `/` is an error.
///
/// ```
/// use kcache_core::split_meta_namespace_key;
/// assert_eq!(split_meta_namespace_key("ns/a").unwrap(), ("ns", "a"));
/// assert_eq!(split_meta_namespace_key("node-1").unwrap(), ("", "node-1"));
/// assert!(split_meta_namespace_key("a/b/c").is_err());
/// ```
pub fn split_meta_namespace_key(key: &str) -> Result<(&str, &str), KeyError> {
    let mut parts = key.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, None) => Ok(("", name)),
        (Some(ns), Some(name), None) => Ok((ns, name)),
        _ => Err(KeyError::UnexpectedFormat {
            key: key.to_owned(),
        }),
    }
}
