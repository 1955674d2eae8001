//! The docs.rs step of `cargo xtask test` (and `cargo xtask docsrs`): every
//! published crate's documentation builds the way docs.rs builds it, with no
//! warning.
//!
//! docs.rs builds one crate at a time, from its published `.crate`, outside
//! this workspace: `.cargo/config.toml` (which sets
//! `K8S_OPENAPI_ENABLED_VERSION`) does not apply, only the files `cargo
//! package` ships are there, and the features and rustdoc flags are those of
//! the crate's `[package.metadata.docs.rs]`. For each published crate (a
//! workspace member under `crates/` whose `publish` is not `false`) this
//! step:
//!
//! 1. requires `[package.metadata.docs.rs]` in its Cargo.toml;
//! 2. fails on a doc comment naming a repository path such as
//!    `docs/reflector.md` (no such page on docs.rs: link the repository URL);
//! 3. copies the files `cargo package --list` names into a temporary
//!    folder outside the workspace, with a generated Cargo.toml: the crate's
//!    own dependencies (its path dependencies on other kcache crates point at
//!    this workspace's crates, which are not on a registry yet), features and
//!    the workspace lints, and this workspace's Cargo.lock (the same
//!    dependency versions, and `--offline` works);
//! 4. runs `cargo doc --no-deps --lib --offline` there with the docs.rs
//!    features, `RUSTDOCFLAGS` = its `rustdoc-args` plus `-D warnings`,
//!    `K8S_OPENAPI_ENABLED_VERSION` unset, and `RUSTC_BOOTSTRAP` set for
//!    that crate only (docs.rs runs nightly rustdoc; `--cfg docsrs` turns on
//!    `feature(doc_cfg)` for the feature badges), and fails on any warning
//!    line in cargo's output, its dependencies' included.
//!
//! All crates share one target folder (`target/docsrs`), so dependencies
//! are checked once.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::Value;

use crate::run::{cargo, cargo_output, workspace_root};

#[derive(Args)]
pub struct DocsrsArgs {
    /// Check only these crates (default: every published crate).
    #[arg(short, long = "package")]
    packages: Vec<String>,
}

/// `cargo xtask docsrs`.
pub fn run(args: DocsrsArgs) -> anyhow::Result<()> {
    check(&args.packages).map(|_| ())
}

