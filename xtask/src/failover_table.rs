//! `cargo xtask failover-table`: leader failover against the local control
//! plane (issue 33). N ConfigMaps in one namespace; two replica processes
//! of a leader-elected kcache controller (a no-op reconciler that reports
//! its first reconcile); the leader killed with SIGKILL (no renewal, no
//! release); the time from the kill to the new leader's first reconcile,
//! split into lease expiry (the dead leader's last renewal + lease
//! duration), acquire, and acquire-to-first-reconcile.
//!
//! Rows: kcache warm standby (the default: informers synced while standing
//! by), kcache cold (the replica runs a bare `LeaderElector` first and
//! builds its informers only once it holds the lease, as a controller
//! wrapped in client-go's `leaderelection.RunOrDie` does), and
//! controller-runtime 0.24 with and without `EnableWarmup` (a small Go
//! controller, `benches/compare/controller-runtime`, built here from Go
//! modules). Leader and standby of a row are the same program.
//!
//! Wall-clock instants (all processes on this machine): the kill, the
//! Lease's `renewTime` before it and `acquireTime` after it (written by the
//! replicas), the replica's first reconcile.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::Args;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kcache_controller::{Action, Config, Controller, Request};
use kcache_envtest::ControlPlane;
use kcache_informer::SharedInformerFactory;
use kcache_lease::{KubeLeaseLock, LeaderCallbacks};
use kcache_lease::{LeaderElectionConfig, LeaderElector};
use kube::api::{Api, DeleteParams, PostParams};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::run::workspace_root;

const LEASE: &str = "failover";

#[derive(Args)]
pub struct FailoverArgs {
    /// ConfigMaps the controller caches.
    #[arg(long, default_value_t = 20_000)]
    objects: usize,
    /// Failovers per row.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Write the table into docs/controller.md (between its
    /// `failover-table` markers).
    #[arg(long)]
    write_docs: bool,
}

/// The hidden `failover-replica` subcommand: one replica.
#[derive(Args)]
pub struct FailoverReplicaArgs {
    #[arg(long)]
    id: String,
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long)]
    namespace: String,
    /// `warm` or `cold`.
    #[arg(long)]
    mode: String,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The child: prints `synced <ms>` once its cache synced and `first <ms>`
/// at its first reconcile, until killed.
pub fn replica(args: FailoverReplicaArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        let client = kube::Client::try_from(config)?;
        let lock = KubeLeaseLock::new(client.clone(), &args.namespace, LEASE);
        let election = LeaderElectionConfig::new(&args.id);
        if args.mode == "cold" {
            // hold the lease first (not released when this elector stops:
            // the controller's own elector renews it, same identity)
            let elector = LeaderElector::new(
                election.clone().release_on_cancel(false),
                Arc::new(lock.clone()),
            )?;
            let (tx, mut rx) = mpsc::unbounded_channel();
            let stop = CancellationToken::new();
            let task = tokio::spawn({
                let stop = stop.clone();
                async move {
                    elector
                        .run(
                            stop,
                            LeaderCallbacks {
                                on_started_leading: Box::new(move |_| {
                                    let _ = tx.send(());
                                }),
                                ..LeaderCallbacks::default()
                            },
                        )
                        .await
                }
            });
            rx.recv()
                .await
                .context("the elector ended before leading")?;
            stop.cancel();
            let _ = task.await;
        }
        let factory = SharedInformerFactory::builder(client.clone())
            .config(kcache_informer::InformerConfig {
                watch: kcache_reflector::WatchConfig {
                    namespace: Some(args.namespace.clone()),
                    object_options: kcache_core::ObjectOptions {
                        strip_managed_fields: true,
                        ..Default::default()
                    },
                    ..kcache_reflector::WatchConfig::default()
                },
                ..kcache_informer::InformerConfig::default()
            })
            .build();
        let ctl = Controller::<ConfigMap>::new(&factory, Config::default().name("failover"))
            .leader_election(election, lock);
        let handle = ctl.handle();
        let first = Arc::new(AtomicBool::new(false));
        let run = tokio::spawn(ctl.run(
            |_req: Request<ConfigMap>, first: Arc<AtomicBool>| async move {
                if !first.swap(true, Ordering::SeqCst) {
                    println!("first {}", now_ms());
                }
                Ok::<_, std::io::Error>(Action::await_change())
            },
            first,
        ));
        loop {
            if handle.informer::<ConfigMap>().has_synced() {
                println!("synced {}", now_ms());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = run.await;
        Ok(())
    })
}

/// A replica process and what it printed.
struct Proc {
    child: Child,
    synced: Arc<std::sync::Mutex<Option<i64>>>,
    first: Arc<std::sync::Mutex<Option<i64>>>,
}

