//! The parser of the selector syntax (the `metadata.shardInfo.selector`
//! echo, or any selector the apiserver accepts): recursive descent, bounds
//! validated as the apiserver does.

use super::{MAX_SELECTOR_LEN, ShardField, ShardRange, ShardSelector, ShardSelectorError};

/// Recursive descent over the selector syntax:
///
/// ```text
/// expr  := term ( "||" term )*
/// term  := "(" expr ")" | "shardRange" "(" path "," string "," string ")"
/// path  := ident ( "." ident )*
/// ```
pub(super) struct Parser<'a> {
    input: &'a str,
    pos: usize,
    field: Option<ShardField>,
    ranges: Vec<ShardRange>,
}

/// Nesting depth of parentheses the parser follows (CEL's own limit is 250).
const MAX_DEPTH: usize = 32;

impl<'a> Parser<'a> {
    pub(super) fn new(input: &'a str) -> Self {
        Parser {
            input,
            pos: 0,
            field: None,
            ranges: Vec::new(),
        }
    }

    pub(super) fn parse(mut self) -> Result<ShardSelector, ShardSelectorError> {
        if self.input.trim().is_empty() {
            return Err(ShardSelectorError::Empty);
        }
        if self.input.len() > MAX_SELECTOR_LEN {
            return Err(self.error(format!(
                "longer than the apiserver's limit of {MAX_SELECTOR_LEN} characters"
            )));
        }
        self.expr(0)?;
        self.skip_ws();
        if self.pos != self.input.len() {
            return Err(self.error("expected `||` or the end of the selector".into()));
        }
        let field = self.field.unwrap_or(ShardField::Uid);
        ShardSelector::new(field, self.ranges)
    }

    fn error(&self, message: String) -> ShardSelectorError {
        ShardSelectorError::Syntax {
            selector: self.input.to_owned(),
            position: self.pos,
            message,
        }
    }

    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        let trimmed = rest.trim_start_matches([' ', '\t', '\n', '\r', '\x0c']);
        self.pos += rest.len() - trimmed.len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str, what: &str) -> Result<(), ShardSelectorError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error(format!("expected {what}")))
        }
    }

    fn expr(&mut self, depth: usize) -> Result<(), ShardSelectorError> {
        self.term(depth)?;
        while self.eat("||") {
            self.term(depth)?;
        }
        Ok(())
    }

    fn term(&mut self, depth: usize) -> Result<(), ShardSelectorError> {
        if self.eat("(") {
            if depth >= MAX_DEPTH {
                return Err(self.error(format!("parentheses nested deeper than {MAX_DEPTH}")));
            }
            self.expr(depth + 1)?;
            return self.expect(")", "`)`");
        }
        self.skip_ws();
        let ident = self.ident();
        if ident != "shardRange" {
            self.pos -= ident.len();
            return Err(self.error(
                "expected shardRange(field, 'start', 'end'); only shardRange() and || are allowed"
                    .into(),
            ));
        }
        self.expect("(", "`(` after shardRange")?;
        self.skip_ws();
        self.field_path()?;
        self.expect(",", "`,` after the field")?;
        let start = self.bound("start")?;
        self.expect(",", "`,` after the start")?;
        let end = self.bound("end")?;
        self.expect(")", "`)`: shardRange takes exactly 3 arguments")?;
        // a start of 2^64 is above every end
        let start =
            u64::try_from(start).map_err(|_| ShardSelectorError::InvertedRange { start, end })?;
        self.ranges.push(ShardRange::new(start, end)?);
        Ok(())
    }

    fn ident(&mut self) -> &'a str {
        let rest = self.rest();
        let len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        self.pos += len;
        &rest[..len]
    }

    fn field_path(&mut self) -> Result<ShardField, ShardSelectorError> {
        let mut path = String::new();
        loop {
            self.skip_ws();
            let ident = self.ident();
            if ident.is_empty() {
                return Err(self.error("expected a field such as object.metadata.uid".into()));
            }
            path.push_str(ident);
            if !self.eat(".") {
                break;
            }
            path.push('.');
        }
        let field = ShardField::from_path(&path)?;
        match self.field {
            None => self.field = Some(field),
            Some(first) if first != field => {
                return Err(ShardSelectorError::MixedFields {
                    first,
                    second: field,
                });
            }
            Some(_) => {}
        }
        Ok(field)
    }

    /// A quoted bound, validated as the apiserver does
    /// (`extractHexLiteral`): `0x` prefix, lowercase hex, exactly 16 digits
    /// or `0x10000000000000000`.
    fn bound(&mut self, name: &str) -> Result<u128, ShardSelectorError> {
        self.skip_ws();
        let quote = match self.rest().bytes().next() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => {
                return Err(self.error(format!(
                    "{name} must be a quoted string literal such as '0x0000000000000000'"
                )));
            }
        };
        self.pos += 1;
        let rest = self.rest();
        let Some(len) = rest.bytes().position(|b| b == quote || b == b'\\') else {
            return Err(self.error(format!("{name}: unterminated string")));
        };
        if rest.as_bytes()[len] == b'\\' {
            return Err(self.error(format!("{name}: escapes are not allowed in a bound")));
        }
        let literal = &rest[..len];
        let Some(hex) = literal.strip_prefix("0x") else {
            return Err(self.error(format!("{name} must have the '0x' prefix, got {literal:?}")));
        };
        if let Some(c) = hex.chars().find(|c| !matches!(c, '0'..='9' | 'a'..='f')) {
            return Err(self.error(format!(
                "{name}: invalid character {c:?} in {literal:?}: use lowercase hex digits"
            )));
        }
        if hex.len() != 16 && literal != "0x10000000000000000" {
            return Err(self.error(format!(
                "{name} must be 0x and exactly 16 hex digits (or 0x10000000000000000 for 2^64), got {literal:?}"
            )));
        }
        self.pos += len + 1;
        // 16 hex digits, or the one 17-digit value: fits u128
        u128::from_str_radix(hex, 16).map_err(|e| self.error(format!("{name}: {e}")))
    }
}
