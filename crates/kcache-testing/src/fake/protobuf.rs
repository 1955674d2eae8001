//! Kubernetes protobuf replies for the fake: `k8s\0` + `runtime.Unknown`
//! bodies, length-delimited `WatchEvent` frames (field numbers of the
//! generated.proto files of k8s.io/api and k8s.io/apimachinery v0.37.2).

use bytes::Bytes;

use super::{End, Reply};

/// The protobuf content type.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The protobuf watch content type.
pub const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// A length-delimited field (kcache-core's encoder).
pub use kcache_core::protobuf::encode::bytes_field as pb_field;
/// `k8s\0` + `runtime.Unknown` {typeMeta, raw, contentEncoding "",
/// contentType ""}, as the apiserver writes it (kcache-core's encoder).
pub use kcache_core::protobuf::encode::envelope as pb_envelope;
/// A varint field (kcache-core's encoder).
pub use kcache_core::protobuf::encode::varint_field as pb_varint;
/// One watch frame: a 4-byte big-endian length, then a `WatchEvent`
/// {type, RawExtension{raw: object}} (kcache-core's encoder).
pub use kcache_core::protobuf::encode::watch_frame as pb_frame;

fn pb_map_entry(out: &mut Vec<u8>, number: u32, k: &str, v: &str) {
    let mut e = Vec::new();
    pb_field(&mut e, 1, k.as_bytes());
    pb_field(&mut e, 2, v.as_bytes());
    pb_field(out, number, &e);
}

/// The protobuf of [`super::cm`]: the same ConfigMap (no envelope).
pub fn pb_cm(name: &str, rv: &str) -> Vec<u8> {
    pb_cmu(name, "", rv)
}

/// [`pb_cm`] with a uid.
pub fn pb_cmu(name: &str, uid: &str, rv: &str) -> Vec<u8> {
    let mut mf = Vec::new();
    pb_field(&mut mf, 1, b"kubectl");
    pb_field(&mut mf, 2, b"Update");
    let mut meta = Vec::new();
    pb_field(&mut meta, 1, name.as_bytes());
    pb_field(&mut meta, 3, b"ns");
    if !uid.is_empty() {
        pb_field(&mut meta, 5, uid.as_bytes());
    }
    pb_field(&mut meta, 6, rv.as_bytes());
    pb_field(&mut meta, 17, &mf);
    let mut cm = Vec::new();
    pb_field(&mut cm, 1, &meta);
    pb_map_entry(&mut cm, 2, "k", "v");
    cm
}

/// A `ConfigMapList` body of `items` (each a [`pb_cm`]).
pub fn pb_list_body(rv: &str, cont: &str, items: &[Vec<u8>]) -> Vec<u8> {
    let mut meta = Vec::new();
    pb_field(&mut meta, 2, rv.as_bytes());
    pb_field(&mut meta, 3, cont.as_bytes());
    let mut list = Vec::new();
    pb_field(&mut list, 1, &meta);
    for it in items {
        pb_field(&mut list, 2, it);
    }
    pb_envelope("v1", "ConfigMapList", &list)
}

/// A protobuf list reply, cut into chunks of `chunk` bytes.
pub fn pb_list(rv: &str, cont: &str, items: &[Vec<u8>], chunk: usize) -> Reply {
    let body = pb_list_body(rv, cont, items);
    Reply::Typed(
        200,
        PROTOBUF,
        body.chunks(chunk.max(1))
            .map(Bytes::copy_from_slice)
            .collect(),
        End::Close,
    )
}

/// A watch frame of a ConfigMap event.
pub fn pb_ev(ty: &str, cm: &[u8]) -> Vec<u8> {
    pb_frame(ty, &pb_envelope("v1", "ConfigMap", cm))
}

/// A BOOKMARK frame (with the initial-events-end annotation when `end`).
pub fn pb_bookmark(rv: &str, end: bool) -> Vec<u8> {
    let mut meta = Vec::new();
    pb_field(&mut meta, 6, rv.as_bytes());
    if end {
        pb_map_entry(&mut meta, 12, "k8s.io/initial-events-end", "true");
    }
    let mut cm = Vec::new();
    pb_field(&mut cm, 1, &meta);
    pb_frame("BOOKMARK", &pb_envelope("v1", "ConfigMap", &cm))
}

/// A protobuf `Status` body.
pub fn pb_status_body(code: u16, reason: &str, message: &str) -> Vec<u8> {
    let mut st = Vec::new();
    pb_field(&mut st, 1, b"");
    pb_field(&mut st, 2, b"Failure");
    pb_field(&mut st, 3, message.as_bytes());
    pb_field(&mut st, 4, reason.as_bytes());
    pb_varint(&mut st, 6, u64::from(code));
    pb_envelope("v1", "Status", &st)
}

/// An HTTP error answered with a protobuf Status.
pub fn pb_status(code: u16, reason: &str, message: &str) -> Reply {
    Reply::Typed(
        code,
        PROTOBUF,
        vec![Bytes::from(pb_status_body(code, reason, message))],
        End::Close,
    )
}

/// An ERROR frame carrying a Status.
pub fn pb_error_event(code: u16, reason: &str) -> Vec<u8> {
    pb_frame("ERROR", &pb_status_body(code, reason, "from the test"))
}

/// A protobuf watch reply: the frames, each in chunks of `chunk` bytes
/// (0: one chunk per frame), then the end.
pub fn pb_watch(frames: Vec<Vec<u8>>, chunk: usize, end: End) -> Reply {
    let chunks = if chunk == 0 {
        frames.into_iter().map(Bytes::from).collect()
    } else {
        frames
            .concat()
            .chunks(chunk)
            .map(Bytes::copy_from_slice)
            .collect()
    };
    Reply::Typed(200, PROTOBUF_WATCH, chunks, end)
}
