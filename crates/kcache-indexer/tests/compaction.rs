//! What background compression needs of the store: write epochs, bounded
//! scans for quiet objects, and a compare-and-swap that replaces an object
//! by its compressed twin only while the store holds that very object.

use std::collections::HashSet;
use std::sync::Arc;

use kcache_core::{CachedObject, CompressionDictionary};
use kcache_indexer::{Indexer, Indexers, Lister, Swap, label_index_func};
use serde_json::Value;

type Obj = CachedObject<Value>;

fn pod(ns: &str, name: &str, rv: u32, app: &str) -> Obj {
    CachedObject::from_bytes(format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}",
        "labels":{{"app":"{app}","tier":"backend"}}}},"spec":{{"nodeName":"node-{rv}","containers":[{{"name":"app",
        "image":"registry.example.com/team/app:1.2.3","ports":[{{"containerPort":8080,"protocol":"TCP"}}]}}]}},
        "status":{{"phase":"Running","podIP":"10.0.0.{rv}"}}}}"#
    ))
    .unwrap()
}

fn store() -> Indexer<Value> {
    let idx = Indexer::new();
    let mut more = Indexers::new();
    more.insert("by-app".to_string(), label_index_func("app"));
    idx.add_indexers(more).unwrap();
    idx
}

fn all_quiet(idx: &Indexer<Value>, written_by: u32) -> Vec<(Arc<str>, Obj)> {
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let scan = idx.quiet_objects(written_by, from, 3);
        out.extend(scan.objects);
        match scan.next {
            Some(n) => from = n,
            None => return out,
        }
    }
}

fn twins(found: &[(Arc<str>, Obj)], dict: &CompressionDictionary) -> Vec<Swap<Value>> {
    found
        .iter()
        .map(|(key, obj)| Swap {
            key: key.clone(),
            expected: obj.clone(),
            twin: obj.compressed_with(dict),
        })
        .collect()
}

#[test]
fn quiet_objects_are_those_written_by_the_epoch() {
    let idx = store();
    assert_eq!(idx.epoch(), 0);
    for i in 0..10 {
        idx.add(pod("a", &format!("p{i}"), i, "web")).unwrap();
    }
    assert_eq!(idx.advance_epoch(), 1);
    for i in 10..15 {
        idx.add(pod("a", &format!("p{i}"), i, "web")).unwrap();
    }
    // re-writing p0 in epoch 1 makes it recent again
    idx.update(pod("a", "p0", 100, "web")).unwrap();
    // writing the very same object again (a resync) does not
    idx.update(idx.get_by_key("a/p1").unwrap()).unwrap();
    let old: HashSet<String> = all_quiet(&idx, 0)
        .into_iter()
        .map(|(k, _)| k.to_string())
        .collect();
    let expected: HashSet<String> = (1..10).map(|i| format!("a/p{i}")).collect();
    assert_eq!(old, expected);
    assert_eq!(all_quiet(&idx, 1).len(), 15);
    // the scans are bounded and cover the store once
    let first = idx.quiet_objects(1, 0, 4);
    assert_eq!(first.objects.len(), 4);
    assert_eq!(first.next, Some(4));
    assert_eq!(idx.quiet_objects(1, 12, 4).next, None);
}

