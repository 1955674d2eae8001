//! `WatchConfig` reach the informer's reflector: the byte caps and the
//! request deadlines of kcache-reflector.

mod support;

use std::time::Duration;

use kcache_informer::SharedIndexInformer;

use kcache_reflector::WatchConfig;
use kcache_reflector::{ErrorReason, WireFormat};
use kcache_testing::eventually;
use support::{ConfigMap, FakeApi, record_watch_errors, spawn_run};

/// A list page over `max_list_page_bytes` fails with the reflector's typed
/// error, so the setting made it through; the informer does not sync.
#[tokio::test]
async fn list_page_cap_reaches_the_reflector() {
    let api = FakeApi::new();
    api.create("ns", "a", &"x".repeat(2000));
    let (handler, reasons) = record_watch_errors(|e| e.reason());
    let informer = SharedIndexInformer::<ConfigMap>::builder(api.client.clone())
        .config(kcache_informer::InformerConfig {
            watch: WatchConfig {
                use_watch_list: false,
                limits: kcache_reflector::Limits {
                    max_list_page_bytes: 1000,
                    ..Default::default()
                },
                ..WatchConfig::default()
            },
            ..kcache_informer::InformerConfig::default()
        })
        .watch_error_handler(handler)
        .build();
    let (cancel, task) = spawn_run(&informer);
    eventually("the cap error", Duration::from_secs(10), || {
        !reasons.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(reasons.lock().unwrap()[0], ErrorReason::ListPageTooLarge);
    assert!(!informer.has_synced());
    cancel.cancel();
    task.await.unwrap().unwrap();
}

/// `wire_format` reaches the reflector: by default a built-in type asks for
/// protobuf (with JSON as the fallback, which this fake answers with),
/// `WireFormat::Json` asks for JSON.
#[tokio::test]
async fn wire_format_reaches_the_reflector() {
    for (format, want) in [
        (
            WireFormat::Auto,
            Some("application/vnd.kubernetes.protobuf, application/json"),
        ),
        (WireFormat::Json, None),
    ] {
        let api = FakeApi::new();
        api.create("ns", "a", "x");
        let informer = SharedIndexInformer::<ConfigMap>::builder(api.client.clone())
            .config(kcache_informer::InformerConfig {
                watch: WatchConfig {
                    use_watch_list: false,
                    wire_format: format,
                    ..WatchConfig::default()
                },
                ..kcache_informer::InformerConfig::default()
            })
            .build();
        let (cancel, task) = spawn_run(&informer);
        eventually("synced", Duration::from_secs(10), || informer.has_synced()).await;
        assert_eq!(
            api.accept_headers()[0].as_deref(),
            want,
            "{format:?}: the list's Accept"
        );
        assert_eq!(
            informer.indexer().get_by_key("ns/a").unwrap().format(),
            kcache_core::Format::Json
        );
        cancel.cancel();
        task.await.unwrap().unwrap();
    }
}
