//! Paged lists into the store (client-go's `list`): the pages of one
//! list at a resourceVersion, each page body read with the response
//! format's parser as it arrives, within its deadlines and byte cap, and
//! the relist memory (an unchanged object is swapped for the copy the
//! store holds, see `reuse`).

use bytes::Bytes;
use futures::Stream;
use http_body_util::BodyExt;
use kcache_core::{CachedObject, ErrorChain};
use kube::api::ListParams;
use kube::core::Request;
use tracing::{Instrument, debug, info, info_span};

use super::{DEFAULT_PAGE_SIZE, MAX_LOGGED_URI, Reflector, RunState};
use crate::decode::ListParser;
use crate::error::{
    BadEvent, MAX_LOGGED_ERROR, Operation, ReflectorError, TimeoutPhase, Truncated,
};
use crate::limits::{BodyError, BodyLimits, read_body_with};
use crate::shard;

/// The objects of a (paged) list, ready for `ReflectorStore::replace`.
struct Listed<K> {
    items: Vec<CachedObject<K>>,
    resource_version: String,
    /// How many items are objects reused from the store.
    reused: usize,
    /// Every page echoed the reflector's shard selector
    /// (`metadata.shardInfo`): the apiserver filtered.
    shard_echoed: bool,
    /// Items dropped as outside the shard.
    shard_dropped: usize,
}

/// The items of a list page read so far.
struct PageItems<K> {
    items: Vec<CachedObject<K>>,
    /// How many items are objects reused from the store.
    reused: usize,
    /// Items dropped as outside the shard.
    dropped: usize,
}

impl<K> PageItems<K> {
    /// The page, with what its envelope said.
    fn into_page(
        self,
        resource_version: String,
        shard_echoed: bool,
        continue_token: Option<String>,
    ) -> Page<K> {
        Page {
            listed: Listed {
                items: self.items,
                resource_version,
                reused: self.reused,
                shard_echoed,
                shard_dropped: self.dropped,
            },
            continue_token,
        }
    }
}

/// One list page.
struct Page<K> {
    listed: Listed<K>,
    continue_token: Option<String>,
}

/// Whether `held` (an object the store holds) is the same as `fresh` (just
/// decoded): same key, and the same non-empty `metadata.uid` and
/// `metadata.resourceVersion`. In Kubernetes an object's content changes
/// only with its resourceVersion, and a deleted and re-created object gets
/// a new uid.
fn same_object<K>(held: &CachedObject<K>, fresh: &CachedObject<K>) -> bool {
    let (Some(uid), Some(rv)) = (fresh.uid(), fresh.resource_version()) else {
        return false;
    };
    !uid.is_empty()
        && !rv.is_empty()
        && held.uid() == Some(uid)
        && held.resource_version() == Some(rv)
        && held.key() == fresh.key()
}

