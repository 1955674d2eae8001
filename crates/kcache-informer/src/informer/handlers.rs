//! Handler registration: adding and removing event handlers on a
//! [`SharedIndexInformer`], and the [`ResourceEventHandlerRegistration`]
//! a handler is added under.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use kcache_core::sync::lock;
use kube::Resource;

use super::{HasSynced, Inner, SharedIndexInformer};
use crate::error::InformerError;
use crate::handler::ResourceEventHandler;
use crate::listener::{Listener, Notification, SyncedFn};
use crate::processor::{MINIMUM_RESYNC_PERIOD, determine_resync_period};

impl<K: Resource + 'static> SharedIndexInformer<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// Adds a handler with the informer's default resync period.
    pub fn add_event_handler(
        &self,
        handler: impl ResourceEventHandler<K>,
    ) -> Result<ResourceEventHandlerRegistration<K>, InformerError> {
        let resync = self.inner.default_handler_resync;
        self.add_event_handler_with_resync_period(handler, resync)
    }

    /// Adds a handler that wants a resync every `resync_period` (0: never;
    /// at least 1 s). client-go's rules apply: an informer that does not
    /// resync ignores it; a period below the informer's check period lowers
    /// the check period before start and is raised to it after start.
    ///
    /// A handler added after start first receives the current cache as
    /// adds with `is_in_initial_list = true`, to it alone, with no event
    /// lost or duplicated around the registration.
    pub fn add_event_handler_with_resync_period(
        &self,
        handler: impl ResourceEventHandler<K>,
        resync_period: Duration,
    ) -> Result<ResourceEventHandlerRegistration<K>, InformerError> {
        let mut lc = lock(&self.inner.lifecycle);
        if lc.stopped {
            return Err(InformerError::Stopped);
        }
        let mut requested = resync_period;
        if requested > Duration::ZERO {
            if requested < MINIMUM_RESYNC_PERIOD {
                tracing::info!(
                    ?requested,
                    "resync period too small; raised to the minimum of 1s"
                );
                requested = MINIMUM_RESYNC_PERIOD;
            }
            if requested < lc.resync_check_period {
                if lc.started {
                    tracing::info!(
                        ?requested,
                        check = ?lc.resync_check_period,
                        "resync period below the running informer's check period; raised to it"
                    );
                    requested = lc.resync_check_period;
                } else {
                    lc.resync_check_period = requested;
                    self.inner.processor.resync_check_period_changed(requested);
                }
            }
        }
        let period = determine_resync_period(requested, lc.resync_check_period);
        let id = self.inner.next_listener_id.fetch_add(1, Ordering::Relaxed);
        let weak: Weak<Inner<K>> = Arc::downgrade(&self.inner);
        let synced: SyncedFn = Arc::new(move || weak.upgrade().is_some_and(|i| i.has_synced()));
        let listener = Listener::new(
            id,
            format!("{}#{id}", self.inner.name),
            Box::new(handler),
            requested,
            period,
            synced,
        );
        if let Some(m) = self.inner.metrics.get() {
            listener.attach_metrics(m.listener(&self.inner.name, &listener.name));
        }
        if !lc.started {
            self.inner
                .processor
                .add_listener(listener.clone())
                .map_err(InformerError::Thread)?;
        } else {
            // Replay the cache to this handler alone while no delta is
            // being handled, so nothing is lost or seen twice.
            let _block = lock(&self.inner.block_deltas);
            self.inner
                .processor
                .add_listener(listener.clone())
                .map_err(InformerError::Thread)?;
            for obj in self.inner.indexer.list() {
                listener.add(Notification::Add {
                    obj,
                    is_in_initial_list: true,
                });
            }
        }
        drop(lc);
        Ok(ResourceEventHandlerRegistration {
            listener,
            informer: Arc::downgrade(&self.inner),
        })
    }

    /// Removes a handler: it gets no more events (those still queued for
    /// it are dropped). Idempotent. Never blocks: the handler's thread ends
    /// once its current call (if any) returns, and is joined later without
    /// blocking (on the next removal, or within the handler shutdown
    /// timeout when the informer stops).
    pub fn remove_event_handler(&self, registration: &ResourceEventHandlerRegistration<K>) {
        let _lc = lock(&self.inner.lifecycle);
        let removed = self
            .inner
            .processor
            .remove_listener(registration.listener.id);
        let mut retired = lock(&self.inner.retired);
        retired.extend(removed);
        retired.retain(|l| !l.try_join());
    }

    /// Backlog per handler (notifications not yet handled), by handler name.
    pub fn listener_backlogs(&self) -> Vec<(String, usize)> {
        self.inner
            .processor
            .listeners()
            .iter()
            .map(|l| (l.name.clone(), l.backlog()))
            .collect()
    }
}

/// A handler's registration: its sync state and statistics; pass it to
/// [`SharedIndexInformer::remove_event_handler`] to remove the handler.
pub struct ResourceEventHandlerRegistration<K: Resource> {
    listener: Arc<Listener<K>>,
    informer: Weak<Inner<K>>,
}

impl<K: Resource> fmt::Debug for ResourceEventHandlerRegistration<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceEventHandlerRegistration")
            .field("name", &self.listener.name)
            .finish_non_exhaustive()
    }
}

impl<K: Resource + 'static> ResourceEventHandlerRegistration<K> {
    /// True once the informer has synced and every initial add for this
    /// handler has returned from it.
    pub fn has_synced(&self) -> bool {
        self.listener.has_synced()
    }
    /// Notifications waiting for this handler.
    pub fn backlog(&self) -> usize {
        self.listener.backlog()
    }
    /// Notifications handed to this handler so far.
    pub fn delivered(&self) -> u64 {
        self.listener.delivered()
    }
    /// How many times this handler panicked (each time the event was
    /// skipped and the handler kept receiving later events).
    pub fn panics(&self) -> u64 {
        self.listener.panics()
    }
    /// Whether nothing is waiting and the handler is not running.
    pub fn is_idle(&self) -> bool {
        self.listener.idle()
    }
    /// The resync period in use for this handler (0: none).
    pub fn resync_period(&self) -> Duration {
        self.listener.resync_period()
    }
    /// Whether the handler is still registered with a live informer.
    pub fn is_active(&self) -> bool {
        self.informer
            .upgrade()
            .is_some_and(|i| i.processor.contains(self.listener.id))
    }
    /// The handler's name (informer name + registration number).
    pub fn name(&self) -> &str {
        &self.listener.name
    }
}

impl<K: Resource + 'static> HasSynced for ResourceEventHandlerRegistration<K> {
    fn has_synced(&self) -> bool {
        self.listener.has_synced()
    }
}
