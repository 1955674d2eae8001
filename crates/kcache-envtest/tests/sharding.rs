//! Server-side sharded list and watch (KEP-5866, feature gate
//! `ShardedListAndWatch`) on the local control plane, checked object by
//! object against kcache-core's [`ShardSelector`].
//!
//! Run with `--nocapture` to see the figures (objects per range, the
//! apiserver's answers to rejected selectors).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt as _, StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_core::{
    CachedObject, HASH_SPACE_END, MAX_QUERY_VALUE_LEN, Metadata, ShardField, ShardRange,
    ShardSelector, ShardSlots,
};
use kcache_envtest::ControlPlane;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const LABEL: &str = "kcache-shard-test";
/// Deadline of one request or one wait for watch events (a failure, not a
/// measurement).
const DEADLINE: Duration = Duration::from_secs(120);

/// One object as the client sees it: kcache-core's metadata.
#[derive(Debug, Clone)]
struct Obj {
    uid: String,
    namespace: String,
    meta: Metadata,
}

fn obj(item: &Value) -> Obj {
    let cached = CachedObject::<()>::from_bytes(serde_json::to_vec(item).unwrap()).unwrap();
    Obj {
        uid: cached.uid().unwrap().to_owned(),
        namespace: cached.namespace().unwrap_or("").to_owned(),
        meta: cached.meta().clone(),
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

struct Answer {
    status: u16,
    body: Value,
}

/// A raw GET (kube's `ListParams` has no `shardSelector`): status and body.
async fn get_bytes(client: &Client, path: &str, accept: &str) -> (u16, bytes::Bytes) {
    let req = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty())
        .unwrap();
    let answer = async {
        let resp = client.send(req).await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.into_body().collect_bytes().await.unwrap())
    };
    tokio::time::timeout(DEADLINE, answer)
        .await
        .unwrap_or_else(|_| panic!("GET {path}: no answer within {DEADLINE:?}"))
}

/// [`get_bytes`] as JSON.
async fn get(client: &Client, path: &str) -> Answer {
    let (status, body) = get_bytes(client, path, "application/json").await;
    Answer {
        status,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    }
}

/// Whether `/metrics` reports the gate enabled (`kubernetes_feature_enabled`).
async fn gate_enabled(client: &Client) -> bool {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = tokio::time::timeout(DEADLINE, client.request_text(req))
        .await
        .unwrap()
        .unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("kubernetes_feature_enabled{")
                && l.contains("name=\"ShardedListAndWatch\"")
        })
        .expect("kubernetes_feature_enabled for ShardedListAndWatch in /metrics");
    line.ends_with(" 1")
}

#[derive(Clone, Copy, Debug)]
enum ListMode {
    /// Consistent list (no resourceVersion), 500 per page, following `continue`.
    Paged,
    /// `resourceVersion=0`: served whole from the watch cache.
    Cache,
}

struct Listed {
    items: Vec<Obj>,
    /// `metadata.shardInfo.selector` of each page (`None`: absent).
    echoes: Vec<Option<String>>,
    resource_version: String,
}

