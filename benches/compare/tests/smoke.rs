//! The replay server serves a paged list and a watch that kube's client
//! reads through a kubeconfig (plain HTTP), and a 410 when asked.

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kcache_bench_compare::{END_MARKER, ServerOptions, generate, kubeconfig, serve};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt as _};

async fn start(n: usize, m: usize, gone_once: bool) -> Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opts = ServerOptions {
        gone_once,
        hold: Some(std::time::Duration::from_secs(5)),
        gone_after: None,
    };
    tokio::spawn(serve(listener, generate(n, m), opts));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, kubeconfig(addr)).unwrap();
    let kc = Kubeconfig::read_from(&path).unwrap();
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn kube_client_lists_pages_and_watches_to_the_end_marker() {
    let api: Api<Pod> = Api::all(start(25, 12, false).await);
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(10);
    let rv = loop {
        let page = api.list(&lp).await.unwrap();
        names.extend(page.items.iter().map(|p| p.name_any()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break page.metadata.resource_version.unwrap(),
        }
    };
    assert_eq!(names.len(), 25);
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 25, "pages do not overlap");
    assert_eq!(rv, "25");

    let wp = WatchParams::default();
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
    let (mut modified, mut deleted, mut bookmark) = (0, 0, false);
    while let Some(ev) = stream.try_next().await.unwrap() {
        match ev {
            WatchEvent::Modified(_) => modified += 1,
            WatchEvent::Deleted(_) => deleted += 1,
            WatchEvent::Added(p) => assert_eq!(p.name_any(), END_MARKER),
            WatchEvent::Bookmark(_) => {
                bookmark = true;
                break;
            }
            WatchEvent::Error(e) => panic!("unexpected error event {e:?}"),
        }
    }
    assert_eq!((modified, deleted, bookmark), (11, 1, true));
}

#[tokio::test]
async fn first_watch_is_gone_when_asked() {
    let api: Api<Pod> = Api::all(start(3, 0, true).await);
    let mut stream = api
        .watch(&WatchParams::default(), "3")
        .await
        .unwrap()
        .boxed();
    match stream.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

/// A client that asks for protobuf gets the protobuf list and watch frames
/// (here of stand-in Pod messages; the harness encodes real ones with the
/// client-go module), a JSON client the JSON ones.
#[tokio::test]
async fn protobuf_is_served_to_clients_that_accept_it() {
    use bytes::Bytes;
    use kcache_bench_compare::protobuf::ProtobufData;
    use kcache_testing::fake::protobuf::{pb_envelope, pb_frame};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let mut data = generate(3, 1);
    let pods: Vec<Bytes> = (0..3u8)
        .map(|i| Bytes::from(vec![b'p', b'0' + i]))
        .collect();
    let ev = pb_frame("MODIFIED", &pb_envelope("v1", "Pod", b"w"));
    data.protobuf = Some(ProtobufData {
        pods,
        watch: Bytes::from(ev.clone()),
        bookmark: Bytes::from(pb_frame("BOOKMARK", &pb_envelope("v1", "Pod", b"b"))),
        avg_pod_bytes: 2,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let opts = ServerOptions {
        gone_once: false,
        gone_after: None,
        hold: Some(std::time::Duration::from_millis(200)),
    };
    tokio::spawn(serve(listener, data, opts));
    let get = |path: &'static str, accept: &'static str| async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(2), s.read_to_end(&mut out)).await;
        out
    };
    let pb = "application/vnd.kubernetes.protobuf, application/json";
    let list = get("/api/v1/pods?limit=2", pb).await;
    let text = String::from_utf8_lossy(&list);
    assert!(
        text.contains("Content-Type: application/vnd.kubernetes.protobuf\r\n"),
        "{text}"
    );
    let body = &list[list.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
    assert!(body.starts_with(b"k8s\0"), "{body:?}");
    // both items of the page, then the envelope's tail
    assert!(
        body.windows(4).any(|w| w == b"\x12\x02p0") && body.windows(4).any(|w| w == b"\x12\x02p1")
    );
    assert!(!body.windows(2).any(|w| w == b"p2"));
    let watch = get("/api/v1/pods?watch=true&resourceVersion=3", pb).await;
    let text = String::from_utf8_lossy(&watch);
    assert!(
        text.contains("Content-Type: application/vnd.kubernetes.protobuf;stream=watch\r\n"),
        "{text}"
    );
    assert!(watch.windows(ev.len()).any(|w| w == ev.as_slice()));
    let json_list = get("/api/v1/pods?limit=2", "application/json").await;
    let text = String::from_utf8_lossy(&json_list);
    assert!(
        text.contains("Content-Type: application/json\r\n") && text.contains("\"PodList\""),
        "{text}"
    );
}
