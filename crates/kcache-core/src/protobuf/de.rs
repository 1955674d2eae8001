//! A serde `Deserializer` over protobuf bytes, driven by the generated
//! field tables: each message is presented as the JSON object the
//! apiserver would have sent (same keys, same omissions, same special
//! forms), so any `Deserialize` type (k8s-openapi's, `serde_json::Value`,
//! `DynamicObject`) decodes from protobuf as it does from JSON.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::schema::{Card, Field, INLINE, Message, OMIT_ZERO, Special, Ty, message};
use super::time;
use super::wire::{Reader, WireError, WireValue};

/// Error decoding protobuf into a typed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoDecodeError(Box<str>);

impl fmt::Display for ProtoDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtoDecodeError {}

impl de::Error for ProtoDecodeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ProtoDecodeError(msg.to_string().into_boxed_str())
    }
}

impl From<WireError> for ProtoDecodeError {
    fn from(e: WireError) -> Self {
        ProtoDecodeError(e.to_string().into_boxed_str())
    }
}

type Result<T> = std::result::Result<T, ProtoDecodeError>;

/// Inline (JSON-flattened) messages nested deeper than this are refused.
const MAX_INLINE: usize = 4;
/// Messages nested deeper than this are refused (serde recursion guard;
/// the deepest built-in type is far shallower).
pub(crate) const MAX_DEPTH: usize = 64;

/// Deserializes a top-level object of message `msg` from its bytes,
/// presenting `apiVersion` and `kind` first when given.
pub(crate) fn from_object<'de, T: de::Deserialize<'de>>(
    bytes: &'de [u8],
    msg: &'static Message,
    type_meta: Option<(&'de str, &'de str)>,
) -> Result<T> {
    T::deserialize(Value {
        kind: Kind::Msg(msg, bytes),
        type_meta,
        depth: 0,
    })
}

/// Like [`from_object`], with a seed (e.g. a writer).
pub(crate) fn seed_object<'de, S: DeserializeSeed<'de>>(
    bytes: &'de [u8],
    msg: &'static Message,
    type_meta: Option<(&'de str, &'de str)>,
    seed: S,
) -> Result<S::Value> {
    seed.deserialize(Value {
        kind: Kind::Msg(msg, bytes),
        type_meta,
        depth: 0,
    })
}

/// Writes the JSON of a top-level object of message `msg`.
pub(crate) fn object_to_json(
    bytes: &[u8],
    msg: &'static Message,
    type_meta: Option<(&str, &str)>,
    out: &mut Vec<u8>,
) -> Result<()> {
    seed_object(bytes, msg, type_meta, super::json::Writer { out })
}

/// The value at a path of JSON names, list indexes and map keys in a
/// top-level object, rendered as [`CachedObject::field`] renders JSON:
/// strings unescaped, other values as JSON text, `None` when absent or
/// `null`.
///
/// [`CachedObject::field`]: crate::CachedObject::field
pub(crate) fn field_value(
    bytes: &[u8],
    msg: &'static Message,
    segments: &[String],
) -> Result<Option<Box<str>>> {
    let mut kind = Kind::Msg(msg, bytes);
    for seg in segments {
        match step(kind, seg)? {
            Some(k) => kind = k,
            None => return Ok(None),
        }
    }
    let mut out = Vec::new();
    Value {
        kind,
        type_meta: None,
        depth: 0,
    }
    .deserialize_any(super::json::Writer { out: &mut out })?;
    let text = String::from_utf8(out).map_err(|_| {
        <ProtoDecodeError as de::Error>::custom("rendered a value that is not UTF-8")
    })?;
    Ok(match text.as_bytes().first() {
        _ if text == "null" => None,
        Some(b'"') => Some(
            serde_json::from_str::<String>(&text)
                .map_err(json_error)?
                .into_boxed_str(),
        ),
        _ => Some(text.into_boxed_str()),
    })
}

