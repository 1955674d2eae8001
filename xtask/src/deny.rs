//! The dependency policy step of `cargo xtask test`:
//! `cargo deny check licenses bans sources` (policy in `deny.toml`).
//!
//! cargo-deny is used from `PATH` when installed; otherwise it is installed
//! once into cargo's own bin folder (`$CARGO_HOME/bin`, `cargo install
//! cargo-deny --locked`, about 5 minutes on 2 cores, shown as it goes), so
//! later runs and other clones on the same machine reuse it.
//!
//! The advisories check is not run here: it clones the RustSec database
//! from GitHub, which the offline test machines cannot reach. Run
//! `cargo deny check advisories` where the network allows.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::Context as _;

use crate::run::{cargo, step, workspace_root};

/// cargo's home (`$CARGO_HOME`, else `~/.cargo`): where `cargo install`
/// puts binaries by default.
fn tools_root() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| workspace_root().join("target").join("tools"))
}

fn works(cmd: &mut Command) -> bool {
    cmd.arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A `cargo-deny` command: the one on `PATH`, the one in cargo's bin
/// folder, or a fresh install there.
fn cargo_deny() -> anyhow::Result<Command> {
    if works(cargo().arg("deny")) {
        let mut c = cargo();
        c.arg("deny");
        return Ok(c);
    }
    let root = tools_root();
    let local = root.join("bin").join("cargo-deny");
    if !works(&mut Command::new(&local)) {
        eprintln!(
            "\n==> cargo-deny not found: installing it into {} (once; ~5 min on 2 cores)",
            root.display()
        );
        let mut install = cargo();
        install
            .args(["install", "cargo-deny", "--locked", "--root"])
            .arg(&root);
        // cargo prints each crate it compiles: that is the progress shown.
        step("cargo install cargo-deny --locked", install)?;
    }
    let mut c = Command::new(&local);
    c.current_dir(workspace_root());
    // cargo-deny runs as `cargo-deny <subcommand>`, with no `deny` argument.
    Ok(c)
}

/// Runs `cargo deny check licenses bans sources`; returns the seconds taken.
pub fn check() -> anyhow::Result<f64> {
    let mut deny = cargo_deny().context("getting cargo-deny")?;
    deny.args(["check", "licenses", "bans", "sources"]);
    step("cargo deny check licenses bans sources", deny)
}
