//! A source is printed once in an error chain: no kcache error's message
//! repeats the message of its `source()` (issue 17). One representative
//! error per variant that has a source, from every crate below this one
//! (kcache-envtest checks its own in its unit tests). `ReflectorError::Api`
//! shows the apiserver's Status in its message and has no source.

use std::error::Error;
use std::io;

use kcache::controller::ControllerError;
use kcache::controller::finalizer::FinalizerError;
use kcache::core::{DecodeError, ErrorChain, KeyError, ObjectError, StoreError};
use kcache::indexer::IndexError;
use kcache::informer::{InformerError, SnapshotError};
use kcache::lease::shard::ShardStoreError;
use kcache::lease::{LeaderElectionConfigError, LeaseTimingsError, ShardConfigError, ShardError};
use kcache::reflector::{BadEvent, BadEventKind, ListBodyError, Operation, ReflectorError};

const LEAF: &str = "the leaf error's own message";

fn leaf() -> io::Error {
    io::Error::other(LEAF)
}

fn json_error() -> serde_json::Error {
    serde_json::from_str::<serde_json::Value>("{").unwrap_err()
}

fn kube_error() -> kube::Error {
    kube::Error::Service(Box::new(leaf()))
}

fn bad_event() -> BadEvent {
    BadEvent {
        kind: BadEventKind::InvalidObject,
        detail: "{\"metadata\":".into(),
        source: Some(ObjectError::Json(json_error())),
    }
}

fn store_error() -> StoreError {
    StoreError::IndexFunc {
        index: "by-owner".into(),
        key: "ns/a".into(),
        source: Box::new(leaf()),
    }
}

fn timings() -> LeaseTimingsError {
    LeaseTimingsError::ZeroDuration("lease_duration")
}

type Named = (&'static str, Box<dyn Error + 'static>);

fn core_and_indexer() -> Vec<Named> {
    vec![
        (
            "ObjectError::Json",
            Box::new(ObjectError::Json(json_error())),
        ),
        (
            "ObjectError::Serialize",
            Box::new(ObjectError::Serialize(json_error())),
        ),
        (
            "DecodeError",
            Box::new(DecodeError {
                key: "ns/a".into(),
                type_name: "ConfigMap",
                source: json_error(),
            }),
        ),
        (
            "KeyError::Object",
            Box::new(KeyError::Object {
                object: "ns/a".into(),
                source: Box::new(leaf()),
            }),
        ),
        ("StoreError::IndexFunc", Box::new(store_error())),
        (
            "StoreError::Transform",
            Box::new(StoreError::Transform {
                key: "ns/a".into(),
                source: Box::new(leaf()),
            }),
        ),
        (
            "IndexError::Func",
            Box::new(IndexError::Func {
                index: "by-owner".into(),
                key: "ns/a".into(),
                source: Box::new(leaf()),
            }),
        ),
    ]
}

fn reflector() -> Vec<Named> {
    let resource = || "configmaps".to_string();
    vec![
        ("BadEvent", Box::new(bad_event())),
        (
            "ReflectorError::Transport",
            Box::new(ReflectorError::Transport {
                op: Operation::List,
                resource: resource(),
                source: kube_error(),
            }),
        ),
        (
            "ReflectorError::Body",
            Box::new(ReflectorError::Body {
                op: Operation::List,
                resource: resource(),
                source: Box::new(leaf()),
            }),
        ),
        (
            "ReflectorError::InvalidList",
            Box::new(ReflectorError::InvalidList {
                resource: resource(),
                source: ListBodyError::Json(json_error()),
            }),
        ),
        (
            "ReflectorError::BadEvent",
            Box::new(ReflectorError::BadEvent {
                op: Operation::Watch,
                resource: resource(),
                source: bad_event(),
            }),
        ),
        (
            "ReflectorError::Store",
            Box::new(ReflectorError::Store {
                op: Operation::Watch,
                resource: resource(),
                source: store_error(),
            }),
        ),
        (
            "ReflectorError::Request",
            Box::new(ReflectorError::Request {
                resource: resource(),
                source: kube::core::request::Error::Validation(LEAF.into()),
            }),
        ),
    ]
}

fn informer_lease_controller() -> Vec<Named> {
    vec![
        (
            "InformerError::Thread",
            Box::new(InformerError::Thread(leaf())),
        ),
        (
            "SnapshotError::Io",
            Box::new(SnapshotError::Io {
                path: "/tmp/snapshot".into(),
                source: leaf(),
            }),
        ),
        (
            "ShardStoreError::Other",
            Box::new(ShardStoreError::Other(Box::new(leaf()))),
        ),
        (
            "ControllerError::LeaderElection",
            Box::new(ControllerError::LeaderElection(
                LeaderElectionConfigError::EmptyIdentity,
            )),
        ),
        (
            "ControllerError::Queue",
            Box::new(ControllerError::Queue(
                kcache::workqueue::BuildError::NoRuntime,
            )),
        ),
        (
            "ControllerError::Informer",
            Box::new(ControllerError::Informer(InformerError::Thread(leaf()))),
        ),
        (
            "ControllerError::MetricsServer",
            Box::new(ControllerError::MetricsServer(leaf())),
        ),
        (
            "ControllerError::Shard",
            Box::new(ControllerError::Shard(ShardError::Config(
                ShardConfigError::Timings(timings()),
            ))),
        ),
        (
            "FinalizerError::AddFinalizer",
            Box::new(FinalizerError::<io::Error>::AddFinalizer(kube_error())),
        ),
        (
            "FinalizerError::RemoveFinalizer",
            Box::new(FinalizerError::<io::Error>::RemoveFinalizer(kube_error())),
        ),
    ]
}

fn representative_errors() -> Vec<Named> {
    let mut all = core_and_indexer();
    all.extend(reflector());
    all.extend(informer_lease_controller());
    all
}

#[test]
fn no_error_prints_its_source() {
    let mut failures = Vec::new();
    for (name, err) in representative_errors() {
        let source = err
            .source()
            .unwrap_or_else(|| panic!("{name}: the representative error has no source"));
        let (outer, inner) = (err.to_string(), source.to_string());
        if outer.contains(&inner) {
            failures.push(format!("{name}: {outer:?} repeats its source {inner:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_chain_shows_every_message_and_the_leaf_once() {
    for (name, err) in representative_errors() {
        let shown = ErrorChain(&*err).to_string();
        let mut cur: Option<&(dyn Error + 'static)> = Some(&*err);
        while let Some(e) = cur {
            let m = e.to_string();
            assert!(shown.contains(&m), "{name}: {shown:?} lacks {m:?}");
            cur = e.source();
        }
        assert!(shown.matches(LEAF).count() <= 1, "{name}: {shown}");
    }
}

#[test]
fn an_api_error_shows_the_status_and_has_no_source() {
    let e = ReflectorError::Api {
        op: Operation::Watch,
        resource: "configmaps".into(),
        error: kcache::reflector::ApiError::from_status_bytes(
            Some(410),
            br#"{"code":410,"reason":"Expired","message":"too old"}"#,
        ),
    };
    assert!(e.to_string().contains("410 Expired: too old"), "{e}");
    assert!(e.source().is_none());
}
