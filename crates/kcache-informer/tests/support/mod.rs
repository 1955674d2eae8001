//! The informer tests' fake apiserver ([`FakeApi`], from kcache-testing),
//! an informer on it, and a recording handler.
#![allow(dead_code, unused_imports)]

mod recorder;

pub use recorder::{Recorder, Seen};

pub use k8s_openapi::api::core::v1::ConfigMap;
pub use kcache_testing::fake::FakeApi;

use kcache_informer::{ListOptions, SharedIndexInformer, SharedIndexInformerBuilder};

/// An informer on a [`FakeApi`].
pub trait InformerOnFake {
    /// An informer on this fake (classic list + watch: the fake does not
    /// stream lists).
    fn informer(&self) -> SharedIndexInformerBuilder<ConfigMap>;
}

impl InformerOnFake for FakeApi {
    fn informer(&self) -> SharedIndexInformerBuilder<ConfigMap> {
        SharedIndexInformer::<ConfigMap>::builder(self.client.clone()).list_options(ListOptions {
            use_watch_list: false,
            ..ListOptions::default()
        })
    }
}
