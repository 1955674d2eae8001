//! Tests on an error's source chain: a refused connection (retry the
//! watch without a relist) and a probable end of stream (a watch body that
//! ended, not a failure).

/// Walks an error's source chain looking for a refused connection.
pub(crate) fn is_connection_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("connection refused") {
            return true;
        }
        cur = e.source();
    }
    false
}

/// client-go's `IsProbableEOF` / `IsTimeout` for errors while reading a
/// watch body: the stream ended, not a real failure.
pub(crate) fn is_probable_eof(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::TimedOut
            )
        {
            return true;
        }
        let text = e.to_string().to_ascii_lowercase();
        if [
            "eof",
            "connection reset",
            "broken pipe",
            "closed",
            "timed out",
            "timeout",
        ]
        .iter()
        .any(|p| text.contains(p))
        {
            return true;
        }
        cur = e.source();
    }
    false
}