/// Lists our ConfigMaps; `shard` is the `shardSelector` query value, encoded.
async fn list(client: &Client, run: &str, shard: Option<&str>, mode: ListMode) -> Listed {
    let mut base = format!(
        "/api/v1/configmaps?labelSelector={}",
        enc(&format!("{LABEL}={run}"))
    );
    if let Some(s) = shard {
        base.push_str(&format!("&shardSelector={s}"));
    }
    match mode {
        ListMode::Paged => base.push_str("&limit=500"),
        ListMode::Cache => base.push_str("&resourceVersion=0"),
    }
    let mut listed = Listed {
        items: Vec::new(),
        echoes: Vec::new(),
        resource_version: String::new(),
    };
    let mut cont: Option<String> = None;
    loop {
        let path = match &cont {
            Some(c) => format!("{base}&continue={}", enc(c)),
            None => base.clone(),
        };
        let a = get(client, &path).await;
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        let meta = &a.body["metadata"];
        listed
            .echoes
            .push(meta["shardInfo"]["selector"].as_str().map(str::to_owned));
        if meta.get("shardInfo").is_some() {
            assert!(meta["shardInfo"]["selector"].is_string(), "{meta}");
        }
        listed.resource_version = meta["resourceVersion"].as_str().unwrap().to_owned();
        listed
            .items
            .extend(a.body["items"].as_array().unwrap().iter().map(obj));
        cont = meta["continue"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        if cont.is_none() {
            return listed;
        }
    }
}

/// Lists `sel` both ways and checks the server's answer object by object
/// against the client-side function; returns the uids served.
async fn check_selector(
    client: &Client,
    run: &str,
    name: &str,
    sel: &ShardSelector,
    all: &BTreeMap<String, Obj>,
) -> BTreeSet<String> {
    let expected: BTreeSet<String> = all
        .values()
        .filter(|o| sel.matches(&o.meta))
        .map(|o| o.uid.clone())
        .collect();
    let text = sel.to_string();
    let mut served = BTreeSet::new();
    for mode in [ListMode::Paged, ListMode::Cache] {
        let listed = list(client, run, Some(&sel.to_query_value()), mode).await;
        for echo in &listed.echoes {
            assert_eq!(
                echo.as_deref(),
                Some(text.as_str()),
                "{name} {mode:?}: echo"
            );
            assert_eq!(
                &ShardSelector::parse(echo.as_deref().unwrap()).unwrap(),
                sel
            );
        }
        let got: BTreeSet<String> = listed.items.iter().map(|o| o.uid.clone()).collect();
        assert_eq!(got.len(), listed.items.len(), "{name} {mode:?}: duplicates");
        for o in &listed.items {
            let h = sel.field().hash(&o.meta);
            assert!(
                sel.matches(&o.meta),
                "{name} {mode:?}: the server served {}/{} (uid {}, hash {h:#018x}) outside {sel}",
                o.namespace,
                o.meta.name(),
                o.uid
            );
        }
        let missing: Vec<_> = expected.difference(&got).collect();
        assert!(
            missing.is_empty(),
            "{name} {mode:?}: the client puts {} objects in {sel} that the server did not serve: {missing:?}",
            missing.len()
        );
        println!(
            "{name} {mode:?}: {} objects in {} page(s), {} ranges, echo ok",
            got.len(),
            listed.echoes.len(),
            sel.ranges().len()
        );
        served = got;
    }
    served
}

fn check_partition(name: &str, parts: &[BTreeSet<String>], all: &BTreeMap<String, Obj>) {
    let union: BTreeSet<String> = parts.iter().flatten().cloned().collect();
    let total: usize = parts.iter().map(BTreeSet::len).sum();
    assert_eq!(total, union.len(), "{name}: the parts overlap");
    assert_eq!(
        union,
        all.keys().cloned().collect::<BTreeSet<_>>(),
        "{name}: the union is not everything"
    );
    let sizes: Vec<usize> = parts.iter().map(BTreeSet::len).collect();
    println!("{name}: partition of {total} objects, sizes {sizes:?}");
}

fn config_map(name: &str, run: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { LABEL: run } },
        "data": { "k": "v" }
    }))
    .unwrap()
}

