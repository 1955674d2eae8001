//! Framing of a watch stream's byte chunks: by newline (JSON) or by length
//! prefix (protobuf); the [`Framer`] trait a codec's framer implements
//! (CBOR's is in `codec::cbor`).

use std::fmt;

use bytes::{Buf, Bytes, BytesMut};

/// A watch event exceeded the framer's maximum size (a line without a
/// newline, or a protobuf frame whose length prefix says more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("watch event exceeds {limit} bytes")]
pub struct FrameTooLarge {
    /// The configured maximum.
    pub limit: usize,
}

/// Splits a byte stream into newline-terminated frames (one JSON watch event
/// per line), whatever the chunk boundaries: an event split across chunks,
/// several events in one chunk, very large events.
///
/// By default every frame is an exact-size buffer of its own (a frame that
/// is a whole chunk is kept as is, any other is copied once), so that a
/// long-lived object never pins the rest of a network chunk in memory.
/// [`zero_copy`](Self::zero_copy) hands out slices of the chunks instead.
/// Empty and whitespace-only lines are skipped, and a trailing `\r` is
/// removed.
///
/// ```
/// use bytes::Bytes;
/// use kcache_reflector::LineFramer;
///
/// let mut framer = LineFramer::new();
/// framer.push(Bytes::from_static(b"{\"type\":\"ADDED\"}\n{\"type\":"));
/// assert_eq!(framer.next_frame()?.as_deref(), Some(&b"{\"type\":\"ADDED\"}"[..]));
/// assert_eq!(framer.next_frame()?, None); // the second event is incomplete
/// framer.push(Bytes::from_static(b"\"DELETED\"}\n"));
/// assert_eq!(framer.next_frame()?.as_deref(), Some(&b"{\"type\":\"DELETED\"}"[..]));
/// assert_eq!(framer.finish(), None);
/// # Ok::<_, kcache_reflector::FrameTooLarge>(())
/// ```
#[derive(Debug)]
pub struct LineFramer {
    /// The start of a frame that spans chunks.
    pending: BytesMut,
    /// The part of the last chunk not framed yet.
    current: Bytes,
    /// Length of the last chunk pushed.
    chunk_len: usize,
    max_frame: usize,
    exact: bool,
}

impl Default for LineFramer {
    fn default() -> Self {
        Self::new()
    }
}

/// Default maximum frame size: 128 MiB.
pub const DEFAULT_MAX_FRAME: usize = 128 * 1024 * 1024;

impl LineFramer {
    /// A framer with the default maximum frame size (128 MiB).
    pub fn new() -> Self {
        Self::with_max_frame(DEFAULT_MAX_FRAME)
    }

    /// A framer that fails on frames longer than `max_frame` bytes.
    pub fn with_max_frame(max_frame: usize) -> Self {
        LineFramer {
            pending: BytesMut::new(),
            current: Bytes::new(),
            chunk_len: 0,
            max_frame,
            exact: true,
        }
    }

    #[cfg(any(test, feature = "fuzzing"))]
    /// Hands out frames as slices of the chunks (no copy), which keeps a
    /// whole chunk alive as long as any frame of it is.
    pub fn zero_copy(mut self) -> Self {
        self.exact = false;
        self
    }

    /// Adds a chunk. Call [`next_frame`](Self::next_frame) until it returns
    /// `None` before pushing the next chunk.
    pub fn push(&mut self, chunk: Bytes) {
        self.chunk_len = chunk.len();
        if self.current.is_empty() {
            self.current = chunk;
        } else {
            // next_frame was not drained: keep everything, in order.
            self.pending.extend_from_slice(&self.current);
            self.current = chunk;
        }
    }

