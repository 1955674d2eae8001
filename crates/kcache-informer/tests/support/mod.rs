//! The informer tests' fake apiserver ([`FakeApi`], from kcache-testing),
//! an informer on it, and a recording handler.
#![allow(dead_code, unused_imports)]

mod recorder;

pub use recorder::{Recorder, Seen};

pub use k8s_openapi::api::core::v1::ConfigMap;
pub use kcache_testing::fake::FakeApi;

use kcache_informer::{InformerError, SharedIndexInformer, SharedIndexInformerBuilder};

use kcache_reflector::WatchConfig;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A watch error handler (for a builder's `watch_error_handler`) that
/// records `f` of every error it is given, and what it recorded.
pub fn record_watch_errors<T>(
    f: impl Fn(&kcache_reflector::ReflectorError) -> T + Send + Sync + 'static,
) -> (
    kcache_reflector::WatchErrorHandler,
    std::sync::Arc<std::sync::Mutex<Vec<T>>>,
)
where
    T: Send + 'static,
{
    let seen: std::sync::Arc<std::sync::Mutex<Vec<T>>> = Default::default();
    let s2 = seen.clone();
    let handler: kcache_reflector::WatchErrorHandler =
        std::sync::Arc::new(move |e| s2.lock().unwrap().push(f(e)));
    (handler, seen)
}

/// Runs the informer on a task; returns the token that stops it and the
/// task (its result is the run's).
pub fn spawn_run<K>(
    informer: &SharedIndexInformer<K>,
) -> (CancellationToken, JoinHandle<Result<(), InformerError>>)
where
    K: kube::Resource + Send + Sync + 'static,
    K::DynamicType: Clone + Send + Sync + 'static,
{
    let cancel = CancellationToken::new();
    let (i, c) = (informer.clone(), cancel.clone());
    let task = tokio::spawn(async move { i.run(c).await });
    (cancel, task)
}

/// An informer on a [`FakeApi`].
pub trait InformerOnFake {
    /// An informer on this fake (classic list + watch: the fake does not
    /// stream lists).
    fn informer(&self) -> SharedIndexInformerBuilder<ConfigMap>;
}

impl InformerOnFake for FakeApi {
    fn informer(&self) -> SharedIndexInformerBuilder<ConfigMap> {
        SharedIndexInformer::<ConfigMap>::builder(self.client.clone()).config(on_fake())
    }
}

/// The config of [`InformerOnFake::informer`] (classic list + watch): the
/// base of a test's own config on the fake.
pub fn on_fake() -> kcache_informer::InformerConfig {
    kcache_informer::InformerConfig {
        watch: WatchConfig {
            use_watch_list: false,
            ..WatchConfig::default()
        },
        ..kcache_informer::InformerConfig::default()
    }
}

/// The config of the wire-format tests' informers: namespace `ns` only, a
/// streaming list (`streaming`) or a list in pages of 2 (`paged`), in
/// `format`.
pub fn format_test_config(
    ns: &str,
    streaming: bool,
    paged: bool,
    format: kcache_reflector::WireFormat,
) -> kcache_informer::InformerConfig {
    kcache_informer::InformerConfig {
        watch: WatchConfig {
            namespace: Some(ns.to_owned()),
            use_watch_list: streaming,
            page_size: if paged { 2 } else { 0 },
            wire_format: format,
            ..WatchConfig::default()
        },
        ..kcache_informer::InformerConfig::default()
    }
}
