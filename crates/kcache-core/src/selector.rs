//! Kubernetes label selectors: parsing and matching.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasher;
use std::str::FromStr;

/// A selector string that does not parse, with the byte position of the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?} at position {position}: {message}")]
pub struct SelectorError {
    /// The selector as given.
    pub selector: String,
    /// Byte offset into `selector` where the problem was found.
    pub position: usize,
    /// What was wrong.
    pub message: String,
}

/// A label requirement operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key=value` or `key==value`.
    Equals,
    /// `key!=value`: matches when the label is absent or differs.
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`: matches when the label is absent or not listed.
    NotIn,
    /// `key`: the label is present.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>n`: the label is an integer greater than n.
    GreaterThan,
    /// `key<n`: the label is an integer less than n.
    LessThan,
}

/// One requirement of a [`Selector`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }
    /// The values (one for `=`/`!=`/`>`/`<`, a set for `in`/`notin`, none otherwise).
    pub fn values(&self) -> &[String] {
        &self.values
    }
    /// Whether the labels satisfy this requirement.
    pub fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        let v = labels.label(&self.key);
        match self.operator {
            Operator::Equals | Operator::In => {
                v.is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            Operator::NotEquals | Operator::NotIn => {
                v.is_none_or(|v| !self.values.iter().any(|x| x == v))
            }
            Operator::Exists => v.is_some(),
            Operator::DoesNotExist => v.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(v), Some(bound)) = (v, self.values.first()) else {
                    return false;
                };
                let (Ok(v), Ok(bound)) = (v.parse::<i64>(), bound.parse::<i64>()) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.first().map(String::as_str).unwrap_or("");
        match self.operator {
            Operator::Equals => write!(f, "{}={}", self.key, first),
            Operator::NotEquals => write!(f, "{}!={}", self.key, first),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::GreaterThan => write!(f, "{}>{}", self.key, first),
            Operator::LessThan => write!(f, "{}<{}", self.key, first),
        }
    }
}

/// A set of labels a [`Selector`] can be matched against.
pub trait LabelSet {
    /// The value of label `key`, if present.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSet for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<S: BuildHasher> LabelSet for HashMap<String, String, S> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl LabelSet for [(&str, &str)] {
    fn label(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// A label selector: requirements that must all hold (logical AND).
///
/// Parsed from the Kubernetes syntax: `a=b`, `a==b`, `a!=b`,
/// `a in (x,y)`, `a notin (x)`, `a` (exists), `!a` (does not exist),
/// `a>1`, `a<1`, joined by commas.
///
/// ```
/// use std::collections::BTreeMap;
/// use kcache_core::Selector;
/// let sel: Selector = "app=web,tier in (front,edge),!canary".parse()?;
/// let labels = BTreeMap::from([("app".to_string(), "web".to_string()),
///                              ("tier".to_string(), "edge".to_string())]);
/// assert!(sel.matches(&labels));
/// assert!(Selector::everything().matches(&labels));
/// assert!(!Selector::nothing().matches(&labels));
/// # Ok::<_, kcache_core::SelectorError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    /// Matches every object (the empty selector).
    pub fn everything() -> Self {
        Selector::default()
    }
    /// Matches no object.
    pub fn nothing() -> Self {
        Selector {
            requirements: Vec::new(),
            nothing: true,
        }
    }
    /// Parses a selector string; the empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        Parser::new(s).parse()
    }
    /// An equality selector from a label map (`k1=v1,k2=v2`).
    pub fn from_labels<'a, I>(labels: I) -> Self
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        Selector {
            requirements: labels
                .into_iter()
                .map(|(k, v)| Requirement {
                    key: k.to_owned(),
                    operator: Operator::Equals,
                    values: vec![v.to_owned()],
                })
                .collect(),
            nothing: false,
        }
    }
    /// Whether this selector matches everything (no requirement).
    pub fn is_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }
    /// Whether this selector matches nothing.
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }
    /// The requirements.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
    /// Whether the labels satisfy every requirement.
    pub fn matches<L: LabelSet + ?Sized>(&self, labels: &L) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok<'a> {
    Ident(&'a str),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Comma,
    Open,
    Close,
    End,
}

struct Parser<'a> {
    src: &'a str,
    pos: usize,
}

