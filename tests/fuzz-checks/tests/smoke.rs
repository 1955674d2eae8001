//! The bounded fuzz smoke (stable toolchain, part of `cargo test
//! --workspace`): each fuzz target's check over its checked-in corpus plus
//! a fixed, seeded set of mutations. The longer, coverage-guided runs are
//! `cargo xtask fuzz` (fuzz/README.md).

use std::fs;
use std::path::Path;

use kcache_fuzz_checks::{Check, TARGETS, smoke};

/// Runs `target`'s check over its corpus and `mutations` mutations of it
/// (or `KCACHE_FUZZ_SMOKE_MUTATIONS`). The counts below are sized for about
/// 0.2-1.5 s each in a debug build (docs/reliability.md has the figures).
fn run(target: &str, mutations: usize) {
    let check: Check = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, check)| *check)
        .unwrap_or_else(|| panic!("no check for target {target}"));
    let failures = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-smoke");
    let n = smoke::mutations(mutations);
    let outcome = smoke::run(target, check, n, &failures);
    eprintln!(
        "fuzz smoke {target}: {} seeds + {} mutations in {:.2} s",
        outcome.seeds,
        outcome.mutations,
        outcome.elapsed.as_secs_f64()
    );
}

#[test]
fn fuzz_smoke_watch_frame() {
    run("watch_frame", 5_000);
}

#[test]
fn fuzz_smoke_label_selector() {
    run("label_selector", 20_000);
}

#[test]
fn fuzz_smoke_keys() {
    run("keys", 20_000);
}

#[test]
fn fuzz_smoke_list_split() {
    run("list_split", 20_000);
}

#[test]
fn fuzz_smoke_list_decode() {
    run("list_decode", 20_000);
}

#[test]
fn fuzz_smoke_snapshot() {
    run("snapshot", 2_000);
}

#[test]
fn fuzz_smoke_protobuf_frame() {
    run("protobuf_frame", 5_000);
}

#[test]
fn fuzz_smoke_cbor_frame() {
    run("cbor_frame", 5_000);
}

#[test]
fn fuzz_smoke_cbor_list() {
    run("cbor_list", 5_000);
}

/// Every cargo-fuzz target has a check here, a seed corpus, and is known
/// to `cargo xtask fuzz`; and the other way round.
#[test]
fn every_fuzz_target_has_a_check_a_corpus_and_an_xtask_entry() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = fs::read_to_string(root.join("fuzz/Cargo.toml")).expect("fuzz/Cargo.toml");
    let mut bins: Vec<&str> = manifest
        .split("[[bin]]")
        .skip(1)
        .filter_map(|section| {
            section
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .map(|n| n.trim_matches('"'))
        })
        .collect();
    bins.sort_unstable();
    let mut checks: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    checks.sort_unstable();
    assert_eq!(
        bins, checks,
        "fuzz/Cargo.toml's [[bin]]s and TARGETS differ"
    );
    let xtask = fs::read_to_string(root.join("xtask/src/fuzz.rs")).expect("xtask/src/fuzz.rs");
    let start = xtask.find("pub const TARGETS").expect("xtask's TARGETS");
    let line = &xtask[start..start + xtask[start..].find("];").expect("the end of TARGETS")];
    for name in checks {
        assert!(
            line.contains(&format!("\"{name}\"")),
            "cargo xtask fuzz does not know {name}"
        );
        let target = root.join(format!("fuzz/fuzz_targets/{name}.rs"));
        let source =
            fs::read_to_string(&target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
        assert!(
            source.contains(&format!("kcache_fuzz_checks::{name}::check")),
            "{} does not call kcache_fuzz_checks::{name}::check",
            target.display()
        );
        assert!(
            !smoke::seeds(name).is_empty(),
            "fuzz/corpus/{name}/ has no seeds"
        );
    }
}

/// The checked-in snapshot seeds are what this version writes (else they
/// stop reaching past the header). `KCACHE_FUZZ_BLESS=1` rewrites them.
#[test]
fn snapshot_seeds_are_current() {
    let dir = smoke::corpus_dir("snapshot");
    for (name, bytes) in kcache_fuzz_checks::snapshot::seed_files() {
        let path = dir.join(name);
        if std::env::var_os("KCACHE_FUZZ_BLESS").is_some() {
            fs::create_dir_all(&dir).expect("creating the corpus folder");
            fs::write(&path, &bytes).expect("writing a seed");
            continue;
        }
        let on_disk = fs::read(&path).unwrap_or_default();
        assert!(
            on_disk == bytes,
            "{} is stale: rerun with KCACHE_FUZZ_BLESS=1",
            path.display()
        );
    }
}
