//! Protobuf to JSON text, directly: the table-driven `Deserializer` drives a
//! visitor that writes JSON as it goes (no intermediate value).
//!
//! The JSON has the keys and values the apiserver's JSON would have (same
//! omissions, same special forms), `apiVersion` and `kind` first, the other
//! keys in protobuf field-number order (the apiserver's JSON follows the Go
//! struct order instead; no JSON reader cares).

use std::fmt;
use std::io::Write as _;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Writes one JSON value for whatever the deserializer presents.
pub(crate) struct Writer<'o> {
    pub(crate) out: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Writer<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    // serde_json's escaping: the same text serde_json would write.
    let _ = serde_json::to_writer(&mut *out, s);
}

impl<'de> Visitor<'de> for Writer<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        let _ = write!(self.out, "{v}");
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        let _ = write!(self.out, "{v}");
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        serde_json::to_writer(&mut *self.out, &v).map_err(E::custom)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        string(self.out, v);
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        write_entries(self.out, b'[', b']', |out| {
            Ok(seq.next_element_seed(Writer { out })?.is_some())
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        write_entries(self.out, b'{', b'}', |out| {
            if map.next_key_seed(Writer { out: &mut *out })?.is_none() {
                return Ok(false);
            }
            out.push(b':');
            map.next_value_seed(Writer { out })?;
            Ok(true)
        })
    }
}

/// Writes `open`, the entries `entry` writes, separated by commas, and
/// `close`. `entry` writes one entry and returns `true`, or returns `false`
/// when there is none left (what it wrote then is dropped).
fn write_entries<E>(
    out: &mut Vec<u8>,
    open: u8,
    close: u8,
    mut entry: impl FnMut(&mut Vec<u8>) -> Result<bool, E>,
) -> Result<(), E> {
    out.push(open);
    let mut first = true;
    loop {
        let at = out.len();
        if !first {
            out.push(b',');
        }
        if !entry(out)? {
            out.truncate(at);
            break;
        }
        first = false;
    }
    out.push(close);
    Ok(())
}
