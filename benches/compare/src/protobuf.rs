//! Protobuf bodies for the replay server, so that clients that ask for
//! `application/vnd.kubernetes.protobuf` (client-go's default for built-in
//! types) get what the real apiserver would send.
//!
//! Each Pod is encoded by k8s.io/api's generated `Marshal` (the code the
//! apiserver serves with), run in the client-go module's
//! `-scenario=encode-protobuf`; this module writes the envelopes around
//! them as the apiserver does: the `k8s\0` magic and a `runtime.Unknown`
//! {typeMeta, raw} for lists and watch objects, a `PodList` {ListMeta,
//! items}, and length-prefixed `WatchEvent` {type, RawExtension} frames.
//! The fields, envelopes, frames and `Status` bodies are written by the
//! encoder of kcache-testing's fake apiserver
//! ([`kcache_testing::fake::protobuf`]); this module adds the streamed
//! `PodList` (head, item prefixes, tail). Field numbers from the
//! `generated.proto` files of k8s.io/apimachinery v0.37.2 (runtime.Unknown,
//! meta/v1 ListMeta; core/v1 Pod.metadata = 1, ObjectMeta.resourceVersion
//! = 6).

use std::io::{self, Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};

use bytes::Bytes;
use kcache_testing::fake::protobuf::{pb_envelope, pb_field, pb_frame, pb_varint};

use crate::DataSet;

