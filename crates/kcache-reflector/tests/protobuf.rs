//! Protobuf on the wire against the scripted fake apiserver (paused
//! clock): content negotiation per resource, protobuf lists read as they
//! arrive, watch frames, bookmarks, errors, and the JSON fallbacks.

mod common;
use kcache_testing::fake;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{
    Call, RecordingStore, Running, cutting_managed_fields, meta_list, meta_reflector, no_jitter,
    opts, serve, widget_reflector, wl_opts,
};
use fake::{
    End, Fake, PROTOBUF_WATCH, Recorded, Reply, bookmark, cm, ev, hang, list, pb_bookmark, pb_cm,
    pb_cmu, pb_error_event, pb_ev, pb_field, pb_list, pb_list_body, pb_status, pb_watch,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_core::Format;
use kcache_reflector::{
    BadEventKind, ErrorReason, Reflector, ReflectorBuilder, WatchConfig, WireFormat,
};
use kube::api::{ApiResource, DynamicObject};
use serde_json::json;

type Store = RecordingStore<ConfigMap>;

const ACCEPT_LIST: &str = "application/vnd.kubernetes.protobuf, application/json";
const ACCEPT_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch, application/json";

/// Runs the reflector (without backoff jitter).
fn start<K: kube::Resource + 'static>(b: ReflectorBuilder<K>) -> Running<K> {
    common::start(b.backoff(no_jitter()))
}

fn builder(fake: &Fake, store: &Arc<Store>) -> ReflectorBuilder<ConfigMap> {
    Reflector::<ConfigMap>::builder(fake.client.clone(), store.clone())
        .config(wl_opts())
        .backoff(no_jitter())
}

/// [`builder`] without streaming lists: list + watch.
fn list_builder(fake: &Fake, store: &Arc<Store>) -> ReflectorBuilder<ConfigMap> {
    builder(fake, store).config(opts())
}

fn keys(ks: &[&str]) -> Vec<String> {
    ks.iter().map(|k| format!("ns/{k}")).collect()
}

fn accept(r: &Recorded) -> Option<&str> {
    r.header("accept")
}

/// The typed value of a cached object equals the one of the same
/// ConfigMap sent as JSON.
fn same_as_json(store: &Store, name: &str, rv: &str) {
    let obj = store.object(&format!("ns/{name}")).unwrap();
    assert_eq!(obj.format(), Format::Protobuf, "{name}");
    let want: ConfigMap = serde_json::from_value(cm(name, rv)).unwrap();
    assert_eq!(obj.decode().unwrap(), want, "{name}");
    assert_eq!(obj.resource_version(), Some(rv));
}

/// A frame whose length prefix is sound but whose `WatchEvent` is not
/// (its type field claims more bytes than the frame has).
fn malformed_frame() -> Vec<u8> {
    let ev = [0x0a, 0xff, 0xff, 0x03, b'A'];
    frame(ev.len() as u32, &ev)
}

/// A watch frame by hand: the 4-byte big-endian length prefix `announced`
/// (whatever `body`'s length), then `body`.
fn frame(announced: u32, body: &[u8]) -> Vec<u8> {
    [&announced.to_be_bytes()[..], body].concat()
}

/// A ConfigMap without a name (no key: not a usable object).
fn nameless() -> Vec<u8> {
    let mut meta = Vec::new();
    pb_field(&mut meta, 6, b"9");
    let mut cm = Vec::new();
    pb_field(&mut cm, 1, &meta);
    cm
}

