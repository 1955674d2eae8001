//! Runnable kcache examples: see `informer.rs` (`cargo run -p
//! kcache-examples --example informer -- --help`). This library is empty.
