//! [`ShardSelectorError`]: why a shard selector, range or split is invalid.

use super::range::render_bound;
use super::{MAX_QUERY_VALUE_LEN, MAX_SHARDS, ShardField, ShardRange};

/// Why a shard selector, range or split is invalid. Each message says what
/// to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardSelectorError {
    /// No range at all.
    #[error(
        "a shard selector needs at least one range; to list everything, send no shard selector"
    )]
    Empty,
    /// `start >= end`: the range holds no hash.
    #[error(
        "shard range [{}, {}) is empty or inverted: start must be below end",
        render_bound(*start),
        render_bound(*end)
    )]
    InvertedRange {
        /// The start given (2^64 when a parsed start is `0x10000000000000000`).
        start: u128,
        /// The end given.
        end: u128,
    },
    /// `end` above 2^64.
    #[error(
        "shard range end {end:#x} is beyond the 64-bit hash space: the largest end is 0x10000000000000000 (2^64)"
    )]
    EndBeyondHashSpace {
        /// The end given.
        end: u128,
    },
    /// Two ranges share hashes.
    #[error("shard ranges {first} and {second} overlap: give each hash to one range")]
    Overlapping {
        /// The range that starts first.
        first: ShardRange,
        /// The range that starts inside `first`.
        second: ShardRange,
    },
    /// Ranges over different fields in one selector.
    #[error(
        "all shard ranges of a selector must hash the same field, got {first} and {second}: use one field"
    )]
    MixedFields {
        /// The field of the first range.
        first: ShardField,
        /// The first other field found.
        second: ShardField,
    },
    /// A field path the apiserver does not shard on.
    #[error(
        "unsupported shard field {path:?}: use object.metadata.uid or object.metadata.namespace"
    )]
    UnsupportedField {
        /// The path as written.
        path: String,
    },
    /// The selector is too long to send in a request URI.
    #[error(
        "a shard selector of {ranges} ranges is {len} bytes as a query value, over the {MAX_QUERY_VALUE_LEN} that keep a request URI sendable: use fewer, wider ranges"
    )]
    TooLong {
        /// How many ranges.
        ranges: usize,
        /// The length of its query value
        /// ([`ShardSelector::to_query_value`](super::ShardSelector::to_query_value)).
        len: usize,
    },
    /// A split into 0 parts, more than [`MAX_SHARDS`], or more parts than the
    /// range has hashes.
    #[error(
        "cannot cut {range} into {count} ranges: ask for 1 to {MAX_SHARDS}, and no more than the range holds hashes"
    )]
    InvalidShardCount {
        /// The range being cut.
        range: ShardRange,
        /// The number asked for.
        count: usize,
    },
    /// A slot index outside [`ShardSlots`](super::ShardSlots).
    #[error("slot {slot} does not exist: the hash space is cut into {count} slots (0..{count})")]
    SlotOutOfRange {
        /// The slot asked for.
        slot: usize,
        /// How many slots there are.
        count: usize,
    },
    /// A selector string that does not parse.
    #[error("invalid shard selector {selector:?} at position {position}: {message}")]
    Syntax {
        /// The selector as given.
        selector: String,
        /// Byte offset of the problem in `selector`.
        position: usize,
        /// What was wrong and what is expected.
        message: String,
    },
}
