//! CBOR list bodies (`application/cbor` LIST responses) read in chunks, and
//! the same bytes as one CBOR watch event.
//!
//! The properties are in `kcache_fuzz_checks::cbor_list` (tests/fuzz-checks),
//! which the stable smoke test in `cargo test --workspace` runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kcache_fuzz_checks::cbor_list::check(data));
