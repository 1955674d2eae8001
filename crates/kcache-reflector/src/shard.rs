//! Server-side sharded list and watch (KEP-5866): the `shardSelector`
//! parameter on every request, and the same filter on the client.
//!
//! The reflector sends its [`ShardSelector`] on every LIST page, streaming
//! list and watch, and checks every list item and watch event with
//! [`ShardSelector::matches`] (an FNV-1a hash of one field, idempotent on a
//! stream the apiserver filtered already). Which side did the cutting is
//! the [`ShardFilterMode`], decided from what the apiserver sent:
//!
//! * a list whose every page echoes the selector in
//!   `metadata.shardInfo.selector` was filtered by the apiserver: `Server`;
//! * a full list (JSON or protobuf) without the echo was not (gate off, an
//!   older apiserver): `Client`;
//! * a metadata-only list and a streaming list never carry the echo: the
//!   mode is `Client` as soon as one object outside the shard arrived,
//!   else `Server` (nothing outside the shard was received);
//! * in `Server` mode, a watch event outside the shard switches to
//!   `Client`.
//!
//! The cache holds exactly the shard either way.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use kcache_core::ShardSelector;

use crate::error::{ApiError, ReflectorError};

/// The query parameter that carries a shard selector.
pub(crate) const SHARD_SELECTOR_PARAM: &str = "shardSelector";

/// Who cuts a sharded reflector's collection down to its shard (see
/// [`Reflector::shard_filter_mode`](crate::Reflector::shard_filter_mode)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShardFilterMode {
    /// The apiserver: the last list echoed the selector
    /// (`metadata.shardInfo`), or (streaming and metadata-only lists, which
    /// carry no echo) no object outside the shard has been received. Each
    /// replica receives only its share of the bytes.
    Server,
    /// The client: the apiserver served objects outside the shard (feature
    /// gate `ShardedListAndWatch` off, or an apiserver older than 1.36), and
    /// the reflector drops them with the same hash. The cache is the same,
    /// but every replica receives and decodes the whole collection.
    Client,
}

impl ShardFilterMode {
    /// `server` or `client` (a label value).
    pub fn as_str(self) -> &'static str {
        match self {
            ShardFilterMode::Server => "server",
            ShardFilterMode::Client => "client",
        }
    }
}

impl fmt::Display for ShardFilterMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reflector's shard selector and what it learnt about the server.
pub(crate) struct Sharding {
    pub(crate) selector: ShardSelector,
    /// The selector as the apiserver echoes it.
    rendered: String,
    /// The selector as a query value.
    query: String,
    /// 0: not known yet, else `1 + ShardFilterMode as u8`.
    mode: AtomicU8,
}

impl Sharding {
    pub(crate) fn new(selector: ShardSelector) -> Self {
        Sharding {
            rendered: selector.to_string(),
            query: selector.to_query_value(),
            selector,
            mode: AtomicU8::new(0),
        }
    }

    pub(crate) fn rendered(&self) -> &str {
        &self.rendered
    }

    /// Whether `echo` (a list's `metadata.shardInfo.selector`) is this
    /// selector.
    pub(crate) fn is_echo(&self, echo: &str) -> bool {
        echo == self.rendered || ShardSelector::parse(echo).is_ok_and(|s| s == self.selector)
    }

    pub(crate) fn mode(&self) -> Option<ShardFilterMode> {
        match self.mode.load(Ordering::Relaxed) {
            1 => Some(ShardFilterMode::Server),
            2 => Some(ShardFilterMode::Client),
            _ => None,
        }
    }

    /// Sets the mode; the previous one.
    pub(crate) fn set_mode(&self, mode: ShardFilterMode) -> Option<ShardFilterMode> {
        let v = match mode {
            ShardFilterMode::Server => 1,
            ShardFilterMode::Client => 2,
        };
        match self.mode.swap(v, Ordering::Relaxed) {
            1 => Some(ShardFilterMode::Server),
            2 => Some(ShardFilterMode::Client),
            _ => None,
        }
    }

