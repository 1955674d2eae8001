//! Streaming lists (client-go's `watchList`): a watch with
//! `sendInitialEvents=true` whose initial events are buffered, by key, in
//! an `InitialBuffer` (within `max_initial_events_bytes`) and handed to
//! the store as one `replace` at the `initial-events-end` bookmark; and
//! what to do when one fails.

use std::collections::HashMap;
use std::time::Duration;

use kcache_core::CachedObject;
use tracing::debug;

use super::watch::{Mode, OpenWatch};
use super::{Reflector, RunState};
use crate::backoff::Backoff;
use crate::error::{Operation, ReflectorError};

/// How often a slow streaming list is reported.
pub(super) const WATCH_LIST_PROGRESS: Duration = Duration::from_secs(10);

/// Initial events of a streaming list, by key, in arrival order. Each
/// entry records whether its object was reused from the store.
pub(super) struct InitialBuffer<K> {
    index: HashMap<String, usize>,
    pub(super) items: Vec<Option<(CachedObject<K>, bool)>>,
    pub(super) resource_version: String,
    /// The stored bytes of the objects held (capped).
    bytes: usize,
    /// Events dropped as outside the shard.
    pub(super) shard_dropped: usize,
}

impl<K> InitialBuffer<K> {
    fn new() -> Self {
        InitialBuffer {
            index: HashMap::new(),
            items: Vec::new(),
            resource_version: String::new(),
            bytes: 0,
            shard_dropped: 0,
        }
    }
    fn upsert(&mut self, (obj, reused): (CachedObject<K>, bool)) {
        self.bytes = self.bytes.saturating_add(obj.bytes().len());
        match self.index.get(obj.key()) {
            Some(&i) => {
                if let Some((old, _)) = self.items[i].replace((obj, reused)) {
                    self.bytes -= old.bytes().len();
                }
            }
            None => {
                self.index.insert(obj.key().to_owned(), self.items.len());
                self.items.push(Some((obj, reused)));
            }
        }
    }
    pub(super) fn delete(&mut self, obj: &CachedObject<K>) {
        if let Some(i) = self.index.remove(obj.key())
            && let Some((old, _)) = self.items[i].take()
        {
            self.bytes -= old.bytes().len();
        }
    }
    /// The objects, and how many of them were reused from the store.
    fn into_items(self) -> (Vec<CachedObject<K>>, usize) {
        drop(self.index);
        let mut reused = 0;
        let items = self
            .items
            .into_iter()
            .flatten()
            .map(|(o, r)| {
                reused += usize::from(r);
                o
            })
            .collect();
        (items, reused)
    }
}

impl<K: 'static> Reflector<K> {
    /// client-go's `watchList`: a watch with `sendInitialEvents=true`, its
    /// initial events buffered until the `initial-events-end` bookmark.
    pub(super) async fn watch_list(
        &self,
        st: &mut RunState,
        backoff: &mut Backoff,
    ) -> Result<OpenWatch, ReflectorError> {
        loop {
            let rv = if st.rv_unavailable {
                String::new()
            } else {
                self.last_sync_resource_version()
            };
            let mut w = match self
                .open_watch(Operation::WatchList, &rv, self.watch_timeout_secs(), true)
                .await
            {
                Ok(w) => w,
                Err(e) => {
                    self.watch_list_retry(st, backoff, &rv, e).await?;
                    continue;
                }
            };
            let mut buffer = InitialBuffer::new();
            let res = self
                .handle_watch(&mut w, Mode::Initial(&mut buffer), None)
                .await;
            if let Ok(Some(rv)) = res {
                st.rv_unavailable = false;
                // from here on the stream carries ordered events
                w.propagate_rv = true;
                // a streaming list has no list envelope to echo the selector
                self.settle_shard_mode(false, false, buffer.shard_dropped);
                let (items, reused) = buffer.into_items();
                self.replace(items, rv, Operation::WatchList, reused)?;
                return Ok(w);
            }
            // nothing held while waiting
            drop((w, buffer));
            match res {
                Err(e) => self.watch_list_retry(st, backoff, &rv, e).await?,
                _ => {
                    debug!(
                        "the streaming list ended before its initial-events-end bookmark; retrying after a backoff"
                    );
                    self.sleep_backoff(backoff, None).await;
                }
            }
        }
    }

    /// What to do after a streaming list failed (client-go's
    /// `isErrorRetriableWithSideEffectsFn`), with a backoff on every retry
    /// path: 429 or a refused connection retry after a backoff step;
    /// Expired or "too large resource version" retry at `""`, at once when
    /// the failed request had a resourceVersion (as client-go does), after
    /// a backoff step when it was already at `""` (a server that refuses
    /// even that is broken: no hot loop). Any other error is returned.
    async fn watch_list_retry(
        &self,
        st: &mut RunState,
        backoff: &mut Backoff,
        rv: &str,
        e: ReflectorError,
    ) -> Result<(), ReflectorError> {
        if e.is_watch_retriable() {
            self.report(&e);
            self.sleep_retry(backoff, e.retry_after(), None).await;
        } else if e.is_expired() || e.is_too_large_resource_version() {
            self.report(&e);
            st.rv_unavailable = true;
            if rv.is_empty() {
                self.sleep_backoff(backoff, None).await;
            }
        } else {
            return Err(e);
        }
        Ok(())
    }

    /// Buffers one initial event of a streaming list, within the cap.
    pub(super) fn buffer_initial(
        &self,
        buf: &mut InitialBuffer<K>,
        obj: CachedObject<K>,
    ) -> Result<(), ReflectorError> {
        buf.upsert(self.reuse(obj));
        if buf.bytes > self.max_initial_events_bytes {
            return Err(ReflectorError::InitialEventsTooLarge {
                resource: self.resource.clone(),
                limit: self.max_initial_events_bytes,
            });
        }
        Ok(())
    }
}
