//! The property checks of kcache's fuzz targets, in one place for two
//! callers:
//!
//! - the cargo-fuzz targets under `fuzz/` (nightly, libFuzzer, minutes to
//!   hours: `cargo xtask fuzz`), each a one-line call of a `check` below;
//! - a bounded smoke on the stable toolchain (`tests/smoke.rs`, part of
//!   `cargo test --workspace`): every check over the checked-in corpus
//!   (`fuzz/corpus/<target>/`) plus a fixed, seeded set of mutations of it
//!   ([`smoke`]).
//!
//! So the smoke cannot drift from the targets: both run the same function.
//! Each `check` panics when a property does not hold, which libFuzzer
//! reports as a crash and the smoke as a failed test naming the input.
//!
//! ```
//! // A check accepts any bytes; it panics only on a bug.
//! kcache_fuzz_checks::list_split::check(br#"{"metadata":{},"items":[{"a":1}]}"#);
//! kcache_fuzz_checks::list_split::check(b"\xff not json");
//! ```
//!
//! The crate installs a global allocator that records the largest single
//! allocation per thread ([`alloc`]), so the snapshot check can tell an
//! allocation sized by an unchecked length field in a file.

#[allow(unsafe_code)]
pub mod alloc;
pub mod cbor_frame;
pub mod cbor_list;
pub mod keys;
pub mod label_selector;
pub mod list_decode;
pub mod list_split;
pub mod mutate;
pub mod protobuf_frame;
pub mod smoke;
pub mod snapshot;
pub mod watch_frame;

#[global_allocator]
static ALLOCATOR: alloc::TrackingAllocator = alloc::TrackingAllocator;

/// A fuzz target's property check: panics when a property does not hold.
pub type Check = fn(&[u8]);

/// Every fuzz target, by the name of its cargo-fuzz binary and corpus
/// folder, with its check.
pub const TARGETS: &[(&str, Check)] = &[
    ("watch_frame", watch_frame::check),
    ("label_selector", label_selector::check),
    ("keys", keys::check),
    ("list_split", list_split::check),
    ("list_decode", list_decode::check),
    ("snapshot", snapshot::check),
    ("protobuf_frame", protobuf_frame::check),
    ("cbor_frame", cbor_frame::check),
    ("cbor_list", cbor_list::check),
];

/// Whether `data` is one JSON text (RFC 8259): UTF-8, and serde_json's
/// grammar (it checks structure, numbers, escapes and control characters
/// of every string, read or skipped).
///
/// A `\uXXXX` escape of a lone surrogate is grammatical: RFC 8259 (section
/// 8.2) leaves its meaning to the reader. serde_json accepts it in the
/// strings it skips and refuses it in those it decodes (so its `Value`
/// refuses a document with one anywhere); kcache decodes only metadata. The
/// checks therefore ask "is JSON" of this function, and compare with a
/// `Value` only where serde_json reads one.
pub fn json_text(data: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(data)
        .map_err(|e| format!("invalid UTF-8 at byte {}", e.valid_up_to()))?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// At most the first 200 bytes of `data`, lossily as text, for messages.
pub(crate) fn preview(data: &[u8]) -> String {
    let cut = data.len().min(200);
    let mut s = format!("{:?}", String::from_utf8_lossy(&data[..cut]));
    if data.len() > cut {
        s.push_str(&format!("... ({} bytes)", data.len()));
    }
    s
}
