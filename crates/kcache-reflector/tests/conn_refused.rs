//! A real refused TCP connection (no server) is recognized as such.

use kcache_reflector::{Operation, ReflectorError};

#[tokio::test]
async fn real_connection_refused_is_recognized() {
    // bind then drop: the port is very likely closed
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let req = http::Request::get("/api/v1/configmaps")
        .body(kube::client::Body::empty())
        .unwrap();
    let err = client.send(req).await.unwrap_err();
    let mut chain = vec![];
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = cur {
        chain.push(format!("{e} / {e:?}"));
        cur = e.source();
    }
    let e = ReflectorError::Transport {
        op: Operation::Watch,
        resource: "configmaps".into(),
        source: err,
    };
    assert!(e.is_connection_refused(), "{chain:#?}");
}
