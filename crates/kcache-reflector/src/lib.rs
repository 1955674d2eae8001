//! client-go's `Reflector`, rebuilt on `kube`: lists a Kubernetes resource
//! type, then watches it from the list's resourceVersion, and writes every
//! change into a [`ReflectorStore`](kcache_core::ReflectorStore) sink (normally the DeltaFIFO),
//! with client-go's paging, resourceVersion, bookmark, backoff and recovery
//! rules.
//!
//! # Bytes, not typed objects
//!
//! The reflector reads the apiserver's bytes itself through
//! [`kube::Client::send`] (which still applies configuration, auth and TLS):
//! a list body is cut into its items as it arrives, without decoding them
//! and without holding the body whole, a watch stream is framed by line
//! or by length prefix, and each object becomes a
//! [`CachedObject`](kcache_core::CachedObject) (bytes + metadata) through
//! the reflector's event decoder. No typed decode happens on the ingest
//! path.
//!
//! # Features
//!
//! - `prometheus`: `PrometheusReflectorMetricsProvider`, the `reflector_*`
//!   metrics through `prometheus-client`.
//! - `fuzzing`: not a stable API, for kcache's fuzz targets, their smoke
//!   test (`tests/fuzz-checks`) and benchmarks: the framers
//!   (`LineFramer`, `ProtobufFramer`, `FrameTooLarge`), the event decoder
//!   (`EventDecoder`, `WatchEvent`, `Bookmark`, `ListPage`) and the
//!   `fuzzing` module. May change in any release.
//!
//! # Wire formats: protobuf for built-in types, CBOR for custom resources
//!
//! With [`WireFormat::Auto`] (the default), lists, watches and streaming
//! lists of a built-in type accept `application/vnd.kubernetes.protobuf`
//! with JSON as the fallback, as client-go's typed clients do (it costs
//! the apiserver 2-3x less CPU than JSON). Those of a custom resource
//! accept `application/cbor` (KEP-4222, served when the apiserver's
//! `CBORServingAndStorage` gate is on) with JSON as the fallback.
//! Metadata-only reflectors ask for JSON, and
//! [`WatchConfig::wire_format`] `= WireFormat::Json` forces it. Each
//! response is read in the format its `Content-Type` names (one codec per
//! format, in the crate's `codec` module). A JSON answer or a `406 Not
//! Acceptable` switches the reflector to JSON.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kcache_core::{CachedObject, ObjectOptions, ObjectOrTombstone, ReflectorStore, StoreError};
//! use kcache_reflector::{WatchConfig, Reflector};
//! use tokio_util::sync::CancellationToken;
//!
//! struct Printer;
//! impl ReflectorStore<ConfigMap> for Printer {
//!     fn add(&self, obj: CachedObject<ConfigMap>) -> Result<(), StoreError> {
//!         println!("added {}", obj.key());
//!         Ok(())
//!     }
//!     fn update(&self, obj: CachedObject<ConfigMap>) -> Result<(), StoreError> {
//!         println!("updated {}", obj.key());
//!         Ok(())
//!     }
//!     fn delete(&self, obj: ObjectOrTombstone<ConfigMap>) -> Result<(), StoreError> {
//!         println!("deleted {}", obj.key());
//!         Ok(())
//!     }
//!     fn replace(&self, items: Vec<CachedObject<ConfigMap>>, rv: String) -> Result<(), StoreError> {
//!         println!("{} objects at resourceVersion {rv}", items.len());
//!         Ok(())
//!     }
//!     fn resync(&self) -> Result<(), StoreError> {
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), kube::Error> {
//! let client = kube::Client::try_default().await?;
//! let reflector = Reflector::<ConfigMap>::builder(client, Arc::new(Printer))
//!     .config(WatchConfig {
//!         namespace: Some("default".into()),
//!         label_selector: Some("app=web".into()),
//!         object_options: ObjectOptions { strip_managed_fields: true, ..ObjectOptions::default() },
//!         ..WatchConfig::default()
//!     })
//!     // the error and its sources (kube's, the body's) on one line
//!     .watch_error_handler(|e| eprintln!("reflector: {}", kcache_core::ErrorChain(e)))
//!     .build();
//! let stop = CancellationToken::new();
//! reflector.run(stop.clone()).await; // until `stop.cancel()`
//! # Ok(())
//! # }
//! ```
//!
//! `DynamicObject` works with [`Reflector::builder_with`] and an
//! `ApiResource`; `PartialObjectMeta<K>` makes a metadata-only reflector
//! (it asks for `PartialObjectMetadataList`s).
//!
//! # Rules (client-go's)
//!
//! - **List**: paged (limit 500 + continue) at resourceVersion `"0"` the
//!   first time, then at the last synced RV (unpaged, so the watch cache
//!   answers), or at `""` after an Expired/Gone or "too large resource
//!   version" answer (retried once at once). An expired continue token
//!   falls back to one full list. The result goes to `store.replace`.
//! - **Watch**: from the last synced RV, bookmarks on, `timeoutSeconds`
//!   random in `[300, 600)`. ADDED/MODIFIED/DELETED go to
//!   `add`/`update`/`delete`; BOOKMARK only moves the RV (and calls
//!   `store.bookmark`); every event records its RV.
//! - **Recovery**: 410 during a watch → relist; a clean end → watch again
//!   without relisting; connection refused or 429 when opening a watch (or
//!   429 during one) → back off, watch again without relisting; any other
//!   error → relist after a backoff step. A watch ending in under a second
//!   with no events is an error. Backoff: 800 ms doubling to 30 s, jitter
//!   `[d, 2d)`, reset after 2 minutes without backoff; one step after
//!   every cycle and before every retry inside one (a stalled watch, an
//!   InternalError re-watch, a streaming list refused at `""` or ended
//!   before its end bookmark), so no failure becomes a hot loop. A 429
//!   (on a list, a streaming list or a watch: a consistent list the watch
//!   cache cannot serve answers 429 in Kubernetes 1.37) waits at least
//!   what the server asked for (`Retry-After`, else the Status's
//!   `retryAfterSeconds`), at most the backoff cap.
//! - **Deadlines and byte caps** ([`RequestTimeouts`],
//!   [`Limits::max_list_page_bytes`],
//!   [`Limits::max_initial_events_bytes`]): response headers of
//!   every request (2 min), a LIST page body without a byte (1 min) and
//!   in all (10 min); a LIST page body and a streaming list's buffered
//!   initial events at most 2 GiB each. A miss is
//!   [`ReflectorError::Timeout`], an overflow
//!   [`ReflectorError::ListPageTooLarge`] /
//!   [`ReflectorError::InitialEventsTooLarge`] (nothing more is read);
//!   the reflector relists after a backoff step. The watch body keeps its
//!   idle limit ([`RequestTimeouts::watch_idle_timeout`]).
//! - **Streaming list** (default on): a watch with `sendInitialEvents=true`
//!   and `resourceVersionMatch=NotOlderThan`; initial events are buffered
//!   and handed over as one `replace` at the `k8s.io/initial-events-end`
//!   bookmark, then the same stream goes on. An unsupported answer (400/422)
//!   switches to list + watch, logged once.
//! - **Relist memory** (kcache's own rule): while a list or a streaming
//!   list is collected, an item whose key the store already holds
//!   ([`ReflectorStore::cached`](kcache_core::ReflectorStore::cached)) with the same
//!   non-empty `metadata.uid` and `metadata.resourceVersion` is replaced by
//!   the store's object, so an unchanged object is not held twice until
//!   `replace`. The count is logged as `relist_reused`.
//! - **Bad input**: an undecodable event, an object without metadata or of
//!   another kind is reported (log, [`ReflectorError::BadEvent`] to the
//!   handler, `reflector_errors_total{reason="bad_event"}`) and skipped. An
//!   `ERROR` event becomes [`ReflectorError::Api`] and follows the rules.
//!   Server-provided text is cut in logs: an [`ApiError`] displays at most
//!   [`MAX_DISPLAYED_MESSAGE`] bytes of its message (the field keeps it
//!   whole), and a log line at most 2 KiB of an error.
//! - **Server-side sharding** ([`WatchConfig::shard_selector`],
//!   KEP-5866): the `shardSelector` parameter on every LIST page,
//!   streaming list and watch; every list item and watch event is also
//!   checked on the client with the same hash, so the store holds exactly
//!   the shard when the apiserver ignores the parameter (feature gate
//!   `ShardedListAndWatch` off). [`Reflector::shard_filter_mode`] says
//!   which side filters (a list echoing the selector in
//!   `metadata.shardInfo`: the apiserver); a rejected selector is
//!   [`ReflectorError::ShardSelectorRejected`].
//! - **Warm resume** ([`ReflectorBuilder::resume_from`]): watch from a
//!   known resourceVersion without a list; synced on a bookmark or a clean
//!   end at or after the watch's timeout, never on an earlier end.
//!
//! See [The reflector](https://github.com/kcache/kcache/blob/main/docs/reflector.md) for the recovery rules in prose.

// docs.rs (rustdoc --cfg docsrs, nightly): items behind a feature carry a
// badge naming it.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod codec;
mod decode;
mod error;
mod framing;
#[cfg(feature = "fuzzing")]
#[cfg_attr(docsrs, doc(cfg(feature = "fuzzing")))]
pub mod fuzzing;
mod limits;
mod metrics;
#[cfg(feature = "prometheus")]
mod prometheus;
mod reflector;
mod shard;
mod split;
mod watch_config;
mod wire_format;

pub use backoff::BackoffConfig;
#[cfg(feature = "fuzzing")]
#[cfg_attr(docsrs, doc(cfg(feature = "fuzzing")))]
pub use decode::{Bookmark, EventDecoder, ListPage, PageContent, WatchEvent};
pub use error::{
    ApiError, BadEvent, BadEventKind, ErrorReason, INITIAL_EVENTS_END_ANNOTATION, ListBodyError,
    MAX_DISPLAYED_MESSAGE, Operation, ReflectorError, TimeoutPhase,
};
pub use framing::DEFAULT_MAX_FRAME;
#[cfg(feature = "fuzzing")]
#[cfg_attr(docsrs, doc(cfg(feature = "fuzzing")))]
pub use framing::{FrameTooLarge, LineFramer, ProtobufFramer};
pub use limits::{
    DEFAULT_LIST_BODY_IDLE_TIMEOUT, DEFAULT_LIST_BODY_TIMEOUT, DEFAULT_MAX_LIST_BYTES,
    DEFAULT_MIN_WATCH_TIMEOUT, DEFAULT_RESPONSE_HEADERS_TIMEOUT, Limits, RequestTimeouts,
};
pub use metrics::{NoopReflectorMetricsProvider, ReflectorMetricsProvider};
#[cfg(feature = "prometheus")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub use prometheus::PrometheusReflectorMetricsProvider;
pub use reflector::{
    DEFAULT_PAGE_SIZE, RESUME_WATCH_TIMEOUT, Reflector, ReflectorBuilder, WATCH_IDLE_MARGIN,
    WatchErrorHandler,
};
pub use shard::ShardFilterMode;
pub use watch_config::WatchConfig;
pub use wire_format::WireFormat;
