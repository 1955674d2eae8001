//! What the apiserver sends as protobuf, read without decoding objects: the
//! `k8s\0` + `runtime.Unknown` envelope, list bodies cut into items, watch
//! frames and `Status`.
//!
//! Field numbers (checked against the `generated.proto` files of
//! k8s.io/apimachinery v0.37.2):
//! `runtime.Unknown` {1 typeMeta {1 apiVersion, 2 kind}, 2 raw,
//! 3 contentEncoding, 4 contentType}; `XList` {1 metadata: `ListMeta`
//! {1 selfLink, 2 resourceVersion, 3 continue, 4 remainingItemCount,
//! 5 shardInfo {1 selector}}, 2 items}; `WatchEvent` {1 type, 2 object:
//! `RawExtension` {1 raw}}; `Status` {1 metadata, 2 status, 3 message,
//! 4 reason, 5 details {1 name, 2 group, 3 kind, 4 causes {1 reason,
//! 2 message, 3 field}, 5 retryAfterSeconds, 6 uid}, 6 code}.

use super::wire::{Reader, WireError, read_message};

/// The 4 bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The media type of protobuf lists and objects.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The media type of a protobuf watch stream (length-delimited frames).
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// `apiVersion` and `kind` of an object or list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TypeMeta<'a> {
    /// `v1`, `apps/v1`...
    pub api_version: &'a str,
    /// `Pod`, `PodList`, `Status`...
    pub kind: &'a str,
}

/// The `runtime.Unknown` envelope after the magic: the type and the
/// object's (or list's) own protobuf bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unknown<'a> {
    /// The type of `raw`.
    pub type_meta: TypeMeta<'a>,
    /// The object's own protobuf message (no magic, no envelope).
    pub raw: &'a [u8],
    /// Content encoding of `raw` (empty: none).
    pub content_encoding: &'a str,
    /// Content type of `raw` (empty or `application/vnd.kubernetes.protobuf`).
    pub content_type: &'a str,
}

impl<'a> Unknown<'a> {
    /// Reads `k8s\0` + `runtime.Unknown` (a list or object body, or the
    /// object of a watch event).
    ///
    /// Fails on a missing magic, malformed protobuf, a missing `raw` or
    /// kind, and an encoded (e.g. compressed) payload.
    pub fn decode(body: &'a [u8]) -> Result<Self, WireError> {
        let rest = body.strip_prefix(&MAGIC[..]).ok_or(WireError::Magic)?;
        let mut out = Unknown {
            type_meta: TypeMeta::default(),
            raw: &[],
            content_encoding: "",
            content_type: "",
        };
        let mut have_raw = false;
        let mut r = Reader::new(rest);
        while let Some(f) = r.field()? {
            match f.number {
                1 => out.type_meta = type_meta(f.bytes("Unknown")?)?,
                2 => {
                    out.raw = f.bytes("Unknown")?;
                    have_raw = true;
                }
                3 => out.content_encoding = f.str("Unknown")?,
                4 => out.content_type = f.str("Unknown")?,
                _ => {}
            }
        }
        if !have_raw {
            return Err(WireError::Missing {
                message: "Unknown",
                field: "raw",
            });
        }
        if out.type_meta.kind.is_empty() {
            return Err(WireError::Missing {
                message: "Unknown",
                field: "typeMeta.kind",
            });
        }
        if !out.content_encoding.is_empty() {
            return Err(WireError::ContentEncoding(out.content_encoding.to_owned()));
        }
        Ok(out)
    }
}

pub(super) fn type_meta(b: &[u8]) -> Result<TypeMeta<'_>, WireError> {
    read_message(b, |t: &mut TypeMeta<'_>, f| {
        match f.number {
            1 => t.api_version = f.str("TypeMeta")?,
            2 => t.kind = f.str("TypeMeta")?,
            _ => {}
        }
        Ok(())
    })
}

/// `metav1.ListMeta` of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListMeta<'a> {
    /// `metadata.resourceVersion` (empty when absent).
    pub resource_version: &'a str,
    /// `metadata.continue` (empty: the last page).
    pub continue_token: &'a str,
    /// `metadata.remainingItemCount`, when the server sent it.
    pub remaining_item_count: Option<i64>,
    /// `metadata.shardInfo.selector` (KEP-5866), when the server filtered.
    pub shard_selector: Option<&'a str>,
}

