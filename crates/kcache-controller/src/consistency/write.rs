//! What a successful write's response says was written: an object at a
//! version, or the deletion of an object (by uid).

use bytes::Bytes;
use kcache_core::{CachedObject, ResourceVersion};
use serde::Deserialize;

/// A write the apiserver answered.
pub(crate) enum Written {
    /// A create, update or patch (or a delete that waits for finalizers:
    /// the object with its deletionTimestamp): the object as returned.
    Object {
        obj: CachedObject<()>,
        body: Bytes,
        rv: ResourceVersion,
    },
    /// A delete that removed the object `uid`, of resource `plural` in
    /// `group`, under `key`. `obj` is the object as it was when the
    /// apiserver answered with it (`None`: it answered with a `Status`).
    Deleted {
        group: String,
        plural: Option<String>,
        kind: Option<String>,
        key: String,
        uid: String,
        obj: Option<CachedObject<()>>,
    },
}

impl Written {
    /// The written type's group.
    pub(crate) fn group(&self) -> &str {
        match self {
            Written::Object { obj, .. } => group_of(obj),
            Written::Deleted { group, .. } => group,
        }
    }
}

fn group_of(obj: &CachedObject<()>) -> &str {
    obj.meta()
        .api_version()
        .and_then(|v| v.rsplit_once('/'))
        .map_or("", |(g, _)| g)
}

/// A `Status` answer's details (a DELETE of a built-in type with
/// garbage collection is answered with one).
#[derive(Deserialize)]
struct Status {
    kind: Option<String>,
    details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    name: String,
    #[serde(default)]
    group: String,
    /// The resource (plural), despite the name.
    #[serde(default)]
    kind: String,
    #[serde(default)]
    uid: String,
}

/// The namespace a request path names (`/api/v1/namespaces/<ns>/<resource>/...`
/// or `/apis/<group>/<version>/namespaces/<ns>/<resource>/...`), if any.
pub(crate) fn path_namespace(path: &str) -> Option<&str> {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let p = match segs.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return None,
    };
    // a namespaced resource: namespaces/<ns>/<resource>/<name>
    (segs.get(p) == Some(&"namespaces") && segs.len() >= p + 4)
        .then(|| segs[p + 1])
        .filter(|ns| !ns.is_empty())
}

/// What the answer `body` to a successful `method` request on `path` says
/// was written; `None` when it says nothing usable (not an object, no
/// resourceVersion, no uid).
pub(crate) fn parse(method: &http::Method, path: &str, body: Bytes) -> Option<Written> {
    let is_delete = method == http::Method::DELETE;
    if is_delete
        && let Ok(Status {
            kind: Some(kind),
            details: Some(d),
        }) = serde_json::from_slice::<Status>(&body)
        && kind == "Status"
    {
        if d.uid.is_empty() || d.name.is_empty() {
            return None;
        }
        let key = match path_namespace(path) {
            Some(ns) => format!("{ns}/{}", d.name),
            None => d.name,
        };
        return Some(Written::Deleted {
            group: d.group,
            plural: Some(d.kind),
            kind: None,
            key,
            uid: d.uid,
            obj: None,
        });
    }
    let obj = CachedObject::<()>::from_bytes(body.clone()).ok()?;
    let meta = obj.meta();
    if meta.kind().is_none_or(|k| k == "Status") {
        return None;
    }
    // a DELETE answered with the object and no deletionTimestamp removed
    // it; with one, the object waits for finalizers: an update
    if is_delete && meta.deletion_timestamp().is_none() {
        let uid = meta.uid()?.to_owned();
        return Some(Written::Deleted {
            group: group_of(&obj).to_owned(),
            plural: None,
            kind: meta.kind().map(str::to_owned),
            key: obj.key().to_owned(),
            uid,
            obj: Some(obj),
        });
    }
    let rv = ResourceVersion::new(meta.resource_version()?);
    Some(Written::Object { obj, body, rv })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_name_their_namespace() {
        assert_eq!(
            path_namespace("/apis/apps/v1/namespaces/ns1/deployments/web"),
            Some("ns1")
        );
        assert_eq!(
            path_namespace("/api/v1/namespaces/ns2/configmaps/c"),
            Some("ns2")
        );
        assert_eq!(
            path_namespace("/api/v1/namespaces/ns3"),
            None,
            "a namespace itself"
        );
        assert_eq!(
            path_namespace("/apis/rbac.authorization.k8s.io/v1/clusterroles/r"),
            None
        );
        assert_eq!(path_namespace("/healthz"), None);
    }

    #[test]
    fn a_status_answer_to_a_delete_names_the_deleted_object() {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Success",
            "details": {"name": "web", "group": "apps", "kind": "deployments", "uid": "u-1"}});
        let w = parse(
            &http::Method::DELETE,
            "/apis/apps/v1/namespaces/ns1/deployments/web",
            Bytes::from(status.to_string()),
        );
        match w {
            Some(Written::Deleted {
                group,
                plural,
                key,
                uid,
                obj: None,
                ..
            }) => {
                assert_eq!(
                    (group.as_str(), plural.as_deref()),
                    ("apps", Some("deployments"))
                );
                assert_eq!((key.as_str(), uid.as_str()), ("ns1/web", "u-1"));
            }
            _ => panic!("not a deletion"),
        }
        // without a uid: nothing to go by
        let bare = json!({"kind": "Status", "status": "Success", "details": {"name": "web"}});
        assert!(parse(&http::Method::DELETE, "/x", Bytes::from(bare.to_string())).is_none());
    }

    #[test]
    fn an_object_answer_is_a_write_unless_a_delete_removed_it() {
        let obj = |deleting: bool| {
            let mut v = json!({"apiVersion": "example.com/v1", "kind": "Foo",
                "metadata": {"name": "a", "namespace": "ns", "uid": "u-2", "resourceVersion": "9"}});
            if deleting {
                v["metadata"]["deletionTimestamp"] = json!("2026-12-05T10:00:00Z");
                v["metadata"]["finalizers"] = json!(["example.com/cleanup"]);
            }
            Bytes::from(v.to_string())
        };
        assert!(matches!(
            parse(&http::Method::PATCH, "/p", obj(false)),
            Some(Written::Object { .. })
        ));
        assert!(matches!(
            parse(&http::Method::DELETE, "/p", obj(false)),
            Some(Written::Deleted { ref uid, .. }) if uid == "u-2"
        ));
        assert!(matches!(
            parse(&http::Method::DELETE, "/p", obj(true)),
            Some(Written::Object { .. })
        ));
        assert!(parse(&http::Method::POST, "/p", Bytes::from_static(b"not json")).is_none());
    }
}