fn step<'a>(kind: Kind<'a>, seg: &str) -> Result<Option<Kind<'a>>> {
    match kind {
        Kind::Msg(m, b) => match m.special {
            Special::None => find_in_message(m, b, seg, 0),
            Special::Items => match m.fields.first() {
                Some(f) => nth(Elements::new(f, b, 0), seg),
                None => Ok(None),
            },
            _ => Ok(None),
        },
        Kind::Many(f, rest) => match f.card {
            Card::Map => {
                let mut entries = Entries::new(f, rest, 0);
                let mut found = None;
                while let Some((k, v)) = entries.next_entry()? {
                    if k == seg.as_bytes() {
                        found = Some(v); // the last of equal keys wins
                    }
                }
                Ok(found)
            }
            _ => nth(Elements::new(f, rest, 0), seg),
        },
        _ => Ok(None),
    }
}

fn nth<'a>(mut elements: Elements<'a>, seg: &str) -> Result<Option<Kind<'a>>> {
    let Ok(n) = seg.parse::<usize>() else {
        return Ok(None);
    };
    for _ in 0..n {
        if elements.next_kind()?.is_none() {
            return Ok(None);
        }
    }
    elements.next_kind()
}

fn find_in_message<'a>(
    m: &'static Message,
    b: &'a [u8],
    seg: &str,
    inline: usize,
) -> Result<Option<Kind<'a>>> {
    let mut r = Reader::new(b);
    let mut hint = 0;
    while let Some(wf) = r.field()? {
        let Some((_, field)) = m.field(wf.number, &mut hint) else {
            continue;
        };
        if field.flags & INLINE != 0 {
            if let (Ty::Msg(id), WireValue::Bytes(inner)) = (field.ty, wf.value)
                && inline < MAX_INLINE
                && let Some(k) = find_in_message(message(id), inner, seg, inline + 1)?
            {
                return Ok(Some(k));
            }
            continue;
        }
        if field.json != seg {
            continue;
        }
        return Ok(match field.card {
            Card::Repeated | Card::Map => Some(Kind::Many(field, &b[wf.start..])),
            Card::One => {
                let kind = value_kind(field.ty, wf.number, wf.value)?;
                (field.flags & OMIT_ZERO == 0 || !kind.is_zero()).then_some(kind)
            }
        });
    }
    Ok(None)
}

/// One value, resolved to the form it has in JSON.
#[derive(Clone, Copy)]
enum Kind<'de> {
    Bool(bool),
    I32(i32),
    I64(i64),
    /// A string (UTF-8 checked when presented).
    Str(&'de [u8]),
    /// Bytes: base64 text in JSON.
    Bytes(&'de [u8]),
    /// A message presented as an object (or, `Items`, as an array).
    Msg(&'static Message, &'de [u8]),
    /// `Time` (`false`) or `MicroTime` (`true`).
    Time(i64, i32, bool),
    /// JSON `null` (the zero `Time`, an empty `RawExtension`).
    Null,
    /// Embedded JSON (`RawExtension`, `FieldsV1`).
    RawJson(&'de [u8]),
    /// Every occurrence of a repeated or map field: one run of them (or,
    /// for field paths, from the first to the end of the message).
    Many(&'static Field, &'de [u8]),
}

impl Kind<'_> {
    /// Whether this is the zero value JSON omits (`omitempty`, `omitzero`).
    fn is_zero(&self) -> bool {
        match *self {
            Kind::Bool(b) => !b,
            Kind::I32(i) => i == 0,
            Kind::I64(i) => i == 0,
            Kind::Str(b) | Kind::Bytes(b) => b.is_empty(),
            Kind::Null => true,
            _ => false,
        }
    }
}

/// A single field value, resolved.
#[inline]
fn value_kind<'de>(ty: Ty, number: u32, v: WireValue<'de>) -> Result<Kind<'de>> {
    Ok(match (ty, v) {
        (Ty::Bool, WireValue::Varint(x)) => Kind::Bool(x != 0),
        (Ty::Int32, WireValue::Varint(x)) => Kind::I32(x as i32),
        (Ty::Int64, WireValue::Varint(x)) => Kind::I64(x as i64),
        (Ty::String, WireValue::Bytes(b)) => Kind::Str(b),
        (Ty::Bytes, WireValue::Bytes(b)) => Kind::Bytes(b),
        (Ty::Msg(id), WireValue::Bytes(b)) => message_kind(message(id), b)?,
        (ty, v) => return Err(wrong(ty, number, v)),
    })
}

