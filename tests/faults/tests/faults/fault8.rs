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
//!   [`kcache_lease::LeaderElector`] whose acts are 20 ms ticks while
//!   its leading token is not cancelled and its renew deadline (from
//!   `LeaderElector::lease_expiry`) is ahead on the clock (`lead`, `act`,
//!   `stop`, `lost` lines);
//! - [`leader_election_sample_controller`]: `fault-sample-controller`, the
//!   sample controller's own command line with `--leader-elect` (its
//!   `Controller::run` leader path), whose acts are its write requests to
//!   the apiserver (every POST/PUT/PATCH/DELETE but the Lease's own,
//!   stamped when sent), while a driver keeps changing Foos.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kcache_envtest::ControlPlane;
use kcache_envtest::proxy::FaultProxy;
use kcache_fault_suite::unix_nanos;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::support::{full, seeded};

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

/// Whether `done` holds within `limit` (checked every `step`).
async fn poll_until(limit: Duration, step: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(step).await;
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
            poll_until(
                Duration::from_millis(RETRY_MS * 3),
                Duration::from_millis(20),
                || {
                    let s = c.proxy.stats();
                    s.refused > before.refused || s.cut > before.cut
                },
            )
            .await
        }
        Fault::PartitionStall => {
            c.proxy.stall(true);
            poll_until(
                Duration::from_millis(RETRY_MS * 3),
                Duration::from_millis(20),
                || c.proxy.stats().held_stalled > before.held_stalled,
            )
            .await
        }
        Fault::Pause => {
            send_signal(pid, "STOP");
            poll_until(Duration::from_secs(2), Duration::from_millis(5), || {
                proc_state(pid) == Some('T')
            })
            .await
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

/// The acting candidate once leadership settled (within 10 s); asserts
/// that it holds the Lease `lease_name`.
async fn settled_leader(
    candidates: &[Candidate],
    acting: &dyn Fn(&Candidate) -> bool,
    leases: &Api<Lease>,
    lease_name: &str,
) -> usize {
    let i = leader_index(candidates, acting, Duration::from_secs(10), None).await;
    let holder = leases
        .get(lease_name)
        .await
        .ok()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity);
    assert_eq!(
        holder.as_deref(),
        Some(candidates[i].identity.as_str()),
        "the acting candidate holds the Lease"
    );
    i
}

/// The two kinds of candidate processes (see the module docs).
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `fault-elector`, a bare leader elector.
    Elector,
    /// `fault-sample-controller`, the sample controller's command line.
    SampleController,
}

impl Kind {
    fn program(self) -> &'static str {
        match self {
            Kind::Elector => env!("CARGO_BIN_EXE_fault-elector"),
            Kind::SampleController => env!("CARGO_BIN_EXE_fault-sample-controller"),
        }
    }

    /// The candidates' identities: `<prefix><n>`.
    fn prefix(self) -> &'static str {
        match self {
            Kind::Elector => "cand-",
            Kind::SampleController => "ctl-",
        }
    }

    /// The name of the log directory's test.
    fn test(self) -> &'static str {
        match self {
            Kind::Elector => "leader",
            Kind::SampleController => "leader-sample",
        }
    }
}

/// Starts candidate processes of a [`Kind`], `<prefix>0`, `<prefix>1`,
/// ..., each behind a new proxy of `cp`, each logging to
/// `<dir>/<identity>.log` in a fresh `dir`. `args` adds a candidate's
/// arguments and environment to its command: (the command, its identity,
/// its proxy, its log).
struct Spawner<'a, F> {
    cp: &'a ControlPlane,
    kind: Kind,
    dir: PathBuf,
    next: usize,
    args: F,
}

impl<'a, F: Fn(&mut Command, &str, &FaultProxy, &Path)> Spawner<'a, F> {
    fn new(cp: &'a ControlPlane, kind: Kind, seed: u64, args: F) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "kcache-fault-{}-{}-{seed}",
            kind.test(),
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("log dir");
        Spawner {
            cp,
            kind,
            dir,
            next: 0,
            args,
        }
    }

    /// Starts the next candidate.
    async fn spawn(&mut self) -> Candidate {
        let identity = format!("{}{}", self.kind.prefix(), self.next);
        self.next += 1;
        let proxy = FaultProxy::for_url(&self.cp.server_url())
            .await
            .expect("proxy");
        let log = self.dir.join(format!("{identity}.log"));
        let program = self.kind.program();
        let mut command = Command::new(program);
        command.stdout(std::process::Stdio::null());
        (self.args)(&mut command, &identity, &proxy, &log);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        Candidate {
            identity,
            log,
            proxy,
            child,
        }
    }

    /// Starts 3 candidates.
    async fn spawn_three(&mut self) -> Vec<Candidate> {
        let mut candidates = Vec::new();
        for _ in 0..3 {
            candidates.push(self.spawn().await);
        }
        candidates
    }
}

