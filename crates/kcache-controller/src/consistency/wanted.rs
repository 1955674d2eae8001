//! [`Wanted`]: what a cache must have seen of a write (below the ledger
//! that records it and the type caches that compare it).

use std::sync::Arc;

use kcache_core::ResourceVersion;

/// What a cache must have seen of a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// The cache's freshness at the version the write returned.
    Version(ResourceVersion),
    /// The deletion of the object with `uid` under `key`.
    Deletion { key: String, uid: Arc<str> },
}

impl Wanted {
    /// The version waited for (none for a deletion, whose version only the
    /// watch's event carries).
    pub(crate) fn version(&self) -> Option<&ResourceVersion> {
        match self {
            Wanted::Version(rv) => Some(rv),
            Wanted::Deletion { .. } => None,
        }
    }

    pub(super) fn same_slot(&self, other: &Wanted) -> bool {
        match (self, other) {
            (Wanted::Version(_), Wanted::Version(_)) => true,
            (Wanted::Deletion { key: a, .. }, Wanted::Deletion { key: b, .. }) => a == b,
            _ => false,
        }
    }
}

impl std::fmt::Display for Wanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wanted::Version(rv) => write!(f, "{rv}"),
            Wanted::Deletion { key, .. } => write!(f, "the deletion of {key}"),
        }
    }
}