/// A message value, resolved: special messages become their JSON form.
#[inline]
fn message_kind<'de>(m: &'static Message, b: &'de [u8]) -> Result<Kind<'de>> {
    Ok(match m.special {
        Special::None | Special::Items => Kind::Msg(m, b),
        Special::Time | Special::MicroTime => match timestamp(b)? {
            None => Kind::Null,
            Some((s, n)) => Kind::Time(s, n, m.special == Special::MicroTime),
        },
        Special::Quantity => Kind::Str(quantity(b)?),
        Special::IntOrString => match int_or_string(b)? {
            IntOrStr::Int(i) => Kind::I32(i),
            IntOrStr::Str(s) => Kind::Str(s),
        },
        Special::RawJson => {
            let raw = raw_json(b)?;
            if raw.is_empty() {
                Kind::Null
            } else {
                Kind::RawJson(raw)
            }
        }
    })
}

/// The value of the entry whose key was just read (`pending`), at `depth`.
fn pending_value<'de, V: DeserializeSeed<'de>>(
    pending: &mut Option<Kind<'de>>,
    depth: usize,
    seed: V,
) -> Result<V::Value> {
    let kind = pending
        .take()
        .ok_or_else(|| <ProtoDecodeError as de::Error>::custom("value asked before key"))?;
    seed.deserialize(Value {
        kind,
        type_meta: None,
        depth,
    })
}

struct Value<'de> {
    kind: Kind<'de>,
    /// For a top-level object: `apiVersion` and `kind` to present first.
    type_meta: Option<(&'de str, &'de str)>,
    depth: usize,
}

fn wrong(ty: Ty, field: u32, v: WireValue<'_>) -> ProtoDecodeError {
    de::Error::custom(format_args!(
        "protobuf field {field} holds wire type {} where a {ty:?} is expected",
        v.wire_type()
    ))
}

/// The text of a string field: borrowed, or with invalid UTF-8 replaced
/// (as Go's JSON encoder does for a string that is not UTF-8).
fn text(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// `Timestamp {1 seconds, 2 nanos}`; `None` for the zero time (an empty
/// message, as the apiserver writes it).
fn timestamp(b: &[u8]) -> Result<Option<(i64, i32)>> {
    if b.is_empty() {
        return Ok(None);
    }
    let (mut s, mut n) = (0i64, 0i32);
    let mut r = Reader::new(b);
    while let Some(f) = r.field()? {
        match f.number {
            1 => s = f.varint("Timestamp")? as i64,
            2 => n = f.varint("Timestamp")? as i32,
            _ => {}
        }
    }
    // Go's zero time.Time, written by a client that sent it explicitly.
    if s == -62_135_596_800 && n == 0 {
        return Ok(None);
    }
    Ok(Some((s, n)))
}

fn time_text(seconds: i64, nanos: i32, micro: bool) -> Result<time::TimeText> {
    let micros = micro.then(|| (nanos.max(0) / 1000) as u32);
    time::format(seconds, micros).ok_or_else(|| {
        de::Error::custom(format_args!("timestamp {seconds} is outside years 0-9999"))
    })
}

/// The bytes of field 1 of the `what` message `b` (the last, if repeated;
/// empty if absent).
fn field_1_bytes<'a>(b: &'a [u8], what: &'static str) -> Result<&'a [u8]> {
    let mut r = Reader::new(b);
    let mut s: &[u8] = b"";
    while let Some(f) = r.field()? {
        if f.number == 1 {
            s = f.bytes(what)?;
        }
    }
    Ok(s)
}

/// `Quantity {1 string}`.
fn quantity(b: &[u8]) -> Result<&[u8]> {
    field_1_bytes(b, "Quantity")
}

enum IntOrStr<'a> {
    Int(i32),
    Str(&'a [u8]),
}

/// `IntOrString {1 type (0 int, 1 string), 2 intVal, 3 strVal}`.
fn int_or_string(b: &[u8]) -> Result<IntOrStr<'_>> {
    let (mut ty, mut i, mut s) = (0u64, 0i32, &b""[..]);
    let mut r = Reader::new(b);
    while let Some(f) = r.field()? {
        match f.number {
            1 => ty = f.varint("IntOrString")?,
            2 => i = f.varint("IntOrString")? as i32,
            3 => s = f.bytes("IntOrString")?,
            _ => {}
        }
    }
    Ok(if ty == 1 {
        IntOrStr::Str(s)
    } else {
        IntOrStr::Int(i)
    })
}

