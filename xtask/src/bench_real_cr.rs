//! `cargo xtask bench-compare --real --custom-resources`: the reference
//! measurement of custom resources (issue 31) against the real
//! kube-apiserver of the local control plane, started with the
//! `CBORServingAndStorage` gate on.
//!
//! N custom resources (`apps.kcache.dev/v1` `Application`, a GitOps-style
//! record of about 5 KB: a spec with Helm parameters written by
//! `gitops-applier`, a status with a resource list and sync history written
//! by `application-controller`; see `benches/compare/src/real.rs`) are
//! created through the API; then each client syncs them, alternately, by
//! paged list and by streaming list:
//!
//! - kcache on `DynamicObject`, JSON forced and `--wire-format auto` (CBOR);
//! - client-go's dynamic informer, its default (JSON) and with the
//!   `ClientsAllowCBOR` / `ClientsPreferCBOR` gates;
//! - kube-runtime's watcher and store on `DynamicObject` (JSON).
//!
//! Columns as the Pod table of [`crate::bench_real`]; then a steady-memory
//! step (paged sync, kcache waits for its background compression) and the
//! ratios against client-go's best configuration, with the goals of the
//! issue stated as met or not. `--write-docs` writes the tables into
//! docs/performance.md.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use crate::bench_common::{Bins, machine};
use crate::bench_real::{
    Load, Mode, RealClient, RealResults, RealSettings, Row, SyncRun, code_list, finish, mem_row,
    ratio, row, start_plane, summary, sync_table,
};

/// The clients of the custom-resource table, in the order they run.
pub const CR_CLIENTS: [RealClient; 5] = [
    RealClient::KcacheCrCbor,
    RealClient::KcacheCrJson,
    RealClient::ClientGoCrJson,
    RealClient::ClientGoCrCbor,
    RealClient::KubeRuntimeCr,
];

/// The client-go configurations kcache is compared with.
const CLIENT_GO: [RealClient; 2] = [RealClient::ClientGoCrJson, RealClient::ClientGoCrCbor];

const BEGIN: &str = "<!-- bench-compare-real-cr:begin -->";
const END: &str = "<!-- bench-compare-real-cr:end -->";

/// Runs `--real --custom-resources` (`s.pods` is the number of custom
/// resources).
pub fn run(bins: &Bins, s: RealSettings, out: &Path, write_docs: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let log = out.join("real-cr-clients.log");
    let _ = std::fs::remove_file(&log);
    let mut res = RealResults {
        machine: machine(),
        ..RealResults::default()
    };
    let audit_log = out.join("real-cr-audit.log");
    let _ = std::fs::remove_file(&audit_log);
    eprintln!(
        "\n==> bench-compare --real --custom-resources: N={} custom resources, {} runs per client and mode; clients' stderr in {}",
        s.pods,
        s.reps,
        log.display()
    );
    let plane = start_plane(bins, &s, out, &audit_log, true, &mut res)?;

    let total = 2 * s.reps * CR_CLIENTS.len() + s.mem_reps * CR_CLIENTS.len();
    let mut done = 0usize;
    let t0 = Instant::now();
    let ctx = plane.ctx(bins, &log, &audit_log, &s, out);
    for mode in [Mode::Paged, Mode::Streaming] {
        // the first sync after the load is the slowest whoever runs it
        let r = ctx.run_one(RealClient::KcacheCrCbor, mode, Load::Sync)?;
        eprintln!(
            "[warm-up] {:>4.0}s  {:<9} {:<44} (not counted): {}",
            t0.elapsed().as_secs_f64(),
            mode.name(),
            RealClient::KcacheCrCbor.label(),
            summary(&r, s.pods)
        );
        for rep in 0..s.reps {
            // rotate the order so that no client always follows the same one
            let mut order = CR_CLIENTS;
            order.rotate_left(rep % CR_CLIENTS.len());
            for c in order {
                done += 1;
                let r = ctx.run_one(c, mode, Load::Sync)?;
                eprintln!(
                    "[{done:>2}/{total}] {:>4.0}s  {:<9} {:<44} #{}: {}",
                    t0.elapsed().as_secs_f64(),
                    mode.name(),
                    c.label(),
                    rep + 1,
                    summary(&r, s.pods)
                );
                res.syncs.push(r);
            }
        }
    }
    for rep in 0..s.mem_reps {
        for c in CR_CLIENTS {
            done += 1;
            let r = ctx.run_one(c, Mode::Paged, Load::Memory)?;
            eprintln!(
                "[{done:>2}/{total}] {:>4.0}s  memory    {:<44} #{}: steady RSS {:.2} KiB/object (waited {:.0}s)",
                t0.elapsed().as_secs_f64(),
                c.label(),
                rep + 1,
                r.done.rss_kb.saturating_sub(r.done.baseline_rss_kb) as f64 / s.pods.max(1) as f64,
                r.done.waited_secs
            );
            res.memory.push(r);
        }
    }
    drop(plane);
    res.total_secs = started.elapsed().as_secs_f64();
    res.settings = Some(s.clone());
    finish(
        &mut res,
        |res| markdown(res, &s),
        out,
        "real-cr",
        "--real --custom-resources",
        write_docs.then_some((BEGIN, END)),
    )
}