/// The fault plan: `first` in a seeded order, then seeded picks of
/// `kinds` up to `rounds` faults.
fn plan(rng: &mut StdRng, mut first: Vec<Fault>, kinds: &[Fault], rounds: usize) -> Vec<Fault> {
    for k in (1..first.len()).rev() {
        first.swap(k, rng.random_range(0..=k));
    }
    while first.len() < rounds {
        first.push(kinds[rng.random_range(0..kinds.len())]);
    }
    first
}

/// The rounds of a test: each a fault on the leader and the takeover that
/// follows, bounded by [`takeover_bound`].
struct Rounds {
    bound: Duration,
    takeovers: Vec<Duration>,
    labels: Vec<&'static str>,
}

impl Rounds {
    fn new() -> Rounds {
        Rounds {
            bound: takeover_bound(),
            takeovers: Vec::new(),
            labels: Vec::new(),
        }
    }

    /// After 1.5-3 s more of leadership, injects `fault` on the leader
    /// `candidates[i]` (asserting that it bit), waits for another
    /// candidate to act and checks that its first act (`first_act`) came
    /// within the bound. Returns when the fault was injected.
    async fn fault(
        &mut self,
        rng: &mut StdRng,
        candidates: &mut [Candidate],
        i: usize,
        fault: Fault,
        acting: &dyn Fn(&Candidate) -> bool,
        first_act: &dyn Fn(&Candidate) -> u128,
    ) -> u128 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1500..3000))).await;
        let old = candidates[i].identity.clone();
        let t0 = unix_nanos();
        assert!(
            inject(&mut candidates[i], fault).await,
            "{}: the fault did not bite",
            fault.label()
        );
        let bound = self.bound;
        let j = leader_index(
            candidates,
            acting,
            bound + Duration::from_secs(5),
            Some(&old),
        )
        .await;
        let new = &candidates[j];
        let takeover = Duration::from_nanos(first_act(new).saturating_sub(t0) as u64);
        eprintln!(
            "round {}: {} of {old}: {} acts {:.2}s later",
            self.labels.len(),
            fault.label(),
            new.identity,
            takeover.as_secs_f64()
        );
        assert!(
            takeover <= bound,
            "{}: takeover took {takeover:?} (bound {bound:?})",
            fault.label()
        );
        self.takeovers.push(takeover);
        self.labels.push(fault.label());
        t0
    }

    /// `faults injected N (labels)`, for the RESULT line.
    fn injected(&self) -> String {
        format!(
            "faults injected {} ({})",
            self.labels.len(),
            self.labels.join(", ")
        )
    }

    /// `takeover max Xs (bound Ys)`, for the RESULT line.
    fn takeover(&self) -> String {
        let max = self.takeovers.iter().max().copied().unwrap_or_default();
        format!(
            "takeover max {:.2}s (bound {:.1}s)",
            max.as_secs_f64(),
            self.bound.as_secs_f64()
        )
    }
}

/// The `<identity>.log` files in `dir`: (identity, path).
fn logs(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("log dir").flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let identity = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push((identity, path));
    }
    out
}