/// Watch events as protobuf frames, cut into 7-byte chunks: a streaming
/// list (initial events, a bookmark that does not end it, the
/// initial-events-end bookmark: one `replace`), then events, a malformed
/// frame and a nameless object (each reported as a bad event and skipped),
/// a bookmark, and an ERROR frame with a 410 Status: a relist. The second
/// streaming list ends with a frame over `max_event_size`: refused on its
/// length prefix, a relist.
#[tokio::test(start_paused = true)]
async fn protobuf_watch_errors_and_bookmarks() {
    let (fake, store, run) = serve(
        |f, s| {
            builder(f, s).config(WatchConfig {
                limits: kcache_reflector::Limits {
                    max_event_size: 4096,
                    ..Default::default()
                },
                ..wl_opts()
            })
        },
        |r| match (r.is_watch(), r.nth) {
            (true, 0) => pb_watch(
                vec![
                    pb_ev("ADDED", &pb_cm("a", "1")),
                    pb_ev("ADDED", &pb_cm("b", "2")),
                    pb_bookmark("2", false),
                    pb_ev("MODIFIED", &pb_cm("a", "3")),
                    pb_bookmark("3", true),
                    malformed_frame(),
                    pb_ev("ADDED", &nameless()),
                    pb_ev("ADDED", &pb_cm("c", "4")),
                    pb_bookmark("5", false),
                    pb_error_event(410, "Expired"),
                ],
                7,
                End::Hang,
            ),
            (true, 1) => {
                let mut frames = vec![
                    pb_ev("ADDED", &pb_cm("a", "6")),
                    pb_ev("ADDED", &pb_cm("b", "2")),
                    pb_ev("ADDED", &pb_cm("c", "4")),
                    pb_bookmark("6", true),
                    pb_ev("DELETED", &pb_cm("a", "7")),
                ];
                // a frame announcing 1 MiB: over the 4 KiB limit
                frames.push(frame(1 << 20, &[0x0a; 64]));
                pb_watch(frames, 0, End::Hang)
            }
            _ => hang(),
        },
    );
    let calls = store
        .wait_until(Duration::from_secs(3600), |c| {
            c.iter().filter(|c| matches!(c, Call::Replace(..))).count() == 2
                && c.iter().any(|c| matches!(c, Call::Delete(..)))
        })
        .await;
    assert_eq!(
        calls[..4],
        [
            Call::Replace(keys(&["a", "b"]), "3".into()),
            Call::Add("ns/c".into(), "4".into()),
            Call::Bookmark("5".into()),
            Call::Replace(keys(&["a", "b", "c"]), "6".into()),
        ]
    );
    assert_eq!(calls[4], Call::Delete("ns/a".into(), "7".into()));
    fake.wait_requests(3).await;
    let watches = fake.watches();
    assert_eq!(watches[0].q("sendInitialEvents"), Some("true"));
    assert_eq!(watches[1].q("sendInitialEvents"), Some("true"));
    assert_eq!(watches[1].rv(), Some("5"), "the relist after the 410");
    for w in &watches {
        assert_eq!(accept(w), Some(ACCEPT_WATCH));
    }
    assert!(fake.lists().is_empty());
    assert_eq!(
        run.reasons(),
        [
            ErrorReason::BadEvent,
            ErrorReason::BadEvent,
            ErrorReason::Expired,
            ErrorReason::EventTooLarge,
        ]
    );
    assert_eq!(
        run.bad_kinds(),
        [BadEventKind::Undecodable, BadEventKind::InvalidObject]
    );
    let msgs = run.messages();
    assert!(msgs[0].contains("protobuf"), "{}", msgs[0]);
    assert!(msgs[2].contains("410 Expired"), "{}", msgs[2]);
    assert!(msgs[3].contains("larger than 4096 bytes"), "{}", msgs[3]);
    // every object decodes to what its JSON decodes to
    same_as_json(&store, "b", "2");
    same_as_json(&store, "c", "4");
    run.stop().await;
}

/// A paged protobuf list, each page cut into small chunks: items become
/// protobuf cached objects as they arrive, a nameless item and an item of
/// malformed protobuf are reported and skipped (the length prefixes still
/// frame the rest), a protobuf `410` Status relists at the last RV, a page
/// cut short inside an item fails as an invalid list.
#[tokio::test(start_paused = true)]
async fn protobuf_list_pages_items_and_errors() {
    let (fake, store, run) = serve(list_builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => pb_list("10", "c1", &[pb_cm("a", "1"), pb_cm("b", "2")], 5),
        (false, 1) => pb_list(
            "10",
            "",
            &[
                pb_cm("c", "3"),
                nameless(),
                vec![0x0a, 0xff],
                pb_cm("d", "4"),
            ],
            3,
        ),
        (true, 0) => pb_status(410, "Expired", "too old resource version"),
        (false, 2) => {
            let body = pb_list_body("11", "", &[pb_cm("a", "5"), pb_cm("e", "11")]);
            let cut = body.len() - 20;
            Reply::Typed(
                200,
                fake::PROTOBUF,
                vec![Bytes::copy_from_slice(&body[..cut])],
                End::Close,
            )
        }
        (false, 3) => pb_list("11", "", &[pb_cm("a", "5"), pb_cm("e", "11")], 1000),
        _ => hang(),
    });
    store
        .expect_calls(&[
            Call::Replace(keys(&["a", "b", "c", "d"]), "10".into()),
            Call::Replace(keys(&["a", "e"]), "11".into()),
        ])
        .await;
    let lists = fake.lists();
    assert_eq!(lists[1].q("continue"), Some("c1"));
    assert_eq!(lists[2].rv(), Some("10"), "relist at the last RV");
    assert_eq!(lists[2].q("limit"), Some("500"), "the first list was paged");
    for r in fake.requests() {
        let want = if r.is_watch() {
            ACCEPT_WATCH
        } else {
            ACCEPT_LIST
        };
        assert_eq!(accept(&r), Some(want), "{r:?}");
    }
    assert_eq!(
        run.reasons(),
        [
            ErrorReason::BadEvent,
            ErrorReason::BadEvent,
            ErrorReason::Expired,
            ErrorReason::InvalidList,
        ]
    );
    assert_eq!(
        run.bad_kinds(),
        [BadEventKind::InvalidObject, BadEventKind::InvalidObject]
    );
    assert!(
        run.messages()[3].contains("protobuf"),
        "{:?}",
        run.messages()
    );
    same_as_json(&store, "a", "5");
    same_as_json(&store, "e", "11");
    run.stop().await;
}

