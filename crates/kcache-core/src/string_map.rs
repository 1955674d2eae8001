//! A compact, sorted, immutable string-to-string map for labels and annotations.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::selector::LabelSet;

/// Labels or annotations: every key and value packed into one string in
/// key order, plus one end offset per key and value. Two allocations per
/// map whatever its size (a `BTreeMap<String, String>` makes two per
/// entry plus its nodes), which matters for memory and for the allocator's
/// time when a cache holds and replaces hundreds of thousands of objects.
/// Lookups are binary searches.
///
/// ```
/// use kcache_core::StringMap;
/// let m: StringMap = [("b", "2"), ("a", "1")].into_iter().collect();
/// assert_eq!(m.get("a"), Some("1"));
/// assert_eq!(&m["b"], "2");
/// assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b"]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct StringMap {
    /// `k0 v0 k1 v1 ...` in key order.
    text: Box<str>,
    /// Per entry: the end of its key and the end of its value in `text`
    /// (an entry starts where the previous one's value ends).
    ends: Box<[(usize, usize)]>,
}

impl StringMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }
    fn from_pairs<S: AsRef<str>>(mut v: Vec<(S, S)>) -> Self {
        // Stable sort, then keep the last of equal keys (like JSON decoders do).
        v.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        let mut kept: Vec<(S, S)> = Vec::with_capacity(v.len());
        for (k, val) in v {
            match kept.last_mut() {
                Some(last) if last.0.as_ref() == k.as_ref() => last.1 = val,
                _ => kept.push((k, val)),
            }
        }
        let len = kept
            .iter()
            .map(|(k, v)| k.as_ref().len() + v.as_ref().len())
            .sum();
        let mut text = String::with_capacity(len);
        let mut ends = Vec::with_capacity(kept.len());
        for (k, v) in &kept {
            text.push_str(k.as_ref());
            let key_end = text.len();
            text.push_str(v.as_ref());
            ends.push((key_end, text.len()));
        }
        StringMap {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }
    fn entry(&self, i: usize) -> (&str, &str) {
        let start = if i == 0 { 0 } else { self.ends[i - 1].1 };
        let (key_end, val_end) = self.ends[i];
        (&self.text[start..key_end], &self.text[key_end..val_end])
    }
    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let (mut lo, mut hi) = (0, self.ends.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let (k, v) = self.entry(mid);
            match k.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(v),
            }
        }
        None
    }
    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.ends.len()
    }
    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    /// Entries in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        (0..self.ends.len()).map(|i| self.entry(i))
    }
    /// Keys in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.iter().map(|(k, _)| k)
    }
    /// Values in key order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.iter().map(|(_, v)| v)
    }
    /// An owned `BTreeMap` copy (the k8s-openapi type for labels).
    pub fn to_btree_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
    /// Heap bytes held.
    pub fn heap_size(&self) -> usize {
        self.ends.len() * std::mem::size_of::<(usize, usize)>() + self.text.len()
    }
}

impl fmt::Debug for StringMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl std::ops::Index<&str> for StringMap {
    type Output = str;
    /// Panics when `key` is absent, like `BTreeMap`'s indexing.
    fn index(&self, key: &str) -> &str {
        match self.get(key) {
            Some(v) => v,
            None => panic!("key {key:?} not in StringMap"),
        }
    }
}

impl<K: Into<Box<str>>, V: Into<Box<str>>> FromIterator<(K, V)> for StringMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self::from_pairs(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect::<Vec<(Box<str>, Box<str>)>>(),
        )
    }
}

impl PartialEq<BTreeMap<String, String>> for StringMap {
    fn eq(&self, other: &BTreeMap<String, String>) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .zip(other.iter())
                .all(|((a, b), (c, d))| a == c && b == d)
    }
}

impl LabelSet for StringMap {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl<'de> Deserialize<'de> for StringMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StringMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StringMap, A::Error> {
                // Borrowed from the input where it has no escapes: the
                // only copies are into the packed text.
                let mut v = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((k, val)) = map.next_entry::<CowStr<'de>, CowStr<'de>>()? {
                    v.push((k.0, val.0));
                }
                Ok(StringMap::from_pairs(v))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<StringMap, E> {
                Ok(StringMap::default())
            }
        }
        d.deserialize_map(V)
    }
}

