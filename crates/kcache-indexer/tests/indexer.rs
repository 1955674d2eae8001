//! Scenario tests equivalent to client-go's TestCache, TestIndex,
//! TestThreadSafeStore*, TestGetIndexFuncValues, TestMultiIndexKeys, TestListAll.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{Obj, mk, names, obj, val};
use k8s_openapi::api::core::v1::Pod;
use kcache_core::{
    CachedObject, DeletedFinalStateUnknown, FieldPaths, KeyListerGetter, ObjectOptions,
    ReflectorStore, Selector, StoreError,
};
use kcache_indexer::{
    IndexError, IndexFunc, Indexer, Indexers, Lister, NAMESPACE_INDEX, NotFound, field_index_func,
    label_index_func, list_all, list_all_by_namespace, owner_uid_index_func,
};
use serde_json::Value;

fn by_val() -> IndexFunc<Value> {
    IndexFunc::new(|o: &Obj| Ok(vec![val(o)]))
}

fn split_val() -> IndexFunc<Value> {
    IndexFunc::new(|o: &Obj| Ok(val(o).split(',').map(str::to_owned).collect()))
}

fn indexer_with(name: &str, f: IndexFunc<Value>) -> Indexer<Value> {
    let mut i = Indexers::new();
    i.insert(name.to_string(), f);
    Indexer::with_indexers(Arc::new(kcache_core::meta_namespace_key::<Value>), i)
}

/// An indexer on `by_val` holding, added in order, one object per
/// `(name, value)`.
fn by_val_holding(objects: &[(&str, &str)]) -> Indexer<Value> {
    let idx = indexer_with("by_val", by_val());
    for (name, value) in objects {
        idx.add(mk(name, value)).unwrap();
    }
    idx
}

/// client-go TestCache (doTestStore).
#[test]
fn cache_add_update_delete_list_replace() {
    let store = indexer_with("by_val", by_val());
    store.add(mk("foo", "bar")).unwrap();
    assert_eq!(val(&store.get(&mk("foo", "")).unwrap().unwrap()), "bar");
    store.update(mk("foo", "baz")).unwrap();
    assert_eq!(val(&store.get(&mk("foo", "")).unwrap().unwrap()), "baz");
    store.delete(mk("foo", "")).unwrap();
    assert!(store.get(&mk("foo", "")).unwrap().is_none());
    store.delete(mk("never", "")).unwrap(); // missing: no-op

    store.add(mk("a", "b")).unwrap();
    store.add(mk("c", "d")).unwrap();
    store.add(mk("e", "e")).unwrap();
    let found: BTreeSet<String> = store.list().iter().map(val).collect();
    assert_eq!(found, BTreeSet::from(["b".into(), "d".into(), "e".into()]));
    let mut keys = store.list_keys();
    keys.sort();
    assert_eq!(keys, ["a", "c", "e"]);

    store
        .replace(vec![mk("foo", "foo"), mk("bar", "bar")], "0")
        .unwrap();
    let found: BTreeSet<String> = store.list().iter().map(val).collect();
    assert_eq!(found, BTreeSet::from(["foo".into(), "bar".into()]));
    assert_eq!(store.len(), 2);
    // Replace rebuilt the index: old values are gone.
    assert!(store.by_index("by_val", "b").unwrap().is_empty());
    assert_eq!(names(store.by_index("by_val", "foo").unwrap()), ["foo"]);
    assert_eq!(store.list_index_func_values("by_val"), ["bar", "foo"]);
    store.resync().unwrap();
    assert_eq!(store.len(), 2);
}