/// client-go's best configuration in `mode`: the one with the lower client
/// CPU per object.
fn client_go_best(res: &RealResults, mode: Mode, s: &RealSettings) -> Option<(RealClient, Row)> {
    CLIENT_GO
        .iter()
        .filter_map(|&c| row(res, c, mode, s).map(|r| (c, r)))
        .min_by(|a, b| a.1.client_us.total_cmp(&b.1.client_us))
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "**not met**" }
}

/// The tables of a `--real --custom-resources` run.
pub fn markdown(res: &RealResults, s: &RealSettings) -> String {
    let mut t = String::new();
    if s.quick {
        t.push_str(
            "**A `--quick` run: a check of the harness, not the reference measurement** \
             (small N, few runs; the full `cargo xtask bench-compare --real --custom-resources --write-docs` replaces it).\n\n",
        );
    }
    let kb = res.load["avg_json_bytes"].as_f64().unwrap_or(f64::NAN) / 1000.0;
    let _ = writeln!(
        t,
        "N = {} custom resources (`apps.kcache.dev/v1` `Application`, a GitOps-style record: spec with 14 Helm \
         parameters by field manager `gitops-applier`, status with 8 managed resources, 4 history entries and an operation \
         state by `application-controller`; mean {kb:.1} KB of JSON each, managedFields included) in kube-apiserver \
         v1.37.2 of the local control plane started with `CBORServingAndStorage`; {} run(s) per client and mode, order \
         rotated; medians. Total {:.0}s{}.\n",
        s.pods,
        s.reps,
        res.total_secs,
        if s.quick { " (`--quick`)" } else { "" }
    );
    sync_table(&mut t, res, &CR_CLIENTS, s, "custom resources");

    // steady memory per object (paged sync, kcache after background compression)
    let mems: Vec<(RealClient, f64)> = CR_CLIENTS
        .iter()
        .filter_map(|&c| mem_row(res, c, s).map(|m| (c, m.rss_kib)))
        .collect();
    if !mems.is_empty() {
        let _ = writeln!(
            t,
            "\nSteady memory after a paged sync ({} run(s) each; kcache waits for its background compression, the Go \
             client runs `runtime.GC()` and `debug.FreeOSMemory()`): RSS less the RSS before the informer started, per object.\n",
            s.mem_reps
        );
        t.push_str("| client | steady RSS / object |\n|---|---:|\n");
        for (c, kib) in &mems {
            let _ = writeln!(t, "| {} | {kib:.2} KiB |", c.label());
        }
    }
    let mem_of = |c: RealClient| mems.iter().find(|m| m.0 == c).map(|m| m.1);
    let go_mem = CLIENT_GO
        .iter()
        .filter_map(|&c| mem_of(c))
        .min_by(f64::total_cmp);

    t.push_str(
        "\nAgainst client-go's best configuration (per mode, the dynamic informer configuration with the lower client CPU \
         per object; steady memory: the lower of the two).\n\n",
    );
    t.push_str("| kcache / client-go best | client-go best | objects/s | client CPU / object (goal ≤ 0.3x) | apiserver CPU / object (goal ≤ 1x) | steady RSS (goal ≤ 0.3x) | bytes received |\n");
    t.push_str("|---|---|---:|---:|---:|---:|---:|\n");
    let mut goals: Vec<String> = Vec::new();
    for mode in [Mode::Paged, Mode::Streaming] {
        let Some((gc, g)) = client_go_best(res, mode, s) else {
            continue;
        };
        for c in [RealClient::KcacheCrCbor, RealClient::KcacheCrJson] {
            let Some(k) = row(res, c, mode, s) else {
                continue;
            };
            let mem = match (mem_of(c), go_mem) {
                (Some(a), Some(b)) if mode == Mode::Paged => ratio(a, b),
                _ => "(paged only)".into(),
            };
            let _ = writeln!(
                t,
                "| {}: {} | {} | {} | {} | {} | {mem} | {} |",
                mode.name(),
                c.label(),
                gc.label(),
                ratio(k.objects_per_sec, g.objects_per_sec),
                ratio(k.client_us, g.client_us),
                ratio(k.apiserver_us, g.apiserver_us),
                ratio(k.rx_bytes, g.rx_bytes)
            );
            if c == RealClient::KcacheCrCbor {
                goals.push(format!(
                    "{}: client CPU {} ({}), apiserver CPU {} ({})",
                    mode.name(),
                    ratio(k.client_us, g.client_us),
                    met(k.client_us <= 0.3 * g.client_us),
                    ratio(k.apiserver_us, g.apiserver_us),
                    met(k.apiserver_us <= g.apiserver_us)
                ));
            }
        }
    }
    if let (Some(k), Some(g)) = (mem_of(RealClient::KcacheCrCbor), go_mem) {
        goals.push(format!(
            "steady memory {} ({})",
            ratio(k, g),
            met(k <= 0.3 * g)
        ));
    }
    if !goals.is_empty() {
        let _ = writeln!(
            t,
            "\nGoals of issue 31 for kcache with CBOR: {}.",
            goals.join("; ")
        );
    }

    // what each client asked for: the audit log's request shapes and
    // client-go's own record of Accept and the response's Content-Type
    t.push_str(
        "\nRequests (first run of each client and mode, from the apiserver's audit log):\n\n",
    );
    for mode in [Mode::Paged, Mode::Streaming] {
        for c in CR_CLIENTS {
            if let Some(r) = first_run(res, c, mode) {
                let _ = writeln!(
                    t,
                    "- {} {}: {}",
                    mode.name(),
                    c.label(),
                    code_list(&r.audit, ", ")
                );
                if !r.synced.requests.is_empty() {
                    let _ = writeln!(
                        t,
                        "  - as client-go saw them: {}",
                        code_list(&r.synced.requests, ", ")
                    );
                }
            }
        }
    }
    t.push_str("\nMachine:\n\n");
    for (k, v) in &res.machine {
        let _ = writeln!(t, "- {k}: {v}");
    }
    // the command as run (its flags: N, repetitions, --quick)
    let args: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(
        t,
        "\nCommand: `cargo xtask {}` (files in `target/bench-compare/real-cr.*`).",
        args.join(" ")
    );
    t
}

fn first_run(res: &RealResults, c: RealClient, mode: Mode) -> Option<&SyncRun> {
    res.syncs.iter().find(|r| r.client == c && r.mode == mode)
}
