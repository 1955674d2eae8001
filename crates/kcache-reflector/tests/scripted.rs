//! The reflector's rules against a scripted fake apiserver (a `tower`
//! service behind `kube::Client::new`), on a paused tokio clock. Test names
//! point to the client-go test each one mirrors.

mod common;
use kcache_testing::fake;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{
    Call, RecordingStore, Running, cutting_managed_fields, expired, expiring_streaming_list,
    live_body, no_jitter, opts, serve, start, streaming_list, widget_reflector, wl_opts,
};
use fake::{
    End, Fake, Recorded, Reply, bookmark, cm, error_event, ev, gone, hang, list, list_json, status,
    too_large,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_reflector::{
    BackoffConfig, BadEventKind, ErrorReason, PrometheusReflectorMetricsProvider, Reflector,
    ReflectorBuilder, ReflectorError, ReflectorMetricsProvider, RequestTimeouts, WatchConfig,
};
use kube::core::PartialObjectMeta;
use parking_lot::Mutex;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

type Store = RecordingStore<ConfigMap>;

fn builder(fake: &Fake, store: &Arc<Store>) -> ReflectorBuilder<ConfigMap> {
    Reflector::<ConfigMap>::builder(fake.client.clone(), store.clone())
        .config(opts())
        .backoff(no_jitter())
}

/// [`builder`] with a fixed page size.
fn paged(page_size: u32) -> impl FnOnce(&Fake, &Arc<Store>) -> ReflectorBuilder<ConfigMap> {
    with(WatchConfig {
        page_size,
        ..opts()
    })
}

/// The resourceVersion each request asked for (`""`: none).
fn rvs(reqs: &[Recorded]) -> Vec<&str> {
    reqs.iter().map(|r| r.rv().unwrap_or("")).collect()
}

/// [`builder`] with `options` as its list options.
fn with(options: WatchConfig) -> impl FnOnce(&Fake, &Arc<Store>) -> ReflectorBuilder<ConfigMap> {
    move |fake, store| builder(fake, store).config(options)
}

fn keys(ks: &[&str]) -> Vec<String> {
    ks.iter().map(|k| format!("ns/{k}")).collect()
}

fn secs(r: &Recorded) -> f64 {
    r.at.as_secs_f64()
}

fn gaps(rs: &[Recorded]) -> Vec<u64> {
    rs.windows(2)
        .map(|w| (w[1].at - w[0].at).as_millis() as u64)
        .collect()
}

// ---------------------------------------------------------------- list + watch

/// TestReflectorListAndWatch: list at "0" (paged 500), then watches, each
/// resumed from the last event's RV after a clean close, never a relist.
#[tokio::test(start_paused = true)]
async fn list_and_watch_resumes_from_last_resource_version() {
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![cm("a", "1")]),
        (true, 0) => Reply::Stream(
            vec![ev("ADDED", cm("b", "2")), ev("MODIFIED", cm("a", "3"))],
            End::Close,
        ),
        (true, 1) => Reply::Stream(vec![ev("DELETED", cm("b", "4"))], End::Close),
        _ => hang(),
    });
    let calls = store.wait_calls(4).await;
    assert_eq!(
        calls,
        vec![
            Call::Replace(keys(&["a"]), "1".into()),
            Call::Add("ns/b".into(), "2".into()),
            Call::Update("ns/a".into(), "3".into()),
            Call::Delete("ns/b".into(), "4".into()),
        ]
    );
    let reqs = fake.wait_requests(4).await;
    let lists = fake.lists();
    assert_eq!(lists.len(), 1);
    assert_eq!(lists[0].path, "/api/v1/namespaces/ns/configmaps");
    assert_eq!(lists[0].rv(), Some("0"));
    assert_eq!(lists[0].q("limit"), Some("500"));
    assert_eq!(lists[0].q("continue"), None);
    let watches = fake.watches();
    let rvs: Vec<_> = watches.iter().map(|w| w.rv().unwrap().to_owned()).collect();
    assert_eq!(rvs, ["1", "3", "4"]);
    for w in &watches {
        assert_eq!(w.q("allowWatchBookmarks"), Some("true"));
        assert_eq!(w.q("sendInitialEvents"), None);
        assert_eq!(w.q("resourceVersionMatch"), None);
        assert_eq!(w.header("accept-encoding"), Some("identity"));
        let t: u32 = w.q("timeoutSeconds").unwrap().parse().unwrap();
        assert!((300..600).contains(&t), "timeout {t}");
    }
    assert_eq!(reqs.len(), 4);
    assert_eq!(run.reflector.last_sync_resource_version(), "4");
    assert!(run.reflector.has_synced());
    assert!(run.seen().is_empty(), "{:?}", run.seen());
    run.stop().await;
}

/// A JSON list body arriving in small chunks is read as it arrives: the
/// same objects as from one chunk; a syntax error inside an item (found
/// while the body arrives) fails the page, and the relist after a backoff
/// step succeeds.
#[tokio::test(start_paused = true)]
async fn json_list_read_in_small_chunks() {
    let chunks = |body: String| -> Vec<Bytes> {
        body.as_bytes()
            .chunks(7)
            .map(Bytes::copy_from_slice)
            .collect()
    };
    let good = list_json("5", "", vec![cm("a", "1"), cm("b", "2"), cm("c", "5")]);
    let bad = good.replace(r#""name":"b""#, r#""name":b""#);
    let (fake, store, run) = serve(builder, move |r| match (r.is_watch(), r.nth) {
        (false, 0) => Reply::Chunks(chunks(bad.clone()), End::Close),
        (false, 1) => Reply::Chunks(chunks(good.clone()), End::Close),
        _ => hang(),
    });
    store
        .expect_calls(&[Call::Replace(keys(&["a", "b", "c"]), "5".into())])
        .await;
    assert_eq!(run.reasons(), [ErrorReason::InvalidList]);
    let a = store.object("ns/a").unwrap();
    assert_eq!(a.bytes().as_ref(), cm("a", "1").to_string().as_bytes());
    assert_eq!(gaps(&fake.lists()), [800], "one backoff step");
    run.stop().await;
}

/// TestReflectorListAndWatchWithErrors: a failed list is retried after a
/// backoff at "0" (never synced); a failing watch leads to a relist at the
/// last synced RV, unpaged (watch cache).
#[tokio::test(start_paused = true)]
async fn list_and_watch_with_errors() {
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => status(500, "InternalError", "etcd is sad"),
        (false, 1) => list("1", "", vec![cm("a", "1")]),
        (true, 0) => Reply::Stream(vec![ev("ADDED", cm("b", "2"))], End::Error),
        (false, 2) => list("5", "", vec![cm("a", "1"), cm("b", "2"), cm("c", "5")]),
        _ => hang(),
    });
    store.wait_calls(3).await;
    fake.wait_requests(5).await;
    let lists = fake.lists();
    assert_eq!(lists[0].rv(), Some("0"));
    assert_eq!(lists[1].rv(), Some("0"));
    assert_eq!(lists[1].q("limit"), Some("500"));
    assert_eq!(lists[2].rv(), Some("2"));
    assert_eq!(lists[2].q("limit"), None, "a list at an RV is unpaged");
    assert_eq!(
        store.calls(),
        vec![
            Call::Replace(keys(&["a"]), "1".into()),
            Call::Add("ns/b".into(), "2".into()),
            Call::Replace(keys(&["a", "b", "c"]), "5".into()),
        ]
    );
    assert_eq!(fake.watches()[1].rv(), Some("5"));
    assert_eq!(run.reasons(), [ErrorReason::Api, ErrorReason::Body]);
    assert!(run.seen()[0].1.contains("etcd is sad"));
    run.stop().await;
}

/// TestReflectorListAndWatchInitConnBackoff / TestNewReflectorWithCustomBackoff:
/// failed lists are spaced by 800 ms doubling, capped, then jittered.
#[tokio::test(start_paused = true)]
async fn init_conn_backoff_doubles() {
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, n) if n < 8 => Reply::ConnRefused,
        (false, _) => list("1", "", vec![]),
        _ => hang(),
    });
    store.wait_calls(1).await;
    let lists = fake.lists();
    assert_eq!(lists.len(), 9);
    assert_eq!(
        gaps(&lists),
        [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]
    );
    assert!(run.reasons().iter().all(|r| *r == ErrorReason::Transport));
    assert_eq!(run.reasons().len(), 8);
    run.stop().await;

    // custom backoff (client-go: 10ms x2 cap 100ms), with jitter [d, 2d)
    let (fake, store, run) = serve(
        |f, s| {
            builder(f, s).backoff(BackoffConfig {
                initial: Duration::from_millis(10),
                cap: Duration::from_millis(100),
                ..Default::default()
            })
        },
        |r| match (r.is_watch(), r.nth) {
            (false, n) if n < 5 => Reply::ConnRefused,
            (false, _) => list("1", "", vec![]),
            _ => hang(),
        },
    );
    store.wait_calls(1).await;
    let g = gaps(&fake.lists());
    for (gap, d) in g.iter().zip([10u64, 20, 40, 80, 100]) {
        // [d, 2d), plus the timer's 1 ms rounding
        assert!(*gap >= d && *gap <= 2 * d, "gap {gap} for {d}: {g:?}");
    }
    run.stop().await;
}

