//! The protobuf field tables of kcache-core
//! (`crates/kcache-core/src/protobuf/tables.rs`), generated from the pinned
//! Kubernetes modules:
//!
//! - the `generated.proto` files give every message, field number, type and
//!   cardinality (all of k8s.io/api; apimachinery's meta/v1, runtime,
//!   util/intstr and api/resource);
//! - the Go types beside them give what the JSON route does with each
//!   field, which the `.proto` files do not say: the JSON name, `omitempty`
//!   on a non-pointer scalar (JSON omits the zero value, protobuf writes
//!   it), embedded structs that JSON inlines, `json:"-"`, and which types
//!   are top-level kinds (they embed `TypeMeta`; `register.go` gives the
//!   group).
//!
//! Every proto field must have a Go field carrying the same number (and
//! name) in its `protobuf:` tag, or generation fails: the two sources are
//! checked against each other.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// Where the tables go, relative to the workspace root.
pub const OUTPUT: &str = "crates/kcache-core/src/protobuf/tables.rs";

/// The apimachinery packages whose messages the tables include.
const APIMACHINERY_PACKAGES: &[&str] = &[
    "pkg/apis/meta/v1",
    "pkg/runtime",
    "pkg/util/intstr",
    "pkg/api/resource",
];

/// `k8s.io/api` and `k8s.io/apimachinery` are versioned `v0.X.Y` for
/// Kubernetes `v1.X.Y`: the release the local control plane is built from.
pub fn module_version() -> String {
    let k = kcache_envtest::KUBERNETES_VERSION;
    format!("v0.{}", k.strip_prefix("v1.").unwrap_or(k))
}

/// The module's source folder in the Go module cache (downloaded if needed).
fn module_dir(module: &str, version: &str) -> anyhow::Result<PathBuf> {
    let go = std::env::var_os("KCACHE_GO").unwrap_or_else(|| "go".into());
    let out = Command::new(&go)
        .args(["mod", "download", "-json", &format!("{module}@{version}")])
        .current_dir(std::env::temp_dir())
        .env("GOFLAGS", "-mod=mod")
        .output()
        .with_context(|| {
            format!(
                "running `go mod download {module}@{version}`: install Go (or set KCACHE_GO); \
                 the protobuf tables are generated from the Kubernetes modules"
            )
        })?;
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "`go mod download -json {module}@{version}` printed no JSON: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    if let Some(err) = info.get("Error").and_then(|e| e.as_str()) {
        bail!("go mod download {module}@{version}: {err}");
    }
    let dir = info
        .get("Dir")
        .and_then(|d| d.as_str())
        .with_context(|| format!("go mod download {module}@{version} gave no Dir"))?;
    Ok(PathBuf::from(dir))
}

// ---------------------------------------------------------------- .proto

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Sym(char),
    Comment(String),
}

fn tokenize(src: &str) -> anyhow::Result<Vec<Tok>> {
    let mut out = Vec::new();
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if src[i..].starts_with("//") {
            let end = src[i..].find('\n').map_or(b.len(), |e| i + e);
            out.push(Tok::Comment(src[i + 2..end].trim().to_owned()));
            i = end;
        } else if src[i..].starts_with("/*") {
            let end = src[i + 2..].find("*/").context("unterminated /* comment")?;
            i = i + 2 + end + 2;
        } else if c == '"' {
            let end = src[i + 1..].find('"').context("unterminated string")?;
            out.push(Tok::Str(src[i + 1..i + 1 + end].to_owned()));
            i = i + 1 + end + 1;
        } else if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                i += 1;
            }
            out.push(Tok::Ident(src[start..i].to_owned()));
        } else if "{};=<>,".contains(c) {
            out.push(Tok::Sym(c));
            i += 1;
        } else {
            bail!("unexpected character {c:?} at byte {i}");
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Optional,
    Repeated,
    Map,
}

#[derive(Debug)]
struct ProtoField {
    label: Label,
    /// The value type (for a map, the map's value type).
    ty: String,
    name: String,
    number: u32,
}