    /// The next complete frame, or `None` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameTooLarge> {
        loop {
            if self.current.is_empty() {
                return Ok(None);
            }
            match memchr::memchr(b'\n', &self.current) {
                Some(pos) => {
                    let mut line = self.current.split_to(pos + 1);
                    line.truncate(pos);
                    let frame = if self.pending.is_empty() {
                        if self.exact && pos + 1 != self.chunk_len {
                            Bytes::copy_from_slice(&line)
                        } else {
                            line
                        }
                    } else {
                        if self.pending.len() + line.len() > self.max_frame {
                            self.pending.clear();
                            return Err(FrameTooLarge {
                                limit: self.max_frame,
                            });
                        }
                        self.pending.extend_from_slice(&line);
                        if self.exact {
                            // exact size; the buffer is reused for the next frame
                            let f = Bytes::copy_from_slice(&self.pending);
                            self.pending.clear();
                            f
                        } else {
                            self.pending.split().freeze()
                        }
                    };
                    if let Some(frame) = trim(frame) {
                        if frame.len() > self.max_frame {
                            return Err(FrameTooLarge {
                                limit: self.max_frame,
                            });
                        }
                        return Ok(Some(frame));
                    }
                }
                None => {
                    if self.pending.len() + self.current.len() > self.max_frame {
                        self.pending.clear();
                        self.current = Bytes::new();
                        return Err(FrameTooLarge {
                            limit: self.max_frame,
                        });
                    }
                    self.pending.extend_from_slice(&self.current);
                    self.current = Bytes::new();
                    return Ok(None);
                }
            }
        }
    }

    /// The bytes left after the last newline, once the stream has ended (a
    /// last event without a trailing newline), or `None`.
    pub fn finish(&mut self) -> Option<Bytes> {
        self.pending.extend_from_slice(&self.current);
        self.current = Bytes::new();
        trim(self.pending.split().freeze())
    }

    #[cfg(any(test, feature = "fuzzing"))]
    /// Bytes buffered and not framed yet.
    pub fn buffered(&self) -> usize {
        self.pending.len() + self.current.len()
    }
}

/// Splits a protobuf watch stream into its frames (a 4-byte big-endian
/// length, then that many bytes: one `WatchEvent`), whatever the chunk
/// boundaries.
///
/// As with [`LineFramer`], every frame is an exact-size buffer of its own
/// (a frame that is a whole chunk is kept as is, any other is copied once),
/// and a frame longer than the maximum fails as soon as its length prefix
/// has arrived, before any of it is buffered. A stream that ends inside a
/// frame leaves [`buffered`](Self::buffered) bytes behind.
///
/// ```
/// use bytes::Bytes;
/// use kcache_reflector::ProtobufFramer;
///
/// let mut framer = ProtobufFramer::with_max_frame(1024);
/// framer.push(Bytes::from_static(b"\0\0\0\x02ab\0\0"));
/// assert_eq!(framer.next_frame()?.as_deref(), Some(&b"ab"[..]));
/// assert_eq!(framer.next_frame()?, None); // the second frame is incomplete
/// framer.push(Bytes::from_static(b"\0\x01c"));
/// assert_eq!(framer.next_frame()?.as_deref(), Some(&b"c"[..]));
/// assert_eq!(framer.buffered(), 0);
/// # Ok::<_, kcache_reflector::FrameTooLarge>(())
/// ```
#[derive(Debug)]
pub struct ProtobufFramer {
    /// The start of a frame that spans chunks (its length prefix included).
    pending: BytesMut,
    /// The part of the last chunk not framed yet.
    current: Bytes,
    /// Length of the last chunk pushed.
    chunk_len: usize,
    max_frame: usize,
}

impl ProtobufFramer {
    /// A framer that fails on frames longer than `max_frame` bytes.
    pub fn with_max_frame(max_frame: usize) -> Self {
        ProtobufFramer {
            pending: BytesMut::new(),
            current: Bytes::new(),
            chunk_len: 0,
            max_frame,
        }
    }