/// The backoff resets to its first step after 2 minutes without backoff.
#[tokio::test(start_paused = true)]
async fn backoff_resets_after_two_healthy_minutes() {
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) | (false, 1) | (false, 2) => Reply::ConnRefused,
        (false, _) => list("1", "", vec![]),
        // a healthy watch for 3 minutes, then the stream breaks
        (true, 0) => Reply::Stream(vec![], End::Hang),
        _ => hang(),
    });
    store.wait_calls(1).await;
    assert_eq!(gaps(&fake.lists()), [800, 1600, 3200]);
    run.stop().await;

    // the same, but the second failure comes 3 minutes after the first
    let (tx, rx) = live_body();
    let (fake, store, run) = serve(builder, move |r| match (r.is_watch(), r.nth) {
        (false, 0) => Reply::ConnRefused,
        (false, 1) => list("1", "", vec![]),
        (true, 0) => rx.take(),
        (true, 1) => status(500, "InternalError", "x"),
        (false, 2) => list("2", "", vec![]),
        _ => hang(),
    });
    store.wait_calls(1).await;
    tokio::time::sleep(Duration::from_secs(180)).await;
    tx.send(Bytes::from(error_event(500, "InternalError") + "\n"))
        .unwrap();
    store.wait_calls(2).await;
    let lists = fake.lists();
    // the relist after the error waited the first step again: 800 ms
    let last_watch = fake.watches()[0].at;
    let relist_gap = lists[2].at - last_watch - Duration::from_secs(180);
    assert!(relist_gap <= Duration::from_millis(800), "{relist_gap:?}");
    drop(tx);
    run.stop().await;
}

/// TestBackoffOnTooManyRequests / TestNoRelistOnTooManyRequests: 429 (and
/// connection refused) when opening a watch backs off and watches again,
/// without relisting.
#[tokio::test(start_paused = true)]
async fn too_many_requests_on_watch_backs_off_without_relist() {
    let (fake, _store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![cm("a", "1")]),
        (true, 0) | (true, 1) | (true, 3) => status(429, "TooManyRequests", "slow down"),
        (true, 2) | (true, 4) => Reply::ConnRefused,
        (true, 5) => Reply::Stream(
            vec![
                ev("ADDED", cm("b", "2")),
                error_event(429, "TooManyRequests"),
            ],
            End::Close,
        ),
        _ => hang(),
    });
    fake.wait_requests(8).await;
    assert_eq!(fake.lists().len(), 1, "no relist on 429");
    let watches = fake.watches();
    assert_eq!(gaps(&watches), [800, 1600, 3200, 6400, 12800, 25600]);
    let rvs: Vec<_> = watches.iter().map(|w| w.rv().unwrap()).collect();
    assert_eq!(rvs, ["1", "1", "1", "1", "1", "1", "2"]);
    let (t, c) = (ErrorReason::TooManyRequests, ErrorReason::Transport);
    assert_eq!(run.reasons(), [t, t, c, t, c, t]);
    run.stop().await;
}

/// TestRetryInternalError: with a retry budget, an InternalError ends the
/// watch but it is re-opened without a relist; without one, it relists.
#[tokio::test(start_paused = true)]
async fn internal_error_retry_budget() {
    for budget in [Duration::ZERO, Duration::from_secs(60)] {
        let (fake, _store, run) = serve(
            with(WatchConfig {
                timeouts: RequestTimeouts {
                    max_internal_error_retry_duration: budget,
                    ..Default::default()
                },
                ..opts()
            }),
            |r| match (r.is_watch(), r.nth) {
                (false, _) => list("1", "", vec![]),
                (true, 0) => Reply::Stream(
                    vec![ev("ADDED", cm("a", "2")), error_event(500, "InternalError")],
                    End::Close,
                ),
                _ => hang(),
            },
        );
        fake.wait_requests(if budget.is_zero() { 4 } else { 3 })
            .await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let lists = fake.lists().len();
        if budget.is_zero() {
            assert_eq!(lists, 2);
            assert_eq!(fake.lists()[1].rv(), Some("2"));
        } else {
            assert_eq!(lists, 1);
            let watches = fake.watches();
            assert_eq!(watches[1].rv(), Some("2"));
            assert_eq!(
                watches[1].at - watches[0].at,
                Duration::from_millis(800),
                "re-watched after a backoff step, not at once"
            );
        }
        run.stop().await;
    }
}

// ---------------------------------------------------------------- paging and RVs

/// TestReflectorWatchListPageSize: a fixed page size, continue tokens, the
/// RV only on the first page.
#[tokio::test(start_paused = true)]
async fn page_size_and_continue() {
    let (fake, store, run) = serve(paged(4), |r| match (r.is_watch(), r.nth) {
        (false, 0) => list(
            "10",
            "c1",
            (1..=4).map(|i| cm(&format!("o{i}"), "1")).collect(),
        ),
        (false, 1) => list(
            "10",
            "c2",
            (5..=8).map(|i| cm(&format!("o{i}"), "1")).collect(),
        ),
        (false, 2) => list(
            "10",
            "",
            (9..=10).map(|i| cm(&format!("o{i:02}"), "1")).collect(),
        ),
        _ => hang(),
    });
    let calls = store.wait_calls(1).await;
    let lists = fake.lists();
    assert_eq!(lists.len(), 3);
    for l in &lists {
        assert_eq!(l.q("limit"), Some("4"));
    }
    assert_eq!((lists[0].rv(), lists[0].q("continue")), (Some("0"), None));
    assert_eq!((lists[1].rv(), lists[1].q("continue")), (None, Some("c1")));
    assert_eq!((lists[2].rv(), lists[2].q("continue")), (None, Some("c2")));
    match &calls[0] {
        Call::Replace(k, rv) => {
            assert_eq!(k.len(), 10);
            assert_eq!(rv, "10");
        }
        c => panic!("{c:?}"),
    }
    assert_eq!(fake.wait_requests(4).await[3].rv(), Some("10"));
    run.stop().await;
}

/// TestReflectorNotPaginatingNotConsistentReads and
/// TestReflectorPaginatingNonConsistentReadsIfWatchCacheDisabled.
#[tokio::test(start_paused = true)]
async fn relist_paging_depends_on_the_first_list() {
    for paged_first in [false, true] {
        let (fake, store, run) = serve(builder, move |r| match (r.is_watch(), r.nth) {
            (false, 0) if paged_first => list("10", "c1", vec![cm("a", "1")]),
            (false, 0) => list("10", "", vec![cm("a", "1")]),
            (false, 1) if paged_first => list("10", "", vec![cm("b", "1")]),
            (true, 0) => gone(),
            (false, _) => list("11", "", vec![]),
            _ => hang(),
        });
        store.wait_calls(2).await;
        let relist = fake.lists().last().unwrap().clone();
        assert_eq!(relist.rv(), Some("10"));
        if paged_first {
            // the watch cache is off: keep paging
            assert_eq!(relist.q("limit"), Some("500"));
        } else {
            assert_eq!(relist.q("limit"), None);
        }
        run.stop().await;
    }
}

/// TestReflectorResyncWithResourceVersion: after a 410 during the watch,
/// the relist is at the last synced RV.
#[tokio::test(start_paused = true)]
async fn relist_after_gone_uses_last_synced_rv() {
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("10", "", vec![cm("a", "10")]),
        (true, 0) => expired(),
        (false, 1) => list("11", "", vec![cm("a", "10"), cm("b", "11")]),
        _ => hang(),
    });
    store.wait_calls(2).await;
    let rvs: Vec<_> = fake
        .lists()
        .iter()
        .map(|l| l.rv().unwrap().to_owned())
        .collect();
    assert_eq!(rvs, ["0", "10"]);
    assert_eq!(run.reasons(), [ErrorReason::Expired]);
    assert_eq!(fake.wait_requests(4).await[3].rv(), Some("11"));
    run.stop().await;
}

/// Beyond client-go: with a page size, the relist at the last synced RV
/// after a 410 (client-go's rule, kept: see above and
/// `full_list_if_continue_expired`) is an Exact list answering the same old
/// version, and the watch from it expires again (after an apiserver
/// restart: until etcd compacts that version). A second expiry at the same
/// synced version relists from the newest state.
#[tokio::test(start_paused = true)]
async fn paged_watch_expiring_twice_at_one_version_lists_from_the_newest_state() {
    let (fake, store, run) = serve(paged(2), |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("10", "", vec![cm("a", "10")]),
        (true, 0 | 1) => expired(),
        // the Exact list at 10: the same old state
        (false, 1) => list("10", "", vec![cm("a", "10")]),
        (false, 2) => list("30", "", vec![cm("a", "10"), cm("b", "30")]),
        _ => hang(),
    });
    store.wait_calls(3).await;
    let lists = fake.lists();
    let rvs: Vec<_> = lists.iter().map(|l| l.rv()).collect();
    assert_eq!(rvs, [Some("0"), Some("10"), None]);
    assert_eq!(lists[2].q("limit"), Some("2"));
    assert_eq!(run.reasons(), [ErrorReason::Expired, ErrorReason::Expired]);
    assert_eq!(fake.wait_requests(6).await[5].rv(), Some("30"));
    run.stop().await;
}

/// A ConfigMap with a uid (the fake's `cm` has none).
fn cmu(name: &str, uid: &str, rv: &str) -> serde_json::Value {
    let mut v = cm(name, rv);
    v["metadata"]["uid"] = json!(uid);
    v
}

/// The store's objects under `ks` (in the namespace "ns").
fn held(store: &Store, ks: &[&str]) -> Vec<kcache_core::CachedObject<ConfigMap>> {
    ks.iter()
        .map(|k| store.object(&format!("ns/{k}")).expect("held"))
        .collect()
}

/// For each pair, whether `after` is the very object `before` was (the
/// store kept it), not an equal copy.
fn same_objects(
    before: &[kcache_core::CachedObject<ConfigMap>],
    after: &[kcache_core::CachedObject<ConfigMap>],
) -> Vec<bool> {
    before.iter().zip(after).map(|(b, a)| b.ptr_eq(a)).collect()
}