/// `RawExtension` / `FieldsV1` {1 raw}: the raw JSON (empty: `null`).
fn raw_json(b: &[u8]) -> Result<&[u8]> {
    let raw = field_1_bytes(b, "RawExtension")?;
    if raw.starts_with(super::envelope::MAGIC) {
        return Err(de::Error::custom(
            "a RawExtension holds a protobuf object; only embedded JSON is read",
        ));
    }
    Ok(raw)
}

/// Standard base64 with padding (what Go's JSON encoder writes for `[]byte`).
pub(crate) fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            A[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            A[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

fn json_error(e: serde_json::Error) -> ProtoDecodeError {
    de::Error::custom(format_args!("embedded JSON: {e}"))
}

fn visit_text<'de, V: Visitor<'de>>(b: &'de [u8], visitor: V) -> Result<V::Value> {
    match std::str::from_utf8(b) {
        Ok(s) => visitor.visit_borrowed_str(s),
        Err(_) => visitor.visit_string(text(b).into_owned()),
    }
}

impl<'de> Deserializer<'de> for Value<'de> {
    type Error = ProtoDecodeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.kind {
            Kind::Bool(b) => visitor.visit_bool(b),
            Kind::I32(i) => visitor.visit_i32(i),
            Kind::I64(i) => visitor.visit_i64(i),
            Kind::Str(b) => visit_text(b, visitor),
            Kind::Bytes(b) => visitor.visit_string(base64(b)),
            Kind::Null => visitor.visit_unit(),
            Kind::Time(s, n, micro) => visitor.visit_str(time_text(s, n, micro)?.as_str()),
            Kind::RawJson(raw) => {
                let mut d = serde_json::Deserializer::from_slice(raw);
                let v = d.deserialize_any(visitor).map_err(json_error)?;
                d.end().map_err(json_error)?;
                Ok(v)
            }
            Kind::Msg(m, b) => {
                if self.depth > MAX_DEPTH {
                    return Err(WireError::TooDeep(MAX_DEPTH).into());
                }
                if m.special == Special::Items {
                    let first = m.fields.first().ok_or_else(|| {
                        <ProtoDecodeError as de::Error>::custom("an Items message without items")
                    })?;
                    visitor.visit_seq(Elements::new(first, b, self.depth))
                } else {
                    visitor.visit_map(MessageAccess::new(m, b, self.type_meta, self.depth))
                }
            }
            Kind::Many(field, rest) => match field.card {
                Card::Map => visitor.visit_map(Entries::new(field, rest, self.depth)),
                _ => visitor.visit_seq(Elements::new(field, rest, self.depth)),
            },
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if let Kind::Null = self.kind {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct enum identifier
    }
}

/// A JSON key: a field's JSON name (static), or a map key borrowed from
/// the input.
struct Key<'de>(&'de str);

impl<'de> Deserializer<'de> for Key<'de> {
    type Error = ProtoDecodeError;
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        visitor.visit_borrowed_str(self.0)
    }
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

/// One level of fields being read: the message itself, or an inlined
/// (JSON-flattened) field of it.
struct Frame<'de> {
    msg: &'static Message,
    reader: Reader<'de>,
    hint: usize,
    /// Repeated and map fields already presented (by field index).
    seen: u128,
}

