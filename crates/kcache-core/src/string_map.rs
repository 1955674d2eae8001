//! A compact, sorted, immutable string-to-string map for labels and annotations.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};

use crate::selector::LabelSet;

/// Labels or annotations: a sorted boxed slice of pairs, about half the
/// memory of a `BTreeMap<String, String>` for the handful of entries
/// objects usually carry. Lookups are binary searches.
///
/// ```
/// use kcache_core::StringMap;
/// let m: StringMap = [("b", "2"), ("a", "1")].into_iter().collect();
/// assert_eq!(m.get("a"), Some("1"));
/// assert_eq!(&m["b"], "2");
/// assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b"]);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct StringMap(Box<[(Box<str>, Box<str>)]>);

impl StringMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }
    fn from_vec(mut v: Vec<(Box<str>, Box<str>)>) -> Self {
        // Stable sort, then keep the last of equal keys (like JSON decoders do).
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Box<str>, Box<str>)> = Vec::with_capacity(v.len());
        for (k, val) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = val,
                _ => out.push((k, val)),
            }
        }
        StringMap(out.into_boxed_slice())
    }
    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }
    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Entries in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
    /// Keys in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.0.iter().map(|(k, _)| &**k)
    }
    /// Values in key order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.0.iter().map(|(_, v)| &**v)
    }
    /// An owned `BTreeMap` copy (the k8s-openapi type for labels).
    pub fn to_btree_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
    /// Heap bytes held.
    pub fn heap_size(&self) -> usize {
        self.0.len() * std::mem::size_of::<(Box<str>, Box<str>)>()
            + self.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
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
        Self::from_vec(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
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
                let mut v = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some((k, val)) =
                    map.next_entry::<crate::object::CowStr<'de>, crate::object::CowStr<'de>>()?
                {
                    v.push((Box::from(k.0.as_ref()), Box::from(val.0.as_ref())));
                }
                Ok(StringMap::from_vec(v))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<StringMap, E> {
                Ok(StringMap::default())
            }
        }
        d.deserialize_map(V)
    }
}
