//! Deadlines and byte caps on what the reflector reads from the network.
//!
//! kube's client sets no read timeout, so without these a stalled LIST (no
//! response headers, or a body that stops mid-way) would hang a reflector
//! forever, and a server sending an endless body would grow its memory
//! without bound. See [Deadlines and byte caps](https://github.com/kcache/kcache/blob/main/docs/reflector.md#deadlines-and-byte-caps)
//! for why the defaults are safe for a large LIST on a loaded apiserver.

use std::time::Duration;

use bytes::Bytes;
#[cfg(test)]
use bytes::BytesMut;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

/// The default of [`RequestTimeouts::response_headers`]: 2 minutes.
pub const DEFAULT_RESPONSE_HEADERS_TIMEOUT: Duration = Duration::from_secs(120);

/// The default of [`RequestTimeouts::list_body_idle`]: 1 minute.
pub const DEFAULT_LIST_BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The default of [`RequestTimeouts::list_body`]: 10 minutes.
pub const DEFAULT_LIST_BODY_TIMEOUT: Duration = Duration::from_secs(600);

/// client-go's default minimum watch timeout: watches ask for a server-side
/// timeout in `[min, 2 * min)`.
pub const DEFAULT_MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);

/// The default cap on one LIST page body and on a streaming list's buffered
/// initial events: 2 GiB (see [`Limits::max_list_page_bytes`]).
pub const DEFAULT_MAX_LIST_BYTES: usize = 2 << 30;

/// The timeouts of a reflector's requests and watches
/// ([`WatchConfig::timeouts`](crate::WatchConfig::timeouts)): the
/// server-side timeout a watch asks for, the client-side deadlines on
/// response headers, list bodies and watch bytes, and how long a watch
/// `InternalError` is retried without a relist.
///
/// A request that misses a deadline fails with [`ReflectorError::Timeout`]
/// (`reflector_errors_total{reason="timeout"}`) and is retried as client-go
/// retries a failed request: a relist after a backoff step. The watch
/// body keeps its own idle limit ([`watch_idle_timeout`](Self::watch_idle_timeout)).
///
/// The defaults are above what a healthy apiserver with its default
/// settings ever takes, so that only a stalled server or connection hits
/// them: the apiserver ends a LIST itself after its `--request-timeout`
/// (60 s by default) plus at most 15 s of priority-and-fairness queueing,
/// and a watch's headers come as soon as the watch is registered. Raise
/// them for an apiserver run with a longer `--request-timeout`, and
/// `response_headers` above the watch idle limit behind a proxy that holds
/// a watch's headers until its first event. A zero duration fails every
/// request; `Duration::MAX` in effect turns a deadline off.
///
/// ```
/// use std::time::Duration;
/// use kcache_reflector::RequestTimeouts;
///
/// let t = RequestTimeouts {
///     response_headers: Duration::from_secs(300),
///     ..RequestTimeouts::default()
/// };
/// assert_eq!(t.response_headers, Duration::from_secs(300));
/// assert_eq!(t.list_body_idle, Duration::from_secs(60));
/// ```
///
/// [`ReflectorError::Timeout`]: crate::ReflectorError::Timeout
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestTimeouts {
    /// Minimum server-side watch timeout; each watch asks for a random
    /// timeout in `[min, 2 * min)`. client-go honours values above 5
    /// minutes only; so does kcache (default: 5 minutes,
    /// [`DEFAULT_MIN_WATCH_TIMEOUT`]).
    pub min_watch_timeout: Duration,
    /// Abandon a watch on which no byte has arrived for this long, and open
    /// a new one from the last resourceVersion (a stalled connection: no
    /// data, no FIN). `None` (the default): the watch's requested
    /// server-side timeout plus
    /// [`WATCH_IDLE_MARGIN`](crate::WATCH_IDLE_MARGIN), which a healthy
    /// server never exceeds. With bookmarks flowing (about one a minute
    /// from the apiserver's watch cache) a shorter limit, e.g. 2-3
    /// minutes, detects stalls sooner.
    pub watch_idle_timeout: Option<Duration>,
    /// client-go's `MaxInternalErrorRetryDuration`: for how long a watch
    /// ending with an `InternalError` is re-opened without a relist
    /// (default: zero, i.e. relist at once).
    pub max_internal_error_retry_duration: Duration,
    /// From sending a request (a LIST page, a watch, a streaming list) to
    /// its response headers. Default: 2 minutes
    /// ([`DEFAULT_RESPONSE_HEADERS_TIMEOUT`]).
    pub response_headers: Duration,
    /// The longest wait for the next byte of a LIST page body (a stalled
    /// body). Default: 1 minute ([`DEFAULT_LIST_BODY_IDLE_TIMEOUT`]).
    pub list_body_idle: Duration,
    /// The longest read of one LIST page body, from its headers to its
    /// last byte (a body that trickles). Default: 10 minutes
    /// ([`DEFAULT_LIST_BODY_TIMEOUT`]).
    pub list_body: Duration,
}

