//! [`ShardField`]: the metadata field a shard selector hashes, and the
//! value and hash the apiserver computes for an object.

use std::fmt;

use super::{ShardSelectorError, shard_hash};
use crate::object::Metadata;

/// The metadata field a [`ShardSelector`](super::ShardSelector) hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ShardField {
    /// `metadata.uid`: spreads objects evenly, but an object and the
    /// objects it relates to (owner, children) usually land on different
    /// shards.
    Uid,
    /// `metadata.namespace`: keeps a namespace on one shard (parents and
    /// children together); as even as the namespaces are. Every
    /// cluster-scoped object hashes the empty string, so all land on one shard.
    Namespace,
}

impl ShardField {
    /// The path in the selector syntax: `object.metadata.uid` or
    /// `object.metadata.namespace`.
    pub const fn path(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }

    /// The field for a selector path (`object.metadata.uid`, `object.metadata.namespace`).
    pub fn from_path(path: &str) -> Result<Self, ShardSelectorError> {
        match path {
            "object.metadata.uid" => Ok(ShardField::Uid),
            "object.metadata.namespace" => Ok(ShardField::Namespace),
            _ => Err(ShardSelectorError::UnsupportedField {
                path: path.to_owned(),
            }),
        }
    }

    /// The value the apiserver hashes: the field's string, or `""` when
    /// absent (a cluster-scoped object's namespace; an object without uid).
    pub fn value(self, meta: &Metadata) -> &str {
        match self {
            ShardField::Uid => meta.uid(),
            ShardField::Namespace => meta.namespace(),
        }
        .unwrap_or("")
    }

    /// [`shard_hash`] of [`ShardField::value`].
    pub fn hash(self, meta: &Metadata) -> u64 {
        shard_hash(self.value(meta).as_bytes())
    }
}

impl fmt::Display for ShardField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}