/// A relist (here after a 410, paged) hands `replace` the store's own
/// object for each unchanged item (same uid and resourceVersion), so the
/// freshly decoded copy is dropped at once and the cache is not held
/// twice during a relist; an item with a new resourceVersion, a deleted and
/// re-created one (new uid, even with the same resourceVersion) and one
/// without a uid are the fresh objects.
#[tokio::test(start_paused = true)]
async fn relist_reuses_the_stores_objects_for_unchanged_items() {
    let (fake, store, run) = serve(paged(2), |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("10", "p2", vec![cmu("a", "ua", "1"), cmu("b", "ub", "2")]),
        (false, 1) => list(
            "10",
            "",
            vec![cmu("c", "uc", "3"), cmu("d", "ud", "4"), cm("e", "5")],
        ),
        (true, 0) => gone(),
        (false, 2) => list("20", "p2", vec![cmu("a", "ua", "1"), cmu("b", "ub", "12")]),
        (false, 3) => list(
            "20",
            "",
            vec![cmu("c", "uc2", "3"), cmu("d", "ud", "4"), cm("e", "5")],
        ),
        _ => hang(),
    });
    store.wait_calls(1).await;
    let all = ["a", "b", "c", "d", "e"];
    let before = held(&store, &all);
    let calls = store.wait_calls(2).await;
    assert_eq!(calls[1], Call::Replace(keys(&all), "20".into()));
    assert_eq!(fake.lists().len(), 4, "two pages, twice");
    let after = held(&store, &all);
    // a, d unchanged; b new RV; c re-created; e has no uid
    assert_eq!(
        same_objects(&before, &after),
        [true, false, false, true, false]
    );
    assert_eq!(after[1].resource_version(), Some("12"));
    assert_eq!(after[2].uid(), Some("uc2"));
    assert_eq!(run.reasons(), [ErrorReason::Expired]);
    run.stop().await;
}

/// TestReflectorExpiredExactResourceVersion: the relist at the last RV is
/// expired too: list again at once at "" (consistent read, paged).
#[tokio::test(start_paused = true)]
async fn expired_exact_resource_version_lists_at_empty_rv() {
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("10", "", vec![cm("a", "10")]),
        (true, 0) => expired(),
        (false, 1) => gone(),
        (false, 2) => list("20", "", vec![cm("b", "20")]),
        _ => hang(),
    });
    store.wait_calls(2).await;
    let lists = fake.lists();
    let rvs: Vec<_> = lists.iter().map(|l| l.rv()).collect();
    assert_eq!(rvs, [Some("0"), Some("10"), None]);
    assert_eq!(lists[2].q("limit"), Some("500"));
    assert_eq!(lists[2].at, lists[1].at, "retried at once");
    run.stop().await;
}

/// TestReflectorFullListIfExpired: an expired continue token falls back to
/// one full list at the requested RV.
#[tokio::test(start_paused = true)]
async fn full_list_if_continue_expired() {
    let (fake, store, run) = serve(paged(1), |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("10", "", vec![cm("a", "1")]),
        (true, 0) => gone(),
        (false, 1) => list("10", "c1", vec![cm("a", "1")]),
        (false, 2) => gone(),
        (false, 3) => list("12", "", vec![cm("a", "1"), cm("b", "12")]),
        _ => hang(),
    });
    store.wait_calls(2).await;
    let lists = fake.lists();
    assert_eq!(lists.len(), 4);
    assert_eq!(
        (lists[1].rv(), lists[1].q("limit")),
        (Some("10"), Some("1"))
    );
    assert_eq!(lists[2].q("continue"), Some("c1"));
    assert_eq!(
        (lists[3].rv(), lists[3].q("limit"), lists[3].q("continue")),
        (Some("10"), None, None)
    );
    assert_eq!(
        store.calls()[1],
        Call::Replace(keys(&["a", "b"]), "12".into())
    );
    run.stop().await;
}

/// TestReflectorFullListIfTooLarge: "too large resource version" also
/// makes the reflector list at "".
#[tokio::test(start_paused = true)]
async fn too_large_resource_version_lists_at_empty_rv() {
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => too_large(),
        (false, 1) => list("10", "", vec![cm("a", "1")]),
        (true, 0) => gone(),
        (false, 2) => too_large(),
        (false, 3) => list("20", "", vec![]),
        _ => hang(),
    });
    store.wait_calls(2).await;
    let lists = fake.lists();
    let rvs: Vec<_> = lists.iter().map(|l| l.rv()).collect();
    assert_eq!(rvs, [Some("0"), None, Some("10"), None]);
    // the flag is cleared by the good list: the next relist is at the RV again
    run.stop().await;
}

/// TestWatchTimeout: timeoutSeconds in [min, 2*min), min >= 5 minutes.
#[tokio::test(start_paused = true)]
async fn watch_timeout_is_randomized() {
    for (min, lo, hi) in [
        (None, 300, 600),
        (Some(600), 600, 1200),
        (Some(60), 300, 600),
    ] {
        let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
            (false, _) => list("1", "", vec![]),
            (true, n) if n < 40 => {
                Reply::Stream(vec![bookmark(&format!("{}", n + 2), false)], End::Close)
            }
            _ => hang(),
        });
        let store = Arc::new(Store::default());
        let mut b = builder(&fake, &store);
        if let Some(m) = min {
            b = b.config(WatchConfig {
                timeouts: RequestTimeouts {
                    min_watch_timeout: Duration::from_secs(m),
                    ..Default::default()
                },
                ..opts()
            });
        }
        let run = start(b);
        fake.wait_requests(41).await;
        let ts: Vec<u32> = fake
            .watches()
            .iter()
            .map(|w| w.q("timeoutSeconds").unwrap().parse().unwrap())
            .collect();
        assert!(ts.iter().all(|t| (lo..hi).contains(t)), "{ts:?}");
        assert!(ts.iter().any(|t| *t != ts[0]), "randomized: {ts:?}");
        run.stop().await;
    }
}

// ---------------------------------------------------------------- events

/// A watch closing in under a second with no events is an error: relist
/// after a backoff. A quiet watch that closes later is re-opened without a
/// relist.
#[tokio::test(start_paused = true)]
async fn very_short_watch_relists_but_a_quiet_close_does_not() {
    let (tx, rx) = live_body();
    let (fake, _store, run) = serve(builder, move |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![]),
        (true, 0) => Reply::Stream(vec![], End::Close),
        (false, 1) => list("1", "", vec![]),
        (true, 1) => rx.take(),
        _ => hang(),
    });
    fake.wait_requests(4).await;
    assert_eq!(run.reasons(), [ErrorReason::VeryShortWatch]);
    let reqs = fake.requests();
    assert!(!reqs[2].is_watch());
    assert_eq!(reqs[2].at - reqs[1].at, Duration::from_millis(800));
    // the second watch stays quiet for 2 s, then the server closes it
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(tx);
    let reqs = fake.wait_requests(5).await;
    assert!(
        reqs[4].is_watch(),
        "a clean close re-watches without relisting"
    );
    assert_eq!(reqs[4].rv(), Some("1"));
    assert_eq!(run.reasons(), [ErrorReason::VeryShortWatch]);
    run.stop().await;
}

/// A stalled watch (no byte, no FIN) is abandoned after the idle limit and
/// re-opened from the last RV after a backoff step, without a relist; by
/// default the limit is the requested server timeout plus a margin.
#[tokio::test(start_paused = true)]
async fn stalled_watch_is_abandoned_after_the_idle_limit() {
    let (fake, _store, run) = serve(
        with(WatchConfig {
            timeouts: RequestTimeouts {
                watch_idle_timeout: Some(Duration::from_secs(20)),
                ..Default::default()
            },
            ..opts()
        }),
        |r| match (r.is_watch(), r.nth) {
            (false, 0) => list("1", "", vec![]),
            (true, 0) => Reply::Stream(vec![bookmark("5", false)], End::Hang),
            _ => hang(),
        },
    );
    let reqs = fake.wait_requests(3).await;
    assert!(
        reqs[2].is_watch(),
        "a stalled watch re-watches without relisting"
    );
    assert_eq!(reqs[2].rv(), Some("5"));
    assert_eq!(
        reqs[2].at - reqs[1].at,
        Duration::from_millis(20_800),
        "the idle limit, then a backoff step"
    );
    assert_eq!(run.reasons(), [ErrorReason::WatchStalled]);
    run.stop().await;

    // default: timeoutSeconds + 30 s
    let (fake, _store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![]),
        _ => hang(),
    });
    let reqs = fake.wait_requests(3).await;
    let timeout: u64 = reqs[1].q("timeoutSeconds").unwrap().parse().unwrap();
    assert_eq!(
        reqs[2].at - reqs[1].at,
        Duration::from_millis((timeout + 30) * 1000 + 800)
    );
    assert_eq!(run.reasons(), [ErrorReason::WatchStalled]);
    run.stop().await;
}

/// Bookmarks only move the RV (and reach `store.bookmark`).
#[tokio::test(start_paused = true)]
async fn bookmarks_move_the_resource_version_only() {
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![]),
        (true, 0) => Reply::Stream(vec![bookmark("7", false), bookmark("9", true)], End::Close),
        _ => hang(),
    });
    let reqs = fake.wait_requests(3).await;
    assert_eq!(reqs[2].rv(), Some("9"));
    assert_eq!(
        store.calls(),
        [
            Call::Replace(vec![], "1".into()),
            Call::Bookmark("7".into()),
            Call::Bookmark("9".into())
        ]
    );
    run.stop().await;
}

/// TestReflectorResourceVersionUpdate: every event records its RV.
#[tokio::test(start_paused = true)]
async fn every_event_records_its_resource_version() {
    let (tx, rx) = live_body();
    let (_fake, store, run) = serve(builder, move |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("10", "", vec![]),
        (true, 0) => rx.take(),
        _ => hang(),
    });
    store.wait_calls(1).await;
    assert_eq!(run.reflector.last_sync_resource_version(), "10");
    let events = [
        ev("ADDED", cm("a", "20")),
        ev("MODIFIED", cm("a", "30")),
        ev("DELETED", cm("a", "40")),
    ];
    for (i, (e, rv)) in events.iter().zip(["20", "30", "40"]).enumerate() {
        tx.send(Bytes::from(format!("{e}\n"))).unwrap();
        store.wait_calls(i + 2).await;
        assert_eq!(run.reflector.last_sync_resource_version(), rv);
    }
    run.stop().await;
}