#[derive(Debug)]
struct ProtoMessage {
    name: String,
    nullable: bool,
    fields: Vec<ProtoField>,
}

#[derive(Debug)]
struct ProtoFile {
    package: String,
    dir: PathBuf,
    messages: Vec<ProtoMessage>,
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn next(&mut self) -> anyhow::Result<Tok> {
        let t = self
            .toks
            .get(self.pos)
            .cloned()
            .context("unexpected end of file")?;
        self.pos += 1;
        Ok(t)
    }
    /// The next token that is not a comment.
    fn next_code(&mut self) -> anyhow::Result<Tok> {
        loop {
            match self.next()? {
                Tok::Comment(_) => {}
                t => return Ok(t),
            }
        }
    }
    fn ident(&mut self) -> anyhow::Result<String> {
        match self.next_code()? {
            Tok::Ident(s) => Ok(s),
            t => bail!("expected a name, found {t:?}"),
        }
    }
    fn sym(&mut self, c: char) -> anyhow::Result<()> {
        match self.next_code()? {
            Tok::Sym(s) if s == c => Ok(()),
            t => bail!("expected {c:?}, found {t:?}"),
        }
    }
    fn skip_to_semicolon(&mut self) -> anyhow::Result<()> {
        while self.next_code()? != Tok::Sym(';') {}
        Ok(())
    }
    fn field(&mut self, label: Label) -> anyhow::Result<ProtoField> {
        let ty = if label == Label::Map {
            self.sym('<')?;
            let key = self.ident()?;
            if key != "string" {
                bail!("map key type {key} is not supported (only string)");
            }
            self.sym(',')?;
            let v = self.ident()?;
            self.sym('>')?;
            v
        } else {
            self.ident()?
        };
        let name = self.ident()?;
        self.sym('=')?;
        let number = self.ident()?.parse().context("field number")?;
        // Field options (`[...]`) are not used by the Kubernetes protos.
        self.sym(';')?;
        Ok(ProtoField {
            label,
            ty,
            name,
            number,
        })
    }
}

fn parse_proto(path: &Path) -> anyhow::Result<ProtoFile> {
    let src = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let toks = tokenize(&src).with_context(|| format!("in {}", path.display()))?;
    let mut p = Parser { toks, pos: 0 };
    let mut file = ProtoFile {
        package: String::new(),
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        messages: Vec::new(),
    };
    let mut comments: Vec<String> = Vec::new();
    let result: anyhow::Result<()> = (|| {
        while p.pos < p.toks.len() {
            match p.next()? {
                Tok::Comment(c) => comments.push(c),
                Tok::Ident(kw) => {
                    match kw.as_str() {
                        "syntax" | "import" | "option" => p.skip_to_semicolon()?,
                        "package" => {
                            file.package = p.ident()?;
                            p.sym(';')?;
                        }
                        "message" => {
                            let name = p.ident()?;
                            p.sym('{')?;
                            let nullable = comments.iter().any(|c| c == "+protobuf.nullable=true");
                            let mut fields = Vec::new();
                            loop {
                                match p.next_code()? {
                                    Tok::Sym('}') => break,
                                    Tok::Ident(l) if l == "optional" || l == "required" => {
                                        fields.push(p.field(Label::Optional)?)
                                    }
                                    Tok::Ident(l) if l == "repeated" => {
                                        fields.push(p.field(Label::Repeated)?)
                                    }
                                    Tok::Ident(l) if l == "map" => {
                                        fields.push(p.field(Label::Map)?)
                                    }
                                    t => bail!("unexpected {t:?} in message {name}"),
                                }
                            }
                            file.messages.push(ProtoMessage {
                                name,
                                nullable,
                                fields,
                            });
                        }
                        other => bail!("unsupported .proto statement {other:?}"),
                    }
                    comments.clear();
                }
                t => bail!("unexpected {t:?}"),
            }
        }
        Ok(())
    })();
    result.with_context(|| format!("parsing {}", path.display()))?;
    if file.package.is_empty() {
        bail!("{} has no package", path.display());
    }
    Ok(file)
}

