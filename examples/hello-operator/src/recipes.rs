//! The recipes of docs/getting-started.md, compiled with the operator (not
//! run by it): what every operator meets sooner or later.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kcache::prelude::*;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

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
/// What the copier's reconciles share.
pub struct CopierContext {
    /// For the copies' writes.
    pub client: kube::Client,
    /// The factory's ConfigMap informer (the primary's and the watched
    /// one).
    pub config_maps: SharedIndexInformer<ConfigMap>,
}

/// The copier's reconcile: reads the source from the same cache and
/// writes its data into the copy when they differ.
pub async fn reconcile_copy(
    req: Request<ConfigMap>,
    ctx: Arc<CopierContext>,
) -> Result<Action, crate::Error> {
    let (Some(copy), Some(ns)) = (req.object, req.namespace) else {
        return Ok(Action::await_change()); // deleted
    };
    let Some(source) = copy.annotations().get(COPY_OF) else {
        return Ok(Action::await_change()); // not a copy
    };
    let Some(source) = ctx
        .config_maps
        .indexer()
        .get_by_key(&format!("{ns}/{source}"))
    else {
        return Ok(Action::await_change()); // its source's creation will bring it back
    };
    let data = source.decode()?.data;
    if copy.data != data {
        let patch = ConfigMap {
            metadata: ObjectMeta {
                name: copy.metadata.name.clone(),
                ..ObjectMeta::default()
            },
            data,
            ..ConfigMap::default()
        };
        Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
            .patch(
                &copy.name_any(),
                &PatchParams::apply("copier").force(),
                &Patch::Apply(&patch),
            )
            .await?;
    }
    Ok(Action::await_change())
}
// ANCHOR_END: reconcile_copy
