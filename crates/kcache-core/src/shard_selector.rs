//! Shard selectors: the filter of the apiserver's server-side sharded list
//! and watch (KEP-5866, feature gate `ShardedListAndWatch`), and the same
//! hash on the client.
//!
//! A [`ShardSelector`] names a metadata field ([`ShardField`]: `uid` or
//! `namespace`) and one or more half-open ranges `[start, end)`
//! ([`ShardRange`]) of the 64-bit FNV-1a hash of that field's value. An
//! object belongs to the shard when the hash of its field lies in one of the
//! ranges. Sent as the `shardSelector` list/watch parameter, the apiserver
//! serves only those objects; [`ShardSelector::matches`] applies the same
//! filter on the client, for servers that do not filter.
//!
//! Everything here follows the apiserver of the pinned modules
//! (`k8s.io/apimachinery@v0.37.2/pkg/sharding`, `k8s.io/apiserver@v0.37.2/pkg/sharding/parser.go`):
//!
//! * the hash is FNV-1a 64 over the raw bytes of the field's string value
//!   (`hash/fnv` `New64a`, `h.Write([]byte(value))`); a cluster-scoped
//!   object's namespace is the empty string, whose hash is the FNV offset
//!   basis `0xcbf29ce484222325`;
//! * a bound is a single-quoted, `0x`-prefixed, lowercase hex literal of
//!   exactly 16 digits, except the end of the hash space, 2^64, which is
//!   spelled `'0x10000000000000000'` (17 digits); `start < end`;
//! * ranges are joined with ` || `; all must name the same field;
//! * the expression is parsed by CEL, limited to 100,000 characters
//!   ([`MAX_SELECTOR_LEN`]); a client meets a lower limit first: the
//!   request URI, at most 65,534 bytes in the `http` crate under `kube`,
//!   so a selector's query value is kept under [`MAX_QUERY_VALUE_LEN`]
//!   (659 uid ranges).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::object::Metadata;

/// The exclusive end of the 64-bit hash space, 2^64: the `end` of a range
/// that reaches the last hash. Rendered `0x10000000000000000`.
pub const HASH_SPACE_END: u128 = 1 << 64;

/// The longest selector the apiserver accepts, in characters: its CEL
/// parser's default expression size limit (`cel-go@v0.29.2/parser/parser.go`,
/// `expressionSizeCodePointLimit = 100_000`), 1,265 uid ranges. A client
/// cannot send that much through `kube` (see [`MAX_QUERY_VALUE_LEN`]).
pub const MAX_SELECTOR_LEN: usize = 100_000;

/// The longest [`ShardSelector::to_query_value`] a selector may have, in
/// bytes: the `http` crate under `kube` refuses request URIs over 65,534
/// bytes, and the path and the other list parameters need the rest. That is
/// 659 uid or 618 namespace ranges at most; [`ShardSelector::new`] enforces it.
pub const MAX_QUERY_VALUE_LEN: usize = 60_000;

/// The most ranges [`ShardRange::split`] and [`ShardSlots`] cut the space into.
pub const MAX_SHARDS: usize = 1 << 16;

/// `" || "` as a query value.
const QUERY_SEPARATOR: &str = "%20%7C%7C%20";

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The apiserver's shard hash: 64-bit FNV-1a over `bytes` (for a field, its
/// UTF-8 string value; the empty value hashes to `0xcbf29ce484222325`).
///
/// ```
/// assert_eq!(kcache_core::shard_hash(b""), 0xcbf29ce484222325);
/// assert_eq!(kcache_core::shard_hash(b"a"), 0xaf63dc4c8601ec8c);
/// ```
pub fn shard_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

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
        /// The length of its query value ([`ShardSelector::to_query_value`]).
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
    /// A slot index outside [`ShardSlots`].
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

/// The metadata field a [`ShardSelector`] hashes.
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

/// A bound as the apiserver spells it: `0x` and 16 lowercase hex digits;
/// 2^64 is `0x10000000000000000`.
fn render_bound(v: u128) -> String {
    format!("0x{v:016x}")
}

