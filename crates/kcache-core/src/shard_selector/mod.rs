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
//!
//! The code is split by concept: `error` ([`ShardSelectorError`]), `field`
//! ([`ShardField`], the value the apiserver hashes), `range` ([`ShardRange`]
//! and [`ShardSlots`], the hash space and its cuts), `selector`
//! ([`ShardSelector`]: construction, rendering and client-side
//! evaluation) and `parser` (the selector syntax, parsed back).

mod error;
mod field;
mod parser;
mod range;
mod selector;
#[cfg(test)]
mod tests;

pub use error::ShardSelectorError;
pub use field::ShardField;
pub use range::{ShardRange, ShardSlots};
pub use selector::ShardSelector;

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