/// TestReflectorResync: the store's `resync` runs every period while
/// watching.
#[tokio::test(start_paused = true)]
async fn resync_period_calls_store_resync() {
    let (_fake, store, run) = serve(
        |f, s| builder(f, s).resync_period(Duration::from_secs(30)),
        |r| match (r.is_watch(), r.nth) {
            (false, 0) => list("1", "", vec![]),
            _ => hang(),
        },
    );
    let t0 = tokio::time::Instant::now();
    let calls = store.wait_calls(4).await;
    assert_eq!(calls[1..], [Call::Resync, Call::Resync, Call::Resync]);
    assert_eq!(t0.elapsed(), Duration::from_secs(90));
    run.stop().await;
    // no period: no resync
    let store = Arc::new(Store::default());
    let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![]),
        _ => hang(),
    });
    let run = start(builder(&fake, &store));
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(store.calls().len(), 1);
    run.stop().await;
}

/// Bad input is reported (handler + counter) and skipped; the watch goes on.
#[tokio::test(start_paused = true)]
async fn bad_events_are_reported_and_skipped() {
    let (registry, metrics) = prometheus();
    let (_fake, store, run) = serve(
        |f, s| builder(f, s).name("cms").metrics(metrics),
        |r| {
            match (r.is_watch(), r.nth) {
        (false, 0) => list(
            "1",
            "",
            vec![cm("a", "1"), json!({"kind":"ConfigMap","metadata":{}})],
        ),
        (true, 0) => Reply::Stream(
            vec![
                "this is not json".into(),
                ev(
                    "ADDED",
                    json!({"kind":"ConfigMap","metadata":{"namespace":"ns"}}),
                ),
                ev(
                    "ADDED",
                    json!({"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","namespace":"ns"}}),
                ),
                ev("SOMETHING", cm("x", "3")),
                "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                    .into(),
                ev("ADDED", cm("good", "5")),
            ],
            End::Hang,
        ),
        _ => hang(),
    }
        },
    );
    let calls = store.wait_calls(2).await;
    assert_eq!(calls[0], Call::Replace(keys(&["a"]), "1".into()));
    assert_eq!(calls[1], Call::Add("ns/good".into(), "5".into()));
    let seen = run.seen();
    assert_eq!(seen.len(), 6, "{seen:#?}");
    assert!(seen.iter().all(|(r, _)| *r == ErrorReason::BadEvent));
    assert!(seen[1].1.contains("undecodable"), "{}", seen[1].1);
    assert!(seen[3].1.contains("unexpected kind"), "{}", seen[3].1);
    assert!(seen[4].1.contains("unknown event type"), "{}", seen[4].1);
    assert_eq!(run.reflector.last_sync_resource_version(), "5");
    let text = metrics_text(&registry);
    assert!(
        text.contains("reflector_errors_total{name=\"cms\",reason=\"bad_event\"} 6"),
        "{text}"
    );
    assert!(
        text.contains("reflector_watch_events_total{name=\"cms\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("reflector_lists_total{name=\"cms\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("reflector_watches_total{name=\"cms\"} 1"),
        "{text}"
    );
    // the time of the last sync, as Unix time (no float resourceVersion)
    let last_sync: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("reflector_last_sync_timestamp_seconds{name=\"cms\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no last sync timestamp: {text}"));
    assert!(last_sync > 1.7e9, "{last_sync}");
    assert!(!text.contains("last_resource_version"), "{text}");
    run.stop().await;
}

/// BadEvent kinds are typed.
#[tokio::test(start_paused = true)]
async fn bad_event_errors_are_typed() {
    let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![]),
        (true, 0) => Reply::Stream(vec!["][".into()], End::Hang),
        _ => hang(),
    });
    let store = Arc::new(Store::default());
    let kinds: Arc<Mutex<Vec<BadEventKind>>> = Arc::default();
    let k2 = kinds.clone();
    let r = Arc::new(
        builder(&fake, &store)
            .watch_error_handler(move |e| {
                if let ReflectorError::BadEvent { source, .. } = e {
                    k2.lock().push(source.kind);
                }
            })
            .build(),
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (r, c) = (r.clone(), cancel.clone());
        async move { r.run(c).await }
    });
    fake.wait_requests(2).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(*kinds.lock(), [BadEventKind::Undecodable]);
    cancel.cancel();
    task.await.unwrap();
}

/// Events split across chunks, several per chunk, and a very large object.
#[tokio::test(start_paused = true)]
async fn framing_across_chunks_and_large_objects() {
    let big_value = "x".repeat(5 << 20);
    let mut big = cm("big", "4");
    big["data"]["k"] = json!(big_value);
    let mut stream = String::new();
    for e in [
        ev("ADDED", cm("a", "2")),
        ev("ADDED", cm("b", "3")),
        ev("ADDED", big),
    ] {
        stream.push_str(&e);
        stream.push('\n');
    }
    let bytes = stream.into_bytes();
    // first chunk: the first two events whole plus 3 bytes; then odd sizes
    let first_two = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(1)
        .unwrap()
        .0
        + 4;
    let mut chunks = vec![Bytes::copy_from_slice(&bytes[..first_two])];
    chunks.extend(
        bytes[first_two..]
            .chunks(16_381)
            .map(Bytes::copy_from_slice),
    );
    let chunks = Mutex::new(Some(chunks));
    let (_fake, store, run) = serve(builder, move |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![]),
        (true, 0) => Reply::Chunks(chunks.lock().take().unwrap(), End::Hang),
        _ => hang(),
    });
    let calls = store.wait_calls(4).await;
    assert_eq!(calls[3], Call::Add("ns/big".into(), "4".into()));
    assert!(store.object("ns/big").unwrap().bytes().len() > 5 << 20);
    assert!(run.seen().is_empty());
    run.stop().await;
}

/// `ObjectOptions` reach the cached objects (managedFields stripped).
#[tokio::test(start_paused = true)]
async fn object_options_pass_through() {
    let (_fake, store, run) = serve(with(cutting_managed_fields(opts())), |r| {
        match (r.is_watch(), r.nth) {
            (false, 0) => list("1", "", vec![cm("a", "1")]),
            (true, 0) => Reply::Stream(vec![ev("ADDED", cm("b", "2"))], End::Hang),
            _ => hang(),
        }
    });
    store.wait_calls(2).await;
    for k in ["ns/a", "ns/b"] {
        let o = store.object(k).unwrap();
        assert!(!String::from_utf8_lossy(o.bytes()).contains("managedFields"));
        let typed: ConfigMap = o.decode().unwrap();
        assert_eq!(typed.data.unwrap()["k"], "v");
    }
    run.stop().await;
}

/// Store errors are reported, not fatal; a failed `replace` relists.
#[tokio::test(start_paused = true)]
async fn store_errors_are_reported() {
    let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
        (false, _) => list("1", "", vec![cm("a", "1")]),
        (true, 0) => Reply::Stream(
            vec![ev("ADDED", cm("b", "2")), ev("MODIFIED", cm("a", "3"))],
            End::Hang,
        ),
        _ => hang(),
    });
    let store = Arc::new(Store::default());
    store
        .fail_replace
        .store(1, std::sync::atomic::Ordering::SeqCst);
    store
        .fail_adds
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let run = start(builder(&fake, &store));
    store
        .expect_calls(&[
            Call::Replace(keys(&["a"]), "1".into()),
            Call::Update("ns/a".into(), "3".into()),
        ])
        .await;
    assert_eq!(fake.lists().len(), 2);
    assert_eq!(fake.lists()[1].rv(), Some("0"), "never synced");
    assert_eq!(run.reasons(), [ErrorReason::Store, ErrorReason::Store]);
    assert_eq!(run.reflector.last_sync_resource_version(), "3");
    run.stop().await;
}

