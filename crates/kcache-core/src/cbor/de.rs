//! A serde `Deserializer` over Kubernetes CBOR that presents the object as
//! the apiserver's JSON of it would be (see the module docs).

use std::borrow::Cow;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

use super::CborError;
use super::reader::{
    Item, KeyCheck, MAX_DEPTH, Reader, TAG_BASE16, TAG_BASE64, TAG_BASE64URL, TAG_SELF_DESCRIBED,
    bytes_to_str, later_encoding,
};

/// Decodes one CBOR object (the self-described tag in front optional)
/// into `K`, as decoding the apiserver's JSON of it would.
///
/// Fails with [`CborError`] on malformed CBOR, a duplicate map key, NaN or
/// an infinity, nesting deeper than 64, bytes after the object, or a shape
/// that does not fit `K`.
pub fn decode<K: DeserializeOwned>(bytes: &[u8]) -> Result<K, CborError> {
    let mut d = Deserializer {
        r: Reader::new(bytes),
        depth: 0,
    };
    d.r.skip_self_described();
    let v = K::deserialize(&mut d)?;
    if !d.r.is_empty() {
        return Err(CborError::Trailing(bytes.len() - d.r.position()));
    }
    Ok(v)
}

/// Decodes the item at `r` into `T`, moving `r` past it.
pub(crate) fn decode_at<'de, T: de::Deserialize<'de>>(r: &mut Reader<'de>) -> Result<T, CborError> {
    let mut d = Deserializer {
        r: r.clone(),
        depth: 0,
    };
    let v = T::deserialize(&mut d)?;
    *r = d.r;
    Ok(v)
}

pub(crate) struct Deserializer<'de> {
    r: Reader<'de>,
    depth: usize,
}

/// A float as JSON would give it back: integral values as integers.
pub(crate) enum Number {
    U(u64),
    I(i64),
    F(f64),
}

pub(crate) fn float(f: f64, r: &Reader<'_>) -> Result<Number, CborError> {
    if !f.is_finite() {
        return Err(r.error("NaN or an infinity, which JSON cannot hold"));
    }
    // 2^53: beyond it JSON's text of the float is not an integer's
    const EXACT: f64 = 9_007_199_254_740_992.0;
    Ok(
        if f.fract() == 0.0 && f.abs() < EXACT && !(f == 0.0 && f.is_sign_negative()) {
            if f >= 0.0 {
                Number::U(f as u64)
            } else {
                Number::I(f as i64)
            }
        } else {
            Number::F(f)
        },
    )
}

pub(crate) fn negative(n: u64, r: &Reader<'_>) -> Result<i64, CborError> {
    i64::try_from(n)
        .map(|n| -1 - n)
        .map_err(|_| r.error("a negative integer below the 64-bit range"))
}

impl<'de> Deserializer<'de> {
    fn enter(&mut self) -> Result<(), CborError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.r.error("nested deeper than 64 levels"));
        }
        Ok(())
    }

    fn any<V: Visitor<'de>>(&mut self, v: V, want_bytes: bool) -> Result<V::Value, CborError> {
        let start = self.r.position();
        match self.r.next()? {
            Item::Uint(n) => v.visit_u64(n),
            Item::Nint(n) => v.visit_i64(negative(n, &self.r)?),
            Item::Bytes(b) if want_bytes => match b {
                Cow::Borrowed(b) => v.visit_borrowed_bytes(b),
                Cow::Owned(b) => v.visit_byte_buf(b),
            },
            Item::Bytes(b) => match bytes_to_str(b) {
                Cow::Borrowed(s) => v.visit_borrowed_str(s),
                Cow::Owned(s) => v.visit_string(s),
            },
            Item::Text(Cow::Borrowed(s)) => v.visit_borrowed_str(s),
            Item::Text(Cow::Owned(s)) => v.visit_string(s),
            Item::Array(n) => {
                self.enter()?;
                if let Some(n) = n {
                    self.r.check_count(n)?;
                }
                let out = v.visit_seq(Seq { d: self, left: n })?;
                self.depth -= 1;
                Ok(out)
            }
            Item::Map(n) => {
                self.enter()?;
                if let Some(n) = n {
                    self.r.check_count(n)?;
                }
                let keys = KeyCheck::new(self.r.position());
                let out = v.visit_map(Map {
                    d: self,
                    left: n,
                    keys,
                })?;
                self.depth -= 1;
                Ok(out)
            }
            Item::Tag(TAG_SELF_DESCRIBED) => self.any(v, want_bytes),
            Item::Tag(t @ (TAG_BASE64 | TAG_BASE64URL | TAG_BASE16)) if !want_bytes => {
                let at = self.r.position();
                match self.r.next()? {
                    Item::Bytes(b) => match later_encoding(t, &b) {
                        Some(s) => v.visit_string(s),
                        None => unreachable_tag(&self.r),
                    },
                    _ => {
                        self.r = Reader::at(self.r.buffer(), at);
                        self.enter()?;
                        let out = self.any(v, want_bytes);
                        self.depth -= 1;
                        out
                    }
                }
            }
            Item::Tag(_) => {
                // any other tag (times, epoch seconds): its content
                self.enter()?;
                let out = self.any(v, want_bytes);
                self.depth -= 1;
                out
            }
            Item::Bool(b) => v.visit_bool(b),
            Item::Null | Item::Undefined => v.visit_unit(),
            Item::Float(f) => match float(f, &self.r)? {
                Number::U(n) => v.visit_u64(n),
                Number::I(n) => v.visit_i64(n),
                Number::F(f) => v.visit_f64(f),
            },
            Item::Break => {
                self.r = Reader::at(self.r.buffer(), start);
                Err(self.r.error("a break outside an indefinite-length item"))
            }
        }
    }
}