impl Default for RequestTimeouts {
    fn default() -> Self {
        RequestTimeouts {
            min_watch_timeout: DEFAULT_MIN_WATCH_TIMEOUT,
            watch_idle_timeout: None,
            max_internal_error_retry_duration: Duration::ZERO,
            response_headers: DEFAULT_RESPONSE_HEADERS_TIMEOUT,
            list_body_idle: DEFAULT_LIST_BODY_IDLE_TIMEOUT,
            list_body: DEFAULT_LIST_BODY_TIMEOUT,
        }
    }
}

/// Caps on the bytes a reflector reads from the network
/// ([`WatchConfig::limits`](crate::WatchConfig::limits)): one watch event,
/// one LIST page, a streaming list's buffer. A value of 0 counts as 1.
///
/// ```
/// use kcache_reflector::Limits;
///
/// let limits = Limits { max_event_size: 16 << 20, ..Limits::default() };
/// assert_eq!(limits.max_list_page_bytes, 2 << 30);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted watch event, in bytes (default: 128 MiB,
    /// [`DEFAULT_MAX_FRAME`](crate::DEFAULT_MAX_FRAME)). A larger event
    /// ends the watch with
    /// [`ReflectorError::EventTooLarge`](crate::ReflectorError::EventTooLarge)
    /// and the reflector relists.
    pub max_event_size: usize,
    /// Largest accepted LIST page body, in bytes (default: 2 GiB,
    /// [`DEFAULT_MAX_LIST_BYTES`]). The apiserver answers a
    /// list at resourceVersion `"0"` (and a relist at an exact
    /// resourceVersion) from its watch cache as **one** body whatever the
    /// page size: 20,000 Pods made a 230 MB JSON body, so the default
    /// leaves room for a collection about 9 times that size. A larger body
    /// fails with
    /// [`ReflectorError::ListPageTooLarge`](crate::ReflectorError::ListPageTooLarge)
    /// as soon as the cap is passed (nothing more is read) and the
    /// reflector relists after a backoff.
    pub max_list_page_bytes: usize,
    /// Largest total size, in bytes, of the objects a streaming list
    /// buffers before its `initial-events-end` bookmark (default: 2 GiB,
    /// [`DEFAULT_MAX_LIST_BYTES`]; the buffer is the whole
    /// collection, as a list at `"0"` is). Passing it fails the streaming
    /// list with
    /// [`ReflectorError::InitialEventsTooLarge`](crate::ReflectorError::InitialEventsTooLarge)
    /// at once (the buffer is dropped) and the reflector relists after a
    /// backoff.
    pub max_initial_events_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_event_size: crate::framing::DEFAULT_MAX_FRAME,
            max_list_page_bytes: DEFAULT_MAX_LIST_BYTES,
            max_initial_events_bytes: DEFAULT_MAX_LIST_BYTES,
        }
    }
}

/// `now + d`, or a point about 30 years ahead when that overflows (a
/// `Duration::MAX` setting).
pub(crate) fn deadline_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

/// Why reading a body stopped.
#[derive(Debug)]
pub(crate) enum BodyError<E> {
    /// No byte for the idle limit.
    Idle,
    /// The whole-body limit passed.
    Total,
    /// More bytes than the cap (announced by `Content-Length`, or read).
    TooLarge,
    /// The body stream failed.
    Stream(E),
    /// The consumer of the chunks stopped reading (it found the body
    /// malformed).
    Stopped,
}

/// Limits for [`read_body`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    pub(crate) idle: Duration,
    pub(crate) total: Duration,
    pub(crate) max_bytes: usize,
}

/// Reads a response body within `limits`, handing each chunk to `each` as
/// it arrives. Stops as soon as a limit is passed: with
/// [`BodyError::TooLarge`] at the chunk that passes `max_bytes` (or at
/// once when `Content-Length` announces more), and with
/// [`BodyError::Stopped`] when `each` returns `false`.
pub(crate) async fn read_body_with<E>(
    content_length: Option<u64>,
    mut stream: impl Stream<Item = Result<Bytes, E>> + Unpin,
    limits: BodyLimits,
    mut each: impl FnMut(Bytes) -> bool,
) -> Result<(), BodyError<E>> {
    if content_length.is_some_and(|n| n > limits.max_bytes as u64) {
        return Err(BodyError::TooLarge);
    }
    let end = deadline_after(limits.total);
    let mut len = 0usize;
    loop {
        let wake = deadline_after(limits.idle).min(end);
        let next = match tokio::time::timeout_at(wake, stream.next()).await {
            Ok(next) => next,
            Err(_) if Instant::now() >= end => return Err(BodyError::Total),
            Err(_) => return Err(BodyError::Idle),
        };
        let chunk = match next {
            None => return Ok(()),
            Some(Ok(c)) => c,
            Some(Err(e)) => return Err(BodyError::Stream(e)),
        };
        len = len.saturating_add(chunk.len());
        if len > limits.max_bytes {
            return Err(BodyError::TooLarge);
        }
        if !each(chunk) {
            return Err(BodyError::Stopped);
        }
    }
}

