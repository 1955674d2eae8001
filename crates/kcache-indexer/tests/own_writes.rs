//! Read your own writes: a [`Lister`] shows what this process's writes
//! returned until the watch delivers that version (or a newer one); the
//! indexer's own reads show only what the watch delivered.

use std::sync::Arc;

use kcache_core::{CachedObject, DeletedFinalStateUnknown, ResourceVersion, Selector};
use kcache_indexer::{
    IndexFunc, Indexer, Indexers, Lister, NAMESPACE_INDEX, NotFound, label_index_func,
};
use serde_json::{Value, json};

type Obj = CachedObject<Value>;

fn cm(name: &str, rv: u64, app: &str) -> Obj {
    cm_uid(name, rv, app, &format!("uid-{name}"))
}

fn cm_uid(name: &str, rv: u64, app: &str, uid: &str) -> Obj {
    let v = json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string(),
        "uid": uid, "labels": {"app": app}}});
    CachedObject::from_bytes(serde_json::to_vec(&v).unwrap()).unwrap()
}

fn store() -> Arc<Indexer<Value>> {
    let mut i = Indexers::new();
    i.insert(
        NAMESPACE_INDEX.to_owned(),
        kcache_indexer::meta_namespace_index_func(),
    );
    i.insert("app".to_owned(), label_index_func("app"));
    Arc::new(Indexer::with_indexers(
        Arc::new(kcache_core::meta_namespace_key::<Value>),
        i,
    ))
}

fn rv_of(o: &Obj) -> u64 {
    o.resource_version().unwrap().parse().unwrap()
}

fn keys(objs: &[Obj]) -> Vec<String> {
    let mut k: Vec<String> = objs.iter().map(|o| o.key().to_owned()).collect();
    k.sort();
    k
}

#[test]
fn an_update_is_read_back_until_the_watch_delivers_it() {
    let idx = store();
    let lister = Lister::new(idx.clone());
    idx.add(cm("a", 10, "web")).unwrap();
    assert!(idx.record_own_write(cm("a", 12, "web")).unwrap());
    assert_eq!(rv_of(&lister.get_by_key("ns/a").unwrap()), 12);
    assert_eq!(rv_of(&lister.namespaced("ns").get("a").unwrap()), 12);
    assert_eq!(
        rv_of(&idx.get_by_key("ns/a").unwrap()),
        10,
        "the store is the watch's"
    );
    // an older change by someone else arrives first: still ours
    idx.update(cm("a", 11, "web")).unwrap();
    assert_eq!(rv_of(&lister.get_by_key("ns/a").unwrap()), 12);
    // the watch delivers our version: the entry goes
    idx.update(cm("a", 12, "web")).unwrap();
    assert_eq!(idx.own_writes(), 0);
    assert_eq!(rv_of(&lister.get_by_key("ns/a").unwrap()), 12);
    // a newer version than ours settles it too
    assert!(idx.record_own_write(cm("a", 14, "web")).unwrap());
    idx.update(cm("a", 15, "web")).unwrap();
    assert_eq!(idx.own_writes(), 0);
    assert_eq!(rv_of(&lister.get_by_key("ns/a").unwrap()), 15);
}

#[test]
fn a_create_is_listed_and_indexed_once() {
    let idx = store();
    let lister = Lister::new(idx.clone());
    idx.add(cm("a", 10, "web")).unwrap();
    assert!(idx.record_own_write(cm("b", 20, "web")).unwrap());
    let everything = Selector::everything();
    assert_eq!(keys(&lister.list(&everything)), ["ns/a", "ns/b"]);
    assert_eq!(
        keys(&lister.namespaced("ns").list(&everything)),
        ["ns/a", "ns/b"]
    );
    assert_eq!(
        keys(&lister.by_index("app", "web").unwrap()),
        ["ns/a", "ns/b"]
    );
    assert_eq!(keys(&idx.list()), ["ns/a"], "the store is the watch's");
    idx.add(cm("b", 20, "web")).unwrap();
    assert_eq!(idx.own_writes(), 0);
    assert_eq!(
        keys(&lister.list(&everything)),
        ["ns/a", "ns/b"],
        "not twice"
    );
}

#[test]
fn an_index_moves_with_the_own_write() {
    let idx = store();
    let lister = Lister::new(idx.clone());
    idx.add(cm("a", 10, "web")).unwrap();
    idx.record_own_write(cm("a", 11, "api")).unwrap();
    assert!(lister.by_index("app", "web").unwrap().is_empty());
    assert_eq!(keys(&lister.by_index("app", "api").unwrap()), ["ns/a"]);
    assert_eq!(keys(&lister.list(&"app=api".parse().unwrap())), ["ns/a"]);
    assert_eq!(keys(&idx.by_index("app", "web").unwrap()), ["ns/a"]);
    // an index added later indexes the own write too
    let mut more = Indexers::new();
    more.insert(
        "name".to_owned(),
        IndexFunc::new(|o: &Obj| Ok(vec![o.name().to_owned()])),
    );
    idx.add_indexers(more).unwrap();
    assert_eq!(keys(&lister.by_index("name", "a").unwrap()), ["ns/a"]);
    assert_eq!(rv_of(&lister.by_index("name", "a").unwrap()[0]), 11);
}

