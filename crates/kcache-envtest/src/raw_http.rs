//! A minimal HTTP/1.0 client (so answers are never chunked) over loopback TCP, for etcd's plain-HTTP
//! endpoints (`/health`, the v3 JSON gateway). Not a general HTTP client.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const TIMEOUT: Duration = Duration::from_secs(10);

async fn roundtrip(port: u16, request: String) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status_ok = head
        .split_whitespace()
        .nth(1)
        .is_some_and(|code| code.starts_with('2'));
    if !status_ok {
        return Err(std::io::Error::other(format!(
            "unexpected answer: {}",
            head.lines().next().unwrap_or("")
        )));
    }
    Ok(body.to_string())
}

async fn with_timeout(port: u16, request: String) -> std::io::Result<String> {
    tokio::time::timeout(TIMEOUT, roundtrip(port, request))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request timed out"))?
}

/// GET `path` and return the body of a 2xx answer.
pub async fn get(port: u16, path: &str) -> std::io::Result<String> {
    with_timeout(
        port,
        format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
    )
    .await
}

/// POST a JSON `body` to `path` and return the body of a 2xx answer.
pub async fn post(port: u16, path: &str, body: &str) -> std::io::Result<String> {
    with_timeout(
        port,
        format!(
            "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
}