pub(super) fn list_meta(b: &[u8]) -> Result<ListMeta<'_>, WireError> {
    read_message(b, |m: &mut ListMeta<'_>, f| {
        match f.number {
            2 => m.resource_version = f.str("ListMeta")?,
            3 => m.continue_token = f.str("ListMeta")?,
            4 => m.remaining_item_count = Some(f.varint("ListMeta")? as i64),
            5 => {
                let shard_info = f.bytes("ListMeta")?;
                m.shard_selector = Some(read_message(shard_info, |sel: &mut &str, g| {
                    if g.number == 1 {
                        *sel = g.str("ShardInfo")?;
                    }
                    Ok(())
                })?);
            }
            _ => {}
        }
        Ok(())
    })
}

/// A list body (`PodList`, `ConfigMapList`...: the `raw` of its envelope),
/// checked once; its items are handed out as byte slices, not decoded.
#[derive(Debug, Clone, Copy)]
pub struct List<'a> {
    /// The list's metadata.
    pub meta: ListMeta<'a>,
    raw: &'a [u8],
    len: usize,
}

impl<'a> List<'a> {
    /// Reads a list message: its `ListMeta` (field 1) and the extent of
    /// every item (field 2). Every field is walked, so a malformed body
    /// fails here, not halfway through the items.
    pub fn decode(raw: &'a [u8]) -> Result<Self, WireError> {
        let mut meta = None;
        let mut len = 0;
        let mut r = Reader::new(raw);
        while let Some(f) = r.field()? {
            match f.number {
                1 => {
                    if meta.is_some() {
                        return Err(WireError::Duplicate {
                            message: "List",
                            field: 1,
                        });
                    }
                    meta = Some(list_meta(f.bytes("List")?)?);
                }
                2 => {
                    f.bytes("List")?;
                    len += 1;
                }
                _ => {}
            }
        }
        Ok(List {
            meta: meta.unwrap_or_default(),
            raw,
            len,
        })
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list has no item.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The items in order: each one's own protobuf message (no envelope;
    /// its type is the list's kind without `List`, see [`item_kind`]).
    pub fn items(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut r = Reader::new(self.raw);
        std::iter::from_fn(move || {
            loop {
                // `decode` walked these bytes already: no error here.
                let f = r.field().ok()??;
                if f.number == 2 {
                    return f.bytes("List").ok();
                }
            }
        })
    }
}

/// The kind of a list's items: `PodList` -> `Pod`.
pub fn item_kind(list_kind: &str) -> Option<&str> {
    list_kind.strip_suffix("List").filter(|k| !k.is_empty())
}

/// Cuts one length-delimited watch frame (4-byte big-endian length, then
/// that many bytes) off the front of `buf`.
///
/// `Ok(None)`: the frame is not complete yet (read more). `Ok(Some((frame,
/// consumed)))`: the frame's bytes and how many bytes of `buf` it took.
/// A length over `max_len` is an error before anything is buffered for it.
pub fn split_frame(buf: &[u8], max_len: usize) -> Result<Option<(&[u8], usize)>, WireError> {
    let Some(head) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if u64::from(len) > max_len as u64 {
        return Err(WireError::FrameTooLarge {
            len: u64::from(len),
            max: max_len,
        });
    }
    let end = 4 + len as usize;
    Ok(buf.get(4..end).map(|frame| (frame, end)))
}

/// A `metav1.WatchEvent` frame: the event type and the object's envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchEvent<'a> {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub event_type: &'a str,
    /// The object: `k8s\0` + `runtime.Unknown` (for `ERROR`, a `Status`).
    pub object: &'a [u8],
}

