//! The recipes of docs/getting-started.md, compiled with the operator (not
//! run by it): what every operator meets sooner or later.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kcache::prelude::*;

use crate::crd::Greeting;

// ANCHOR: cross_namespace
/// On a child in another namespace (or cluster-scoped): `namespace/name`
/// of the Greeting it belongs to.
pub const OWNER_ANNOTATION: &str = "demo.kcache.dev/owner";

/// Children in other namespaces: an ownerReference cannot cross
/// namespaces (the garbage collector ignores it, and `owns` cannot map it
/// back), so the child names its owner in an annotation, `watches` maps it
/// back, and a finalizer on the owner deletes the children (no garbage
/// collector will).
pub fn cross_namespace_children(factory: &SharedInformerFactory) -> Controller<Greeting> {
    Controller::<Greeting>::new(factory, Config::default().name("greeting-mirror"))
        .watches::<ConfigMap>(|cm| match cm.annotations().get(OWNER_ANNOTATION) {
            Some(owner) => vec![owner.to_owned()],
            None => vec![],
        })
}
// ANCHOR_END: cross_namespace

// ANCHOR: same_type
/// On a ConfigMap: the name of the ConfigMap (same namespace) it copies.
pub const COPY_OF: &str = "demo.kcache.dev/copy-of";

/// The index of ConfigMaps by the key of the ConfigMap they copy.
pub const BY_SOURCE: &str = "demo.kcache.dev/by-source";

/// The same type as primary and watched: a ConfigMap annotated
/// `copy-of: <source>` is reconciled when it changes (primary) and when
/// its source changes (watched). An index on the factory's shared
/// ConfigMap informer finds the copies of a source without a request.
pub fn same_type_primary_and_watched(
    factory: &SharedInformerFactory,
) -> Result<Controller<ConfigMap>, kcache::indexer::IndexError> {
    let config_maps = factory.informer::<ConfigMap>();
    config_maps.add_indexers(Indexers::from([(
        BY_SOURCE.to_owned(),
        IndexFunc::new(|cm: &CachedObject<ConfigMap>| {
            let ns = cm.namespace().unwrap_or_default();
            Ok(cm
                .annotations()
                .get(COPY_OF)
                .map(|source| vec![format!("{ns}/{source}")])
                .unwrap_or_default())
        }),
    )]))?;
    let index = config_maps.indexer().clone();
    Ok(
        Controller::<ConfigMap>::new(factory, Config::default().name("copier"))
            // The primary's own events queue the copy itself; this maps a
            // changed source to its copies.
            .watches::<ConfigMap>(move |source| {
                index
                    .index_keys(BY_SOURCE, source.key())
                    .unwrap_or_default()
            }),
    )
}
// ANCHOR_END: same_type

// ANCHOR: reconcile_copy
/// The copier's reconcile: reads the source from the same cache.
pub async fn reconcile_copy(
    req: Request<ConfigMap>,
    informer: std::sync::Arc<SharedIndexInformer<ConfigMap>>,
) -> Result<Action, kcache::core::DecodeError> {
    let Some(copy) = req.cached else {
        return Ok(Action::await_change());
    };
    let Some(source) = copy.annotations().get(COPY_OF) else {
        return Ok(Action::await_change()); // not a copy
    };
    let ns = req.namespace.unwrap_or_default();
    if let Some(source) = informer.indexer().get_by_key(&format!("{ns}/{source}")) {
        let _data = source.decode()?.data;
        // ... write `_data` into the copy (a server-side apply) ...
    }
    Ok(Action::requeue_after(Duration::from_secs(600)))
}
// ANCHOR_END: reconcile_copy
