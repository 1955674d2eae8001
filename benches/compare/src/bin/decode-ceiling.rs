//! The ceiling of `cargo xtask bench-compare`: bare `serde_json` decoding of
//! the very bytes the replay server sends (N listed Pods, M watch lines),
//! with no network and no cache. Prints one JSON line with events/s for
//! `IgnoredAny` (parse only), `serde_json::Value` and k8s-openapi `Pod`.

use std::time::Instant;

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kcache_bench_compare::DataSetArgs;
use kube::core::WatchEvent;
use serde::de::IgnoredAny;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    data: DataSetArgs,
}

fn rate(docs: &[&[u8]], decode: impl Fn(&[u8]) -> bool) -> f64 {
    let start = Instant::now();
    let mut ok = 0usize;
    for d in docs {
        ok += usize::from(decode(d));
    }
    assert_eq!(ok, docs.len(), "every document decodes");
    docs.len() as f64 / start.elapsed().as_secs_f64()
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let data = args.data.generate();
    let mut docs: Vec<&[u8]> = data.pods.iter().map(|p| &p[..]).collect();
    let lines: Vec<&[u8]> = data
        .watch
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let n_list = docs.len();
    docs.extend(&lines);
    let ignored = rate(&docs, |d| serde_json::from_slice::<IgnoredAny>(d).is_ok());
    let value = rate(&docs, |d| {
        serde_json::from_slice::<serde_json::Value>(d).is_ok()
    });
    let (list, watch) = docs.split_at(n_list);
    let start = Instant::now();
    for d in list {
        serde_json::from_slice::<Pod>(d)?;
    }
    for d in watch {
        serde_json::from_slice::<WatchEvent<Pod>>(d)?;
    }
    let typed = docs.len() as f64 / start.elapsed().as_secs_f64();
    let out = serde_json::json!({
        "events": docs.len(),
        "ignored_any_per_sec": ignored,
        "value_per_sec": value,
        "pod_per_sec": typed,
        "avg_pod_bytes": data.avg_pod_bytes,
        "avg_pod_bytes_stripped": data.avg_pod_bytes_stripped,
    });
    println!("{out}");
    Ok(())
}