/// A forbidden list is reported every time and retried with a growing
/// backoff: no hot loop.
#[tokio::test(start_paused = true)]
async fn forbidden_is_reported_and_backed_off() {
    let fake = Fake::new(|_| {
        status(
            403,
            "Forbidden",
            "configmaps is forbidden: User \"x\" cannot list",
        )
    });
    let store = Arc::new(Store::default());
    // streaming list on: each attempt is a streaming list then a list
    let run = start(
        Reflector::<ConfigMap>::builder(fake.client.clone(), store.clone()).config(wl_opts()),
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    let lists = fake.lists();
    assert!(
        (5..=7).contains(&lists.len()),
        "{} lists in 60 s",
        lists.len()
    );
    assert_eq!(fake.watches().len(), lists.len());
    let seen = run.seen();
    assert_eq!(seen.len(), lists.len());
    assert!(
        seen.iter()
            .all(|(r, m)| *r == ErrorReason::Forbidden && m.contains("RBAC"))
    );
    let g = gaps(&lists);
    for w in g.windows(2) {
        assert!(w[1] as f64 >= w[0] as f64 * 0.5, "{g:?}");
    }
    run.stop().await;
}

/// Cancellation ends `run` promptly and drops the open watch; `run_until`
/// stops on its future.
#[tokio::test(start_paused = true)]
async fn cancellation_leaves_nothing_behind() {
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![]),
        _ => hang(),
    });
    fake.wait_requests(2).await;
    assert_eq!(
        fake.live_streams.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    run.stop().await;
    tokio::task::yield_now().await;
    assert_eq!(
        fake.live_streams.load(std::sync::atomic::Ordering::SeqCst),
        0
    );

    let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![]),
        _ => hang(),
    });
    let r = builder(&fake, &store).build();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let stopper = async {
        fake.wait_requests(2).await;
        tx.send(()).unwrap();
    };
    let ((), ()) = tokio::join!(r.run_until(async { rx.await.unwrap() }), stopper);
    assert_eq!(
        fake.live_streams.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

// ---------------------------------------------------------------- resource kinds

/// `DynamicObject` with an `ApiResource`, selectors on lists and watches.
#[tokio::test(start_paused = true)]
async fn dynamic_object_with_selectors() {
    let fake = Fake::new(|r| {
        match (r.is_watch(), r.nth) {
        (false, 0) => Reply::Json(
            200,
            json!({"kind":"WidgetList","apiVersion":"example.com/v1","metadata":{"resourceVersion":"3"},"items":[
                {"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w","namespace":"ns","resourceVersion":"3"},"spec":{"size":1}}
            ]})
            .to_string(),
        ),
        (true, 0) => Reply::Stream(
            vec![ev("ADDED", json!({"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"v","namespace":"ns","resourceVersion":"4"}})),
                 ev("ADDED", json!({"kind":"Gadget","apiVersion":"example.com/v1","metadata":{"name":"g","namespace":"ns","resourceVersion":"5"}}))],
            End::Hang,
        ),
        _ => hang(),
    }
    });
    let (store, builder) = widget_reflector(&fake.client);
    let run = start(builder.config(WatchConfig {
        label_selector: Some("app=x,tier in (a,b)".into()),
        field_selector: Some("metadata.name!=z".into()),
        ..opts()
    }));
    store.wait_calls(2).await;
    let reqs = fake.requests();
    for r in &reqs {
        assert_eq!(r.path, "/apis/example.com/v1/namespaces/ns/widgets");
        assert_eq!(r.q("labelSelector"), Some("app=x,tier in (a,b)"));
        assert_eq!(r.q("fieldSelector"), Some("metadata.name!=z"));
    }
    let w = store.object("ns/w").unwrap().decode().unwrap();
    assert_eq!(w.data["spec"]["size"], 1);
    assert_eq!(
        run.reasons(),
        [ErrorReason::BadEvent],
        "the Gadget is skipped"
    );
    assert_eq!(run.reflector.name(), "widgets.example.com");
    run.stop().await;
}

/// `PartialObjectMeta<K>`: metadata-only lists and watches.
#[tokio::test(start_paused = true)]
async fn metadata_only() {
    let pom = |name: &str, rv: &str| json!({"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":name,"namespace":"ns","resourceVersion":rv}});
    let fake = Fake::new(move |r| {
        match (r.is_watch(), r.nth) {
        (false, 0) => Reply::Json(
            200,
            json!({"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3"},"items":[pom("a","3")]}).to_string(),
        ),
        (true, 0) => Reply::Stream(vec![ev("MODIFIED", pom("a", "4"))], End::Hang),
        _ => hang(),
    }
    });
    type Meta = PartialObjectMeta<ConfigMap>;
    let store = Arc::new(RecordingStore::<Meta>::default());
    let run = start(Reflector::<Meta>::builder(fake.client.clone(), store.clone()).config(opts()));
    store.wait_calls(2).await;
    let reqs = fake.requests();
    assert!(
        reqs[0]
            .header("accept")
            .unwrap()
            .contains("as=PartialObjectMetadataList")
    );
    assert!(
        reqs[1]
            .header("accept")
            .unwrap()
            .contains("as=PartialObjectMetadata")
    );
    let m = store.object("ns/a").unwrap().decode().unwrap();
    assert_eq!(m.metadata.resource_version.as_deref(), Some("4"));
    assert!(run.seen().is_empty());
    run.stop().await;
}

// ---------------------------------------------------------------- streaming list (TestWatchList)

fn wl_builder(fake: &Fake, store: &Arc<Store>) -> ReflectorBuilder<ConfigMap> {
    builder(fake, store).config(wl_opts())
}

/// A streaming list that never sends its end bookmark (object `a` and a
/// plain bookmark at RV "2"), then ends as `end` says.
fn without_end_bookmark(end: End) -> Reply {
    Reply::Stream(vec![ev("ADDED", cm("a", "2")), bookmark("2", false)], end)
}

fn is_watch_list(r: &Recorded) -> bool {
    r.is_watch() && r.q("sendInitialEvents") == Some("true")
}

/// The initial events are buffered and handed over as one `replace` at the
/// end bookmark; the same stream then goes on. No list request at all.
#[tokio::test(start_paused = true)]
async fn watch_list_replaces_once_at_the_end_bookmark() {
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => Reply::Stream(
            vec![
                ev("ADDED", cm("a", "2")),
                ev("ADDED", cm("b", "3")),
                ev("MODIFIED", cm("a", "4")),
                ev("DELETED", cm("b", "5")),
                ev("ADDED", cm("c", "6")),
                // a bookmark without the annotation does not end the list
                bookmark("6", false),
                bookmark("7", true),
                ev("ADDED", cm("d", "8")),
            ],
            End::Hang,
        ),
        _ => hang(),
    });
    store
        .expect_calls(&[
            Call::Replace(keys(&["a", "c"]), "7".into()),
            Call::Add("ns/d".into(), "8".into()),
        ])
        .await;
    assert_eq!(store.state()["ns/a"], "4");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    let w = &reqs[0];
    assert_eq!(w.q("sendInitialEvents"), Some("true"));
    assert_eq!(w.q("resourceVersionMatch"), Some("NotOlderThan"));
    assert_eq!(w.q("allowWatchBookmarks"), Some("true"));
    assert_eq!(w.rv().unwrap_or(""), "");
    assert_eq!(w.header("accept-encoding"), Some("identity"));
    let t: u32 = w.q("timeoutSeconds").unwrap().parse().unwrap();
    assert!((300..600).contains(&t));
    assert!(run.reflector.has_synced());
    assert_eq!(run.reflector.last_sync_resource_version(), "8");
    run.stop().await;
}

/// The stream closes before the end bookmark: not synced, retried with a
/// clean buffer after a backoff step.
#[tokio::test(start_paused = true)]
async fn watch_list_closed_before_bookmark_is_retried() {
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => without_end_bookmark(End::Close),
        (true, 1) => streaming_list(vec![cm("b", "3")], "3"),
        _ => hang(),
    });
    store
        .expect_calls(&[Call::Replace(keys(&["b"]), "3".into())])
        .await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(gaps(&reqs), [800], "retried after a backoff step");
    assert!(reqs.iter().all(is_watch_list));
    assert!(reqs.iter().all(|r| r.rv().unwrap_or("").is_empty()));
    run.stop().await;
}

/// An unsupported answer (422 Invalid) falls back to list + watch, and the
/// reflector does not try streaming again.
#[tokio::test(start_paused = true)]
async fn watch_list_unsupported_falls_back_to_list_and_watch() {
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => status(
            422,
            "Invalid",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch",
        ),
        (false, 0) => list("5", "", vec![cm("a", "5")]),
        (true, 1) => expired(),
        (false, 1) => list("6", "", vec![cm("a", "5")]),
        _ => hang(),
    });
    store.wait_calls(2).await;
    let reqs = fake.wait_requests(5).await;
    assert!(is_watch_list(&reqs[0]));
    assert!(!reqs[1].is_watch() && reqs[1].rv() == Some("0"));
    assert!(reqs[2].is_watch() && !is_watch_list(&reqs[2]));
    assert!(!reqs[3].is_watch() && reqs[3].rv() == Some("5"));
    assert!(reqs[4].is_watch() && !is_watch_list(&reqs[4]));
    run.stop().await;
}

/// Another error (500) falls back for this attempt only; the next relist
/// streams again, from the last synced RV.
#[tokio::test(start_paused = true)]
async fn watch_list_other_error_falls_back_for_one_attempt() {
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => status(500, "InternalError", "boom"),
        (false, 0) => list("5", "", vec![cm("a", "5")]),
        (true, 1) => expired(),
        (true, 2) => streaming_list(vec![cm("b", "6")], "6"),
        _ => hang(),
    });
    store.wait_calls(2).await;
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    assert!(is_watch_list(&reqs[0]));
    assert!(!reqs[1].is_watch());
    assert!(!is_watch_list(&reqs[2]));
    assert!(is_watch_list(&reqs[3]));
    assert_eq!(reqs[3].rv(), Some("5"));
    assert_eq!(store.calls()[1], Call::Replace(keys(&["b"]), "6".into()));
    run.stop().await;
}

/// 429 and connection refused retry the streaming list after a backoff.
#[tokio::test(start_paused = true)]
async fn watch_list_retries_on_too_many_requests() {
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => status(429, "TooManyRequests", "later"),
        (true, 1) => Reply::ConnRefused,
        (true, 2) => streaming_list(vec![], "3"),
        _ => hang(),
    });
    store.wait_calls(1).await;
    let reqs = fake.requests();
    assert!(reqs.iter().all(is_watch_list));
    assert_eq!(gaps(&reqs), [800, 1600]);
    assert_eq!(store.calls(), [Call::Replace(vec![], "3".into())]);
    run.stop().await;
}

/// Expired during a streaming list: retried at once with RV "".
#[tokio::test(start_paused = true)]
async fn watch_list_expired_resets_the_resource_version() {
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => expiring_streaming_list(vec![cm("a", "2")], "2"),
        (true, 1) => expired(),
        (true, 2) => streaming_list(vec![cm("a", "9")], "9"),
        _ => hang(),
    });
    store.wait_calls(2).await;
    let reqs = fake.requests();
    assert_eq!(rvs(&reqs), ["", "2", ""]);
    assert!(reqs.iter().all(is_watch_list));
    assert_eq!(reqs[2].at, reqs[1].at, "retried at once");
    assert_eq!(
        store.calls(),
        [
            Call::Replace(keys(&["a"]), "2".into()),
            Call::Replace(keys(&["a"]), "9".into())
        ]
    );
    assert_eq!(run.reflector.last_sync_resource_version(), "9");
    assert!(secs(&reqs[2]) > 0.0);
    run.stop().await;
}