/// client-go TestIndex (doTestIndex).
#[test]
fn index_returns_objects_sharing_a_value() {
    let idx = by_val_holding(&[("a", "b"), ("c", "b"), ("e", "f"), ("g", "h")]);
    for (v, want) in [
        ("b", vec!["a", "c"]),
        ("f", vec!["e"]),
        ("h", vec!["g"]),
        ("zz", vec![]),
    ] {
        assert_eq!(
            names(idx.index("by_val", &mk("probe", v)).unwrap()),
            want,
            "{v}"
        );
    }
    // Multi-valued probe: union without duplicates.
    let multi = indexer_with("u", split_val());
    multi.add(mk("one", "x,y")).unwrap();
    multi.add(mk("two", "y,z")).unwrap();
    multi.add(mk("three", "w")).unwrap();
    assert_eq!(
        names(multi.index("u", &mk("probe", "x,y,z")).unwrap()),
        ["one", "two"]
    );
    assert!(
        matches!(idx.index("nope", &mk("a", "b")), Err(IndexError::UnknownIndex(n)) if n == "nope")
    );
}

/// client-go TestGetIndexFuncValues.
#[test]
fn list_index_func_values_is_distinct() {
    let idx = indexer_with(
        "testmodes",
        IndexFunc::new(|o: &Obj| Ok(vec![o.labels().get("foo").unwrap_or_default().to_owned()])),
    );
    idx.add(obj(None, "one", &[("foo", "bar")], &[])).unwrap();
    idx.add(obj(None, "two", &[("foo", "bar")], &[])).unwrap();
    idx.add(obj(None, "tre", &[("foo", "biz")], &[])).unwrap();
    assert_eq!(idx.list_index_func_values("testmodes"), ["bar", "biz"]);
    assert!(idx.list_index_func_values("unknown").is_empty());
}

/// client-go TestMultiIndexKeys.
#[test]
fn multi_index_keys() {
    let users = IndexFunc::new(|o: &Obj| {
        Ok(o.annotations()["users"]
            .split(',')
            .map(str::to_owned)
            .collect())
    });
    let idx = indexer_with("byUser", users);
    let pod = |name: &str, users: &str| obj(None, name, &[], &[("users", users)]);
    idx.add(pod("one", "ernie,bert")).unwrap();
    idx.add(pod("two", "bert,oscar")).unwrap();
    idx.add(pod("tre", "ernie,elmo")).unwrap();
    let expect = [
        ("ernie", vec!["one", "tre"]),
        ("bert", vec!["one", "two"]),
        ("elmo", vec!["tre"]),
        ("oscar", vec!["two"]),
        ("elmo1", vec![]),
    ];
    for (u, want) in expect {
        let mut got = names(idx.by_index("byUser", u).unwrap());
        got.sort();
        let mut want: Vec<String> = want.into_iter().map(String::from).collect();
        want.sort();
        assert_eq!(got, want, "{u}");
    }
    idx.delete(pod("tre", "ernie,elmo")).unwrap();
    assert_eq!(names(idx.by_index("byUser", "ernie").unwrap()), ["one"]);
    assert!(idx.by_index("byUser", "elmo").unwrap().is_empty());
    idx.update(pod("two", "oscar")).unwrap();
    assert_eq!(names(idx.by_index("byUser", "bert").unwrap()), ["one"]);
}

/// client-go TestThreadSafeStoreDeleteRemovesEmptySetsFromIndex.
#[test]
fn delete_removes_empty_sets_from_index() {
    let idx = indexer_with("by_val", by_val());
    idx.add(mk("k", "v")).unwrap();
    assert_eq!(idx.list_index_func_values("by_val"), ["v"]);
    idx.delete(mk("k", "v")).unwrap();
    assert!(
        idx.list_index_func_values("by_val").is_empty(),
        "empty set left behind"
    );
    // Update moving away from a value removes that value's set too.
    idx.add(mk("k", "old")).unwrap();
    idx.update(mk("k", "new")).unwrap();
    assert_eq!(idx.list_index_func_values("by_val"), ["new"]);
}

