//! The label selector parser: never panics, and what parses prints to a
//! string that parses back to the same selector.
//!
//! The properties are in `kcache_fuzz_checks::label_selector` (tests/fuzz-checks), which
//! the stable smoke test in `cargo test --workspace` runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kcache_fuzz_checks::label_selector::check(data));