/// The byte cap and the body deadlines of a list apply to a protobuf list
/// read as it arrives exactly as to a JSON one: over the cap, reading stops
/// at the chunk that passes it; a stalled body times out.
#[tokio::test(start_paused = true)]
async fn protobuf_list_byte_cap_and_stall() {
    let items: Vec<Vec<u8>> = (0..40).map(|i| pb_cm(&format!("c{i}"), "1")).collect();
    let body = pb_list_body("1", "", &items);
    let total = body.len();
    let (_fake, store, run) = serve(
        |f, s| {
            builder(f, s).config(WatchConfig {
                limits: kcache_reflector::Limits {
                    max_list_page_bytes: total - 1,
                    ..Default::default()
                },
                ..opts()
            })
        },
        move |r| match (r.is_watch(), r.nth) {
            (false, 0) => Reply::Typed(
                200,
                fake::PROTOBUF,
                body.chunks(512).map(Bytes::copy_from_slice).collect(),
                End::Hang,
            ),
            (false, 1) => Reply::Typed(
                200,
                fake::PROTOBUF,
                vec![Bytes::copy_from_slice(&body[..100])],
                End::Hang,
            ),
            (false, 2) => pb_list("1", "", &[pb_cm("a", "1")], 64),
            _ => hang(),
        },
    );
    store
        .expect_calls(&[Call::Replace(keys(&["a"]), "1".into())])
        .await;
    assert_eq!(
        run.reasons(),
        [ErrorReason::ListPageTooLarge, ErrorReason::Timeout]
    );
    run.stop().await;
}

