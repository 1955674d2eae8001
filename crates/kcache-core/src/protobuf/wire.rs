//! The protobuf wire format at the level kcache needs: varints, tags and
//! field values, bounds-checked, borrowing from the input.

/// Error reading protobuf bytes: malformed, truncated or not what was
/// expected. Reading never panics and never allocates more than the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The input ends inside a varint, a tag or a length-delimited value.
    #[error("protobuf input is truncated: it ends inside {what} at byte {offset}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where, from the start of the buffer being read.
        offset: usize,
    },
    /// A varint longer than 10 bytes or overflowing 64 bits.
    #[error("malformed protobuf varint at byte {offset}")]
    Varint {
        /// Where it starts.
        offset: usize,
    },
    /// A tag with field number 0 or a wire type kcache does not read
    /// (groups: 3 and 4; 6 and 7 do not exist).
    #[error("malformed protobuf tag {tag:#x} at byte {offset}")]
    Tag {
        /// The tag as read.
        tag: u64,
        /// Where it starts.
        offset: usize,
    },
    /// A field of the wrong wire type (e.g. a varint where a message is expected).
    #[error("protobuf field {field} of {message} has the wrong wire type {wire_type}")]
    WireType {
        /// The message being read.
        message: &'static str,
        /// The field number.
        field: u32,
        /// The wire type found.
        wire_type: u8,
    },
    /// A string field that is not UTF-8.
    #[error("protobuf field {field} of {message} is not valid UTF-8")]
    Utf8 {
        /// The message being read.
        message: &'static str,
        /// The field number.
        field: u32,
    },
    /// The body does not start with the Kubernetes protobuf magic `k8s\0`
    /// (the server answered in another format: check its `Content-Type`).
    #[error("not a Kubernetes protobuf body: it does not start with the magic bytes k8s\\0")]
    Magic,
    /// A field kcache needs is absent.
    #[error("protobuf {message} has no {field}")]
    Missing {
        /// The message being read.
        message: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// A field that must appear once appears more than once.
    #[error("protobuf {message} has field {field} more than once")]
    Duplicate {
        /// The message being read.
        message: &'static str,
        /// The field number.
        field: u32,
    },
    /// A watch frame longer than the caller's limit.
    #[error(
        "protobuf watch frame of {len} bytes exceeds the limit of {max} bytes; raise the limit if objects this large are expected"
    )]
    FrameTooLarge {
        /// The length the frame header announced.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// The envelope says its payload is encoded (e.g. gzip); kcache reads
    /// only plain payloads.
    #[error("protobuf envelope has content encoding {0:?}; only unencoded payloads are read")]
    ContentEncoding(String),
    /// A value that breaks a rule of its type (e.g. a timestamp out of range).
    #[error("protobuf field {field} of {message}: {reason}")]
    Invalid {
        /// The message being read.
        message: &'static str,
        /// The field number.
        field: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// Nesting deeper than kcache follows (a guard against hostile input).
    #[error("protobuf messages nested deeper than {0} levels")]
    TooDeep(usize),
}

/// How a value is laid out on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireValue<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: a string, bytes, an embedded message or a packed run.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

impl WireValue<'_> {
    /// The wire type number.
    pub(crate) fn wire_type(&self) -> u8 {
        match self {
            WireValue::Varint(_) => 0,
            WireValue::Fixed64(_) => 1,
            WireValue::Bytes(_) => 2,
            WireValue::Fixed32(_) => 5,
        }
    }
}

/// One field as read: its number, its value, and where it starts (the tag).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WireField<'a> {
    pub(crate) number: u32,
    pub(crate) value: WireValue<'a>,
    /// Offset of the tag in the buffer.
    pub(crate) start: usize,
    /// Offset just past the value.
    pub(crate) end: usize,
}

impl<'a> WireField<'a> {
    /// The value of a length-delimited field, or a wire-type error.
    pub(crate) fn bytes(&self, message: &'static str) -> Result<&'a [u8], WireError> {
        match self.value {
            WireValue::Bytes(b) => Ok(b),
            other => Err(self.wrong(message, other)),
        }
    }
    /// A string field, checked UTF-8.
    pub(crate) fn str(&self, message: &'static str) -> Result<&'a str, WireError> {
        let b = self.bytes(message)?;
        std::str::from_utf8(b).map_err(|_| WireError::Utf8 {
            message,
            field: self.number,
        })
    }
    /// A varint field.
    pub(crate) fn varint(&self, message: &'static str) -> Result<u64, WireError> {
        match self.value {
            WireValue::Varint(v) => Ok(v),
            other => Err(self.wrong(message, other)),
        }
    }
    fn wrong(&self, message: &'static str, v: WireValue<'_>) -> WireError {
        WireError::WireType {
            message,
            field: self.number,
            wire_type: v.wire_type(),
        }
    }
}

/// Reads the message `b` into a `T::default()`, handing each field to
/// `set` (the loop every small message reader shares).
pub(crate) fn read_message<'a, T: Default>(
    b: &'a [u8],
    mut set: impl FnMut(&mut T, WireField<'a>) -> Result<(), WireError>,
) -> Result<T, WireError> {
    let mut out = T::default();
    let mut r = Reader::new(b);
    while let Some(f) = r.field()? {
        set(&mut out, f)?;
    }
    Ok(out)
}

/// A cursor over the fields of one message.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Whether every byte was read.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The buffer being read.
    pub(crate) fn buf(&self) -> &'a [u8] {
        self.buf
    }

