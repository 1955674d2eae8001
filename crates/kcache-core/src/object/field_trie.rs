//! [`FieldPaths`]: the declared JSON-pointer field paths, parsed once and
//! kept as a trie ([`PathNode`]) that the partial decode walks.

use std::sync::Arc;

use super::ObjectError;

/// A parsed list of JSON-pointer field paths (e.g. `/spec/nodeName`) to
/// extract during the partial decode, for field indexes.
///
/// Build one per resource type and share it (it is cheap to clone): every
/// [`CachedObject`](super::CachedObject) built with it keeps a reference to
/// find values by path.
#[derive(Debug, Clone)]
pub struct FieldPaths {
    pub(super) inner: Arc<FieldPathsInner>,
}

#[derive(Debug)]
pub(super) struct FieldPathsInner {
    paths: Vec<String>,
    /// Paths resolved from the extracted metadata instead of the byte scan.
    pub(super) from_meta: Vec<(usize, Vec<String>)>,
    /// The other paths, for objects held as protobuf (JSON objects use
    /// `trie` during their one scan).
    pub(super) scanned: Vec<(usize, Vec<String>)>,
    pub(super) trie: PathNode,
}

#[derive(Debug, Default)]
pub(super) struct PathNode {
    pub(super) leaf: Option<usize>,
    pub(super) children: Vec<(String, PathNode)>,
}

impl PathNode {
    pub(super) fn child(&self, name: &str) -> Option<&PathNode> {
        self.children
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| c)
    }
    fn insert(&mut self, segments: &[String], index: usize) {
        match segments.split_first() {
            None => {
                if self.leaf.is_none() {
                    self.leaf = Some(index);
                }
            }
            Some((first, rest)) => {
                let pos = match self.children.iter().position(|(n, _)| n == first) {
                    Some(p) => p,
                    None => {
                        self.children.push((first.clone(), PathNode::default()));
                        self.children.len() - 1
                    }
                };
                self.children[pos].1.insert(rest, index);
            }
        }
    }
}

fn parse_pointer(path: &str) -> Result<Vec<String>, ObjectError> {
    let invalid = |reason| ObjectError::InvalidFieldPath {
        path: path.to_owned(),
        reason,
    };
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| invalid("a field path must start with '/'"))?;
    if rest.is_empty() {
        return Err(invalid("the whole document cannot be a field path"));
    }
    rest.split('/')
        .map(|seg| {
            let mut out = String::with_capacity(seg.len());
            let mut chars = seg.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err(invalid("'~' must be followed by '0' or '1'")),
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        })
        .collect()
}

impl FieldPaths {
    /// Parses JSON pointers such as `/spec/nodeName` or `/spec/containers/0/image`.
    ///
    /// Paths under `/metadata` (name, namespace, uid, resourceVersion,
    /// generation, deletionTimestamp, `labels/<key>`, `annotations/<key>`),
    /// `/kind` and `/apiVersion` are answered from the extracted metadata.
    pub fn new<I, S>(paths: I) -> Result<Self, ObjectError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut inner = FieldPathsInner {
            paths: Vec::new(),
            from_meta: Vec::new(),
            scanned: Vec::new(),
            trie: PathNode::default(),
        };
        for (i, p) in paths.into_iter().enumerate() {
            let p = p.into();
            let segs = parse_pointer(&p)?;
            if matches!(segs[0].as_str(), "metadata" | "kind" | "apiVersion") {
                inner.from_meta.push((i, segs));
            } else {
                inner.trie.insert(&segs, i);
                inner.scanned.push((i, segs));
            }
            inner.paths.push(p);
        }
        Ok(FieldPaths {
            inner: Arc::new(inner),
        })
    }

    /// The paths, in declaration order.
    pub fn paths(&self) -> &[String] {
        &self.inner.paths
    }

    /// Position of `path` in [`paths`](Self::paths).
    pub fn position(&self, path: &str) -> Option<usize> {
        self.inner.paths.iter().position(|p| p == path)
    }

    /// Number of declared paths.
    pub fn len(&self) -> usize {
        self.inner.paths.len()
    }

    /// Whether no path is declared.
    pub fn is_empty(&self) -> bool {
        self.inner.paths.is_empty()
    }
}
