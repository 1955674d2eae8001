//! resourceVersions compared as the apiserver defines them (KEP-5504,
//! "comparable resource versions", GA in Kubernetes 1.35).
//!
//! A resourceVersion the kube-apiserver hands out is a decimal integer
//! without leading zeros (etcd's revision); two of them from the same
//! resource compare as integers, of any length. Anything else (an
//! aggregated apiserver's opaque token, a leading zero, an empty string) is
//! not comparable: [`ResourceVersion::compare`] says so with an
//! [`IncomparableResourceVersion`] instead of guessing, and a caller that
//! needs an order (kcache-controller's stale-cache gate) turns itself off.
//!
//! ```
//! use std::cmp::Ordering;
//! use kcache_core::ResourceVersion;
//!
//! let a = ResourceVersion::new("998");
//! let b = ResourceVersion::new("1000");
//! assert_eq!(a.compare(&b)?, Ordering::Less); // as integers, not as text
//! assert!(b.is_at_least(&a)?);
//! assert_eq!(b.distance_from(&a), Some(2));
//! assert!(ResourceVersion::new("a7f3").compare(&a).is_err());
//! # Ok::<_, kcache_core::IncomparableResourceVersion>(())
//! ```

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// A resourceVersion as the apiserver sent it, parsed once for comparison.
///
/// Cheap to clone (an integer, or a shared string for the rare one that is
/// not a `u64`). Equality is textual equality.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ResourceVersion(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// A well-formed decimal that fits in a `u64` (every etcd revision).
    Number(u64),
    /// A well-formed decimal longer than a `u64`: compared by length, then
    /// digit by digit.
    LongNumber(Arc<str>),
    /// Not a well-formed decimal: kept as text, comparable to nothing.
    Opaque(Arc<str>),
}

/// Two resourceVersions that cannot be ordered: one of them is not a
/// decimal integer without leading zeros (KEP-5504).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "resourceVersion {value:?} is not comparable: the apiserver's resourceVersions are decimal integers without leading zeros (KEP-5504); an apiserver that hands out other ones (an aggregated apiserver, an old or non-standard server) cannot be checked for cache freshness"
)]
pub struct IncomparableResourceVersion {
    /// The resourceVersion that is not a well-formed decimal.
    pub value: String,
}

fn well_formed_decimal(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b.iter().all(u8::is_ascii_digit) && (b[0] != b'0' || b.len() == 1)
}

impl ResourceVersion {
    /// Parses `rv` (never fails: a malformed one is kept, and is comparable
    /// to nothing).
    pub fn new(rv: &str) -> Self {
        if !well_formed_decimal(rv) {
            return ResourceVersion(Repr::Opaque(Arc::from(rv)));
        }
        match rv.parse::<u64>() {
            Ok(n) => ResourceVersion(Repr::Number(n)),
            Err(_) => ResourceVersion(Repr::LongNumber(Arc::from(rv))),
        }
    }

    /// A resourceVersion from an integer.
    pub fn from_u64(n: u64) -> Self {
        ResourceVersion(Repr::Number(n))
    }

    /// Whether it is a well-formed decimal (comparable to another one).
    pub fn is_comparable(&self) -> bool {
        !matches!(self.0, Repr::Opaque(_))
    }

    /// The integer value, when it fits in a `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match self.0 {
            Repr::Number(n) => Some(n),
            _ => None,
        }
    }

    /// Orders `self` against `other` as integers.
    pub fn compare(
        &self,
        other: &ResourceVersion,
    ) -> Result<Ordering, IncomparableResourceVersion> {
        match (&self.0, &other.0) {
            (Repr::Opaque(s), _) | (_, Repr::Opaque(s)) => Err(IncomparableResourceVersion {
                value: s.to_string(),
            }),
            (Repr::Number(a), Repr::Number(b)) => Ok(a.cmp(b)),
            // a longer well-formed decimal is the larger
            (Repr::Number(_), Repr::LongNumber(_)) => Ok(Ordering::Less),
            (Repr::LongNumber(_), Repr::Number(_)) => Ok(Ordering::Greater),
            (Repr::LongNumber(a), Repr::LongNumber(b)) => {
                Ok(a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
            }
        }
    }

    /// Whether `self` is `other` or newer.
    pub fn is_at_least(
        &self,
        other: &ResourceVersion,
    ) -> Result<bool, IncomparableResourceVersion> {
        Ok(self.compare(other)? != Ordering::Less)
    }

    /// How far `self` is ahead of `earlier` (0 when it is not ahead), when
    /// both fit in a `u64`: on the kube-apiserver, the number of writes to
    /// the cluster's etcd in between.
    pub fn distance_from(&self, earlier: &ResourceVersion) -> Option<u64> {
        Some(self.as_u64()?.saturating_sub(earlier.as_u64()?))
    }

    /// Orders two resourceVersions given as text.
    pub fn compare_str(a: &str, b: &str) -> Result<Ordering, IncomparableResourceVersion> {
        ResourceVersion::new(a).compare(&ResourceVersion::new(b))
    }
}

impl fmt::Display for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Number(n) => write!(f, "{n}"),
            Repr::LongNumber(s) | Repr::Opaque(s) => f.write_str(s),
        }
    }
}

impl fmt::Debug for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ResourceVersion({self})")
    }
}

impl From<&str> for ResourceVersion {
    fn from(s: &str) -> Self {
        ResourceVersion::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(a: &str, b: &str) -> Result<Ordering, IncomparableResourceVersion> {
        ResourceVersion::compare_str(a, b)
    }

    #[test]
    fn decimals_compare_as_integers_of_any_length() {
        assert_eq!(cmp("9", "10"), Ok(Ordering::Less));
        assert_eq!(cmp("10", "10"), Ok(Ordering::Equal));
        assert_eq!(cmp("0", "1"), Ok(Ordering::Less));
        let big = "123456789012345678901234567890";
        let bigger = "123456789012345678901234567891";
        assert_eq!(cmp(big, bigger), Ok(Ordering::Less));
        assert_eq!(cmp(bigger, big), Ok(Ordering::Greater));
        assert_eq!(cmp("18446744073709551615", big), Ok(Ordering::Less));
        assert_eq!(cmp(big, "5"), Ok(Ordering::Greater));
        assert_eq!(ResourceVersion::new(big).to_string(), big);
    }

    #[test]
    fn malformed_versions_are_comparable_to_nothing() {
        for bad in ["", "007", "12a", "-3", " 1", "1.5", "abc"] {
            let e = cmp(bad, "5").unwrap_err();
            assert_eq!(e.value, bad);
            assert!(cmp("5", bad).is_err());
            assert!(!ResourceVersion::new(bad).is_comparable());
        }
        assert!(e_mentions_kep(&cmp("x", "1").unwrap_err()));
    }

    fn e_mentions_kep(e: &IncomparableResourceVersion) -> bool {
        e.to_string().contains("KEP-5504")
    }

    #[test]
    fn distance_counts_writes_in_between() {
        let a = ResourceVersion::new("100");
        let b = ResourceVersion::new("142");
        assert_eq!(b.distance_from(&a), Some(42));
        assert_eq!(a.distance_from(&b), Some(0));
        assert_eq!(ResourceVersion::new("x").distance_from(&a), None);
    }
}
