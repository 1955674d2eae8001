//! Prometheus's standard process metrics, read from `/proc/self` at scrape
//! time (Linux; elsewhere, or when `/proc` cannot be read, they are
//! absent): `process_resident_memory_bytes`, `process_cpu_seconds_total`,
//! `process_open_fds`, `process_start_time_seconds`.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Registers the process collector in `registry`.
pub(super) fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

/// The figures of one scrape; each `None` when it could not be read.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct ProcessStats {
    pub(crate) resident_memory_bytes: Option<u64>,
    pub(crate) cpu_seconds: Option<f64>,
    pub(crate) open_fds: Option<u64>,
    pub(crate) start_time_seconds: Option<f64>,
}

/// The clock ticks per second of `/proc` times: the kernel's USER_HZ,
/// which is 100 on every architecture Rust targets (the Prometheus Go
/// client's procfs assumes the same).
const USER_HZ: f64 = 100.0;

/// Reads the stats of this process (all `None` where there is no `/proc`).
pub(crate) fn read() -> ProcessStats {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let fields = stat.as_deref().and_then(stat_fields);
    let field = |i: usize| -> Option<u64> { fields.as_ref()?.get(i)?.parse().ok() };
    // field numbers (proc(5)) minus 3: the list starts at field 3, `state`
    let cpu_seconds = match (field(14 - 3), field(15 - 3)) {
        (Some(u), Some(s)) => Some((u + s) as f64 / USER_HZ),
        _ => None,
    };
    let boot_time = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    let start_time_seconds = match (boot_time, field(22 - 3)) {
        (Some(b), Some(t)) => Some(b as f64 + t as f64 / USER_HZ),
        _ => None,
    };
    let resident_memory_bytes = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let kb = s.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
            let kb = kb.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
            Some(kb.saturating_mul(1024))
        });
    let open_fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as u64);
    ProcessStats {
        resident_memory_bytes,
        cpu_seconds,
        open_fds,
        start_time_seconds,
    }
}

/// The fields of `/proc/self/stat` from `state` (field 3) on: the command
/// name (field 2) may hold spaces and parentheses, so split after the last
/// `)`.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = read();
        // a collector's HELP text is written as given: end it in a period
        // here (the registry adds one to registered metrics' texts)
        if let Some(v) = s.cpu_seconds {
            let c = ConstCounter::new(v);
            let m = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                c.metric_type(),
            )?;
            c.encode(m)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                s.resident_memory_bytes.map(|v| v as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                s.open_fds.map(|v| v as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                s.start_time_seconds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let g = ConstGauge::new(v);
                let m = encoder.encode_descriptor(name, help, None, g.metric_type())?;
                g.encode(m)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_skip_a_command_name_with_spaces_and_parentheses() {
        let f = stat_fields("42 (a (b) c) S 1 2 3").unwrap();
        assert_eq!(f, ["S", "1", "2", "3"]);
        assert_eq!(stat_fields("garbage"), None);
    }
}
