//! The run of a [`SharedIndexInformer`]: claiming it, building the queue
//! and the reflector, the loop that pops the queue into the indexer and
//! the handlers, and the shutdown (draining, snapshots, listener threads).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kcache_core::sync::lock;
use kcache_core::{BoxError, ErrorChain, ReflectorStore};
use kcache_deltafifo::{DeltaFifo, FifoOptions, PopError, Queue, RealFifo, TransformFunc};
use kcache_reflector::{Reflector, ReflectorError};
use kube::Resource;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::deltas::ResyncGate;
use super::{FifoKind, Lifecycle, SharedIndexInformer};
use crate::background_compression::Compactor;
use crate::error::InformerError;
use crate::listener::Listener;
use crate::snapshot::{
    Loaded, PushTracker, SnapshotError, SnapshotPlan, SnapshotWriter, WriteStats, join_write,
};

/// Parked listeners are woken at least once per this many pops.
const FLUSH_EVERY: u64 = 256;

impl<K: Resource + 'static> SharedIndexInformer<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// Runs the informer until `cancel` fires: lists and watches, keeps the
    /// cache, notifies handlers. Returns once everything it started has
    /// stopped (listener threads included, within the handler shutdown
    /// timeout). A second call is an error.
    ///
    /// With [snapshots](crate::InformerConfig::snapshot), a matching
    /// snapshot is loaded first (warm start), snapshots are written while
    /// synced, and a last one after cancellation (what is still queued is
    /// processed first, so handlers may receive a few events after
    /// `cancel`).
    ///
    /// The run is claimed when this future is first polled, before it
    /// waits for anything: a second `run` returns
    /// [`InformerError::AlreadyStarted`] at once (a
    /// [`try_start`](Self::try_start) gets `None`). To claim synchronously,
    /// before spawning, use [`try_start`](Self::try_start).
    ///
    /// On shutdown, each handler gets up to the
    /// [handler shutdown timeout](crate::InformerConfig::handler_shutdown_timeout)
    /// to return from the call it is in; a handler that does not is named in
    /// a WARN and its thread is left running, detached, and `run` returns.
    pub async fn run(&self, cancel: CancellationToken) -> Result<(), InformerError> {
        self.claim()?;
        self.run_claimed(cancel).await
    }

    /// Claims this informer's run and spawns it on the current tokio
    /// runtime, atomically: whoever calls `try_start` (or
    /// [`run`](Self::run)) first owns the run, and every later caller gets
    /// `None` (the informer already runs, or ran, under another owner).
    /// [`has_started`](Self::has_started) is true as soon as this returns.
    ///
    /// The handle yields what [`run`](Self::run) returns; only the owner
    /// should cancel `cancel` (an informer shared through a factory belongs
    /// to the factory when the factory started it first).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, like `tokio::spawn`.
    pub fn try_start(
        &self,
        cancel: CancellationToken,
    ) -> Option<JoinHandle<Result<(), InformerError>>> {
        self.claim().ok()?;
        let me = self.clone();
        Some(tokio::spawn(async move { me.run_claimed(cancel).await }))
    }

    /// Takes the one run of this informer, under the lifecycle lock.
    fn claim(&self) -> Result<(), InformerError> {
        let mut lc = lock(&self.inner.lifecycle);
        if lc.started {
            return Err(InformerError::AlreadyStarted("run"));
        }
        if lc.stopped {
            return Err(InformerError::Stopped);
        }
        lc.started = true;
        Ok(())
    }

    /// The run, once [`claim`](Self::claim)ed; client-go's
    /// `sharedIndexInformer.Run`: load a snapshot, build the queue and the
    /// reflector, run the reflector, pop the queue until cancelled, then
    /// finish the snapshots and stop the listeners.
    async fn run_claimed(&self, cancel: CancellationToken) -> Result<(), InformerError> {
        let started_at = Instant::now();
        let plan = tokio::select! {
            biased;
            _ = cancel.cancelled() => SnapshotPlan::default(),
            p = self.prepare_snapshot() => p,
        };
        let writer = plan.writer;
        let run = self.start(plan.loaded)?;
        let warm = !self.inner.current.load(Ordering::Acquire);
        let reflector_task = {
            let reflector = run.reflector.clone();
            let token = cancel.child_token();
            tokio::spawn(async move { reflector.run(token).await })
        };
        let compactor = self.start_compactor(&cancel);
        let mut state = LoopState::new(started_at, warm, writer.as_ref());
        self.process_loop(&cancel, &run, writer.as_ref(), &mut state)
            .await;
        run.queue.close();
        let _ = reflector_task.await;
        if let Some((token, task)) = compactor {
            token.cancel();
            let _ = task.await;
        }
        self.finish_snapshots(&run, writer.as_ref(), state.write_task)
            .await;
        self.stop_listeners().await;
        tracing::debug!(informer = %self.inner.name, "informer stopped");
        Ok(())
    }

    /// Spawns the background compactor (unless it is off), stopped by the
    /// returned token or by `cancel`.
    fn start_compactor(
        &self,
        cancel: &CancellationToken,
    ) -> Option<(CancellationToken, JoinHandle<()>)> {
        let config = self.inner.background_compression.clone();
        if !config.is_enabled() {
            return None;
        }
        let token = cancel.child_token();
        let compactor = Compactor::new(
            config,
            self.inner.indexer.clone(),
            self.inner.compaction.clone(),
        );
        let task = tokio::spawn(compactor.run(token.clone()));
        Some((token, task))
    }

    /// Pops the queue into the indexer and the handlers until `cancel` or
    /// the queue closes (client-go's `processLoop`); between pops, marks a
    /// warm-started cache current once the reflector confirms it, and
    /// writes the periodic snapshots.
    async fn process_loop(
        &self,
        cancel: &CancellationToken,
        run: &Started<K>,
        writer: Option<&SnapshotWriter>,
        state: &mut LoopState,
    ) {
        let inner = self.inner.clone();
        loop {
            let step = tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                _ = run.reflector.wait_synced(), if state.awaiting_confirmation => Step::Confirmed,
                r = join_write(&mut state.write_task), if state.write_task.is_some() => Step::Written(r),
                _ = tick(state.snapshot_timer.as_mut()) => Step::SnapshotDue,
                r = run.queue.pop(Box::new(|deltas, initial| inner.handle_deltas(deltas, initial))) => Step::Popped(r),
            };
            if !self.apply_step(step, &run.queue, state) {
                break;
            }
            self.after_step(run, writer, state);
        }
    }

    /// Applies one wake-up of the loop to its state; false when the queue
    /// has closed (the loop ends).
    fn apply_step(&self, step: Step, queue: &Arc<dyn Queue<K>>, state: &mut LoopState) -> bool {
        match step {
            Step::Confirmed => {
                state.awaiting_confirmation = false;
                // everything queued now arrived before the confirmation
                state.confirm_target = Some(state.pops + queue.len() as u64);
            }
            Step::Written(r) => {
                state.write_task = None;
                self.record_write(r);
            }
            Step::SnapshotDue => state.snapshot_due = true,
            Step::Popped(Ok(())) => {
                state.pops += 1;
                self.inner.queued_items(queue.len());
            }
            Step::Popped(Err(PopError::Closed)) => return false,
            Step::Popped(Err(PopError::Process(e))) => {
                state.pops += 1;
                tracing::warn!(informer = %self.inner.name, error = %ErrorChain(&*e), "handling deltas failed");
            }
        }
        true
    }

    /// The bookkeeping after each wake-up: wakes the listeners, marks a
    /// warm-started cache current, records the time to sync, pushes the
    /// cache metrics and starts a due snapshot write.
    fn after_step(&self, run: &Started<K>, writer: Option<&SnapshotWriter>, state: &mut LoopState) {
        let queue = &run.queue;
        // Listeners are woken in batches while deltas keep coming; wake
        // them for what is left once the queue has run dry, and every
        // FLUSH_EVERY pops in any case (a listener that gets few of a
        // long run of deltas, e.g. one not resyncing during another's
        // resync, does not wait for the whole run).
        let flush = state.pops.is_multiple_of(FLUSH_EVERY) || queue.is_empty();
        if flush {
            self.inner.processor.flush();
        }
        if let Some(target) = state.confirm_target
            && (state.pops >= target || queue.is_empty())
        {
            state.confirm_target = None;
            self.inner.current.store(true, Ordering::Release);
            tracing::info!(informer = %self.inner.name, "warm start: the cache is current");
        }
        if !state.synced_recorded && self.has_synced() {
            state.synced_recorded = true;
            let mut st = lock(&self.inner.snapshot_status);
            st.time_to_synced = Some(state.started_at.elapsed());
            self.inner.snapshot_changed(&st);
        }
        if flush || state.synced_recorded != state.synced_pushed {
            // the cache's metrics follow the listeners' wake-ups
            state.synced_pushed = state.synced_recorded;
            self.inner.push_cache_metrics(state.synced_recorded);
        }
        if state.snapshot_due
            && state.write_task.is_none()
            && self.has_synced()
            && let (Some(w), Some(t)) = (writer, &run.tracker)
            && let Some((rv, items)) = self.capture(queue, t)
        {
            state.snapshot_due = false;
            state.write_task = Some(w.spawn_write(rv, items));
        }
    }

    /// Pops the (closed) queue into the indexer and the handlers until it
    /// is empty.
    pub(crate) async fn drain(&self, queue: &Arc<dyn Queue<K>>) {
        let inner = self.inner.clone();
        loop {
            match queue
                .pop(Box::new(|deltas, initial| {
                    inner.handle_deltas(deltas, initial)
                }))
                .await
            {
                Ok(()) => {}
                Err(PopError::Closed) => break,
                Err(PopError::Process(e)) => {
                    tracing::warn!(informer = %self.inner.name, error = %ErrorChain(&*e), "handling deltas failed");
                }
            }
        }
    }

    /// Stops the listeners (the current and the removed ones), waits for
    /// their threads, and marks the informer stopped.
    async fn stop_listeners(&self) {
        let mut listeners = self.inner.processor.stop();
        listeners.append(&mut lock(&self.inner.retired));
        self.join_listeners(listeners).await;
        lock(&self.inner.lifecycle).stopped = true;
        self.inner.stopped.cancel();
    }

    /// Waits, up to the handler shutdown timeout, for the threads of the
    /// (closed) listeners to end, without blocking the runtime; names each
    /// handler still in a call after that in a WARN and leaves its thread
    /// detached.
    async fn join_listeners(&self, mut waiting: Vec<Arc<Listener<K>>>) {
        let timeout = self.inner.handler_shutdown_timeout;
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            waiting.retain(|l| !l.try_join());
            let now = Instant::now();
            if waiting.is_empty() || now >= deadline {
                break;
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
        for l in waiting {
            let stuck_in = l.stuck_in().unwrap_or_else(|| "(unknown)".to_owned());
            tracing::warn!(
                informer = %self.inner.name,
                handler = %l.name,
                stuck_in = %stuck_in,
                timeout_s = timeout.as_secs_f64(),
                "an event handler did not return within the handler shutdown timeout; its thread is left running, detached, and the informer stops without it: make the handler return (handlers must not block), or raise handler_shutdown_timeout"
            );
            l.detach();
        }
    }

    /// Builds this run's queue and reflector (what client-go's `Run` does
    /// before it starts the controller), with a loaded snapshot queued
    /// first; records both in the lifecycle and starts the listeners'
    /// threads.
    fn start(&self, warm: Option<Loaded<K>>) -> Result<Started<K>, InformerError> {
        let mut lc = lock(&self.inner.lifecycle);
        // claimed by `run`/`try_start`; `stopped` is set only at the end of
        // the one run
        debug_assert!(lc.started && !lc.stopped);
        // Snapshot objects were transformed before they were written: the
        // transform is bypassed while they are queued.
        let bypass = Arc::new(AtomicBool::new(false));
        let InitialQueue { queue, resume_rv } = self.queue_snapshot(&lc, &bypass, warm);
        let tracker = self.inner.snapshot.as_ref().map(|_| {
            Arc::new(PushTracker {
                last_rv: Mutex::new(resume_rv.clone().unwrap_or_default()),
            })
        });
        let sink: Arc<dyn ReflectorStore<K>> = Arc::new(ResyncGate {
            queue: queue.clone(),
            informer: Arc::downgrade(&self.inner),
            tracker: tracker.clone(),
        });
        let reflector = Arc::new(self.build_reflector(&lc, sink, resume_rv));
        lc.queue = Some(queue.clone());
        lc.reflector = Some(reflector.clone());
        self.inner.processor.run().map_err(InformerError::Thread)?;
        Ok(Started {
            queue,
            reflector,
            tracker,
        })
    }

    /// A new, empty queue of the configured kind that knows the indexer's
    /// objects, with the user's transform (skipped while `bypass` is set).
    pub(crate) fn new_queue(
        &self,
        lc: &Lifecycle<K>,
        bypass: &Arc<AtomicBool>,
    ) -> Arc<dyn Queue<K>> {
        let mut fifo_options = FifoOptions::new()
            .known_objects(self.inner.indexer.clone())
            .emit_delta_type_replaced(true)
            .freshness(self.inner.freshness.clone());
        if let Some(t) = &lc.transform {
            let t = t.clone();
            let bypass = bypass.clone();
            let wrapped: TransformFunc<K> = Arc::new(move |o| {
                if bypass.load(Ordering::Relaxed) {
                    Ok(o)
                } else {
                    t(o)
                }
            });
            fifo_options = fifo_options.transformer(wrapped);
        }
        match self.inner.fifo_kind {
            FifoKind::DeltaFifo => Arc::new(DeltaFifo::new(fifo_options)),
            FifoKind::RealFifo => Arc::new(RealFifo::new(fifo_options)),
        }
    }

    /// The reflector feeding `sink`: the list options, the resync check
    /// period, the reflector metrics, a watch error handler that records
    /// the last error before calling the user's, and the resourceVersion to
    /// resume the watch from after a warm start.
    fn build_reflector(
        &self,
        lc: &Lifecycle<K>,
        sink: Arc<dyn ReflectorStore<K>>,
        resume_rv: Option<String>,
    ) -> Reflector<K> {
        let mut rb =
            Reflector::builder_with(self.inner.client.clone(), sink, self.inner.dyntype.clone())
                .name(self.inner.name.clone())
                .config(self.inner.watch.clone())
                .resync_period(lc.resync_check_period);
        if let Some(m) = self.inner.reflector_metrics.get() {
            rb = rb.metrics(m.clone());
        }
        let user = lc.watch_error_handler.clone();
        let last = self.inner.last_error.clone();
        rb = rb.watch_error_handler(move |e: &ReflectorError| {
            *lock(&last) = Some(ErrorChain(e).to_string());
            if let Some(h) = &user {
                h(e);
            }
        });
        if let Some(rv) = resume_rv {
            rb = rb.resume_from(rv);
        }
        rb.build()
    }
}

