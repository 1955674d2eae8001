//! What a snapshot is a cache of: the fingerprint checked before a
//! snapshot is used, and the file name derived from it.

use super::SNAPSHOT_EXTENSION;

/// What a snapshot is a cache of. A snapshot is used only when every field
/// equals the starting informer's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Fingerprint {
    /// The cluster: the `kube-system` namespace's UID, or the id given with
    /// [`SnapshotOptions::cluster_id`](super::SnapshotOptions::cluster_id).
    pub cluster_uid: String,
    /// The apiserver URL, when given ([`SnapshotOptions::server_url`](super::SnapshotOptions::server_url)).
    pub server_url: Option<String>,
    /// API group (`""` for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Metadata-only objects (`PartialObjectMeta`).
    pub metadata_only: bool,
    /// The namespace watched (`None`: all).
    pub namespace: Option<String>,
    /// The label selector.
    pub label_selector: Option<String>,
    /// The field selector.
    pub field_selector: Option<String>,
    /// The shard selector (server-side sharding), in the apiserver's
    /// syntax: a snapshot of one shard is never loaded for another.
    pub shard_selector: Option<String>,
    /// The transform's id (`None`: no transform).
    pub transform_id: Option<String>,
    /// Whether `managedFields` are cut from cached objects.
    pub strip_managed_fields: bool,
}

fn show(v: &Option<String>) -> String {
    match v {
        Some(s) => format!("{s:?}"),
        None => "none".to_owned(),
    }
}

impl Fingerprint {
    pub(super) fn fields(&self) -> [(&'static str, String); 12] {
        [
            ("cluster", format!("{:?}", self.cluster_uid)),
            ("server URL", show(&self.server_url)),
            ("API group", format!("{:?}", self.group)),
            ("API version", format!("{:?}", self.version)),
            ("resource", format!("{:?}", self.resource)),
            ("metadata-only", self.metadata_only.to_string()),
            ("namespace", show(&self.namespace)),
            ("label selector", show(&self.label_selector)),
            ("field selector", show(&self.field_selector)),
            ("shard selector", show(&self.shard_selector)),
            ("transform id", show(&self.transform_id)),
            ("strip managedFields", self.strip_managed_fields.to_string()),
        ]
    }

    /// The first field that differs, as (name, found in the snapshot,
    /// expected).
    pub(super) fn first_difference(
        &self,
        expected: &Fingerprint,
    ) -> Option<(&'static str, String, String)> {
        self.fields()
            .into_iter()
            .zip(expected.fields())
            .find(|(a, b)| a.1 != b.1)
            .map(|(a, b)| (a.0, a.1, b.1))
    }

    /// A file name for this fingerprint's snapshot in a folder: resource,
    /// group, version, namespace, and a hash of the rest (selectors,
    /// transform, representation), so that two informers never share one.
    pub fn file_name(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut feed = |s: &str| {
            for b in s.bytes().chain([0xff]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for (name, value) in self.fields().iter().skip(2) {
            feed(name);
            feed(value);
        }
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        let mut name = format!("{}.{}.{}", self.resource, group, self.version);
        if let Some(ns) = &self.namespace {
            name.push_str(".ns-");
            name.push_str(ns);
        }
        let mut name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        name.push_str(&format!(".{:08x}.{SNAPSHOT_EXTENSION}", h as u32));
        name
    }
}
