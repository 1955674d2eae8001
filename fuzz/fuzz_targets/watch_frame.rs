//! The watch stream path: newline framing of arbitrary chunks, then the
//! decode of each frame as a watch event.
//!
//! The properties are in `kcache_fuzz_checks::watch_frame` (tests/fuzz-checks), which
//! the stable smoke test in `cargo test --workspace` runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kcache_fuzz_checks::watch_frame::check(data));
