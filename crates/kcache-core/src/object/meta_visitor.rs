//! The serde visitors of the partial JSON decode: the top-level object
//! ([`TopVisitor`]), its borrowed `metadata` ([`RawMeta`]) and the values
//! of the declared field paths, read by walking the [`PathNode`] trie
//! ([`NodeSeed`], [`NodeVisitor`]); everything else is skipped unread.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::field_trie::PathNode;
use super::metadata::MetaStrings;
use super::{Metadata, ObjectError, OwnerReference};
use crate::string_map::{CowStr, StringMap};

pub(super) fn span_in(bytes: &[u8], part: &str) -> Option<(usize, usize)> {
    let base = bytes.as_ptr() as usize;
    let start = (part.as_ptr() as usize).checked_sub(base)?;
    let end = start.checked_add(part.len())?;
    (end <= bytes.len()).then_some((start, end))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta<'a> {
    #[serde(borrow, default)]
    name: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    namespace: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    uid: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    resource_version: Option<CowStr<'a>>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    labels: Option<StringMap>,
    #[serde(default)]
    annotations: Option<StringMap>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
    #[serde(borrow, default)]
    deletion_timestamp: Option<CowStr<'a>>,
    #[serde(borrow, default, deserialize_with = "raw_any")]
    managed_fields: Option<&'a RawValue>,
}

/// Captures any value (including `null`) as raw JSON text.
fn raw_any<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

pub(super) struct Top<'a> {
    meta: Option<RawMeta<'a>>,
    api_version: Option<CowStr<'a>>,
    kind: Option<CowStr<'a>>,
    pub(super) managed_fields: Option<&'a RawValue>,
}

pub(super) fn build_meta(top: Top<'_>) -> Result<Metadata, ObjectError> {
    let m = top.meta.ok_or(ObjectError::MissingName)?;
    let name = match &m.name {
        Some(n) if !n.0.is_empty() => n.0.as_ref(),
        _ => return Err(ObjectError::MissingName),
    };
    fn s<'c>(c: &'c Option<CowStr<'_>>) -> Option<&'c str> {
        c.as_ref().map(|c| c.0.as_ref())
    }
    Ok(Metadata {
        strings: MetaStrings::new(
            s(&m.namespace),
            name,
            [
                s(&m.uid),
                s(&m.resource_version),
                s(&top.api_version),
                s(&top.kind),
                s(&m.deletion_timestamp),
            ],
        )?,
        generation: m.generation,
        labels: m.labels.unwrap_or_default(),
        annotations: m.annotations.unwrap_or_default(),
        owner_references: m.owner_references.unwrap_or_default(),
        finalizers: m.finalizers.unwrap_or_default(),
    })
}

pub(super) struct TopVisitor<'t> {
    pub(super) trie: &'t PathNode,
    pub(super) out: &'t mut Vec<Option<Box<str>>>,
}

impl<'de, 't> Visitor<'de> for TopVisitor<'t> {
    type Value = Top<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object (a JSON object)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut top = Top {
            meta: None,
            api_version: None,
            kind: None,
            managed_fields: None,
        };
        while let Some(key) = map.next_key::<CowStr<'de>>()? {
            match key.0.as_ref() {
                "metadata" => {
                    if top.meta.is_some() {
                        return Err(de::Error::duplicate_field("metadata"));
                    }
                    let m: Option<RawMeta<'de>> = map.next_value()?;
                    top.managed_fields = m.as_ref().and_then(|m| m.managed_fields);
                    top.meta = m;
                }
                "apiVersion" => top.api_version = map.next_value()?,
                "kind" => top.kind = map.next_value()?,
                other => next_value_under(&mut map, self.trie.child(other), self.out)?,
            }
        }
        Ok(top)
    }
}

/// The value of the current map entry: read through `node` (a wanted
/// path goes on below this key) into `out`, or skipped.
fn next_value_under<'de, A: MapAccess<'de>>(
    map: &mut A,
    node: Option<&PathNode>,
    out: &mut Vec<Option<Box<str>>>,
) -> Result<(), A::Error> {
    match node {
        Some(node) => map.next_value_seed(NodeSeed { node, out }),
        None => map.next_value::<IgnoredAny>().map(drop),
    }
}

struct NodeSeed<'t> {
    node: &'t PathNode,
    out: &'t mut Vec<Option<Box<str>>>,
}

fn leaf_value<E: de::Error>(raw: &RawValue) -> Result<Option<Box<str>>, E> {
    let text = raw.get();
    if text.starts_with('"') {
        let s: CowStr<'_> = serde_json::from_str(text).map_err(E::custom)?;
        Ok(Some(Box::from(s.0.as_ref())))
    } else if text == "null" {
        Ok(None)
    } else {
        Ok(Some(Box::from(text)))
    }
}

impl<'de, 't> DeserializeSeed<'de> for NodeSeed<'t> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if let Some(idx) = self.node.leaf {
            let raw: &RawValue = <&RawValue>::deserialize(d)?;
            if let Some(slot) = self.out.get_mut(idx) {
                *slot = leaf_value(raw)?;
            }
            if !self.node.children.is_empty() {
                let mut inner = serde_json::Deserializer::from_str(raw.get());
                inner
                    .deserialize_any(NodeVisitor {
                        node: self.node,
                        out: self.out,
                    })
                    .map_err(de::Error::custom)?;
            }
            Ok(())
        } else {
            d.deserialize_any(NodeVisitor {
                node: self.node,
                out: self.out,
            })
        }
    }
}

struct NodeVisitor<'t> {
    node: &'t PathNode,
    out: &'t mut Vec<Option<Box<str>>>,
}

impl<'de, 't> Visitor<'de> for NodeVisitor<'t> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<CowStr<'de>>()? {
            next_value_under(&mut map, self.node.child(&key.0), self.out)?;
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let name = i.to_string();
            match self.node.child(&name) {
                Some(node) => {
                    if seq
                        .next_element_seed(NodeSeed {
                            node,
                            out: &mut *self.out,
                        })?
                        .is_none()
                    {
                        break;
                    }
                }
                None => {
                    if seq.next_element::<IgnoredAny>()?.is_none() {
                        break;
                    }
                }
            }
            i += 1;
        }
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}
