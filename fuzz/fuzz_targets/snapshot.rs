//! The informer's snapshot reader: never panics or allocates beyond what
//! the file justifies; written snapshots read back equal.
//!
//! The properties are in `kcache_fuzz_checks::snapshot` (tests/fuzz-checks), which
//! the stable smoke test in `cargo test --workspace` runs too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kcache_fuzz_checks::snapshot::check(data));
