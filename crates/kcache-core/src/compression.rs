//! Opt-in LZ4 compression of a cached object's JSON, with a dictionary shared
//! by every object built with the same options.
//!
//! Kubernetes objects of one type are very alike (same keys, same labels,
//! same images, same managedFields layout), and each is small (a few KiB),
//! so on its own each compresses poorly. LZ4 with an external dictionary
//! lets every object refer back into one sample object: the first object
//! built with a [`Compression::lz4`] setting becomes the dictionary and the
//! following ones store mostly back-references into it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::object::error::ObjectError;

/// JSON shorter than this is never compressed (nor used as a dictionary).
const MIN_COMPRESS_LEN: usize = 64;

/// Compressed objects decompressed so far, by every thread.
static DECOMPRESSIONS: AtomicU64 = AtomicU64::new(0);

/// How many times a compressed [`CachedObject`](crate::CachedObject) has
/// been decompressed in this process (by a [`decode`](crate::CachedObject::decode),
/// [`json`](crate::CachedObject::json), [`encoded`](crate::CachedObject::encoded),
/// a comparison of a compressed with a plain object...), by every thread,
/// since the process started.
///
/// One relaxed atomic increment per decompression: read it before and
/// after a piece of work to see how often handlers, listers or reconcilers
/// paid for a decompression (see the informer's background compression).
pub fn decompressions() -> u64 {
    DECOMPRESSIONS.load(Ordering::Relaxed)
}

/// Typed decodes so far ([`CachedObject::decode`](crate::CachedObject::decode),
/// and the `decode` of a cast), by every thread, since the process
/// started: next to [`decompressions`], how many of a program's decodes
/// paid for a decompression first.
static DECODES: AtomicU64 = AtomicU64::new(0);

/// How many typed decodes ([`CachedObject::decode`](crate::CachedObject::decode))
/// this process has made, by every thread. One relaxed atomic increment
/// per decode (next to a serde decode of 10-40 µs for a Pod). Read with
/// [`decompressions`] to see what share of the decodes of handlers,
/// listers and reconcilers met a compressed object.
///
/// ```
/// let before = kcache_core::decodes();
/// let obj = kcache_core::CachedObject::<serde_json::Value>::from_bytes(
///     br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n"}}"#.to_vec(),
/// )
/// .unwrap();
/// obj.decode().unwrap();
/// assert!(kcache_core::decodes() > before);
/// ```
pub fn decodes() -> u64 {
    DECODES.load(Ordering::Relaxed)
}

/// Counts one typed decode (see [`decodes`]).
pub(crate) fn count_decode() {
    DECODES.fetch_add(1, Ordering::Relaxed);
}

/// Compresses `bytes` against `dict` when it saves space (the compressed
/// form is at most 7/8 of the input); `None` otherwise.
pub(crate) fn compress_with(dict: &CompressionDictionary, bytes: &[u8]) -> Option<Payload> {
    if bytes.len() < MIN_COMPRESS_LEN {
        return None;
    }
    let len = u32::try_from(bytes.len()).ok()?;
    // Never panics: the output buffer is sized for the worst case and the
    // dictionary is at most the 64 KiB window.
    let data = lz4_flex::block::compress_with_dict(bytes, dict.as_bytes());
    if data.len() > bytes.len() - bytes.len() / 8 {
        return None;
    }
    Some(Payload::Lz4(Lz4Payload {
        data: Bytes::from(data.into_boxed_slice()),
        len,
        dict: dict.clone(),
    }))
}

/// A dictionary for LZ4 compression: a sample of JSON that compressed objects
/// refer back into.
///
/// A cheap-to-clone handle (one reference count). Every compressed
/// [`CachedObject`](crate::CachedObject) keeps a handle to the dictionary it
/// was compressed with, so the dictionary lives as long as the last such
/// object.
#[derive(Clone)]
pub struct CompressionDictionary {
    // A thin pointer (not `Arc<[u8]>`): every compressed object holds one.
    bytes: Arc<DictBytes>,
}

struct DictBytes(Box<[u8]>);

impl CompressionDictionary {
    /// The longest useful dictionary: LZ4 refers back at most 64 KiB.
    pub const MAX_LEN: usize = 64 * 1024;

    /// A dictionary from sample bytes (typically one object's JSON); only
    /// the first [`MAX_LEN`](Self::MAX_LEN) bytes are kept.
    pub fn new(sample: impl AsRef<[u8]>) -> Self {
        let sample = sample.as_ref();
        let kept = sample.get(..Self::MAX_LEN).unwrap_or(sample);
        CompressionDictionary {
            bytes: Arc::new(DictBytes(Box::from(kept))),
        }
    }