/// client-go TestThreadSafeStoreAddKeepsNonEmptySetPostDeleteFromIndex.
#[test]
fn add_keeps_non_empty_set_post_delete() {
    let idx = by_val_holding(&[("retain", "v"), ("delete", "v")]);
    idx.delete(mk("delete", "v")).unwrap();
    assert_eq!(idx.list_index_func_values("by_val"), ["v"]);
    assert_eq!(idx.index_keys("by_val", "v").unwrap(), ["retain"]);
}

/// client-go TestThreadSafeStoreIndexingFunctionsWithMultipleValues.
#[test]
fn indexing_functions_with_multiple_values() {
    let idx = indexer_with("t", split_val());
    let cmp =
        |v: &str, want: &[&str]| assert_eq!(idx.index_keys("t", v).unwrap(), want, "value {v}");
    idx.add(mk("key1", "foo")).unwrap();
    idx.add(mk("key2", "bar")).unwrap();
    cmp("foo", &["key1"]);
    cmp("bar", &["key2"]);
    idx.update(mk("key2", "foo,bar")).unwrap();
    cmp("foo", &["key1", "key2"]);
    cmp("bar", &["key2"]);
    idx.update(mk("key1", "foo,bar")).unwrap();
    cmp("foo", &["key1", "key2"]);
    cmp("bar", &["key1", "key2"]);
    idx.add(mk("key3", "foo,bar,baz")).unwrap();
    cmp("foo", &["key1", "key2", "key3"]);
    cmp("bar", &["key1", "key2", "key3"]);
    cmp("baz", &["key3"]);
    idx.update(mk("key1", "foo")).unwrap();
    cmp("foo", &["key1", "key2", "key3"]);
    cmp("bar", &["key2", "key3"]);
    cmp("baz", &["key3"]);
    idx.update(mk("key2", "bar")).unwrap();
    cmp("foo", &["key1", "key3"]);
    cmp("bar", &["key2", "key3"]);
    cmp("baz", &["key3"]);
    idx.delete(mk("key1", "")).unwrap();
    cmp("foo", &["key3"]);
    cmp("bar", &["key2", "key3"]);
    cmp("baz", &["key3"]);
    idx.delete(mk("key3", "")).unwrap();
    cmp("foo", &[]);
    cmp("bar", &["key2"]);
    cmp("baz", &[]);
    assert_eq!(idx.list_index_func_values("t"), ["bar"]);
}

/// client-go TestThreadSafeStoreRV.
#[test]
fn store_resource_version() {
    let idx: Indexer<Value> = Indexer::new();
    assert_eq!(idx.last_store_sync_resource_version(), None);
    let with_rv = |name: &str, rv: &str| {
        CachedObject::<Value>::from_bytes(format!(
            r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}"#
        ))
        .unwrap()
    };
    let synced_rv = |idx: &Indexer<Value>| idx.last_store_sync_resource_version();
    idx.add(with_rv("a", "10")).unwrap();
    assert_eq!(synced_rv(&idx).as_deref(), Some("10"));
    idx.update(with_rv("a", "11")).unwrap();
    assert_eq!(synced_rv(&idx).as_deref(), Some("11"));
    idx.add(with_rv("same", "11")).unwrap();
    assert_eq!(synced_rv(&idx).as_deref(), Some("11"));
    idx.delete(with_rv("a", "12")).unwrap();
    assert_eq!(synced_rv(&idx).as_deref(), Some("12"));
    // An object without a resourceVersion does not move it; nor does a delete by key.
    idx.add(obj(None, "no-rv", &[], &[])).unwrap();
    assert_eq!(synced_rv(&idx).as_deref(), Some("12"));
    idx.delete_by_key("same");
    assert_eq!(synced_rv(&idx).as_deref(), Some("12"));
    idx.replace(vec![with_rv("b", "5")], "20").unwrap();
    assert_eq!(synced_rv(&idx).as_deref(), Some("20"));
    ReflectorStore::bookmark(&idx, "25").unwrap();
    assert_eq!(
        ReflectorStore::last_store_sync_resource_version(&idx).as_deref(),
        Some("25")
    );
}

