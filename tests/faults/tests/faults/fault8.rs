//! Fault 8: leader election between candidate processes, each behind a
//! fault proxy of its own, on a Lease of the real apiserver. The leader is
//! killed (SIGKILL), partitioned from the apiserver, paused (SIGSTOP until a
//! standby took over, then SIGCONT) or, for the sample controller, stopped
//! gracefully (SIGTERM). Checked from the candidates' own stamped logs: at
//! most one candidate acts at a time, no candidate acts outside a term of
//! its own, a resumed ex-leader does not act, and a new leader acts within
//! a bound after each fault.
//!
//! Two kinds of candidates:
//! - [`leader_election_kill_and_partition`]: `fault-elector`, a bare
//!   [`kcache_controller::LeaderElector`] whose acts are 20 ms ticks while
//!   its leading token is not cancelled and its renew deadline (from
//!   `LeaderElector::lease_expiry`) is ahead on the clock (`lead`, `act`,
//!   `stop`, `lost` lines);
//! - [`leader_election_sample_controller`]: `fault-sample-controller`, the
//!   sample controller's own command line with `--leader-elect` (its
//!   `Controller::run` leader path), whose acts are its write requests to
//!   the apiserver (every POST/PUT/PATCH/DELETE but the Lease's own,
//!   stamped when sent), while a driver keeps changing Foos.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kcache_envtest::ControlPlane;
use kcache_envtest::proxy::FaultProxy;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::support::{full, seed};

/// Lease duration, renew deadline and retry period of every candidate:
/// valid by client-go's rules with a margin of one retry period.
const LEASE_MS: u64 = 4000;
const RENEW_MS: u64 = 3000;
const RETRY_MS: u64 = 1000;

/// How long after a fault a new leader must act: lease duration + 2
/// jittered retry periods (up to 1.2 x each) + 2 s (process and request
/// latency on a loaded machine).
fn takeover_bound() -> Duration {
    Duration::from_millis(LEASE_MS + 2 * RETRY_MS * 22 / 10) + Duration::from_secs(2)
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn secs(nanos: u128) -> f64 {
    nanos as f64 / 1e9
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`) to a process (through the
/// kill(2) call: a minimal machine may have no `kill` program).
fn send_signal(pid: u32, signal: &str) {
    use nix::sys::signal::Signal;
    let sig = match signal {
        "STOP" => Signal::SIGSTOP,
        "CONT" => Signal::SIGCONT,
        "TERM" => Signal::SIGTERM,
        other => panic!("send_signal: unexpected signal {other}"),
    };
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid fits in i32"));
    if let Err(e) = nix::sys::signal::kill(pid, sig) {
        panic!("kill -{signal} {pid} failed: {e}");
    }
}

/// The state letter of a process in /proc (`T`: stopped by a signal).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) S ...: the comm may hold spaces, the state follows its ')'
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// One candidate process behind a proxy of its own.
struct Candidate {
    identity: String,
    log: PathBuf,
    proxy: FaultProxy,
    child: std::process::Child,
}

impl Drop for Candidate {
    fn drop(&mut self) {
        // a stopped process must be resumed to die of anything but SIGKILL;
        // SIGKILL works either way
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A leadership term of one candidate, from its own log.
#[derive(Debug, Clone)]
struct Term {
    identity: String,
    first_act: u128,
    last_act: u128,
}

/// Parses a `fault-elector` log into its terms: a term runs from `lead` to
/// the `stop` written by the acting task when its token is cancelled, or to
/// `lost` (written by the candidate once the election ended, after waiting
/// for the acting task to stop), or to a new `start`. A term with no act is
/// dropped. Any `act` outside a term is an error: a leader that kept
/// acting after it lost its lease.
fn terms_of(identity: &str, log: &Path) -> Result<Vec<Term>, String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut terms = Vec::new();
    let mut cur: Option<Term> = None;
    let mut last_state = "the start of the log";
    for line in text.lines() {
        let mut it = line.split(' ');
        let (Some(what), Some(ts)) = (it.next(), it.next().and_then(|t| t.parse::<u128>().ok()))
        else {
            continue; // a line cut by SIGKILL
        };
        match what {
            "lead" => {
                if let Some(t) = cur.take() {
                    return Err(format!(
                        "{identity}: a new term at {:.3} while the term {t:?} never ended",
                        secs(ts)
                    ));
                }
                cur = Some(Term {
                    identity: identity.to_owned(),
                    first_act: 0,
                    last_act: 0,
                });
            }
            "act" => match cur.as_mut() {
                Some(t) => {
                    if t.first_act == 0 {
                        t.first_act = ts;
                    }
                    t.last_act = ts;
                }
                None => {
                    return Err(format!(
                        "{identity}: act at {:.3} outside a term (after {last_state}): \
                         a candidate acted without leading",
                        secs(ts)
                    ));
                }
            },
            "stop" | "lost" | "start" => {
                terms.extend(cur.take());
                last_state = match what {
                    "stop" => "its leading token was cancelled",
                    "lost" => "its election ended (leadership lost)",
                    _ => "a restart",
                };
            }
            _ => {}
        }
    }
    terms.extend(cur);
    terms.retain(|t| t.first_act != 0);
    Ok(terms)
}

/// Stamped acts of a `fault-sample-controller` log (`act <nanos> <method>
/// <path>`).
fn acts_of(log: &Path) -> Vec<(u128, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("act ")?;
            let (ts, what) = rest.split_once(' ').unwrap_or((rest, ""));
            Some((ts.parse().ok()?, what.to_owned()))
        })
        .collect()
}

