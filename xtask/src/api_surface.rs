//! `cargo xtask api-surface`: the public surface of each library crate,
//! counted from its source with `syn` (issue 32's table).
//!
//! What is counted, per crate, walking the module tree from `src/lib.rs`
//! (modules and items under `#[cfg(test)]` or the `fuzzing` feature left
//! out: they are not API):
//!
//! - **types**: `pub` structs, enums, unions, traits and type aliases that a
//!   user can name: every module on their path is `pub`, or they are
//!   re-exported by a `pub use` somewhere in the crate;
//! - **methods**: `pub fn`s of those types' inherent impls, the methods of
//!   those traits, and the crate's nameable `pub` free functions;
//! - **root re-exports**: names a `pub use` in `lib.rs` brings to the crate
//!   root (a glob counts once);
//! - **lines**: lines of library source (every `.rs` under `src/`, tests
//!   included, generated code apart in its own column).
//!
//! Items marked `#[doc(hidden)]` (and everything in a `#[doc(hidden)]`
//! module) are not counted: rustdoc does not show them and
//! cargo-semver-checks does not hold them to semver, so they are not part
//! of the surface a user sees (kcache uses them for plumbing between its
//! own crates). The second table counts them too, so that what is hidden
//! is in plain sight.
//!
//! The count is syntactic: an item of a private module re-exported under
//! the same name as another is counted once per name, macros are not
//! expanded. It is a yardstick for the before/after table, not rustdoc.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;
use syn::{ImplItem, Item, TraitItem, UseTree, Visibility};

use crate::run::workspace_root;

/// The library crates whose surface is counted, in layer order.
const CRATES: &[&str] = &[
    "kcache-core",
    "kcache-indexer",
    "kcache-deltafifo",
    "kcache-reflector",
    "kcache-informer",
    "kcache-workqueue",
    "kcache-lease",
    "kcache-controller",
    "kcache",
    "kcache-envtest",
];

#[derive(Args)]
pub struct ApiSurfaceArgs {
    /// Print the files over N lines (library source outside `generated/`).
    #[arg(long, default_value_t = 1000)]
    long_files: usize,
    /// Print the functions over N lines (library source outside
    /// `generated/` and test modules).
    #[arg(long, default_value_t = 100)]
    long_functions: usize,
    /// Count another checkout (e.g. a `git worktree` of an older commit,
    /// for a before/after table) instead of this workspace.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Write docs/api.md: every crate's public types with their public
    /// methods, one line per type (issue 32's "the whole public surface
    /// of each crate on one screen").
    #[arg(long)]
    write_docs: bool,
}

/// One crate's counts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Surface {
    pub types: usize,
    pub methods: usize,
    pub root_reexports: usize,
    pub lines: usize,
    pub generated_lines: usize,
    /// Every counted type's name and its counted methods; the free
    /// functions under [`FREE_FUNCTIONS`]. `methods` is the sum of its
    /// lists.
    pub listing: BTreeMap<String, Vec<String>>,
}

/// The key of [`Surface::listing`] that holds the free functions.
const FREE_FUNCTIONS: &str = "(free functions)";

/// A parsed module: its items, whether it is nameable from outside,
/// whether it (or a module around it) is `#[doc(hidden)]`.
struct Module {
    items: Vec<Item>,
    public: bool,
    hidden: bool,
}

/// Whether `#[doc(hidden)]` items count as surface (the second table).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Hidden {
    /// Left out: the surface rustdoc shows.
    Skip,
    /// Counted like any `pub` item.
    Count,
}