#[test]
fn unknown_index_is_an_error_unknown_value_is_empty() {
    let idx: Indexer<Value> = Indexer::new();
    idx.add(obj(Some("ns"), "a", &[], &[])).unwrap();
    let e = idx.by_index("missing", "x").unwrap_err();
    assert!(matches!(&e, IndexError::UnknownIndex(n) if n == "missing"));
    assert_eq!(e.to_string(), "index with name missing does not exist");
    assert!(idx.index_keys("missing", "x").is_err());
    assert!(idx.by_index(NAMESPACE_INDEX, "other").unwrap().is_empty());
    assert!(idx.index_keys(NAMESPACE_INDEX, "other").unwrap().is_empty());
}

#[test]
fn index_keys_are_sorted() {
    let idx: Indexer<Value> = Indexer::new();
    for n in ["z", "b", "m", "a", "q"] {
        idx.add(obj(Some("ns"), n, &[], &[])).unwrap();
    }
    assert_eq!(
        idx.index_keys(NAMESPACE_INDEX, "ns").unwrap(),
        ["ns/a", "ns/b", "ns/m", "ns/q", "ns/z"]
    );
}

#[test]
fn namespace_index_is_built_in() {
    let idx: Indexer<Value> = Indexer::new();
    assert!(idx.get_indexers().contains_key(NAMESPACE_INDEX));
    idx.add(obj(Some("a"), "x", &[], &[])).unwrap();
    idx.add(obj(None, "node", &[], &[])).unwrap();
    assert_eq!(idx.index_keys(NAMESPACE_INDEX, "a").unwrap(), ["a/x"]);
    assert_eq!(
        idx.index_keys(NAMESPACE_INDEX, "").unwrap(),
        ["node"],
        "cluster-scoped under \"\""
    );
}

fn failing_on(bad: &'static str) -> IndexFunc<Value> {
    IndexFunc::new(move |o: &Obj| {
        if val(o) == bad {
            Err("boom".into())
        } else {
            Ok(vec![val(o)])
        }
    })
}

#[test]
fn failing_index_function_leaves_store_unchanged() {
    let idx = indexer_with("f", failing_on("bad"));
    idx.add(mk("a", "good")).unwrap();
    // add of a new key
    let e = idx.add(mk("b", "bad")).unwrap_err();
    assert!(matches!(&e, StoreError::IndexFunc { index, key, .. } if index == "f" && key == "b"));
    assert!(idx.get_by_key("b").is_none());
    // update of an existing key
    assert!(idx.update(mk("a", "bad")).is_err());
    assert_eq!(val(&idx.get_by_key("a").unwrap()), "good");
    assert_eq!(idx.index_keys("f", "good").unwrap(), ["a"]);
    // replace
    assert!(
        idx.replace(vec![mk("x", "ok"), mk("y", "bad")], "9")
            .is_err()
    );
    assert_eq!(idx.list_keys(), ["a"]);
    assert_eq!(idx.list_index_func_values("f"), ["good"]);
    assert_eq!(idx.last_store_sync_resource_version(), None);
    // add_indexers failing on an existing item
    idx.add(mk("c", "bad2")).unwrap();
    let mut more = Indexers::new();
    more.insert("g".into(), failing_on("bad2"));
    assert!(matches!(
        idx.add_indexers(more),
        Err(IndexError::Func { .. })
    ));
    assert!(!idx.get_indexers().contains_key("g"));
}