/// A half-open range `[start, end)` of the 64-bit hash space, never empty.
///
/// `end` is a `u128` so that a range can reach the last hash: its largest
/// value is [`HASH_SPACE_END`] (2^64), rendered `0x10000000000000000`.
///
/// ```
/// use kcache_core::{HASH_SPACE_END, ShardRange};
/// let upper = ShardRange::new(0x8000_0000_0000_0000, HASH_SPACE_END)?;
/// assert!(upper.contains(u64::MAX));
/// assert!(!upper.contains(0x7fff_ffff_ffff_ffff));
/// assert_eq!(upper.to_string(), "[0x8000000000000000, 0x10000000000000000)");
/// # Ok::<_, kcache_core::ShardSelectorError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardRange {
    start: u64,
    end: u128,
}

impl ShardRange {
    /// The whole hash space, `[0, 2^64)`.
    pub const FULL: ShardRange = ShardRange {
        start: 0,
        end: HASH_SPACE_END,
    };

    /// `[start, end)`; `end` at most [`HASH_SPACE_END`] and above `start`.
    pub fn new(start: u64, end: u128) -> Result<Self, ShardSelectorError> {
        if end > HASH_SPACE_END {
            return Err(ShardSelectorError::EndBeyondHashSpace { end });
        }
        if u128::from(start) >= end {
            return Err(ShardSelectorError::InvertedRange {
                start: start.into(),
                end,
            });
        }
        Ok(ShardRange { start, end })
    }

    /// The first hash in the range (inclusive).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The first hash past the range (exclusive); [`HASH_SPACE_END`] when
    /// the range reaches the last hash.
    pub fn end(&self) -> u128 {
        self.end
    }

    /// How many hashes the range holds (`end - start`, at least 1).
    pub fn width(&self) -> u128 {
        self.end - u128::from(self.start)
    }

    /// The share of the hash space the range holds, in `(0, 1]`.
    pub fn fraction(&self) -> f64 {
        // u128 -> f64 rounds; a share is only ever reported, never compared.
        self.width() as f64 / HASH_SPACE_END as f64
    }

    /// Whether `start <= hash < end`.
    pub fn contains(&self, hash: u64) -> bool {
        self.start <= hash && u128::from(hash) < self.end
    }

    /// Cuts the range into `count` contiguous ranges of equal width (to one
    /// hash), in order: boundary `i` is `start + floor(i * width / count)`.
    ///
    /// ```
    /// use kcache_core::ShardRange;
    /// let halves = ShardRange::FULL.split(2)?;
    /// assert_eq!(halves[0].end(), 0x8000_0000_0000_0000);
    /// assert_eq!(halves[1].start(), 0x8000_0000_0000_0000);
    /// # Ok::<_, kcache_core::ShardSelectorError>(())
    /// ```
    pub fn split(&self, count: usize) -> Result<Vec<ShardRange>, ShardSelectorError> {
        let width = self.width();
        if count == 0 || count > MAX_SHARDS || count as u128 > width {
            return Err(ShardSelectorError::InvalidShardCount {
                range: *self,
                count,
            });
        }
        let n = count as u128;
        // i * width < 2^16 * 2^64: no overflow in u128
        let boundary = |i: u128| u128::from(self.start) + i * width / n;
        Ok((0..n)
            .map(|i| ShardRange {
                // boundary(i) < end <= 2^64 for i < n
                start: boundary(i) as u64,
                end: boundary(i + 1),
            })
            .collect())
    }

    fn render(&self, field: ShardField, out: &mut String) {
        use fmt::Write as _;
        let _ = write!(
            out,
            "shardRange({}, '{}', '{}')",
            field.path(),
            render_bound(u128::from(self.start)),
            render_bound(self.end)
        );
    }

    /// Length of [`render`](Self::render) as a query value:
    /// `shardRange(` path `,%20'` bound `',%20'` bound `')`.
    fn query_len(&self, field: ShardField) -> usize {
        let end_digits = if self.end == HASH_SPACE_END { 17 } else { 16 };
        "shardRange(".len()
            + field.path().len()
            + ",%20'0x".len()
            + 16
            + "',%20'0x".len()
            + end_digits
            + "')".len()
    }
}