    /// `uri` with `shardSelector=<query value>` appended.
    pub(crate) fn append_to(&self, uri: &http::Uri) -> Result<http::Uri, http::uri::InvalidUri> {
        let mut s = uri.to_string();
        if !s.ends_with('?') {
            s.push(if uri.query().is_some() { '&' } else { '?' });
        }
        s.push_str(SHARD_SELECTOR_PARAM);
        s.push('=');
        s.push_str(&self.query);
        s.parse()
    }
}

/// Whether the apiserver's answer `error` rejects the shard selector: the
/// apiserver (v1.37) answers an invalid selector with `500` and a message
/// starting `invalid shard selector`; a `400`/`422` naming the shard
/// selector is taken the same way.
pub(crate) fn rejects_selector(error: &ApiError) -> bool {
    let msg = error.message.to_ascii_lowercase();
    match error.code {
        500 => msg.contains("invalid shard selector"),
        400 | 422 => msg.contains("shard"),
        _ => false,
    }
}

/// `e` as [`ReflectorError::ShardSelectorRejected`] when it is an API error
/// rejecting `sharding`'s selector.
pub(crate) fn classify(sharding: Option<&Sharding>, e: ReflectorError) -> ReflectorError {
    let Some(sh) = sharding else { return e };
    match e {
        ReflectorError::Api {
            op,
            resource,
            error,
        } if rejects_selector(&error) => ReflectorError::ShardSelectorRejected {
            op,
            resource,
            selector: sh.rendered().to_owned(),
            error: Box::new(error),
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kcache_core::ShardField;

    #[test]
    fn appends_the_parameter() {
        let sel = ShardSelector::contiguous(ShardField::Uid, 2).unwrap()[0].clone();
        let sh = Sharding::new(sel);
        for (uri, sep) in [
            ("/api/v1/configmaps?", ""),
            ("/api/v1/configmaps?limit=500", "&"),
            ("/api/v1/configmaps", "?"),
        ] {
            let out = sh.append_to(&uri.parse().unwrap()).unwrap().to_string();
            assert_eq!(
                out,
                format!(
                    "{uri}{sep}shardSelector=shardRange(object.metadata.uid,%20'0x0000000000000000',%20'0x8000000000000000')"
                )
            );
        }
    }

    #[test]
    fn echo_and_rejections() {
        let sel = ShardSelector::contiguous(ShardField::Namespace, 3).unwrap()[1].clone();
        let sh = Sharding::new(sel.clone());
        assert!(sh.is_echo(&sel.to_string()));
        assert!(sh.is_echo(&sel.to_string().replace(", ", ",")));
        assert!(
            !sh.is_echo(
                &ShardSelector::contiguous(ShardField::Namespace, 3).unwrap()[2].to_string()
            )
        );
        assert!(!sh.is_echo("garbage"));
        let api = |code, message: &str| ApiError {
            code,
            reason: String::new(),
            message: message.to_owned(),
            causes: Vec::new(),
            retry_after: None,
        };
        assert!(rejects_selector(&api(
            500,
            "invalid shard selector: bad hex"
        )));
        assert!(!rejects_selector(&api(500, "etcd is down")));
        assert!(rejects_selector(&api(422, "shardSelector: Invalid value")));
        assert!(!rejects_selector(&api(
            400,
            "sendInitialEvents is not supported"
        )));
        assert!(!rejects_selector(&api(410, "invalid shard selector")));
        assert_eq!(sh.mode(), None);
        assert_eq!(sh.set_mode(ShardFilterMode::Server), None);
        assert_eq!(
            sh.set_mode(ShardFilterMode::Client),
            Some(ShardFilterMode::Server)
        );
        assert_eq!(sh.mode(), Some(ShardFilterMode::Client));
    }
}
