//! The event decoder's and the list decode's unit tests (JSON and
//! protobuf events, list pages whole and in chunks, item buffers).

use super::*;

type V = serde_json::Value;

fn dec() -> EventDecoder<V> {
    EventDecoder::new(ObjectOptions::default(), Some("ConfigMap"), Some("v1"))
}

fn ev(s: &str) -> Result<WatchEvent<V>, BadEvent> {
    dec().decode_event(Bytes::copy_from_slice(s.as_bytes()))
}

#[test]
fn fast_and_slow_paths_agree() {
    let fast = r#"{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"3"}}}"#;
    let slow = r#"{ "object": {"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"3"}}, "type": "MODIFIED" }"#;
    for s in [fast, slow] {
        match ev(s).unwrap() {
            WatchEvent::Modified(o) => {
                assert_eq!(o.key(), "a");
                assert_eq!(o.resource_version(), Some("3"));
                assert!(o.bytes().starts_with(b"{\"kind\""));
            }
            other => panic!("{other:?}"),
        }
    }
    // extra member after the object: the fast path must not accept a
    // truncated object
    let extra = r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"b"}},"x":1}"#;
    match ev(extra).unwrap() {
        WatchEvent::Added(o) => assert_eq!(
            o.bytes().as_ref(),
            br#"{"kind":"ConfigMap","metadata":{"name":"b"}}"#
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bookmarks_errors_and_bad_input() {
    match ev(r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#).unwrap() {
        WatchEvent::Bookmark(b) => assert_eq!(b, Bookmark { resource_version: "12".into(), initial_events_end: true }),
        other => panic!("{other:?}"),
    }
    match ev(r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}"#).unwrap() {
        WatchEvent::Error(e) => assert!(e.is_expired()),
        other => panic!("{other:?}"),
    }
    assert_eq!(ev("not json").unwrap_err().kind, BadEventKind::Undecodable);
    assert_eq!(
        ev(r#"{"type":"ADDED"}"#).unwrap_err().kind,
        BadEventKind::Undecodable
    );
    assert_eq!(
        ev(r#"{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{}}}"#)
            .unwrap_err()
            .kind,
        BadEventKind::InvalidObject
    );
    assert_eq!(
        ev(r#"{"type":"ADDED","object":{"kind":"Secret","metadata":{"name":"s"}}}"#)
            .unwrap_err()
            .kind,
        BadEventKind::WrongKind
    );
    assert_eq!(
        ev(r#"{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v2","metadata":{"name":"s"}}}"#).unwrap_err().kind,
        BadEventKind::WrongKind
    );
    assert_eq!(
        ev(r#"{"type":"WEIRD","object":{"metadata":{"name":"s"}}}"#)
            .unwrap_err()
            .kind,
        BadEventKind::UnknownType
    );
    assert_eq!(
        ev(r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","metadata":{}}}"#)
            .unwrap_err()
            .kind,
        BadEventKind::InvalidObject
    );
}

#[test]
fn list_syntax_errors_fail_the_page_and_unusable_items_are_skipped() {
    let d = dec();
    // a syntax error inside an item fails the whole page, whichever path
    for body in [
        &br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":tru}}]}"#[..],
        br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"} x}]}"#,
        br#"{"metadata":{"resourceVersion":9x},"items":[]}"#,
        br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"}}]} trailing"#,
        br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a\q"}}]}"#,
    ] {
        assert!(
            d.decode_list(&Bytes::copy_from_slice(body)).is_err(),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    // valid JSON that is not a usable object: skipped, the rest kept
    let body = Bytes::from_static(
        br#"{"metadata":{"resourceVersion":"9"},"items":[7,{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":1}},"s",{"kind":"Secret","metadata":{"name":"b"}}]}"#,
    );
    let page = d.decode_list(&body).unwrap();
    assert_eq!(page.resource_version, "9");
    assert_eq!(
        page.items.iter().map(|o| o.key()).collect::<Vec<_>>(),
        ["n/a"]
    );
    assert_eq!(page.skipped.len(), 4);
    // the envelope's other members are still decoded
    let body = Bytes::from_static(
        br#"{"kind":"ConfigMapList","items":[{"metadata":{"name":"a"}}],"metadata":{"continue":"c","resourceVersion":"3"}}"#,
    );
    let page = d.decode_list(&body).unwrap();
    assert_eq!(page.continue_token.as_deref(), Some("c"));
    assert_eq!(page.resource_version, "3");
    assert_eq!(page.items.len(), 1);
}

#[test]
fn malformed_items_and_invalid_utf8_fail_the_page() {
    // found by fuzzing (tests/fuzz-checks, list_decode): the metadata
    // decode stops at a type error before a syntax error or reports
    // invalid UTF-8 as a data error, and serde skips the envelope's
    // other members without checking their UTF-8
    let d = dec();
    for body in [
        &br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":1} x}]}"#[..],
        br#"{"metadata":{"resourceVersion":"9"},"items":[1.2.3]}"#,
        b"{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[{\"\xff\x00\":{\"name\":\"a\"}}]}",
        b"{\"kind\":\"L\xffist\",\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[]}",
        // not split (no items member): the serde path
        b"{\"kind\":\"L\xffist\",\"metadata\":{\"resourceVersion\":\"9\"}}",
    ] {
        assert!(
            d.decode_list(&Bytes::copy_from_slice(body)).is_err(),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
    // well-formed items that are not usable objects are still skipped
    let page = d
        .decode_list(&Bytes::from_static(
            br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":1}},1.5,{"metadata":{"name":"a"}}]}"#,
        ))
        .unwrap();
    assert_eq!((page.items.len(), page.skipped.len()), (1, 2));
}

/// The page of `body` read in chunks of `size` equals the page of the
/// whole body (or both fail).
fn same_page(d: &EventDecoder<V>, body: &[u8], size: usize) {
    let whole = d.decode_list(&Bytes::copy_from_slice(body));
    let chunks: Vec<Bytes> = body
        .chunks(size.max(1))
        .map(Bytes::copy_from_slice)
        .collect();
    let chunked = d.decode_list_chunks(chunks);
    let show = || format!("{} in chunks of {size}", String::from_utf8_lossy(body));
    match (whole, chunked) {
        (Ok(a), Ok(b)) => assert_eq!(a.same_content(), b.same_content(), "{}", show()),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("{}: whole {:?}, chunked {:?}", show(), a.is_ok(), b.is_ok()),
    }
}

#[test]
fn json_lists_read_in_chunks_equal_the_whole_body() {
    let bodies: [&[u8]; 22] = [
        br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"9","continue":"a]b\"}"},"items":[{"metadata":{"name":"a","namespace":"n","labels":{"x":"}]"}}},7,{"metadata":{}},"s",{"metadata":{"name":"b"}},null ] , "z":[{}] }  "#,
        br#" {"items":[ ],"metadata":{"resourceVersion":"1"}}"#,
        br#"{"metadata":{"resourceVersion":"1"}}"#,
        br#"{"items":null,"metadata":{"resourceVersion":"1"}}"#,
        br#"{"it\u0065ms":[{"metadata":{"name":"e"}}],"metadata":{}}"#,
        br#"{"items":[{"metadata":{"name":"a"}}],"items":[]}"#,
        br#"{"items":[{"metadata":{"name":"a"}} {"metadata":{"name":"b"}}]}"#,
        br#"{"items":[{"metadata":{"name":"a"}},]}"#,
        br#"{"items":[,]}"#,
        br#"{"items":[1.2.3]}"#,
        br#"{"items":[{"metadata":{"name":"a"}}}"#,
        br#"{"items":[{"metadata":{"name":tru}}]}"#,
        br#"{"items":[]} trailing"#,
        br#"{"items":[] "x":1}"#,
        br#"{items:[]}"#,
        br#"{"items":[1,2"#,
        br#"[{"metadata":{"name":"a"}}]"#,
        br#""#,
        br#"   "#,
        br#"{}"#,
        br#"{"metadata":{"resourceVersion":9x},"items":[]}"#,
        b"{\"kind\":\"L\xffist\",\"items\":[{\"metadata\":{\"name\":\"a\"}}]}",
    ];
    for options in [
        ObjectOptions::default(),
        ObjectOptions {
            strip_managed_fields: true,
            ..ObjectOptions::default()
        },
    ] {
        let d = EventDecoder::<V>::new(options, None, None);
        for body in bodies {
            for size in 1..=body.len().max(1) {
                same_page(&d, body, size);
            }
        }
    }
}

#[test]
fn json_list_items_read_in_chunks_own_their_bytes() {
    let body = br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":"b","namespace":"n"}}]}"#;
    for size in [7, 40, body.len()] {
        let chunks: Vec<Bytes> = body.chunks(size).map(Bytes::copy_from_slice).collect();
        let ranges: Vec<_> = chunks
            .iter()
            .map(|c| c.as_ptr() as usize..c.as_ptr() as usize + c.len())
            .collect();
        let page = dec().decode_list_chunks(chunks.clone()).unwrap();
        assert_eq!(page.items.len(), 2);
        for item in &page.items {
            let p = item.bytes().as_ptr() as usize;
            assert!(ranges.iter().all(|r| !r.contains(&p)), "chunks of {size}");
        }
        assert_eq!(
            page.items[1].bytes().as_ref(),
            br#"{"metadata":{"name":"b","namespace":"n"}}"#
        );
        // items cut from one chunk and items assembled from several
        // are packed one after the other into a shared block (see
        // ByteBlocks), not a buffer each
        let (a, b) = (page.items[0].bytes(), page.items[1].bytes());
        assert_eq!(
            a.as_ptr().wrapping_add(a.len()),
            b.as_ptr(),
            "chunks of {size}"
        );
    }
}

#[test]
fn list_items_get_buffers_of_their_own_when_compressed_at_ingest() {
    let d = EventDecoder::<V>::new(
        ObjectOptions {
            compression: kcache_core::Compression::lz4(),
            ..ObjectOptions::default()
        },
        None,
        None,
    );
    let body = Bytes::from_static(br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{"name":"b","namespace":"n"}}]}"#);
    let page = d.decode_list(&body).unwrap();
    assert_eq!(page.items.len(), 2);
    assert!(d.blocks.is_none());
}

#[test]
fn list_shard_info_echo_is_read_by_every_json_path() {
    let sel = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
    let with = Bytes::from(format!(
        r#"{{"kind":"ConfigMapList","metadata":{{"resourceVersion":"9","shardInfo":{{"selector":"{sel}"}}}},"items":[{{"metadata":{{"name":"a"}}}}]}}"#
    ));
    let without = Bytes::from_static(
        br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"9"},"items":[]}"#,
    );
    let d = dec();
    for (body, expect) in [(&with, Some(sel)), (&without, None)] {
        let whole = d.decode_list(body).unwrap();
        assert_eq!(whole.shard_selector.as_deref(), expect);
        let chunks = body.chunks(5).map(Bytes::copy_from_slice);
        let streamed = d.decode_list_chunks(chunks).unwrap();
        assert_eq!(streamed.shard_selector.as_deref(), expect);
    }
}

#[test]
fn list_items_are_exact_size_copies() {
    let body = Bytes::from_static(br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"9","continue":"abc"},"items":[{"metadata":{"name":"a","namespace":"n"}},{"metadata":{}},{"metadata":{"name":"b"}}]}"#);
    let page = dec().decode_list(&body).unwrap();
    assert_eq!(page.resource_version, "9");
    assert_eq!(page.continue_token.as_deref(), Some("abc"));
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.skipped.len(), 1);
    let p = page.items[0].bytes().as_ptr() as usize;
    assert!(!(p > body.as_ptr() as usize && p < body.as_ptr() as usize + body.len()));
    assert_eq!(
        page.items[0].bytes().as_ref(),
        br#"{"metadata":{"name":"a","namespace":"n"}}"#
    );
    let empty = dec()
        .decode_list(&Bytes::from_static(
            br#"{"metadata":{"resourceVersion":"1","continue":""},"items":null}"#,
        ))
        .unwrap();
    assert!(empty.items.is_empty() && empty.continue_token.is_none());
}

fn pb(out: &mut Vec<u8>, n: u8, b: &[u8]) {
    out.push(n << 3 | 2);
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

/// A ConfigMap's protobuf: name, namespace "n", a managedFields entry.
fn pb_cm(name: &str) -> Vec<u8> {
    let mut mf = Vec::new();
    pb(&mut mf, 1, b"kubectl");
    let mut meta = Vec::new();
    pb(&mut meta, 1, name.as_bytes());
    pb(&mut meta, 3, b"n");
    meta.extend_from_slice(&[17 << 3 | 2, 1, mf.len() as u8]);
    meta.extend_from_slice(&mf);
    let mut cm = Vec::new();
    pb(&mut cm, 1, &meta);
    cm
}

fn pb_list(kind: &str, items: &[Vec<u8>]) -> Bytes {
    let mut meta = Vec::new();
    pb(&mut meta, 2, b"9");
    let mut list = Vec::new();
    pb(&mut list, 1, &meta);
    for i in items {
        pb(&mut list, 2, i);
    }
    let mut tm = Vec::new();
    pb(&mut tm, 1, b"v1");
    pb(&mut tm, 2, kind.as_bytes());
    let mut body = b"k8s\0".to_vec();
    pb(&mut body, 1, &tm);
    body.extend_from_slice(&[2 << 3 | 2]);
    let mut len = Vec::new();
    let mut v = list.len();
    while v >= 0x80 {
        len.push((v as u8) | 0x80);
        v >>= 7;
    }
    len.push(v as u8);
    body.extend_from_slice(&len);
    body.extend_from_slice(&list);
    Bytes::from(body)
}

#[test]
fn protobuf_list_items_are_own_buffers_and_bad_ones_skipped() {
    let nameless = {
        let mut cm = Vec::new();
        pb(&mut cm, 1, &[]);
        cm
    };
    let body = pb_list(
        "ConfigMapList",
        &[pb_cm("a"), nameless, vec![0x0a, 0x7f], pb_cm("b")],
    );
    for options in [
        ObjectOptions::default(),
        ObjectOptions {
            strip_managed_fields: true,
            ..ObjectOptions::default()
        },
    ] {
        let dec = EventDecoder::<V>::new(options.clone(), Some("ConfigMap"), Some("v1"));
        let page = dec.decode_protobuf_list(&body).unwrap();
        assert_eq!(page.resource_version, "9");
        assert_eq!(page.continue_token, None);
        let keys: Vec<_> = page.items.iter().map(|o| o.key()).collect();
        assert_eq!(keys, ["n/a", "n/b"]);
        assert_eq!(page.skipped.len(), 2);
        assert!(
            page.skipped
                .iter()
                .all(|b| b.kind == BadEventKind::InvalidObject)
        );
        // no item keeps the body alive
        let range = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
        for item in &page.items {
            assert_eq!(item.format(), kcache_core::Format::Protobuf);
            assert!(!range.contains(&(item.bytes().as_ptr() as usize)));
            let v = item.decode().unwrap();
            assert_eq!(v["kind"], "ConfigMap");
            assert_eq!(
                v["metadata"].get("managedFields").is_some(),
                !options.strip_managed_fields
            );
        }
    }
    // items of another kind are skipped as such; a malformed list fails
    let page = dec()
        .decode_protobuf_list(&pb_list("SecretList", &[pb_cm("a")]))
        .unwrap();
    assert_eq!(page.skipped[0].kind, BadEventKind::WrongKind);
    assert!(
        dec()
            .decode_protobuf_list(&body.slice(..body.len() - 3))
            .is_err()
    );
    assert!(
        dec()
            .decode_protobuf_list(&Bytes::from_static(b"{}"))
            .is_err()
    );
}

#[test]
fn protobuf_events_bookmarks_and_errors() {
    let frame = |ty: &str, object: &[u8]| {
        let mut raw = Vec::new();
        pb(&mut raw, 1, object);
        let mut ev = Vec::new();
        pb(&mut ev, 1, ty.as_bytes());
        pb(&mut ev, 2, &raw);
        Bytes::from(ev)
    };
    let envelope = |kind: &str, raw: &[u8]| {
        let mut tm = Vec::new();
        pb(&mut tm, 1, b"v1");
        pb(&mut tm, 2, kind.as_bytes());
        let mut out = b"k8s\0".to_vec();
        pb(&mut out, 1, &tm);
        pb(&mut out, 2, raw);
        out
    };
    let d = dec();
    match d.decode_protobuf_event(frame("MODIFIED", &envelope("ConfigMap", &pb_cm("a")))) {
        Ok(WatchEvent::Modified(o)) => {
            assert_eq!(o.key(), "n/a");
            assert_eq!(o.format(), kcache_core::Format::Protobuf);
        }
        other => panic!("{other:?}"),
    }
    let mut meta = Vec::new();
    pb(&mut meta, 6, b"12");
    let mut entry = Vec::new();
    pb(&mut entry, 1, b"k8s.io/initial-events-end");
    pb(&mut entry, 2, b"true");
    pb(&mut meta, 12, &entry);
    let mut bm = Vec::new();
    pb(&mut bm, 1, &meta);
    match d.decode_protobuf_event(frame("BOOKMARK", &envelope("ConfigMap", &bm))) {
        Ok(WatchEvent::Bookmark(b)) => assert_eq!(
            b,
            Bookmark {
                resource_version: "12".into(),
                initial_events_end: true
            }
        ),
        other => panic!("{other:?}"),
    }
    let mut st = Vec::new();
    pb(&mut st, 4, b"Expired");
    st.extend_from_slice(&[6 << 3, 0x9a, 0x03]);
    match d.decode_protobuf_event(frame("ERROR", &envelope("Status", &st))) {
        Ok(WatchEvent::Error(e)) => assert!(e.is_expired() && e.code == 410),
        other => panic!("{other:?}"),
    }
    let kind = |r: Result<WatchEvent<V>, BadEvent>| r.unwrap_err().kind;
    assert_eq!(
        kind(d.decode_protobuf_event(Bytes::from_static(b"\x0a\x09A"))),
        BadEventKind::Undecodable
    );
    assert_eq!(
        kind(d.decode_protobuf_event(frame("WEIRD", &envelope("ConfigMap", &pb_cm("a"))))),
        BadEventKind::UnknownType
    );
    assert_eq!(
        kind(d.decode_protobuf_event(frame("ADDED", &envelope("Secret", &pb_cm("a"))))),
        BadEventKind::WrongKind
    );
    assert_eq!(
        kind(d.decode_protobuf_event(frame("ADDED", b"{\"kind\":\"ConfigMap\"}"))),
        BadEventKind::InvalidObject
    );
    assert_eq!(
        kind(d.decode_protobuf_event(frame("BOOKMARK", &envelope("ConfigMap", &[])))),
        BadEventKind::InvalidObject
    );
}

#[test]
fn list_items_are_own_buffers_when_stripping_managed_fields() {
    let dec = EventDecoder::<V>::new(
        ObjectOptions {
            strip_managed_fields: true,
            ..ObjectOptions::default()
        },
        Some("ConfigMap"),
        Some("v1"),
    );
    let body = Bytes::from_static(br#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a","managedFields":[{"manager":"m"}]}},{"metadata":{"name":"b"}}]}"#);
    let page = dec.decode_list(&body).unwrap();
    assert_eq!(page.items.len(), 2);
    let range = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
    for item in &page.items {
        assert!(!range.contains(&(item.bytes().as_ptr() as usize)));
    }
    assert_eq!(
        page.items[0].bytes().as_ref(),
        br#"{"metadata":{"name":"a"}}"#
    );
    assert_eq!(
        page.items[1].bytes().as_ref(),
        br#"{"metadata":{"name":"b"}}"#
    );
}