/// The magic prefix of a protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The content type of protobuf lists and objects.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The content type of a protobuf watch stream.
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The protobuf form of a [`DataSet`].
#[derive(Debug, Clone)]
pub struct ProtobufData {
    /// Each listed Pod's own message (no envelope): a `PodList` item.
    pub pods: Vec<Bytes>,
    /// The watch stream: length-prefixed `WatchEvent` frames, end marker
    /// included.
    pub watch: Bytes,
    /// The bookmark frame.
    pub bookmark: Bytes,
    /// Mean size of a listed Pod's message, bytes.
    pub avg_pod_bytes: usize,
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    let mut n = 1;
    let mut v = v >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

/// A Pod with only `metadata.resourceVersion`: a bookmark's object.
fn bookmark_pod(rv: u64) -> Vec<u8> {
    let mut meta = Vec::new();
    pb_field(&mut meta, 6, rv.to_string().as_bytes());
    let mut pod = Vec::new();
    pb_field(&mut pod, 1, &meta);
    pb_envelope("v1", "Pod", &pod)
}

/// The head of a protobuf `PodList` response body: everything before the
/// items, sized for `items` (each written after it as [`list_item_prefix`]
/// and the item's bytes).
pub fn list_head(
    rv: u64,
    continue_: Option<&str>,
    remaining: Option<u64>,
    items: &[Bytes],
) -> Vec<u8> {
    let mut meta = Vec::new();
    pb_field(&mut meta, 2, rv.to_string().as_bytes());
    if let Some(c) = continue_ {
        pb_field(&mut meta, 3, c.as_bytes());
    }
    if let Some(r) = remaining {
        pb_varint(&mut meta, 4, r);
    }
    let mut list_meta_field = Vec::new();
    pb_field(&mut list_meta_field, 1, &meta);
    let items_len: usize = items
        .iter()
        .map(|i| 1 + varint_len(i.len() as u64) + i.len())
        .sum();
    let list_len = list_meta_field.len() + items_len;
    let mut type_meta = Vec::new();
    pb_field(&mut type_meta, 1, b"v1");
    pb_field(&mut type_meta, 2, b"PodList");
    let mut b = Vec::with_capacity(64 + list_meta_field.len());
    b.extend_from_slice(MAGIC);
    pb_field(&mut b, 1, &type_meta);
    put_varint(&mut b, 2 << 3 | 2);
    put_varint(&mut b, list_len as u64);
    b.extend_from_slice(&list_meta_field);
    b
}

/// What follows [`list_head`] before each item's bytes (field 2 of PodList).
pub fn list_item_prefix(item: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(6);
    put_varint(&mut b, 2 << 3 | 2);
    put_varint(&mut b, item.len() as u64);
    b
}

/// What follows the items: the envelope's empty contentEncoding and
/// contentType.
pub const LIST_TAIL: &[u8] = &[0x1a, 0x00, 0x22, 0x00];

/// Encodes `data` as protobuf with `encoder` (the client-go client,
/// `-scenario=encode-protobuf`): the listed Pods, then every watch event's
/// object, in order.
pub fn encode(data: &DataSet, encoder: &Path) -> io::Result<ProtobufData> {
    let mut events: Vec<(String, Vec<u8>)> = Vec::with_capacity(data.watch_events);
    for line in data.watch.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).map_err(io::Error::other)?;
        let kind = v["type"].as_str().unwrap_or("MODIFIED").to_string();
        events.push((
            kind,
            serde_json::to_vec(&v["object"]).map_err(io::Error::other)?,
        ));
    }
    let mut child = Command::new(encoder)
        .arg("-scenario=encode-protobuf")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("stdin"))?;
    let objects: Vec<Bytes> = data
        .pods
        .iter()
        .cloned()
        .chain(events.iter().map(|(_, o)| Bytes::from(o.clone())))
        .collect();
    let total = objects.len();
    let writer = std::thread::spawn(move || -> io::Result<()> {
        let mut w = io::BufWriter::new(&mut stdin);
        for o in &objects {
            w.write_all(o)?;
            w.write_all(b"\n")?;
        }
        w.flush()
    });
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .ok_or_else(|| io::Error::other("stdout"))?
        .read_to_end(&mut out)?;
    writer
        .join()
        .map_err(|_| io::Error::other("encoder writer panicked"))??;
    let status = child.wait()?;
    if !status.success() {
        return Err(io::Error::other(format!(
            "{} failed: {status}",
            encoder.display()
        )));
    }
    let out = Bytes::from(out);
    let mut messages = Vec::with_capacity(total);
    let mut at = 0;
    while at + 4 <= out.len() {
        let len = u32::from_be_bytes([out[at], out[at + 1], out[at + 2], out[at + 3]]) as usize;
        at += 4;
        if at + len > out.len() {
            return Err(io::Error::other("truncated encoder output"));
        }
        messages.push(out.slice(at..at + len));
        at += len;
    }
    if messages.len() != total {
        return Err(io::Error::other(format!(
            "the encoder returned {} messages for {total} objects",
            messages.len()
        )));
    }
    let n = data.pods.len();
    let pods: Vec<Bytes> = messages[..n].to_vec();
    let mut watch = Vec::new();
    for ((kind, _), msg) in events.iter().zip(&messages[n..]) {
        watch.extend_from_slice(&pb_frame(kind, &pb_envelope("v1", "Pod", msg)));
    }
    let bookmark_rv = data.list_rv + data.watch_events as u64 + 1;
    Ok(ProtobufData {
        avg_pod_bytes: pods.iter().map(Bytes::len).sum::<usize>() / n.max(1),
        pods,
        watch: Bytes::from(watch),
        bookmark: Bytes::from(pb_frame("BOOKMARK", &bookmark_pod(bookmark_rv))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_envelopes_are_laid_out_as_the_apiserver_does() {
        let mut b = Vec::new();
        put_varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        assert_eq!(varint_len(300), 2);
        assert_eq!(varint_len(127), 1);
        // as seen from the real apiserver: 6b 38 73 00 0a 0d 0a 02 "v1" 12 07 "PodList" 12 ...
        let e = pb_envelope("v1", "PodList", b"x");
        assert_eq!(&e[..8], b"k8s\0\x0a\x0d\x0a\x02");
        assert_eq!(&e[8..10], b"v1");
        assert_eq!(&e[10..12], b"\x12\x07");
        assert_eq!(&e[12..19], b"PodList");
        assert_eq!(&e[19..], b"\x12\x01x\x1a\x00\x22\x00");
        let f = pb_frame("ADDED", b"obj");
        assert_eq!(&f[..4], &(f.len() as u32 - 4).to_be_bytes());
        assert_eq!(&f[4..11], b"\x0a\x05ADDED");
        assert_eq!(&f[11..], b"\x12\x05\x0a\x03obj");
    }

    #[test]
    fn a_list_is_its_head_items_and_tail() {
        let items = [Bytes::from_static(b"aa"), Bytes::from_static(b"bbb")];
        let mut body = list_head(7, Some("2"), Some(5), &items);
        for i in &items {
            body.extend_from_slice(&list_item_prefix(i));
            body.extend_from_slice(i);
        }
        body.extend_from_slice(LIST_TAIL);
        // the same body built in one piece
        let mut meta = Vec::new();
        pb_field(&mut meta, 2, b"7");
        pb_field(&mut meta, 3, b"2");
        pb_varint(&mut meta, 4, 5);
        let mut list = Vec::new();
        pb_field(&mut list, 1, &meta);
        pb_field(&mut list, 2, b"aa");
        pb_field(&mut list, 2, b"bbb");
        assert_eq!(body, pb_envelope("v1", "PodList", &list));
    }
}