/// Reads a whole response body within `limits` (see [`read_body_with`]).
/// A body of one chunk is returned without a copy. (The reflector reads
/// list bodies as they arrive; this is how the limits are tested.)
#[cfg(test)]
pub(crate) async fn read_body<E>(
    content_length: Option<u64>,
    stream: impl Stream<Item = Result<Bytes, E>> + Unpin,
    limits: BodyLimits,
) -> Result<Bytes, BodyError<E>> {
    // at most the cap, and at most 64 MiB up front on the server's word
    let hint = content_length.map_or(0, |n| n.min(64 << 20) as usize);
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    read_body_with(content_length, stream, limits, |chunk| {
        if first.is_none() && buf.is_empty() {
            first = Some(chunk);
        } else {
            if let Some(f) = first.take() {
                buf.reserve(hint.max(f.len() + chunk.len()));
                buf.extend_from_slice(&f);
            }
            buf.extend_from_slice(&chunk);
        }
        true
    })
    .await?;
    Ok(first.unwrap_or_else(|| buf.freeze()))
}

/// Reads an error response body: at most `max` bytes (the rest is not
/// read) and only while bytes keep coming within `idle` (what arrived by
/// then is kept). An error body only explains a failure; it never holds the
/// reflector up.
pub(crate) async fn read_error_body<E>(
    mut stream: impl Stream<Item = Result<Bytes, E>> + Unpin,
    max: usize,
    idle: Duration,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    while let Ok(Some(Ok(c))) = tokio::time::timeout(idle, stream.next()).await {
        bytes.extend_from_slice(&c[..c.len().min(max - bytes.len())]);
        if bytes.len() >= max {
            break;
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream::{self, BoxStream};

    type Chunks = BoxStream<'static, Result<Bytes, std::io::Error>>;

    fn body(chunks: Vec<&'static [u8]>, hang: bool) -> Chunks {
        let data = stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from_static(c))));
        if hang {
            data.chain(stream::pending()).boxed()
        } else {
            data.boxed()
        }
    }

    const L: BodyLimits = BodyLimits {
        idle: Duration::from_secs(5),
        total: Duration::from_secs(60),
        max_bytes: 10,
    };

    #[tokio::test(start_paused = true)]
    async fn reads_within_the_limits() {
        let b = read_body(None, body(vec![b"abc", b"def"], false), L)
            .await
            .unwrap();
        assert_eq!(&b[..], b"abcdef");
        let b = read_body(Some(4), body(vec![b"abcd"], false), L)
            .await
            .unwrap();
        assert_eq!(&b[..], b"abcd");
        let b = read_body(None, body(vec![b"0123456789"], false), L)
            .await
            .unwrap();
        assert_eq!(b.len(), 10, "exactly the cap is accepted");
        let b = read_body(None, body(vec![], false), L).await.unwrap();
        assert!(b.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_the_cap_and_on_a_stall() {
        let t0 = Instant::now();
        // the cap is passed by the second chunk: no wait for the rest
        let r = read_body(None, body(vec![b"012345", b"6789ab"], true), L).await;
        assert!(matches!(r, Err(BodyError::TooLarge)), "{r:?}");
        // announced too large: not read at all
        let r = read_body(Some(11), body(vec![], true), L).await;
        assert!(matches!(r, Err(BodyError::TooLarge)), "{r:?}");
        assert_eq!(t0.elapsed(), Duration::ZERO);
        let r = read_body(None, body(vec![b"ab"], true), L).await;
        assert!(matches!(r, Err(BodyError::Idle)), "{r:?}");
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_hits_the_whole_body_limit() {
        // one byte every 4 s (under the idle limit), forever
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let s = stream::poll_fn(move |cx| rx.poll_recv(cx)).map(Ok::<_, std::io::Error>);
        let feeder = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(4)).await;
                if tx.send(Bytes::from_static(b"x")).is_err() {
                    return;
                }
            }
        });
        let t0 = Instant::now();
        let limits = BodyLimits {
            max_bytes: 1 << 20,
            ..L
        };
        let r = read_body(None, Box::pin(s), limits).await;
        assert!(matches!(r, Err(BodyError::Total)), "{r:?}");
        assert_eq!(t0.elapsed(), Duration::from_secs(60));
        feeder.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn error_bodies_are_capped_and_never_wait_long() {
        let b = read_error_body(body(vec![b"0123456789abc"], false), 4, L.idle).await;
        assert_eq!(b, b"0123");
        let t0 = Instant::now();
        let b = read_error_body(body(vec![b"ab"], true), 4, L.idle).await;
        assert_eq!(b, b"ab");
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
    }
}
