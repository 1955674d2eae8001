//! The reflector's list decode: never panics, accepts a page exactly when
//! serde_json does, and agrees with it on items, names, resourceVersion and
//! continue token.
//!
//! The properties are in `kcache_fuzz_checks::list_decode` (tests/fuzz-checks), which
//! the stable smoke test in `cargo test --workspace` runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kcache_fuzz_checks::list_decode::check(data));
