//! The ledger and the gate on their own: informers that are never run, whose
//! freshness the tests move by hand, and a paused clock for the gate.

use std::sync::Arc;
use std::time::Duration;

use crate::queued::KeyQueue;
use bytes::Bytes;
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_core::ResourceVersion;
use kcache_informer::SharedIndexInformer;
use kcache_testing::fake::Fake;
use serde_json::json;

use super::ledger::{Freshness, WriteLedger};
use super::type_cache::TypeCache;
use super::{Admission, Consistency, StaleGate};
use crate::reconciler::Trigger;
use crate::source::Enqueuer;

fn informer(label_selector: Option<&str>) -> SharedIndexInformer<ConfigMap> {
    let fake = Fake::serving(Bytes::from_static(b"{}"));
    let mut config = kcache_informer::InformerConfig::default();
    config.watch.label_selector = label_selector.map(str::to_owned);
    SharedIndexInformer::<ConfigMap>::builder(fake.client.clone())
        .config(config)
        .build()
}

/// A ledger of a Deployment controller caching ConfigMaps.
fn ledger(config: Consistency) -> (Arc<WriteLedger>, SharedIndexInformer<ConfigMap>) {
    let ledger = Arc::new(WriteLedger::default());
    ledger.configure("test", &config, "apps", "Deployment", true);
    let cms = informer(None);
    ledger.register("", TypeCache::of(&cms, "ConfigMap", "configmaps"));
    (ledger, cms)
}

fn cm(name: &str, rv: u64, owner: Option<&str>) -> Bytes {
    let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string(),
                     "uid": format!("uid-{name}"), "labels": {"app": "web"}}});
    if let Some(o) = owner {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment",
            "name": o, "uid": "u-1", "controller": true}]);
    }
    Bytes::from(v.to_string())
}

fn stale_at(ledger: &WriteLedger, key: &str) -> Option<u64> {
    match ledger.check(key) {
        Freshness::Fresh => None,
        Freshness::Stale { wanted, .. } => {
            Some(wanted.version().and_then(|v| v.as_u64()).unwrap_or(0))
        }
    }
}

fn set(informer: &SharedIndexInformer<ConfigMap>, rv: u64) {
    informer.freshness().set(ResourceVersion::from_u64(rv));
}

#[tokio::test]
async fn a_write_in_a_reconcile_waits_for_its_types_cache() {
    let (ledger, cms) = ledger(Consistency::default());
    ledger.record(
        Some("ns/web"),
        &http::Method::POST,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 7, None),
    );
    ledger.record(
        Some("ns/web"),
        &http::Method::PATCH,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 9, None),
    );
    assert_eq!(
        stale_at(&ledger, "ns/web"),
        Some(9),
        "the newest write counts"
    );
    assert_eq!(stale_at(&ledger, "ns/other"), None);
    set(&cms, 8);
    assert_eq!(stale_at(&ledger, "ns/web"), Some(9));
    set(&cms, 9);
    assert_eq!(stale_at(&ledger, "ns/web"), None);
    assert_eq!(ledger.pending_keys(), 0, "passed writes are forgotten");
}

#[tokio::test]
async fn writes_the_caches_have_passed_are_swept_without_a_check() {
    let (ledger, cms) = ledger(Consistency::default());
    let record = |i: u64, rv: u64| {
        ledger.record(
            Some(&format!("ns/web-{i}")),
            &http::Method::PATCH,
            &format!("/api/v1/namespaces/ns/configmaps/c-{i}"),
            cm(&format!("c-{i}"), rv, None),
        )
    };
    // as many keys as a sweep waits for, none of them ever checked
    for i in 0..4_096 {
        record(i, 10 + i);
    }
    assert_eq!(ledger.pending_keys(), 4_096);
    set(&cms, 10 + 4_095);
    record(10_000, 20_000);
    assert_eq!(
        ledger.pending_keys(),
        1,
        "the next write swept everything the cache has passed"
    );
    // writes the cache lags behind: a sweep that frees nothing doubles the
    // threshold, so the next writes do not sweep again (amortized O(1))
    for i in 0..4_096 {
        record(20_000 + i, 30_000 + i);
    }
    assert_eq!(ledger.pending_keys(), 4_097, "the sweep freed nothing");
    set(&cms, 40_000);
    for i in 0..4_000 {
        record(30_000 + i, 50_000 + i);
    }
    assert_eq!(
        ledger.pending_keys(),
        8_097,
        "no sweep before twice what the last one left"
    );
    for i in 0..100 {
        record(40_000 + i, 60_000 + i);
    }
    assert_eq!(
        ledger.pending_keys(),
        4_100,
        "swept at the doubled threshold (8,192): what the cache passed is gone"
    );
}

