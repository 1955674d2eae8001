//! The bounded fuzz smoke: a target's check over its checked-in corpus,
//! then over a fixed number of seeded mutations of it. Deterministic: the
//! same inputs on every run, so a failure reproduces. A longer local run:
//! `KCACHE_FUZZ_SMOKE_MUTATIONS=200000 KCACHE_FUZZ_SMOKE_SEED=2 cargo test
//! -p kcache-fuzz-checks --test smoke --release`.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Check;
use crate::mutate::{Rng, mutate};

/// The checked-in corpus of `target`: `fuzz/corpus/<target>/`.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// The seed inputs of `target`, sorted by file name.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut seeds: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading the corpus {}: {e}", dir.display()))
        .map(|e| {
            let e = e.expect("reading a corpus entry");
            let data = fs::read(e.path())
                .unwrap_or_else(|err| panic!("reading {}: {err}", e.path().display()));
            (e.file_name().to_string_lossy().into_owned(), data)
        })
        .collect();
    seeds.sort();
    seeds
}

/// What one smoke run did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Seed inputs checked.
    pub seeds: usize,
    /// Mutated inputs checked.
    pub mutations: usize,
    /// Time taken.
    pub elapsed: Duration,
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The number of mutations to run: `KCACHE_FUZZ_SMOKE_MUTATIONS` or
/// `default` (each target's test sizes its own).
pub fn mutations(default: usize) -> usize {
    env_number("KCACHE_FUZZ_SMOKE_MUTATIONS").map_or(default, |n| n as usize)
}

/// FNV-1a: a fixed seed per target name.
fn seed_of(target: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in target.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ env_number("KCACHE_FUZZ_SMOKE_SEED").unwrap_or(0)
}

/// Runs `check` on one input; on a panic, saves the input under
/// `failures/` and panics with where it is and how to replay it.
fn run_one(target: &str, check: Check, input: &[u8], what: &str, failures: &Path) {
    if panic::catch_unwind(AssertUnwindSafe(|| check(input))).is_ok() {
        return;
    }
    let dir = failures.join(target);
    let _ = fs::create_dir_all(&dir);
    let path = dir.join(format!("crash-{}", what.replace(['/', ' '], "_")));
    let saved = match fs::write(&path, input) {
        Ok(()) => format!("saved as {}", path.display()),
        Err(e) => format!("could not be saved ({e})"),
    };
    panic!(
        "fuzz smoke: target {target} failed (see the panic above) on {what}; the input, {saved}, is {}\n\
         replay with cargo-fuzz: cd fuzz && cargo +nightly fuzz run {target} {}\n\
         then make it a unit test in the crate concerned and add it to fuzz/corpus/{target}/",
        crate::preview(input),
        path.display(),
    );
}

/// Runs `check` over the corpus of `target`, then over `mutations` seeded
/// mutations of it; panics (naming the input, saved under `failures/`) on
/// the first input that fails.
pub fn run(target: &str, check: Check, mutations: usize, failures: &Path) -> Outcome {
    let started = Instant::now();
    let seeds = seeds(target);
    assert!(!seeds.is_empty(), "fuzz/corpus/{target}/ has no seeds");
    for (name, data) in &seeds {
        run_one(target, check, data, &format!("seed {name}"), failures);
    }
    let mut rng = Rng::new(seed_of(target));
    let mut last: Option<Vec<u8>> = None;
    for i in 0..mutations {
        let (name, seed) = &seeds[i % seeds.len()];
        // every third input mutates the previous one: mutations stack up
        let base = match &last {
            Some(prev) if i % 3 == 2 => prev,
            _ => seed,
        };
        let (_, other) = rng.pick(&seeds);
        let input = mutate(&mut rng, base, other);
        run_one(
            target,
            check,
            &input,
            &format!("mutation {i} of seed {name}"),
            failures,
        );
        last = Some(input);
    }
    Outcome {
        seeds: seeds.len(),
        mutations,
        elapsed: started.elapsed(),
    }
}