/// Sorts the terms; every pair of terms whose acting intervals overlap is
/// a violation. Returns the smallest gap between the last act of one term
/// and the first act of the next.
fn overlaps(terms: &mut [Term], violations: &mut Vec<String>) -> u128 {
    terms.sort_by_key(|t| t.first_act);
    let mut min_gap = u128::MAX;
    for (k, t) in terms.iter().enumerate() {
        for p in &terms[..k] {
            if p.last_act >= t.first_act {
                violations.push(format!(
                    "two leaders acted at once: {} and {} overlap by {:.3}s ({p:?}, {t:?})",
                    p.identity,
                    t.identity,
                    secs(p.last_act.min(t.last_act) - t.first_act)
                ));
            }
        }
        if k > 0 {
            let end = terms[..k].iter().map(|p| p.last_act).max().unwrap_or(0);
            min_gap = min_gap.min(t.first_act.saturating_sub(end));
        }
    }
    min_gap
}

/// What a round does to the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Kill,
    /// Its proxy refuses and resets every connection.
    PartitionRefuse,
    /// Its proxy stalls every connection.
    PartitionStall,
    /// SIGSTOP until a standby acts, then SIGCONT.
    Pause,
    /// SIGTERM: a graceful shutdown (the sample controller only).
    Terminate,
}

impl Fault {
    fn label(self) -> &'static str {
        match self {
            Fault::Kill => "SIGKILL",
            Fault::PartitionRefuse => "partition (refuse + reset)",
            Fault::PartitionStall => "partition (stall)",
            Fault::Pause => "pause (SIGSTOP, SIGCONT after the takeover)",
            Fault::Terminate => "graceful stop (SIGTERM)",
        }
    }
}