/// Creates `per_ns` ConfigMaps in every namespace, 32 requests in flight;
/// returns the created objects.
async fn create_config_maps(
    client: &Client,
    namespaces: &[String],
    per_ns: usize,
    prefix: &str,
    run: &str,
) -> Vec<Obj> {
    let jobs: Vec<(String, String)> = namespaces
        .iter()
        .flat_map(|ns| (0..per_ns).map(move |i| (ns.clone(), format!("{prefix}-{i:03}"))))
        .collect();
    let created = futures::stream::iter(jobs)
        .map(|(ns, name)| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
            async move {
                let cm = api
                    .create(&PostParams::default(), &config_map(&name, run))
                    .await?;
                Ok::<_, kube::Error>(obj(&serde_json::to_value(&cm).unwrap()))
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>();
    tokio::time::timeout(DEADLINE * 3, created)
        .await
        .expect("creating the ConfigMaps in time")
        .unwrap()
}

/// One watch event: which watch, its type and the object (or the bookmark).
type Event = (usize, String, Value);

/// Opens a raw watch and forwards its events, tagged `idx`, to `tx`.
async fn spawn_watch(client: &Client, idx: usize, path: String, tx: mpsc::Sender<Event>) {
    let req = http::Request::get(path.as_str()).body(Vec::new()).unwrap();
    let reader = tokio::time::timeout(DEADLINE, client.request_stream(req))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("watch {path}: {e}"));
    tokio::spawn(async move {
        let mut lines = Box::pin(reader.lines());
        while let Some(Ok(line)) = lines.next().await {
            let ev: Value = serde_json::from_str(&line).unwrap();
            let kind = ev["type"].as_str().unwrap_or("").to_owned();
            if tx.send((idx, kind, ev["object"].clone())).await.is_err() {
                return;
            }
        }
    });
}

async fn next_event(rx: &mut mpsc::Receiver<Event>, waiting_for: &str) -> Event {
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .unwrap_or_else(|_| {
            panic!("no watch event within {DEADLINE:?} while waiting for {waiting_for}")
        })
        .expect("watch streams open")
}

/// The apiserver's answer to a selector it rejects, on a list and on a watch.
async fn rejected(client: &Client, run: &str, selector: &str) -> (Answer, Answer) {
    let q = format!(
        "labelSelector={}&shardSelector={}",
        enc(&format!("{LABEL}={run}")),
        enc(selector)
    );
    let list = get(client, &format!("/api/v1/configmaps?{q}")).await;
    let watch = get(
        client,
        &format!("/api/v1/configmaps?watch=true&timeoutSeconds=1&{q}"),
    )
    .await;
    (list, watch)
}

fn describe(a: &Answer) -> String {
    format!(
        "HTTP {} reason={:?} message={:?}",
        a.status, a.body["reason"], a.body["message"]
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_hash_matches_the_apiserver() {
    let started = Instant::now();
    let cp = ControlPlane::builder().start().await.unwrap();
    let client = cp.client().unwrap();
    assert!(gate_enabled(&client).await, "the gate is on by default");
    let run = format!("{:08x}", rand_suffix());

    // 2,000 ConfigMaps over 40 namespaces
    let mut namespaces = Vec::new();
    for i in 0..40 {
        namespaces.push(cp.create_namespace(&format!("shard{i:02}")).await.unwrap());
    }
    create_config_maps(&client, &namespaces, 50, "cm", &run).await;
    let unfiltered = list(&client, &run, None, ListMode::Paged).await;
    assert!(
        unfiltered.echoes.iter().all(Option::is_none),
        "no shardInfo without a shard selector"
    );
    let all: BTreeMap<String, Obj> = unfiltered
        .items
        .into_iter()
        .map(|o| (o.uid.clone(), o))
        .collect();
    assert_eq!(all.len(), 2000);
    println!(
        "created and listed {} objects in {} namespaces ({:.1?} since start)",
        all.len(),
        namespaces.len(),
        started.elapsed()
    );

    // uid: 8 contiguous ranges
    let mut parts = Vec::new();
    for (i, sel) in ShardSelector::contiguous(ShardField::Uid, 8)
        .unwrap()
        .iter()
        .enumerate()
    {
        parts.push(check_selector(&client, &run, &format!("uid 8ths #{i}"), sel, &all).await);
    }
    check_partition("uid 8 contiguous ranges", &parts, &all);

    // uid: several ranges per member (16 slots over 3 members)
    let slots = ShardSlots::new(16).unwrap();
    let by_member = slots
        .selectors_by_owner(ShardField::Uid, |s| (s * 5) % 3)
        .unwrap();
    let mut parts = Vec::new();
    for (m, sel) in &by_member {
        parts
            .push(check_selector(&client, &run, &format!("uid slots member {m}"), sel, &all).await);
    }
    check_partition("uid 16 slots over 3 members", &parts, &all);

    // uid boundaries: one object's exact hash h; [h, h+1) holds it,
    // [0, h) || [h+1, 2^64) everything else (start inclusive, end exclusive,
    // the last range reaching 2^64)
    let probe = all.values().nth(all.len() / 2).unwrap();
    let h = ShardField::Uid.hash(&probe.meta);
    let exact = ShardSelector::single(
        ShardField::Uid,
        ShardRange::new(h, u128::from(h) + 1).unwrap(),
    );
    let rest = ShardSelector::new(
        ShardField::Uid,
        [
            ShardRange::new(0, u128::from(h)).unwrap(),
            ShardRange::new(h + 1, HASH_SPACE_END).unwrap(),
        ],
    )
    .unwrap();
    let one = check_selector(&client, &run, "uid [h, h+1)", &exact, &all).await;
    assert_eq!(one, BTreeSet::from([probe.uid.clone()]));
    let others = check_selector(&client, &run, "uid [0, h) || [h+1, 2^64)", &rest, &all).await;
    check_partition("uid one hash and the rest", &[one, others], &all);

    // namespace: 4 contiguous ranges
    let mut parts = Vec::new();
    for (i, sel) in ShardSelector::contiguous(ShardField::Namespace, 4)
        .unwrap()
        .iter()
        .enumerate()
    {
        let served =
            check_selector(&client, &run, &format!("namespace 4ths #{i}"), sel, &all).await;
        let ns: BTreeSet<&str> = served.iter().map(|u| all[u].namespace.as_str()).collect();
        println!("  namespaces in #{i}: {}", ns.len());
        parts.push(served);
    }
    check_partition("namespace 4 contiguous ranges", &parts, &all);
    // namespace: one namespace's exact hash holds its 50 objects
    let ns0 = &namespaces[0];
    let h = kcache_core::shard_hash(ns0.as_bytes());
    let exact = ShardSelector::single(
        ShardField::Namespace,
        ShardRange::new(h, u128::from(h) + 1).unwrap(),
    );
    let served = check_selector(&client, &run, "namespace [h, h+1)", &exact, &all).await;
    assert_eq!(served.len(), 50);
    assert!(served.iter().all(|u| all[u].namespace == *ns0));

    // the longest selector kcache-core builds (its query value within
    // MAX_QUERY_VALUE_LEN, so the request URI stays under the 65,534 bytes
    // of the http crate): 659 uid ranges
    let wide = ShardSlots::new(4096).unwrap();
    let longest = wide
        .selector(ShardField::Uid, (0..659).map(|i| i * 2))
        .unwrap();
    assert!(longest.to_query_value().len() <= MAX_QUERY_VALUE_LEN);
    check_selector(&client, &run, "uid 659 ranges", &longest, &all).await;

    // other encodings of a filtered list, for the reflector's decoders:
    // protobuf carries the echo as ListMeta field 5 (ShardInfo, selector
    // field 1); a metadata-only list (PartialObjectMetadataList) is filtered
    // but carries NO shardInfo (the apiserver copies only resourceVersion,
    // continue and remainingItemCount into it)
    let quarter = &ShardSelector::contiguous(ShardField::Uid, 4).unwrap()[1];
    let expected: BTreeSet<String> = all
        .values()
        .filter(|o| quarter.matches(&o.meta))
        .map(|o| o.uid.clone())
        .collect();
    let path = format!(
        "/api/v1/configmaps?labelSelector={}&shardSelector={}",
        enc(&format!("{LABEL}={run}")),
        quarter.to_query_value()
    );
    let (status, pb) = get_bytes(&client, &path, "application/vnd.kubernetes.protobuf").await;
    assert_eq!(status, 200);
    let text = quarter.to_string();
    assert!(text.len() < 126, "one-byte protobuf lengths");
    let mut echo = vec![0x2a, text.len() as u8 + 2, 0x0a, text.len() as u8];
    echo.extend_from_slice(text.as_bytes());
    assert!(
        pb.windows(echo.len()).any(|w| w == echo.as_slice()),
        "protobuf ListMeta.shardInfo (field 5) echoes the selector"
    );
    let (status, body) = get_bytes(
        &client,
        &path,
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .await;
    assert_eq!(status, 200);
    let partial: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(partial["kind"], "PartialObjectMetadataList");
    let got: BTreeSet<String> = partial["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["uid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, expected, "a metadata-only list is filtered");
    assert!(
        partial["metadata"].get("shardInfo").is_none(),
        "a metadata-only list has no shardInfo: {}",
        partial["metadata"]
    );
    println!(
        "uid 4ths #1: protobuf echo in ListMeta field 5; metadata-only list filtered ({} objects) without shardInfo",
        got.len()
    );

    // selectors the apiserver rejects: a list answers 500 InternalError... see the asserts
    let short_hex = "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')";
    let bad_field = "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')";
    let inverted = "shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')";
    for (what, selector) in [
        ("short hex", short_hex),
        ("unsupported field", bad_field),
        ("inverted", inverted),
    ] {
        let (l, w) = rejected(&client, &run, selector).await;
        let msg = l.body["message"].as_str().unwrap_or("").to_owned();
        println!(
            "rejected {what}: list {} | watch {}",
            describe(&l),
            describe(&w)
        );
        for a in [&l, &w] {
            assert_eq!(a.status, 500, "{what}: {}", describe(a));
            assert_eq!(a.body["kind"], "Status", "{what}");
            assert_eq!(a.body["reason"], Value::Null, "{what}: {}", describe(a));
            let m = a.body["message"].as_str().unwrap();
            assert!(m.starts_with("invalid shard selector: "), "{what}: {m}");
        }
        // and kcache-core rejects it too
        assert!(ShardSelector::parse(selector).is_err(), "{what}: {msg}");
    }

    // WATCH: a streaming list (sendInitialEvents) then live events, with
    // two complementary uid halves and one namespace quarter
    let watches: Vec<ShardSelector> = {
        let mut w = ShardSelector::contiguous(ShardField::Uid, 2).unwrap();
        w.push(
            ShardSelector::contiguous(ShardField::Namespace, 4)
                .unwrap()
                .remove(0),
        );
        w
    };
    let (tx, mut rx) = mpsc::channel::<Event>(4096);
    for (i, sel) in watches.iter().enumerate() {
        let path = format!(
            "/api/v1/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
             &allowWatchBookmarks=true&timeoutSeconds=600&labelSelector={}&shardSelector={}",
            enc(&format!("{LABEL}={run}")),
            sel.to_query_value()
        );
        spawn_watch(&client, i, path, tx.clone()).await;
    }
    drop(tx);
    let mut initial: Vec<BTreeSet<String>> = vec![BTreeSet::new(); watches.len()];
    let mut synced = vec![false; watches.len()];
    while synced.iter().any(|s| !s) {
        let (i, kind, o) = next_event(&mut rx, "the initial events").await;
        match kind.as_str() {
            "ADDED" => {
                assert!(!synced[i]);
                initial[i].insert(obj(&o).uid);
            }
            "BOOKMARK" => {
                if o["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true" {
                    // a streaming list has no list envelope: nothing echoes the selector
                    assert!(!o.to_string().contains("shardRange"), "{o}");
                    if i == 0 {
                        println!("watch 0: initial-events-end bookmark {o}");
                    }
                    synced[i] = true;
                }
            }
            other => panic!("watch {i}: unexpected {other} {o}"),
        }
    }
    for (i, sel) in watches.iter().enumerate() {
        let expected: BTreeSet<String> = all
            .values()
            .filter(|o| sel.matches(&o.meta))
            .map(|o| o.uid.clone())
            .collect();
        assert_eq!(initial[i], expected, "watch {i} ({sel}): initial events");
        println!(
            "watch {i}: {} initial events, as the client filter",
            initial[i].len()
        );
    }
    // live: one new ConfigMap per namespace, then delete them all; once a
    // watch has seen the DELETED of every object the client puts in its
    // range, it has seen every ADDED (they all came earlier)
    let fresh = create_config_maps(&client, &namespaces, 1, "live", &run).await;
    for o in &fresh {
        Api::<ConfigMap>::namespaced(client.clone(), &o.namespace)
            .delete(o.meta.name(), &DeleteParams::default())
            .await
            .unwrap();
    }
    let expected: Vec<BTreeSet<String>> = watches
        .iter()
        .map(|sel| {
            fresh
                .iter()
                .filter(|o| sel.matches(&o.meta))
                .map(|o| o.uid.clone())
                .collect()
        })
        .collect();
    assert!(expected.iter().all(|e| !e.is_empty()));
    let mut added: Vec<BTreeSet<String>> = vec![BTreeSet::new(); watches.len()];
    let mut deleted: Vec<BTreeSet<String>> = vec![BTreeSet::new(); watches.len()];
    while (0..watches.len()).any(|i| !expected[i].is_subset(&deleted[i])) {
        let (i, kind, o) = next_event(&mut rx, "the live events").await;
        match kind.as_str() {
            "ADDED" => {
                added[i].insert(obj(&o).uid);
            }
            "DELETED" => {
                deleted[i].insert(obj(&o).uid);
            }
            "MODIFIED" | "BOOKMARK" => {}
            other => panic!("watch {i}: unexpected {other} {o}"),
        }
    }
    for i in 0..watches.len() {
        assert_eq!(added[i], expected[i], "watch {i} ({}): ADDED", watches[i]);
        assert_eq!(
            deleted[i], expected[i],
            "watch {i} ({}): DELETED",
            watches[i]
        );
        println!(
            "watch {i}: {} of {} live objects added and deleted, as the client filter",
            expected[i].len(),
            fresh.len()
        );
    }
    println!("done in {:.1?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_selector_is_ignored_with_the_gate_off() {
    let cp = ControlPlane::builder()
        .sharded_list_and_watch(false)
        .start()
        .await
        .unwrap();
    let client = cp.client().unwrap();
    assert!(
        !gate_enabled(&client).await,
        "the switch turns the gate off"
    );
    let run = format!("{:08x}", rand_suffix());
    let mut namespaces = Vec::new();
    for i in 0..4 {
        namespaces.push(cp.create_namespace(&format!("off{i}")).await.unwrap());
    }
    create_config_maps(&client, &namespaces, 25, "cm", &run).await;
    let half = &ShardSelector::contiguous(ShardField::Uid, 2).unwrap()[0];
    for mode in [ListMode::Paged, ListMode::Cache] {
        let listed = list(&client, &run, Some(&half.to_query_value()), mode).await;
        assert_eq!(listed.items.len(), 100, "{mode:?}: every object is served");
        assert!(
            listed.items.iter().any(|o| !half.matches(&o.meta)),
            "{mode:?}: objects outside the range are served"
        );
        assert!(
            listed.echoes.iter().all(Option::is_none),
            "{mode:?}: no metadata.shardInfo"
        );
        // a selector the gate-on server rejects is not even parsed
        let bad = "shardRange(object.metadata.uid, '0x0', '0x8')";
        let listed = list(&client, &run, Some(&enc(bad)), mode).await;
        assert_eq!(
            listed.items.len(),
            100,
            "{mode:?}: an invalid selector is ignored"
        );
        assert!(listed.echoes.iter().all(Option::is_none));
    }
    println!("gate off: lists with a shard selector serve all 100 objects, no shardInfo");

    // a watch with the selector delivers every event
    let rv = list(&client, &run, None, ListMode::Paged)
        .await
        .resource_version;
    let (tx, mut rx) = mpsc::channel::<Event>(1024);
    let path = format!(
        "/api/v1/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=600&labelSelector={}&shardSelector={}",
        enc(&format!("{LABEL}={run}")),
        half.to_query_value()
    );
    spawn_watch(&client, 0, path, tx).await;
    let fresh = create_config_maps(&client, &namespaces, 5, "live", &run).await;
    let mut added = BTreeSet::new();
    while added.len() < fresh.len() {
        let (_, kind, o) = next_event(&mut rx, "the live events").await;
        assert_eq!(kind, "ADDED", "{o}");
        added.insert(obj(&o).uid);
    }
    let outside = fresh.iter().filter(|o| !half.matches(&o.meta)).count();
    assert!(outside > 0);
    println!(
        "gate off: the watch delivered all {} ADDED events, {outside} of them outside the range",
        added.len()
    );
}

fn rand_suffix() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.subsec_nanos() ^ std::process::id()
}
