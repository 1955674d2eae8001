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