/// A streaming relist reuses the store's objects for unchanged items too
/// (same uid and resourceVersion), also when managedFields are cut; the
/// last event of a key decides.
#[tokio::test(start_paused = true)]
async fn watch_list_relist_reuses_the_stores_objects_for_unchanged_items() {
    let (fake, store, run) = serve(with(cutting_managed_fields(wl_opts())), |r| {
        match (r.is_watch(), r.nth) {
            (true, 0) => expiring_streaming_list(
                vec![
                    cmu("a", "ua", "2"),
                    cmu("b", "ub", "3"),
                    cmu("c", "uc", "4"),
                    cmu("d", "ud", "5"),
                ],
                "5",
            ),
            (true, 1) => Reply::Stream(
                vec![
                    ev("ADDED", cmu("a", "ua", "2")),
                    ev("ADDED", cmu("b", "ub", "6")),
                    ev("ADDED", cmu("c", "uc2", "4")),
                    // first a new version, then the held one again: reused
                    ev("ADDED", cmu("d", "ud", "7")),
                    ev("MODIFIED", cmu("d", "ud", "5")),
                    bookmark("7", true),
                ],
                End::Hang,
            ),
            _ => hang(),
        }
    });
    store.wait_calls(1).await;
    let all = ["a", "b", "c", "d"];
    let before = held(&store, &all);
    assert!(!before[0].bytes().windows(13).any(|w| w == b"managedFields"));
    let calls = store.wait_calls(2).await;
    assert_eq!(calls[1], Call::Replace(keys(&all), "7".into()));
    let after = held(&store, &all);
    assert_eq!(same_objects(&before, &after), [true, false, false, true]);
    assert!(fake.requests().iter().all(is_watch_list));
    run.stop().await;
}

/// Without the end bookmark the reflector is not synced and the store sees
/// nothing, however long the stream stays open.
#[tokio::test(start_paused = true)]
async fn watch_list_without_end_bookmark_is_not_synced() {
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => without_end_bookmark(End::Hang),
        _ => hang(),
    });
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(store.calls().is_empty());
    assert!(!run.reflector.has_synced());
    assert_eq!(run.reflector.last_sync_resource_version(), "");
    assert_eq!(fake.requests().len(), 1);
    run.stop().await;
}

/// One reflector drives one watch: a second concurrent `run` returns at
/// once; after the first ends, running again works.
#[tokio::test(start_paused = true)]
async fn a_second_concurrent_run_returns_at_once() {
    let (fake, _store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, _) => list("1", "", vec![]),
        _ => hang(),
    });
    fake.wait_requests(2).await;
    tokio::time::timeout(
        Duration::from_secs(1),
        run.reflector.run(CancellationToken::new()),
    )
    .await
    .expect("the second run returned at once");
    assert_eq!(fake.requests().len(), 2);
    let r = run.reflector.clone();
    run.stop().await;
    let cancel = CancellationToken::new();
    let again = tokio::spawn({
        let c = cancel.clone();
        async move { r.run(c).await }
    });
    fake.wait_requests(4).await;
    cancel.cancel();
    again.await.unwrap();
}

/// An event over `max_event_size` ends the watch with a typed error and a
/// relist; nothing is buffered without bound.
#[tokio::test(start_paused = true)]
async fn event_over_the_size_limit_relists() {
    let mut big = cm("big", "3");
    big["data"]["k"] = json!("x".repeat(4096));
    let (fake, _store, run) = serve(
        with(WatchConfig {
            limits: kcache_reflector::Limits {
                max_event_size: 1024,
                ..Default::default()
            },
            ..opts()
        }),
        move |r| match (r.is_watch(), r.nth) {
            (false, _) => list("1", "", vec![]),
            (true, 0) => Reply::Stream(
                vec![ev("ADDED", cm("a", "2")), ev("ADDED", big.clone())],
                End::Hang,
            ),
            _ => hang(),
        },
    );
    fake.wait_requests(4).await;
    assert_eq!(run.reasons(), [ErrorReason::EventTooLarge]);
    assert!(run.seen()[0].1.contains("max_event_size"));
    let lists = fake.lists();
    assert_eq!(lists[1].rv(), Some("2"));
    run.stop().await;
}

/// A watch from "" (a list without a resourceVersion) gets synthetic ADDED
/// events in no order: they do not move the RV until another event type
/// arrives (client-go's propagateRVFromStart).
#[tokio::test(start_paused = true)]
async fn synthetic_added_events_do_not_move_the_rv() {
    let (fake, _store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("", "", vec![]),
        (true, 0) => Reply::Stream(
            vec![ev("ADDED", cm("a", "5")), ev("ADDED", cm("b", "3"))],
            End::Close,
        ),
        (true, 1) => Reply::Stream(
            vec![
                ev("ADDED", cm("a", "5")),
                ev("MODIFIED", cm("b", "6")),
                ev("ADDED", cm("c", "7")),
            ],
            End::Close,
        ),
        _ => hang(),
    });
    let reqs = fake.wait_requests(4).await;
    assert_eq!(reqs[1].rv().unwrap_or(""), "");
    assert_eq!(reqs[2].rv().unwrap_or(""), "");
    assert_eq!(reqs[3].rv(), Some("7"));
    run.stop().await;
}

/// A failing `resync` ends the watch and relists (client-go).
#[tokio::test(start_paused = true)]
async fn failing_resync_relists() {
    struct FailingResync(Store);
    impl kcache_core::ReflectorStore<ConfigMap> for FailingResync {
        fn add(
            &self,
            o: kcache_core::CachedObject<ConfigMap>,
        ) -> Result<(), kcache_core::StoreError> {
            self.0.add(o)
        }
        fn update(
            &self,
            o: kcache_core::CachedObject<ConfigMap>,
        ) -> Result<(), kcache_core::StoreError> {
            self.0.update(o)
        }
        fn delete(
            &self,
            o: kcache_core::ObjectOrTombstone<ConfigMap>,
        ) -> Result<(), kcache_core::StoreError> {
            self.0.delete(o)
        }
        fn replace(
            &self,
            items: Vec<kcache_core::CachedObject<ConfigMap>>,
            rv: String,
        ) -> Result<(), kcache_core::StoreError> {
            self.0.replace(items, rv)
        }
        fn resync(&self) -> Result<(), kcache_core::StoreError> {
            Err(kcache_core::StoreError::Other("resync refused".into()))
        }
    }
    let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
        (false, _) => list("1", "", vec![]),
        (true, 0) => Reply::Stream(vec![bookmark("2", false)], End::Hang),
        _ => hang(),
    });
    let store = Arc::new(FailingResync(Store::default()));
    let run = start(
        Reflector::<ConfigMap>::builder(fake.client.clone(), store.clone())
            .config(opts())
            .backoff(no_jitter())
            .resync_period(Duration::from_secs(30)),
    );
    let reqs = fake.wait_requests(3).await;
    assert!(!reqs[2].is_watch());
    assert_eq!(reqs[2].rv(), Some("2"));
    assert_eq!(reqs[2].at, Duration::from_millis(30_800));
    assert_eq!(run.reasons(), [ErrorReason::Store]);
    run.stop().await;
}

/// "Too large resource version" answered when opening a streaming list:
/// retried at once at "".
#[tokio::test(start_paused = true)]
async fn watch_list_too_large_on_open_retries_at_empty_rv() {
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => expiring_streaming_list(vec![], "20"),
        (true, 1) => too_large(),
        (true, 2) => streaming_list(vec![], "21"),
        _ => hang(),
    });
    store.wait_calls(2).await;
    let reqs = fake.requests();
    assert_eq!(rvs(&reqs), ["", "20", ""]);
    assert!(reqs.iter().all(is_watch_list));
    assert!(fake.lists().is_empty());
    run.stop().await;
}

// ---------------------------------------------------------------- resume (warm restart)

/// A reflector resuming from RV "10" whose first watch streams what the
/// test sends on the returned sender (every later request hangs).
fn resume_on_live_watch() -> (
    mpsc::UnboundedSender<Bytes>,
    Fake,
    Arc<Store>,
    Running<ConfigMap>,
) {
    let (tx, rx) = live_body();
    let (fake, store, run) = serve(
        |f, s| builder(f, s).resume_from("10"),
        move |r| match (r.is_watch(), r.nth) {
            (true, 0) => rx.take(),
            _ => hang(),
        },
    );
    (tx, fake, store, run)
}

/// `resume_from`: no list; the first watch opens at the given RV with the
/// short resume timeout; events reach the store; the reflector has synced
/// only once a bookmark arrives; later watches use the normal timeout.
#[tokio::test(start_paused = true)]
async fn resume_watches_from_the_given_rv_without_listing() {
    let (tx, fake, store, run) = resume_on_live_watch();
    assert_eq!(run.reflector.last_sync_resource_version(), "10");
    let reqs = fake.wait_requests(1).await;
    assert!(reqs[0].is_watch());
    assert_eq!(reqs[0].rv(), Some("10"));
    assert_eq!(reqs[0].q("timeoutSeconds"), Some("2"));
    assert_eq!(reqs[0].q("allowWatchBookmarks"), Some("true"));
    assert_eq!(reqs[0].q("sendInitialEvents"), None);
    tx.send(Bytes::from(format!(
        "{}\n{}\n",
        ev("MODIFIED", cm("a", "12")),
        ev("DELETED", cm("b", "13"))
    )))
    .unwrap();
    store.wait_calls(2).await;
    assert!(!run.reflector.has_synced(), "events alone do not confirm");
    assert_eq!(run.reflector.last_sync_resource_version(), "13");
    tx.send(Bytes::from(format!("{}\n", bookmark("15", false))))
        .unwrap();
    tokio::time::timeout(Duration::from_secs(1), run.reflector.wait_synced())
        .await
        .expect("synced after the bookmark");
    assert_eq!(
        store.calls(),
        [
            Call::Update("ns/a".into(), "12".into()),
            Call::Delete("ns/b".into(), "13".into()),
            Call::Bookmark("15".into()),
        ]
    );
    drop(tx);
    let reqs = fake.wait_requests(2).await;
    assert!(reqs[1].is_watch(), "a clean close re-watches: {reqs:?}");
    assert_eq!(reqs[1].rv(), Some("15"));
    let t: u32 = reqs[1].q("timeoutSeconds").unwrap().parse().unwrap();
    assert!(
        (300..600).contains(&t),
        "normal timeout after the resume: {t}"
    );
    assert!(fake.lists().is_empty());
    assert!(run.seen().is_empty(), "{:?}", run.seen());
    run.stop().await;
}

