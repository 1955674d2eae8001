//! [`ReflectorBuilder`]: a reflector's configuration, with client-go's
//! defaults, and [`Reflector::builder`] / [`Reflector::builder_with`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use kcache_core::{Format, ReflectorStore};
use kube::{Client, Resource};
use parking_lot::Mutex;

#[cfg(doc)]
use super::RESUME_WATCH_TIMEOUT;
use super::{DEFAULT_MIN_WATCH_TIMEOUT, Reflector, Shared, WatchErrorHandler};
use crate::backoff::BackoffConfig;
use crate::codec::{self, Target};
use crate::decode::EventDecoder;
use crate::error::ReflectorError;
use crate::limits::{Limits, RequestTimeouts};
use crate::metrics::{NoopReflectorMetricsProvider, ReflectorMetrics, ReflectorMetricsProvider};
use crate::shard::Sharding;
use crate::watch_config::WatchConfig;

/// Configures a [`Reflector`]; obtained from [`Reflector::builder`] or
/// [`Reflector::builder_with`]. Every setting has client-go's default.
pub struct ReflectorBuilder<K: Resource> {
    client: Client,
    store: Arc<dyn ReflectorStore<K>>,
    dyntype: K::DynamicType,
    options: WatchConfig,
    resync_period: Option<Duration>,
    backoff: BackoffConfig,
    name: Option<String>,
    handler: Option<WatchErrorHandler>,
    metrics: Arc<dyn ReflectorMetricsProvider>,
    resume_from: Option<String>,
}

impl<K: Resource> fmt::Debug for ReflectorBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReflectorBuilder")
            .field("namespace", &self.options.namespace)
            .field("label_selector", &self.options.label_selector)
            .field("field_selector", &self.options.field_selector)
            .field("page_size", &self.options.page_size)
            .field("use_watch_list", &self.options.use_watch_list)
            .field("resync_period", &self.resync_period)
            .field("wire_format", &self.options.wire_format)
            .field("shard_selector", &self.options.shard_selector)
            .finish_non_exhaustive()
    }
}