#[test]
fn swap_replaces_only_the_very_same_object_and_keeps_indexes() {
    let idx = Arc::new(store());
    for i in 0..6 {
        idx.add(pod(
            "a",
            &format!("p{i}"),
            i,
            if i % 2 == 0 { "web" } else { "db" },
        ))
        .unwrap();
    }
    idx.bookmark("77");
    let before_values: Vec<Value> = {
        let mut v: Vec<_> = idx.list().iter().map(|o| o.decode().unwrap()).collect();
        v.sort_by_key(|v| v["metadata"]["name"].as_str().unwrap().to_string());
        v
    };
    idx.advance_epoch();
    let found = all_quiet(&idx, 0);
    assert_eq!(found.len(), 6);
    let dict = CompressionDictionary::new(found[0].1.encoded().unwrap());
    let swaps = twins(&found, &dict);
    // meanwhile: p1 is updated (a newer object), p2 deleted
    idx.update(pod("a", "p1", 50, "db")).unwrap();
    idx.delete_by_key("a/p2");
    let keys: Vec<String> = swaps.iter().map(|s| s.key.to_string()).collect();
    let applied = idx.swap_if_same(swaps);
    for (key, done) in keys.iter().zip(&applied) {
        assert_eq!(*done, key != "a/p1" && key != "a/p2", "{key}");
    }
    // the newer p1 stayed, plain; p2 stayed deleted
    let p1 = idx.get_by_key("a/p1").unwrap();
    assert!(!p1.is_compressed());
    assert_eq!(p1.resource_version(), Some("50"));
    assert!(idx.get_by_key("a/p2").is_none());
    for k in ["a/p0", "a/p3", "a/p4", "a/p5"] {
        assert!(idx.get_by_key(k).unwrap().is_compressed(), "{k}");
    }
    // indexes and resource version untouched
    assert_eq!(idx.index_keys("by-app", "web").unwrap(), ["a/p0", "a/p4"]);
    assert_eq!(
        idx.index_keys("by-app", "db").unwrap(),
        ["a/p1", "a/p3", "a/p5"]
    );
    assert_eq!(idx.index_keys("namespace", "a").unwrap().len(), 5);
    assert_eq!(
        idx.last_store_sync_resource_version().as_deref(),
        Some("50")
    );
    // listers return the same values, compressed or not
    let lister = Lister::new(idx.clone());
    let mut after: Vec<Value> = lister
        .list(&kcache_core::Selector::everything())
        .iter()
        .map(|o| o.decode().unwrap())
        .collect();
    after.sort_by_key(|v| v["metadata"]["name"].as_str().unwrap().to_string());
    let mut expected = before_values;
    expected.retain(|v| v["metadata"]["name"] != "p2" && v["metadata"]["name"] != "p1");
    after.retain(|v| v["metadata"]["name"] != "p1");
    assert_eq!(after, expected);
    // settled objects are not found again; p1 (written in epoch 1) is
    // quiet by epoch 1
    assert!(all_quiet(&idx, 0).is_empty());
    let again = all_quiet(&idx, 1);
    assert_eq!(again.len(), 1);
    assert_eq!(&*again[0].0, "a/p1");
}

#[test]
fn a_swap_with_a_stale_expected_object_never_lands() {
    // The race the pointer check guards against: an object equal in every
    // way but not the one stored (an update that changed nothing the
    // twin shows, e.g. the same bytes re-sent) must not be replaced by a
    // twin compressed from its predecessor.
    let idx = store();
    idx.add(pod("a", "x", 1, "web")).unwrap();
    idx.advance_epoch();
    let found = all_quiet(&idx, 0);
    let dict = CompressionDictionary::new(found[0].1.encoded().unwrap());
    let swaps = twins(&found, &dict);
    let newer = pod("a", "x", 1, "web"); // equal bytes, another object
    idx.update(newer.clone()).unwrap();
    assert_eq!(idx.swap_if_same(swaps), [false]);
    assert!(idx.get_by_key("a/x").unwrap().ptr_eq(&newer));
}

#[test]
fn a_twin_of_another_key_is_refused() {
    let idx = store();
    idx.add(pod("a", "x", 1, "web")).unwrap();
    idx.add(pod("a", "y", 2, "web")).unwrap();
    let x = idx.get_by_key("a/x").unwrap();
    let y = idx.get_by_key("a/y").unwrap();
    let dict = CompressionDictionary::new(y.encoded().unwrap());
    let applied = idx.swap_if_same(vec![Swap {
        key: Arc::from("a/x"),
        expected: x.clone(),
        twin: y.compressed_with(&dict),
    }]);
    assert_eq!(applied, [false]);
    assert!(idx.get_by_key("a/x").unwrap().ptr_eq(&x));
}

#[test]
fn replace_keeps_the_epoch_of_unchanged_objects_and_compressed_ones_are_settled() {
    let idx = store();
    let a = pod("a", "a", 1, "web");
    idx.add(a.clone()).unwrap();
    idx.advance_epoch();
    let dict = CompressionDictionary::new(a.encoded().unwrap());
    let c = pod("a", "c", 3, "web").compressed_with(&dict).unwrap();
    // a relist that reuses `a`, brings a new `b` and an already
    // compressed `c`
    idx.replace(vec![a.clone(), pod("a", "b", 2, "web"), c], "9")
        .unwrap();
    let quiet: Vec<String> = all_quiet(&idx, 0)
        .into_iter()
        .map(|(k, _)| k.to_string())
        .collect();
    assert_eq!(quiet, ["a/a"]);
    let mut all: Vec<String> = all_quiet(&idx, 1)
        .into_iter()
        .map(|(k, _)| k.to_string())
        .collect();
    all.sort();
    assert_eq!(all, ["a/a", "a/b"], "a compressed object is never returned");
}