/// A message presented as a JSON object.
struct MessageAccess<'de> {
    frames: [Option<Frame<'de>>; MAX_INLINE + 1],
    top: usize,
    type_meta: Option<(&'de str, &'de str)>,
    /// 0: `apiVersion` next, 1: `kind` next, 2: fields.
    tm_state: u8,
    pending: Option<Kind<'de>>,
    depth: usize,
}

impl<'de> MessageAccess<'de> {
    fn new(
        msg: &'static Message,
        bytes: &'de [u8],
        type_meta: Option<(&'de str, &'de str)>,
        depth: usize,
    ) -> Self {
        MessageAccess {
            frames: [
                Some(Frame {
                    msg,
                    reader: Reader::new(bytes),
                    hint: 0,
                    seen: 0,
                }),
                None,
                None,
                None,
                None,
            ],
            top: 0,
            type_meta,
            tm_state: if type_meta.is_some() { 0 } else { 2 },
            pending: None,
            depth,
        }
    }
}

impl<'de> MapAccess<'de> for MessageAccess<'de> {
    type Error = ProtoDecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if let Some((api_version, kind)) = self.type_meta {
            match self.tm_state {
                0 if !api_version.is_empty() => {
                    self.tm_state = 1;
                    self.pending = Some(Kind::Str(api_version.as_bytes()));
                    return seed.deserialize(Key("apiVersion")).map(Some);
                }
                0 | 1 => {
                    self.tm_state = 2;
                    if !kind.is_empty() {
                        self.pending = Some(Kind::Str(kind.as_bytes()));
                        return seed.deserialize(Key("kind")).map(Some);
                    }
                }
                _ => {}
            }
        }
        loop {
            let Some(frame) = self.frames[self.top].as_mut() else {
                return Ok(None);
            };
            let Some(wf) = frame.reader.field()? else {
                if self.top == 0 {
                    return Ok(None);
                }
                self.frames[self.top] = None;
                self.top -= 1;
                continue;
            };
            let Some((index, field)) = frame.msg.field(wf.number, &mut frame.hint) else {
                continue; // not in the tables (newer server) or not in JSON
            };
            match field.card {
                Card::Repeated | Card::Map => {
                    // Kubernetes writes fields in field-number order, so the
                    // occurrences of a repeated field are one run: present
                    // the run, and refuse a second run of the same field
                    // (its key would repeat, and the first run be lost).
                    let bit = 1u128 << (index % 128);
                    if frame.seen & bit != 0 {
                        return Err(de::Error::custom(format_args!(
                            "repeated protobuf field {} ({}) of {} is split by other fields; \
                             Kubernetes writes each repeated field as one run",
                            wf.number, field.json, frame.msg.name
                        )));
                    }
                    frame.seen |= bit;
                    let buf = frame.reader.buf();
                    let mut end = wf.end;
                    loop {
                        let mut ahead = frame.reader.clone();
                        match ahead.field()? {
                            Some(next) if next.number == wf.number => {
                                end = next.end;
                                frame.reader = ahead;
                            }
                            _ => break,
                        }
                    }
                    self.pending = Some(Kind::Many(field, &buf[wf.start..end]));
                }
                Card::One => {
                    if field.flags & INLINE != 0 {
                        let (Ty::Msg(id), WireValue::Bytes(b)) = (field.ty, wf.value) else {
                            return Err(wrong(field.ty, wf.number, wf.value));
                        };
                        if self.top == MAX_INLINE {
                            return Err(WireError::TooDeep(MAX_INLINE).into());
                        }
                        self.top += 1;
                        self.frames[self.top] = Some(Frame {
                            msg: message(id),
                            reader: Reader::new(b),
                            hint: 0,
                            seen: 0,
                        });
                        continue;
                    }
                    let kind = value_kind(field.ty, wf.number, wf.value)?;
                    if field.flags & OMIT_ZERO != 0 && kind.is_zero() {
                        continue;
                    }
                    self.pending = Some(kind);
                }
            }
            return seed.deserialize(Key(field.json)).map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        pending_value(&mut self.pending, self.depth + 1, seed)
    }
}

/// The elements of a repeated field (packed or not), in order.
struct Elements<'de> {
    field: &'static Field,
    reader: Reader<'de>,
    packed: Option<Reader<'de>>,
    depth: usize,
}

