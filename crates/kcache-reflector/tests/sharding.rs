//! Server-side sharded list and watch (KEP-5866) against the scripted fake
//! apiserver, on a paused clock: the `shardSelector` parameter on every
//! request, the `metadata.shardInfo` echo deciding who filters, the
//! client-side filter when the apiserver does not, and a rejected selector.

mod common;
use kcache_testing::fake;

use std::sync::Arc;
use std::time::Duration;

use common::{
    Call, RecordingStore, Running, SeenError, meta_list, meta_reflector, no_jitter, opts, serve,
    streaming_list,
};
use fake::{End, Fake, Reply, bookmark, ev, hang, pb_cmu, pb_field, pb_list_body, status};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_core::{ShardField, ShardSelector};
use kcache_reflector::{
    ErrorReason, Reflector, ReflectorBuilder, ShardFilterMode, WatchConfig, WireFormat,
};
use serde_json::{Value, json};

type Store = RecordingStore<ConfigMap>;
/// Runs the reflector (without backoff jitter).
fn start<K: kube::Resource + 'static>(b: ReflectorBuilder<K>) -> Running<K> {
    common::start(b.backoff(no_jitter()))
}

/// The lower half of the uid hash space.
fn half() -> ShardSelector {
    ShardSelector::contiguous(ShardField::Uid, 2).unwrap()[0].clone()
}

/// A uid whose hash is inside (`inside`) or outside [`half`].
fn uid(n: usize, inside: bool) -> String {
    let sel = half();
    (0..)
        .map(|i| format!("00000000-0000-0000-{n:04}-{i:012}"))
        .find(|u| sel.matches_value(u) == inside)
        .unwrap()
}

