//! Capturing what a test's code logs.
//!
//! [`LogBuffer`] collects the text of a `tracing_subscriber::fmt`
//! subscriber (no colours); [`Logs`] collects events at WARN or above as
//! `LEVEL message field=value ...` strings.

use std::io;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tracing::Level;
use tracing::subscriber::DefaultGuard;

/// The text a fmt subscriber wrote. Cheap to clone.
#[derive(Clone, Default)]
pub struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl LogBuffer {
    /// A fmt subscriber writing events up to `max` here.
    pub fn subscriber(&self, max: Level) -> impl tracing::Subscriber + Send + Sync + 'static {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(max)
            .finish()
    }

    /// Captures on the current thread (a current-thread tokio test runs
    /// its spawned tasks here too) while the guard lives.
    pub fn set_default(max: Level) -> (LogBuffer, DefaultGuard) {
        let logs = LogBuffer::default();
        let guard = tracing::subscriber::set_default(logs.subscriber(max));
        (logs, guard)
    }

    /// Captures for the whole test binary (for a binary of its own: a
    /// thread-local subscriber races with the callsite cache of tests
    /// running in parallel). Panics if a global subscriber is set already.
    pub fn set_global(max: Level) -> LogBuffer {
        let logs = LogBuffer::default();
        tracing::subscriber::set_global_default(logs.subscriber(max))
            .expect("the first global subscriber of this test binary");
        logs
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }

    /// The lines written so far that contain every one of `needles`.
    pub fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .map(str::to_owned)
            .collect()
    }
}

/// Events at WARN or above, as "LEVEL message field=value ...", captured on
/// the current thread (a current-thread tokio test runs its spawned tasks
/// here too) while the value lives.
pub struct Logs {
    events: Arc<Mutex<Vec<String>>>,
    _guard: DefaultGuard,
}

impl Logs {
    /// Starts capturing.
    pub fn capture() -> Logs {
        let events: Arc<Mutex<Vec<String>>> = Arc::default();
        let guard = tracing::subscriber::set_default(WarnCapture(events.clone()));
        Logs {
            events,
            _guard: guard,
        }
    }

    /// Every captured event.
    pub fn all(&self) -> Vec<String> {
        self.events.lock().clone()
    }

    /// The captured events at this level.
    pub fn at(&self, level: Level) -> Vec<String> {
        let prefix = format!("{level} ");
        self.all()
            .into_iter()
            .filter(|e| e.starts_with(&prefix))
            .collect()
    }
}

/// Starts capturing events at WARN or above for the whole test binary
/// (once; later calls do nothing) into [`global_warnings`]. A test binary
/// whose code logs from several threads uses this instead of [`Logs`].
/// Does nothing if another global subscriber was set first.
pub fn capture_global_warnings() {
    GLOBAL.get_or_init(|| {
        let events: Arc<Mutex<Vec<String>>> = Arc::default();
        let _ = tracing::subscriber::set_global_default(WarnCapture(events.clone()));
        events
    });
}

/// The events [`capture_global_warnings`] captured so far, as
/// "LEVEL message field=value ...".
pub fn global_warnings() -> Vec<String> {
    GLOBAL.get().map(|e| e.lock().clone()).unwrap_or_default()
}

static GLOBAL: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();

struct WarnCapture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        use std::fmt::Write;
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

impl tracing::Subscriber for WarnCapture {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() <= Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut f = Fields(e.metadata().level().to_string());
        e.record(&mut f);
        self.0.lock().push(f.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