fn unreachable_tag<T>(r: &Reader<'_>) -> Result<T, CborError> {
    Err(r.error("an unknown expected-encoding tag"))
}

impl<'de> de::Deserializer<'de> for &mut Deserializer<'de> {
    type Error = CborError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, CborError> {
        self.any(v, false)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value, CborError> {
        self.any(v, true)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value, CborError> {
        self.any(v, true)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, CborError> {
        match self.r.peek_byte() {
            Some(0xf6 | 0xf7) => {
                self.r.next()?;
                v.visit_none()
            }
            _ => v.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, CborError> {
        v.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, CborError> {
        self.r.skip()?;
        v.visit_unit()
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, CborError> {
        let mut peek = self.r.clone();
        match peek.next()? {
            // a unit variant, as JSON writes it: its name
            Item::Bytes(_) | Item::Text(_) => {
                let s = self.r.string()?;
                v.visit_enum(s.into_owned().into_deserializer())
            }
            // {"variant": value}
            Item::Map(Some(1)) => {
                self.r = peek;
                self.enter()?;
                let out = v.visit_enum(Enum { d: &mut *self })?;
                self.depth -= 1;
                Ok(out)
            }
            _ => Err(self
                .r
                .error("expected an enum: a string or a map of one entry")),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

struct Seq<'a, 'de> {
    d: &'a mut Deserializer<'de>,
    left: Option<u64>,
}

impl<'de> SeqAccess<'de> for Seq<'_, 'de> {
    type Error = CborError;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, CborError> {
        if !self.d.r.next_entry(&mut self.left)? {
            return Ok(None);
        }
        seed.deserialize(&mut *self.d).map(Some)
    }
    fn size_hint(&self) -> Option<usize> {
        // a hint only: never more than the bytes could hold (checked)
        self.left.and_then(|n| usize::try_from(n.min(4096)).ok())
    }
}

struct Map<'a, 'de> {
    d: &'a mut Deserializer<'de>,
    left: Option<u64>,
    keys: KeyCheck<'de>,
}

impl<'de> MapAccess<'de> for Map<'_, 'de> {
    type Error = CborError;
    fn next_key_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, CborError> {
        if !self.d.r.next_entry(&mut self.left)? {
            return Ok(None);
        }
        self.keys.check(&self.d.r)?;
        seed.deserialize(&mut *self.d).map(Some)
    }
    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, CborError> {
        seed.deserialize(&mut *self.d)
    }
    fn size_hint(&self) -> Option<usize> {
        self.left.and_then(|n| usize::try_from(n.min(4096)).ok())
    }
}

struct Enum<'a, 'de> {
    d: &'a mut Deserializer<'de>,
}

impl<'de> EnumAccess<'de> for Enum<'_, 'de> {
    type Error = CborError;
    type Variant = Self;
    fn variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<(T::Value, Self), CborError> {
        let v = seed.deserialize(&mut *self.d)?;
        Ok((v, self))
    }
}

impl<'de> VariantAccess<'de> for Enum<'_, 'de> {
    type Error = CborError;
    fn unit_variant(self) -> Result<(), CborError> {
        de::Deserialize::deserialize(&mut *self.d)
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, CborError> {
        seed.deserialize(&mut *self.d)
    }
    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, CborError> {
        de::Deserializer::deserialize_any(&mut *self.d, v)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, CborError> {
        de::Deserializer::deserialize_any(&mut *self.d, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A tiny encoder for the tests: the apiserver's shape (byte strings).
    fn bs(s: &str) -> Vec<u8> {
        let mut v = head(2, s.len() as u64);
        v.extend_from_slice(s.as_bytes());
        v
    }
    fn head(major: u8, n: u64) -> Vec<u8> {
        let m = major << 5;
        match n {
            0..=23 => vec![m | n as u8],
            24..=0xff => vec![m | 24, n as u8],
            0x100..=0xffff => vec![m | 25, (n >> 8) as u8, n as u8],
            _ => {
                let mut v = vec![m | 26];
                v.extend_from_slice(&(n as u32).to_be_bytes());
                v
            }
        }
    }
    fn map(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut v = head(5, entries.len() as u64);
        for (k, val) in entries {
            v.extend(bs(k));
            v.extend_from_slice(val);
        }
        v
    }

    #[test]
    fn typed_and_dynamic_decodes_see_the_json_shape() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        #[serde(rename_all = "camelCase")]
        struct Spec {
            replicas: i32,
            ratio: f64,
            paused: Option<bool>,
            data: Option<k8s_openapi::ByteString>,
            labels: BTreeMap<String, String>,
            ports: Vec<u16>,
            mode: Mode,
        }
        #[derive(serde::Deserialize, Debug, PartialEq)]
        enum Mode {
            Fast,
        }
        let mut b22 = vec![0xd6];
        b22.extend(head(2, 3));
        b22.extend_from_slice(&[1, 2, 3]);
        let obj = map(&[
            ("replicas", vec![0x03]),
            ("ratio", vec![0xf9, 0x4a, 0x40]), // 12.5 as a half float
            ("paused", vec![0xf6]),
            ("data", b22),
            ("labels", map(&[("app", bs("web"))])),
            ("ports", vec![0x82, 0x18, 80, 0x19, 0x01, 0xbb]),
            ("mode", bs("Fast")),
        ]);
        let mut tagged = vec![0xd9, 0xd9, 0xf7];
        tagged.extend_from_slice(&obj);
        let spec: Spec = decode(&tagged).unwrap();
        assert_eq!(spec.replicas, 3);
        assert_eq!(spec.ratio, 12.5);
        assert_eq!(spec.paused, None);
        assert_eq!(spec.data, Some(k8s_openapi::ByteString(vec![1, 2, 3])));
        assert_eq!(spec.labels["app"], "web");
        assert_eq!(spec.ports, [80, 443]);
        assert_eq!(spec.mode, Mode::Fast);
        let v: serde_json::Value = decode(&tagged).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"replicas": 3, "ratio": 12.5, "paused": null, "data": "AQID",
                "labels": {"app": "web"}, "ports": [80, 443], "mode": "Fast"})
        );
    }

    #[test]
    fn integral_floats_read_as_json_integers() {
        let v: serde_json::Value = decode(&[0xf9, 0x3c, 0x00]).unwrap();
        assert_eq!(v, serde_json::json!(1));
        let n: i32 = decode(&[0xfb, 0xc0, 0x59, 0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(n, -100);
        assert!(decode::<f64>(&[0xf9, 0x7e, 0x00]).is_err(), "NaN");
        assert!(decode::<f64>(&[0xf9, 0x7c, 0x00]).is_err(), "infinity");
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let dup = map(&[("a", vec![1]), ("a", vec![2])]);
        let e = decode::<serde_json::Value>(&dup).unwrap_err();
        assert!(e.to_string().contains("duplicate map key"), "{e}");
        assert!(matches!(
            decode::<serde_json::Value>(&[0x01, 0x02]),
            Err(CborError::Trailing(1))
        ));
        assert!(matches!(
            decode::<serde_json::Value>(&[0xa1, 0x41]),
            Err(CborError::Truncated { .. })
        ));
        let mut deep = vec![0x81; 200];
        deep.push(0x01);
        let e = decode::<serde_json::Value>(&deep).unwrap_err();
        assert!(e.to_string().contains("deeper than 64"), "{e}");
        assert!(
            decode::<serde_json::Value>(&[0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
                .is_err()
        );
        // a huge count on a short buffer: refused before allocating
        assert!(decode::<Vec<u8>>(&[0x9b, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff]).is_err());
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Named {
            name: String,
        }
        let e = decode::<Named>(&map(&[("name", vec![0x05])])).unwrap_err();
        assert!(matches!(e, CborError::Decode(_)), "{e:?}");
    }
}