/// A ConfigMap in `ns` with a uid inside or outside [`half`].
fn cmu(name: &str, inside: bool, rv: &str) -> Value {
    let n = name.bytes().map(usize::from).sum::<usize>();
    json!({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":name,"namespace":"ns","uid":uid(n, inside),"resourceVersion":rv},"data":{"k":"v"}})
}

/// A JSON ConfigMapList page, echoing `echo` in `metadata.shardInfo`.
fn page(rv: &str, cont: &str, echo: Option<&ShardSelector>, items: Vec<Value>) -> Reply {
    let mut meta = json!({"resourceVersion": rv, "continue": cont});
    if let Some(sel) = echo {
        meta["shardInfo"] = json!({"selector": sel.to_string()});
    }
    Reply::Json(
        200,
        json!({"kind":"ConfigMapList","apiVersion":"v1","metadata":meta,"items":items}).to_string(),
    )
}

/// The options of [`builder`]: namespace `ns`, list + watch, JSON,
/// pages of 2, the [`half`] shard.
fn shard_opts() -> WatchConfig {
    WatchConfig {
        wire_format: WireFormat::Json,
        page_size: 2,
        shard_selector: Some(half()),
        ..opts()
    }
}

fn builder(fake: &Fake, store: &Arc<Store>) -> ReflectorBuilder<ConfigMap> {
    Reflector::<ConfigMap>::builder(fake.client.clone(), store.clone())
        .config(shard_opts())
        .backoff(no_jitter())
}

/// [`builder`] with streaming lists.
fn wl_builder(fake: &Fake, store: &Arc<Store>) -> ReflectorBuilder<ConfigMap> {
    builder(fake, store).config(WatchConfig {
        use_watch_list: true,
        ..shard_opts()
    })
}

fn keys(ks: &[&str]) -> Vec<String> {
    ks.iter().map(|k| format!("ns/{k}")).collect()
}

/// The selector goes on every LIST page (the first and each `continue`),
/// on every watch and on a streaming list, rendered in the apiserver's
/// syntax; a list whose pages all echo it was filtered by the apiserver:
/// mode `Server`, nothing dropped.
#[tokio::test(start_paused = true)]
async fn selector_is_sent_on_every_page_and_watch() {
    let sel = half();
    let (fake, store, run) = serve(builder, move |r| match (r.is_watch(), r.nth) {
        (false, 0) => page(
            "5",
            "c1",
            Some(&half()),
            vec![cmu("a", true, "1"), cmu("b", true, "2")],
        ),
        (false, 1) => page("5", "c2", Some(&half()), vec![cmu("c", true, "3")]),
        (false, 2) => page("5", "", Some(&half()), vec![cmu("d", true, "4")]),
        (true, 0) => Reply::Stream(vec![ev("ADDED", cmu("e", true, "6"))], End::Close),
        _ => hang(),
    });
    let calls = store.wait_calls(2).await;
    assert_eq!(
        calls[..2],
        [
            Call::Replace(keys(&["a", "b", "c", "d"]), "5".into()),
            Call::Add("ns/e".into(), "6".into()),
        ]
    );
    let reqs = fake.wait_requests(5).await;
    let text = sel.to_string();
    for r in &reqs {
        assert_eq!(r.q("shardSelector"), Some(text.as_str()), "{r:?}");
    }
    let lists = fake.lists();
    assert_eq!(lists.len(), 3);
    assert_eq!(
        lists.iter().map(|r| r.q("continue")).collect::<Vec<_>>(),
        [None, Some("c1"), Some("c2")]
    );
    assert!(fake.watches().len() >= 2);
    assert_eq!(
        run.reflector.shard_filter_mode(),
        Some(ShardFilterMode::Server)
    );
    assert_eq!(run.reflector.shard_dropped(), 0);
    assert_eq!(run.reflector.shard_selector(), Some(&sel));
    assert!(run.seen().is_empty(), "{:?}", run.seen());
    run.stop().await;

    // a streaming list carries it too
    let (fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => streaming_list(vec![cmu("a", true, "1")], "2"),
        _ => hang(),
    });
    store.wait_calls(1).await;
    let w = &fake.watches()[0];
    assert_eq!(w.q("sendInitialEvents"), Some("true"));
    assert_eq!(w.q("shardSelector"), Some(text.as_str()));
    run.stop().await;
}

/// A list without `metadata.shardInfo` (the gate off, an older apiserver)
/// was not filtered: the reflector keeps only its shard, for the list's
/// items and for every later watch event (ADDED, MODIFIED, DELETED), and
/// the resourceVersion still moves with the events it drops. Mode
/// `Client`.
#[tokio::test(start_paused = true)]
async fn filters_on_the_client_without_shard_info() {
    let (_fake, store, run) = serve(builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => page(
            "5",
            "c1",
            None,
            vec![cmu("in1", true, "1"), cmu("out1", false, "2")],
        ),
        (false, 1) => page(
            "5",
            "",
            None,
            vec![cmu("out2", false, "3"), cmu("in2", true, "4")],
        ),
        (true, 0) => Reply::Stream(
            vec![
                ev("ADDED", cmu("out3", false, "6")),
                ev("ADDED", cmu("in3", true, "7")),
                ev("MODIFIED", cmu("out1", false, "8")),
                ev("MODIFIED", cmu("in1", true, "9")),
                ev("DELETED", cmu("out2", false, "10")),
                ev("DELETED", cmu("in2", true, "11")),
                ev("ADDED", cmu("out4", false, "12")),
            ],
            End::Hang,
        ),
        _ => hang(),
    });
    store
        .expect_calls(&[
            Call::Replace(keys(&["in1", "in2"]), "5".into()),
            Call::Add("ns/in3".into(), "7".into()),
            Call::Update("ns/in1".into(), "9".into()),
            Call::Delete("ns/in2".into(), "11".into()),
        ])
        .await;
    // the last event was dropped, but its resourceVersion counts
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(run.reflector.last_sync_resource_version(), "12");
    assert_eq!(
        run.reflector.shard_filter_mode(),
        Some(ShardFilterMode::Client)
    );
    assert_eq!(run.reflector.shard_dropped(), 2 + 4);
    assert!(run.seen().is_empty(), "{:?}", run.seen());
    run.stop().await;
}