/// Checks the named published crates (all when `only` is empty); returns
/// the seconds taken.
pub fn check(only: &[String]) -> anyhow::Result<f64> {
    eprintln!("\n==> docs.rs builds (each published crate from a copy outside the workspace)");
    let started = Instant::now();
    let metadata = workspace_metadata()?;
    let root = workspace_root();
    let crates_dir = root.join("crates");
    let members: Vec<&Value> = metadata["packages"]
        .as_array()
        .context("cargo metadata: no packages")?
        .iter()
        .collect();
    let mut published: Vec<&Value> = members
        .into_iter()
        .filter(|p| {
            // `publish = false` is `[]` in cargo metadata; absent is null.
            let unpublished = p["publish"].as_array().is_some_and(|a| a.is_empty());
            let manifest = Path::new(p["manifest_path"].as_str().unwrap_or_default());
            !unpublished && manifest.starts_with(&crates_dir)
        })
        .collect();
    published.sort_by_key(|p| p["name"].as_str().unwrap_or_default().to_owned());
    // Nightly rustdoc features (doc_cfg) for the documented crates only:
    // build scripts that probe for a nightly compiler must not find one. One
    // value for every crate (all published ones, whichever are checked): a
    // build script declaring `rerun-if-env-changed=RUSTC_BOOTSTRAP`
    // (thiserror's) would otherwise rebuild it and every crate above it.
    let bootstrap: Vec<String> = published.iter().filter_map(|p| lib_name(p)).collect();
    if !only.is_empty() {
        for name in only {
            if !published.iter().any(|p| p["name"] == name.as_str()) {
                bail!("`{name}` is not a published crate of this workspace");
            }
        }
        published.retain(|p| only.iter().any(|n| p["name"] == n.as_str()));
    }
    if published.is_empty() {
        bail!("no published crate found under {}", crates_dir.display());
    }

    // Every registry dependency in ~/.cargo, so that the copies resolve
    // offline (a no-op when a build has already run).
    let mut fetch = cargo();
    fetch.args(["fetch", "--quiet"]);
    let status = fetch.status().context("running cargo fetch")?;
    if !status.success() {
        bail!("cargo fetch failed ({status}): the copies are documented offline");
    }

    let lints = workspace_lints(&root.join("Cargo.toml"))?;
    let lock = root.join("Cargo.lock");
    let target_dir = PathBuf::from(
        metadata["target_directory"]
            .as_str()
            .context("cargo metadata: no target_directory")?,
    )
    .join("docsrs");
    let scratch = tempfile::Builder::new()
        .prefix("kcache-docsrs-")
        .tempdir()
        .context("creating a temporary folder for the crate copies")?;

    let ctx = Shared {
        lints,
        lock,
        scratch: scratch.path().to_path_buf(),
        target_dir,
        bootstrap: bootstrap.join(","),
        total: published.len(),
    };

    let total = published.len();
    let mut failures = Vec::new();
    for (i, package) in published.iter().enumerate() {
        let name = package["name"].as_str().unwrap_or_default();
        let t = Instant::now();
        match check_one(package, &ctx, i + 1) {
            Ok(()) => eprintln!(
                "==> [{}/{total}] {name}: ok in {:.1}s",
                i + 1,
                t.elapsed().as_secs_f64()
            ),
            Err(e) => {
                eprintln!(
                    "==> [{}/{total}] {name}: FAILED in {:.1}s: {e:#}",
                    i + 1,
                    t.elapsed().as_secs_f64()
                );
                failures.push(format!("{name}: {e:#}"));
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    if !failures.is_empty() {
        bail!(
            "docs.rs builds failed for {} of {total} crates after {secs:.1}s:\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    eprintln!("==> docs.rs builds: {total} crates ok in {secs:.1}s");
    Ok(secs)
}

fn workspace_metadata() -> anyhow::Result<Value> {
    let out = cargo_output(&[
        "metadata",
        "--no-deps",
        "--format-version",
        "1",
        "--offline",
    ])?;
    serde_json::from_slice(&out).context("parsing cargo metadata")
}

/// The docs.rs settings this check supports, from
/// `[package.metadata.docs.rs]`.
#[derive(Debug, Default, PartialEq)]
struct DocsRs {
    all_features: bool,
    no_default_features: bool,
    features: Vec<String>,
    rustdoc_args: Vec<String>,
}

fn docs_rs_settings(name: &str, package: &Value) -> anyhow::Result<DocsRs> {
    let Some(table) = package["metadata"]["docs"]["rs"].as_object() else {
        bail!(
            "{name}'s Cargo.toml has no [package.metadata.docs.rs]: add one with the \
             features docs.rs must build (a k8s-openapi version feature when the crate \
             depends on k8s-openapi) and rustdoc-args = [\"--cfg\", \"docsrs\"]"
        );
    };
    let strings = |key: &str| -> anyhow::Result<Vec<String>> {
        match table.get(key) {
            None => Ok(Vec::new()),
            Some(v) => v
                .as_array()
                .and_then(|a| a.iter().map(|s| s.as_str().map(String::from)).collect())
                .with_context(|| format!("{name}: docs.rs `{key}` must be a list of strings")),
        }
    };
    let mut settings = DocsRs::default();
    for (key, value) in table {
        match key.as_str() {
            "all-features" => settings.all_features = value.as_bool().unwrap_or(false),
            "no-default-features" => {
                settings.no_default_features = value.as_bool().unwrap_or(false)
            }
            "features" => settings.features = strings(key)?,
            "rustdoc-args" => settings.rustdoc_args = strings(key)?,
            other => bail!(
                "{name}: docs.rs setting `{other}` is not reproduced by this check \
                 (xtask/src/docsrs.rs): teach the check, or drop the setting"
            ),
        }
    }
    Ok(settings)
}

/// What every crate's check uses.
struct Shared {
    /// `[lints.*]` tables for the copies (the workspace lints).
    lints: String,
    /// The workspace's Cargo.lock.
    lock: PathBuf,
    /// Where the copies go (outside the workspace).
    scratch: PathBuf,
    /// The target folder all copies share.
    target_dir: PathBuf,
    /// `RUSTC_BOOTSTRAP`: the published library names, comma-separated.
    bootstrap: String,
    total: usize,
}

/// The library target of a package.
fn lib_target(package: &Value) -> Option<&Value> {
    package["targets"].as_array()?.iter().find(|t| {
        t["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "lib"))
    })
}

fn lib_name(package: &Value) -> Option<String> {
    lib_target(package)?["name"].as_str().map(String::from)
}

fn check_one(package: &Value, ctx: &Shared, n: usize) -> anyhow::Result<()> {
    let Shared {
        lints,
        lock,
        scratch,
        target_dir,
        bootstrap,
        total,
    } = ctx;
    let name = package["name"].as_str().context("package without a name")?;
    let settings = docs_rs_settings(name, package)?;
    let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
    let crate_dir = manifest
        .parent()
        .context("manifest path without a parent")?
        .to_path_buf();
    let lib = lib_target(package).with_context(|| format!("{name} has no library target"))?;
    let lib_path = Path::new(lib["src_path"].as_str().unwrap_or_default())
        .strip_prefix(&crate_dir)
        .context("the library's source is outside its crate")?
        .to_path_buf();

    let mut features = settings.features.clone();
    features.sort();
    eprintln!(
        "\n==> [{n}/{total}] {name}: cargo doc{}{}{} (RUSTDOCFLAGS=\"{} -D warnings\")",
        if settings.all_features {
            " --all-features"
        } else {
            ""
        },
        if settings.no_default_features {
            " --no-default-features"
        } else {
            ""
        },
        if features.is_empty() {
            String::new()
        } else {
            format!(" --features {}", features.join(","))
        },
        settings.rustdoc_args.join(" "),
    );

    let bad_links = repository_paths_in_docs(&crate_dir.join("src"))?;
    if !bad_links.is_empty() {
        bail!(
            "doc comments name repository paths that do not exist on docs.rs (link \
             the repository URL instead):\n    {}",
            bad_links.join("\n    ")
        );
    }

    // The copy: what `cargo package` would ship, minus the files it
    // generates (we write our own Cargo.toml).
    let copy = scratch.join(name);
    let files = package_files(name)?;
    for file in &files {
        if matches!(
            file.as_str(),
            "Cargo.toml" | "Cargo.toml.orig" | "Cargo.lock" | ".cargo_vcs_info.json"
        ) {
            continue;
        }
        let from = crate_dir.join(file);
        let to = copy.join(file);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::copy(&from, &to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    }
    std::fs::create_dir_all(&copy)?;
    let toml = copy_manifest(package, &lib_path, lints)?;
    std::fs::write(copy.join("Cargo.toml"), toml)?;
    std::fs::copy(lock, copy.join("Cargo.lock")).context("copying Cargo.lock")?;

    let mut doc = cargo();
    doc.current_dir(&copy)
        .args(["doc", "--no-deps", "--lib", "--offline", "--target-dir"])
        .arg(target_dir);
    if settings.all_features {
        doc.arg("--all-features");
    }
    if settings.no_default_features {
        doc.arg("--no-default-features");
    }
    if !features.is_empty() {
        doc.arg("--features").arg(features.join(","));
    }
    let mut rustdocflags = settings.rustdoc_args.clone();
    rustdocflags.extend(["-D".into(), "warnings".into()]);
    doc.env_remove("K8S_OPENAPI_ENABLED_VERSION")
        .env("RUSTDOCFLAGS", rustdocflags.join(" "))
        .env("RUSTC_BOOTSTRAP", bootstrap)
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    let mut child = doc.spawn().context("running cargo doc")?;
    let mut warnings = Vec::new();
    if let Some(err) = child.stderr.take() {
        for line in BufReader::new(err).lines() {
            let line = line.context("reading cargo doc output")?;
            eprintln!("    {line}");
            if line.trim_start().starts_with("warning") {
                warnings.push(line);
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("cargo doc failed ({status}): see the errors above");
    }
    if !warnings.is_empty() {
        bail!(
            "cargo doc printed {} warning line(s): {}",
            warnings.len(),
            warnings.join(" | ")
        );
    }
    Ok(())
}

/// The files `cargo package` would put into the crate (relative paths).
fn package_files(name: &str) -> anyhow::Result<Vec<String>> {
    let out = cargo_output(&[
        "package",
        "--list",
        "--allow-dirty",
        "--offline",
        "-p",
        name,
    ])?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// `[workspace.lints.*]` of the workspace manifest, as `[lints.*]` tables.
fn workspace_lints(manifest: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    Ok(lints_tables(&text))
}

fn lints_tables(workspace_manifest: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in workspace_manifest.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            inside = false;
            if let Some(rest) = trimmed.strip_prefix("[workspace.lints.") {
                inside = true;
                let _ = writeln!(out, "\n[lints.{rest}");
                continue;
            }
        }
        if inside && !trimmed.is_empty() {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(toml_str).collect();
    format!("[{}]", items.join(", "))
}

/// The copy's Cargo.toml: the package's normal and build dependencies (path
/// dependencies keep their absolute paths), features and lints; no
/// dev-dependencies (docs.rs builds the library only).
fn copy_manifest(package: &Value, lib_path: &Path, lints: &str) -> anyhow::Result<String> {
    let s = |v: &Value| v.as_str().map(String::from);
    let name = s(&package["name"]).context("package without a name")?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Generated by `cargo xtask docsrs` from {}",
        package["manifest_path"].as_str().unwrap_or_default()
    );
    out.push_str("[package]\n");
    let _ = writeln!(out, "name = {}", toml_str(&name));
    for key in ["version", "edition", "rust_version"] {
        if let Some(v) = s(&package[key]) {
            let _ = writeln!(out, "{} = {}", key.replace('_', "-"), toml_str(&v));
        }
    }
    out.push_str(
        "autobins = false\nautoexamples = false\nautotests = false\nautobenches = false\n",
    );
    let _ = writeln!(
        out,
        "\n[lib]\npath = {}",
        toml_str(&lib_path.to_string_lossy())
    );
    out.push_str("\n# Its own workspace: outside this repository's.\n[workspace]\n");

    if let Some(features) = package["features"].as_object().filter(|f| !f.is_empty()) {
        out.push_str("\n[features]\n");
        for (feature, enables) in features {
            let enables: Vec<&str> = enables
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let _ = writeln!(out, "{} = {}", toml_str(feature), toml_list(enables));
        }
    }

    // table header -> lines
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for dep in package["dependencies"].as_array().into_iter().flatten() {
        let section = match dep["kind"].as_str() {
            None | Some("normal") => "dependencies",
            Some("build") => "build-dependencies",
            Some(_) => continue, // dev
        };
        let header = match dep["target"].as_str() {
            Some(target) => format!("target.{}.{section}", toml_str(target)),
            None => section.to_owned(),
        };
        let dep_name = s(&dep["name"]).context("dependency without a name")?;
        let key = s(&dep["rename"]).unwrap_or_else(|| dep_name.clone());
        let mut fields = vec![format!(
            "version = {}",
            toml_str(dep["req"].as_str().unwrap_or("*"))
        )];
        if key != dep_name {
            fields.push(format!("package = {}", toml_str(&dep_name)));
        }
        if let Some(path) = dep["path"].as_str() {
            fields.push(format!("path = {}", toml_str(path)));
        } else if let Some(source) = dep["source"].as_str()
            && !source.starts_with("registry+https://github.com/rust-lang/crates.io-index")
        {
            bail!("{name}: dependency {dep_name} comes from {source}: not supported by this check");
        }
        if dep["optional"].as_bool() == Some(true) {
            fields.push("optional = true".into());
        }
        if dep["uses_default_features"].as_bool() == Some(false) {
            fields.push("default-features = false".into());
        }
        let feats: Vec<&str> = dep["features"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !feats.is_empty() {
            fields.push(format!("features = {}", toml_list(feats)));
        }
        tables.entry(header).or_default().push(format!(
            "{} = {{ {} }}",
            toml_str(&key),
            fields.join(", ")
        ));
    }
    for (header, lines) in tables {
        let _ = writeln!(out, "\n[{header}]");
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
    }
    out.push_str(lints);
    Ok(out)
}

/// Doc-comment lines (`///`, `//!`) under `src` that name a repository
/// path such as `docs/reflector.md` (not part of a URL): `file:line: text`.
fn repository_paths_in_docs(src: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.path());
        for entry in entries {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                for (i, line) in text.lines().enumerate() {
                    if names_repository_path(line) {
                        found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
    }
    Ok(found)
}

/// Whether a doc-comment line names a repository Markdown page
/// (`docs/x.md`, `../docs/x.md`) other than inside a URL.
fn names_repository_path(line: &str) -> bool {
    let trimmed = line.trim_start();
    if !(trimmed.starts_with("///") || trimmed.starts_with("//!")) {
        return false;
    }
    trimmed
        .split(|c: char| c.is_whitespace() || "`()[]<>\"',;".contains(c))
        .any(|token| {
            let path = token.trim_start_matches("./").trim_start_matches("../");
            path.starts_with("docs/") && token.contains(".md") && !token.contains("://")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_paths_are_found_in_doc_comments_only() {
        assert!(names_repository_path(
            "//! See `docs/reflector.md` for more."
        ));
        assert!(names_repository_path(
            "    /// and [this](../docs/sharding.md#x)."
        ));
        assert!(!names_repository_path(
            "/// See [it](https://github.com/kcache/kcache/blob/main/docs/reflector.md)."
        ));
        assert!(!names_repository_path(
            "// a plain comment: docs/reflector.md"
        ));
        assert!(!names_repository_path("/// the docs/ folder"));
    }

    #[test]
    fn workspace_lints_become_package_lints() {
        let ws = "[workspace]\nmembers = []\n\n[workspace.lints.rust]\nunsafe_code = \"forbid\"\n\n[workspace.lints.clippy]\ndbg_macro = \"warn\"\n\n[workspace.dependencies]\nx = \"1\"\n";
        assert_eq!(
            lints_tables(ws),
            "\n[lints.rust]\nunsafe_code = \"forbid\"\n\n[lints.clippy]\ndbg_macro = \"warn\"\n"
        );
    }

    #[test]
    fn docs_rs_settings_are_read_and_unknown_keys_refused() {
        let package = serde_json::json!({"metadata": {"docs": {"rs": {
            "all-features": true,
            "features": ["k8s-openapi/latest"],
            "rustdoc-args": ["--cfg", "docsrs"],
        }}}});
        assert_eq!(
            docs_rs_settings("x", &package).unwrap(),
            DocsRs {
                all_features: true,
                no_default_features: false,
                features: vec!["k8s-openapi/latest".into()],
                rustdoc_args: vec!["--cfg".into(), "docsrs".into()],
            }
        );
        let missing = serde_json::json!({"metadata": null});
        assert!(
            docs_rs_settings("x", &missing)
                .unwrap_err()
                .to_string()
                .contains("no [package.metadata.docs.rs]")
        );
        let unknown = serde_json::json!({"metadata": {"docs": {"rs": {"targets": []}}}});
        assert!(docs_rs_settings("x", &unknown).is_err());
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_str(r#"a"b\c"#), r#""a\"b\\c""#);
    }
}