#[tokio::test]
async fn writes_are_attributed_to_the_owner_and_to_primaries() {
    let (ledger, _cms) = ledger(Consistency::default());
    // outside a reconcile: its controlling owner
    ledger.record(
        None,
        &http::Method::POST,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 5, Some("web")),
    );
    assert_eq!(stale_at(&ledger, "ns/web"), Some(5));
    // a write to a type the controller does not cache: nothing
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "6"}});
    ledger.record(
        Some("ns/a"),
        &http::Method::POST,
        "/api/v1/namespaces/ns/secrets",
        Bytes::from(secret.to_string()),
    );
    assert_eq!(stale_at(&ledger, "ns/a"), None);
    // a Status answer: nothing
    let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Success"});
    ledger.record(
        Some("ns/b"),
        &http::Method::DELETE,
        "/api/v1/namespaces/ns/configmaps/b",
        Bytes::from(status.to_string()),
    );
    assert_eq!(stale_at(&ledger, "ns/b"), None, "a Status without details");

    // a controller whose primary is the ConfigMap: the object's own key
    let primary = Arc::new(WriteLedger::default());
    primary.configure("cms", &Consistency::default(), "", "ConfigMap", true);
    let cms = informer(None);
    primary.register("", TypeCache::of(&cms, "ConfigMap", "configmaps"));
    primary.record(
        None,
        &http::Method::PUT,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("self", 11, None),
    );
    assert_eq!(stale_at(&primary, "ns/self"), Some(11));
}

#[tokio::test]
async fn an_object_the_informer_does_not_cache_is_not_waited_for() {
    let ledger = Arc::new(WriteLedger::default());
    ledger.configure("test", &Consistency::default(), "apps", "Deployment", true);
    let filtered = informer(Some("app=api"));
    ledger.register("", TypeCache::of(&filtered, "ConfigMap", "configmaps"));
    ledger.record(
        Some("ns/web"),
        &http::Method::POST,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 7, None),
    );
    assert_eq!(
        stale_at(&ledger, "ns/web"),
        None,
        "app=web is outside app=api"
    );
}

#[tokio::test]
async fn versions_that_do_not_compare_turn_the_gate_off_once() {
    let logs = kcache_testing::logs::Logs::capture();
    let (ledger, cms) = ledger(Consistency::default());
    ledger.record(
        Some("ns/web"),
        &http::Method::POST,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 7, None),
    );
    cms.freshness().set(ResourceVersion::new("not-a-number"));
    assert_eq!(stale_at(&ledger, "ns/web"), None);
    assert!(!ledger.gate_on());
    ledger.record(
        Some("ns/web"),
        &http::Method::POST,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 8, None),
    );
    assert_eq!(stale_at(&ledger, "ns/web"), None);
    let warned: Vec<String> = logs
        .all()
        .into_iter()
        .filter(|l| l.contains("stale-cache gate is off"))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", logs.all());
    assert!(warned[0].contains("KEP-5504"), "{warned:?}");
}

#[tokio::test]
async fn own_event_versions_survive_a_relist_and_not_a_foreign_change() {
    let (ledger, cms) = ledger(Consistency {
        skip_own_events: true,
        ..Consistency::default()
    });
    let cache = TypeCache::of(&cms, "ConfigMap", "configmaps");
    ledger.register("", cache.clone());
    let path = "/api/v1/namespaces/ns/configmaps/child";
    let uid = Some("uid-child");
    ledger.record(
        Some("ns/web"),
        &http::Method::PATCH,
        path,
        cm("child", 7, None),
    );
    assert!(cache.is_own_event("ns/child", Some("7"), uid));
    assert!(
        cache.is_own_event("ns/child", Some("7"), uid),
        "a relist delivers it again"
    );
    assert!(
        !cache.is_own_event("ns/child", Some("9"), uid),
        "someone else's change"
    );
    assert!(
        !cache.is_own_event("ns/child", Some("7"), uid),
        "forgotten after it"
    );
    assert!(!cache.is_own_event("ns/other", Some("7"), uid));
    // an own delete, answered with a Status: its DELETED event, or a
    // relist's tombstone, is ours; a version from before it is not skipped
    // and does not forget it
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Success",
        "details": {"name": "child", "kind": "configmaps", "uid": "uid-child"}});
    let delete = || {
        ledger.record(
            Some("ns/web"),
            &http::Method::DELETE,
            path,
            Bytes::from(status.to_string()),
        )
    };
    delete();
    assert!(!cache.is_own_event("ns/child", Some("8"), uid));
    assert!(cache.is_own_deletion("ns/child", uid));
    delete();
    assert!(cache.is_own_deletion("ns/child", uid), "a tombstone of it");
    assert!(
        !cache.is_own_deletion("ns/child", uid),
        "forgotten after it"
    );
    delete();
    assert!(
        !cache.is_own_deletion("ns/child", Some("uid-older")),
        "another object of that name"
    );
    ledger.record(
        Some("ns/web"),
        &http::Method::PATCH,
        path,
        cm("child", 20, None),
    );
    assert!(
        !cache.is_own_deletion("ns/child", uid),
        "deleted after our update: someone else"
    );
}

