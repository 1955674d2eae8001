//! Streaming lists (client-go's `watchList`): a watch with
//! `sendInitialEvents=true` whose initial events are buffered, by key, in
//! an `InitialBuffer` (within `max_initial_events_bytes`) and handed to
//! the store as one `replace` at the `initial-events-end` bookmark; and
//! what to do when one fails.

use kcache_core::CachedObject;
use tracing::debug;

use super::initial_buffer::InitialBuffer;
use super::watch::{Mode, OpenWatch};
use super::{Reflector, RunState};
use crate::backoff::Backoff;
use crate::error::{Operation, ReflectorError};

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
        if buf.bytes > self.limits.max_initial_events_bytes {
            return Err(ReflectorError::InitialEventsTooLarge {
                resource: self.resource.clone(),
                limit: self.limits.max_initial_events_bytes,
            });
        }
        Ok(())
    }
}
