//! Per-handler listeners: an unbounded buffer and a thread each, so that a
//! slow or stuck handler delays only itself.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use kcache_core::{CachedObject, ObjectOrTombstone};
use tokio::time::Instant;

use crate::handler::ResourceEventHandler;

/// client-go's initial listener buffer size; the buffer doubles as needed.
pub(crate) const INITIAL_BUFFER_SIZE: usize = 1024;

/// One change, as queued for a handler.
pub(crate) enum Notification<K> {
    Add {
        obj: CachedObject<K>,
        is_in_initial_list: bool,
    },
    Update {
        old: CachedObject<K>,
        new: CachedObject<K>,
    },
    Delete {
        obj: ObjectOrTombstone<K>,
    },
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => Notification::Add {
                obj: obj.clone(),
                is_in_initial_list: *is_in_initial_list,
            },
            Notification::Update { old, new } => Notification::Update {
                old: old.clone(),
                new: new.clone(),
            },
            Notification::Delete { obj } => Notification::Delete { obj: obj.clone() },
        }
    }
}

impl<K> Notification<K> {
    fn key(&self) -> &str {
        match self {
            Notification::Add { obj, .. } => obj.key(),
            Notification::Update { new, .. } => new.key(),
            Notification::Delete { obj } => obj.key(),
        }
    }
    fn is_initial_add(&self) -> bool {
        matches!(
            self,
            Notification::Add {
                is_in_initial_list: true,
                ..
            }
        )
    }
}

struct Buffer<K> {
    items: VecDeque<Notification<K>>,
    closed: bool,
    /// A notification is being handled right now.
    busy: bool,
}

struct Resync {
    /// What the handler asked for (after the 1 s minimum).
    requested: Duration,
    /// What is used: `requested` adjusted to the informer's check period,
    /// or zero when the informer does not resync.
    period: Duration,
    next: Instant,
}

/// Shared "has the informer synced" flag, read by registrations.
pub(crate) type SyncedFn = Arc<dyn Fn() -> bool + Send + Sync>;

pub(crate) struct Listener<K> {
    pub(crate) id: u64,
    pub(crate) name: String,
    handler: Box<dyn ResourceEventHandler<K>>,
    buffer: Mutex<Buffer<K>>,
    wake: Condvar,
    resync: Mutex<Resync>,
    pending_initial: AtomicUsize,
    panics: AtomicU64,
    delivered: AtomicU64,
    upstream_synced: SyncedFn,
    started: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: 'static> Listener<K> {
    pub(crate) fn new(
        id: u64,
        name: String,
        handler: Box<dyn ResourceEventHandler<K>>,
        requested_resync: Duration,
        resync: Duration,
        upstream_synced: SyncedFn,
    ) -> Arc<Self> {
        Arc::new(Listener {
            id,
            name,
            handler,
            buffer: Mutex::new(Buffer {
                items: VecDeque::with_capacity(INITIAL_BUFFER_SIZE),
                closed: false,
                busy: false,
            }),
            wake: Condvar::new(),
            resync: Mutex::new(Resync {
                requested: requested_resync,
                period: resync,
                next: Instant::now() + resync,
            }),
            pending_initial: AtomicUsize::new(0),
            panics: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            upstream_synced,
            started: AtomicBool::new(false),
            thread: Mutex::new(None),
        })
    }

    /// Queues a notification; never blocks on the handler.
    pub(crate) fn add(&self, n: Notification<K>) {
        let mut buf = lock(&self.buffer);
        if buf.closed {
            return;
        }
        if n.is_initial_add() {
            self.pending_initial.fetch_add(1, Ordering::SeqCst);
        }
        buf.items.push_back(n);
        drop(buf);
        self.wake.notify_one();
    }

    /// Starts the listener's thread (once).
    pub(crate) fn start(self: &Arc<Self>) -> std::io::Result<()> {
        if self.started.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let me = self.clone();
        let handle = std::thread::Builder::new()
            .name(format!("kcache-listener-{}", self.id))
            .spawn(move || me.run())?;
        *lock(&self.thread) = Some(handle);
        Ok(())
    }

    fn run(&self) {
        loop {
            let n = {
                let mut buf = lock(&self.buffer);
                buf.busy = false;
                loop {
                    if buf.closed {
                        return;
                    }
                    if let Some(n) = buf.items.pop_front() {
                        buf.busy = true;
                        break n;
                    }
                    buf = self.wake.wait(buf).unwrap_or_else(PoisonError::into_inner);
                }
            };
            self.dispatch(n);
        }
    }

    fn dispatch(&self, n: Notification<K>) {
        let initial = n.is_initial_add();
        let result = catch_unwind(AssertUnwindSafe(|| match &n {
            Notification::Add {
                obj,
                is_in_initial_list,
            } => self.handler.on_add(obj, *is_in_initial_list),
            Notification::Update { old, new } => self.handler.on_update(old, new),
            Notification::Delete { obj } => self.handler.on_delete(obj),
        }));
        if let Err(panic) = result {
            self.panics.fetch_add(1, Ordering::Relaxed);
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(non-string panic payload)".into());
            tracing::error!(
                handler = %self.name,
                key = %n.key(),
                panic = %message,
                "event handler panicked; the event is skipped and the handler keeps receiving later events"
            );
        }
        self.delivered.fetch_add(1, Ordering::Relaxed);
        if initial {
            self.pending_initial.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Stops the listener: pending notifications are dropped, the thread
    /// ends after the handler call in progress (if any) returns.
    pub(crate) fn close(&self) {
        let mut buf = lock(&self.buffer);
        buf.closed = true;
        buf.items.clear();
        drop(buf);
        self.pending_initial.store(0, Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// Waits for the thread to end (after [`Listener::close`]). Blocking.
    pub(crate) fn join(&self) {
        let handle = lock(&self.thread).take();
        if let Some(h) = handle
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }

    /// Notifications waiting for the handler.
    pub(crate) fn backlog(&self) -> usize {
        lock(&self.buffer).items.len()
    }

    /// Whether nothing is waiting and the handler is not running.
    pub(crate) fn idle(&self) -> bool {
        let buf = lock(&self.buffer);
        buf.items.is_empty() && !buf.busy
    }

    pub(crate) fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    pub(crate) fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// The informer synced and every initial add queued for this handler has
    /// returned from it.
    pub(crate) fn has_synced(&self) -> bool {
        (self.upstream_synced)() && self.pending_initial.load(Ordering::SeqCst) == 0
    }

    pub(crate) fn should_resync(&self, now: Instant) -> bool {
        let r = lock(&self.resync);
        !r.period.is_zero() && now >= r.next
    }

    pub(crate) fn determine_next_resync(&self, now: Instant) {
        let mut r = lock(&self.resync);
        r.next = now + r.period;
    }

    pub(crate) fn requested_resync_period(&self) -> Duration {
        lock(&self.resync).requested
    }

    pub(crate) fn resync_period(&self) -> Duration {
        lock(&self.resync).period
    }

    pub(crate) fn set_resync_period(&self, period: Duration) {
        lock(&self.resync).period = period;
    }
}
