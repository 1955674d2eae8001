//! The metrics/health endpoint's exposure: it binds exactly the configured
//! address, answers only its read-only paths, and only to GET/HEAD.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use kcache_controller::{Health, MetricsRegistry, MetricsServer};
use kcache_testing::raw_http::request;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

async fn server_on(addr: SocketAddr) -> MetricsServer {
    MetricsServer::bind(addr, MetricsRegistry::new(), vec![Health::new("sec")])
        .await
        .unwrap()
}

#[tokio::test]
async fn binds_only_the_configured_address() {
    // Pick a free port on 127.0.0.1, then ask the server for exactly that.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let configured = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let server = server_on(configured).await;
    assert_eq!(server.local_addr(), configured);
    assert_eq!(request(configured, "GET", "/healthz").await.0, 200);

    // Another loopback address on the same port is not served: the server
    // is not bound to the wildcard address. (Linux routes all of 127/8 to
    // lo; where 127.0.0.2 is not usable the connect fails either way.)
    let other = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), port));
    let connected = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(other),
    )
    .await;
    assert!(
        !matches!(connected, Ok(Ok(_))),
        "the server also answers on {other}, not only on {configured}"
    );
    server.shutdown().await;
    assert!(tokio::net::TcpStream::connect(configured).await.is_err());
}

#[tokio::test]
async fn serves_only_metrics_and_health_paths() {
    let server = server_on("127.0.0.1:0".parse().unwrap()).await;
    let addr = server.local_addr();
    assert!(addr.ip().is_loopback());

    for path in ["/metrics", "/healthz", "/livez"] {
        assert_eq!(request(addr, "GET", path).await.0, 200, "{path}");
    }
    // Not synced yet: readiness says so, with 503.
    let (status, body) = request(addr, "GET", "/readyz").await;
    assert_eq!((status, body.trim()), (503, "sec: caches not synced"));
    // A query string does not change the route.
    assert_eq!(request(addr, "GET", "/healthz?verbose=1").await.0, 200);

    for path in [
        "/",
        "/metrics/",
        "/metricsx",
        "/Metrics",
        "/healthz/extra",
        "/readyz/../metrics",
        "/../etc/passwd",
        "/debug/pprof/",
        "/debug/vars",
        "/config",
        "/env",
        "/favicon.ico",
        "//metrics",
        "/%6detrics",
    ] {
        let (status, body) = request(addr, "GET", path).await;
        assert_eq!(status, 404, "{path} answered {status}: {body}");
        assert_eq!(body, "not found\n", "{path}");
    }
    // Absolute-form and asterisk-form targets do not reach anything else.
    let (status, _) = request(addr, "GET", "http://evil.example/debug").await;
    assert_ne!(status, 200);
    let (status, _) = request(addr, "OPTIONS", "*").await;
    assert_ne!(status, 200);

    // Only reads: everything else is refused, on every path.
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"] {
        for path in ["/metrics", "/healthz", "/readyz", "/"] {
            let (status, _) = request(addr, method, path).await;
            assert_eq!(status, 405, "{method} {path}");
        }
    }
    // CONNECT is refused too (405, or the connection is closed unanswered).
    let (status, _) = request(addr, "CONNECT", "127.0.0.1:22").await;
    assert!(!(200..300).contains(&status), "CONNECT answered {status}");
    assert_eq!(request(addr, "HEAD", "/metrics").await.0, 200);
    server.shutdown().await;
}

/// Reads until the server closes the connection; what it sent.
async fn read_until_closed(s: &mut tokio::net::TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(start_paused = true)]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    use kcache_controller::server::HEADER_READ_TIMEOUT;
    let server = server_on("127.0.0.1:0".parse().unwrap()).await;
    let mut s = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    // Half a request line, then silence (a slowloris client).
    s.write_all(b"GET /metr").await.unwrap();
    let start = tokio::time::Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(3600), read_until_closed(&mut s))
        .await
        .expect("the server closes a connection whose headers never come");
    let took = start.elapsed();
    assert!(!got.contains(" 200 "), "answered a partial request: {got}");
    assert!(
        took >= HEADER_READ_TIMEOUT && took <= HEADER_READ_TIMEOUT + Duration::from_secs(1),
        "closed after {took:?}: not by the header read timeout"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn connections_over_the_cap_are_closed() {
    use kcache_controller::server::MAX_CONNECTIONS;
    let server = server_on("127.0.0.1:0".parse().unwrap()).await;
    let addr = server.local_addr();
    // MAX_CONNECTIONS clients each holding a half-sent request open.
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    // One more: closed unanswered (the bound is only a hang guard; the
    // held connections stay open for the header read timeout, 10 s).
    let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let got = tokio::time::timeout(Duration::from_secs(5), read_until_closed(&mut extra))
        .await
        .expect("a connection over the cap is closed at once");
    assert!(
        got.is_empty(),
        "a connection over the cap was served: {got}"
    );
    // Once the held ones are gone, the server answers again.
    drop(held);
    let mut answered = false;
    for _ in 0..50 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = s
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
        if read_until_closed(&mut s).await.starts_with("HTTP/1.1 200") {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        answered,
        "the server did not recover after the clients left"
    );
    server.shutdown().await;
}