    /// The dictionary's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes.0
    }

    /// Length of the dictionary in bytes.
    pub fn len(&self) -> usize {
        self.bytes.0.len()
    }

    /// Whether the dictionary is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.0.is_empty()
    }

    /// Whether two handles share the same dictionary allocation.
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.bytes, &other.bytes)
    }
}

impl fmt::Debug for CompressionDictionary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompressionDictionary")
            .field("len", &self.len())
            .finish()
    }
}

/// How cached objects store their JSON: as given (the default) or LZ4
/// compressed against a shared [`CompressionDictionary`].
///
/// Set it with [`ObjectOptions::compression`](crate::ObjectOptions::compression).
/// [`Compression::lz4`] learns its dictionary from the first object it
/// compresses; clones of the setting (and of the options holding it) share
/// that one dictionary, so build the options once per resource type and
/// reuse them for every object.
#[derive(Clone, Default)]
pub struct Compression {
    lz4: Option<Arc<Lz4State>>,
}

struct Lz4State {
    dictionary: OnceLock<CompressionDictionary>,
}

impl Compression {
    /// No compression: the JSON is kept as given (the default).
    pub fn none() -> Self {
        Compression { lz4: None }
    }

    /// LZ4 with a dictionary learned from the first object compressed with
    /// this setting (that object's JSON, after the managedFields cut, up to
    /// [`CompressionDictionary::MAX_LEN`] bytes). It is set once and used by
    /// every later object.
    pub fn lz4() -> Self {
        Compression {
            lz4: Some(Arc::new(Lz4State {
                dictionary: OnceLock::new(),
            })),
        }
    }

    /// LZ4 with a dictionary given up front (e.g. a typical object of the
    /// resource type, or the dictionary of another setting).
    pub fn lz4_with_dictionary(dictionary: CompressionDictionary) -> Self {
        Compression {
            lz4: Some(Arc::new(Lz4State {
                dictionary: OnceLock::from(dictionary),
            })),
        }
    }

    /// Whether objects are compressed.
    pub fn is_enabled(&self) -> bool {
        self.lz4.is_some()
    }

    /// The dictionary, once learned (or when given up front).
    pub fn dictionary(&self) -> Option<&CompressionDictionary> {
        self.lz4.as_ref()?.dictionary.get()
    }

    /// Compresses `json` when this setting asks for it and it saves space
    /// (the compressed form is at most 7/8 of the JSON); `None` otherwise.
    pub(crate) fn compress(&self, json: &[u8]) -> Option<Payload> {
        let state = self.lz4.as_ref()?;
        if json.len() < MIN_COMPRESS_LEN {
            return None;
        }
        let dict = state
            .dictionary
            .get_or_init(|| CompressionDictionary::new(json));
        compress_with(dict, json)
    }
}

impl fmt::Debug for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.lz4 {
            None => f.write_str("Compression::None"),
            Some(state) => f
                .debug_struct("Compression::Lz4")
                .field("dictionary", &state.dictionary.get())
                .finish(),
        }
    }
}

/// What a cached object stores.
pub(crate) enum Payload {
    /// The JSON itself.
    Plain(Bytes),
    /// The JSON compressed as one LZ4 block against a dictionary.
    Lz4(Lz4Payload),
}

pub(crate) struct Lz4Payload {
    /// The compressed block, in a buffer of exactly its length.
    data: Bytes,
    /// Length of the JSON.
    len: u32,
    dict: CompressionDictionary,
}

impl Payload {
    /// The stored bytes: the JSON, or the compressed block.
    pub(crate) fn stored(&self) -> &Bytes {
        match self {
            Payload::Plain(b) => b,
            Payload::Lz4(p) => &p.data,
        }
    }

    /// Length of the JSON.
    pub(crate) fn json_len(&self) -> usize {
        match self {
            Payload::Plain(b) => b.len(),
            Payload::Lz4(p) => p.len as usize,
        }
    }

    /// The dictionary, for a compressed payload.
    pub(crate) fn dictionary(&self) -> Option<&CompressionDictionary> {
        match self {
            Payload::Plain(_) => None,
            Payload::Lz4(p) => Some(&p.dict),
        }
    }

