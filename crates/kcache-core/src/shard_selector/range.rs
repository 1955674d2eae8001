//! Ranges of the 64-bit hash space: [`ShardRange`] (one half-open range,
//! its split into equal parts) and [`ShardSlots`] (the space cut into
//! slots, merged into per-member selectors).

use std::collections::BTreeMap;
use std::fmt;

use super::{HASH_SPACE_END, MAX_SHARDS, ShardField, ShardSelector, ShardSelectorError};

/// A bound as the apiserver spells it: `0x` and 16 lowercase hex digits;
/// 2^64 is `0x10000000000000000`.
pub(super) fn render_bound(v: u128) -> String {
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
    pub(super) start: u64,
    pub(super) end: u128,
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

    pub(super) fn render(&self, field: ShardField, out: &mut String) {
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
    pub(super) fn query_len(&self, field: ShardField) -> usize {
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
