//! kcache's fault suite (issue 9). The tests live under `tests/`:
//! informers run against a real local control plane (kcache-envtest)
//! behind a fault-injecting TCP proxy (kcache-envtest's `proxy` module) and a
//! client layer that answers 429/500, while a seeded driver creates,
//! updates and deletes ConfigMaps. See `docs/reliability.md`. This library
//! holds what the fault-8 candidate processes (`src/bin`) and the tests
//! that read their logs share.

use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (0 if the clock is before it): the
/// stamps of the candidates' logs.
pub fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A candidate's log: lines `<what> <unix nanos>[ <detail>]`, appended
/// with one unbuffered write each, so that a SIGKILL loses nothing
/// written.
#[derive(Clone, Debug)]
pub struct StampLog(Arc<Mutex<std::fs::File>>);

impl StampLog {
    /// Opens `path` for appending (creating it).
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<StampLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(StampLog(Arc::new(Mutex::new(file))))
    }

    /// Appends `<what> <now>`, then ` <detail>` unless `detail` is empty.
    pub fn note(&self, what: &str, detail: &str) {
        let mut line = format!("{what} {}", unix_nanos());
        if !detail.is_empty() {
            line.push(' ');
            line.push_str(detail);
        }
        line.push('\n');
        let mut f = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // a failed write loses one line: the test reading the log sees a
        // gap, not a wrong line
        let _ = f.write_all(line.as_bytes());
    }
}