    /// Adds a chunk. Call [`next_frame`](Self::next_frame) until it returns
    /// `None` before pushing the next chunk.
    pub fn push(&mut self, chunk: Bytes) {
        self.chunk_len = chunk.len();
        if !self.current.is_empty() {
            // next_frame was not drained: keep everything, in order.
            self.pending.extend_from_slice(&self.current);
        }
        self.current = chunk;
    }

    fn too_large(&mut self) -> FrameTooLarge {
        self.pending.clear();
        self.current = Bytes::new();
        FrameTooLarge {
            limit: self.max_frame,
        }
    }

    /// The frame length announced by the 4-byte big-endian prefix that
    /// starts `prefix`, or `None` when it is over `max_frame`.
    fn announced_len(&self, prefix: &[u8]) -> Option<usize> {
        let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        (len <= self.max_frame).then_some(len)
    }

    /// The next complete frame (without its length prefix), or `None` when
    /// more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Bytes>, FrameTooLarge> {
        if self.pending.is_empty() {
            if self.current.len() < 4 {
                self.pending.extend_from_slice(&self.current);
                self.current = Bytes::new();
                return Ok(None);
            }
            let Some(len) = self.announced_len(&self.current) else {
                return Err(self.too_large());
            };
            if self.current.len() < 4 + len {
                self.pending.reserve(4 + len);
                self.pending.extend_from_slice(&self.current);
                self.current = Bytes::new();
                return Ok(None);
            }
            let whole_chunk = self.current.len() == self.chunk_len && 4 + len == self.chunk_len;
            let mut frame = self.current.split_to(4 + len);
            frame.advance(4);
            return Ok(Some(if whole_chunk {
                frame
            } else {
                Bytes::copy_from_slice(&frame)
            }));
        }
        // a frame that started in an earlier chunk
        if self.pending.len() < 4 {
            let n = (4 - self.pending.len()).min(self.current.len());
            self.pending.extend_from_slice(&self.current.split_to(n));
            if self.pending.len() < 4 {
                return Ok(None);
            }
        }
        let Some(len) = self.announced_len(&self.pending) else {
            return Err(self.too_large());
        };
        let need = 4 + len - self.pending.len();
        let n = need.min(self.current.len());
        self.pending.reserve(need);
        self.pending.extend_from_slice(&self.current.split_to(n));
        if n < need {
            return Ok(None);
        }
        // exact size; the buffer is reused for the next frame
        let frame = Bytes::copy_from_slice(&self.pending[4..]);
        self.pending.clear();
        Ok(Some(frame))
    }

    /// Bytes buffered and not framed yet (at the end of the stream: a
    /// truncated last frame).
    pub fn buffered(&self) -> usize {
        self.pending.len() + self.current.len()
    }
}

/// Why a watch stream cannot be framed further.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// An event over the maximum size.
    TooLarge(FrameTooLarge),
    /// Bytes that are not a frame of the format (a CBOR sequence whose
    /// next item is malformed): the stream cannot be read further.
    Malformed(Box<dyn std::error::Error + Send + Sync>),
}

impl From<FrameTooLarge> for FrameError {
    fn from(e: FrameTooLarge) -> Self {
        FrameError::TooLarge(e)
    }
}

/// A watch stream's framer, as a format's codec makes it: by line for
/// JSON, by length prefix for protobuf, by data item for CBOR.
pub(crate) trait Framer: Send + fmt::Debug {
    /// Adds a chunk; call [`next_frame`](Self::next_frame) until it
    /// returns `None` before pushing the next one.
    fn push(&mut self, chunk: Bytes);

    /// The next complete frame, `None` when more bytes are needed.
    fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError>;

    /// At the end of the stream: a last frame without its terminator (a
    /// JSON line without a newline, which may be truncated: `Ok(Some)`),
    /// nothing left (`Ok(None)`), or the byte count of a truncated frame
    /// (`Err`).
    fn finish(&mut self) -> Result<Option<Bytes>, usize>;
}

