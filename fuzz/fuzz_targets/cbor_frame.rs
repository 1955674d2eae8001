//! CBOR sequences (watch framing) and CBOR objects: decode and transcode.
//!
//! The properties are in `kcache_fuzz_checks::cbor_frame` (tests/fuzz-checks),
//! which the stable smoke test in `cargo test --workspace` runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kcache_fuzz_checks::cbor_frame::check(data));
