//! The fault proxy against a local echo server (no control plane needed).

use std::time::{Duration, Instant};

use kcache_envtest::proxy::FaultProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An echo server; returns its address.
async fn echo() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A fault proxy in front of an echo server, and a connection through it.
async fn proxy_and_connection() -> (FaultProxy, TcpStream) {
    let proxy = FaultProxy::start(echo().await).await.unwrap();
    let s = TcpStream::connect(proxy.addr()).await.unwrap();
    (proxy, s)
}

/// Asserts that `msg` comes back on `s` within 5 s.
async fn echoes(s: &mut TcpStream, msg: &[u8]) {
    let got = roundtrip(s, msg, Duration::from_secs(5)).await.unwrap();
    assert_eq!(got, msg);
}

async fn roundtrip(s: &mut TcpStream, msg: &[u8], within: Duration) -> std::io::Result<Vec<u8>> {
    s.write_all(msg).await?;
    let mut got = vec![0u8; msg.len()];
    match tokio::time::timeout(within, s.read_exact(&mut got)).await {
        Ok(r) => r.map(|_| got),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "timed out",
        )),
    }
}

#[tokio::test]
async fn forwards_and_cuts() {
    let (proxy, mut s) = proxy_and_connection().await;
    echoes(&mut s, b"hello").await;
    assert_eq!(proxy.stats().open, 1);
    proxy.cut_all();
    let mut buf = [0u8; 8];
    let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("a cut connection must end at once");
    // a reset (RST), not a clean end of stream
    assert_eq!(
        r.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionReset)
    );
    assert_eq!(proxy.stats().cut, 1);
    // new connections work after a cut
    let mut s2 = TcpStream::connect(proxy.addr()).await.unwrap();
    echoes(&mut s2, b"again").await;
}

#[tokio::test]
async fn stall_holds_bytes_without_closing() {
    let (proxy, mut s) = proxy_and_connection().await;
    echoes(&mut s, b"warm").await;
    proxy.stall(true);
    let r = roundtrip(&mut s, b"held", Duration::from_millis(500)).await;
    assert_eq!(
        r.unwrap_err().kind(),
        std::io::ErrorKind::TimedOut,
        "bytes passed a stalled proxy"
    );
    proxy.stall(false);
    let mut got = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got, b"held");
    // the stall is counted where it bit: the one chunk it held
    let stats = proxy.stats();
    assert_eq!((stats.held_stalled, stats.held_blackholed), (1, 0));
}

#[tokio::test]
async fn blackhole_stalls_open_connections_only() {
    let (proxy, mut old) = proxy_and_connection().await;
    echoes(&mut old, b"warm").await;
    proxy.blackhole_open();
    assert!(
        roundtrip(&mut old, b"lost", Duration::from_millis(500))
            .await
            .is_err()
    );
    let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
    echoes(&mut new, b"fresh").await;
    let stats = proxy.stats();
    assert_eq!((stats.held_blackholed, stats.held_stalled), (1, 0));
}

#[tokio::test]
async fn delay_and_refuse() {
    let (proxy, mut s) = proxy_and_connection().await;
    proxy.delay(Duration::from_millis(200));
    let t = Instant::now();
    echoes(&mut s, b"slow").await;
    // delayed once each way
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    proxy.delay(Duration::ZERO);
    assert_eq!(proxy.stats().delayed, 2, "one chunk delayed each way");

    proxy.refuse(true);
    let mut r = TcpStream::connect(proxy.addr()).await.unwrap();
    let res = roundtrip(&mut r, b"no", Duration::from_secs(5)).await;
    assert!(res.is_err(), "a refused connection echoed: {res:?}");
    assert!(proxy.stats().refused >= 1);
    proxy.refuse(false);
    let mut ok = TcpStream::connect(proxy.addr()).await.unwrap();
    echoes(&mut ok, b"yes").await;
}

#[tokio::test]
async fn dropping_the_proxy_closes_everything() {
    let (proxy, mut s) = proxy_and_connection().await;
    let addr = proxy.addr();
    echoes(&mut s, b"warm").await;
    drop(proxy);
    let mut buf = [0u8; 4];
    let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("open connections end when the proxy is dropped");
    assert!(matches!(r, Err(_) | Ok(0)), "{r:?}");
    // the listener is gone too
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn unlisten_refuses_new_connections_and_keeps_open_ones() {
    let (proxy, mut open) = proxy_and_connection().await;
    let addr = proxy.addr();
    echoes(&mut open, b"warm").await;
    proxy.unlisten(true);
    // the listener closes asynchronously: wait for the kernel's refusal
    let refused = async {
        loop {
            match TcpStream::connect(addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(5), refused)
        .await
        .expect("new connections are refused (ECONNREFUSED)");
    assert!(proxy.stats().unlistened);
    assert_eq!(
        roundtrip(&mut open, b"still", Duration::from_secs(5))
            .await
            .unwrap(),
        b"still",
        "an open connection keeps working"
    );
    proxy.unlisten(false);
    let back = async {
        loop {
            if let Ok(mut s) = TcpStream::connect(addr).await
                && roundtrip(&mut s, b"back", Duration::from_secs(1))
                    .await
                    .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), back)
        .await
        .expect("listening again on the same port");
    assert!(!proxy.stats().unlistened);
}
