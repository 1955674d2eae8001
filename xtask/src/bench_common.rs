//! What the benchmark harnesses share: the clients and where their
//! binaries are, medians, the machine's description, and rewriting a
//! marked block of a doc (below `bench_compare` and the `--real` modes,
//! which all use it).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context as _, bail};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Impl {
    Kcache,
    KubeRuntime,
    ClientGo,
}

pub(crate) const CLIENTS: [Impl; 3] = [Impl::Kcache, Impl::KubeRuntime, Impl::ClientGo];

impl Impl {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Impl::Kcache => "kcache",
            Impl::KubeRuntime => "kube-runtime",
            Impl::ClientGo => "client-go",
        }
    }
}

/// Where the harness's binaries are.
pub(crate) struct Bins {
    /// `target/release` (the Rust clients, the replay server, real-load).
    pub(crate) release: PathBuf,
    /// The client-go client.
    pub(crate) client_go: PathBuf,
    /// kcache's client built from an earlier commit (`--json-baseline`).
    pub(crate) kcache_baseline: Option<PathBuf>,
}

impl Bins {
    pub(crate) fn command(&self, client: Impl) -> Command {
        let mut cmd = match client {
            Impl::Kcache => Command::new(self.release.join("kcache-client")),
            Impl::KubeRuntime => Command::new(self.release.join("kube-runtime-client")),
            Impl::ClientGo => {
                let mut c = Command::new(&self.client_go);
                // Classic paged LIST + WATCH, like the two Rust clients (the
                // replay server does not serve streaming lists). Content
                // type: client-go's default (protobuf, which the replay
                // server serves).
                c.env("KUBE_FEATURE_WatchListClient", "false");
                c
            }
        };
        cmd.env_remove("RUST_LOG");
        cmd
    }
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn machine() -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    vec![
        (
            "cpu".into(),
            format!(
                "{model} × {}",
                std::thread::available_parallelism().map_or(0, |n| n.get())
            ),
        ),
        ("memory".into(), mem),
        ("kernel".into(), command_line("uname", &["-sr"])),
        ("rustc".into(), command_line("rustc", &["-V"])),
        ("go".into(), command_line("go", &["version"])),
        ("load average at the start".into(), loadavg()),
    ]
}

/// Replaces what stands between the `begin` and `end` markers of the file
/// at `path` with `md` (the markers stay).
pub(crate) fn replace_marked_block(
    path: &std::path::Path,
    begin: &str,
    end: &str,
    md: &str,
) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let (Some(a), Some(b)) = (text.find(begin), text.find(end)) else {
        bail!("{} has no {begin} ... {end} block", path.display());
    };
    let new = format!("{}{begin}\n{md}{}", &text[..a], &text[b..]);
    std::fs::write(path, new)?;
    Ok(())
}