#[tokio::test]
async fn a_delete_waits_until_the_cache_no_longer_holds_the_object() {
    let (ledger, cms) = ledger(Consistency::default());
    let obj = |rv: u64| kcache_core::CachedObject::from_bytes(cm("child", rv, None)).unwrap();
    cms.indexer().add(obj(9)).unwrap();
    set(&cms, 30);
    // answered with a Status, long after the version the cache holds
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Success",
        "details": {"name": "child", "kind": "configmaps", "uid": "uid-child"}});
    ledger.record(
        Some("ns/web"),
        &http::Method::DELETE,
        "/api/v1/namespaces/ns/configmaps/child",
        Bytes::from(status.to_string()),
    );
    assert_eq!(
        stale_at(&ledger, "ns/web"),
        Some(0),
        "stale: the object is still cached"
    );
    assert!(
        cms.lister().get_by_key("ns/child").is_err(),
        "and reads as gone"
    );
    cms.indexer().delete(obj(31)).unwrap();
    assert_eq!(stale_at(&ledger, "ns/web"), None);
}

#[tokio::test]
async fn nothing_is_recorded_before_the_controller_runs_or_with_everything_off() {
    let ledger = Arc::new(WriteLedger::default());
    let cms = informer(None);
    ledger.register("", TypeCache::of(&cms, "ConfigMap", "configmaps"));
    ledger.record(
        Some("ns/web"),
        &http::Method::POST,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 7, None),
    );
    assert_eq!(ledger.pending_keys(), 0);
    let (off, _cms) = self::ledger(Consistency::off());
    assert!(!off.recording());
    off.record(
        Some("ns/web"),
        &http::Method::POST,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 7, None),
    );
    assert_eq!(stale_at(&off, "ns/web"), None);
}

fn gate(ledger: &Arc<WriteLedger>, max_wait: Duration) -> (StaleGate, KeyQueue, Enqueuer) {
    let q = crate::queued::builder().build().unwrap();
    let enq = Enqueuer::new(q.clone(), -100);
    (
        StaleGate::new(ledger.clone(), enq.clone(), max_wait, None),
        q,
        enq,
    )
}

#[tokio::test(start_paused = true)]
async fn a_deferred_reconcile_is_queued_again_when_the_cache_catches_up() {
    let (ledger, cms) = ledger(Consistency::default());
    let (gate, q, _enq) = gate(&ledger, Duration::from_secs(10));
    ledger.record(
        Some("ns/web"),
        &http::Method::POST,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 7, None),
    );
    let trigger = Trigger::Updated;
    assert!(matches!(
        gate.admit("ns/web", &trigger),
        Admission::Deferred
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(q.is_empty(), "not polled: nothing until the cache moves");
    // a new event for the key meanwhile: still deferred, no second waiter
    assert!(matches!(
        gate.admit("ns/web", &Trigger::Resync),
        Admission::Deferred
    ));
    set(&cms, 7);
    kcache_testing::eventually("the key queued again", Duration::from_secs(1), || {
        !q.is_empty()
    })
    .await;
    assert_eq!(q.len(), 1);
    assert_eq!(
        q.get().await.map(|k| k.trigger),
        Some(Trigger::Updated),
        "its own trigger"
    );
    assert!(matches!(gate.admit("ns/web", &trigger), Admission::Run));
}

#[tokio::test(start_paused = true)]
async fn the_gate_gives_up_after_its_bound_and_warns() {
    let logs = kcache_testing::logs::Logs::capture();
    let (ledger, cms) = ledger(Consistency::default());
    set(&cms, 3);
    let (gate, q, _enq) = gate(&ledger, Duration::from_secs(10));
    ledger.record(
        Some("ns/web"),
        &http::Method::POST,
        "/api/v1/namespaces/ns/configmaps/child",
        cm("child", 7, None),
    );
    assert!(matches!(
        gate.admit("ns/web", &Trigger::Added),
        Admission::Deferred
    ));
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(q.is_empty());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(q.len(), 1, "queued again at the bound");
    assert!(matches!(
        gate.admit("ns/web", &Trigger::Added),
        Admission::Run
    ));
    let warned: Vec<String> = logs
        .all()
        .into_iter()
        .filter(|l| l.contains("stale cache"))
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", logs.all());
    assert!(warned[0].contains("4 writes behind"), "{warned:?}");
}