impl<'de> Elements<'de> {
    fn new(field: &'static Field, rest: &'de [u8], depth: usize) -> Self {
        Elements {
            field,
            reader: Reader::new(rest),
            packed: None,
            depth,
        }
    }

    fn next_kind(&mut self) -> Result<Option<Kind<'de>>> {
        loop {
            if let Some(p) = &mut self.packed {
                if !p.is_empty() {
                    let v = p.varint("a packed element")?;
                    return value_kind(self.field.ty, self.field.number, WireValue::Varint(v))
                        .map(Some);
                }
                self.packed = None;
            }
            let Some(wf) = self.reader.field()? else {
                return Ok(None);
            };
            if wf.number != self.field.number {
                continue;
            }
            if let (Ty::Bool | Ty::Int32 | Ty::Int64, WireValue::Bytes(b)) =
                (self.field.ty, wf.value)
            {
                self.packed = Some(Reader::new(b));
                continue;
            }
            return value_kind(self.field.ty, wf.number, wf.value).map(Some);
        }
    }
}

impl<'de> SeqAccess<'de> for Elements<'de> {
    type Error = ProtoDecodeError;
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        match self.next_kind()? {
            None => Ok(None),
            Some(kind) => seed
                .deserialize(Value {
                    kind,
                    type_meta: None,
                    depth: self.depth + 1,
                })
                .map(Some),
        }
    }
}

/// The entries of a map field: `{1 key, 2 value}` messages.
struct Entries<'de> {
    elements: Elements<'de>,
    pending: Option<Kind<'de>>,
}

impl<'de> Entries<'de> {
    fn new(field: &'static Field, rest: &'de [u8], depth: usize) -> Self {
        Entries {
            elements: Elements::new(field, rest, depth),
            pending: None,
        }
    }
}

impl<'de> Entries<'de> {
    /// The next entry: its key's bytes and its value.
    fn next_entry(&mut self) -> Result<Option<(&'de [u8], Kind<'de>)>> {
        let field = self.elements.field;
        // An entry is a message whatever the value type.
        let entry = loop {
            let Some(wf) = self.elements.reader.field()? else {
                return Ok(None);
            };
            if wf.number == field.number {
                break wf;
            }
        };
        let b = entry.bytes("map entry")?;
        let mut key: &[u8] = b"";
        let mut value = None;
        let mut r = Reader::new(b);
        while let Some(f) = r.field()? {
            match f.number {
                1 => key = f.bytes("map entry")?,
                2 => value = Some(f.value),
                _ => {}
            }
        }
        // A missing value is the type's zero value.
        let value = value.unwrap_or(match field.ty {
            Ty::String | Ty::Bytes | Ty::Msg(_) => WireValue::Bytes(b""),
            Ty::Bool | Ty::Int32 | Ty::Int64 => WireValue::Varint(0),
        });
        let kind = value_kind(field.ty, field.number, value)?;
        Ok(Some((key, kind)))
    }
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = ProtoDecodeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        let Some((key, value)) = self.next_entry()? else {
            return Ok(None);
        };
        self.pending = Some(value);
        match std::str::from_utf8(key) {
            Ok(k) => seed.deserialize(Key(k)).map(Some),
            Err(_) => seed
                .deserialize(de::value::StringDeserializer::<ProtoDecodeError>::new(
                    text(key).into_owned(),
                ))
                .map(Some),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        pending_value(&mut self.pending, self.elements.depth + 1, seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::encode::{bytes_field, varint_field};
    use crate::protobuf::schema::kind_message;

    fn csr() -> Vec<u8> {
        let mut meta = Vec::new();
        bytes_field(&mut meta, 1, b"csr-1");
        bytes_field(&mut meta, 2, b""); // generateName: omitempty, dropped
        let mut extra = Vec::new();
        bytes_field(&mut extra, 1, b"a");
        bytes_field(&mut extra, 1, b"b");
        let mut entry = Vec::new();
        bytes_field(&mut entry, 1, b"scopes");
        bytes_field(&mut entry, 2, &extra);
        let mut spec = Vec::new();
        bytes_field(&mut spec, 1, b"\x00\xffPEM"); // bytes: base64 in JSON
        bytes_field(&mut spec, 2, b""); // username: omitempty, dropped
        bytes_field(&mut spec, 5, b"digital signature");
        bytes_field(&mut spec, 5, b"client auth");
        bytes_field(&mut spec, 6, &entry);
        bytes_field(&mut spec, 7, b"example.com/signer");
        varint_field(&mut spec, 8, 0); // a pointer: kept though zero
        let mut obj = Vec::new();
        bytes_field(&mut obj, 1, &meta);
        bytes_field(&mut obj, 2, &spec);
        obj
    }

    #[test]
    fn presents_messages_as_the_apiservers_json() {
        let m = kind_message("certificates.k8s.io/v1", "CertificateSigningRequest").unwrap();
        let v: serde_json::Value = from_object(
            &csr(),
            m,
            Some(("certificates.k8s.io/v1", "CertificateSigningRequest")),
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "apiVersion": "certificates.k8s.io/v1",
                "kind": "CertificateSigningRequest",
                "metadata": {"name": "csr-1"},
                "spec": {
                    "request": base64(b"\x00\xffPEM"),
                    "usages": ["digital signature", "client auth"],
                    "extra": {"scopes": ["a", "b"]},
                    "signerName": "example.com/signer",
                    "expirationSeconds": 0
                }
            })
        );
        let typed: k8s_openapi::api::certificates::v1::CertificateSigningRequest =
            from_object(&csr(), m, None).unwrap();
        assert_eq!(typed.spec.request.0, b"\x00\xffPEM");
        assert_eq!(typed.spec.extra.unwrap()["scopes"], ["a", "b"]);
    }

