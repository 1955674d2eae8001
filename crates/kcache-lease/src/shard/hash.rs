//! Rendezvous (highest random weight) hashing over a members view.
//!
//! Each member scores each key with a hash of both; the key belongs to the
//! member with the highest score. Adding a member moves to it only the keys
//! it now wins (about `1/(N+1)` of them); removing one moves only its own
//! keys. Every replica computes the same owner from the same view: the hash
//! is defined here (FNV-1a, then splitmix64's finalizer), not borrowed from
//! `std`, whose hashers may change between Rust releases.

use std::fmt;
use std::sync::Arc;

use kcache_core::ShardSlots;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// splitmix64's finalizer: every input bit affects every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key_hash(key: &str) -> u64 {
    mix(fnv1a(key.as_bytes()))
}

fn score(member_hash: u64, key_hash: u64) -> u64 {
    mix(member_hash ^ key_hash)
}

/// A set of member identities (sorted, without duplicates) that keys are
/// spread over. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct View {
    inner: Arc<ViewInner>,
}

#[derive(PartialEq, Eq, Default)]
struct ViewInner {
    members: Vec<String>,
    hashes: Vec<u64>,
}

impl fmt::Debug for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.inner.members).finish()
    }
}

impl View {
    /// The view of these members (order and duplicates do not matter).
    pub fn new<I, S>(members: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut members: Vec<String> = members.into_iter().map(Into::into).collect();
        members.sort();
        members.dedup();
        let hashes = members.iter().map(|m| mix(fnv1a(m.as_bytes()))).collect();
        Self {
            inner: Arc::new(ViewInner { members, hashes }),
        }
    }

    /// The members, sorted.
    pub fn members(&self) -> &[String] {
        &self.inner.members
    }

    /// Whether the view has no member (it owns no key).
    pub fn is_empty(&self) -> bool {
        self.inner.members.is_empty()
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.inner.members.len()
    }

    /// Whether `member` is in the view.
    pub fn contains(&self, member: &str) -> bool {
        self.inner
            .members
            .binary_search_by(|m| m.as_str().cmp(member))
            .is_ok()
    }

    /// The member that owns `key` (`None` for an empty view).
    pub fn owner(&self, key: &str) -> Option<&str> {
        let kh = key_hash(key);
        let mut best: Option<(u64, usize)> = None;
        for (i, mh) in self.inner.hashes.iter().enumerate() {
            let s = score(*mh, kh);
            // Ties (vanishingly rare) go to the first member in sort order,
            // the same on every replica.
            if best.is_none_or(|(b, _)| s > b) {
                best = Some((s, i));
            }
        }
        best.map(|(_, i)| self.inner.members[i].as_str())
    }

    /// Whether `member` owns `key` in this view.
    pub fn owned_by(&self, key: &str, member: &str) -> bool {
        self.owner(key) == Some(member)
    }
}

/// A key's point in the 64-bit hash space of the apiserver's shard
/// selectors (`None`: unknown, e.g. not cached).
pub type KeyPoint = Arc<dyn Fn(&str) -> Option<u64> + Send + Sync>;

/// How a view assigns keys to members.
#[derive(Clone, Default)]
pub enum Placement {
    /// Rendezvous hashing of the key itself ([`View::owner`]).
    #[default]
    Keys,
    /// The hash space is cut into `slots` equal slots, each slot owned by
    /// the member that rendezvous hashing gives it ([`View::slot_owner`]);
    /// a key belongs to the owner of the slot of its `point` (the same
    /// FNV-1a hash the apiserver's shard selector uses), so that a
    /// member's slots, as a shard selector, select exactly its keys. A
    /// key without a point belongs to nobody.
    Slots {
        /// The slots.
        slots: ShardSlots,
        /// A key's hash.
        point: KeyPoint,
    },
}

impl fmt::Debug for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Keys => f.write_str("Keys"),
            Placement::Slots { slots, .. } => f
                .debug_struct("Slots")
                .field("slots", &slots.count())
                .finish_non_exhaustive(),
        }
    }
}

impl Placement {
    /// Whether `member` owns `key` in `view`.
    pub fn owned_by(&self, view: &View, key: &str, member: &str) -> bool {
        match self {
            Placement::Keys => view.owned_by(key, member),
            Placement::Slots { slots, point } => {
                point(key).is_some_and(|p| view.slot_owner(slots.slot_of(p)) == Some(member))
            }
        }
    }
}

fn slot_key(slot: usize) -> String {
    format!("kcache-slot/{slot}")
}

impl View {
    /// The member that owns hash slot `slot` (rendezvous hashing of the
    /// slot's index: a join moves about 1/(N+1) of the slots, all to the
    /// newcomer; a leave moves only the leaver's).
    pub fn slot_owner(&self, slot: usize) -> Option<&str> {
        self.owner(&slot_key(slot))
    }