impl<K: 'static> Reflector<K> {
    /// The object the store already holds for `obj`'s key when it is the
    /// same object (see [`same_object`]), else `obj`; and whether it was
    /// reused. A relist thus keeps one copy of each unchanged object: the
    /// fresh copy is dropped as soon as its page (or event) is processed,
    /// instead of living next to the old one until `replace`.
    pub(super) fn reuse(&self, obj: CachedObject<K>) -> (CachedObject<K>, bool) {
        if obj.uid().is_none_or(str::is_empty) {
            return (obj, false);
        }
        match self.store.cached(obj.key()) {
            Some(held) if same_object(&held, &obj) => (held, true),
            _ => (obj, false),
        }
    }

    /// client-go's `list`: a paged list, retried once at `""` when the
    /// resourceVersion is unavailable, then `store.replace`.
    pub(super) async fn list(&self, st: &mut RunState) -> Result<(), ReflectorError> {
        let rv = self.relist_resource_version(st);
        let span = info_span!("list", resource_version = %rv);
        async {
            let mut result = self.paged_list(st, &rv).await;
            if let Err(e) = &result
                && (e.is_expired() || e.is_too_large_resource_version())
            {
                self.metrics.error(e.reason());
                info!(error = %Truncated(&ErrorChain(e), MAX_LOGGED_ERROR), "resourceVersion unavailable; listing again from the newest state");
                st.rv_unavailable = true;
                result = self.paged_list(st, "").await;
            }
            let (listed, paginated) = result?;
            if rv == "0" && paginated {
                st.paginated_result = true;
            }
            st.rv_unavailable = false;
            // a full list without the echo was not filtered; a
            // metadata-only list never carries it
            self.settle_shard_mode(
                listed.shard_echoed,
                !self.metadata_only,
                listed.shard_dropped,
            );
            self.replace(
                listed.items,
                listed.resource_version,
                Operation::List,
                listed.reused,
            )
        }
        .instrument(span)
        .await
    }

    /// The whole list and whether it came in several pages.
    async fn paged_list(
        &self,
        st: &RunState,
        rv: &str,
    ) -> Result<(Listed<K>, bool), ReflectorError> {
        let limit = if self.page_size > 0 {
            Some(self.page_size)
        } else if st.paginated_result || rv.is_empty() || rv == "0" {
            Some(DEFAULT_PAGE_SIZE)
        } else {
            // a list at a given RV is unpaged so the watch cache serves it
            None
        };
        let mut items = Vec::new();
        let mut reused = 0;
        let mut shard_echoed = true;
        let mut shard_dropped = 0;
        let mut cont: Option<String> = None;
        let mut paginated = false;
        loop {
            match self.list_page(rv, limit, cont.as_deref()).await {
                Err(e) if e.is_expired() && cont.is_some() => {
                    info!(error = %Truncated(&ErrorChain(&e), MAX_LOGGED_ERROR), "the continue token expired; doing one full list");
                    // the pages so far are dropped before the full list
                    drop(items);
                    let page = self.list_page(rv, None, None).await?;
                    return Ok((page.listed, paginated));
                }
                Err(e) => return Err(e),
                Ok(page) => {
                    let Listed {
                        items: page_items,
                        resource_version,
                        reused: page_reused,
                        shard_echoed: page_echoed,
                        shard_dropped: page_dropped,
                    } = page.listed;
                    reused += page_reused;
                    shard_echoed &= page_echoed;
                    shard_dropped += page_dropped;
                    if items.is_empty() {
                        items = page_items;
                    } else {
                        items.extend(page_items);
                    }
                    match page.continue_token {
                        None => {
                            let listed = Listed {
                                items,
                                resource_version,
                                reused,
                                shard_echoed,
                                shard_dropped,
                            };
                            return Ok((listed, paginated));
                        }
                        Some(c) => {
                            cont = Some(c);
                            paginated = true;
                        }
                    }
                }
            }
        }
    }

    async fn list_page(
        &self,
        rv: &str,
        limit: Option<u32>,
        cont: Option<&str>,
    ) -> Result<Page<K>, ReflectorError> {
        let mut lp = ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            continue_token: cont.map(str::to_owned),
            resource_version: (cont.is_none() && !rv.is_empty()).then(|| rv.to_owned()),
            ..Default::default()
        };
        // kube drops resourceVersion=0 when a limit is set; client-go sends
        // both, so the limit is appended by hand in that case.
        let manual_limit = if lp.resource_version.as_deref() == Some("0") {
            limit
        } else {
            lp.limit = limit;
            None
        };
        let req = Request::new(self.url_path.as_str());
        let built = if self.metadata_only {
            req.list_metadata(&lp)
        } else {
            req.list(&lp)
        };
        let mut req = built.map_err(|source| ReflectorError::Request {
            resource: self.resource.clone(),
            source,
        })?;
        if let Some(l) = manual_limit
            && let Ok(uri) = format!("{}&limit={l}", req.uri()).parse()
        {
            *req.uri_mut() = uri;
        }
        self.add_shard_selector(&mut req)?;
        self.set_accept(&mut req, false);
        // the URI carries a server-sent resourceVersion or continue token
        debug!(uri = %Truncated(req.uri(), MAX_LOGGED_URI), "list page");
        let resp = self
            .send(Operation::List, req)
            .await
            .map_err(|e| shard::classify(self.sharding.as_ref(), e))?;
        let content_length = resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let limits = BodyLimits {
            idle: self.timeouts.list_body_idle,
            total: self.timeouts.list_body,
            max_bytes: self.limits.max_list_page_bytes,
        };
        let parser = self.answered(resp.headers()).get::<K>().list_parser();
        let stream = resp.into_body().into_data_stream();
        self.read_list_page(content_length, stream, limits, parser)
            .await
    }

    /// Reads a list page body within `limits` with `parser` (the
    /// response format's), as it arrives: each item is cut, built and (when
    /// unchanged) swapped for the store's copy as soon as its last byte is
    /// in (see [`keep`](Self::keep)), so the body is never held whole; the
    /// envelope (everything but the items) is read at the end. A malformed
    /// body anywhere fails the page as [`ReflectorError::InvalidList`],
    /// any other body failure as a list body error.
    async fn read_list_page(
        &self,
        content_length: Option<u64>,
        stream: impl Stream<Item = Result<Bytes, kube::Error>> + Unpin,
        limits: BodyLimits,
        mut parser: Box<dyn ListParser<K>>,
    ) -> Result<Page<K>, ReflectorError> {
        let invalid = |e| ReflectorError::InvalidList {
            resource: self.resource.clone(),
            source: e,
        };
        let mut acc = PageItems {
            items: Vec::new(),
            reused: 0,
            dropped: 0,
        };
        let mut malformed = None;
        let read = read_body_with(content_length, stream, limits, |chunk| {
            match parser.feed_chunk(chunk, &self.decoder, &mut |obj| self.keep(&mut acc, obj)) {
                Ok(()) => true,
                Err(e) => {
                    malformed = Some(e);
                    false
                }
            }
        })
        .await;
        match read {
            Ok(()) => {}
            Err(BodyError::Stopped) => {
                return Err(match malformed {
                    Some(e) => invalid(e),
                    None => self.list_body_error(BodyError::Stopped),
                });
            }
            Err(e) => return Err(self.list_body_error(e)),
        }
        let end = parser.finish_page(&self.decoder).map_err(invalid)?;
        // items the envelope held itself (not a literal "items" array)
        for obj in end.items {
            self.keep(&mut acc, obj);
        }
        self.report_skipped(end.skipped);
        Ok(acc.into_page(
            end.resource_version,
            self.is_shard_echo(end.shard_selector.as_deref()),
            end.continue_token,
        ))
    }

    /// Adds a list item to the page, unless it is outside the shard; an
    /// unchanged object is swapped for the store's copy.
    fn keep(&self, acc: &mut PageItems<K>, obj: CachedObject<K>) {
        if !self.in_shard(&obj) {
            acc.dropped += 1;
            return;
        }
        let (obj, r) = self.reuse(obj);
        acc.reused += usize::from(r);
        acc.items.push(obj);
    }

    /// Reports the list items that were skipped.
    fn report_skipped(&self, skipped: Vec<BadEvent>) {
        for bad in skipped {
            self.report(&ReflectorError::BadEvent {
                op: Operation::List,
                resource: self.resource.clone(),
                source: bad,
            });
        }
    }

    fn list_body_error(&self, e: BodyError<kube::Error>) -> ReflectorError {
        let timeout = |phase, after| ReflectorError::Timeout {
            op: Operation::List,
            resource: self.resource.clone(),
            phase,
            after,
        };
        match e {
            BodyError::Idle => timeout(TimeoutPhase::ListBodyIdle, self.timeouts.list_body_idle),
            BodyError::Total => timeout(TimeoutPhase::ListBody, self.timeouts.list_body),
            BodyError::TooLarge => ReflectorError::ListPageTooLarge {
                resource: self.resource.clone(),
                limit: self.limits.max_list_page_bytes,
            },
            BodyError::Stream(e) => ReflectorError::Body {
                op: Operation::List,
                resource: self.resource.clone(),
                source: Box::new(e),
            },
            // only a consumer that found the body malformed stops, and it
            // reports that itself
            BodyError::Stopped => ReflectorError::Body {
                op: Operation::List,
                resource: self.resource.clone(),
                source: "the list body was not read to its end".into(),
            },
        }
    }
}