/// Injects `fault` on `c`; returns whether it measurably bit (the process
/// died of the signal, or is stopped, or the proxy refused, cut or held
/// something).
async fn inject(c: &mut Candidate, fault: Fault) -> bool {
    let pid = c.child.id();
    let before = c.proxy.stats();
    match fault {
        Fault::Kill => {
            c.child.kill().expect("SIGKILL");
            let status = c.child.wait().expect("wait");
            std::os::unix::process::ExitStatusExt::signal(&status) == Some(9)
        }
        Fault::PartitionRefuse => {
            c.proxy.refuse(true);
            c.proxy.cut_all();
            let start = Instant::now();
            loop {
                let s = c.proxy.stats();
                if s.refused > before.refused || s.cut > before.cut {
                    return true;
                }
                if start.elapsed() > Duration::from_millis(RETRY_MS * 3) {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Fault::PartitionStall => {
            c.proxy.stall(true);
            let start = Instant::now();
            loop {
                if c.proxy.stats().held_stalled > before.held_stalled {
                    return true;
                }
                if start.elapsed() > Duration::from_millis(RETRY_MS * 3) {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Fault::Pause => {
            send_signal(pid, "STOP");
            let start = Instant::now();
            loop {
                if proc_state(pid) == Some('T') {
                    return true;
                }
                if start.elapsed() > Duration::from_secs(2) {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Fault::Terminate => {
            send_signal(pid, "TERM");
            true
        }
    }
}

/// The candidate acting now (exactly one, not `not`), waiting up to
/// `within`.
async fn leader_index(
    candidates: &[Candidate],
    acting: &dyn Fn(&Candidate) -> bool,
    within: Duration,
    not: Option<&str>,
) -> usize {
    let start = Instant::now();
    loop {
        let now: Vec<usize> = (0..candidates.len())
            .filter(|&i| acting(&candidates[i]))
            .filter(|&i| Some(candidates[i].identity.as_str()) != not)
            .collect();
        if now.len() == 1 {
            return now[0];
        }
        assert!(
            start.elapsed() < within,
            "no single acting leader within {within:?} (acting: {:?})",
            now.iter()
                .map(|&i| candidates[i].identity.as_str())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get(name)
        .await
        .ok()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// Fault 8: `fault-elector` candidates (3 at a time). Each round, seeded
/// order: the leader is killed with SIGKILL, partitioned (its proxy refuses
/// and resets, or stalls every connection) and healed after a takeover, or
/// paused (SIGSTOP) until a standby acts and then resumed (SIGCONT). Checked
/// from the candidates' own logs (each act stamped): no act outside a term;
/// the acting intervals of all terms never overlap (at most one candidate
/// acts at a time); a resumed ex-leader does not act again in the term it
/// was paused in (it must find its renew deadline passed before acting);
/// after each fault a new leader acts within [`takeover_bound`]; the acting
/// candidate holds the Lease. Settings: 4 s lease, 3 s renew deadline, 1 s
/// retry period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_kill_and_partition() {
    let seed = seed("fault8::leader_election_kill_and_partition");
    let mut rng = StdRng::seed_from_u64(seed);
    let rounds = if full() { 9 } else { 3 };
    let bound = takeover_bound();
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp
        .create_namespace("fault-leader")
        .await
        .expect("namespace");
    let dir =
        std::env::temp_dir().join(format!("kcache-fault-leader-{}-{seed}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("log dir");
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let lease_name = "fault-leader";
    let spawn = |identity: String| {
        let dir = dir.clone();
        let kubeconfig = kubeconfig.clone();
        let ns = ns.clone();
        async move {
            let proxy = FaultProxy::for_url(&cp.server_url()).await.expect("proxy");
            let log = dir.join(format!("{identity}.log"));
            let child = std::process::Command::new(env!("CARGO_BIN_EXE_fault-elector"))
                .arg(&kubeconfig)
                .arg(proxy.url())
                .arg(&ns)
                .arg(lease_name)
                .arg(&identity)
                .arg(&log)
                .args([
                    LEASE_MS.to_string(),
                    RENEW_MS.to_string(),
                    RETRY_MS.to_string(),
                ])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn fault-elector");
            Candidate {
                identity,
                log,
                proxy,
                child,
            }
        }
    };
    let mut candidates = Vec::new();
    let mut next_id = 0;
    for _ in 0..3 {
        candidates.push(spawn(format!("cand-{next_id}")).await);
        next_id += 1;
    }
    let leases: Api<Lease> = Api::namespaced(cp.client().expect("client"), &ns);
    let acting = |c: &Candidate| {
        terms_of(&c.identity, &c.log)
            .unwrap_or_else(|e| panic!("{e}"))
            .last()
            .is_some_and(|t| unix_nanos().saturating_sub(t.last_act) < 200_000_000)
    };
    let mut i = leader_index(&candidates, &acting, Duration::from_secs(30), None).await;
    let mut takeovers = Vec::new();
    let mut labels = Vec::new();
    let mut bitten = 0u64;
    let mut violations = Vec::new();
    // every kind once, in a seeded order, then seeded picks
    let mut plan = vec![Fault::Kill, Fault::Pause, Fault::PartitionStall];
    for k in (1..plan.len()).rev() {
        plan.swap(k, rng.random_range(0..=k));
    }
    let kinds = [
        Fault::Kill,
        Fault::PartitionRefuse,
        Fault::PartitionStall,
        Fault::Pause,
    ];
    while plan.len() < rounds {
        plan.push(kinds[rng.random_range(0..kinds.len())]);
    }
    for (round, &fault) in plan.iter().enumerate() {
        // let the leader renew a few times first
        tokio::time::sleep(Duration::from_millis(rng.random_range(1500..3000))).await;
        let old = candidates[i].identity.clone();
        let t0 = unix_nanos();
        let bit = inject(&mut candidates[i], fault).await;
        assert!(bit, "{}: the fault did not bite", fault.label());
        bitten += 1;
        let j = leader_index(
            &candidates,
            &acting,
            bound + Duration::from_secs(5),
            Some(&old),
        )
        .await;
        let new = &candidates[j];
        let first = terms_of(&new.identity, &new.log)
            .unwrap_or_else(|e| panic!("{e}"))
            .last()
            .map_or(0, |t| t.first_act);
        let takeover = Duration::from_nanos(first.saturating_sub(t0) as u64);
        eprintln!(
            "round {round}: {} of {old}: {} acts {:.2}s later",
            fault.label(),
            new.identity,
            takeover.as_secs_f64()
        );
        assert!(
            takeover <= bound,
            "{}: takeover took {takeover:?} (bound {bound:?})",
            fault.label()
        );
        takeovers.push(takeover);
        labels.push(fault.label());
        match fault {
            Fault::Kill => {
                candidates.remove(i);
                candidates.push(spawn(format!("cand-{next_id}")).await);
                next_id += 1;
            }
            Fault::Pause => {
                // the new leader acts for a while, then the old one resumes
                tokio::time::sleep(Duration::from_secs(1)).await;
                let t_cont = unix_nanos();
                send_signal(candidates[i].child.id(), "CONT");
                // room to misbehave: its timers all expired while stopped
                tokio::time::sleep(Duration::from_secs(2)).await;
                let c = &candidates[i];
                let terms = terms_of(&c.identity, &c.log).unwrap_or_else(|e| panic!("{e}"));
                let paused = terms
                    .iter()
                    .rfind(|t| t.first_act < t0)
                    .expect("the paused leader's term");
                if paused.last_act >= t_cont {
                    violations.push(format!(
                        "{}: the paused leader acted until {:.3}s after it resumed (SIGCONT), \
                         in the term it had lost while stopped; it must find its renew \
                         deadline passed before acting again ({paused:?})",
                        c.identity,
                        secs(paused.last_act - t_cont)
                    ));
                }
            }
            _ => {
                // heal: the old leader rejoins as a standby
                let p = &candidates[i].proxy;
                p.heal();
                p.cut_all();
            }
        }
        i = leader_index(&candidates, &acting, Duration::from_secs(10), None).await;
        assert_eq!(
            lease_holder(&leases, lease_name).await.as_deref(),
            Some(candidates[i].identity.as_str()),
            "the acting candidate holds the Lease"
        );
    }
    // the healed and resumed ex-leaders stand by for a while without acting
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(candidates);
    // every log written so far, killed candidates' included
    let mut terms: Vec<Term> = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("log dir").flatten() {
        let path = entry.path();
        let identity = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        terms.extend(terms_of(&identity, &path).unwrap_or_else(|e| panic!("{e}")));
    }
    let min_gap = overlaps(&mut terms, &mut violations);
    assert!(
        violations.is_empty(),
        "{} violations (logs in {}):\n{}",
        violations.len(),
        dir.display(),
        violations.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        terms.len() > plan.len(),
        "{} terms for {} faults",
        terms.len(),
        plan.len()
    );
    let max = takeovers.iter().max().copied().unwrap_or_default();
    eprintln!(
        "RESULT leader_election_kill_and_partition: faults injected {bitten} ({}), terms {}, \
         acts outside a term 0, overlapping terms 0, smallest gap between two leaders' acts \
         {:.2}s, takeover max {:.2}s (bound {:.1}s)",
        labels.join(", "),
        terms.len(),
        secs(min_gap),
        max.as_secs_f64(),
        bound.as_secs_f64()
    );
}

/// Fault 8 on the sample controller's own `--leader-elect` path: 3
/// `fault-sample-controller` processes (the sample controller's command
/// line, each behind its own proxy) on one Lease, while a driver keeps
/// changing the replicas of a few Foos (every change is a reconcile with
/// writes). Every reconcile first waits 0-2.5 s (slow work of varying
/// length), so that faults land while reconciles run and an old leader's
/// last reconcile may outlast a new leader's first: a leader must cancel
/// its running reconciles when it loses its lease, and stop its workers
/// before it releases the lease. Each round, seeded order: the leader is
/// paused (SIGSTOP
/// until a standby acts, then SIGCONT), partitioned (stall), stopped
/// gracefully (SIGTERM) or killed. A controller exits when it loses its
/// lease, so each process leads at most once: its acts (write requests,
/// stamped when sent) form one interval, and the intervals of all
/// processes must not overlap; a resumed ex-leader sends no write after
/// SIGCONT; after each fault a new leader acts within [`takeover_bound`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_sample_controller() {
    let seed = seed("fault8::leader_election_sample_controller");
    let mut rng = StdRng::seed_from_u64(seed);
    let bound = takeover_bound();
    let cp = ControlPlane::shared().await.expect("control plane");
    let crds: Vec<_> = sample_controller::crds()
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    cp.install_crds(&crds).await.expect("CRD");
    let ns = cp
        .create_namespace("fault-leader-sample")
        .await
        .expect("namespace");
    let dir = std::env::temp_dir().join(format!(
        "kcache-fault-leader-sample-{}-{seed}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("log dir");
    let admin = std::fs::read_to_string(cp.kubeconfig_path()).expect("kubeconfig");
    let spawn = |identity: String| {
        let dir = dir.clone();
        let ns = ns.clone();
        let admin = admin.clone();
        async move {
            let proxy = FaultProxy::for_url(&cp.server_url()).await.expect("proxy");
            // the admin kubeconfig, pointed at this candidate's proxy
            let kubeconfig = dir.join(format!("{identity}.kubeconfig"));
            std::fs::write(&kubeconfig, admin.replace(&cp.server_url(), &proxy.url()))
                .expect("kubeconfig");
            let log = dir.join(format!("{identity}.log"));
            let stderr =
                std::fs::File::create(dir.join(format!("{identity}.stderr"))).expect("stderr file");
            let child = std::process::Command::new(env!("CARGO_BIN_EXE_fault-sample-controller"))
                .args(["--namespace", &ns, "--workers", "2", "--leader-elect"])
                .args(["--lease-namespace", &ns, "--identity", &identity])
                .args(["--lease-duration", &format!("{LEASE_MS}ms")])
                .args(["--renew-deadline", &format!("{RENEW_MS}ms")])
                .args(["--retry-period", &format!("{RETRY_MS}ms")])
                .env("KUBECONFIG", &kubeconfig)
                .env("KCACHE_FAULT_ACT_LOG", &log)
                .env("KCACHE_FAULT_RECONCILE_DELAY_MS", "0-2500")
                .env("RUST_LOG", "info")
                .stdout(std::process::Stdio::null())
                .stderr(stderr)
                .spawn()
                .expect("spawn fault-sample-controller");
            Candidate {
                identity,
                log,
                proxy,
                child,
            }
        }
    };

    // a few Foos, then a steady stream of changes
    let foos: Api<sample_controller::Foo> = Api::namespaced(cp.client().expect("client"), &ns);
    let names: Vec<String> = (0..4).map(|i| format!("foo{i}")).collect();
    for name in &names {
        let foo = sample_controller::Foo::new(
            name,
            sample_controller::FooSpec {
                deployment_name: format!("{name}-dep"),
                replicas: Some(1),
            },
        );
        foos.create(&PostParams::default(), &foo)
            .await
            .expect("create Foo");
    }
    let stop_driver = tokio_util::sync::CancellationToken::new();
    let driver = tokio::spawn({
        let (foos, names, stop) = (foos.clone(), names.clone(), stop_driver.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ 0xf00);
        async move {
            let mut changes = 0u64;
            while !stop.is_cancelled() {
                let name = &names[rng.random_range(0..names.len())];
                let patch = serde_json::json!({ "spec": { "replicas": rng.random_range(1..6) } });
                if foos
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok()
                {
                    changes += 1;
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(50..150))).await;
            }
            changes
        }
    });

    let mut candidates = Vec::new();
    let mut next_id = 0;
    for _ in 0..3 {
        candidates.push(spawn(format!("ctl-{next_id}")).await);
        next_id += 1;
    }
    let leases: Api<Lease> = Api::namespaced(cp.client().expect("client"), &ns);
    let acting = |c: &Candidate| {
        acts_of(&c.log)
            .last()
            .is_some_and(|(ts, _)| unix_nanos().saturating_sub(*ts) < 2_600_000_000)
    };
    let mut i = leader_index(&candidates, &acting, Duration::from_secs(60), None).await;
    let mut plan = vec![Fault::Pause, Fault::PartitionStall, Fault::Terminate];
    if full() {
        plan.extend([Fault::Kill, Fault::Pause, Fault::Terminate]);
    }
    for k in (1..plan.len()).rev() {
        plan.swap(k, rng.random_range(0..=k));
    }
    let mut takeovers = Vec::new();
    let mut labels = Vec::new();
    let mut violations = Vec::new();
    for (round, &fault) in plan.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1500..3000))).await;
        let old = candidates[i].identity.clone();
        let t0 = unix_nanos();
        assert!(
            inject(&mut candidates[i], fault).await,
            "{}: the fault did not bite",
            fault.label()
        );
        let j = leader_index(
            &candidates,
            &acting,
            bound + Duration::from_secs(5),
            Some(&old),
        )
        .await;
        let new = &candidates[j];
        let first = acts_of(&new.log).first().map_or(0, |(ts, _)| *ts);
        let takeover = Duration::from_nanos(first.saturating_sub(t0) as u64);
        eprintln!(
            "round {round}: {} of {old}: {} acts {:.2}s later",
            fault.label(),
            new.identity,
            takeover.as_secs_f64()
        );
        assert!(
            takeover <= bound,
            "{}: takeover took {takeover:?} (bound {bound:?})",
            fault.label()
        );
        takeovers.push(takeover);
        labels.push(fault.label());
        if fault == Fault::Pause {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let t_cont = unix_nanos();
            send_signal(candidates[i].child.id(), "CONT");
            tokio::time::sleep(Duration::from_secs(2)).await;
            let late: Vec<_> = acts_of(&candidates[i].log)
                .into_iter()
                .filter(|(ts, _)| *ts > t_cont)
                .collect();
            if !late.is_empty() {
                violations.push(format!(
                    "{old}: the paused leader sent {} writes after it resumed (SIGCONT), \
                     having lost its lease while stopped; it must find its renew deadline \
                     passed before acting: {:?}",
                    late.len(),
                    &late[..late.len().min(5)]
                ));
            }
        }
        // the ex-leader exits (a controller stops when it loses its lease);
        // heal its proxy so that it can, and start a fresh standby
        candidates[i].proxy.heal();
        let gone = candidates.remove(i);
        tokio::spawn(async move {
            // bounded: its graceful shutdown may wait for stuck reconciles
            tokio::time::sleep(Duration::from_secs(40)).await;
            drop(gone);
        });
        candidates.push(spawn(format!("ctl-{next_id}")).await);
        next_id += 1;
        i = leader_index(&candidates, &acting, Duration::from_secs(10), None).await;
        assert_eq!(
            lease_holder(&leases, "sample-controller").await.as_deref(),
            Some(candidates[i].identity.as_str()),
            "the acting candidate holds the Lease"
        );
    }
    stop_driver.cancel();
    let changes = driver.await.expect("driver");
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(candidates);
    // each process leads at most once (a controller exits when it loses its
    // lease): its acts form one term
    let mut terms = Vec::new();
    let mut acts = 0;
    for entry in std::fs::read_dir(&dir).expect("log dir").flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let identity = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let a = acts_of(&path);
        acts += a.len();
        if let (Some(first), Some(last)) = (a.first(), a.last()) {
            terms.push(Term {
                identity,
                first_act: first.0,
                last_act: last.0,
            });
        }
    }
    let min_gap = overlaps(&mut terms, &mut violations);
    assert!(
        violations.is_empty(),
        "{} violations (logs in {}):\n{}",
        violations.len(),
        dir.display(),
        violations.join("\n")
    );
    assert!(
        terms.len() > plan.len(),
        "{} leaders for {} faults",
        terms.len(),
        plan.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
    let max = takeovers.iter().max().copied().unwrap_or_default();
    eprintln!(
        "RESULT leader_election_sample_controller: faults injected {} ({}), Foo changes \
         {changes}, writes {acts} by {} leaders, overlapping leaders 0, smallest gap between \
         two leaders' writes {:.2}s, takeover max {:.2}s (bound {:.1}s)",
        labels.len(),
        labels.join(", "),
        terms.len(),
        secs(min_gap),
        max.as_secs_f64(),
        bound.as_secs_f64()
    );
}