    /// The slots `member` owns, ascending.
    pub fn slots_of(&self, member: &str, slots: ShardSlots) -> Vec<usize> {
        (0..slots.count())
            .filter(|s| self.slot_owner(*s) == Some(member))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("ns-{}/object-{i}", i % 7)).collect()
    }

    #[test]
    fn owner_is_deterministic_and_order_independent() {
        let a = View::new(["r1", "r2", "r3"]);
        let b = View::new(["r3", "r1", "r2", "r1"]);
        assert_eq!(a, b);
        assert_eq!(a.members(), ["r1", "r2", "r3"]);
        for k in keys(500) {
            assert_eq!(a.owner(&k), b.owner(&k));
        }
        assert_eq!(View::default().owner("x"), None);
        assert!(View::new(["only"]).owned_by("anything", "only"));
        // fixed values: the hash must not change between releases, or two
        // versions of one controller would disagree on owners during a
        // rolling update
        assert_eq!(key_hash("ns/a"), key_hash("ns/a"));
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(mix(1), 0x5692_161d_100b_05e5);
    }

    #[test]
    fn slots_partition_the_space_and_move_only_to_a_newcomer() {
        let slots = ShardSlots::new(128).unwrap();
        for n in [1usize, 2, 3, 4, 9] {
            let members: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
            let before = View::new(members.clone());
            let after = View::new(members.iter().cloned().chain(["new".to_owned()]));
            // every slot has exactly one owner, in both views
            let mut all: Vec<usize> = members
                .iter()
                .flat_map(|m| before.slots_of(m, slots))
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..128).collect::<Vec<_>>(), "{n} members");
            let mut moved = 0;
            for s in 0..128 {
                let (b, a) = (before.slot_owner(s).unwrap(), after.slot_owner(s).unwrap());
                if a != b {
                    assert_eq!(a, "new", "slot {s} moved between old members");
                    moved += 1;
                }
            }
            let frac = moved as f64 / 128.0;
            let fair = 1.0 / (n as f64 + 1.0);
            assert!((frac - fair).abs() < 0.12, "{n} -> {}: {frac} moved", n + 1);
        }
        // a key's owner is its point's slot's owner
        let view = View::new(["a", "b", "c"]);
        let point: KeyPoint = Arc::new(|k: &str| k.parse::<u64>().ok());
        let placement = Placement::Slots { slots, point };
        for p in [0u64, 1 << 60, u64::MAX, 0x8000_0000_0000_0000] {
            let owner = view.slot_owner(slots.slot_of(p)).unwrap();
            assert!(placement.owned_by(&view, &p.to_string(), owner));
            for m in ["a", "b", "c"].iter().filter(|m| **m != owner) {
                assert!(!placement.owned_by(&view, &p.to_string(), m));
            }
        }
        // no point, no owner
        assert!(
            ["a", "b", "c"]
                .iter()
                .all(|m| !placement.owned_by(&view, "x", m))
        );
    }

    #[test]
    fn keys_spread_evenly() {
        for n in [2usize, 3, 5, 10] {
            let members: Vec<String> = (0..n).map(|i| format!("replica-{i}")).collect();
            let view = View::new(members.clone());
            let ks = keys(20_000);
            let mut count: HashMap<&str, usize> = HashMap::new();
            for k in &ks {
                *count.entry(view.owner(k).unwrap()).or_default() += 1;
            }
            let fair = ks.len() as f64 / n as f64;
            for m in &members {
                let c = count.get(m.as_str()).copied().unwrap_or(0) as f64;
                assert!(
                    (c - fair).abs() / fair < 0.08,
                    "{n} members: {m} has {c} keys, fair share {fair}"
                );
            }
        }
    }

    #[test]
    fn adding_one_of_n_moves_about_one_in_n_plus_one_and_only_to_it() {
        let ks = keys(20_000);
        for n in [1usize, 2, 3, 4, 9] {
            let before = View::new((0..n).map(|i| format!("replica-{i}")));
            let after = View::new((0..=n).map(|i| format!("replica-{i}")));
            let new = format!("replica-{n}");
            let mut moved = 0usize;
            for k in &ks {
                let (b, a) = (before.owner(k).unwrap(), after.owner(k).unwrap());
                if a != b {
                    assert_eq!(a, new, "a key moved between two old members");
                    moved += 1;
                }
            }
            let frac = moved as f64 / ks.len() as f64;
            let want = 1.0 / (n as f64 + 1.0);
            assert!(
                (frac - want).abs() < 0.02,
                "{n} -> {}: moved {frac:.3}, expected about {want:.3}",
                n + 1
            );
        }
    }

    #[test]
    fn removing_one_moves_only_its_keys() {
        let ks = keys(10_000);
        let before = View::new(["a", "b", "c", "d"]);
        let after = View::new(["a", "b", "d"]);
        let mut moved = 0;
        for k in &ks {
            let b = before.owner(k).unwrap();
            if b == "c" {
                moved += 1;
            } else {
                assert_eq!(after.owner(k), Some(b), "{k} moved off a live member");
            }
        }
        let frac = f64::from(moved) / ks.len() as f64;
        assert!((frac - 0.25).abs() < 0.02, "moved {frac}");
        assert!(before.contains("c") && !after.contains("c"));
    }
}