/// Where a replica's stderr goes: `target/failover/<id>.log`.
fn log_file(id: &str) -> anyhow::Result<Stdio> {
    let dir = workspace_root().join("target/failover");
    std::fs::create_dir_all(&dir)?;
    Ok(Stdio::from(std::fs::File::create(
        dir.join(format!("{id}.log")),
    )?))
}

/// A row of the table: which program stands by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    KcacheWarm,
    KcacheCold,
    CrWarmup,
    CrPlain,
}

impl Kind {
    const ALL: [Kind; 4] = [
        Kind::KcacheWarm,
        Kind::KcacheCold,
        Kind::CrWarmup,
        Kind::CrPlain,
    ];

    fn label(self) -> &'static str {
        match self {
            Kind::KcacheWarm => "kcache, warm standby (default)",
            Kind::KcacheCold => "kcache, cold (informers start after the acquire)",
            Kind::CrWarmup => "controller-runtime 0.24, `EnableWarmup`",
            Kind::CrPlain => "controller-runtime 0.24, default (sources start after the acquire)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Kind::KcacheWarm => "warm",
            Kind::KcacheCold => "cold",
            Kind::CrWarmup => "crwarm",
            Kind::CrPlain => "crplain",
        }
    }
}

fn spawn(kubeconfig: &Path, ns: &str, id: &str, kind: Kind, cr_bin: &Path) -> anyhow::Result<Proc> {
    let mut cmd = match kind {
        Kind::KcacheWarm | Kind::KcacheCold => {
            let mut c = Command::new(std::env::current_exe()?);
            let mode = if kind == Kind::KcacheWarm {
                "warm"
            } else {
                "cold"
            };
            c.args([
                "failover-replica",
                "--id",
                id,
                "--namespace",
                ns,
                "--mode",
                mode,
            ])
            .arg("--kubeconfig")
            .arg(kubeconfig);
            c
        }
        Kind::CrWarmup | Kind::CrPlain => {
            let mut c = Command::new(cr_bin);
            c.args(["-namespace", ns, "-lease", LEASE])
                .arg(format!("-warmup={}", kind == Kind::CrWarmup))
                .arg("-kubeconfig")
                .arg(kubeconfig);
            c
        }
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file(id)?)
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let synced = Arc::new(std::sync::Mutex::new(None));
    let first = Arc::new(std::sync::Mutex::new(None));
    let (s2, f2) = (synced.clone(), first.clone());
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut parts = line.split_whitespace();
            let (Some(what), Some(ms)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(ms) = ms.parse::<i64>() else { continue };
            match what {
                "synced" => *s2.lock().unwrap_or_else(|e| e.into_inner()) = Some(ms),
                "first" => *f2.lock().unwrap_or_else(|e| e.into_inner()) = Some(ms),
                _ => {}
            }
        }
    });
    Ok(Proc {
        child,
        synced,
        first,
    })
}

async fn wait_for(
    what: &str,
    slot: &Arc<std::sync::Mutex<Option<i64>>>,
    limit: Duration,
) -> anyhow::Result<i64> {
    let start = Instant::now();
    loop {
        if let Some(v) = *slot.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(v);
        }
        if start.elapsed() > limit {
            bail!("no {what} within {limit:?} (the replicas' stderr: target/failover/*.log)");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn micro_ms(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>) -> Option<i64> {
    t.as_ref().map(|t| t.0.as_millisecond())
}

/// One failover, in milliseconds.
#[derive(Debug, Clone, Copy)]
struct Failover {
    /// Kill to the dead leader's lease expiry (last renewal + duration).
    expiry: i64,
    /// Expiry to the standby's acquire.
    acquire: i64,
    /// Acquire to the standby's first reconcile.
    first: i64,
    /// Kill to first reconcile.
    total: i64,
}

async fn failover(
    client: &kube::Client,
    kubeconfig: &Path,
    ns: &str,
    kind: Kind,
    tag: &str,
    cr_bin: &Path,
) -> anyhow::Result<Failover> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let _ = leases.delete(LEASE, &DeleteParams::default()).await;
    let leader_kind = match kind {
        Kind::KcacheCold => Kind::KcacheWarm,
        k => k,
    };
    let mut leader = spawn(
        kubeconfig,
        ns,
        &format!("{tag}-leader"),
        leader_kind,
        cr_bin,
    )?;
    let limit = Duration::from_secs(180);
    wait_for("leader's first reconcile", &leader.first, limit).await?;
    let standby = spawn(kubeconfig, ns, &format!("{tag}-standby"), kind, cr_bin)?;
    if kind == Kind::KcacheWarm {
        wait_for("standby sync", &standby.synced, limit).await?;
    }
    // the standby up (a warm one synced: 20,000 objects take a few
    // seconds), a few renewals seen
    tokio::time::sleep(Duration::from_secs(10)).await;
    let killed = now_ms();
    leader.child.start_kill()?;
    let _ = leader.child.wait().await;
    let before = leases.get(LEASE).await?;
    let spec = before.spec.unwrap_or_default();
    let renewed = micro_ms(&spec.renew_time).context("the lease has no renewTime")?;
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15)) * 1000;
    let first = wait_for(
        "standby's first reconcile",
        &standby.first,
        Duration::from_secs(300),
    )
    .await?;
    let after = leases.get(LEASE).await?.spec.unwrap_or_default();
    let acquired = micro_ms(&after.acquire_time).context("the lease has no acquireTime")?;
    let mut standby = standby;
    let _ = standby.child.start_kill();
    let _ = standby.child.wait().await;
    let expiry = renewed + duration;
    Ok(Failover {
        expiry: expiry - killed,
        acquire: acquired - expiry,
        first: first - acquired,
        total: first - killed,
    })
}

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

