//! CBOR (KEP-4222) from the real kube-apiserver with the feature gate
//! `CBORServingAndStorage` on: what kcache-core builds from the CBOR the
//! apiserver sends equals what it builds from the apiserver's JSON of the
//! same object (metadata, typed and dynamic decodes, the transcoded JSON),
//! built-in objects with strings, `[]byte` (Secret data, tag 22) and
//! numbers; and a server with the gate off does not answer CBOR.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kcache_core::{CachedObject, Format};
use kcache_envtest::ControlPlane;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// GETs `path` asking for `accept`: the Content-Type and the body.
async fn get(client: &Client, path: &str, accept: &str) -> (String, Vec<u8>) {
    let req = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(Vec::new())
        .unwrap();
    let resp = client.send(req.map(Into::into)).await.unwrap();
    assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
    let ct = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (ct, body)
}

fn labels() -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([
        ("app".to_owned(), "web".to_owned()),
        ("tier".to_owned(), "front-end".to_owned()),
    ]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cbor_decode_equals_json_decode() {
    let cp = ControlPlane::builder()
        .cbor_serving_and_storage(true)
        .start()
        .await
        .unwrap();
    let client = cp.client().unwrap();
    let ns = cp.create_namespace("cbor").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("web".into()),
                labels: labels(),
                annotations: Some(BTreeMap::from([(
                    "note".into(),
                    "ünïcode ✓ \"quoted\"".into(),
                )])),
                finalizers: Some(vec!["example.com/keep".into()]),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                ("config.yaml".into(), "a: 1\nb: [2, 3]\n".into()),
                ("empty".into(), String::new()),
            ])),
            binary_data: Some(BTreeMap::from([(
                "blob".into(),
                ByteString(vec![0, 1, 2, 254, 255]),
            )])),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("token".into()),
                    labels: labels(),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(
                    "key".into(),
                    ByteString(b"s3cr3t\x00\xff".to_vec()),
                )])),
                type_: Some("Opaque".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    for path in [
        format!("/api/v1/namespaces/{ns}/configmaps/web"),
        format!("/api/v1/namespaces/{ns}/secrets/token"),
    ] {
        let (ct, cbor) = get(&client, &path, "application/cbor").await;
        assert!(
            ct.starts_with(kcache_core::cbor::CONTENT_TYPE),
            "{path}: the gate is on, the answer is CBOR (Content-Type {ct:?})"
        );
        assert_eq!(&cbor[..3], b"\xd9\xd9\xf7", "the self-described tag");
        let (_, json) = get(&client, &path, "application/json").await;
        let from_cbor: CachedObject<serde_json::Value> = CachedObject::from_cbor(cbor).unwrap();
        let from_json: CachedObject<serde_json::Value> = CachedObject::from_bytes(json).unwrap();
        assert_eq!(from_cbor.format(), Format::Cbor);
        assert_eq!(from_cbor.meta(), from_json.meta(), "{path}: metadata");
        assert_eq!(
            from_cbor.decode().unwrap(),
            from_json.decode().unwrap(),
            "{path}: dynamic decode"
        );
        let transcoded: serde_json::Value =
            serde_json::from_slice(&from_cbor.json().unwrap()).unwrap();
        assert_eq!(transcoded, from_json.decode().unwrap(), "{path}: JSON");
        if path.contains("configmaps") {
            let (c, j): (ConfigMap, ConfigMap) = (
                from_cbor.cast().decode().unwrap(),
                from_json.cast().decode().unwrap(),
            );
            assert_eq!(c, j, "typed ConfigMap");
            assert_eq!(c.binary_data.unwrap()["blob"].0, [0, 1, 2, 254, 255]);
        } else {
            let (c, j): (Secret, Secret) = (
                from_cbor.cast().decode().unwrap(),
                from_json.cast().decode().unwrap(),
            );
            assert_eq!(c, j, "typed Secret");
            assert_eq!(c.data.unwrap()["key"].0, b"s3cr3t\x00\xff");
        }
        println!("{path}: CBOR and JSON give the same object");
    }
}

/// The status and Content-Type of a GET of `path` asking for `accept`.
async fn status_of(client: &Client, path: &str, accept: &str) -> (u16, String) {
    let req = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(Vec::new())
        .unwrap();
    let resp = client.send(req.map(Into::into)).await.unwrap();
    let ct = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (resp.status().as_u16(), ct)
}

/// What a client that asks for CBOR meets on a cluster without the gate
/// (most clusters today): JSON when it offers JSON as the fallback, 406
/// when it does not. The reflector's fallback (ask with JSON second, stay
/// on JSON after a 406) is built on these two answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_gate_answers_json_or_406() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client().unwrap();
    let ns = cp.create_namespace("nocbor").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let path = format!("/api/v1/namespaces/{ns}/configmaps/web");
    let (status, ct) = status_of(&client, &path, "application/cbor, application/json").await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("application/json"), "{ct}");
    let (status, _) = status_of(&client, &path, "application/cbor").await;
    assert_eq!(status, 406, "CBOR only, gate off: Not Acceptable");
    let (status, ct) = status_of(
        &client,
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        "application/cbor, application/json",
    )
    .await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("application/json"), "a list: {ct}");
}