#[test]
fn a_delete_reads_as_gone_until_the_deletion_arrives() {
    let idx = store();
    let lister = Lister::new(idx.clone());
    idx.add(cm("a", 10, "web")).unwrap();
    idx.add(cm("b", 10, "web")).unwrap();
    // the delete removed the object uid-a (the watch has not delivered its
    // versions 12 and 15, nor the deletion, yet)
    assert!(idx.record_own_delete("ns/a", "uid-a"));
    assert!(matches!(lister.get_by_key("ns/a"), Err(NotFound { .. })));
    assert_eq!(keys(&lister.list(&Selector::everything())), ["ns/b"]);
    assert_eq!(keys(&lister.by_index("app", "web").unwrap()), ["ns/b"]);
    // the updates still in flight, up to the deleted version, do not bring
    // it back
    idx.update(cm("a", 12, "web")).unwrap();
    idx.update(cm("a", 15, "web")).unwrap();
    assert!(lister.get_by_key("ns/a").is_err());
    // nor does the freshness passing them while the store still holds it
    assert_eq!(
        idx.forget_own_writes_through(&ResourceVersion::new("17")),
        0
    );
    assert!(lister.get_by_key("ns/a").is_err());
    // the deletion of an older object of that name settles nothing
    idx.delete(cm_uid("a", 16, "web", "uid-older")).unwrap();
    idx.add(cm("a", 15, "web")).unwrap();
    assert!(lister.get_by_key("ns/a").is_err());
    // the deletion (its object carries the deletion's version)
    idx.delete(cm("a", 18, "web")).unwrap();
    assert_eq!(idx.own_writes(), 0);
    assert!(lister.get_by_key("ns/a").is_err());
    // nothing to hide: an own delete of what the store does not hold
    assert!(!idx.record_own_delete("ns/zz", "uid-zz"));
}

#[test]
fn a_recreation_after_an_own_delete_shows() {
    let idx = store();
    let lister = Lister::new(idx.clone());
    idx.add(cm("a", 10, "web")).unwrap();
    assert!(idx.record_own_delete("ns/a", "uid-a"));
    // someone re-created it after our delete (the watch missed the deletion)
    idx.update(cm_uid("a", 17, "web", "uid-new")).unwrap();
    assert_eq!(idx.own_writes(), 0);
    assert_eq!(rv_of(&lister.get_by_key("ns/a").unwrap()), 17);
}

#[test]
fn the_watch_first_means_nothing_is_recorded() {
    let idx = store();
    idx.add(cm("a", 12, "web")).unwrap();
    assert!(!idx.record_own_write(cm("a", 12, "web")).unwrap());
    assert!(!idx.record_own_write(cm("a", 11, "web")).unwrap());
    // a delete of another object than the one held: re-created since
    assert!(!idx.record_own_delete("ns/a", "uid-gone"));
    assert_eq!(idx.own_writes(), 0);
    // an older own write does not replace a newer one
    assert!(idx.record_own_write(cm("a", 20, "web")).unwrap());
    assert!(!idx.record_own_write(cm("a", 18, "web")).unwrap());
    assert_eq!(
        rv_of(&Lister::new(idx.clone()).get_by_key("ns/a").unwrap()),
        20
    );
}

#[test]
fn freshness_relists_and_tombstones_settle_own_writes() {
    let idx = store();
    let lister = Lister::new(idx.clone());
    // a write to an object the informer never sees (outside its selector)
    idx.record_own_write(cm("hidden", 30, "web")).unwrap();
    idx.record_own_write(cm("later", 40, "web")).unwrap();
    assert_eq!(
        idx.forget_own_writes_through(&ResourceVersion::new("35")),
        1
    );
    assert_eq!(keys(&lister.list(&Selector::everything())), ["ns/later"]);
    // a relist older than the write keeps it; one at or past it settles it
    idx.replace(vec![cm("x", 5, "web")], "39").unwrap();
    assert_eq!(idx.own_writes(), 1);
    assert_eq!(
        keys(&lister.list(&Selector::everything())),
        ["ns/later", "ns/x"]
    );
    idx.replace(vec![cm("x", 5, "web")], "40").unwrap();
    assert_eq!(idx.own_writes(), 0);
    // a relist's tombstone: gone is gone
    idx.add(cm("t", 50, "web")).unwrap();
    idx.record_own_write(cm("t", 52, "web")).unwrap();
    idx.delete(DeletedFinalStateUnknown {
        key: "ns/t".to_owned(),
        obj: cm("t", 50, "web"),
    })
    .unwrap();
    assert_eq!(idx.own_writes(), 0);
    assert!(lister.get_by_key("ns/t").is_err());
}
