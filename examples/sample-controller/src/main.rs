//! The sample controller binary (in progress).

fn main() {}