fn is_special(c: char) -> bool {
    c.is_whitespace() || matches!(c, '!' | '=' | ',' | '(' | ')' | '<' | '>')
}

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Self {
        Parser { src, pos: 0 }
    }

    fn err(&self, position: usize, message: impl Into<String>) -> SelectorError {
        SelectorError {
            selector: self.src.to_owned(),
            position,
            message: message.into(),
        }
    }

    fn skip_ws(&mut self) {
        let rest = &self.src[self.pos..];
        let trimmed = rest.trim_start();
        self.pos += rest.len() - trimmed.len();
    }

    /// Returns the next token and its start position, advancing past it.
    fn next(&mut self) -> (Tok<'a>, usize) {
        self.skip_ws();
        let start = self.pos;
        let rest = &self.src[self.pos..];
        let mut chars = rest.chars();
        let Some(c) = chars.next() else {
            return (Tok::End, start);
        };
        let two = |p: &mut Self, t| {
            p.pos += 2;
            (t, start)
        };
        let one = |p: &mut Self, t| {
            p.pos += 1;
            (t, start)
        };
        match c {
            '!' if rest.starts_with("!=") => two(self, Tok::NotEq),
            '!' => one(self, Tok::Not),
            '=' if rest.starts_with("==") => two(self, Tok::DoubleEq),
            '=' => one(self, Tok::Eq),
            '>' => one(self, Tok::Gt),
            '<' => one(self, Tok::Lt),
            ',' => one(self, Tok::Comma),
            '(' => one(self, Tok::Open),
            ')' => one(self, Tok::Close),
            _ => {
                let len = rest.find(is_special).unwrap_or(rest.len());
                self.pos += len;
                (Tok::Ident(&rest[..len]), start)
            }
        }
    }

    fn peek(&mut self) -> (Tok<'a>, usize) {
        let save = self.pos;
        let t = self.next();
        self.pos = save;
        t
    }

    fn parse(mut self) -> Result<Selector, SelectorError> {
        let mut requirements = Vec::new();
        if self.peek().0 == Tok::End {
            return Ok(Selector::everything());
        }
        loop {
            requirements.push(self.requirement()?);
            match self.next() {
                (Tok::End, _) => break,
                (Tok::Comma, _) => continue,
                (t, p) => return Err(self.err(p, format!("expected ',' or end, found {t:?}"))),
            }
        }
        Ok(Selector {
            requirements,
            nothing: false,
        })
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        match self.next() {
            (Tok::Ident(k), p) => {
                validate_key(k).map_err(|m| self.err(p, m))?;
                Ok(k.to_owned())
            }
            (t, p) => Err(self.err(p, format!("expected a label key, found {t:?}"))),
        }
    }

    fn value(&mut self, allow_empty_before: &[Tok<'a>]) -> Result<String, SelectorError> {
        let (t, p) = self.peek();
        match t {
            Tok::Ident(v) => {
                self.next();
                validate_value(v).map_err(|m| self.err(p, m))?;
                Ok(v.to_owned())
            }
            t if allow_empty_before.contains(&t) => Ok(String::new()),
            t => Err(self.err(p, format!("expected a label value, found {t:?}"))),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if let (Tok::Not, _) = self.peek() {
            self.next();
            let key = self.key()?;
            return Ok(Requirement {
                key,
                operator: Operator::DoesNotExist,
                values: Vec::new(),
            });
        }
        let key = self.key()?;
        let (op_tok, op_pos) = self.peek();
        let operator = match op_tok {
            Tok::End | Tok::Comma => {
                return Ok(Requirement {
                    key,
                    operator: Operator::Exists,
                    values: Vec::new(),
                });
            }
            Tok::Eq | Tok::DoubleEq => Operator::Equals,
            Tok::NotEq => Operator::NotEquals,
            Tok::Gt => Operator::GreaterThan,
            Tok::Lt => Operator::LessThan,
            Tok::Ident("in") => Operator::In,
            Tok::Ident("notin") => Operator::NotIn,
            t => {
                return Err(self.err(
                    op_pos,
                    format!("expected an operator (=, ==, !=, in, notin, >, <), found {t:?}"),
                ));
            }
        };
        self.next();
        let values = match operator {
            Operator::In | Operator::NotIn => self.value_set()?,
            Operator::GreaterThan | Operator::LessThan => {
                let (_, p) = self.peek();
                let v = self.value(&[])?;
                if v.parse::<i64>().is_err() {
                    return Err(
                        self.err(p, format!("value {v:?} for '>' or '<' must be an integer"))
                    );
                }
                vec![v]
            }
            _ => vec![self.value(&[Tok::End, Tok::Comma])?],
        };
        Ok(Requirement {
            key,
            operator,
            values,
        })
    }

    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            (Tok::Open, _) => {}
            (t, p) => return Err(self.err(p, format!("expected '(', found {t:?}"))),
        }
        let mut values = Vec::new();
        loop {
            let v = self.value(&[Tok::Comma, Tok::Close])?;
            values.push(v);
            match self.next() {
                (Tok::Comma, _) => continue,
                (Tok::Close, _) => break,
                (t, p) => return Err(self.err(p, format!("expected ',' or ')', found {t:?}"))),
            }
        }
        values.sort();
        values.dedup();
        Ok(values)
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

fn validate_name(n: &str, what: &str) -> Result<(), String> {
    if n.len() > 63 {
        return Err(format!("{what} {n:?} is longer than 63 characters"));
    }
    let ok = n.chars().all(is_name_char)
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ok {
        return Err(format!(
            "{what} {n:?} must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
        ));
    }
    Ok(())
}

fn validate_key(k: &str) -> Result<(), String> {
    let name = match k.split_once('/') {
        Some((prefix, name)) => {
            let ok = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|l| {
                    !l.is_empty()
                        && l.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                });
            if !ok {
                return Err(format!("key prefix {prefix:?} must be a DNS subdomain"));
            }
            name
        }
        None => k,
    };
    if name.is_empty() {
        return Err("label key name must not be empty".into());
    }
    validate_name(name, "label key name")
}

