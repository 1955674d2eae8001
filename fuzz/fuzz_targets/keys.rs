//! Key functions and the metadata decode of a cached object.
//!
//! The properties are in `kcache_fuzz_checks::keys` (tests/fuzz-checks), which
//! the stable smoke test in `cargo test --workspace` runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kcache_fuzz_checks::keys::check(data));