impl<'a> WatchEvent<'a> {
    /// Reads one frame (as cut by [`split_frame`]).
    pub fn decode(frame: &'a [u8]) -> Result<Self, WireError> {
        let mut event_type = None;
        let mut object = None;
        let mut r = Reader::new(frame);
        while let Some(f) = r.field()? {
            match f.number {
                1 => event_type = Some(f.str("WatchEvent")?),
                2 => {
                    let mut x = Reader::new(f.bytes("WatchEvent")?);
                    let mut raw = None;
                    while let Some(g) = x.field()? {
                        if g.number == 1 {
                            raw = Some(g.bytes("RawExtension")?);
                        }
                    }
                    object = raw;
                }
                _ => {}
            }
        }
        Ok(WatchEvent {
            event_type: event_type.ok_or(WireError::Missing {
                message: "WatchEvent",
                field: "type",
            })?,
            object: object.ok_or(WireError::Missing {
                message: "WatchEvent",
                field: "object",
            })?,
        })
    }

    /// The object's envelope.
    pub fn envelope(&self) -> Result<Unknown<'a>, WireError> {
        Unknown::decode(self.object)
    }
}

/// A `metav1.Status` (an error body, or the object of an `ERROR` watch
/// event), owned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Status {
    /// `Success` or `Failure`.
    pub status: String,
    /// Human-readable description.
    pub message: String,
    /// Machine-readable reason (`Expired`, `NotFound`, `Gone`...).
    pub reason: String,
    /// HTTP status code (410 for an expired resource version).
    pub code: i32,
    /// `details`, when present.
    pub details: Option<StatusDetails>,
    /// `metadata.resourceVersion`, when present.
    pub resource_version: String,
}

/// `metav1.StatusDetails`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StatusDetails {
    /// Name of the object concerned.
    pub name: String,
    /// Its group.
    pub group: String,
    /// Its kind.
    pub kind: String,
    /// Its uid.
    pub uid: String,
    /// Causes, at most [`Status::MAX_CAUSES`] (the rest are dropped).
    pub causes: Vec<StatusCause>,
    /// Seconds the client should wait before retrying, when set.
    pub retry_after_seconds: Option<i32>,
}

/// `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StatusCause {
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable description.
    pub message: String,
    /// The field concerned.
    pub field: String,
}

impl Status {
    /// Causes kept by [`Status::decode`].
    pub const MAX_CAUSES: usize = 32;

    /// Reads a `Status` message (the `raw` of its envelope).
    pub fn decode(raw: &[u8]) -> Result<Self, WireError> {
        let mut s = Status::default();
        let mut r = Reader::new(raw);
        while let Some(f) = r.field()? {
            match f.number {
                1 => s.resource_version = list_meta(f.bytes("Status")?)?.resource_version.into(),
                2 => s.status = f.str("Status")?.into(),
                3 => s.message = f.str("Status")?.into(),
                4 => s.reason = f.str("Status")?.into(),
                5 => s.details = Some(status_details(f.bytes("Status")?)?),
                6 => s.code = f.varint("Status")? as i32,
                _ => {}
            }
        }
        Ok(s)
    }

    /// Reads `k8s\0` + `runtime.Unknown` holding a `Status`; `Ok(None)` when
    /// the envelope holds another kind.
    pub fn from_envelope(body: &[u8]) -> Result<Option<Self>, WireError> {
        let u = Unknown::decode(body)?;
        if u.type_meta.kind != "Status" {
            return Ok(None);
        }
        Status::decode(u.raw).map(Some)
    }
}