/// A resumed watch answered with 410 Gone relists at the resume RV (as
/// client-go does after any expired watch); the list's replace syncs the
/// reflector and counts as a relist.
#[tokio::test(start_paused = true)]
async fn resume_expired_relists_and_the_list_syncs() {
    let (registry, metrics) = prometheus();
    let (fake, store, run) = serve(
        |f, s| builder(f, s).resume_from("10").metrics(metrics),
        |r| match (r.is_watch(), r.nth) {
            (true, 0) => expired(),
            (false, 0) => list("20", "", vec![cm("a", "18"), cm("c", "19")]),
            _ => hang(),
        },
    );
    store
        .expect_calls(&[Call::Replace(keys(&["a", "c"]), "20".into())])
        .await;
    assert!(run.reflector.has_synced());
    let lists = fake.lists();
    assert_eq!(lists.len(), 1);
    assert_eq!(lists[0].rv(), Some("10"));
    assert_eq!(
        lists[0].q("limit"),
        None,
        "a list at an exact RV is unpaged"
    );
    assert_eq!(run.reasons(), [ErrorReason::Expired]);
    let reqs = fake.wait_requests(3).await;
    assert_eq!(reqs[2].rv(), Some("20"));
    let text = metrics_text(&registry);
    assert!(
        text.contains("reflector_relists_total{name=\"configmaps\"} 1"),
        "{text}"
    );
    run.stop().await;
}

/// A resumed watch that ends cleanly (the server's timeout) without a
/// bookmark confirms the resume; a stalled one does not.
#[tokio::test(start_paused = true)]
async fn resume_confirmed_by_a_clean_end_but_not_by_a_stall() {
    let (tx, fake, _store, run) = resume_on_live_watch();
    fake.wait_requests(1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!run.reflector.has_synced());
    drop(tx);
    tokio::time::timeout(Duration::from_secs(1), run.reflector.wait_synced())
        .await
        .expect("a clean end confirms");
    assert!(fake.lists().is_empty());
    run.stop().await;

    // stalled: no byte until the idle limit
    let (fake, _store, run) = serve(
        |f, s| {
            builder(f, s).resume_from("10").config(WatchConfig {
                timeouts: RequestTimeouts {
                    watch_idle_timeout: Some(Duration::from_secs(10)),
                    ..Default::default()
                },
                ..opts()
            })
        },
        |r| match (r.is_watch(), r.nth) {
            (true, 0) => Reply::Stream(vec![], End::Hang),
            _ => hang(),
        },
    );
    let reqs = fake.wait_requests(2).await;
    assert_eq!(run.reasons(), [ErrorReason::WatchStalled]);
    assert!(!run.reflector.has_synced(), "a stall is no confirmation");
    assert_eq!(reqs[1].rv(), Some("10"));
    assert_eq!(reqs[1].q("timeoutSeconds"), Some("2"), "still resuming");
    assert!(fake.lists().is_empty());
    run.stop().await;
}

/// Without `resume_from` nothing changes: an empty RV is ignored too.
#[tokio::test(start_paused = true)]
async fn resume_from_empty_rv_lists_as_usual() {
    let (fake, _store, run) = serve(
        |f, s| builder(f, s).resume_from(""),
        |r| match (r.is_watch(), r.nth) {
            (false, 0) => list("1", "", vec![]),
            _ => hang(),
        },
    );
    let reqs = fake.wait_requests(2).await;
    assert!(!reqs[0].is_watch());
    assert_eq!(reqs[0].rv(), Some("0"));
    run.reflector.wait_synced().await;
    run.stop().await;
}

// ---------------------------------------------------------------- deadlines, byte caps, backoff on every retry

/// A Prometheus registry, and a metrics provider that registers in it.
fn prometheus() -> (Registry, Arc<dyn ReflectorMetricsProvider>) {
    let mut registry = Registry::default();
    let provider = PrometheusReflectorMetricsProvider::new(&mut registry);
    (registry, Arc::new(provider))
}

/// The registry's metrics in the text format.
fn metrics_text(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

fn live(fake: &Fake) -> usize {
    fake.live_streams.load(std::sync::atomic::Ordering::SeqCst)
}

/// A LIST page body that stops mid-way (no byte for `list_body_idle`, 1
/// minute by default) fails with a timeout; one that trickles (a byte every
/// 20 s, under the idle limit, forever) fails at `list_body` (10 minutes
/// by default). Each is abandoned (its stream dropped) and retried after a
/// backoff step; the reflector then syncs.
#[tokio::test(start_paused = true)]
async fn stalled_list_body_times_out_and_retries() {
    let body = list_json("1", "", vec![cm("a", "1")]);
    let half = Bytes::from(body[..body.len() / 2].to_owned());
    let (tx, rx) = live_body();
    let fake = Fake::new(move |r| match (r.is_watch(), r.nth) {
        (false, 0) => Reply::Chunks(vec![half.clone()], End::Hang),
        (false, 1) => rx.take(),
        (false, 2) => list("1", "", vec![cm("a", "1")]),
        _ => hang(),
    });
    let feeder = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(20)).await;
            if tx.send(Bytes::from_static(b" ")).is_err() {
                return;
            }
        }
    });
    let store = Arc::new(Store::default());
    let run = start(builder(&fake, &store));
    let calls = store
        .wait_until(Duration::from_secs(3600), |c| !c.is_empty())
        .await;
    assert_eq!(calls, [Call::Replace(keys(&["a"]), "1".into())]);
    let lists = fake.lists();
    assert_eq!(lists.len(), 3);
    assert_eq!(
        lists[1].at - lists[0].at,
        Duration::from_millis(60_000 + 800),
        "the idle limit, then a backoff step"
    );
    assert_eq!(
        lists[2].at - lists[1].at,
        Duration::from_millis(600_000 + 800),
        "the whole-body limit, then a backoff step (back to 800 ms: the last one was 10 minutes ago)"
    );
    assert_eq!(run.reasons(), [ErrorReason::Timeout, ErrorReason::Timeout]);
    // each error says what timed out and which setting to raise
    let want = [
        (
            "timed out after 60s waiting for the next byte of the list body",
            "RequestTimeouts::list_body_idle",
        ),
        (
            "timed out after 600s waiting for the end of the list body",
            "RequestTimeouts::list_body`",
        ),
    ];
    for ((_, message), (what, setting)) in run.seen().iter().zip(want) {
        assert!(
            message.contains(what) && message.contains(setting),
            "{message}"
        );
    }
    fake.wait_requests(4).await;
    assert_eq!(
        live(&fake),
        1,
        "only the watch is open: both bodies dropped"
    );
    feeder.abort();
    run.stop().await;
}

/// Response headers that never come fail the request after
/// `response_headers` (2 minutes by default), counted as
/// `reflector_errors_total{reason="timeout"}`: a streaming list falls back
/// to list + watch for that attempt, a LIST page or a watch relists after
/// a backoff step.
#[tokio::test(start_paused = true)]
async fn missing_response_headers_time_out() {
    let (registry, metrics) = prometheus();
    let (fake, store, run) = serve(
        |f, s| wl_builder(f, s).metrics(metrics),
        |r| match (r.is_watch(), r.nth) {
            (true, 0) => Reply::NoHeaders,
            (false, 0) => Reply::NoHeaders,
            // a streaming list that the server closes after its end bookmark;
            // the next watch gets no headers
            (true, 1) => Reply::Stream(vec![bookmark("5", true)], End::Close),
            (true, 2) => Reply::NoHeaders,
            (true, 3) => streaming_list(vec![], "6"),
            _ => hang(),
        },
    );
    let calls = store.wait_calls(2).await;
    assert_eq!(
        calls,
        [
            Call::Replace(vec![], "5".into()),
            Call::Replace(vec![], "6".into())
        ]
    );
    let reqs = fake.requests();
    let kinds: Vec<_> = reqs
        .iter()
        .map(|r| match (r.is_watch(), is_watch_list(r)) {
            (true, true) => "streaming list",
            (true, false) => "watch",
            _ => "list",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "streaming list",
            "list",
            "streaming list",
            "watch",
            "streaming list"
        ]
    );
    let at: Vec<u64> = reqs.iter().map(|r| r.at.as_millis() as u64).collect();
    // 120 s each; the backoff after the list is 800 ms, and again 800 ms
    // after the watch (reset: more than 2 minutes since the last step)
    assert_eq!(at, [0, 120_000, 240_800, 240_800, 361_600]);
    assert_eq!(reqs[4].rv(), Some("5"), "the relist is at the last RV");
    assert_eq!(run.reasons(), [ErrorReason::Timeout, ErrorReason::Timeout]);
    for (_, m) in run.seen() {
        assert!(
            m.contains("timed out after 120s waiting for the response headers")
                && m.contains("RequestTimeouts::response_headers"),
            "{m}"
        );
    }
    // the streaming list's timeout is counted too (it falls back instead
    // of going to the handler)
    let text = metrics_text(&registry);
    assert!(
        text.contains("reflector_errors_total{name=\"configmaps\",reason=\"timeout\"} 3"),
        "{text}"
    );
    run.stop().await;

    // a custom deadline
    let (fake, store, run) = serve(
        with(WatchConfig {
            timeouts: RequestTimeouts {
                response_headers: Duration::from_secs(5),
                ..RequestTimeouts::default()
            },
            ..opts()
        }),
        |r| match (r.is_watch(), r.nth) {
            (false, 0) => Reply::NoHeaders,
            (false, _) => list("1", "", vec![]),
            _ => hang(),
        },
    );
    store.wait_calls(1).await;
    assert_eq!(
        fake.lists()[1].at,
        Duration::from_millis(5_800),
        "5 s, then a backoff step"
    );
    run.stop().await;
}