impl Framer for LineFramer {
    fn push(&mut self, chunk: Bytes) {
        LineFramer::push(self, chunk);
    }
    fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        Ok(LineFramer::next_frame(self)?)
    }
    fn finish(&mut self) -> Result<Option<Bytes>, usize> {
        Ok(LineFramer::finish(self))
    }
}

impl Framer for ProtobufFramer {
    fn push(&mut self, chunk: Bytes) {
        ProtobufFramer::push(self, chunk);
    }
    fn next_frame(&mut self) -> Result<Option<Bytes>, FrameError> {
        Ok(ProtobufFramer::next_frame(self)?)
    }
    fn finish(&mut self) -> Result<Option<Bytes>, usize> {
        match self.buffered() {
            0 => Ok(None),
            n => Err(n),
        }
    }
}

fn trim(mut frame: Bytes) -> Option<Bytes> {
    while frame.last().is_some_and(|b| b.is_ascii_whitespace()) {
        frame.truncate(frame.len() - 1);
    }
    let lead = frame
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(frame.len());
    if lead == frame.len() {
        return None;
    }
    if lead > 0 {
        frame = frame.slice(lead..);
    }
    Some(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames_of(chunks: &[&[u8]]) -> Vec<Vec<u8>> {
        let mut f = LineFramer::new();
        let mut out = Vec::new();
        for c in chunks {
            f.push(Bytes::copy_from_slice(c));
            while let Some(fr) = f.next_frame().unwrap() {
                out.push(fr.to_vec());
            }
        }
        if let Some(fr) = f.finish() {
            out.push(fr.to_vec());
        }
        out
    }

    #[test]
    fn several_per_chunk_and_split_across_chunks() {
        let out = frames_of(&[b"a1\nb2\nc", b"3", b"3\r\n\n  \nd4"]);
        assert_eq!(
            out,
            vec![
                b"a1".to_vec(),
                b"b2".to_vec(),
                b"c33".to_vec(),
                b"d4".to_vec()
            ]
        );
    }

    #[test]
    fn every_split_point_gives_the_same_frames() {
        let stream = b"{\"x\":1}\n{\"y\":[1,2,3]}\n\n{\"z\":\"\\n\"}\n";
        for i in 0..stream.len() {
            for j in i..stream.len() {
                let out = frames_of(&[&stream[..i], &stream[i..j], &stream[j..]]);
                assert_eq!(out.len(), 3, "split {i} {j}");
                assert_eq!(out[2], b"{\"z\":\"\\n\"}".to_vec());
            }
        }
    }

    #[test]
    fn very_large_frame_byte_by_byte_and_limit() {
        let big = vec![b'x'; 1 << 20];
        let mut stream = big.clone();
        stream.push(b'\n');
        let chunks: Vec<&[u8]> = stream.chunks(4096).collect();
        let out = frames_of(&chunks);
        assert_eq!(out, vec![big]);

        let mut f = LineFramer::with_max_frame(10);
        f.push(Bytes::from_static(b"0123456789abc"));
        assert_eq!(f.next_frame(), Err(FrameTooLarge { limit: 10 }));
        let mut f = LineFramer::with_max_frame(10);
        f.push(Bytes::from_static(b"0123456"));
        assert_eq!(f.next_frame(), Ok(None));
        f.push(Bytes::from_static(b"789abc\nok\n"));
        assert_eq!(f.next_frame(), Err(FrameTooLarge { limit: 10 }));
        assert_eq!(f.next_frame().unwrap().as_deref(), Some(&b"ok"[..]));
    }

    #[test]
    fn copies_unless_zero_copy_or_whole_chunk() {
        let chunk = Bytes::from_static(b"abc\ndef\n");
        let mut f = LineFramer::new().zero_copy();
        f.push(chunk.clone());
        let a = f.next_frame().unwrap().unwrap();
        assert_eq!(a.as_ptr(), chunk.as_ptr());
        // exact (default): a part of a chunk is copied
        let mut f = LineFramer::new();
        f.push(chunk.clone());
        let a = f.next_frame().unwrap().unwrap();
        assert_ne!(a.as_ptr(), chunk.as_ptr());
        assert_eq!(&a[..], b"abc");
        // ... a whole chunk is not
        let whole = Bytes::from(b"{\"one\":1}\n".to_vec());
        let mut f = LineFramer::new();
        f.push(whole.clone());
        assert_eq!(f.next_frame().unwrap().unwrap().as_ptr(), whole.as_ptr());
    }

    fn protobuf_frames(
        chunks: &[&[u8]],
        max: usize,
    ) -> Result<(Vec<Vec<u8>>, usize), FrameTooLarge> {
        let mut f = ProtobufFramer::with_max_frame(max);
        let mut out = Vec::new();
        for c in chunks {
            f.push(Bytes::copy_from_slice(c));
            while let Some(fr) = f.next_frame()? {
                out.push(fr.to_vec());
            }
        }
        Ok((out, f.buffered()))
    }

    fn length_prefixed(frames: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in frames {
            out.extend_from_slice(&(f.len() as u32).to_be_bytes());
            out.extend_from_slice(f);
        }
        out
    }

    #[test]
    fn protobuf_frames_at_every_split_point() {
        let frames: [&[u8]; 4] = [b"first", b"", b"a longer third frame", b"4"];
        let stream = length_prefixed(&frames);
        let want: Vec<Vec<u8>> = frames.iter().map(|f| f.to_vec()).collect();
        for i in 0..stream.len() {
            for j in i..stream.len() {
                let (out, left) =
                    protobuf_frames(&[&stream[..i], &stream[i..j], &stream[j..]], 64).unwrap();
                assert_eq!(out, want, "split {i} {j}");
                assert_eq!(left, 0);
            }
        }
        // a stream cut inside a frame leaves its bytes behind
        let (out, left) = protobuf_frames(&[&stream[..stream.len() - 1]], 64).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(left, 4);
    }

    #[test]
    fn protobuf_frame_limit_and_copies() {
        let stream = length_prefixed(&[b"0123456789", b"ok"]);
        assert_eq!(protobuf_frames(&[&stream], 10).unwrap().0.len(), 2);
        // too large: refused on its length prefix, even split before it
        for cut in 0..5 {
            assert_eq!(
                protobuf_frames(&[&stream[..cut], &stream[cut..]], 9),
                Err(FrameTooLarge { limit: 9 }),
                "cut {cut}"
            );
        }
        let mut f = ProtobufFramer::with_max_frame(9);
        f.push(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]));
        assert_eq!(f.next_frame(), Err(FrameTooLarge { limit: 9 }));
        // a frame inside a larger chunk is copied, a whole chunk is not
        let chunk = Bytes::from(stream.clone());
        let mut f = ProtobufFramer::with_max_frame(64);
        f.push(chunk.clone());
        let a = f.next_frame().unwrap().unwrap();
        let range = chunk.as_ptr() as usize..chunk.as_ptr() as usize + chunk.len();
        assert!(!range.contains(&(a.as_ptr() as usize)));
        let whole = Bytes::from(length_prefixed(&[b"alone"]));
        let mut f = ProtobufFramer::with_max_frame(64);
        f.push(whole.clone());
        assert_eq!(
            f.next_frame().unwrap().unwrap().as_ptr(),
            whole[4..].as_ptr()
        );
    }

    #[test]
    fn zero_copy_frames_agree() {
        let stream = b"{\"x\":1}\n{\"y\":[1,2,3]}\n\n{\"z\":\"\\n\"}\n";
        for i in 0..stream.len() {
            let mut f = LineFramer::new().zero_copy();
            let mut out = Vec::new();
            for c in [&stream[..i], &stream[i..]] {
                f.push(Bytes::copy_from_slice(c));
                while let Some(fr) = f.next_frame().unwrap() {
                    out.push(fr.to_vec());
                }
            }
            assert_eq!(out.len(), 3, "split {i}");
        }
    }
}
