//! One plain HTTP/1.1 request over TCP, for tests of the endpoints kcache
//! serves itself (metrics, health probes).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Sends `METHOD target` (no body, `Connection: close`) to `addr` and
/// returns the status code (0 if the answer has none) and the body. Panics
/// if the connection fails or no answer ends within 10 s.
pub async fn request(addr: SocketAddr, method: &str, target: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let req = format!(
        "{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .await
        .expect("the request is sent");
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
        .await
        .expect("the server answers within 10 s")
        .expect("the answer is text");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// [`request`] with GET.
pub async fn get(addr: SocketAddr, target: &str) -> (u16, String) {
    request(addr, "GET", target).await
}