impl fmt::Display for ShardRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}, {})",
            render_bound(u128::from(self.start)),
            render_bound(self.end)
        )
    }
}

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

/// The hash space cut into `count` contiguous slots of equal width, for
/// assignments that give a member several ranges: slots are the unit that
/// moves between members, and a member's selector is the union of its
/// slots (adjacent slots merged into one range).
///
/// Which member owns which slot is the caller's policy.
///
/// ```
/// use kcache_core::{ShardField, ShardSlots};
/// let slots = ShardSlots::new(8)?;
/// // slots 0,1 and 4 to member "a", the rest to "b"
/// let by_member = slots.selectors_by_owner(ShardField::Uid, |s| if matches!(s, 0 | 1 | 4) { "a" } else { "b" })?;
/// assert_eq!(by_member["a"].ranges().len(), 2); // [0,2) and [4,5), as two ranges
/// assert_eq!(by_member["b"].ranges().len(), 2); // [2,4) and [5,8)
/// # Ok::<_, kcache_core::ShardSelectorError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardSlots {
    count: usize,
}

impl ShardSlots {
    /// `count` slots, 1 to [`MAX_SHARDS`].
    pub fn new(count: usize) -> Result<Self, ShardSelectorError> {
        if count == 0 || count > MAX_SHARDS {
            return Err(ShardSelectorError::InvalidShardCount {
                range: ShardRange::FULL,
                count,
            });
        }
        Ok(ShardSlots { count })
    }

    /// How many slots.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Boundary `i`: `floor(i * 2^64 / count)` (the same as [`ShardRange::split`]).
    fn boundary(&self, i: usize) -> u128 {
        (i as u128 * HASH_SPACE_END) / self.count as u128
    }

    /// The range of slot `slot`.
    pub fn range(&self, slot: usize) -> Result<ShardRange, ShardSelectorError> {
        if slot >= self.count {
            return Err(ShardSelectorError::SlotOutOfRange {
                slot,
                count: self.count,
            });
        }
        Ok(ShardRange {
            start: self.boundary(slot) as u64,
            end: self.boundary(slot + 1),
        })
    }

    /// The slot whose range contains `hash`.
    pub fn slot_of(&self, hash: u64) -> usize {
        // the largest i with floor(i * 2^64 / n) <= hash, i.e. i * 2^64 < (hash + 1) * n
        let n = self.count as u128;
        (((u128::from(hash) + 1) * n - 1) >> 64) as usize
    }

    /// The selector of a set of slots (in any order, duplicates ignored),
    /// adjacent slots merged into one range.
    pub fn selector(
        &self,
        field: ShardField,
        slots: impl IntoIterator<Item = usize>,
    ) -> Result<ShardSelector, ShardSelectorError> {
        let mut slots: Vec<usize> = slots.into_iter().collect();
        slots.sort_unstable();
        slots.dedup();
        if let Some(&slot) = slots.last().filter(|&&s| s >= self.count) {
            return Err(ShardSelectorError::SlotOutOfRange {
                slot,
                count: self.count,
            });
        }
        let mut ranges: Vec<ShardRange> = Vec::new();
        for slot in slots {
            let r = self.range(slot)?;
            match ranges.last_mut() {
                Some(last) if last.end == u128::from(r.start) => last.end = r.end,
                _ => ranges.push(r),
            }
        }
        ShardSelector::new(field, ranges)
    }

    /// Every member's selector, given the owner of each slot: `owner(slot)`
    /// is called once per slot, in order. Members owning no slot are absent.
    /// Errors ([`ShardSelectorError::TooLong`]) when a member's slots make
    /// more ranges than a request can carry.
    pub fn selectors_by_owner<M: Ord>(
        &self,
        field: ShardField,
        mut owner: impl FnMut(usize) -> M,
    ) -> Result<BTreeMap<M, ShardSelector>, ShardSelectorError> {
        let mut ranges: BTreeMap<M, Vec<ShardRange>> = BTreeMap::new();
        for slot in 0..self.count {
            let r = ShardRange {
                start: self.boundary(slot) as u64,
                end: self.boundary(slot + 1),
            };
            let member = ranges.entry(owner(slot)).or_default();
            match member.last_mut() {
                Some(last) if last.end == u128::from(r.start) => last.end = r.end,
                _ => member.push(r),
            }
        }
        ranges
            .into_iter()
            .map(|(m, ranges)| Ok((m, ShardSelector::new(field, ranges)?)))
            .collect()
    }
}