fn status_details(b: &[u8]) -> Result<StatusDetails, WireError> {
    read_message(b, |d: &mut StatusDetails, f| {
        match f.number {
            1 => d.name = f.str("StatusDetails")?.into(),
            2 => d.group = f.str("StatusDetails")?.into(),
            3 => d.kind = f.str("StatusDetails")?.into(),
            4 => {
                let c = read_message(f.bytes("StatusDetails")?, |c: &mut StatusCause, g| {
                    match g.number {
                        1 => c.reason = g.str("StatusCause")?.into(),
                        2 => c.message = g.str("StatusCause")?.into(),
                        3 => c.field = g.str("StatusCause")?.into(),
                        _ => {}
                    }
                    Ok(())
                })?;
                if d.causes.len() < Status::MAX_CAUSES {
                    d.causes.push(c);
                }
            }
            5 => d.retry_after_seconds = Some(f.varint("StatusDetails")? as i32),
            6 => d.uid = f.str("StatusDetails")?.into(),
            _ => {}
        }
        Ok(())
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protobuf::encode::{bytes_field, envelope, varint_field, watch_frame};

    fn pod_list() -> Vec<u8> {
        let mut meta = Vec::new();
        bytes_field(&mut meta, 1, b"");
        bytes_field(&mut meta, 2, b"4711");
        bytes_field(&mut meta, 3, b"next-page");
        varint_field(&mut meta, 4, 12);
        let mut list = Vec::new();
        bytes_field(&mut list, 1, &meta);
        for name in ["a", "bb", "ccc"] {
            let mut om = Vec::new();
            bytes_field(&mut om, 1, name.as_bytes());
            let mut pod = Vec::new();
            bytes_field(&mut pod, 1, &om);
            bytes_field(&mut list, 2, &pod);
        }
        envelope("v1", "PodList", &list)
    }
    fn status() -> Vec<u8> {
        let mut cause = Vec::new();
        bytes_field(&mut cause, 1, b"FieldValueInvalid");
        bytes_field(&mut cause, 3, b"metadata.name");
        let mut details = Vec::new();
        bytes_field(&mut details, 1, b"web");
        bytes_field(&mut details, 3, b"pods");
        bytes_field(&mut details, 4, &cause);
        varint_field(&mut details, 5, 3);
        let mut meta = Vec::new();
        bytes_field(&mut meta, 2, b"99");
        let mut s = Vec::new();
        bytes_field(&mut s, 1, &meta);
        bytes_field(&mut s, 2, b"Failure");
        bytes_field(&mut s, 3, b"too old resource version");
        bytes_field(&mut s, 4, b"Expired");
        bytes_field(&mut s, 5, &details);
        varint_field(&mut s, 6, 410);
        envelope("v1", "Status", &s)
    }

    #[test]
    fn reads_a_list_envelope_and_its_items() {
        let body = pod_list();
        let u = Unknown::decode(&body).unwrap();
        assert_eq!(u.type_meta.api_version, "v1");
        assert_eq!(u.type_meta.kind, "PodList");
        assert_eq!(item_kind(u.type_meta.kind), Some("Pod"));
        let list = List::decode(u.raw).unwrap();
        assert_eq!(list.meta.resource_version, "4711");
        assert_eq!(list.meta.continue_token, "next-page");
        assert_eq!(list.meta.remaining_item_count, Some(12));
        assert_eq!(list.len(), 3);
        let names: Vec<_> = list
            .items()
            .map(|item| {
                crate::protobuf::meta::ObjectMetaView::scan(item)
                    .unwrap()
                    .name
            })
            .collect();
        assert_eq!(names, ["a", "bb", "ccc"]);
    }

    #[test]
    fn reads_watch_frames_and_status() {
        let pod = envelope("v1", "Pod", &[0x0a, 0x03, 0x0a, 0x01, b'x']);
        let mut stream = watch_frame("ADDED", &pod);
        stream.extend(watch_frame("ERROR", &status()));
        let (frame, used) = split_frame(&stream, 1 << 20).unwrap().unwrap();
        let ev = WatchEvent::decode(frame).unwrap();
        assert_eq!(ev.event_type, "ADDED");
        assert_eq!(ev.envelope().unwrap().type_meta.kind, "Pod");
        assert_eq!(Status::from_envelope(ev.object).unwrap(), None);
        let (frame, used2) = split_frame(&stream[used..], 1 << 20).unwrap().unwrap();
        assert_eq!(used + used2, stream.len());
        let ev = WatchEvent::decode(frame).unwrap();
        assert_eq!(ev.event_type, "ERROR");
        let s = Status::from_envelope(ev.object).unwrap().unwrap();
        assert_eq!(s.code, 410);
        assert_eq!(s.reason, "Expired");
        assert_eq!(s.status, "Failure");
        assert_eq!(s.message, "too old resource version");
        assert_eq!(s.resource_version, "99");
        let d = s.details.unwrap();
        assert_eq!((d.name.as_str(), d.kind.as_str()), ("web", "pods"));
        assert_eq!(d.retry_after_seconds, Some(3));
        assert_eq!(d.causes[0].field, "metadata.name");
        assert!(matches!(
            split_frame(&stream, 10),
            Err(WireError::FrameTooLarge { max: 10, .. })
        ));
        assert_eq!(split_frame(&stream[..3], 1 << 20).unwrap(), None);
    }

    /// Offsets where a top-level field of `msg` (after `skip` bytes) ends:
    /// a message cut there is still a well-formed (shorter) message.
    pub(crate) fn field_ends(msg: &[u8], skip: usize) -> Vec<usize> {
        let mut r = Reader::new(&msg[skip..]);
        let mut out = vec![skip];
        while let Some(f) = r.field().unwrap() {
            out.push(skip + f.end);
        }
        out
    }

    #[test]
    fn every_truncation_is_an_error_never_a_panic() {
        // Protobuf has no end marker: a body cut exactly between two of its
        // top-level fields is a well-formed shorter message (the HTTP body
        // length or the watch frame's length prefix is what says a body is
        // complete). Every other cut must be an error; a cut on a field
        // boundary must at least not change what was read before it.
        let list = pod_list();
        let ok_cuts = field_ends(&list, 4);
        let full = Unknown::decode(&list).unwrap();
        for cut in 0..list.len() {
            let r = Unknown::decode(&list[..cut]).and_then(|u| List::decode(u.raw).map(|l| (u, l)));
            match r {
                Err(_) => {}
                Ok((u, l)) => {
                    assert!(ok_cuts.contains(&cut), "list cut at {cut} accepted");
                    assert_eq!((u.type_meta, u.raw), (full.type_meta, full.raw));
                    assert_eq!(l.len(), 3);
                }
            }
        }
        let st = status();
        let ok_cuts = field_ends(&st, 4);
        for cut in 0..st.len() {
            if let Ok(s) = Status::from_envelope(&st[..cut]) {
                assert!(ok_cuts.contains(&cut), "status cut at {cut} accepted");
                assert_eq!(s.unwrap().code, 410);
            }
        }
        let pod = envelope("v1", "Pod", &[0x0a, 0x03, 0x0a, 0x01, b'x']);
        let stream = watch_frame("MODIFIED", &pod);
        for cut in 0..stream.len() {
            assert_eq!(split_frame(&stream[..cut], 1 << 20).unwrap(), None);
        }
        // Inside a frame, every cut before the object's end fails.
        let frame = &stream[4..];
        let ok_cuts = field_ends(frame, 0);
        for cut in 0..frame.len() {
            let r = WatchEvent::decode(&frame[..cut]).and_then(|e| e.envelope());
            if r.is_ok() {
                assert!(ok_cuts.contains(&cut), "watch event cut at {cut} accepted");
            }
        }
        assert!(WatchEvent::decode(&frame[..frame.len() - 1]).is_err());
    }

    #[test]
    fn rejects_wrong_magic_encoding_and_missing_parts() {
        assert_eq!(Unknown::decode(b"{\"kind\":1}"), Err(WireError::Magic));
        let mut gz = envelope("v1", "Pod", b"");
        bytes_field(&mut gz, 3, b"gzip");
        assert!(matches!(
            Unknown::decode(&gz),
            Err(WireError::ContentEncoding(e)) if e == "gzip"
        ));
        assert!(matches!(
            Unknown::decode(b"k8s\0"),
            Err(WireError::Missing { .. })
        ));
        // A string field that is not UTF-8.
        let bad = envelope("v\u{e9}1", "Pod", b"");
        let mut bad = bad.clone();
        let at = bad
            .windows(2)
            .position(|w| w == "\u{e9}".as_bytes())
            .unwrap();
        bad[at] = 0xff;
        assert!(matches!(Unknown::decode(&bad), Err(WireError::Utf8 { .. })));
        // An item that is a varint, not a message.
        let mut list = Vec::new();
        varint_field(&mut list, 2, 7);
        assert!(matches!(
            List::decode(&list),
            Err(WireError::WireType { field: 2, .. })
        ));
    }
}
