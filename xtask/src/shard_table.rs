//! `cargo xtask shard-table`: the measured table of docs/sharding.md.
//! Replicas of the sample controller run as separate processes (this
//! binary's hidden `shard-replica` subcommand) against one local control
//! plane, so that each one's peak RSS is its own. Each replica prints a
//! JSON line about itself every 200 ms; this task reads them.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use futures::{StreamExt as _, TryStreamExt as _};
use kcache_controller::SHARD_SLOTS;
use kcache_core::ShardSlots;
use kcache_core::{ShardField, ShardSelector};
use kcache_envtest::ControlPlane;
use kcache_lease::shard::View;
use kube::api::{Api, ListParams, PostParams};
use sample_controller::{Foo, FooSpec, ReplicaConfig, Sharding, start_replica};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

/// Options of `cargo xtask shard-table`.
#[derive(Args)]
pub struct ShardTableArgs {
    /// Foos to create (spread over `--namespaces` namespaces).
    #[arg(long, default_value_t = 3000)]
    foos: usize,
    /// Namespaces (names starting with a hex counter).
    #[arg(long, default_value_t = 100)]
    namespaces: usize,
}

/// Options of the hidden `shard-replica` subcommand (one replica).
#[derive(Args)]
pub struct ReplicaArgs {
    /// The replica's identity.
    #[arg(long)]
    id: String,
    /// The control plane's kubeconfig.
    #[arg(long)]
    kubeconfig: std::path::PathBuf,
    /// `informers` (sharded informers on the namespace), `keys` (key
    /// hashing) or `none`.
    #[arg(long, default_value = "informers")]
    sharding: String,
    /// Replicas expected at startup.
    #[arg(long, default_value_t = 1)]
    hint: usize,
    /// The shard group.
    #[arg(long, default_value = "foo-shards")]
    group: String,
}

/// What a replica reports about itself.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Report {
    members: Vec<String>,
    /// Settled, and caching with the selector of its view.
    switched: bool,
    foos: usize,
    deployments: usize,
    bytes: u64,
    hwm_kib: u64,
}

fn expected(members: &[String], me: &str) -> Option<ShardSelector> {
    let slots = ShardSlots::new(SHARD_SLOTS).ok()?;
    let view = View::new(members.iter().cloned());
    slots
        .selector(ShardField::Namespace, view.slots_of(me, slots))
        .ok()
}

/// The child: one replica, reporting every 200 ms until killed or stdin
/// closes.
pub fn replica(args: ReplicaArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        let mut rc = ReplicaConfig::new(&args.id, "default");
        rc.replicas_hint = args.hint;
        rc.group = args.group.clone();
        rc.release_on_stop = false;
        rc.sharding = match args.sharding.as_str() {
            "informers" => Sharding::Informers(ShardField::Namespace),
            "keys" => Sharding::Keys,
            "none" => Sharding::None,
            other => bail!("unknown sharding {other:?}"),
        };
        let sharded_informers = matches!(rc.sharding, Sharding::Informers(_));
        let r = start_replica(config, rc, sample_controller::reconcile)?;
        let mut stdin = BufReader::new(tokio::io::stdin()).lines();
        loop {
            let members = r
                .shard
                .as_ref()
                .map(|s| s.status())
                .filter(|s| s.settled())
                .map(|s| s.members)
                .unwrap_or_default();
            let switched = if sharded_informers {
                !members.is_empty()
                    && r.controller.handle.shard_selector() == expected(&members, &r.identity)
            } else {
                r.controller.handle.health().readiness().0
            };
            let report = Report {
                members,
                switched,
                foos: r.cached_foos().len(),
                deployments: r.cached_deployments().len(),
                bytes: r.bytes_received(),
                hwm_kib: kcache_testing::proc_status_kib("VmHWM"),
            };
            println!("{}", serde_json::to_string(&report)?);
            tokio::select! {
                line = stdin.next_line() => if !matches!(line, Ok(Some(_))) { break },
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
        r.stop().await?;
        Ok(())
    })
}

/// A replica process and its last report.
struct Proc {
    id: String,
    child: Child,
    last: Arc<Mutex<Report>>,
}

fn spawn(
    kubeconfig: &std::path::Path,
    id: &str,
    sharding: &str,
    hint: usize,
) -> anyhow::Result<Proc> {
    // one shard group per measurement: the id's tag
    let group = id.split('-').next().unwrap_or("g");
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "shard-replica",
            "--id",
            id,
            "--sharding",
            sharding,
            "--group",
            group,
        ])
        .arg("--hint")
        .arg(hint.to_string())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let last = Arc::new(Mutex::new(Report::default()));
    let l2 = last.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(r) = serde_json::from_str::<Report>(&line) {
                *l2.lock().await = r;
            }
        }
    });
    Ok(Proc {
        id: id.to_owned(),
        child,
        last,
    })
}

async fn reports(procs: &[Proc]) -> Vec<Report> {
    let mut out = Vec::new();
    for p in procs {
        out.push(p.last.lock().await.clone());
    }
    out
}

