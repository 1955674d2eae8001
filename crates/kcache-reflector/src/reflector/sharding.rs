//! The reflector's side of server-side sharding (KEP-5866): the shard
//! selector on every request, the client-side check of every object, and
//! deciding (and logging) who filters, the apiserver or the reflector.

use std::sync::atomic::Ordering;

use kcache_core::{CachedObject, ShardSelector};
use tracing::{info, warn};

use super::watch::Mode;
use super::{MAX_LOGGED_URI, Reflector};
use crate::error::{ReflectorError, Truncated};
use crate::shard::{ShardFilterMode, Sharding};
#[cfg(doc)]
use crate::watch_config::WatchConfig;

impl<K: 'static> Reflector<K> {
    /// The shard selector (see [`WatchConfig::shard_selector`]).
    pub fn shard_selector(&self) -> Option<&ShardSelector> {
        self.sharding.as_ref().map(|s| &s.selector)
    }

    /// Who cuts the collection down to the shard: `None` without a shard
    /// selector or before the first list; then [`ShardFilterMode::Server`]
    /// (the apiserver filtered) or [`ShardFilterMode::Client`] (the
    /// apiserver served everything; the reflector keeps its shard).
    pub fn shard_filter_mode(&self) -> Option<ShardFilterMode> {
        self.sharding.as_ref().and_then(Sharding::mode)
    }

    /// How many list items and watch events the reflector dropped as
    /// outside its shard (0 while the apiserver filters).
    pub fn shard_dropped(&self) -> u64 {
        self.shard_dropped.load(Ordering::Relaxed)
    }
}

impl<K: 'static> Reflector<K> {
    /// Appends the shard selector, if any, to a request's query.
    pub(super) fn add_shard_selector(
        &self,
        req: &mut http::Request<Vec<u8>>,
    ) -> Result<(), ReflectorError> {
        let Some(sh) = &self.sharding else {
            return Ok(());
        };
        let uri = sh
            .append_to(req.uri())
            .map_err(|e| ReflectorError::Request {
                resource: self.resource.clone(),
                source: kube::core::request::Error::Validation(format!(
                    "the shard selector does not fit in a request URI ({e}): use fewer ranges"
                )),
            })?;
        *req.uri_mut() = uri;
        Ok(())
    }

    /// Whether `obj` is in the reflector's shard (always, without a shard
    /// selector): the apiserver's filter, applied on the client. Objects
    /// outside are counted.
    pub(super) fn in_shard(&self, obj: &CachedObject<K>) -> bool {
        match &self.sharding {
            Some(sh) if !sh.selector.matches(obj.meta()) => {
                self.shard_dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
            _ => true,
        }
    }

    /// Whether a list page's `metadata.shardInfo.selector` is the
    /// reflector's selector.
    pub(super) fn is_shard_echo(&self, echo: Option<&str>) -> bool {
        match (&self.sharding, echo) {
            (Some(sh), Some(echo)) => sh.is_echo(echo),
            _ => false,
        }
    }

    /// Decides who filtered a list (see the `shard` module): the echo
    /// says the apiserver did; its absence, where a list carries it
    /// (`echo_expected`), or any object outside the shard says it did not.
    pub(super) fn settle_shard_mode(&self, echoed: bool, echo_expected: bool, outside: usize) {
        let Some(sh) = &self.sharding else { return };
        if echoed && outside > 0 {
            warn!(
                outside,
                selector = %Truncated(sh.rendered(), MAX_LOGGED_URI),
                "the apiserver echoed the shard selector but sent objects outside it (dropped): kcache's hash disagrees with this apiserver's; please report it with the apiserver's version"
            );
        }
        let mode = if echoed {
            ShardFilterMode::Server
        } else if echo_expected || outside > 0 {
            ShardFilterMode::Client
        } else {
            ShardFilterMode::Server
        };
        self.set_shard_mode(sh, mode);
    }

    /// Sets the shard filter mode; logs it when it changes.
    fn set_shard_mode(&self, sh: &Sharding, mode: ShardFilterMode) {
        if sh.set_mode(mode) == Some(mode) {
            return;
        }
        let selector = Truncated(sh.rendered(), MAX_LOGGED_URI);
        let share = sh.selector.fraction();
        match mode {
            ShardFilterMode::Server => info!(
                shard_filter = %mode,
                %selector,
                share,
                "server-side sharding: the apiserver sends only this shard"
            ),
            _ => info!(
                shard_filter = %mode,
                %selector,
                share,
                "client-side sharding: the apiserver ignores the shard selector and sends every object; the reflector keeps its shard (enable the apiserver's ShardedListAndWatch feature gate, Kubernetes 1.36+, to cut each replica's traffic)"
            ),
        }
    }

    /// An event outside the shard arrived: counted for a streaming list's
    /// mode; on a watch, proof that the apiserver does not filter.
    pub(super) fn outside_shard(&self, mode: &mut Mode<'_, K>) {
        match mode {
            Mode::Initial(buf) => buf.shard_dropped += 1,
            Mode::Normal => {
                if let Some(sh) = &self.sharding
                    && sh.mode() != Some(ShardFilterMode::Client)
                {
                    self.set_shard_mode(sh, ShardFilterMode::Client);
                }
            }
        }
    }
}