/// A string borrowed from the input when it has no escapes, owned otherwise.
pub(crate) struct CowStr<'a>(pub(crate) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for CowStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CowStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_map_matches_a_btree_map() {
        // pseudo-random keys (with duplicates, empty strings, multi-byte
        // characters) against BTreeMap's answers
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..200 {
            let n = (next() % 12) as usize;
            let pairs: Vec<(String, String)> = (0..n)
                .map(|_| {
                    let k = match next() % 4 {
                        0 => String::new(),
                        1 => format!("é{}", next() % 5),
                        _ => format!("app.kubernetes.io/k{}", next() % 7),
                    };
                    (k, format!("v{}", next() % 1000))
                })
                .collect();
            let want: BTreeMap<String, String> = pairs.iter().cloned().collect();
            let got: StringMap = pairs.iter().cloned().collect();
            assert_eq!(got, want, "round {round}: {pairs:?}");
            assert_eq!(got.len(), want.len());
            assert_eq!(got.to_btree_map(), want);
            for (k, v) in &want {
                assert_eq!(got.get(k), Some(v.as_str()));
            }
            assert_eq!(got.get("absent"), None);
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>()
            );
            assert_eq!(
                got.values().collect::<Vec<_>>(),
                want.values().collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn deserializes_escapes_duplicates_and_empty() {
        let m: StringMap =
            serde_json::from_str(r#"{"b":"2","a\"x":"q\nz","b":"3","":""}"#).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m.get("b"), Some("3")); // the last duplicate wins
        assert_eq!(m.get("a\"x"), Some("q\nz"));
        assert_eq!(m.get(""), Some(""));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["", "a\"x", "b"]);
        let empty: StringMap = serde_json::from_str("{}").unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty, StringMap::new());
        assert!(serde_json::from_str::<StringMap>(r#"{"a":1}"#).is_err());
    }

    #[test]
    fn equal_maps_are_equal_whatever_the_input_order() {
        let a: StringMap = [("x", "1"), ("y", "2")].into_iter().collect();
        let b: StringMap = [("y", "2"), ("x", "1")].into_iter().collect();
        assert_eq!(a, b);
        assert_eq!(a.heap_size(), 4 + 2 * std::mem::size_of::<(usize, usize)>());
        let c: StringMap = [("x", "1"), ("y", "3")].into_iter().collect();
        assert_ne!(a, c);
    }
}

impl From<&StringMap> for BTreeMap<String, String> {
    fn from(m: &StringMap) -> Self {
        m.to_btree_map()
    }
}

impl From<StringMap> for BTreeMap<String, String> {
    fn from(m: StringMap) -> Self {
        m.to_btree_map()
    }
}

impl From<&BTreeMap<String, String>> for StringMap {
    fn from(m: &BTreeMap<String, String>) -> Self {
        m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }
}

impl From<BTreeMap<String, String>> for StringMap {
    fn from(m: BTreeMap<String, String>) -> Self {
        m.into_iter().collect()
    }
}

impl PartialEq<StringMap> for BTreeMap<String, String> {
    fn eq(&self, other: &StringMap) -> bool {
        other == self
    }
}

impl<'a> IntoIterator for &'a StringMap {
    type Item = (&'a str, &'a str);
    type IntoIter = Box<dyn ExactSizeIterator<Item = (&'a str, &'a str)> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl serde::Serialize for StringMap {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

#[cfg(test)]
mod conversion_tests {
    use super::*;

    #[test]
    fn converts_to_and_from_btree_maps_and_serializes_as_a_map() {
        let b: BTreeMap<String, String> = [
            ("app".to_owned(), "web".to_owned()),
            ("tier".to_owned(), "fe".to_owned()),
        ]
        .into();
        let m = StringMap::from(&b);
        assert_eq!(m, b);
        assert_eq!(b, m);
        assert_eq!(BTreeMap::from(&m), b);
        assert_eq!(StringMap::from(b.clone()), m);
        let pairs: Vec<(&str, &str)> = (&m).into_iter().collect();
        assert_eq!(pairs, [("app", "web"), ("tier", "fe")]);
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::json!({"app": "web", "tier": "fe"})
        );
    }
}