    /// The JSON: borrowed when stored plain, decompressed otherwise.
    pub(crate) fn json(&self) -> Result<Cow<'_, [u8]>, ObjectError> {
        match self {
            Payload::Plain(b) => Ok(Cow::Borrowed(b.as_ref())),
            Payload::Lz4(p) => {
                let mut out = Vec::new();
                p.decompress_into(&mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// Runs `f` on the JSON. A compressed payload is decompressed into a
    /// per-thread scratch buffer, reused across calls.
    pub(crate) fn with_json<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R, ObjectError> {
        let p = match self {
            Payload::Plain(b) => return Ok(f(b.as_ref())),
            Payload::Lz4(p) => p,
        };
        thread_local! {
            static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        /// A larger scratch buffer is freed after use rather than kept.
        const KEEP_SCRATCH: usize = 256 * 1024;
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => {
                let r = p.decompress_into(&mut buf).map(|()| f(&buf));
                if buf.capacity() > KEEP_SCRATCH {
                    *buf = Vec::new();
                }
                r
            }
            // Re-entered from inside `f` (a decode that decodes another
            // object): use a buffer of its own.
            Err(_) => {
                let mut buf = Vec::new();
                p.decompress_into(&mut buf).map(|()| f(&buf))
            }
        })
    }

    /// Whether both payloads hold the same JSON.
    ///
    /// Two payloads compressed against the same dictionary are compared
    /// compressed: the LZ4 compressor is deterministic (same input, same
    /// dictionary, same library build: same output) and decompression is a
    /// function, so equal blocks mean equal JSON and equal JSON means equal
    /// blocks. Any other pair is compared as JSON.
    pub(crate) fn same_json(&self, other: &Self) -> bool {
        match (self, other) {
            (Payload::Plain(a), Payload::Plain(b)) => a == b,
            (Payload::Lz4(a), Payload::Lz4(b)) if a.dict.ptr_eq(&b.dict) => {
                a.len == b.len && a.data == b.data
            }
            _ => {
                if self.json_len() != other.json_len() {
                    return false;
                }
                match (self.json(), other.json()) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => false,
                }
            }
        }
    }
}

impl Lz4Payload {
    fn decompress_into(&self, out: &mut Vec<u8>) -> Result<(), ObjectError> {
        DECOMPRESSIONS.fetch_add(1, Ordering::Relaxed);
        let len = self.len as usize;
        out.clear();
        out.resize(len, 0);
        let n = lz4_flex::block::decompress_into_with_dict(&self.data, out, self.dict.as_bytes())
            .map_err(|e| ObjectError::Decompress(e.to_string()))?;
        if n != len {
            out.clear();
            return Err(ObjectError::Decompress(format!(
                "decompressed {n} bytes, expected {len}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: usize) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i}","namespace":"default","labels":{{"app":"demo","tier":"backend"}}}},"data":{{"key":"value-{i}"}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn payload_stays_small() {
        // Every cached object holds one, compressed or not.
        println!("size_of::<Payload>() = {}", std::mem::size_of::<Payload>());
        assert!(std::mem::size_of::<Payload>() <= 48);
    }

    #[test]
    fn dictionary_is_capped_to_the_window() {
        let d = CompressionDictionary::new(vec![b'x'; 100_000]);
        assert_eq!(d.len(), CompressionDictionary::MAX_LEN);
        assert!(CompressionDictionary::new(b"").is_empty());
    }

    #[test]
    fn corrupt_block_is_an_error_not_a_panic() {
        let c = Compression::lz4();
        let json = sample(1);
        let Some(Payload::Lz4(mut p)) = c.compress(&json) else {
            panic!("expected compression");
        };
        let mut out = Vec::new();
        p.decompress_into(&mut out).unwrap();
        assert_eq!(out, json);
        // Wrong length, truncated block, garbage block, wrong dictionary.
        p.len += 1;
        assert!(p.decompress_into(&mut out).is_err());
        p.len -= 1;
        let full = p.data.clone();
        p.data = full.slice(..full.len() / 2);
        assert!(p.decompress_into(&mut out).is_err());
        p.data = Bytes::from_static(&[0xff; 40]);
        assert!(p.decompress_into(&mut out).is_err());
        p.data = full;
        p.dict = CompressionDictionary::new(b"");
        let bad = Payload::Lz4(p);
        assert!(matches!(bad.json(), Err(ObjectError::Decompress(_))));
        assert!(bad.with_json(|_| ()).is_err());
    }

    #[test]
    fn never_compresses_without_gain() {
        assert!(Compression::none().compress(&sample(1)).is_none());
        let c = Compression::lz4();
        assert!(c.compress(b"{}").is_none());
        assert!(c.dictionary().is_none(), "tiny input does not seed it");
        // Incompressible bytes stay plain.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 56) as u8
            })
            .collect();
        let c = Compression::lz4_with_dictionary(CompressionDictionary::new(sample(0)));
        assert!(c.compress(&noise).is_none());
    }
}