/// What [`SharedIndexInformer::start`] builds for one run.
pub(crate) struct Started<K> {
    /// The queue between the reflector and the indexer.
    pub(crate) queue: Arc<dyn Queue<K>>,
    /// The reflector feeding `queue`.
    pub(crate) reflector: Arc<Reflector<K>>,
    /// The resourceVersion of the last change queued, when snapshots are
    /// configured.
    pub(crate) tracker: Option<Arc<PushTracker>>,
}

/// The first queue of a run and where its watch resumes.
pub(crate) struct InitialQueue<K> {
    /// Empty, or holding a loaded snapshot's objects.
    pub(crate) queue: Arc<dyn Queue<K>>,
    /// The snapshot's resourceVersion when its objects were queued (a warm
    /// start): the watch resumes there without a list.
    pub(crate) resume_rv: Option<String>,
}

/// One wake-up of the informer's loop.
enum Step {
    Confirmed,
    Written(Result<WriteStats, SnapshotError>),
    SnapshotDue,
    Popped(Result<(), PopError<BoxError>>),
}

async fn tick(timer: Option<&mut Interval>) {
    match timer {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// The state of the informer's loop, carried between its wake-ups.
struct LoopState {
    /// When the run began (for the time to sync).
    started_at: Instant,
    /// Deltas popped, handled or not.
    pops: u64,
    /// A warm start waits for the reflector to confirm the resumed watch.
    awaiting_confirmation: bool,
    /// After a confirmation: the pops after which the cache is current.
    confirm_target: Option<u64>,
    /// The time to sync has been recorded.
    synced_recorded: bool,
    /// The sync state last pushed to the cache metrics.
    synced_pushed: bool,
    /// Ticks when a periodic snapshot is due (none without an interval).
    snapshot_timer: Option<Interval>,
    /// A snapshot is due and waits for a synced, drained cache.
    snapshot_due: bool,
    /// The snapshot write in flight.
    write_task: Option<JoinHandle<Result<WriteStats, SnapshotError>>>,
}

impl LoopState {
    /// The state before the first wake-up; the snapshot timer's first tick
    /// is one interval from now.
    fn new(started_at: Instant, warm: bool, writer: Option<&SnapshotWriter>) -> Self {
        let snapshot_timer = writer
            .and_then(|w| (!w.interval.is_zero()).then_some(w.interval))
            .map(|p| {
                let mut i = tokio::time::interval_at(Instant::now() + p, p);
                i.set_missed_tick_behavior(MissedTickBehavior::Delay);
                i
            });
        LoopState {
            started_at,
            pops: 0,
            awaiting_confirmation: warm,
            confirm_target: None,
            synced_recorded: false,
            synced_pushed: false,
            snapshot_timer,
            snapshot_due: false,
            write_task: None,
        }
    }
}