impl<K: Resource + 'static> ReflectorBuilder<K> {
    /// Every list and watch setting (namespace, selectors, page size,
    /// streaming lists, object options, watch timeouts, request deadlines,
    /// size caps, wire format, shard selector; default:
    /// [`WatchConfig::default`]): the one configuration an informer passes
    /// down whole (as kube-runtime's `watcher::Config`).
    pub fn config(mut self, options: WatchConfig) -> Self {
        self.options = options;
        self
    }

    /// Call the store's `resync` every `period` while watching (default: never).
    /// A zero period disables it.
    pub fn resync_period(mut self, period: Duration) -> Self {
        self.resync_period = (!period.is_zero()).then_some(period);
        self
    }

    /// Backoff settings (default: [`BackoffConfig::default`]).
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.backoff = backoff;
        self
    }

    /// The reflector's name, used in logs and as the metrics label
    /// (default: the resource, e.g. `configmaps` or `widgets.example.com`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A hook called with every error (list and watch failures, skipped
    /// events, store errors). Default: none (errors are logged).
    pub fn watch_error_handler(
        mut self,
        handler: impl Fn(&ReflectorError) + Send + Sync + 'static,
    ) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// Where metrics go (default: [`NoopReflectorMetricsProvider`]).
    pub fn metrics(mut self, provider: Arc<dyn ReflectorMetricsProvider>) -> Self {
        self.metrics = provider;
        self
    }

    /// Start from a known resourceVersion instead of listing (a warm
    /// restart): the store must already hold the state as of `rv`.
    ///
    /// The first cycle does no list: it watches from `rv` (with a server
    /// timeout of [`RESUME_WATCH_TIMEOUT`] until confirmed). The resume is
    /// confirmed, and [`Reflector::has_synced`] turns true, when that watch
    /// delivers a bookmark (every change up to the bookmark's
    /// resourceVersion has then been handed to the store) or ends cleanly
    /// at or after its timeout (the server accepted `rv` and sent what
    /// followed it). A watch that ends earlier (a reset or closed
    /// connection) or stalls confirms nothing: it is re-opened from the
    /// last resourceVersion after a backoff step.
    /// If the server no longer has `rv` (`410 Gone` / `Expired`), the
    /// reflector relists exactly as after any expired watch; the list's
    /// `replace` corrects the store, and the list confirms the sync. All
    /// other errors follow the normal rules. An empty `rv` is ignored.
    pub fn resume_from(mut self, rv: impl Into<String>) -> Self {
        let rv = rv.into();
        self.resume_from = (!rv.is_empty()).then_some(rv);
        self
    }

    /// Builds the reflector.
    pub fn build(self) -> Reflector<K> {
        let dt = &self.dyntype;
        let metadata_only = K::metadata_api();
        let url_path = K::url_path(dt, self.options.namespace.as_deref());
        let group = K::group(dt);
        let plural = K::plural(dt);
        let mut resource = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        let name = self.name.unwrap_or_else(|| resource.clone());
        if let Some(ns) = &self.options.namespace {
            resource.push_str(" in namespace ");
            resource.push_str(ns);
        }
        let (kind, api_version) = if metadata_only {
            (
                "PartialObjectMetadata".to_owned(),
                "meta.k8s.io/v1".to_owned(),
            )
        } else {
            (K::kind(dt).into_owned(), K::api_version(dt).into_owned())
        };
        let kind = (!kind.is_empty()).then_some(kind);
        let api_version = (!api_version.is_empty()).then_some(api_version);
        let codec = codec::preferred(
            self.options.wire_format,
            Target {
                api_version: api_version.as_deref(),
                kind: kind.as_deref(),
                metadata_only,
            },
        );
        let (timeouts, limits) = (self.options.timeouts, self.options.limits);
        Reflector {
            metrics: ReflectorMetrics::new(&*self.metrics, &name),
            client: self.client,
            store: self.store,
            url_path,
            metadata_only,
            resource,
            name,
            decoder: EventDecoder::new(
                self.options.object_options,
                kind.as_deref(),
                api_version.as_deref(),
            ),
            label_selector: self.options.label_selector,
            field_selector: self.options.field_selector,
            page_size: self.options.page_size,
            use_watch_list: self.options.use_watch_list,
            resync_period: self.resync_period,
            backoff: self.backoff,
            handler: self.handler,
            timeouts: RequestTimeouts {
                min_watch_timeout: timeouts.min_watch_timeout.max(DEFAULT_MIN_WATCH_TIMEOUT),
                ..timeouts
            },
            limits: Limits {
                max_event_size: limits.max_event_size.max(1),
                max_list_page_bytes: limits.max_list_page_bytes.max(1),
                max_initial_events_bytes: limits.max_initial_events_bytes.max(1),
            },
            shared: Mutex::new(Shared {
                last_sync_rv: self.resume_from.clone().unwrap_or_default(),
                synced: false,
            }),
            synced_notify: tokio::sync::Notify::new(),
            resume_from: self.resume_from,
            sharding: self.options.shard_selector.map(Sharding::new),
            shard_dropped: AtomicU64::new(0),
            fallback_logged: AtomicBool::new(false),
            running: AtomicBool::new(false),
            codec,
            asks_json: AtomicBool::new(codec.format() == Format::Json),
        }
    }
}

impl<K: Resource + 'static> Reflector<K> {
    /// A builder for a resource whose dynamic type is `Default` (every
    /// k8s-openapi type, derived custom resources, `PartialObjectMeta<K>`
    /// of those).
    pub fn builder(client: Client, store: Arc<dyn ReflectorStore<K>>) -> ReflectorBuilder<K>
    where
        K::DynamicType: Default,
    {
        Self::builder_with(client, store, K::DynamicType::default())
    }

    /// A builder with an explicit dynamic type, e.g. an `ApiResource` for
    /// `DynamicObject`.
    pub fn builder_with(
        client: Client,
        store: Arc<dyn ReflectorStore<K>>,
        dyntype: K::DynamicType,
    ) -> ReflectorBuilder<K> {
        ReflectorBuilder {
            client,
            store,
            dyntype,
            options: WatchConfig::default(),
            resync_period: None,
            backoff: BackoffConfig::default(),
            name: None,
            handler: None,
            metrics: Arc::new(NoopReflectorMetricsProvider),
            resume_from: None,
        }
    }
}