pub fn run(args: FailoverArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        eprintln!("==> failover-table: starting the local control plane");
        let cp = ControlPlane::builder().start().await?;
        let client = cp.client()?;
        let ns = cp.create_namespace("failover").await?;
        eprintln!("==> creating {} ConfigMaps in {ns}", args.objects);
        let started = Instant::now();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        futures::stream::iter(0..args.objects)
            .map(|i| {
                let api = api.clone();
                async move {
                    let mut cm = ConfigMap::default();
                    cm.metadata.name = Some(format!("cm-{i:06}"));
                    cm.data = Some([("payload".to_owned(), "x".repeat(512))].into());
                    api.create(&PostParams::default(), &cm).await
                }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await?;
        eprintln!("    created in {:.0?}", started.elapsed());
        let kubeconfig = cp.kubeconfig_path().to_owned();
        let cr_bin = workspace_root().join("target/failover/cr-failover");
        eprintln!("==> building the controller-runtime controller (Go, controller-runtime v0.24.1)");
        let status = std::process::Command::new("go")
            .current_dir(workspace_root().join("benches/compare/controller-runtime"))
            .args(["build", "-mod=readonly", "-o"])
            .arg(&cr_bin)
            .arg(".")
            .status()
            .context("running go build")?;
        if !status.success() {
            bail!("go build of benches/compare/controller-runtime failed");
        }
        let mut rows = Vec::new();
        for kind in Kind::ALL {
            let mut runs = Vec::new();
            for rep in 0..args.reps {
                let tag = format!("{}{rep}", kind.tag());
                let f = failover(&client, &kubeconfig, &ns, kind, &tag, &cr_bin).await?;
                let mode = kind.tag();
                eprintln!(
                    "    {mode} #{}: kill->expiry {} ms, expiry->acquire {} ms, acquire->first reconcile {} ms, total {} ms",
                    rep + 1,
                    f.expiry,
                    f.acquire,
                    f.first,
                    f.total
                );
                runs.push(f);
            }
            rows.push((kind, runs));
        }
        let table = render(&args, &rows);
        println!("{table}");
        if args.write_docs {
            write_docs(&table)?;
        }
        Ok(())
    })
}

fn render(args: &FailoverArgs, rows: &[(Kind, Vec<Failover>)]) -> String {
    let mut t = format!(
        "N = {} ConfigMaps (512 B of data each) in one namespace of the local control plane \
         (kube-apiserver v1.37.2); a leader-elected controller of them in two processes (leader and \
         standby of a row are the same program; controller-runtime 0.24.1 runs on client-go 0.36) with \
         client-go's lease timings (15 s lease, 10 s renew deadline, 2 s retry period); the leader \
         killed with SIGKILL; medians of {} failovers per row.\n\n\
         | row | kill -> lease expiry | expiry -> acquire | acquire -> first reconcile | kill -> first reconcile |\n\
         |---|---:|---:|---:|---:|\n",
        args.objects, args.reps
    );
    for (kind, runs) in rows {
        let label = kind.label();
        let m = |f: fn(&Failover) -> i64| median(runs.iter().map(f).collect());
        t.push_str(&format!(
            "| {label} | {} ms | {} ms | {} ms | {} ms |\n",
            m(|f| f.expiry),
            m(|f| f.acquire),
            m(|f| f.first),
            m(|f| f.total)
        ));
    }
    let cmd: Vec<String> = std::env::args().skip(1).collect();
    t.push_str(&format!("\nCommand: `cargo xtask {}`.\n", cmd.join(" ")));
    t
}

fn write_docs(table: &str) -> anyhow::Result<()> {
    let path = workspace_root().join("docs/controller.md");
    let text = std::fs::read_to_string(&path)?;
    let (begin, end) = (
        "<!-- failover-table:begin -->",
        "<!-- failover-table:end -->",
    );
    let (Some(b), Some(e)) = (text.find(begin), text.find(end)) else {
        bail!("docs/controller.md has no {begin} ... {end} markers");
    };
    let new = format!("{}{begin}\n{table}{}", &text[..b], &text[e..]);
    std::fs::write(&path, new)?;
    eprintln!("==> wrote {}", path.display());
    Ok(())
}
