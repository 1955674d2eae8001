//! The shared processor: fans each notification out to every listener.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::listener::{Listener, Notification};

/// Listeners never resync more often than this.
pub(crate) const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// client-go's `determineResyncPeriod`: a handler's period as used, given
/// the informer's resync check period.
pub(crate) fn determine_resync_period(desired: Duration, check: Duration) -> Duration {
    if desired.is_zero() {
        return desired;
    }
    if check.is_zero() {
        tracing::info!(
            ?desired,
            "the requested resync period is ignored: this informer does not resync"
        );
        return Duration::ZERO;
    }
    if desired < check {
        tracing::info!(
            ?desired,
            resync_check_period = ?check,
            "the requested resync period is raised to the informer's resync check period"
        );
        return check;
    }
    desired
}

struct Entry<K> {
    listener: Arc<Listener<K>>,
    /// Chosen by the last `should_resync`: this listener gets Sync updates.
    syncing: bool,
}

struct State<K> {
    listeners: Vec<Entry<K>>,
    started: bool,
}

pub(crate) struct SharedProcessor<K> {
    state: RwLock<State<K>>,
}

impl<K: 'static> SharedProcessor<K> {
    pub(crate) fn new() -> Self {
        Self {
            state: RwLock::new(State {
                listeners: Vec::new(),
                started: false,
            }),
        }
    }

    /// Adds a listener; starts its thread if the processor runs.
    pub(crate) fn add_listener(&self, listener: Arc<Listener<K>>) -> std::io::Result<()> {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if state.started {
            listener.start()?;
        }
        // As in client-go, a new listener counts as syncing until the first
        // resync check says otherwise: an informer without resync (which
        // never checks) delivers relisted, unchanged objects to every
        // handler as `on_update(old, new)` with equal resourceVersions.
        state.listeners.push(Entry {
            listener,
            syncing: true,
        });
        Ok(())
    }

    /// Removes and closes a listener; `false` if it was not there.
    pub(crate) fn remove_listener(&self, id: u64) -> Option<Arc<Listener<K>>> {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let pos = state.listeners.iter().position(|e| e.listener.id == id)?;
        let entry = state.listeners.remove(pos);
        entry.listener.close();
        Some(entry.listener)
    }

    /// Starts every listener's thread.
    pub(crate) fn run(&self) -> std::io::Result<()> {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        for e in &state.listeners {
            e.listener.start()?;
        }
        state.started = true;
        Ok(())
    }

    /// Closes every listener and forgets them (they cannot be reused).
    pub(crate) fn stop(&self) -> Vec<Arc<Listener<K>>> {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        state.started = false;
        let listeners: Vec<_> = state.listeners.drain(..).map(|e| e.listener).collect();
        for l in &listeners {
            l.close();
        }
        listeners
    }

    /// Non-sync notifications go to every listener; sync ones (a resync
    /// update with an unchanged resourceVersion) only to the listeners whose
    /// resync is due.
    ///
    /// Parked listeners are woken in batches: the caller must call
    /// [`flush`](Self::flush) once it has nothing more to distribute.
    pub(crate) fn distribute(&self, n: &Notification<K>, sync: bool) {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        for e in &state.listeners {
            if !sync || e.syncing {
                e.listener.add_deferred(n.clone(), true);
            }
        }
    }

    /// Wakes every parked listener that has notifications waiting.
    pub(crate) fn flush(&self) {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        for e in &state.listeners {
            e.listener.flush();
        }
    }

    /// Marks the listeners whose resync is due (and schedules their next
    /// one); true if any is.
    pub(crate) fn should_resync(&self) -> bool {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let mut any = false;
        for e in state.listeners.iter_mut() {
            e.syncing = e.listener.should_resync(now);
            if e.syncing {
                any = true;
                e.listener.determine_next_resync(now);
            }
        }
        any
    }

    /// The informer's check period was lowered: recompute every listener's
    /// period from what it requested.
    pub(crate) fn resync_check_period_changed(&self, check: Duration) {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        for e in &state.listeners {
            let p = determine_resync_period(e.listener.requested_resync_period(), check);
            e.listener.set_resync_period(p);
        }
    }

    pub(crate) fn listeners(&self) -> Vec<Arc<Listener<K>>> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state.listeners.iter().map(|e| e.listener.clone()).collect()
    }

    pub(crate) fn contains(&self, id: u64) -> bool {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state.listeners.iter().any(|e| e.listener.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn determine_resync_period_follows_client_go() {
        let s = Duration::from_secs;
        assert_eq!(determine_resync_period(s(0), s(10)), s(0));
        assert_eq!(determine_resync_period(s(5), s(0)), s(0));
        assert_eq!(determine_resync_period(s(5), s(10)), s(10));
        assert_eq!(determine_resync_period(s(30), s(10)), s(30));
    }
}
