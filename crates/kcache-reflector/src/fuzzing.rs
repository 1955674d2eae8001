//! Fuzzing support, not a stable API: entry points into the reflector's
//! internals for kcache's fuzz targets (`fuzz/`) and their stable smoke test
//! (`tests/fuzz-checks`), behind the `fuzzing` feature; may change in any
//! release.

use std::ops::Range;

/// The list splitter the list decode uses ([`EventDecoder::decode_list`]
/// takes its fast path through it): `None` when the body does not have the
/// expected shape, else the envelope (the body with the items array
/// replaced by `[]`) and each item's byte range in `body`.
///
/// [`EventDecoder::decode_list`]: crate::EventDecoder::decode_list
pub fn split_list(body: &[u8]) -> Option<(Vec<u8>, Vec<Range<usize>>)> {
    crate::split::split_list(body).map(|s| (s.envelope, s.items))
}
