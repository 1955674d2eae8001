//! The replay apiserver: `replay --pods N --events M [--gone-once]
//! [--protobuf-encoder PATH]`. Generates the data set (and its protobuf
//! form, with the encoder: the client-go client), listens on 127.0.0.1 and
//! prints one JSON line (`{"addr": ..., "avg_pod_bytes": ...}`) once it
//! accepts connections.

use clap::Parser;
use kcache_bench_compare::{DataSetArgs, ServerOptions, serve};

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    data: DataSetArgs,
    /// Answer the first watch of each client run with 410 Gone (forces a relist).
    #[arg(long)]
    gone_once: bool,
    /// With `--gone-once`: hold the refused watch open this many
    /// milliseconds before its 410 (a relist of a settled cache).
    #[arg(long)]
    gone_after_ms: Option<u64>,
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Also serve protobuf to clients that ask for it, encoded by this
    /// program (the client-go client: `-scenario=encode-protobuf`).
    #[arg(long)]
    protobuf_encoder: Option<std::path::PathBuf>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut data = args.data.generate();
    if let Some(encoder) = &args.protobuf_encoder {
        data.protobuf = Some(kcache_bench_compare::protobuf::encode(&data, encoder)?);
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    let info = serde_json::json!({
        "addr": listener.local_addr()?.to_string(),
        "avg_pod_bytes": data.avg_pod_bytes,
        "avg_pod_bytes_stripped": data.avg_pod_bytes_stripped,
        "list_bytes": data.pods.iter().map(|p| p.len()).sum::<usize>(),
        "watch_bytes": data.watch.len(),
        "avg_pod_bytes_protobuf": data.protobuf.as_ref().map(|p| p.avg_pod_bytes),
    });
    println!("{info}");
    let opts = ServerOptions {
        gone_once: args.gone_once,
        hold: None,
        gone_after: args.gone_after_ms.map(std::time::Duration::from_millis),
    };
    serve(listener, data, opts).await?;
    Ok(())
}