// ---------------------------------------------------------------- Go types

#[derive(Debug, Default)]
struct GoField {
    /// `None` for an embedded field.
    name: Option<String>,
    ty: String,
    json_name: Option<String>,
    json_opts: Vec<String>,
    proto_number: Option<u32>,
    proto_name: Option<String>,
}

#[derive(Debug, Default)]
struct GoStruct {
    fields: Vec<GoField>,
}

impl GoStruct {
    fn embeds_type_meta(&self) -> bool {
        self.fields
            .iter()
            .any(|f| f.name.is_none() && f.proto_number.is_none() && f.ty.ends_with("TypeMeta"))
    }
}

/// `key:"value"` pairs of a Go struct tag.
fn tag_value<'a>(tag: &'a str, key: &str) -> Option<&'a str> {
    let needle = format!("{key}:\"");
    let mut search = tag;
    loop {
        let at = search.find(&needle)?;
        // A key starts the tag or follows a space.
        let ok = at == 0 || search.as_bytes()[at - 1] == b' ';
        let rest = &search[at + needle.len()..];
        if ok {
            return rest.find('"').map(|end| &rest[..end]);
        }
        search = rest;
    }
}

fn parse_go_field(line: &str) -> Option<GoField> {
    let (decl, tag) = match (line.find('`'), line.rfind('`')) {
        (Some(a), Some(b)) if b > a => (&line[..a], &line[a + 1..b]),
        _ => (line, ""),
    };
    let decl = decl.split("//").next().unwrap_or("").trim();
    if decl.is_empty() {
        return None;
    }
    let parts: Vec<&str> = decl.split_whitespace().collect();
    let mut f = GoField::default();
    match parts.as_slice() {
        [ty] => f.ty = (*ty).to_owned(),
        [name, ty @ ..] => {
            f.name = Some((*name).trim_end_matches(',').to_owned());
            f.ty = ty.join(" ");
        }
        [] => return None,
    }
    if let Some(json) = tag_value(tag, "json") {
        let mut it = json.split(',');
        f.json_name = it.next().map(str::to_owned);
        f.json_opts = it.map(str::to_owned).collect();
    }
    if let Some(pb) = tag_value(tag, "protobuf") {
        let items: Vec<&str> = pb.split(',').collect();
        f.proto_number = items.get(1).and_then(|n| n.parse().ok());
        f.proto_name = items
            .iter()
            .find_map(|i| i.strip_prefix("name="))
            .map(str::to_owned);
    }
    Some(f)
}

/// The types of one Go package folder that the tables need.
#[derive(Debug, Default)]
struct GoPackage {
    structs: BTreeMap<String, GoStruct>,
    /// Named slice types (`type ExtraValue []string`).
    slices: BTreeSet<String>,
    /// Types defined as another package's struct (`type MatchCondition
    /// v1.MatchCondition`): name -> (import path, type name).
    defined_as: BTreeMap<String, (String, String)>,
}

/// `alias -> import path` of one Go file.
fn go_imports(src: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut in_block = false;
    for line in src.lines() {
        let l = line.trim();
        let spec = if in_block {
            if l == ")" {
                in_block = false;
                continue;
            }
            l
        } else if l == "import (" {
            in_block = true;
            continue;
        } else if let Some(rest) = l.strip_prefix("import ") {
            rest
        } else {
            continue;
        };
        let mut parts = spec.split_whitespace();
        let (alias, path) = match (parts.next(), parts.next()) {
            (Some(a), Some(p)) if p.starts_with('"') => (Some(a), p),
            (Some(p), _) if p.starts_with('"') => (None, p),
            _ => continue,
        };
        let path = path.trim_matches('"');
        let alias = alias.unwrap_or_else(|| path.rsplit('/').next().unwrap_or(path));
        out.insert(alias.to_owned(), path.to_owned());
    }
    out
}

