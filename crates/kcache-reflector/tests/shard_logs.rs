//! The shard filter mode reaches the log once (INFO), not at every relist,
//! and again only when it changes. In its own test binary: a global
//! subscriber captures the output.

mod common;
use kcache_testing::fake;
use kcache_testing::logs::LogBuffer;

use std::sync::Arc;

use common::{RecordingStore, opts};
use fake::{End, Fake, Reply, ev, gone};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_core::{ShardField, ShardSelector};
use kcache_reflector::{Reflector, ShardFilterMode, WatchConfig, WireFormat};
use serde_json::{Value, json};

fn cm(name: &str, uid: &str, rv: &str) -> Value {
    json!({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":name,"namespace":"ns","uid":uid,"resourceVersion":rv},"data":{"k":"v"}})
}

fn page(rv: &str, echo: Option<&ShardSelector>, items: Vec<Value>) -> Reply {
    let mut meta = json!({"resourceVersion": rv});
    if let Some(sel) = echo {
        meta["shardInfo"] = json!({"selector": sel.to_string()});
    }
    Reply::Json(
        200,
        json!({"kind":"ConfigMapList","apiVersion":"v1","metadata":meta,"items":items}).to_string(),
    )
}

#[tokio::test(start_paused = true)]
async fn the_shard_filter_mode_is_logged_once_per_change() {
    let logs = LogBuffer::set_global(tracing::Level::INFO);

    let sel = ShardSelector::contiguous(ShardField::Uid, 2).unwrap()[0].clone();
    let outside = (0..)
        .map(|i| format!("uid-{i}"))
        .find(|u| !sel.matches_value(u))
        .unwrap();
    let inside = (0..)
        .map(|i| format!("uid-{i}"))
        .find(|u| sel.matches_value(u))
        .unwrap();
    // three filtered lists (each watch ends in 410: relist), then an
    // event outside the shard on the last watch
    let s2 = sel.clone();
    let fake = Fake::new(move |r| match (r.is_watch(), r.nth) {
        (false, n) => page(
            &format!("{}", 10 + n),
            Some(&s2),
            vec![cm("a", &inside, "1")],
        ),
        (true, 0 | 1) => gone(),
        (true, 2) => Reply::Stream(vec![ev("ADDED", cm("x", &outside, "20"))], End::Hang),
        _ => Reply::Stream(vec![], End::Hang),
    });
    let store = Arc::new(RecordingStore::<ConfigMap>::default());
    let r = Reflector::<ConfigMap>::builder(fake.client.clone(), store)
        .config(WatchConfig {
            wire_format: WireFormat::Json,
            shard_selector: Some(sel.clone()),
            ..opts()
        })
        .build();
    let stop = async {
        fake.wait_requests(6).await;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    r.run_until(stop).await;
    assert_eq!(r.shard_filter_mode(), Some(ShardFilterMode::Client));
    let text = logs.text();
    let modes = logs.lines_with(&["shard_filter="]);
    assert_eq!(modes.len(), 2, "{text}");
    assert!(
        modes[0].contains("INFO") && modes[0].contains("shard_filter=server"),
        "{}",
        modes[0]
    );
    assert!(modes[0].contains(&sel.to_string()), "{}", modes[0]);
    assert!(
        modes[1].contains("INFO") && modes[1].contains("shard_filter=client"),
        "{}",
        modes[1]
    );
    assert!(modes[1].contains("ShardedListAndWatch"), "{}", modes[1]);
}