pub fn run(args: ApiSurfaceArgs) -> Result<()> {
    let root = args.root.clone().unwrap_or_else(workspace_root);
    println!("| crate | types | methods | root re-exports | lines | generated lines |");
    println!("|---|---|---|---|---|---|");
    let mut total = Surface::default();
    let mut long = Vec::new();
    let mut long_fns = Vec::new();
    let mut listings = Vec::new();
    let mut hidden_rows = Vec::new();
    for name in CRATES {
        let src = root.join("crates").join(name).join("src");
        if !src.exists() {
            println!("| {name} | (absent) | | | | |");
            continue;
        }
        let s = count(&src, Hidden::Skip).with_context(|| format!("counting {name}"))?;
        let all = count(&src, Hidden::Count).with_context(|| format!("counting {name}"))?;
        hidden_rows.push((name, all.types - s.types, all.methods - s.methods));
        println!(
            "| {name} | {} | {} | {} | {} | {} |",
            s.types, s.methods, s.root_reexports, s.lines, s.generated_lines
        );
        total.types += s.types;
        total.methods += s.methods;
        total.root_reexports += s.root_reexports;
        total.lines += s.lines;
        total.generated_lines += s.generated_lines;
        listings.push((name, s.listing));
        for file in rust_files(&src)? {
            // generated code and test modules in files of their own
            // (`#[cfg(test)] mod tests;`) are not held to the limits
            let generated = is_generated(&file) || file.ends_with("tests.rs");
            let n = fs::read_to_string(&file)?.lines().count();
            let shown = file.strip_prefix(&root).unwrap_or(&file).to_owned();
            if !generated && n > args.long_files {
                long.push((shown.clone(), n));
            }
            if !generated {
                let parsed = syn::parse_file(&fs::read_to_string(&file)?)
                    .with_context(|| format!("parsing {}", file.display()))?;
                let mut fns = Vec::new();
                functions(&parsed.items, &mut fns);
                for (name, line, len) in fns {
                    if len > args.long_functions {
                        long_fns.push((format!("{}:{line}", shown.display()), name, len));
                    }
                }
            }
        }
    }
    println!(
        "| **total** | {} | {} | {} | {} | {} |",
        total.types, total.methods, total.root_reexports, total.lines, total.generated_lines
    );
    println!("\n`#[doc(hidden)]` plumbing between kcache's crates, not counted above:\n");
    println!("| crate | hidden types | hidden methods |");
    println!("|---|---|---|");
    let (mut ht, mut hm) = (0, 0);
    for (name, t, m) in &hidden_rows {
        if *t + *m > 0 {
            println!("| {name} | {t} | {m} |");
        }
        ht += t;
        hm += m;
    }
    println!("| **total** | {ht} | {hm} |");
    if long.is_empty() {
        println!(
            "\nno library file over {} lines outside generated/",
            args.long_files
        );
    } else {
        println!(
            "\nlibrary files over {} lines (outside generated/):",
            args.long_files
        );
        long.sort_by_key(|f| std::cmp::Reverse(f.1));
        for (file, n) in long {
            println!("  {n:>5}  {}", file.display());
        }
    }
    if long_fns.is_empty() {
        println!("no library function over {} lines", args.long_functions);
    } else {
        println!("\nlibrary functions over {} lines:", args.long_functions);
        long_fns.sort_by_key(|f| std::cmp::Reverse(f.2));
        for (at, name, n) in long_fns {
            println!("  {n:>5}  {name}  {at}");
        }
    }
    if args.write_docs {
        let path = root.join("docs/api.md");
        fs::write(&path, api_md(&listings))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}

/// docs/api.md from the crates' listings.
fn api_md(listings: &[(&&'static str, BTreeMap<String, Vec<String>>)]) -> String {
    let mut out = String::from(
        "# The public surface, crate by crate\n\n\
         Written by `cargo xtask api-surface --write-docs` from the source \
         (what it counts is in `xtask/src/api_surface.rs`): every public \
         type a user can name, with its public methods (trait methods \
         included), and each crate's free functions; `#[doc(hidden)]` \
         plumbing between kcache's crates is left out (the command prints \
         how much there is). A name defined in \
         several modules is listed once, with the \
         methods of all of them. Run the command \
         after changing a public item; the counts it prints are the \
         table of issue 32.\n",
    );
    for (name, listing) in listings {
        let types = listing.keys().filter(|k| *k != FREE_FUNCTIONS).count();
        let methods: usize = listing.values().map(Vec::len).sum();
        let _ = write!(
            out,
            "\n## {name}\n\n{types} types, {methods} methods and functions.\n\n"
        );
        for (ty, fns) in listing {
            if fns.is_empty() {
                let _ = writeln!(out, "- `{ty}`");
            } else {
                let _ = writeln!(out, "- `{ty}`: {}", fns.join(", "));
            }
        }
    }
    out
}

/// Every function of `items` with a body (free, inherent and trait impl
/// methods, trait defaults), test modules left out: name, first line,
/// length in lines.
fn functions(items: &[Item], out: &mut Vec<(String, usize, usize)>) {
    use syn::spanned::Spanned as _;
    let mut push = |name: String, start: usize, len: usize| out.push((name, start, len));
    let lines =
        |span: proc_macro2::Span| (span.start().line, span.end().line + 1 - span.start().line);
    for item in live(items) {
        match item {
            Item::Fn(f) => {
                let (at, n) = lines(f.span());
                push(f.sig.ident.to_string(), at, n);
            }
            Item::Impl(imp) => {
                for i in &imp.items {
                    if let ImplItem::Fn(f) = i
                        && !cfg_out(&f.attrs)
                    {
                        let (at, n) = lines(f.span());
                        push(f.sig.ident.to_string(), at, n);
                    }
                }
            }
            Item::Trait(t) => {
                for i in &t.items {
                    if let TraitItem::Fn(f) = i
                        && f.default.is_some()
                    {
                        let (at, n) = lines(f.span());
                        push(f.sig.ident.to_string(), at, n);
                    }
                }
            }
            Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    let mut nested = Vec::new();
                    functions(inner, &mut nested);
                    for (name, line, len) in nested {
                        push(name, line, len);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Counts the crate whose sources are in `src`.
pub fn count(src: &Path, hidden: Hidden) -> Result<Surface> {
    let mut modules = Vec::new();
    load(&src.join("lib.rs"), src, true, hidden, &mut modules)?;
    let shown = |attrs: &[syn::Attribute]| hidden == Hidden::Count || !doc_hidden(attrs);
    let lib = syn::parse_file(&fs::read_to_string(src.join("lib.rs"))?)?;
    let mut reexported = HashSet::new();
    let mut root_reexports = 0;
    for (i, module) in modules.iter().enumerate() {
        if module.hidden && hidden == Hidden::Skip {
            continue;
        }
        for item in &module.items {
            if let Item::Use(u) = item
                && is_pub(&u.vis)
                && shown(&u.attrs)
            {
                let mut names = Vec::new();
                use_names(&u.tree, &mut names);
                if i == 0 {
                    root_reexports += names.len();
                }
                reexported.extend(names);
            }
        }
    }
    debug_assert_eq!(modules[0].items.len(), live(&lib.items).count());
    let mut s = Surface::default();
    let mut types = HashSet::new();
    for module in &modules {
        for item in &module.items {
            let Some((name, vis)) = type_name(item) else {
                continue;
            };
            if is_pub(vis) && shown(attrs(item)) && (module.public || reexported.contains(&name)) {
                s.types += 1;
                let entry = s.listing.entry(name.clone()).or_default();
                types.insert(name);
                if let Item::Trait(t) = item {
                    for i in &t.items {
                        if let TraitItem::Fn(f) = i {
                            entry.push(f.sig.ident.to_string());
                        }
                    }
                }
            }
        }
    }
    for module in &modules {
        for item in &module.items {
            match item {
                Item::Impl(imp) if imp.trait_.is_none() => {
                    let syn::Type::Path(p) = &*imp.self_ty else {
                        continue;
                    };
                    let Some(last) = p.path.segments.last() else {
                        continue;
                    };
                    let ty = last.ident.to_string();
                    if !types.contains(&ty) {
                        continue;
                    }
                    for i in &imp.items {
                        if let ImplItem::Fn(f) = i
                            && is_pub(&f.vis)
                            && !cfg_out(&f.attrs)
                            && shown(&f.attrs)
                        {
                            s.listing
                                .entry(ty.clone())
                                .or_default()
                                .push(f.sig.ident.to_string());
                        }
                    }
                }
                Item::Fn(f)
                    if is_pub(&f.vis)
                        && shown(&f.attrs)
                        && (module.public || reexported.contains(&f.sig.ident.to_string())) =>
                {
                    s.listing
                        .entry(FREE_FUNCTIONS.to_owned())
                        .or_default()
                        .push(f.sig.ident.to_string());
                }
                _ => {}
            }
        }
    }
    s.root_reexports = root_reexports;
    for fns in s.listing.values_mut() {
        fns.sort();
    }
    s.methods = s.listing.values().map(Vec::len).sum();
    for file in rust_files(src)? {
        let n = fs::read_to_string(&file)?.lines().count();
        if is_generated(&file) {
            s.generated_lines += n;
        } else {
            s.lines += n;
        }
    }
    Ok(s)
}

/// Parses `file` and the modules it declares (recursively), appending
/// them to `out` (the file's own module first).
fn load(
    file: &Path,
    dir: &Path,
    public: bool,
    hidden: Hidden,
    out: &mut Vec<Module>,
) -> Result<()> {
    let text = fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let parsed = syn::parse_file(&text).with_context(|| format!("parsing {}", file.display()))?;
    let at = Place {
        dir,
        public,
        hidden: false,
    };
    load_items(live(&parsed.items).cloned().collect(), at, hidden, out)
}

/// Where a module sits: its directory, whether it is nameable from
/// outside, whether it is inside a `#[doc(hidden)]` module.
#[derive(Clone, Copy)]
struct Place<'a> {
    dir: &'a Path,
    public: bool,
    hidden: bool,
}

fn load_items(items: Vec<Item>, at: Place<'_>, mode: Hidden, out: &mut Vec<Module>) -> Result<()> {
    let Place {
        dir,
        public,
        hidden,
    } = at;
    let mut children = Vec::new();
    for item in &items {
        if let Item::Mod(m) = item {
            let name = m.ident.to_string();
            let child_hidden = hidden || doc_hidden(&m.attrs);
            let child_public = public && is_pub(&m.vis) && (mode == Hidden::Count || !child_hidden);
            match &m.content {
                Some((_, inline)) => children.push((
                    live(inline).cloned().collect::<Vec<_>>(),
                    dir.join(&name),
                    child_public,
                    child_hidden,
                )),
                None => {
                    let flat = dir.join(format!("{name}.rs"));
                    let nested = dir.join(&name).join("mod.rs");
                    let file = if flat.exists() { flat } else { nested };
                    let text = fs::read_to_string(&file)
                        .with_context(|| format!("reading {}", file.display()))?;
                    let parsed = syn::parse_file(&text)
                        .with_context(|| format!("parsing {}", file.display()))?;
                    children.push((
                        live(&parsed.items).cloned().collect(),
                        dir.join(&name),
                        child_public,
                        child_hidden,
                    ));
                }
            }
        }
    }
    out.push(Module {
        items,
        public,
        hidden,
    });
    for (items, dir, public, hidden) in children {
        let at = Place {
            dir: &dir,
            public,
            hidden,
        };
        load_items(items, at, mode, out)?;
    }
    Ok(())
}

/// The items not compiled out of a normal build (`cfg(test)`, the
/// `fuzzing` feature).
fn live(items: &[Item]) -> impl Iterator<Item = &Item> {
    items.iter().filter(|i| !cfg_out(attrs(i)))
}

fn attrs(item: &Item) -> &[syn::Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn cfg_out(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = a
                .meta
                .require_list()
                .map(|l| l.tokens.to_string())
                .unwrap_or_default();
            text.contains("test") || text.contains("fuzzing")
        }
    })
}

/// Whether `attrs` hold `#[doc(hidden)]`.
fn doc_hidden(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("doc")
            && a.meta
                .require_list()
                .is_ok_and(|l| l.tokens.to_string().trim() == "hidden")
    })
}

fn is_pub(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

fn type_name(item: &Item) -> Option<(String, &Visibility)> {
    match item {
        Item::Struct(i) => Some((i.ident.to_string(), &i.vis)),
        Item::Enum(i) => Some((i.ident.to_string(), &i.vis)),
        Item::Union(i) => Some((i.ident.to_string(), &i.vis)),
        Item::Trait(i) => Some((i.ident.to_string(), &i.vis)),
        Item::Type(i) => Some((i.ident.to_string(), &i.vis)),
        _ => None,
    }
}

/// The names a `use` tree brings in (a glob as `*`).
fn use_names(tree: &UseTree, out: &mut Vec<String>) {
    match tree {
        UseTree::Path(p) => use_names(&p.tree, out),
        UseTree::Name(n) => out.push(n.ident.to_string()),
        UseTree::Rename(r) => out.push(r.rename.to_string()),
        UseTree::Glob(_) => out.push("*".to_owned()),
        UseTree::Group(g) => g.items.iter().for_each(|t| use_names(t, out)),
    }
}

fn is_generated(file: &Path) -> bool {
    file.components().any(|c| c.as_os_str() == "generated")
}

fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/api.md is what `--write-docs` writes from today's source:
    /// a public item added or removed without rerunning it fails here.
    #[test]
    fn api_md_is_current() {
        let root = workspace_root();
        let mut listings = Vec::new();
        for name in CRATES {
            let s = count(&root.join("crates").join(name).join("src"), Hidden::Skip).unwrap();
            listings.push((name, s.listing));
        }
        let written = fs::read_to_string(root.join("docs/api.md")).unwrap();
        assert!(
            written == api_md(&listings),
            "docs/api.md is stale: run `cargo xtask api-surface --write-docs`"
        );
    }

    #[test]
    fn counts_nameable_items_only() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        fs::write(
            src.join("lib.rs"),
            "mod private;\npub mod open;\npub use private::{Shown, shown_fn};\n\
             #[cfg(test)] mod tests { pub struct NotApi; }\n\
             #[doc(hidden)] pub mod plumbing { pub struct Plumbing; impl Plumbing { pub fn p(&self) {} } }\n\
             impl private::Shown { #[doc(hidden)] pub fn z(&self) {} }\n",
        )
        .unwrap();
        fs::write(
            src.join("private.rs"),
            "pub struct Shown;\npub struct Hidden;\nimpl Shown { pub fn a(&self) {} fn b(&self) {} }\n\
             impl Hidden { pub fn c(&self) {} }\npub fn shown_fn() {}\npub fn hidden_fn() {}\n",
        )
        .unwrap();
        fs::write(
            src.join("open.rs"),
            "pub trait T { fn m(&self); fn n(&self) {} }\npub(crate) struct Inner;\n",
        )
        .unwrap();
        let s = count(src, Hidden::Skip).unwrap();
        // Shown, T; a, shown_fn, m, n; Shown, shown_fn at the root
        assert_eq!((s.types, s.methods, s.root_reexports), (2, 4, 2));
        // the doc(hidden) module's Plumbing and p, and Shown's hidden z
        let all = count(src, Hidden::Count).unwrap();
        assert_eq!((all.types, all.methods), (3, 6));
        let listing: Vec<_> = s
            .listing
            .iter()
            .map(|(k, v)| (k.as_str(), v.join(",")))
            .collect();
        assert_eq!(
            listing,
            [
                ("(free functions)", "shown_fn".to_owned()),
                ("Shown", "a".to_owned()),
                ("T", "m,n".to_owned())
            ]
        );
    }
}