/// Recursive descent over the selector syntax:
///
/// ```text
/// expr  := term ( "||" term )*
/// term  := "(" expr ")" | "shardRange" "(" path "," string "," string ")"
/// path  := ident ( "." ident )*
/// ```
struct Parser<'a> {
    input: &'a str,
    pos: usize,
    field: Option<ShardField>,
    ranges: Vec<ShardRange>,
}

/// Nesting depth of parentheses the parser follows (CEL's own limit is 250).
const MAX_DEPTH: usize = 32;

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Parser {
            input,
            pos: 0,
            field: None,
            ranges: Vec::new(),
        }
    }

    fn parse(mut self) -> Result<ShardSelector, ShardSelectorError> {
        if self.input.trim().is_empty() {
            return Err(ShardSelectorError::Empty);
        }
        if self.input.len() > MAX_SELECTOR_LEN {
            return Err(self.error(format!(
                "longer than the apiserver's limit of {MAX_SELECTOR_LEN} characters"
            )));
        }
        self.expr(0)?;
        self.skip_ws();
        if self.pos != self.input.len() {
            return Err(self.error("expected `||` or the end of the selector".into()));
        }
        let field = self.field.unwrap_or(ShardField::Uid);
        ShardSelector::new(field, self.ranges)
    }

    fn error(&self, message: String) -> ShardSelectorError {
        ShardSelectorError::Syntax {
            selector: self.input.to_owned(),
            position: self.pos,
            message,
        }
    }

    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        let trimmed = rest.trim_start_matches([' ', '\t', '\n', '\r', '\x0c']);
        self.pos += rest.len() - trimmed.len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str, what: &str) -> Result<(), ShardSelectorError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error(format!("expected {what}")))
        }
    }

    fn expr(&mut self, depth: usize) -> Result<(), ShardSelectorError> {
        self.term(depth)?;
        while self.eat("||") {
            self.term(depth)?;
        }
        Ok(())
    }

    fn term(&mut self, depth: usize) -> Result<(), ShardSelectorError> {
        if self.eat("(") {
            if depth >= MAX_DEPTH {
                return Err(self.error(format!("parentheses nested deeper than {MAX_DEPTH}")));
            }
            self.expr(depth + 1)?;
            return self.expect(")", "`)`");
        }
        self.skip_ws();
        let ident = self.ident();
        if ident != "shardRange" {
            self.pos -= ident.len();
            return Err(self.error(
                "expected shardRange(field, 'start', 'end'); only shardRange() and || are allowed"
                    .into(),
            ));
        }
        self.expect("(", "`(` after shardRange")?;
        self.skip_ws();
        self.field_path()?;
        self.expect(",", "`,` after the field")?;
        let start = self.bound("start")?;
        self.expect(",", "`,` after the start")?;
        let end = self.bound("end")?;
        self.expect(")", "`)`: shardRange takes exactly 3 arguments")?;
        // a start of 2^64 is above every end
        let start =
            u64::try_from(start).map_err(|_| ShardSelectorError::InvertedRange { start, end })?;
        self.ranges.push(ShardRange::new(start, end)?);
        Ok(())
    }

    fn ident(&mut self) -> &'a str {
        let rest = self.rest();
        let len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        self.pos += len;
        &rest[..len]
    }

    fn field_path(&mut self) -> Result<ShardField, ShardSelectorError> {
        let mut path = String::new();
        loop {
            self.skip_ws();
            let ident = self.ident();
            if ident.is_empty() {
                return Err(self.error("expected a field such as object.metadata.uid".into()));
            }
            path.push_str(ident);
            if !self.eat(".") {
                break;
            }
            path.push('.');
        }
        let field = ShardField::from_path(&path)?;
        match self.field {
            None => self.field = Some(field),
            Some(first) if first != field => {
                return Err(ShardSelectorError::MixedFields {
                    first,
                    second: field,
                });
            }
            Some(_) => {}
        }
        Ok(field)
    }

    /// A quoted bound, validated as the apiserver does
    /// (`extractHexLiteral`): `0x` prefix, lowercase hex, exactly 16 digits
    /// or `0x10000000000000000`.
    fn bound(&mut self, name: &str) -> Result<u128, ShardSelectorError> {
        self.skip_ws();
        let quote = match self.rest().bytes().next() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => {
                return Err(self.error(format!(
                    "{name} must be a quoted string literal such as '0x0000000000000000'"
                )));
            }
        };
        self.pos += 1;
        let rest = self.rest();
        let Some(len) = rest.bytes().position(|b| b == quote || b == b'\\') else {
            return Err(self.error(format!("{name}: unterminated string")));
        };
        if rest.as_bytes()[len] == b'\\' {
            return Err(self.error(format!("{name}: escapes are not allowed in a bound")));
        }
        let literal = &rest[..len];
        let Some(hex) = literal.strip_prefix("0x") else {
            return Err(self.error(format!("{name} must have the '0x' prefix, got {literal:?}")));
        };
        if let Some(c) = hex.chars().find(|c| !matches!(c, '0'..='9' | 'a'..='f')) {
            return Err(self.error(format!(
                "{name}: invalid character {c:?} in {literal:?}: use lowercase hex digits"
            )));
        }
        if hex.len() != 16 && literal != "0x10000000000000000" {
            return Err(self.error(format!(
                "{name} must be 0x and exactly 16 hex digits (or 0x10000000000000000 for 2^64), got {literal:?}"
            )));
        }
        self.pos += len + 1;
        // 16 hex digits, or the one 17-digit value: fits u128
        u128::from_str_radix(hex, 16).map_err(|e| self.error(format!("{name}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CachedObject;

    fn meta(json: &str) -> Metadata {
        CachedObject::<()>::from_bytes(json.as_bytes().to_vec())
            .unwrap()
            .meta()
            .clone()
    }

    #[test]
    fn fnv1a_known_vectors() {
        // FNV-1a 64 test vectors (Fowler/Noll/Vo reference, and Go's hash/fnv tests)
        assert_eq!(shard_hash(b""), 0xcbf29ce484222325);
        assert_eq!(shard_hash(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(shard_hash(b"ab"), 0x089c4407b545986a);
        assert_eq!(shard_hash(b"abc"), 0xe71fa2190541574b);
        assert_eq!(shard_hash(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn field_values_and_empty_namespace() {
        let m = meta(r#"{"metadata":{"name":"n","namespace":"prod","uid":"u-1"}}"#);
        assert_eq!(ShardField::Uid.value(&m), "u-1");
        assert_eq!(ShardField::Namespace.value(&m), "prod");
        assert_eq!(ShardField::Namespace.hash(&m), shard_hash(b"prod"));
        // cluster-scoped, or namespace "" in the JSON: the apiserver hashes ""
        for json in [
            r#"{"metadata":{"name":"n"}}"#,
            r#"{"metadata":{"name":"n","namespace":""}}"#,
        ] {
            assert_eq!(ShardField::Namespace.hash(&meta(json)), 0xcbf29ce484222325);
        }
    }

    #[test]
    fn renders_the_apiserver_syntax() {
        let halves = ShardSelector::contiguous(ShardField::Uid, 2).unwrap();
        assert_eq!(
            halves[0].to_string(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        assert_eq!(
            halves[1].to_string(),
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
        );
        let two = ShardSelector::new(
            ShardField::Namespace,
            [
                ShardRange::new(0xc000_0000_0000_0000, HASH_SPACE_END).unwrap(),
                ShardRange::new(0x10, 0xff).unwrap(),
            ],
        )
        .unwrap();
        assert_eq!(
            two.to_string(),
            "shardRange(object.metadata.namespace, '0x0000000000000010', '0x00000000000000ff') || \
             shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            halves[0].to_query_value(),
            "shardRange(object.metadata.uid,%20'0x0000000000000000',%20'0x8000000000000000')"
        );
        assert_eq!(
            two.to_query_value(),
            "shardRange(object.metadata.namespace,%20'0x0000000000000010',%20'0x00000000000000ff')\
             %20%7C%7C%20\
             shardRange(object.metadata.namespace,%20'0xc000000000000000',%20'0x10000000000000000')"
        );
    }

    #[test]
    fn parse_round_trips() {
        let slots = ShardSlots::new(16).unwrap();
        let cases = [
            ShardSelector::single(ShardField::Uid, ShardRange::FULL),
            ShardSelector::contiguous(ShardField::Namespace, 3).unwrap()[2].clone(),
            slots.selector(ShardField::Uid, [0, 3, 4, 9, 15]).unwrap(),
        ];
        for sel in cases {
            let text = sel.to_string();
            assert_eq!(ShardSelector::parse(&text).unwrap(), sel, "{text}");
            assert_eq!(text.parse::<ShardSelector>().unwrap().to_string(), text);
        }
        // variants CEL accepts: double quotes, extra whitespace, parentheses
        let loose = " ( shardRange( object . metadata . uid ,\"0x0000000000000000\",'0x8000000000000000' ) )\n||shardRange(object.metadata.uid, '0x9000000000000000', '0x10000000000000000') ";
        let sel = ShardSelector::parse(loose).unwrap();
        assert_eq!(
            sel.to_string(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || \
             shardRange(object.metadata.uid, '0x9000000000000000', '0x10000000000000000')"
        );
    }

    #[test]
    fn parse_rejects_what_the_apiserver_rejects() {
        let bad = [
            ("", "Empty"),
            ("   ", "Empty"),
            (
                "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
                "16 hex digits",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000A')",
                "lowercase",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0X8000000000000000')",
                "'0x' prefix",
            ),
            (
                "shardRange(object.metadata.uid, '0000000000000000', '0x8000000000000000')",
                "'0x' prefix",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x20000000000000000')",
                "16 hex digits",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x000000000000000000')",
                "16 hex digits",
            ),
            (
                "shardRange(object.metadata.uid, 0x0000000000000000, '0x8000000000000000')",
                "quoted",
            ),
            (
                "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
                "UnsupportedField",
            ),
            (
                "shardRange(metadata.uid, '0x0000000000000000', '0x8000000000000000')",
                "UnsupportedField",
            ),
            (
                "shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')",
                "InvertedRange",
            ),
            (
                "shardRange(object.metadata.uid, '0x10000000000000000', '0x10000000000000000')",
                "InvertedRange",
            ),
            (
                "shardRange(object.metadata.uid, '0x9000000000000000', '0x8000000000000000')",
                "InvertedRange",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
                "MixedFields",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000001') || shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
                "Overlapping",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
                "`||`",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000', '0x1')",
                "3 arguments",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000')",
                "`,`",
            ),
            (
                "inRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
                "only shardRange",
            ),
            (
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000'",
                "`)`",
            ),
            (
                "shardRange(object.metadata.uid, '0x000000000000000\\0', '0x8000000000000000')",
                "escapes",
            ),
        ];
        for (text, expect) in bad {
            let err = ShardSelector::parse(text).unwrap_err();
            let shown = format!("{err:?} / {err}");
            assert!(shown.contains(expect), "{text:?}: {shown}");
        }
    }

    #[test]
    fn construction_errors() {
        assert_eq!(
            ShardSelector::new(ShardField::Uid, []),
            Err(ShardSelectorError::Empty)
        );
        assert!(matches!(
            ShardRange::new(5, 5),
            Err(ShardSelectorError::InvertedRange { start: 5, end: 5 })
        ));
        assert!(matches!(
            ShardRange::new(0, HASH_SPACE_END + 1),
            Err(ShardSelectorError::EndBeyondHashSpace { .. })
        ));
        let a = ShardRange::new(0, 10).unwrap();
        let b = ShardRange::new(9, 20).unwrap();
        assert_eq!(
            ShardSelector::new(ShardField::Uid, [b, a]),
            Err(ShardSelectorError::Overlapping {
                first: a,
                second: b
            })
        );
        // adjacent is fine
        assert!(ShardSelector::new(ShardField::Uid, [ShardRange::new(10, 20).unwrap(), a]).is_ok());
        let msg = ShardRange::new(9, 3).unwrap_err().to_string();
        assert_eq!(
            msg,
            "shard range [0x0000000000000009, 0x0000000000000003) is empty or inverted: start must be below end"
        );
    }

    #[test]
    fn too_long_selectors_are_rejected_before_the_uri_limit() {
        // a uid range is 79 bytes as a query value (80 with the 2^64 end),
        // " || " 12: 659 ranges fit in 60,000 bytes, 660 do not
        let slots = ShardSlots::new(4096).unwrap();
        let even = |field, n: usize| slots.selector(field, (0..n).map(|i| i * 2));
        for (field, fits) in [(ShardField::Uid, 659), (ShardField::Namespace, 618)] {
            let sel = even(field, fits).unwrap();
            assert_eq!(sel.ranges().len(), fits);
            assert!(sel.to_query_value().len() <= MAX_QUERY_VALUE_LEN);
            match even(field, fits + 1) {
                Err(ShardSelectorError::TooLong { ranges, len }) => {
                    assert_eq!(ranges, fits + 1);
                    assert!(len > MAX_QUERY_VALUE_LEN);
                }
                other => panic!("{other:?}"),
            }
        }
        // the computed length is the query value's, with and without the 2^64 end
        for sel in [
            even(ShardField::Uid, 659).unwrap(),
            slots.selector(ShardField::Namespace, [1, 4095]).unwrap(),
            slots.selector(ShardField::Uid, [4095]).unwrap(),
        ] {
            let len: usize = sel
                .ranges()
                .iter()
                .map(|r| r.query_len(sel.field()))
                .sum::<usize>()
                + QUERY_SEPARATOR.len() * (sel.ranges().len() - 1);
            assert_eq!(len, sel.to_query_value().len());
        }
        // parse accepts up to the apiserver's own limit
        let long = std::iter::repeat_n(
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')",
            1,
        )
        .chain(std::iter::repeat_n(" ", MAX_SELECTOR_LEN))
        .collect::<String>();
        assert!(matches!(
            ShardSelector::parse(&long),
            Err(ShardSelectorError::Syntax { .. })
        ));
        assert!(ShardSelector::parse(long.trim_end()).is_ok());
    }

    #[test]
    fn boundaries_start_inclusive_end_exclusive() {
        let r = ShardRange::new(0x10, 0x20).unwrap();
        assert!(!r.contains(0x0f));
        assert!(r.contains(0x10));
        assert!(r.contains(0x1f));
        assert!(!r.contains(0x20));
        let last = ShardRange::new(u64::MAX, HASH_SPACE_END).unwrap();
        assert!(last.contains(u64::MAX));
        assert!(!last.contains(u64::MAX - 1));
        assert_eq!(last.width(), 1);
        assert!(ShardRange::FULL.contains(0) && ShardRange::FULL.contains(u64::MAX));
        let sel = ShardSelector::new(
            ShardField::Uid,
            [
                ShardRange::new(0, 1).unwrap(),
                ShardRange::new(100, 200).unwrap(),
                last,
            ],
        )
        .unwrap();
        for (h, inside) in [
            (0, true),
            (1, false),
            (99, false),
            (100, true),
            (199, true),
            (200, false),
            (u64::MAX - 1, false),
            (u64::MAX, true),
        ] {
            assert_eq!(sel.contains(h), inside, "{h:#x}");
        }
    }

    #[test]
    fn contiguous_split_covers_the_space_without_gaps() {
        for n in [1, 2, 3, 7, 8, 100, MAX_SHARDS] {
            let parts = ShardRange::FULL.split(n).unwrap();
            assert_eq!(parts.len(), n);
            assert_eq!(parts[0].start(), 0);
            assert_eq!(parts[n - 1].end(), HASH_SPACE_END);
            for w in parts.windows(2) {
                assert_eq!(w[0].end(), u128::from(w[1].start()));
            }
            let widths: Vec<u128> = parts.iter().map(ShardRange::width).collect();
            let (min, max) = (widths.iter().min().unwrap(), widths.iter().max().unwrap());
            assert!(max - min <= 1, "n={n}: {min}..{max}");
        }
        assert_eq!(
            ShardRange::FULL.split(3).unwrap()[1].to_string(),
            "[0x5555555555555555, 0xaaaaaaaaaaaaaaaa)"
        );
        let small = ShardRange::new(10, 13).unwrap();
        assert_eq!(small.split(3).unwrap().len(), 3);
        for n in [0, 4] {
            assert!(matches!(
                small.split(n),
                Err(ShardSelectorError::InvalidShardCount { .. })
            ));
        }
        assert!(ShardRange::FULL.split(MAX_SHARDS + 1).is_err());
    }

    #[test]
    fn slots_match_the_split_and_merge_adjacent_slots() {
        let slots = ShardSlots::new(12).unwrap();
        let split = ShardRange::FULL.split(12).unwrap();
        for (i, r) in split.iter().enumerate() {
            assert_eq!(slots.range(i).unwrap(), *r);
            assert_eq!(slots.slot_of(r.start()), i);
            assert_eq!(slots.slot_of((r.end() - 1) as u64), i);
        }
        assert_eq!(slots.slot_of(u64::MAX), 11);
        assert!(matches!(
            slots.range(12),
            Err(ShardSelectorError::SlotOutOfRange {
                slot: 12,
                count: 12
            })
        ));
        assert!(slots.selector(ShardField::Uid, [3, 12]).is_err());
        assert_eq!(
            slots.selector(ShardField::Uid, []),
            Err(ShardSelectorError::Empty)
        );

        let sel = slots
            .selector(ShardField::Uid, [5, 0, 11, 1, 10, 1])
            .unwrap();
        let ranges: Vec<String> = sel.ranges().iter().map(ToString::to_string).collect();
        assert_eq!(
            ranges,
            [
                format!("[0x0000000000000000, {:#018x})", split[1].end()),
                split[5].to_string(),
                format!("[{:#018x}, 0x10000000000000000)", split[10].start()),
            ]
        );

        // an owner table: each member's selector holds exactly its slots' hashes
        let owner = |s: usize| ["a", "b", "c"][(s * 7) % 3];
        let by = slots
            .selectors_by_owner(ShardField::Namespace, owner)
            .unwrap();
        // alternating owners over many slots: too many ranges for one request
        let many = ShardSlots::new(4096).unwrap();
        assert!(matches!(
            many.selectors_by_owner(ShardField::Uid, |s| s % 2),
            Err(ShardSelectorError::TooLong { ranges: 2048, .. })
        ));
        assert_eq!(by.len(), 3);
        let total: f64 = by.values().map(ShardSelector::fraction).sum();
        assert!((total - 1.0).abs() < 1e-12);
        for h in (0..1000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) {
            let expect = owner(slots.slot_of(h));
            for (m, sel) in &by {
                assert_eq!(sel.contains(h), *m == expect, "{h:#x}");
            }
        }
    }

    #[test]
    fn matches_filters_like_the_server() {
        let uid = "0b6a6f49-4b1c-4d25-9a40-8d0f8a3cfb11";
        let m = meta(&format!(
            r#"{{"metadata":{{"name":"n","namespace":"team-a","uid":"{uid}"}}}}"#
        ));
        let h = shard_hash(uid.as_bytes());
        let quarters = ShardSelector::contiguous(ShardField::Uid, 4).unwrap();
        let hits: Vec<bool> = quarters.iter().map(|s| s.matches(&m)).collect();
        assert_eq!(hits.iter().filter(|x| **x).count(), 1);
        assert!(hits[(h >> 62) as usize]);
        assert!(quarters[(h >> 62) as usize].matches_value(uid));
        let ns = ShardSelector::contiguous(ShardField::Namespace, 4).unwrap();
        assert!(ns[(shard_hash(b"team-a") >> 62) as usize].matches(&m));
    }
}