/// Every struct and named slice type of a Go package folder.
fn parse_go_package(dir: &Path) -> anyhow::Result<GoPackage> {
    let mut pkg = GoPackage::default();
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.ends_with(".go")
                && !n.ends_with("_test.go")
                && !n.starts_with("zz_generated")
                && n != "generated.pb.go"
        })
        .collect();
    files.sort();
    for path in files {
        let src =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let imports = go_imports(&src);
        let mut lines = src.lines();
        while let Some(line) = lines.next() {
            let Some(rest) = line.strip_prefix("type ") else {
                continue;
            };
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            if kind == "struct{}" {
                pkg.structs.insert(name.to_owned(), GoStruct::default());
            } else if kind == "struct" && rest.trim_end().ends_with('{') {
                let mut st = GoStruct::default();
                for body in lines.by_ref() {
                    if body == "}" {
                        break;
                    }
                    // Fields of this struct are indented by exactly one tab.
                    let Some(inner) = body.strip_prefix('\t') else {
                        continue;
                    };
                    if inner.starts_with('\t') || inner.trim_start().starts_with("//") {
                        continue;
                    }
                    if let Some(f) = parse_go_field(inner) {
                        st.fields.push(f);
                    }
                }
                pkg.structs.insert(name.to_owned(), st);
            } else if kind.starts_with("[]") && kind != "[]byte" {
                pkg.slices.insert(name.to_owned());
            } else if let Some((alias, ty)) = kind.split_once('.')
                && let Some(path) = imports.get(alias)
            {
                pkg.defined_as
                    .insert(name.to_owned(), (path.clone(), ty.to_owned()));
            }
        }
    }
    Ok(pkg)
}

fn group_name(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join("register.go");
    let src = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    for line in src.lines() {
        let l = line.trim();
        if let Some(rest) = l
            .strip_prefix("const GroupName = ")
            .or_else(|| l.strip_prefix("GroupName = "))
        {
            return Ok(rest.trim_matches('"').to_owned());
        }
    }
    bail!("{} has no GroupName", path.display())
}

// ---------------------------------------------------------------- tables

const SPECIAL: &[(&str, &str)] = &[
    ("k8s.io.apimachinery.pkg.apis.meta.v1.Time", "Time"),
    (
        "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime",
        "MicroTime",
    ),
    ("k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1", "RawJson"),
    ("k8s.io.apimachinery.pkg.runtime.RawExtension", "RawJson"),
    ("k8s.io.apimachinery.pkg.api.resource.Quantity", "Quantity"),
    (
        "k8s.io.apimachinery.pkg.api.resource.QuantityValue",
        "Quantity",
    ),
    (
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
        "IntOrString",
    ),
];

/// Messages whose JSON form kcache does not produce; a field of one of
/// these types fails generation (so a new use is noticed).
const UNSUPPORTED: &[&str] = &[
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Timestamp",
    "k8s.io.apimachinery.pkg.runtime.Unknown",
];

struct Entry<'a> {
    full: String,
    file: &'a ProtoFile,
    msg: &'a ProtoMessage,
}

