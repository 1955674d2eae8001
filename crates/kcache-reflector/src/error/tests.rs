//! Unit tests of the error types: Status decoding (JSON, protobuf),
//! truncated display, metrics labels.

use super::*;

#[test]
fn parses_status() {
    let e = ApiError::from_status_bytes(
        Some(410),
        br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}"#,
    );
    assert!(e.is_expired());
    assert_eq!(e.code, 410);
    let e = ApiError::from_status_bytes(
        Some(504),
        br#"{"kind":"Status","status":"Failure","message":"Too large resource version: 20, current: 10","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}]},"code":504}"#,
    );
    assert!(e.is_too_large_resource_version());
    let e = ApiError::from_status_bytes(Some(502), b"<html>bad gateway</html>");
    assert_eq!(e.code, 502);
    assert!(e.message.contains("bad gateway"));
    assert!(
        ApiError::from_status_bytes(Some(403), b"{}")
            .to_string()
            .contains("RBAC")
    );
}

#[test]
fn parses_a_protobuf_status() {
    // what the apiserver sent for an expired watch (tests/data of
    // kcache-core): k8s\0 + Unknown{Status}
    let mut status = Vec::new();
    let field = |out: &mut Vec<u8>, n: u8, b: &[u8]| {
        out.push(n << 3 | 2);
        out.push(b.len() as u8);
        out.extend_from_slice(b);
    };
    field(&mut status, 2, b"Failure");
    field(&mut status, 3, b"too old resource version: 1 (5)");
    field(&mut status, 4, b"Expired");
    let mut cause = Vec::new();
    field(&mut cause, 1, b"ResourceVersionTooLarge");
    let mut details = Vec::new();
    field(&mut details, 4, &cause);
    field(&mut status, 5, &details);
    status.extend_from_slice(&[6 << 3, 0x9a, 0x03]); // code 410
    let mut tm = Vec::new();
    field(&mut tm, 1, b"v1");
    field(&mut tm, 2, b"Status");
    let mut body = kcache_core::protobuf::MAGIC.to_vec();
    field(&mut body, 1, &tm);
    field(&mut body, 2, &status);
    let e = ApiError::from_status_bytes(Some(200), &body);
    assert_eq!(e.code, 410);
    assert_eq!(e.reason, "Expired");
    assert!(e.is_expired());
    assert_eq!(e.message, "too old resource version: 1 (5)");
    assert!(e.is_too_large_resource_version(), "causes: {:?}", e.causes);
    // not a Status, or malformed: the HTTP code, a message saying so
    let e = ApiError::from_status_bytes(Some(503), b"k8s\0\x0a\x05");
    assert_eq!(e.code, 503);
    assert!(e.message.contains("undecodable protobuf Status"), "{e}");
}

#[test]
fn truncated_keeps_short_text_and_cuts_long_text_at_a_char_boundary() {
    assert_eq!(Truncated("short", 10).to_string(), "short");
    assert_eq!(Truncated("exactly10!", 10).to_string(), "exactly10!");
    assert_eq!(
        Truncated("abcdefghijkl", 5).to_string(),
        "abcde... [cut: 12 bytes in all]"
    );
    // "é" is 2 bytes: never split a character
    assert_eq!(
        Truncated("aéééé", 4).to_string(),
        "aé... [cut: 9 bytes in all]"
    );
    // pieces written by a Display impl: nothing kept after the first cut
    let e = ApiError {
        code: 500,
        reason: "InternalError".into(),
        message: "m".repeat(10),
        causes: vec![],
        retry_after: None,
    };
    let t = Truncated(&e, 8).to_string();
    assert_eq!(
        t,
        format!("500 Inte... [cut: {} bytes in all]", e.to_string().len())
    );
}

#[test]
fn api_error_display_cuts_a_huge_message_but_keeps_it_in_the_field() {
    let huge = "x".repeat(10 << 20);
    let body =
        serde_json::json!({"kind":"Status","code":500,"reason":"InternalError","message":huge})
            .to_string();
    let e = ApiError::from_status_bytes(Some(200), body.as_bytes());
    assert_eq!(e.message.len(), 10 << 20, "the error keeps the message");
    let shown = e.to_string();
    assert!(shown.len() < MAX_DISPLAYED_MESSAGE + 300, "{}", shown.len());
    assert!(shown.contains("[cut: 10485760 bytes in all]"), "{shown}");
    assert!(
        shown.contains("the reflector retries with backoff"),
        "{shown}"
    );
    let e = ReflectorError::Api {
        op: Operation::Watch,
        resource: "configmaps".into(),
        error: e,
    };
    assert!(e.to_string().len() < MAX_DISPLAYED_MESSAGE + 400);
    // a short message is shown whole
    let e = ApiError::from_status_bytes(
        Some(410),
        br#"{"code":410,"reason":"Expired","message":"too old"}"#,
    );
    assert!(e.to_string().starts_with("410 Expired: too old ("), "{e}");
}

#[test]
fn reasons_have_distinct_labels() {
    let mut labels: Vec<_> = ErrorReason::ALL.iter().map(|r| r.as_str()).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), ErrorReason::ALL.len());
    for (i, r) in ErrorReason::ALL.iter().enumerate() {
        assert_eq!(r.index(), i);
    }
}
