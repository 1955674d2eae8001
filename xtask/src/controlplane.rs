//! `cargo xtask controlplane ...`: the local control plane by hand.

use std::time::Instant;

use anyhow::Context as _;
use clap::Subcommand;
use kcache_envtest::{Binaries, ControlPlane, detached_state, pid_alive, stop_detached};

#[derive(Subcommand)]
pub enum Action {
    /// Build kube-apiserver and etcd from the pinned Go modules (if needed).
    Build,
    /// Start a control plane that keeps running after this command returns.
    Start,
    /// Stop the control plane started by `start` and remove its data.
    Stop,
    /// Say whether it is running, and where.
    Status,
    /// Print the path of its admin kubeconfig.
    Kubeconfig,
}

pub fn run(action: Action) -> anyhow::Result<()> {
    match action {
        Action::Build => {
            let t = Instant::now();
            let bins = Binaries::ensure()?;
            eprintln!(
                "kube-apiserver: {}\netcd:           {}\nready in {:.1}s",
                bins.kube_apiserver.display(),
                bins.etcd.display(),
                t.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Action::Start => start(),
        Action::Stop => {
            let state = stop_detached()?;
            eprintln!("stopped the control plane at {}", state.server);
            Ok(())
        }
        Action::Status => {
            let state = detached_state()?;
            let etcd = pid_alive(state.etcd_pid);
            let api = pid_alive(state.apiserver_pid);
            println!("server:     {}", state.server);
            println!("kubeconfig: {}", state.kubeconfig.display());
            println!(
                "etcd:           pid {} {}",
                state.etcd_pid,
                if etcd { "running" } else { "not running" }
            );
            println!(
                "kube-apiserver: pid {} {}",
                state.apiserver_pid,
                if api { "running" } else { "not running" }
            );
            println!("logs:       {}", state.run_dir.display());
            if !(etcd && api) {
                anyhow::bail!(
                    "the control plane is not fully running; `cargo xtask controlplane stop` then `start`"
                );
            }
            Ok(())
        }
        Action::Kubeconfig => {
            let state = detached_state()?;
            println!("{}", state.kubeconfig.display());
            Ok(())
        }
    }
}

fn start() -> anyhow::Result<()> {
    if let Ok(state) = detached_state()
        && pid_alive(state.apiserver_pid)
    {
        println!("already running at {}", state.server);
        println!("export KUBECONFIG={}", state.kubeconfig.display());
        return Ok(());
    }
    let rt = tokio::runtime::Runtime::new()?;
    let t = Instant::now();
    let state = rt.block_on(async {
        let cp = ControlPlane::builder()
            .detached(true)
            .start()
            .await
            .context("starting the local control plane")?;
        let state = cp.write_state()?;
        anyhow::Ok(state)
    })?;
    eprintln!(
        "control plane ready in {:.1}s at {}",
        t.elapsed().as_secs_f64(),
        state.server
    );
    eprintln!("logs: {}", state.run_dir.display());
    eprintln!("stop it with: cargo xtask controlplane stop");
    println!("kubeconfig: {}", state.kubeconfig.display());
    println!("export KUBECONFIG={}", state.kubeconfig.display());
    Ok(())
}