    /// Reads a varint.
    #[inline]
    pub(crate) fn varint(&mut self, what: &'static str) -> Result<u64, WireError> {
        let start = self.pos;
        // Fast path: one byte.
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        let mut value: u64 = 0;
        for i in 0..10u32 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(WireError::Truncated {
                    what,
                    offset: self.pos,
                });
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(WireError::Varint { offset: start });
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(WireError::Varint { offset: start })
    }

    fn take(&mut self, len: u64, what: &'static str) -> Result<&'a [u8], WireError> {
        let rest = self.buf.len() - self.pos;
        if len > rest as u64 {
            return Err(WireError::Truncated {
                what,
                offset: self.buf.len(),
            });
        }
        let len = len as usize;
        let out = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(out)
    }

    /// Reads the next field; `None` at the end of the buffer.
    #[inline]
    pub(crate) fn field(&mut self) -> Result<Option<WireField<'a>>, WireError> {
        let buf = self.buf;
        let start = self.pos;
        let Some(&tag) = buf.get(start) else {
            return Ok(None);
        };
        // Fast path, most Kubernetes fields: a one-byte tag (field number
        // 1-15), then a one-byte varint or length.
        if (8..0x80).contains(&tag)
            && let Some(&b) = buf.get(start + 1)
            && b < 0x80
        {
            let number = u32::from(tag >> 3);
            match tag & 7 {
                0 => {
                    self.pos = start + 2;
                    return Ok(Some(WireField {
                        number,
                        value: WireValue::Varint(u64::from(b)),
                        start,
                        end: start + 2,
                    }));
                }
                2 => {
                    let end = start + 2 + usize::from(b);
                    if let Some(v) = buf.get(start + 2..end) {
                        self.pos = end;
                        return Ok(Some(WireField {
                            number,
                            value: WireValue::Bytes(v),
                            start,
                            end,
                        }));
                    }
                }
                _ => {}
            }
        }
        self.field_slow()
    }

    #[inline(never)]
    fn field_slow(&mut self) -> Result<Option<WireField<'a>>, WireError> {
        let start = self.pos;
        let tag = self.varint("a field tag")?;
        let number = tag >> 3;
        if number == 0 || number > u64::from(u32::MAX >> 3) {
            return Err(WireError::Tag { tag, offset: start });
        }
        let value = match tag & 7 {
            0 => WireValue::Varint(self.varint("a varint field")?),
            1 => {
                let b = self.take(8, "a fixed64 field")?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                WireValue::Fixed64(u64::from_le_bytes(a))
            }
            2 => {
                let len = self.varint("a length prefix")?;
                WireValue::Bytes(self.take(len, "a length-delimited field")?)
            }
            5 => {
                let b = self.take(4, "a fixed32 field")?;
                let mut a = [0u8; 4];
                a.copy_from_slice(b);
                WireValue::Fixed32(u32::from_le_bytes(a))
            }
            _ => return Err(WireError::Tag { tag, offset: start }),
        };
        Ok(Some(WireField {
            number: number as u32,
            value,
            start,
            end: self.pos,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::encode::put_varint;

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut r = Reader::new(&b);
            assert_eq!(r.varint("v").unwrap(), v);
            assert!(r.is_empty());
            for cut in 0..b.len() {
                assert!(matches!(
                    Reader::new(&b[..cut]).varint("v"),
                    Err(WireError::Truncated { .. })
                ));
            }
        }
        // 11 bytes, and a 10th byte over 1.
        let long = [0x80u8; 10];
        assert!(matches!(
            Reader::new(&[&long[..], &[0]].concat()).varint("v"),
            Err(WireError::Varint { .. })
        ));
        let mut over = [0xffu8; 10];
        over[9] = 0x02;
        assert!(matches!(
            Reader::new(&over).varint("v"),
            Err(WireError::Varint { .. })
        ));
    }

    #[test]
    fn fields_of_every_wire_type_and_bad_tags() {
        let b = [
            0x08, 0x96, 0x01, // 1: varint 150
            0x11, 1, 0, 0, 0, 0, 0, 0, 0, // 2: fixed64 1
            0x1a, 0x02, b'h', b'i', // 3: bytes "hi"
            0x25, 2, 0, 0, 0, // 4: fixed32 2
        ];
        let mut r = Reader::new(&b);
        let f = r.field().unwrap().unwrap();
        assert_eq!((f.number, f.value), (1, WireValue::Varint(150)));
        assert_eq!(r.field().unwrap().unwrap().value, WireValue::Fixed64(1));
        let f = r.field().unwrap().unwrap();
        assert_eq!(f.str("T").unwrap(), "hi");
        assert!(f.varint("T").is_err());
        assert_eq!(r.field().unwrap().unwrap().value, WireValue::Fixed32(2));
        assert!(r.field().unwrap().is_none());
        for bad in [&[0x00u8][..], &[0x0b], &[0x0c], &[0x0e], &[0x0f]] {
            assert!(matches!(
                Reader::new(bad).field(),
                Err(WireError::Tag { .. })
            ));
        }
        // A length prefix larger than the input.
        assert!(matches!(
            Reader::new(&[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 1]).field(),
            Err(WireError::Truncated { .. })
        ));
        for cut in 0..b.len() {
            let mut r = Reader::new(&b[..cut]);
            let mut n = 0;
            loop {
                match r.field() {
                    Ok(Some(_)) => n += 1,
                    Ok(None) => break,
                    Err(_) => break,
                }
            }
            assert!(n <= 4);
        }
    }
}