fn validate_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    validate_name(v, "label value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_every_operator() {
        let s = Selector::parse("a=b,c!=d,e in (x,y),f notin (z),g,!h,i==j,k>1,l<9").unwrap();
        let ops: Vec<_> = s.requirements().iter().map(|r| r.operator()).collect();
        assert_eq!(
            ops,
            vec![
                Operator::Equals,
                Operator::NotEquals,
                Operator::In,
                Operator::NotIn,
                Operator::Exists,
                Operator::DoesNotExist,
                Operator::Equals,
                Operator::GreaterThan,
                Operator::LessThan
            ]
        );
        assert_eq!(s.requirements()[2].values(), ["x", "y"]);
        assert_eq!(
            s.to_string(),
            "a=b,c!=d,e in (x,y),f notin (z),g,!h,i=j,k>1,l<9"
        );
    }

    #[test]
    fn matching_semantics() {
        let l = labels(&[("a", "b"), ("e", "y"), ("g", "1"), ("k", "5")]);
        let m = |s: &str| Selector::parse(s).unwrap().matches(&l);
        assert!(m("a=b"));
        assert!(!m("a=c"));
        assert!(m("a!=c"));
        assert!(m("missing!=c"), "!= matches when the label is absent");
        assert!(m("e in (x,y)"));
        assert!(!m("e in (x)"));
        assert!(!m("missing in (x)"));
        assert!(m("e notin (x)"));
        assert!(m("missing notin (x)"));
        assert!(!m("e notin (y)"));
        assert!(m("g"));
        assert!(!m("missing"));
        assert!(m("!missing"));
        assert!(!m("!g"));
        assert!(m("k>4") && !m("k>5") && m("k<6") && !m("k<5"));
        assert!(!m("a>1"), "non-integer label never matches >");
        assert!(m("a=b,e in (y),!h"));
        assert!(!m("a=b,e in (z)"));
        assert!(m(""), "empty selector matches everything");
        assert!(m("  "));
    }

    #[test]
    fn empty_value_is_allowed() {
        let s = Selector::parse("a=,b in (,x)").unwrap();
        assert_eq!(s.requirements()[0].values(), [""]);
        assert!(s.matches(&labels(&[("a", ""), ("b", "")])));
    }

    #[test]
    fn everything_and_nothing() {
        let l = labels(&[("a", "b")]);
        assert!(Selector::everything().matches(&l));
        assert!(Selector::everything().is_everything());
        assert!(!Selector::nothing().matches(&l));
        assert!(!Selector::nothing().matches(&labels(&[])));
        assert!(Selector::nothing().is_nothing());
    }

    #[test]
    fn errors_name_the_position() {
        let cases = [
            ("a=b,", 4),
            ("a in x", 5),
            ("a in (x", 7),
            ("=b", 0),
            ("a=b c", 4),
            ("a>x", 2),
            ("a=b,,c", 4),
            ("a=-bad", 2),
            ("Bad_Prefix/x=1", 0),
            ("a b", 2),
            ("!a=b", 2),
        ];
        for (s, pos) in cases {
            let e = Selector::parse(s).unwrap_err();
            assert_eq!(e.position, pos, "{s:?}: {e}");
            assert!(e.to_string().contains(&format!("position {pos}")));
        }
    }

    #[test]
    fn arbitrary_input_never_panics() {
        let alphabet: Vec<char> = "ab=!,() <>in notin é/.-_9\t".chars().collect();
        let mut seed = 0x1234_5678_9abc_def0u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 16) as usize;
            let s: String = (0..len)
                .map(|i| alphabet[((seed >> (i * 3)) as usize) % alphabet.len()])
                .collect();
            if let Ok(sel) = Selector::parse(&s) {
                // What parses, prints and re-parses to the same selector.
                assert_eq!(Selector::parse(&sel.to_string()).unwrap(), sel, "{s:?}");
            }
        }
    }

    #[test]
    fn prefixed_keys() {
        let s = Selector::parse("app.kubernetes.io/name=web").unwrap();
        assert!(s.matches(&labels(&[("app.kubernetes.io/name", "web")])));
    }

    #[test]
    fn from_labels_is_equality() {
        let s = Selector::from_labels([("a", "1"), ("b", "2")]);
        assert!(s.matches(&labels(&[("a", "1"), ("b", "2"), ("c", "3")])));
        assert!(!s.matches(&labels(&[("a", "1")])));
    }
}
