//! Protobuf against JSON on objects served by the real apiserver (the
//! corpus in tests/data/protobuf): building a cached object (metadata
//! extraction) and decoding it into its k8s-openapi type, by each route.
//!
//! Timed (criterion):
//! `cargo bench -p kcache-core --bench protobuf_decode -- --warm-up-time 1 --measurement-time 3`
//!
//! Instruction counts (not disturbed by other processes on the machine):
//! `KCACHE_CALLGRIND=<route>:<object>:<n>` runs one route `n` times and
//! nothing else, under
//! `valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/protobuf_decode-*`;
//! the difference between `n = 501` and `n = 1`, divided by 500, is the
//! cost of one operation. Routes: `json` (serde_json into the typed value),
//! `protobuf` (the table-driven Deserializer), `protobuf_via_json`
//! (transcode to JSON, then serde_json), `transcode`, `build_json`,
//! `build_protobuf` (`CachedObject::from_bytes` / `from_protobuf`).
//! Objects: `pod`, `deployment`, `configmap`, `secret`.

use std::hint::black_box;

use criterion::Criterion;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kcache_core::CachedObject;
use kcache_core::protobuf::{self, TypeMeta, Unknown};
use serde::de::DeserializeOwned;

fn data(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/protobuf/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

struct Sample {
    json: Vec<u8>,
    raw: Vec<u8>,
    api_version: String,
    kind: String,
}

impl Sample {
    fn load(name: &str) -> Self {
        let pb = data(&format!("{name}.pb"));
        let u = Unknown::decode(&pb).unwrap();
        Sample {
            json: data(&format!("{name}.json")),
            raw: u.raw.to_vec(),
            api_version: u.type_meta.api_version.to_owned(),
            kind: u.type_meta.kind.to_owned(),
        }
    }
    fn type_meta(&self) -> TypeMeta<'_> {
        TypeMeta {
            api_version: &self.api_version,
            kind: &self.kind,
        }
    }
    fn run<K: DeserializeOwned>(&self, route: &str) {
        let tm = self.type_meta();
        match route {
            "json" => {
                black_box(serde_json::from_slice::<K>(black_box(&self.json)).unwrap());
            }
            "protobuf" => {
                black_box(protobuf::decode::<K>(black_box(&self.raw), tm).unwrap());
            }
            "protobuf_via_json" => {
                let j = protobuf::to_json(black_box(&self.raw), tm).unwrap();
                black_box(serde_json::from_slice::<K>(&j).unwrap());
            }
            "transcode" => {
                black_box(protobuf::to_json(black_box(&self.raw), tm).unwrap());
            }
            "build_json" => {
                black_box(CachedObject::<K>::from_bytes(black_box(self.json.clone())).unwrap());
            }
            "build_protobuf" => {
                black_box(
                    CachedObject::<K>::from_protobuf(black_box(self.raw.clone()), tm).unwrap(),
                );
            }
            other => panic!("unknown route {other}"),
        }
    }
}

fn run(s: &Sample, object: &str, route: &str) {
    match object {
        "pod" => s.run::<Pod>(route),
        "deployment" => s.run::<Deployment>(route),
        "configmap" => s.run::<ConfigMap>(route),
        "secret" => s.run::<Secret>(route),
        other => panic!("unknown object {other}"),
    }
}

const ROUTES: &[&str] = &[
    "json",
    "protobuf",
    "protobuf_via_json",
    "transcode",
    "build_json",
    "build_protobuf",
];

fn main() {
    if let Ok(spec) = std::env::var("KCACHE_CALLGRIND") {
        let mut parts = spec.split(':');
        let (Some(route), Some(object), Some(n)) = (parts.next(), parts.next(), parts.next())
        else {
            panic!("KCACHE_CALLGRIND=<route>:<object>:<n>");
        };
        let n: usize = n.parse().expect("n");
        let s = Sample::load(object);
        for _ in 0..n {
            run(&s, object, route);
        }
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    for object in ["pod", "deployment", "configmap", "secret"] {
        let s = Sample::load(object);
        let mut g = c.benchmark_group(format!("protobuf_decode/{object}"));
        for route in ROUTES {
            g.bench_function(*route, |b| b.iter(|| run(&s, object, route)));
        }
        g.finish();
    }
    c.final_summary();
}
