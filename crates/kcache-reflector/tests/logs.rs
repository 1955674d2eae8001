//! What reaches the log: server-provided text is cut. In its own test
//! binary, with a global subscriber that captures the output (a
//! thread-local one races with the callsite cache of tests running in
//! parallel).

mod common;
use kcache_testing::fake;
use kcache_testing::logs::LogBuffer;

use std::sync::Arc;

use common::{RecordingStore, opts};
use fake::{End, Fake, Reply, list};
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_reflector::Reflector;
use parking_lot::Mutex;
use serde_json::json;

/// A watch ERROR Status with a huge message (up to the event cap): the
/// WARN line shows a few hundred bytes of it and its full length; the
/// handler still gets the whole message.
#[tokio::test(start_paused = true)]
async fn watch_error_status_message_is_cut_in_logs() {
    let logs = LogBuffer::set_global(tracing::Level::DEBUG);

    let huge = "y".repeat(4 << 20);
    let line = json!({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":huge,"reason":"InternalError","code":500}}).to_string();
    let fake = Fake::new(move |r| match (r.is_watch(), r.nth) {
        (false, _) => list("1", "", vec![]),
        (true, 0) => Reply::Stream(vec![line.clone()], End::Hang),
        _ => Reply::Stream(vec![], End::Hang),
    });
    let store = Arc::new(RecordingStore::<ConfigMap>::default());
    let full = Arc::new(Mutex::new(0usize));
    let f2 = full.clone();
    let r = Reflector::<ConfigMap>::builder(fake.client.clone(), store)
        .config(opts())
        .watch_error_handler(move |e| {
            if let Some(api) = e.api_error() {
                *f2.lock() = api.message.len();
            }
        })
        .build();
    let stop = async {
        fake.wait_requests(3).await;
    };
    r.run_until(stop).await;
    assert_eq!(*full.lock(), 4 << 20, "the handler gets the whole message");
    let text = logs.text();
    let warn = logs.lines_with(&["WARN"]);
    assert_eq!(warn.len(), 1, "{text}");
    assert!(warn[0].contains("bytes in all]"), "{}", warn[0]);
    assert!(warn[0].contains("4194304"), "{}", warn[0]);
    for l in text.lines() {
        assert!(l.len() < 2_000, "a log line of {} bytes", l.len());
    }
}