/// The apiserver filtered and the reflector checks again: nothing is lost
/// (a streaming list, which carries no echo, a protobuf list echoing the
/// selector in `ListMeta.shardInfo`), and the mode is `Server`. An event
/// outside the shard on a `Server` stream switches the mode to `Client`
/// and is dropped.
#[tokio::test(start_paused = true)]
async fn server_filtered_streams_are_not_filtered_twice() {
    // streaming list: only objects inside, no echo possible
    let (_fake, store, run) = serve(wl_builder, |r| match (r.is_watch(), r.nth) {
        (true, 0) => Reply::Stream(
            vec![
                ev("ADDED", cmu("a", true, "1")),
                ev("ADDED", cmu("b", true, "2")),
                bookmark("3", true),
                ev("ADDED", cmu("c", true, "4")),
                ev("ADDED", cmu("x", false, "5")),
            ],
            End::Hang,
        ),
        _ => hang(),
    });
    let calls = store.wait_calls(2).await;
    assert_eq!(
        calls[..2],
        [
            Call::Replace(keys(&["a", "b"]), "3".into()),
            Call::Add("ns/c".into(), "4".into()),
        ]
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(store.calls().len(), 2, "x is outside: {:?}", store.calls());
    assert_eq!(run.reflector.last_sync_resource_version(), "5");
    assert_eq!(
        run.reflector.shard_filter_mode(),
        Some(ShardFilterMode::Client),
        "an object outside the shard on the watch: the apiserver does not filter"
    );
    assert_eq!(run.reflector.shard_dropped(), 1);
    run.stop().await;

    // protobuf list with the echo in ListMeta field 5
    let echo_pb = |items: &[Vec<u8>]| {
        let body = pb_list_body("7", "", items);
        // re-encode with shardInfo: ListMeta {2 rv, 3 continue, 5 shardInfo {1 selector}}
        let mut meta = Vec::new();
        pb_field(&mut meta, 2, b"7");
        let mut info = Vec::new();
        pb_field(&mut info, 1, half().to_string().as_bytes());
        pb_field(&mut meta, 5, &info);
        let mut list = Vec::new();
        pb_field(&mut list, 1, &meta);
        for it in items {
            pb_field(&mut list, 2, it);
        }
        assert!(body.len() < fake::pb_envelope("v1", "ConfigMapList", &list).len());
        fake::pb_envelope("v1", "ConfigMapList", &list)
    };
    let inside: Vec<Vec<u8>> = (0..3)
        .map(|i| pb_cmu(&format!("p{i}"), &uid(100 + i, true), "6"))
        .collect();
    // the same list without the echo: client-side, and an object outside dropped
    let mut items = inside.clone();
    items.push(pb_cmu("q", &uid(200, false), "6"));
    for (body, mode, dropped) in [
        (echo_pb(&inside), ShardFilterMode::Server, 0),
        (pb_list_body("7", "", &items), ShardFilterMode::Client, 1),
    ] {
        let (_fake, store, run) = serve(
            |f, s| {
                builder(f, s).config(WatchConfig {
                    wire_format: WireFormat::Auto,
                    ..shard_opts()
                })
            },
            move |r| match (r.is_watch(), r.nth) {
                (false, 0) => Reply::Typed(
                    200,
                    fake::PROTOBUF,
                    vec![bytes::Bytes::from(body.clone())],
                    End::Close,
                ),
                _ => hang(),
            },
        );
        let calls = store.wait_calls(1).await;
        assert_eq!(
            calls,
            [Call::Replace(keys(&["p0", "p1", "p2"]), "7".into())],
            "{mode:?}"
        );
        assert_eq!(run.reflector.shard_filter_mode(), Some(mode));
        assert_eq!(run.reflector.shard_dropped(), dropped, "{mode:?}");
        run.stop().await;
    }
}

/// A metadata-only list never echoes the selector: filtered on the client
/// all the same; `Server` while nothing outside arrived, `Client` once
/// something did.
#[tokio::test(start_paused = true)]
async fn metadata_only_lists_are_filtered_on_the_client() {
    let pom = |name: &str, inside: bool, rv: &str| {
        let mut v = cmu(name, inside, rv);
        v["kind"] = json!("PartialObjectMetadata");
        v["apiVersion"] = json!("meta.k8s.io/v1");
        v.as_object_mut().unwrap().remove("data");
        v
    };
    for with_outside in [false, true] {
        let mut items = vec![pom("a", true, "1"), pom("b", true, "2")];
        if with_outside {
            items.push(pom("z", false, "3"));
        }
        let body = meta_list("3", items);
        let fake = Fake::new(move |r| match (r.is_watch(), r.nth) {
            (false, 0) => Reply::Json(200, body.clone()),
            _ => hang(),
        });
        let (store, builder) = meta_reflector(&fake.client);
        let run = start(builder.config(WatchConfig {
            shard_selector: Some(half()),
            ..opts()
        }));
        store
            .expect_calls(&[Call::Replace(keys(&["a", "b"]), "3".into())])
            .await;
        assert!(fake.lists()[0].q("shardSelector").is_some());
        let expect = if with_outside {
            ShardFilterMode::Client
        } else {
            ShardFilterMode::Server
        };
        assert_eq!(run.reflector.shard_filter_mode(), Some(expect));
        run.stop().await;
    }
}

/// A selector the apiserver rejects (`500 invalid shard selector`, on a
/// list, a streaming list and a watch alike) is a
/// `ShardSelectorRejected` error naming the selector, retried after
/// backoff steps (800 ms, 1.6 s, 3.2 s...), never in a hot loop and never
/// taken for "streaming lists unsupported".
#[tokio::test(start_paused = true)]
async fn rejected_selector_is_a_clear_error_retried_with_backoff() {
    let reject = || {
        status(
            500,
            "",
            "invalid shard selector: hex value must be 16 digits",
        )
    };
    for watch_list in [false, true] {
        let (fake, _store, run) = serve(
            |f, s| {
                builder(f, s).config(WatchConfig {
                    use_watch_list: watch_list,
                    ..shard_opts()
                })
            },
            move |_| reject(),
        );
        let reqs = fake.wait_requests(4).await;
        let gaps: Vec<u64> = reqs
            .windows(2)
            .map(|w| (w[1].at - w[0].at).as_millis() as u64)
            .collect();
        assert_eq!(gaps[..3], [800, 1600, 3200], "watch_list={watch_list}");
        // a streaming list keeps being tried: the rejection is not a 400/422
        // "unsupported" answer
        assert!(reqs.iter().all(|r| r.is_watch() == watch_list), "{reqs:?}");
        let seen = run.errors();
        assert!(seen.len() >= 3);
        for SeenError {
            reason,
            message: msg,
            shard_rejected,
            ..
        } in &seen
        {
            assert!(shard_rejected, "{msg}");
            assert_eq!(*reason, ErrorReason::Api);
            assert!(msg.contains(&half().to_string()), "{msg}");
            assert!(msg.contains("rejected the shard selector"), "{msg}");
            assert!(msg.contains("hex value must be 16 digits"), "{msg}");
        }
        assert!(!run.reflector.has_synced());
        run.stop().await;
    }

    // rejected when opening the watch after a good list: a relist after a
    // backoff step, then the watch again
    let (fake, _store, run) = serve(builder, move |r| match (r.is_watch(), r.nth) {
        (false, _) => page("5", "", None, vec![cmu("a", true, "1")]),
        (true, _) => reject(),
    });
    let reqs = fake.wait_requests(6).await;
    let kinds: Vec<bool> = reqs.iter().map(|r| r.is_watch()).collect();
    assert_eq!(kinds[..6], [false, true, false, true, false, true]);
    assert!(run.errors().iter().all(|e| e.shard_rejected));
    assert!(reqs[2].at - reqs[1].at >= Duration::from_millis(800));
    run.stop().await;
}
