//! One plain HTTP/1.1 request over TCP, for tests of the endpoints kcache
//! serves itself (metrics, health probes).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Sends `METHOD target` (no body, `Connection: close`) to `addr` and
/// returns the status code (0 if the answer has none) and the body, or
/// what went wrong (no connection, no answer within 10 s).
pub async fn try_request(
    addr: SocketAddr,
    method: &str,
    target: &str,
) -> Result<(u16, String), String> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let req = format!(
            "{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    let out = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| format!("{method} {target}: no answer within 10 s"))?
        .map_err(|e| format!("{method} {target}: {e}"))?;
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// [`try_request`], panicking on an error.
pub async fn request(addr: SocketAddr, method: &str, target: &str) -> (u16, String) {
    try_request(addr, method, target)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`request`] with GET.
pub async fn get(addr: SocketAddr, target: &str) -> (u16, String) {
    request(addr, "GET", target).await
}