    #[test]
    fn a_repeated_field_split_in_two_runs_is_an_error() {
        let m = kind_message("v1", "ConfigMap").unwrap();
        let mut meta = Vec::new();
        bytes_field(&mut meta, 1, b"cm");
        bytes_field(&mut meta, 14, b"f1");
        bytes_field(&mut meta, 3, b"ns");
        bytes_field(&mut meta, 14, b"f2");
        let mut obj = Vec::new();
        bytes_field(&mut obj, 1, &meta);
        let err = from_object::<serde_json::Value>(&obj, m, None).unwrap_err();
        assert!(err.to_string().contains("split"), "{err}");
        // In one run, both are kept.
        let mut meta = Vec::new();
        bytes_field(&mut meta, 1, b"cm");
        bytes_field(&mut meta, 14, b"f1");
        bytes_field(&mut meta, 14, b"f2");
        let mut obj = Vec::new();
        bytes_field(&mut obj, 1, &meta);
        let v: serde_json::Value = from_object(&obj, m, None).unwrap();
        assert_eq!(v["metadata"]["finalizers"], serde_json::json!(["f1", "f2"]));
    }

    #[test]
    fn wrong_wire_types_are_errors() {
        let m = kind_message("v1", "ConfigMap").unwrap();
        // metadata as a varint.
        let mut obj = Vec::new();
        varint_field(&mut obj, 1, 3);
        assert!(from_object::<serde_json::Value>(&obj, m, None).is_err());
        // A Time that is not a message, a bool as bytes.
        let mut meta = Vec::new();
        varint_field(&mut meta, 8, 1);
        let mut obj = Vec::new();
        bytes_field(&mut obj, 1, &meta);
        assert!(from_object::<serde_json::Value>(&obj, m, None).is_err());
        let mut obj = Vec::new();
        bytes_field(&mut obj, 4, b"x"); // immutable: bool
        assert!(from_object::<serde_json::Value>(&obj, m, None).is_err());
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        for (raw, b64) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"\xff\xfe\x00", "//4A"),
        ] {
            assert_eq!(base64(raw), b64);
            let bs: k8s_openapi::ByteString =
                serde_json::from_value(serde_json::Value::String(base64(raw))).unwrap();
            assert_eq!(bs.0, raw);
        }
    }
}