#[test]
fn add_indexers_indexes_existing_items_and_rejects_duplicates() {
    let idx: Indexer<Value> = Indexer::new();
    idx.add(obj(Some("ns"), "a", &[("app", "web")], &[]))
        .unwrap();
    idx.add(obj(Some("ns"), "b", &[("app", "db")], &[]))
        .unwrap();
    let mut more = Indexers::new();
    more.insert("app".into(), label_index_func("app"));
    idx.add_indexers(more).unwrap();
    assert_eq!(idx.index_keys("app", "web").unwrap(), ["ns/a"]);
    assert_eq!(
        idx.index_keys(NAMESPACE_INDEX, "ns").unwrap(),
        ["ns/a", "ns/b"]
    );
    idx.add(obj(Some("ns"), "c", &[("app", "web")], &[]))
        .unwrap();
    assert_eq!(idx.index_keys("app", "web").unwrap(), ["ns/a", "ns/c"]);
    let mut dup = Indexers::new();
    dup.insert("app".into(), label_index_func("app"));
    dup.insert("fresh".into(), label_index_func("x"));
    let e = idx.add_indexers(dup).unwrap_err();
    assert!(matches!(&e, IndexError::Conflict(n) if n == &["app".to_string()]));
    assert!(e.to_string().starts_with("indexer conflict"));
    let mut names: Vec<_> = idx.get_indexers().into_keys().collect();
    names.sort();
    assert_eq!(names, ["app", NAMESPACE_INDEX]);
}

#[test]
fn replace_with_duplicate_keys_keeps_the_last() {
    let idx = indexer_with("by_val", by_val());
    idx.replace(vec![mk("a", "first"), mk("a", "second")], "1")
        .unwrap();
    assert_eq!(val(&idx.get_by_key("a").unwrap()), "second");
    assert_eq!(idx.list_index_func_values("by_val"), ["second"]);
}

#[test]
fn delete_with_tombstone_uses_its_key() {
    let idx: Indexer<Value> = Indexer::new();
    let o = obj(Some("ns"), "a", &[], &[]);
    idx.add(o.clone()).unwrap();
    idx.delete(DeletedFinalStateUnknown {
        key: "ns/a".into(),
        obj: o,
    })
    .unwrap();
    assert!(idx.is_empty());
    assert!(idx.list_index_func_values(NAMESPACE_INDEX).is_empty());
}

#[test]
fn metadata_field_and_typed_index_functions() {
    let paths = FieldPaths::new(["/spec/nodeName"]).unwrap();
    let opts = ObjectOptions {
        field_paths: Some(paths),
        ..ObjectOptions::default()
    };
    let pod = |name: &str, node: &str, owner: &str| -> CachedObject<Pod> {
        let j = serde_json::json!({"metadata": {"name": name, "namespace": "ns",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner}]},
            "spec": {"nodeName": node, "containers": []}});
        CachedObject::from_bytes_with(serde_json::to_vec(&j).unwrap(), &opts).unwrap()
    };
    let mut ix: Indexers<Pod> = Indexers::new();
    ix.insert("node".into(), field_index_func("/spec/nodeName"));
    ix.insert("owner".into(), owner_uid_index_func());
    ix.insert(
        "typed-node".into(),
        IndexFunc::typed(|p: &Pod| {
            Ok(p.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .into_iter()
                .collect())
        }),
    );
    let idx = Indexer::with_indexers(Arc::new(kcache_core::meta_namespace_key::<Pod>), ix);
    idx.add(pod("a", "n1", "u1")).unwrap();
    idx.add(pod("b", "n2", "u1")).unwrap();
    assert_eq!(idx.index_keys("node", "n1").unwrap(), ["ns/a"]);
    assert_eq!(idx.index_keys("typed-node", "n2").unwrap(), ["ns/b"]);
    assert_eq!(idx.index_keys("owner", "u1").unwrap(), ["ns/a", "ns/b"]);
    idx.update(pod("a", "n2", "u2")).unwrap();
    assert_eq!(idx.index_keys("node", "n2").unwrap(), ["ns/a", "ns/b"]);
    assert!(idx.index_keys("node", "n1").unwrap().is_empty());
    // An object built without the declared path fails loudly.
    let undeclared =
        CachedObject::<Pod>::from_bytes(&br#"{"metadata":{"name":"c","namespace":"ns"}}"#[..])
            .unwrap();
    assert!(
        matches!(idx.add(undeclared), Err(StoreError::IndexFunc { index, .. }) if index == "node")
    );
    // A typed index function that cannot decode fails the write.
    let bad = CachedObject::<Pod>::from_bytes_with(
        &br#"{"metadata":{"name":"d","namespace":"ns"},"spec":{"containers":1}}"#[..],
        &opts,
    )
    .unwrap();
    assert!(
        matches!(idx.add(bad), Err(StoreError::IndexFunc { index, .. }) if index == "typed-node")
    );
    assert_eq!(idx.len(), 2);
}