/// A LIST page body over `max_list_page_bytes` fails as soon as the cap is
/// passed (the rest of the body is not waited for) or at once when its
/// `Content-Length` announces more; the reflector relists after a backoff
/// step each time, and a page under the cap is accepted.
#[tokio::test(start_paused = true)]
async fn list_page_over_the_byte_cap_fails_and_relists() {
    let (registry, metrics) = prometheus();
    let (fake, store, run) = serve(
        |f, s| {
            builder(f, s)
                .config(WatchConfig {
                    limits: kcache_reflector::Limits {
                        max_list_page_bytes: 4096,
                        ..Default::default()
                    },
                    ..opts()
                })
                .metrics(metrics)
        },
        |r| match (r.is_watch(), r.nth) {
            // 2 x 3000 bytes, then the body hangs: only the cap can end it early
            (false, 0) => Reply::Chunks(
                vec![Bytes::from(vec![b' '; 3000]), Bytes::from(vec![b' '; 3000])],
                End::Hang,
            ),
            (false, 1) => Reply::WithLength(10_000, vec![], End::Hang),
            (false, 2) => list("1", "", vec![cm("a", "1")]),
            _ => hang(),
        },
    );
    store
        .expect_calls(&[Call::Replace(keys(&["a"]), "1".into())])
        .await;
    assert_eq!(gaps(&fake.lists()), [800, 1600], "backoff steps, no waits");
    assert_eq!(
        run.reasons(),
        [ErrorReason::ListPageTooLarge, ErrorReason::ListPageTooLarge]
    );
    for (_, m) in run.seen() {
        assert!(
            m.contains("larger than 4096 bytes") && m.contains("raise `max_list_page_bytes`"),
            "{m}"
        );
    }
    let text = metrics_text(&registry);
    assert!(
        text.contains(
            "reflector_errors_total{name=\"configmaps\",reason=\"list_page_too_large\"} 2"
        ),
        "{text}"
    );
    fake.wait_requests(4).await;
    assert_eq!(live(&fake), 1, "the oversized bodies were dropped");
    run.stop().await;
}

/// A streaming list whose buffered initial events pass
/// `max_initial_events_bytes` is abandoned at once (no fallback to a list,
/// which would hold the same collection) and retried after a backoff step;
/// events replacing an object already buffered do not add up.
#[tokio::test(start_paused = true)]
async fn initial_events_over_the_byte_cap_fail_and_relist() {
    let (fake, store, run) = serve(
        with(WatchConfig {
            limits: kcache_reflector::Limits {
                max_initial_events_bytes: 2000,
                ..Default::default()
            },
            ..wl_opts()
        }),
        |r| match (r.is_watch(), r.nth) {
            (true, 0) => Reply::Stream(
                (0..20)
                    .map(|i| ev("ADDED", cm(&format!("o{i}"), "2")))
                    .collect(),
                End::Hang,
            ),
            (true, 1) => {
                let mut lines: Vec<String> = (0..20)
                    .map(|i| ev("MODIFIED", cm("a", &format!("{}", i + 2))))
                    .collect();
                lines.push(bookmark("30", true));
                Reply::Stream(lines, End::Hang)
            }
            _ => hang(),
        },
    );
    store
        .expect_calls(&[Call::Replace(keys(&["a"]), "30".into())])
        .await;
    assert_eq!(store.state()["ns/a"], "21");
    let reqs = fake.requests();
    assert!(reqs.iter().all(is_watch_list), "no list: {reqs:?}");
    assert_eq!(gaps(&reqs), [800]);
    assert_eq!(run.reasons(), [ErrorReason::InitialEventsTooLarge]);
    let m = &run.seen()[0].1;
    assert!(
        m.contains("more than 2000 bytes") && m.contains("raise `max_initial_events_bytes`"),
        "{m}"
    );
    assert_eq!(live(&fake), 1);
    run.stop().await;
}

/// Every streaming list answered 410 Gone or "too large resource version"
/// (a broken server or proxy): the retry at `""` is immediate only right
/// after a request that had a resourceVersion (client-go's rule); after
/// that every retry waits a backoff step, so the request rate follows the
/// backoff schedule (it was 2,504 requests in 2 s).
#[tokio::test(start_paused = true)]
async fn streaming_list_410_backs_off() {
    let (fake, _store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        // synced at 5, then the watch expires
        (true, 0) => expiring_streaming_list(vec![], "5"),
        (true, n) if n % 3 == 0 => expired(),
        (true, n) if n % 3 == 1 => gone(),
        (true, _) => too_large(),
        _ => hang(),
    });
    let reqs = fake.wait_requests(9).await;
    let at: Vec<u64> = reqs[..9].iter().map(|r| r.at.as_millis() as u64).collect();
    // 0: synced; 800 ms: the relist at "5", at once again at ""; then
    // 1.6, 3.2, 6.4, 12.8, 25.6, 30 s apart
    assert_eq!(
        at,
        [0, 800, 800, 2_400, 5_600, 12_000, 24_800, 50_400, 80_400]
    );
    assert_eq!(rvs(&reqs[..9]), ["", "5", "", "", "", "", "", "", ""]);
    assert!(reqs.iter().all(is_watch_list));
    assert!(fake.lists().is_empty());
    // over a whole minute of virtual time
    let in_a_minute = fake
        .requests()
        .iter()
        .filter(|r| r.at < Duration::from_secs(60))
        .count();
    assert_eq!(in_a_minute, 8);
    run.stop().await;
}

/// A resumed watch reset ("connection reset", which is read as the end of
/// the stream) 1 s in, before the server's 2 s timeout, is no
/// confirmation: the reflector is not synced and watches again from the
/// same resourceVersion after a backoff step. A clean close before the
/// timeout does not confirm either; one at the timeout does.
#[tokio::test(start_paused = true)]
async fn resume_is_not_confirmed_by_an_early_eof() {
    let (tx, rx) = live_body();
    let (tx2, rx2) = live_body();
    let (fake, _store, run) = serve(
        |f, s| builder(f, s).resume_from("10"),
        move |r| match (r.is_watch(), r.nth) {
            (true, 0) => Reply::Stream(vec![], End::ResetAfter(Duration::from_secs(1))),
            (true, 1) => rx.take(),
            (true, 2) => rx2.take(),
            _ => hang(),
        },
    );
    let reqs = fake.wait_requests(2).await;
    assert!(
        !run.reflector.has_synced(),
        "an early reset confirms nothing"
    );
    assert_eq!(
        reqs[1].at,
        Duration::from_millis(1_800),
        "1 s, then a backoff step"
    );
    for r in &reqs {
        assert_eq!((r.rv(), r.q("timeoutSeconds")), (Some("10"), Some("2")));
    }
    // the second watch closes cleanly 1.5 s in: still not confirmed
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    drop(tx);
    let reqs = fake.wait_requests(3).await;
    assert!(
        !run.reflector.has_synced(),
        "an early close confirms nothing"
    );
    assert_eq!(
        reqs[2].at - reqs[1].at,
        Duration::from_millis(1_500 + 1_600)
    );
    assert_eq!(reqs[2].rv(), Some("10"));
    // the third one lasts its 2 s: confirmed
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(tx2);
    tokio::time::timeout(Duration::from_secs(1), run.reflector.wait_synced())
        .await
        .expect("a clean end at the timeout confirms");
    assert!(fake.lists().is_empty());
    assert!(run.seen().is_empty(), "{:?}", run.seen());
    run.stop().await;
}

/// A 429 on a LIST (Kubernetes 1.37 `ConsistentListFromCacheSkipTimeoutFallback`:
/// a consistent list the watch cache cannot serve in time answers 429
/// instead of going to etcd): the reflector backs off and lists again,
/// waiting as long as the server asked when that is longer than its
/// backoff step: the `Retry-After` header, else the Status's
/// `details.retryAfterSeconds`, never past the backoff cap; with neither,
/// the backoff step. The same on a streaming list. Reported, never fatal.
#[tokio::test(start_paused = true)]
async fn list_429_backs_off_with_retry_after() {
    fn too_many(header: Option<u64>, body: Option<u64>) -> Reply {
        let mut status = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"storage is (re)initializing","reason":"TooManyRequests","code":429});
        if let Some(secs) = body {
            status["details"] = json!({"retryAfterSeconds": secs});
        }
        let headers = header
            .map(|s| vec![("retry-after", s.to_string())])
            .unwrap_or_default();
        Reply::JsonWithHeaders(429, headers, status.to_string())
    }
    // paged lists: header (5 s, over the 800 ms step), body only (3 s,
    // over 1.6 s), neither (the 3.2 s step), an hour (capped at 30 s), then
    // a list that succeeds
    let (fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => too_many(Some(5), Some(1)),
        (false, 1) => too_many(None, Some(3)),
        (false, 2) => too_many(None, None),
        (false, 3) => too_many(Some(3600), None),
        (false, _) => list("7", "", vec![cm("a", "7")]),
        _ => hang(),
    });
    store.wait_calls(1).await;
    let lists = fake.lists();
    assert_eq!(gaps(&lists), [5000, 3000, 3200, 30000]);
    assert!(matches!(&store.calls()[0], Call::Replace(items, rv) if items.len() == 1 && rv == "7"));
    let t = ErrorReason::TooManyRequests;
    assert_eq!(run.reasons(), [t, t, t, t]);
    run.stop().await;
    // a streaming list: the same wait
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => too_many(Some(4), None),
        (true, 1) => streaming_list(vec![], "3"),
        _ => hang(),
    });
    store.wait_calls(1).await;
    assert_eq!(gaps(&fake.requests()), [4000]);
    run.stop().await;
}