/// Waits until every replica has switched to its ranges in a view of
/// exactly `procs`, with `total` Foos cached between them.
async fn wait_switched(procs: &[Proc], total: usize, sharded: bool) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut ids: Vec<String> = procs.iter().map(|p| p.id.clone()).collect();
    ids.sort();
    loop {
        let rs = reports(procs).await;
        let cached: usize = rs.iter().map(|r| r.foos).sum();
        let ok = rs
            .iter()
            .all(|r| r.switched && (!sharded || r.members == ids));
        let want = if sharded { total } else { total * procs.len() };
        if ok && cached == want {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(120) {
            bail!("replicas did not switch within 120 s: {rs:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn stop_all(procs: Vec<Proc>) {
    for mut p in procs {
        let _ = p.child.kill().await;
    }
}

/// One row of the table.
struct Row {
    gate: bool,
    replicas: usize,
    sharding: &'static str,
    per: Vec<Report>,
    join: Option<Duration>,
    kill: Option<Duration>,
}

/// The parent: one control plane per gate setting, the Foos converged by
/// an in-process replica, then 1, 2, 3 replica processes (and one
/// unsharded), a join and a kill each.
pub fn run(args: ShardTableArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut rows = Vec::new();
        for gate in [true, false] {
            let cp = ControlPlane::builder()
                .sharded_list_and_watch(gate)
                .start()
                .await?;
            let crds: Vec<_> = sample_controller::crds()
                .into_iter()
                .map(|(_, c)| c)
                .collect();
            cp.install_crds(&crds).await?;
            let client = cp.client()?;
            let per_ns = args.foos.div_ceil(args.namespaces);
            let mut keys = Vec::new();
            for i in 0..args.namespaces {
                let prefix = format!("{:04x}", ((i as u32).wrapping_mul(0x9e37_79b1)) >> 16);
                let ns = cp.create_namespace(&prefix).await?;
                keys.extend((0..per_ns).map(|j| (ns.clone(), format!("foo-{j:03}"))));
            }
            keys.truncate(args.foos);
            futures::stream::iter(keys.iter())
                .map(|(ns, name)| {
                    let api: Api<Foo> = Api::namespaced(client.clone(), ns);
                    let object = Foo::new(
                        name,
                        FooSpec {
                            deployment_name: format!("{name}-deploy"),
                            replicas: Some(1),
                        },
                    );
                    async move { api.create(&PostParams::default(), &object).await }
                })
                .buffer_unordered(32)
                .try_collect::<Vec<_>>()
                .await?;
            // converge once (in-process, unsharded), then measure on the
            // converged state: no replica writes while measured
            let mut rc = ReplicaConfig::new("converger", "default");
            rc.sharding = Sharding::None;
            let converger = start_replica(cp.config(), rc, sample_controller::reconcile)?;
            let started = Instant::now();
            loop {
                let foos = Api::<Foo>::all(client.clone())
                    .list(&ListParams::default())
                    .await?;
                let done = foos.items.iter().filter(|f| f.status.is_some()).count();
                if done == args.foos && converger.cached_deployments().len() == args.foos {
                    break;
                }
                if started.elapsed() > Duration::from_secs(600) {
                    bail!("the Foos did not converge: {done} of {}", args.foos);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            converger.stop().await?;
            eprintln!(
                "gate {gate}: {} foos converged in {:?}",
                args.foos,
                started.elapsed()
            );
            let kubeconfig = cp.kubeconfig_path().to_owned();
            // unsharded reference
            let procs = vec![spawn(&kubeconfig, "ref", "none", 1)?];
            wait_switched(&procs, args.foos, false).await?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            rows.push(Row {
                gate,
                replicas: 1,
                sharding: "none",
                per: reports(&procs).await,
                join: None,
                kill: None,
            });
            stop_all(procs).await;
            for n in 1..=3usize {
                let tag = format!("g{}n{n}", u8::from(gate));
                let mut procs = Vec::new();
                for i in 0..n {
                    procs.push(spawn(&kubeconfig, &format!("{tag}-r{i}"), "informers", n)?);
                }
                wait_switched(&procs, args.foos, true).await?;
                tokio::time::sleep(Duration::from_secs(2)).await;
                let per = reports(&procs).await;
                // a join
                procs.push(spawn(&kubeconfig, &format!("{tag}-r{n}"), "informers", n)?);
                let join = wait_switched(&procs, args.foos, true).await?;
                // a kill (no release: its Lease expires)
                let mut victim = procs.remove(0);
                victim.child.kill().await?;
                let kill = wait_switched(&procs, args.foos, true).await?;
                eprintln!("gate {gate}, {n} replicas: join {join:?}, kill {kill:?}");
                rows.push(Row {
                    gate,
                    replicas: n,
                    sharding: "informers",
                    per,
                    join: Some(join),
                    kill: Some(kill),
                });
                stop_all(procs).await;
            }
        }
        print_table(&rows);
        Ok(())
    })
}

fn print_table(rows: &[Row]) {
    let mut reference: BTreeMap<bool, f64> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.sharding == "none") {
        reference.insert(r.gate, r.per[0].bytes as f64);
    }
    println!(
        "| gate | replicas | objects cached (Foos + Deployments) per replica | bytes received per replica (MB; of the unsharded) | peak RSS per replica (MiB) | join: ranges switched after | kill: ranges switched after |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        let reference = reference.get(&r.gate).copied().unwrap_or(f64::NAN);
        let objects: Vec<String> = r
            .per
            .iter()
            .map(|p| (p.foos + p.deployments).to_string())
            .collect();
        let bytes: Vec<String> = r
            .per
            .iter()
            .map(|p| {
                format!(
                    "{:.1} ({:.2})",
                    p.bytes as f64 / 1e6,
                    p.bytes as f64 / reference
                )
            })
            .collect();
        let rss: Vec<String> = r
            .per
            .iter()
            .map(|p| format!("{:.0}", p.hwm_kib as f64 / 1024.0))
            .collect();
        let d =
            |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.1} s", d.as_secs_f64()));
        println!(
            "| {} | {}{} | {} | {} | {} | {} | {} |",
            if r.gate { "on" } else { "off" },
            r.replicas,
            if r.sharding == "none" {
                " (unsharded)"
            } else {
                ""
            },
            objects.join(" / "),
            bytes.join(" / "),
            rss.join(" / "),
            d(r.join),
            d(r.kill),
        );
    }
}