/// client-go TestListAll (smaller sizes for a debug build).
#[test]
fn list_all_with_selectors() {
    let idx: Indexer<Value> = Indexer::new();
    let n = 20_000;
    let matching = 2_000;
    let items: Vec<Obj> = (0..n)
        .map(|i| {
            let labels: &[(&str, &str)] = if i < matching {
                &[("match", "true")]
            } else {
                &[]
            };
            obj(
                Some(&format!("ns{}", i % 10)),
                &format!("obj-{i}"),
                labels,
                &[],
            )
        })
        .collect();
    idx.replace(items, "1").unwrap();
    assert_eq!(
        list_all(&idx, &Selector::from_labels([("match", "true")])).len(),
        matching
    );
    assert_eq!(list_all(&idx, &Selector::everything()).len(), n);
    assert_eq!(list_all(&idx, &Selector::nothing()).len(), 0);
    assert_eq!(list_all(&idx, &"nomatch=true".parse().unwrap()).len(), 0);
    assert_eq!(
        list_all_by_namespace(&idx, "ns3", &Selector::everything()).len(),
        n / 10
    );
    assert_eq!(
        list_all_by_namespace(&idx, "ns3", &"match=true".parse().unwrap()).len(),
        matching / 10
    );
    assert_eq!(
        list_all_by_namespace(&idx, "", &"match=true".parse().unwrap()).len(),
        matching
    );
    assert_eq!(
        list_all_by_namespace(&idx, "ns3", &Selector::nothing()).len(),
        0
    );
    // Without a namespace index: full scan, same answer.
    let plain = Indexer::<Value>::with_indexers(
        Arc::new(kcache_core::meta_namespace_key::<Value>),
        Indexers::new(),
    );
    plain.replace(idx.list(), "1").unwrap();
    assert_eq!(
        list_all_by_namespace(&plain, "ns3", &"match=true".parse().unwrap()).len(),
        matching / 10
    );
}

#[test]
fn lister_get_list_namespaced_not_found() {
    let idx = Arc::new(Indexer::<Value>::new());
    idx.add(obj(Some("a"), "x", &[("app", "web")], &[]))
        .unwrap();
    idx.add(obj(Some("a"), "y", &[("app", "db")], &[])).unwrap();
    idx.add(obj(Some("b"), "x", &[("app", "web")], &[]))
        .unwrap();
    idx.add(obj(None, "node-1", &[("app", "web")], &[]))
        .unwrap();
    let l = Lister::new(idx.clone());
    assert_eq!(l.list(&"app=web".parse().unwrap()).len(), 3);
    assert_eq!(l.list(&Selector::everything()).len(), 4);
    assert_eq!(l.get("node-1").unwrap().name(), "node-1");
    assert_eq!(l.get("x").unwrap_err(), NotFound { key: "x".into() });
    let a = l.namespaced("a");
    assert_eq!(a.get("x").unwrap().key(), "a/x");
    assert_eq!(a.list(&"app=web".parse().unwrap()).len(), 1);
    assert_eq!(a.list(&"app!=web".parse().unwrap())[0].key(), "a/y");
    let e = l.namespaced("c").get("x").unwrap_err();
    assert_eq!(e.key, "c/x");
    assert_eq!(e.to_string(), "object \"c/x\" not found");
}

