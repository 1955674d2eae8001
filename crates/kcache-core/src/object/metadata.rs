//! [`Metadata`], the metadata every layer needs, extracted once, and
//! [`OwnerReference`]; the scalar strings are kept in one allocation
//! ([`MetaStrings`]).

use std::fmt;

use serde::Deserialize;

use super::ObjectError;
use crate::string_map::StringMap;

/// An entry of `metadata.ownerReferences`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// API version of the owner (`apps/v1`).
    #[serde(default)]
    pub api_version: String,
    /// Kind of the owner (`ReplicaSet`).
    #[serde(default)]
    pub kind: String,
    /// Name of the owner.
    #[serde(default)]
    pub name: String,
    /// UID of the owner.
    #[serde(default)]
    pub uid: String,
    /// Whether this reference points to the managing controller.
    #[serde(default)]
    pub controller: Option<bool>,
    /// Whether the owner cannot be deleted before this object.
    #[serde(default)]
    pub block_owner_deletion: Option<bool>,
}

/// The metadata extracted from an object's JSON in one partial decode.
///
/// Everything here is owned; the rest of the object stays as bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Metadata {
    /// The key, name, namespace, uid, resourceVersion, apiVersion, kind
    /// and deletionTimestamp.
    pub(super) strings: MetaStrings,
    pub(super) generation: Option<i64>,
    pub(super) labels: StringMap,
    pub(super) annotations: StringMap,
    pub(super) owner_references: Vec<OwnerReference>,
    pub(super) finalizers: Vec<String>,
}

/// The parts of [`MetaStrings`] after the key, in the order of its text.
#[derive(Debug, Clone, Copy)]
pub(super) enum Part {
    Uid = 1,
    ResourceVersion,
    ApiVersion,
    Kind,
    DeletionTimestamp,
}

/// The scalar strings of [`Metadata`] in one allocation: the key
/// (`namespace/name`, or `name`), then uid, resourceVersion, apiVersion,
/// kind and deletionTimestamp, one after the other. One buffer instead of
/// eight small ones (the key repeated name and namespace): each small
/// allocation costs the allocator's header and rounding and its pointer,
/// and a cache of 100,000 Pods holds 100,000 of each.
#[derive(Clone, PartialEq, Eq, Default)]
pub(super) struct MetaStrings {
    text: Box<str>,
    /// Length of the namespace at the start of the key (0: none; a
    /// namespace is never empty).
    ns_len: u32,
    /// Where the key and each [`Part`] end in `text`.
    ends: [u32; 6],
    /// Bit `p`: [`Part`] `p` is present (it may be present and empty).
    present: u8,
}

impl MetaStrings {
    /// `parts` in the order of [`Part`]; `None` for an absent part.
    pub(super) fn new(
        namespace: Option<&str>,
        name: &str,
        parts: [Option<&str>; 5],
    ) -> Result<Self, ObjectError> {
        let namespace = namespace.filter(|ns| !ns.is_empty());
        let len = namespace.map_or(0, |ns| ns.len() + 1)
            + name.len()
            + parts.iter().flatten().map(|p| p.len()).sum::<usize>();
        let at = |n: usize| u32::try_from(n).map_err(|_| ObjectError::MetadataTooLarge);
        at(len)?;
        let mut text = String::with_capacity(len);
        if let Some(ns) = namespace {
            text.push_str(ns);
            text.push('/');
        }
        text.push_str(name);
        let mut ends = [0; 6];
        ends[0] = at(text.len())?;
        let mut present = 0;
        for (i, part) in parts.iter().enumerate() {
            if let Some(p) = part {
                text.push_str(p);
                present |= 1 << (i + 1);
            }
            ends[i + 1] = at(text.len())?;
        }
        Ok(MetaStrings {
            text: text.into_boxed_str(),
            ns_len: at(namespace.map_or(0, str::len))?,
            ends,
            present,
        })
    }

    fn slice(&self, start: u32, end: u32) -> &str {
        self.text.get(start as usize..end as usize).unwrap_or("")
    }

    pub(super) fn key(&self) -> &str {
        self.slice(0, self.ends[0])
    }

