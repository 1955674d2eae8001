//! The periodic resync (client-go's `resyncPeriod`): the store's `resync`
//! called on every tick of the resync interval, also while the reflector
//! sleeps a backoff step.

use std::time::Duration;

use tokio::time::Interval;
use tracing::debug;

use super::Reflector;
use crate::backoff::Backoff;
use crate::error::{Operation, ReflectorError};

pub(super) async fn tick(resync: Option<&mut Interval>) {
    match resync {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending::<()>().await,
    }
}

impl<K: 'static> Reflector<K> {
    pub(super) async fn sleep_backoff(&self, backoff: &mut Backoff, resync: Option<&mut Interval>) {
        self.sleep_retry(backoff, None, resync).await;
    }

    /// Sleeps a backoff step, and at least `retry_after` (what the server
    /// asked for with `Retry-After`, capped at the backoff's cap), running
    /// the resync meanwhile.
    pub(super) async fn sleep_retry(
        &self,
        backoff: &mut Backoff,
        retry_after: Option<Duration>,
        resync: Option<&mut Interval>,
    ) {
        let sleep = tokio::time::sleep(self.retry_wait(backoff, retry_after));
        tokio::pin!(sleep);
        let mut resync = resync;
        loop {
            tokio::select! {
                _ = &mut sleep => return,
                _ = tick(resync.as_deref_mut()) => self.resync(),
            }
        }
    }

    /// The next backoff step, raised to `retry_after` (at most the
    /// backoff's cap: a server cannot park the reflector for longer than
    /// its own backoff would).
    pub(super) fn retry_wait(
        &self,
        backoff: &mut Backoff,
        retry_after: Option<Duration>,
    ) -> Duration {
        let step = backoff.next_delay();
        match retry_after {
            Some(asked) => {
                let asked = asked.min(self.backoff.cap.max(step));
                if asked > step {
                    debug!(retry_after = ?asked, "waiting as long as the server asked (Retry-After)");
                }
                step.max(asked)
            }
            None => step,
        }
    }

    pub(super) fn resync(&self) {
        debug!("resync");
        if let Err(e) = self.store.resync() {
            self.report(&ReflectorError::Store {
                op: Operation::Resync,
                resource: self.resource.clone(),
                source: e,
            });
        }
    }
}
