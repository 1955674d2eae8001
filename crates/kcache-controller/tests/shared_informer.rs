//! Two controllers on one factory share its primary informer: it runs
//! exactly once (one LIST, no "did not run" error), and a controller that
//! stops leaves it running for the other. An informer no one else runs
//! (given to `for_informer`) is run, and stopped, by its controller.
//! Its own test binary: it captures the logs with a thread-local
//! subscriber.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, StreamExt as _};
use http_body::Frame;
use http_body_util::StreamBody;
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{Action, Config, Controller, Request};
use kcache_informer::{SharedIndexInformer, SharedInformerFactory};
use parking_lot::Mutex;
use serde_json::json;

/// A client that lists two ConfigMaps, holds watches open, and counts
/// the lists it answered.
fn client(lists: Arc<AtomicUsize>) -> kube::Client {
    let items: Vec<_> = ["a", "b"]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": n, "namespace": "ns", "uid": format!("uid-{i}"),
                    "resourceVersion": (i + 1).to_string()}})
        })
        .collect();
    let list = Bytes::from(
        json!({"kind": "ConfigMapList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "100"}, "items": items})
        .to_string(),
    );
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let is_watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
        let body = if is_watch {
            stream::pending::<Result<Frame<Bytes>, io::Error>>().boxed()
        } else {
            lists.fetch_add(1, Ordering::SeqCst);
            stream::iter([Ok::<_, io::Error>(Frame::data(list.clone()))]).boxed()
        };
        async move {
            http::Response::builder()
                .status(200)
                .body(StreamBody::new(body))
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        }
    });
    kube::Client::new(svc, "default")
}

#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

type Seen = Arc<Mutex<BTreeSet<String>>>;

fn reconciler() -> impl Fn(Request<ConfigMap>, Seen) -> std::future::Ready<Result<Action, io::Error>>
{
    |req, seen| {
        seen.lock().insert(req.key);
        std::future::ready(Ok(Action::await_change()))
    }
}

async fn until(what: &str, f: impl Fn() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn shared_primary_informer_runs_once() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let lists = Arc::new(AtomicUsize::new(0));
    let factory = SharedInformerFactory::builder(client(lists.clone()))
        .tweak_list_options(|o| o.use_watch_list = false)
        .build();
    let (seen_a, seen_b): (Seen, Seen) = Default::default();
    let a = Controller::<ConfigMap>::new(&factory, Config::default().name("a"));
    let b = Controller::<ConfigMap>::new(&factory, Config::default().name("b"));
    let (stop_a, stop_b) = (a.handle(), b.handle());
    let run_a = tokio::spawn(a.run(reconciler(), seen_a.clone()));
    let run_b = tokio::spawn(b.run(reconciler(), seen_b.clone()));
    until("both controllers reconciled both keys", || {
        seen_a.lock().len() == 2 && seen_b.lock().len() == 2
    })
    .await;
    assert_eq!(
        lists.load(Ordering::SeqCst),
        1,
        "the shared informer listed once"
    );

    // Stopping one controller leaves the shared informer to the factory.
    stop_a.stop();
    run_a.await.unwrap().unwrap();
    let informer: SharedIndexInformer<ConfigMap> = factory.informer();
    assert!(
        !informer.is_stopped(),
        "a controller stopped an informer it did not start"
    );
    assert!(informer.has_synced());
    assert!(stop_b.health().readiness().0);
    stop_b.stop();
    run_b.await.unwrap().unwrap();
    factory.shutdown().await;
    assert!(informer.is_stopped());

    // An informer nobody else runs is run by its controller, and stopped
    // with it.
    let own = SharedIndexInformer::<ConfigMap>::builder(client(lists.clone()))
        .list_options(kcache_informer::ListOptions {
            use_watch_list: false,
            ..Default::default()
        })
        .build();
    let other = SharedInformerFactory::new(client(Arc::new(AtomicUsize::new(0))));
    let c = Controller::for_informer(&other, own.clone(), &(), Config::default().name("c"));
    let stop_c = c.handle();
    let seen_c: Seen = Default::default();
    let run_c = tokio::spawn(c.run(reconciler(), seen_c.clone()));
    until("the controller reconciled its own informer's keys", || {
        seen_c.lock().len() == 2
    })
    .await;
    stop_c.stop();
    run_c.await.unwrap().unwrap();
    assert!(own.is_stopped(), "the controller stops the informer it ran");
    other.shutdown().await;

    let text = String::from_utf8_lossy(&logs.0.lock()).into_owned();
    assert!(!text.contains("ERROR"), "{text}");
    assert!(!text.contains("did not run"), "{text}");
}
