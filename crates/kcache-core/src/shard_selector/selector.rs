//! [`ShardSelector`]: a field and disjoint hash ranges; its construction,
//! its rendering to the apiserver's syntax and its evaluation on the client
//! ([`ShardSelector::matches`]).

use std::fmt;
use std::str::FromStr;

use super::parser::Parser;
use super::{
    MAX_QUERY_VALUE_LEN, QUERY_SEPARATOR, ShardField, ShardRange, ShardSelectorError, shard_hash,
};
use crate::object::Metadata;

/// A server-side shard filter: a field and one or more disjoint hash ranges.
///
/// An object is in the shard when [`shard_hash`] of its field's value lies in
/// one of the ranges. The ranges are kept sorted by start; they never overlap
/// (adjacent ranges are kept as given, not merged).
///
/// Rendered (`Display`, [`to_string`](ToString::to_string)) to the exact
/// syntax the apiserver expects for the `shardSelector` parameter, and that
/// it echoes in a filtered list's `metadata.shardInfo.selector`:
///
/// ```
/// use kcache_core::{ShardField, ShardSelector};
/// let shards = ShardSelector::contiguous(ShardField::Uid, 2)?;
/// assert_eq!(
///     shards[1].to_string(),
///     "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
/// );
/// // the echo parses back to the same selector
/// assert_eq!(shards[1].to_string().parse::<ShardSelector>()?, shards[1]);
/// // client-side filtering with the same hash
/// let obj = kcache_core::CachedObject::<()>::from_bytes(
///     &br#"{"metadata":{"name":"a","namespace":"ns","uid":"6d3c9d4e-5a35-4d5e-9d48-0d7f1b0c2a11"}}"#[..],
/// )?;
/// assert!(shards.iter().filter(|s| s.matches(obj.meta())).count() == 1);
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
///
/// # What the apiserver answers (v1.37.2, observed on the local control plane)
///
/// * Gate on: lists and watches (including streaming lists) hold exactly
///   the objects [`matches`](Self::matches) accepts. A JSON or protobuf list
///   carries `metadata.shardInfo.selector` (protobuf: `ListMeta` field 5),
///   the canonical rendering of the selector, ranges in the order sent; a
///   metadata-only list (`PartialObjectMetadataList`) is filtered but carries
///   **no** `shardInfo`, and a streaming list has no list to carry it.
/// * A selector it rejects: HTTP 500, a `Status` without `reason`, message
///   `invalid shard selector: <why>`, on lists and watches alike: not a
///   transient error, do not retry it.
/// * Gate off: the parameter is ignored, not even parsed: every object is
///   served, no `shardInfo`, an invalid selector is answered 200. So a full
///   list without `shardInfo` means "the server did not filter": filter with
///   [`matches`](Self::matches) (idempotent on a filtered stream, so
///   filtering whenever the echo cannot be seen is always safe).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShardSelector {
    field: ShardField,
    ranges: Vec<ShardRange>,
}

impl ShardSelector {
    /// A selector over `field` with the given ranges (in any order). Errors
    /// when there is none, when two overlap, or when its query value would
    /// be longer than [`MAX_QUERY_VALUE_LEN`].
    pub fn new(
        field: ShardField,
        ranges: impl IntoIterator<Item = ShardRange>,
    ) -> Result<Self, ShardSelectorError> {
        let mut ranges: Vec<ShardRange> = ranges.into_iter().collect();
        if ranges.is_empty() {
            return Err(ShardSelectorError::Empty);
        }
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            if u128::from(pair[1].start) < pair[0].end {
                return Err(ShardSelectorError::Overlapping {
                    first: pair[0],
                    second: pair[1],
                });
            }
        }
        let len = ranges.iter().map(|r| r.query_len(field)).sum::<usize>()
            + QUERY_SEPARATOR.len() * (ranges.len() - 1);
        if len > MAX_QUERY_VALUE_LEN {
            return Err(ShardSelectorError::TooLong {
                ranges: ranges.len(),
                len,
            });
        }
        Ok(ShardSelector { field, ranges })
    }

    /// A selector of one range.
    pub fn single(field: ShardField, range: ShardRange) -> Self {
        ShardSelector {
            field,
            ranges: vec![range],
        }
    }

    /// `count` selectors of one contiguous range each, covering the whole
    /// hash space in order (member `i` of `count` takes the `i`-th).
    pub fn contiguous(field: ShardField, count: usize) -> Result<Vec<Self>, ShardSelectorError> {
        Ok(ShardRange::FULL
            .split(count)?
            .into_iter()
            .map(|r| ShardSelector::single(field, r))
            .collect())
    }

    /// Parses the apiserver's syntax, e.g. the `metadata.shardInfo.selector`
    /// echo of a filtered list. Accepts what the apiserver accepts for
    /// bounds (see the module docs), single or double quotes, any
    /// whitespace between tokens and parentheses around sub-expressions;
    /// rejects what [`ShardSelector::new`] rejects (overlaps, mixed fields).
    pub fn parse(selector: &str) -> Result<Self, ShardSelectorError> {
        Parser::new(selector).parse()
    }

    /// The hashed field.
    pub fn field(&self) -> ShardField {
        self.field
    }

    /// The ranges, sorted by start, disjoint.
    pub fn ranges(&self) -> &[ShardRange] {
        &self.ranges
    }

    /// Whether `hash` lies in one of the ranges.
    pub fn contains(&self, hash: u64) -> bool {
        // the last range starting at or below `hash` is the only candidate
        let i = self.ranges.partition_point(|r| r.start <= hash);
        i > 0 && self.ranges[i - 1].contains(hash)
    }

    /// Whether an object with this metadata is in the shard: the apiserver's
    /// filter, applied on the client.
    pub fn matches(&self, meta: &Metadata) -> bool {
        self.contains(self.field.hash(meta))
    }

    /// Whether an object whose field has this value is in the shard.
    pub fn matches_value(&self, value: &str) -> bool {
        self.contains(shard_hash(value.as_bytes()))
    }

    /// The share of the hash space the selector holds, in `(0, 1]`.
    pub fn fraction(&self) -> f64 {
        self.ranges.iter().map(ShardRange::fraction).sum()
    }

    /// The selector as a query value, for `?shardSelector=<this>`: the
    /// rendering with space escaped as `%20` and `|` as `%7C`; `(`, `)`,
    /// `'`, `,` and `.` may stand in a query as they are (RFC 3986), and
    /// the apiserver reads them so. At most [`MAX_QUERY_VALUE_LEN`] bytes.
    pub fn to_query_value(&self) -> String {
        self.to_string().replace(' ', "%20").replace('|', "%7C")
    }
}

impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                out.push_str(" || ");
            }
            r.render(self.field, &mut out);
        }
        f.write_str(&out)
    }
}

impl FromStr for ShardSelector {
    type Err = ShardSelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ShardSelector::parse(s)
    }
}
