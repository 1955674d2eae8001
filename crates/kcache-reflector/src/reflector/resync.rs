//! The periodic resync (client-go's `resyncPeriod`): the store's `resync`
//! called on every tick of the resync interval, also while the reflector
//! sleeps a backoff step.

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
        let sleep = tokio::time::sleep(backoff.next_delay());
        tokio::pin!(sleep);
        let mut resync = resync;
        loop {
            tokio::select! {
                _ = &mut sleep => return,
                _ = tick(resync.as_deref_mut()) => self.resync(),
            }
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