/// Content negotiation: protobuf is asked for built-in types only (CBOR
/// for custom resources); a JSON answer to a protobuf request is read as
/// JSON, and the reflector asks for JSON from then on (one log line, no
/// retry); forced JSON and metadata-only reflectors never ask for a binary
/// format; a `DynamicObject` of a built-in type gets protobuf and decodes
/// to what its JSON decodes to.
#[tokio::test(start_paused = true)]
async fn content_negotiation_per_resource() {
    // a built-in type answered in JSON
    let (fake, store, run) = serve(list_builder, |r| match (r.is_watch(), r.nth) {
        (false, 0) => list("1", "", vec![cm("a", "1")]),
        (true, 0) => Reply::Stream(vec![ev("ADDED", cm("b", "2"))], End::Hang),
        _ => hang(),
    });
    store.wait_calls(2).await;
    assert_eq!(run.reflector.asks_for(), Format::Json, "answered JSON");
    let reqs = fake.requests();
    assert_eq!(accept(&reqs[0]), Some(ACCEPT_LIST));
    assert_eq!(accept(&reqs[1]), None, "JSON after a JSON answer");
    for k in ["a", "b"] {
        assert_eq!(
            store.object(&format!("ns/{k}")).unwrap().format(),
            Format::Json
        );
    }
    assert!(run.reasons().is_empty(), "{:?}", run.messages());
    run.stop().await;

    // JSON forced: no protobuf asked, a protobuf answer is still read
    let (fake, store, run) = serve(
        |f, s| {
            builder(f, s).config(WatchConfig {
                wire_format: WireFormat::Json,
                ..opts()
            })
        },
        |r| match (r.is_watch(), r.nth) {
            (false, 0) => pb_list("1", "", &[pb_cm("a", "1")], 100),
            (true, 0) => Reply::Stream(vec![ev("ADDED", cm("b", "2"))], End::Hang),
            _ => hang(),
        },
    );
    store.wait_calls(2).await;
    assert_eq!(run.reflector.asks_for(), Format::Json);
    for r in fake.requests() {
        assert_eq!(accept(&r), None, "{r:?}");
    }
    assert_eq!(store.object("ns/a").unwrap().format(), Format::Protobuf);
    run.stop().await;

    // a custom resource: CBOR asked, with JSON as the fallback; a JSON
    // answer (an apiserver without CBORServingAndStorage) makes the
    // reflector ask for JSON from then on
    let fake = Fake::new(|r| {
        match (r.is_watch(), r.nth) {
        (false, 0) => Reply::Json(
            200,
            json!({"kind":"WidgetList","apiVersion":"example.com/v1","metadata":{"resourceVersion":"3"},"items":[]}).to_string(),
        ),
        _ => hang(),
    }
    });
    let (store, builder) = widget_reflector(&fake.client);
    let run = start(builder.config(WatchConfig {
        use_watch_list: false,
        ..WatchConfig::default()
    }));
    store.wait_calls(1).await;
    let reqs = fake.wait_requests(2).await;
    assert_eq!(run.reflector.asks_for(), Format::Json);
    assert_eq!(accept(&reqs[0]), Some("application/cbor, application/json"));
    for r in &reqs[1..] {
        assert_eq!(accept(r), None, "{r:?}");
    }
    run.stop().await;

    // metadata-only: its own content type
    let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
        (false, 0) => Reply::Json(200, meta_list("3", vec![])),
        _ => hang(),
    });
    let (store, builder) = meta_reflector(&fake.client);
    let run = start(builder);
    store.wait_calls(1).await;
    fake.wait_requests(2).await;
    assert_eq!(run.reflector.asks_for(), Format::Json);
    let reqs = fake.requests();
    assert_eq!(
        accept(&reqs[0]),
        Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
    );
    assert_eq!(
        accept(&reqs[1]),
        Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
    );
    run.stop().await;

    // a DynamicObject of a built-in type: protobuf, same value as JSON
    let fake = Fake::new(|r| match (r.is_watch(), r.nth) {
        (false, 0) => pb_list("1", "", &[pb_cmu("a", "u-a", "1")], 9),
        (true, 0) => pb_watch(vec![pb_ev("ADDED", &pb_cmu("b", "u-b", "2"))], 0, End::Hang),
        _ => hang(),
    });
    let store = Arc::new(RecordingStore::<DynamicObject>::default());
    let ar = ApiResource::erase::<ConfigMap>(&());
    let run = start(
        Reflector::<DynamicObject>::builder_with(fake.client.clone(), store.clone(), ar)
            .config(cutting_managed_fields(opts())),
    );
    store.wait_calls(2).await;
    assert_eq!(run.reflector.asks_for(), Format::Protobuf);
    for (name, uid, rv) in [("a", "u-a", "1"), ("b", "u-b", "2")] {
        let obj = store.object(&format!("ns/{name}")).unwrap();
        assert_eq!(obj.format(), Format::Protobuf);
        let mut json = cm(name, rv);
        json["metadata"]["uid"] = uid.into();
        json["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        let want: DynamicObject = serde_json::from_value(json).unwrap();
        let got = obj.decode().unwrap();
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            serde_json::to_value(&want).unwrap(),
            "{name}"
        );
    }
    assert!(run.reasons().is_empty(), "{:?}", run.messages());
    run.stop().await;
}

/// A server (or a proxy that dropped the JSON fallback from `Accept`)
/// answering `406 Not Acceptable` to protobuf: the request is sent again
/// at once without it, and the reflector asks for JSON from then on; the
/// 406 is not an error of the reflector.
#[tokio::test(start_paused = true)]
async fn a_406_to_protobuf_falls_back_to_json() {
    let (fake, store, run) = serve(builder, |r| {
        if r.header("accept").is_some_and(|a| a.contains("protobuf")) {
            return Reply::Json(
                406,
                fake::status_json(406, "NotAcceptable", "only application/json is served"),
            );
        }
        match (r.is_watch(), r.nth) {
            (true, 1) => Reply::Stream(
                vec![ev("ADDED", cm("a", "1")), bookmark("1", true)],
                End::Close,
            ),
            _ => hang(),
        }
    });
    store.wait_calls(1).await;
    assert_eq!(store.calls()[0], Call::Replace(keys(&["a"]), "1".into()));
    assert_eq!(run.reflector.asks_for(), Format::Json);
    let reqs = fake.wait_requests(3).await;
    assert_eq!(accept(&reqs[0]), Some(ACCEPT_WATCH));
    assert_eq!(accept(&reqs[1]), None, "sent again without protobuf");
    assert_eq!(reqs[1].at, reqs[0].at, "at once");
    assert_eq!(reqs[1].q("sendInitialEvents"), Some("true"));
    for r in &reqs[1..] {
        assert_eq!(accept(r), None, "{r:?}");
    }
    assert!(run.reasons().is_empty(), "{:?}", run.messages());
    assert!(
        reqs.iter()
            .all(|r| r.header("accept") != Some(PROTOBUF_WATCH)),
        "never protobuf alone"
    );
    run.stop().await;
}