/// The final checks of a test: no violation (overlapping `terms`
/// included), and more terms (`what`) than `faults`; then removes the
/// logs in `dir`. Returns the smallest gap between two leaders' acts.
fn check_terms(
    terms: &mut [Term],
    mut violations: Vec<String>,
    faults: usize,
    dir: &Path,
    what: &str,
) -> u128 {
    let min_gap = overlaps(terms, &mut violations);
    assert!(
        violations.is_empty(),
        "{} violations (logs in {}):\n{}",
        violations.len(),
        dir.display(),
        violations.join("\n")
    );
    assert!(
        terms.len() > faults,
        "{} {what} for {faults} faults",
        terms.len()
    );
    let _ = std::fs::remove_dir_all(dir);
    min_gap
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
    let (seed, mut rng) = seeded("fault8::leader_election_kill_and_partition");
    let rounds = if full() { 9 } else { 3 };
    let cp = ControlPlane::shared().await.expect("control plane");
    let ns = cp
        .create_namespace("fault-leader")
        .await
        .expect("namespace");
    let kubeconfig = cp.kubeconfig_path().to_path_buf();
    let lease_name = "fault-leader";
    let mut spawner = Spawner::new(cp, Kind::Elector, seed, |command, identity, proxy, log| {
        command
            .arg(&kubeconfig)
            .arg(proxy.url())
            .arg(&ns)
            .arg(lease_name)
            .arg(identity)
            .arg(log)
            .args([
                LEASE_MS.to_string(),
                RENEW_MS.to_string(),
                RETRY_MS.to_string(),
            ]);
    });
    let mut candidates = spawner.spawn_three().await;
    let leases: Api<Lease> = Api::namespaced(cp.client().expect("client"), &ns);
    let last_term = |c: &Candidate| {
        terms_of(&c.identity, &c.log)
            .unwrap_or_else(|e| panic!("{e}"))
            .last()
            .cloned()
    };
    let acting = |c: &Candidate| {
        last_term(c).is_some_and(|t| unix_nanos().saturating_sub(t.last_act) < 200_000_000)
    };
    let first_act = |c: &Candidate| last_term(c).map_or(0, |t| t.first_act);
    let mut i = leader_index(&candidates, &acting, Duration::from_secs(30), None).await;
    let mut rounds_done = Rounds::new();
    let mut violations = Vec::new();
    // every kind once, in a seeded order, then seeded picks
    let first = vec![Fault::Kill, Fault::Pause, Fault::PartitionStall];
    let kinds = [
        Fault::Kill,
        Fault::PartitionRefuse,
        Fault::PartitionStall,
        Fault::Pause,
    ];
    let plan = plan(&mut rng, first, &kinds, rounds);
    for &fault in &plan {
        let t0 = rounds_done
            .fault(&mut rng, &mut candidates, i, fault, &acting, &first_act)
            .await;
        match fault {
            Fault::Kill => {
                candidates.remove(i);
                candidates.push(spawner.spawn().await);
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
        i = settled_leader(&candidates, &acting, &leases, lease_name).await;
    }
    // the healed and resumed ex-leaders stand by for a while without acting
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(candidates);
    // every log written so far, killed candidates' included
    let mut terms: Vec<Term> = Vec::new();
    for (identity, path) in logs(&spawner.dir) {
        terms.extend(terms_of(&identity, &path).unwrap_or_else(|e| panic!("{e}")));
    }
    let min_gap = check_terms(&mut terms, violations, plan.len(), &spawner.dir, "terms");
    eprintln!(
        "RESULT leader_election_kill_and_partition: {}, terms {}, acts outside a term 0, \
         overlapping terms 0, smallest gap between two leaders' acts {:.2}s, {}",
        rounds_done.injected(),
        terms.len(),
        secs(min_gap),
        rounds_done.takeover()
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
    let (seed, mut rng) = seeded("fault8::leader_election_sample_controller");
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
    let admin = std::fs::read_to_string(cp.kubeconfig_path()).expect("kubeconfig");
    let kind = Kind::SampleController;
    let mut spawner = Spawner::new(cp, kind, seed, |command, identity, proxy, log| {
        // the admin kubeconfig, pointed at this candidate's proxy
        let kubeconfig = log.with_extension("kubeconfig");
        std::fs::write(&kubeconfig, admin.replace(&cp.server_url(), &proxy.url()))
            .expect("kubeconfig");
        let stderr = std::fs::File::create(log.with_extension("stderr")).expect("stderr file");
        command
            .args(["--namespace", &ns, "--workers", "2", "--leader-elect"])
            .args(["--lease-namespace", &ns, "--identity", identity])
            .args(["--lease-duration", &format!("{LEASE_MS}ms")])
            .args(["--renew-deadline", &format!("{RENEW_MS}ms")])
            .args(["--retry-period", &format!("{RETRY_MS}ms")])
            .env("KUBECONFIG", &kubeconfig)
            .env("KCACHE_FAULT_ACT_LOG", log)
            .env("KCACHE_FAULT_RECONCILE_DELAY_MS", "0-2500")
            .env("RUST_LOG", "info")
            .stderr(stderr);
    });

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

    let mut candidates = spawner.spawn_three().await;
    let leases: Api<Lease> = Api::namespaced(cp.client().expect("client"), &ns);
    let acting = |c: &Candidate| {
        acts_of(&c.log)
            .last()
            .is_some_and(|(ts, _)| unix_nanos().saturating_sub(*ts) < 2_600_000_000)
    };
    let first_act = |c: &Candidate| acts_of(&c.log).first().map_or(0, |(ts, _)| *ts);
    let mut i = leader_index(&candidates, &acting, Duration::from_secs(60), None).await;
    let mut first = vec![Fault::Pause, Fault::PartitionStall, Fault::Terminate];
    if full() {
        first.extend([Fault::Kill, Fault::Pause, Fault::Terminate]);
    }
    let plan = plan(&mut rng, first, &[], 0);
    let mut rounds_done = Rounds::new();
    let mut violations = Vec::new();
    for &fault in &plan {
        rounds_done
            .fault(&mut rng, &mut candidates, i, fault, &acting, &first_act)
            .await;
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
                    "{}: the paused leader sent {} writes after it resumed (SIGCONT), \
                     having lost its lease while stopped; it must find its renew deadline \
                     passed before acting: {:?}",
                    candidates[i].identity,
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
        candidates.push(spawner.spawn().await);
        i = settled_leader(&candidates, &acting, &leases, "sample-controller").await;
    }
    stop_driver.cancel();
    let changes = driver.await.expect("driver");
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(candidates);
    // each process leads at most once (a controller exits when it loses its
    // lease): its acts form one term
    let mut terms = Vec::new();
    let mut acts = 0;
    for (identity, path) in logs(&spawner.dir) {
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
    let min_gap = check_terms(&mut terms, violations, plan.len(), &spawner.dir, "leaders");
    eprintln!(
        "RESULT leader_election_sample_controller: {}, Foo changes {changes}, writes {acts} \
         by {} leaders, overlapping leaders 0, smallest gap between two leaders' writes \
         {:.2}s, {}",
        rounds_done.injected(),
        terms.len(),
        secs(min_gap),
        rounds_done.takeover()
    );
}
