//! The reflector's list splitter: agrees with serde_json on valid lists,
//! never panics, every cut a byte range of the input.
//!
//! The properties are in `kcache_fuzz_checks::list_split` (tests/fuzz-checks), which
//! the stable smoke test in `cargo test --workspace` runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kcache_fuzz_checks::list_split::check(data));