#[test]
fn lister_typed_convenience_decodes() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let idx = Arc::new(Indexer::<ConfigMap>::new());
    let cm = |name: &str| {
        kcache_core::CachedObject::<ConfigMap>::from_bytes(
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"a","labels":{{"app":"web"}}}},"data":{{"k":"{name}"}}}}"#)
                .into_bytes(),
        )
        .unwrap()
    };
    idx.add(cm("x")).unwrap();
    idx.add(cm("y")).unwrap();
    // an object whose bytes do not fit the type: `data` must be strings
    idx.add(
        kcache_core::CachedObject::<ConfigMap>::from_bytes(
            &br#"{"metadata":{"name":"bad","namespace":"b"},"data":{"k":1}}"#[..],
        )
        .unwrap(),
    )
    .unwrap();
    let l = Lister::new(idx);
    let x: ConfigMap = l.namespaced("a").get_decoded("x").unwrap();
    assert_eq!(x.data.unwrap()["k"], "x");
    assert_eq!(
        l.namespaced("a")
            .list_decoded(&Selector::everything())
            .unwrap()
            .len(),
        2
    );
    assert!(matches!(
        l.namespaced("a").get_decoded("zz"),
        Err(kcache_indexer::GetError::NotFound(_))
    ));
    assert!(matches!(
        l.namespaced("b").get_decoded("bad"),
        Err(kcache_indexer::GetError::Decode(_))
    ));
    assert!(l.list_decoded(&Selector::everything()).is_err());
}

#[test]
fn store_and_key_lister_getter_traits() {
    let idx = Arc::new(Indexer::<Value>::new());
    let store: Arc<dyn ReflectorStore<Value>> = idx.clone();
    store.add(obj(Some("n"), "a", &[], &[])).unwrap();
    store
        .update(obj(Some("n"), "a", &[("v", "2")], &[]))
        .unwrap();
    store.add(obj(Some("n"), "b", &[], &[])).unwrap();
    store.delete(obj(Some("n"), "b", &[], &[]).into()).unwrap();
    store.resync().unwrap();
    let known: Arc<dyn KeyListerGetter<Value>> = idx.clone();
    assert_eq!(known.list_keys(), ["n/a"]);
    assert_eq!(
        known.get_by_key("n/a").unwrap().labels().get("v"),
        Some("2")
    );
    store
        .replace(vec![obj(Some("n"), "c", &[], &[])], "3".into())
        .unwrap();
    assert_eq!(known.list_keys(), ["n/c"]);
    assert!(known.get_by_key("n/a").is_none());
}

#[test]
fn custom_key_function() {
    let kf = Arc::new(|o: &Obj| -> Result<String, kcache_core::KeyError> {
        Ok(format!("k:{}", o.name()))
    });
    let idx = Indexer::with_indexers(kf, Indexers::new());
    idx.add(obj(Some("ns"), "a", &[], &[])).unwrap();
    assert_eq!(idx.list_keys(), ["k:a"]);
    assert!(
        idx.get(&obj(Some("other"), "a", &[], &[]))
            .unwrap()
            .is_some()
    );
    assert_eq!(idx.delete_by_key("k:a").unwrap().name(), "a");
    assert!(idx.is_empty());
}

/// A reflector writing straight into an indexer asks it for the object it
/// holds, to reuse it on a relist.
#[test]
fn store_cached_is_the_held_object() {
    let store = indexer_with("by_val", by_val());
    let a = mk("a", "1");
    ReflectorStore::add(&store, a.clone()).unwrap();
    let held = ReflectorStore::cached(&store, a.key()).unwrap();
    assert!(held.ptr_eq(&a));
    assert!(ReflectorStore::cached(&store, "absent").is_none());
}