    pub(super) fn namespace(&self) -> Option<&str> {
        (self.ns_len > 0).then(|| self.slice(0, self.ns_len))
    }

    pub(super) fn name(&self) -> &str {
        let start = if self.ns_len > 0 { self.ns_len + 1 } else { 0 };
        self.slice(start, self.ends[0])
    }

    pub(super) fn part(&self, part: Part) -> Option<&str> {
        let i = part as usize;
        (self.present & (1 << i) != 0).then(|| self.slice(self.ends[i - 1], self.ends[i]))
    }

    pub(super) fn heap_size(&self) -> usize {
        self.text.len()
    }
}

impl fmt::Debug for MetaStrings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetaStrings")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("uid", &self.part(Part::Uid))
            .field("resource_version", &self.part(Part::ResourceVersion))
            .field("api_version", &self.part(Part::ApiVersion))
            .field("kind", &self.part(Part::Kind))
            .field("deletion_timestamp", &self.part(Part::DeletionTimestamp))
            .finish()
    }
}

impl Metadata {
    /// `apiVersion` of the object, when present.
    pub fn api_version(&self) -> Option<&str> {
        self.strings.part(Part::ApiVersion)
    }
    /// `kind` of the object, when present.
    pub fn kind(&self) -> Option<&str> {
        self.strings.part(Part::Kind)
    }
    /// `metadata.name` (never empty).
    pub fn name(&self) -> &str {
        self.strings.name()
    }
    /// `metadata.namespace`; `None` for cluster-scoped objects (an empty namespace is `None`).
    pub fn namespace(&self) -> Option<&str> {
        self.strings.namespace()
    }
    /// `metadata.uid`, when present.
    pub fn uid(&self) -> Option<&str> {
        self.strings.part(Part::Uid)
    }
    /// `metadata.resourceVersion`, when present.
    pub fn resource_version(&self) -> Option<&str> {
        self.strings.part(Part::ResourceVersion)
    }
    /// `metadata.generation`, when present.
    pub fn generation(&self) -> Option<i64> {
        self.generation
    }
    /// `metadata.labels` (empty when absent).
    pub fn labels(&self) -> &StringMap {
        &self.labels
    }
    /// `metadata.annotations` (empty when absent).
    pub fn annotations(&self) -> &StringMap {
        &self.annotations
    }
    /// `metadata.ownerReferences` (empty when absent).
    pub fn owner_references(&self) -> &[OwnerReference] {
        &self.owner_references
    }
    /// The owner reference with `controller: true`, if any.
    pub fn controller_ref(&self) -> Option<&OwnerReference> {
        self.owner_references
            .iter()
            .find(|o| o.controller == Some(true))
    }
    /// `metadata.finalizers` (empty when absent).
    pub fn finalizers(&self) -> &[String] {
        &self.finalizers
    }
    /// `metadata.deletionTimestamp` as sent (RFC 3339), when the object is being deleted.
    pub fn deletion_timestamp(&self) -> Option<&str> {
        self.strings.part(Part::DeletionTimestamp)
    }
}

pub(super) fn field_from_meta(meta: &Metadata, segs: &[String]) -> Option<Box<str>> {
    let own = |s: Option<&str>| s.map(Box::from);
    match segs {
        [k] if k == "kind" => own(meta.kind()),
        [k] if k == "apiVersion" => own(meta.api_version()),
        [m, f] if m == "metadata" => match f.as_str() {
            "name" => own(Some(meta.name())),
            "namespace" => own(meta.namespace()),
            "uid" => own(meta.uid()),
            "resourceVersion" => own(meta.resource_version()),
            "generation" => meta.generation.map(|g| g.to_string().into_boxed_str()),
            "deletionTimestamp" => own(meta.deletion_timestamp()),
            _ => None,
        },
        [m, map, key] if m == "metadata" && map == "labels" => meta.labels.get(key).map(Box::from),
        [m, map, key] if m == "metadata" && map == "annotations" => {
            meta.annotations.get(key).map(Box::from)
        }
        _ => None,
    }
}