/// Generates the content of [`OUTPUT`].
pub fn generate() -> anyhow::Result<String> {
    let version = module_version();
    let api = module_dir("k8s.io/api", &version)?;
    let machinery = module_dir("k8s.io/apimachinery", &version)?;
    let mut proto_paths = Vec::new();
    collect_protos(&api, &mut proto_paths)?;
    for pkg in APIMACHINERY_PACKAGES {
        proto_paths.push(machinery.join(pkg).join("generated.proto"));
    }
    proto_paths.sort();
    let files: Vec<ProtoFile> = proto_paths
        .iter()
        .map(|p| parse_proto(p))
        .collect::<anyhow::Result<_>>()?;
    let mut entries: Vec<Entry<'_>> = files
        .iter()
        .flat_map(|file| {
            file.messages.iter().map(move |msg| Entry {
                full: format!("{}.{}", file.package, msg.name),
                file,
                msg,
            })
        })
        .collect();
    entries.sort_by(|a, b| a.full.cmp(&b.full));
    let ids: BTreeMap<&str, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.full.as_str(), i))
        .collect();
    if ids.len() != entries.len() {
        bail!("duplicate message names across the .proto files");
    }
    if entries.len() > usize::from(u16::MAX) {
        bail!("too many messages for a u16 id");
    }
    let mut go: BTreeMap<PathBuf, GoPackage> = BTreeMap::new();
    for f in &files {
        if !go.contains_key(&f.dir) {
            go.insert(f.dir.clone(), parse_go_package(&f.dir)?);
        }
    }
    // Packages that types are defined from (`type X v1.X`).
    let mut more = Vec::new();
    for pkg in go.values() {
        for (path, _) in pkg.defined_as.values() {
            let dir = if let Some(rest) = path.strip_prefix("k8s.io/api/") {
                api.join(rest)
            } else if let Some(rest) = path.strip_prefix("k8s.io/apimachinery/") {
                machinery.join(rest)
            } else {
                continue;
            };
            more.push(dir);
        }
    }
    for dir in more {
        if let std::collections::btree_map::Entry::Vacant(slot) = go.entry(dir) {
            let pkg = parse_go_package(slot.key())?;
            slot.insert(pkg);
        }
    }
    let import_dir = |path: &str| -> Option<PathBuf> {
        if let Some(rest) = path.strip_prefix("k8s.io/api/") {
            Some(api.join(rest))
        } else {
            path.strip_prefix("k8s.io/apimachinery/")
                .map(|rest| machinery.join(rest))
        }
    };

    let mut out = String::new();
    let mut kinds: Vec<(String, String, usize)> = Vec::new();
    writeln!(
        out,
        "// Generated by `cargo xtask codegen` from the generated.proto files (messages,\n\
         // field numbers, types) and the Go types (JSON names, omitempty, inlining) of\n\
         // k8s.io/api {version} and k8s.io/apimachinery {version}. Do not edit.\n\
         \n\
         use super::schema::{{Card, Field, KindEntry, Message, MsgId, Special, Ty, f}};\n\
         \n\
         /// The k8s.io/api version the tables were generated from.\n\
         pub(crate) const K8S_API_VERSION: &str = \"{version}\";\n\
         \n\
         const B: Ty = Ty::Bool;\n\
         const I32: Ty = Ty::Int32;\n\
         const I64: Ty = Ty::Int64;\n\
         const S: Ty = Ty::String;\n\
         const BY: Ty = Ty::Bytes;\n\
         const fn m(id: MsgId) -> Ty {{\n    Ty::Msg(id)\n}}\n\
         const ONE: Card = Card::One;\n\
         const REP: Card = Card::Repeated;\n\
         const MAP: Card = Card::Map;\n\
         const fn msg(name: &'static str, special: Special, fields: &'static [Field]) -> Message {{\n    \
             Message {{\n        name,\n        special,\n        fields,\n    }}\n}}\n"
    )?;
    writeln!(
        out,
        "#[rustfmt::skip]\npub(crate) static MESSAGES: [Message; {}] = [",
        entries.len()
    )?;
    for (id, e) in entries.iter().enumerate() {
        let pkg = &go[&e.file.dir];
        let slices = &pkg.slices;
        let mut special = SPECIAL
            .iter()
            .find(|(n, _)| *n == e.full)
            .map(|(_, s)| *s)
            .unwrap_or("None");
        if e.msg.nullable {
            let [only] = e.msg.fields.as_slice() else {
                bail!("{}: a nullable message with more than one field", e.full);
            };
            if only.label != Label::Repeated
                || only.name != "items"
                || !slices.contains(&e.msg.name)
            {
                bail!(
                    "{}: a nullable message that is not a named slice {{repeated items}}",
                    e.full
                );
            }
            special = "Items";
        }
        // Messages no field refers to (see UNSUPPORTED): proto names only.
        let unchecked = UNSUPPORTED.contains(&e.full.as_str());
        let go_struct = pkg.structs.get(&e.msg.name).or_else(|| {
            let (path, ty) = pkg.defined_as.get(&e.msg.name)?;
            go.get(&import_dir(path)?)?.structs.get(ty)
        });
        if special == "None" && !unchecked && go_struct.is_none() {
            bail!(
                "{}: no Go struct {} in {}",
                e.full,
                e.msg.name,
                e.file.dir.display()
            );
        }
        let mut fields: Vec<(u32, String)> = Vec::new();
        for pf in &e.msg.fields {
            let ty = resolve_type(&e.file.package, &pf.ty, &ids)?;
            let card = match pf.label {
                Label::Optional => "ONE",
                Label::Repeated => "REP",
                Label::Map => "MAP",
            };
            let mut flags = 0u8;
            let mut json = pf.name.clone();
            if special == "None" && !unchecked {
                let gs = go_struct.context("checked above")?;
                let Some(gf) = gs.fields.iter().find(|g| g.proto_number == Some(pf.number)) else {
                    bail!(
                        "{}.{} = {}: no Go field of {} in {} has this protobuf number",
                        e.full,
                        pf.name,
                        pf.number,
                        e.msg.name,
                        e.file.dir.display()
                    );
                };
                if let Some(n) = &gf.proto_name
                    && *n != pf.name
                {
                    bail!(
                        "{}.{} = {}: the Go tag names it {n}",
                        e.full,
                        pf.name,
                        pf.number
                    );
                }
                let json_name = gf.json_name.clone().unwrap_or_default();
                if json_name == "-" {
                    continue; // not in JSON
                }
                let omitempty = gf.json_opts.iter().any(|o| o == "omitempty");
                let omitzero = gf.json_opts.iter().any(|o| o == "omitzero");
                let scalar = !ty.starts_with("m(");
                if gf.name.is_none() && json_name.is_empty()
                    || gf.json_opts.iter().any(|o| o == "inline")
                {
                    if pf.label != Label::Optional || scalar {
                        bail!(
                            "{}.{}: an inlined field that is not a message",
                            e.full,
                            pf.name
                        );
                    }
                    flags |= 2;
                } else if json_name.is_empty() {
                    json = gf.name.clone().context("a named field")?;
                } else {
                    json = json_name;
                }
                if pf.label == Label::Optional {
                    let pointer = gf.ty.starts_with('*');
                    let time = ty
                        == format!("m({})", ids["k8s.io.apimachinery.pkg.apis.meta.v1.Time"])
                        || ty
                            == format!(
                                "m({})",
                                ids["k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime"]
                            );
                    if scalar && !pointer && (omitempty || omitzero) || time && omitzero {
                        flags |= 1;
                    } else if omitzero && !pointer {
                        bail!(
                            "{}.{}: omitzero on a {} is not supported",
                            e.full,
                            pf.name,
                            gf.ty
                        );
                    }
                }
            }
            fields.push((
                pf.number,
                format!("f({}, {:?}, {}, {}, {})", pf.number, json, ty, card, flags),
            ));
        }
        fields.sort_by_key(|(n, _)| *n);
        if fields.windows(2).any(|w| w[0].0 == w[1].0) {
            bail!("{}: a field number is used twice", e.full);
        }
        let list: Vec<&str> = fields.iter().map(|(_, s)| s.as_str()).collect();
        writeln!(
            out,
            "    /* {id} */ msg({:?}, Special::{special}, &[{}]),",
            e.full,
            list.join(", ")
        )?;
        // Top-level kinds: k8s.io/api types that embed TypeMeta and have
        // ObjectMeta as field 1.
        if let Some(gs) = go_struct
            && gs.embeds_type_meta()
            && e.file.dir.starts_with(&api)
            && e.msg.fields.iter().any(|f| {
                f.number == 1
                    && f.ty
                        .ends_with("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta")
            })
        {
            let group = group_name(&e.file.dir)?;
            let version = e
                .file
                .dir
                .file_name()
                .and_then(|v| v.to_str())
                .context("package folder")?;
            let api_version = if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            };
            kinds.push((api_version, e.msg.name.clone(), id));
        }
    }
    writeln!(out, "];\n")?;
    kinds.sort();
    writeln!(
        out,
        "#[rustfmt::skip]\npub(crate) static KINDS: [KindEntry; {}] = [",
        kinds.len()
    )?;
    for (api_version, kind, id) in &kinds {
        writeln!(
            out,
            "    KindEntry {{ api_version: {api_version:?}, kind: {kind:?}, msg: {id} }},"
        )?;
    }
    writeln!(out, "];")?;
    Ok(out)
}

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.file_name().is_some_and(|n| n == "generated.proto") {
            out.push(path);
        }
    }
    Ok(())
}

