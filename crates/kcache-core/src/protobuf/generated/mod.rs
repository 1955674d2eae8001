//! Code written by `cargo xtask codegen` (`xtask/src/codegen/protobuf.rs`):
//! do not edit by hand; regenerate, and `cargo xtask codegen --check` tells
//! when a checked-in file is stale.
//!
//! - `tables`: the protobuf field tables of the pinned k8s.io/api and
//!   apimachinery (per message: field number -> JSON name, type,
//!   cardinality; per top-level kind: its message), in the shape
//!   `super::schema` defines.

pub(super) mod tables;