fn resolve_type(package: &str, ty: &str, ids: &BTreeMap<&str, usize>) -> anyhow::Result<String> {
    Ok(match ty {
        "bool" => "B".into(),
        "int32" => "I32".into(),
        "int64" => "I64".into(),
        "string" => "S".into(),
        "bytes" => "BY".into(),
        "double" | "float" | "uint32" | "uint64" | "sint32" | "sint64" | "fixed32" | "fixed64"
        | "sfixed32" | "sfixed64" => bail!("scalar type {ty} is not supported yet"),
        _ => {
            let full = match ty.strip_prefix('.') {
                Some(f) => f.to_owned(),
                None => format!("{package}.{ty}"),
            };
            if UNSUPPORTED.contains(&full.as_str()) {
                bail!("a field of type {full}: its JSON form is not supported yet");
            }
            let id = ids
                .get(full.as_str())
                .with_context(|| format!("unknown message type {full}"))?;
            format!("m({id})")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_fields_and_tags() {
        let f = parse_go_field("Name string `json:\"name\" protobuf:\"bytes,1,opt,name=name\"`")
            .unwrap();
        assert_eq!(f.name.as_deref(), Some("Name"));
        assert_eq!(f.json_name.as_deref(), Some("name"));
        assert_eq!(f.proto_number, Some(1));
        let f =
            parse_go_field("VolumeSource `json:\"\" protobuf:\"bytes,2,opt,name=volumeSource\"`")
                .unwrap();
        assert!(f.name.is_none());
        assert_eq!(f.json_name.as_deref(), Some(""));
        let f = parse_go_field(
            "Replicas *int32 `json:\"replicas,omitempty\" protobuf:\"varint,1,opt,name=replicas\"`",
        )
        .unwrap();
        assert_eq!(f.ty, "*int32");
        assert_eq!(f.json_opts, ["omitempty"]);
        let f = parse_go_field("metav1.TypeMeta `json:\",inline\"`").unwrap();
        assert!(f.name.is_none() && f.proto_number.is_none());
    }

    #[test]
    fn proto_messages() {
        let toks = tokenize(
            "// +protobuf.nullable=true\nmessage X {\n  // c\n  repeated string items = 1;\n  map<string, .a.B> m = 2;\n}\n",
        )
        .unwrap();
        let mut p = Parser { toks, pos: 0 };
        assert_eq!(
            p.next().unwrap(),
            Tok::Comment("+protobuf.nullable=true".into())
        );
        assert_eq!(p.ident().unwrap(), "message");
        assert_eq!(p.ident().unwrap(), "X");
        p.sym('{').unwrap();
        assert_eq!(p.ident().unwrap(), "repeated");
        let f = p.field(Label::Repeated).unwrap();
        assert_eq!((f.name.as_str(), f.number), ("items", 1));
        assert_eq!(p.ident().unwrap(), "map");
        let f = p.field(Label::Map).unwrap();
        assert_eq!((f.ty.as_str(), f.number), (".a.B", 2));
    }
}
