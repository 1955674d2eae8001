//! hello-operator against the local control plane, run as the
//! ServiceAccount of `manifests/rbac.yaml` (a token from the TokenRequest
//! API) on an apiserver that also enforces
//! OwnerReferencesPermissionEnforcement (which some distributions enable):
//! the CRD of `manifests/crd.yaml` installs; a Greeting gets its ConfigMap (content, owner reference),
//! status, finalizer and events; updates follow; a delete runs the
//! finalizer's cleanup; an `unmanaged` annotation makes it remove its
//! finalizer and let go. The apiserver's audit log then shows that every
//! request of the operator was allowed and that every verb the manifest
//! grants was used: the RBAC is sufficient and no wider than needed.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use hello_operator::reconcile::{MESSAGE_KEY, UNMANAGED, config_map_name};
use hello_operator::{FINALIZER, Greeting, GreetingSpec, NAME, Settings};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kcache_envtest::{AuditPolicy, ControlPlane};
use kcache_testing::eventually_ok;
use kcache_testing::raw_http::try_request;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

mod common;

use common::yaml_docs;

/// Audit the requests of every ServiceAccount (the operator's is the only
/// one that makes any).
const AUDIT_SERVICE_ACCOUNTS: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [\"RequestReceived\"]
rules:
  - level: Metadata
    userGroups: [\"system:serviceaccounts\"]
  - level: None
";

/// Granted verbs this test's requests do not show in the audit log, and
/// why each is still needed.
const NOT_SEEN_AS_REQUESTS: [(&str, &str, &str); 3] = [
    // Checked by the apiserver inside a server-side apply that creates the
    // ConfigMap (the request itself is a patch).
    ("", "configmaps", "create"),
    // The informers stream their initial list (a watch with
    // sendInitialEvents); they list instead on an apiserver that cannot
    // (client-go's fallback), so the verb stays.
    ("", "configmaps", "list"),
    ("demo.kcache.dev", "greetings", "list"),
];

async fn create<K>(api: Api<K>, doc: Value)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(doc).expect("a manifest of this kind");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("applying the manifest");
}

/// Applies `manifests/rbac.yaml` with its namespace replaced by `ns`.
async fn apply_rbac(admin: &Client, ns: &str) {
    for mut doc in yaml_docs("rbac.yaml") {
        if doc["metadata"].get("namespace").is_some() {
            doc["metadata"]["namespace"] = ns.into();
        }
        if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
            for s in subjects {
                s["namespace"] = ns.into();
            }
        }
        let c = admin.clone();
        match doc["kind"].as_str().unwrap_or_default() {
            "ServiceAccount" => create(Api::<ServiceAccount>::namespaced(c, ns), doc).await,
            "Role" => create(Api::<Role>::namespaced(c, ns), doc).await,
            "RoleBinding" => create(Api::<RoleBinding>::namespaced(c, ns), doc).await,
            "ClusterRole" => create(Api::<ClusterRole>::all(c), doc).await,
            "ClusterRoleBinding" => create(Api::<ClusterRoleBinding>::all(c), doc).await,
            other => panic!("rbac.yaml: unexpected kind {other}"),
        }
    }
}

/// (apiGroup, resource[/subresource], verb) for every verb the manifest's
/// roles grant.
fn granted() -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for doc in yaml_docs("rbac.yaml") {
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let strings = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            for g in strings("apiGroups") {
                for r in strings("resources") {
                    for v in strings("verbs") {
                        out.insert((g.clone(), r.clone(), v));
                    }
                }
            }
        }
    }
    out
}

/// A client authenticated by a token of the ServiceAccount `hello-operator`
/// in `ns`: the identity the Deployment's Pods have.
async fn service_account_client(cp: &ControlPlane, admin: &Client, ns: &str) -> Client {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(NAME, &PostParams::default(), &request)
        .await
        .expect("a token for the ServiceAccount");
    let token = answer
        .status
        .and_then(|s| s.token)
        .expect("a token in the answer");
    let mut config = cp.config();
    config.auth_info = kube::config::AuthInfo {
        token: Some(secrecy::SecretString::from(token)),
        ..kube::config::AuthInfo::default()
    };
    Client::try_from(config).expect("service account client")
}

/// GET `path` on the probe port: `Ok` on a 200, as a kubelet's probe.
async fn probe(port: u16, path: &str) -> Result<(), String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    match try_request(addr, "GET", path).await? {
        (200, _) => Ok(()),
        (status, body) => Err(format!("{path}: {status} {body}")),
    }
}

fn greeting(name: &str, greeting: Option<&str>) -> Greeting {
    Greeting::new(
        name,
        GreetingSpec {
            name: "world".into(),
            greeting: greeting.map(str::to_owned),
        },
    )
}

/// The ConfigMap of `g` holds `message` and is controlled by `g`; `g`'s
/// status says so and it holds the finalizer.
async fn synced(admin: &Client, ns: &str, name: &str, message: &str) -> Result<(), String> {
    let greetings: Api<Greeting> = Api::namespaced(admin.clone(), ns);
    let g = greetings.get(name).await.map_err(|e| e.to_string())?;
    let cm_name = config_map_name(&g);
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let cm = cms
        .get_opt(&cm_name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no ConfigMap yet")?;
    let data = cm.data.clone().unwrap_or_default();
    if data.get(MESSAGE_KEY).map(String::as_str) != Some(message) {
        return Err(format!("ConfigMap data {data:?}"));
    }
    let owner = cm.owner_references().first().ok_or("no ownerReference")?;
    if !(owner.controller == Some(true)
        && owner.kind == "Greeting"
        && owner.api_version == "demo.kcache.dev/v1"
        && Some(&owner.uid) == g.metadata.uid.as_ref())
    {
        return Err(format!("ownerReference {owner:?}"));
    }
    if !g.finalizers().iter().any(|f| f == FINALIZER) {
        return Err(format!("finalizers {:?}", g.finalizers()));
    }
    let status = g.status.clone().unwrap_or_default();
    if status.message.as_deref() != Some(message)
        || status.config_map.as_deref() != Some(cm_name.as_str())
        || status.observed_generation != g.metadata.generation
    {
        return Err(format!("status {status:?}"));
    }
    Ok(())
}

/// The events about Greeting `name`: (reason, series count).
async fn events(admin: &Client, ns: &str, name: &str) -> Result<Vec<(String, i32)>, String> {
    let list = Api::<Event>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            let count = e.series.as_ref().map_or(1, |s| s.count);
            (e.reason.unwrap_or_default(), count)
        })
        .collect())
}

/// Ok once an event about Greeting `name` has `reason` and a series
/// count of at least `count`.
async fn has_event(
    admin: &Client,
    ns: &str,
    name: &str,
    reason: &str,
    count: i32,
) -> Result<(), String> {
    let events = events(admin, ns, name).await?;
    events
        .iter()
        .any(|(r, c)| r == reason && *c >= count)
        .then_some(())
        .ok_or(format!("events {events:?}"))
}

/// Creates the Greeting `name` (the default greeting word) and waits
/// until its ConfigMap says `Hello, world!` ([`synced`]).
async fn create_synced(admin: &Client, ns: &str, name: &str) {
    Api::<Greeting>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &greeting(name, None))
        .await
        .expect("create Greeting");
    eventually_ok(
        &format!("the ConfigMap of {name} says Hello"),
        Duration::from_secs(90),
        || synced(admin, ns, name, "Hello, world!"),
    )
    .await;
}

/// Deletes the Greeting `name`.
async fn delete(greetings: &Api<Greeting>, name: &str) {
    greetings
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete Greeting");
}

/// Ok once the Greeting `name` is gone.
async fn gone(greetings: &Api<Greeting>, name: &str) -> Result<(), String> {
    match greetings.get_opt(name).await.map_err(|e| e.to_string())? {
        Some(g) => Err(format!(
            "the Greeting is still there (finalizers {:?})",
            g.finalizers()
        )),
        None => Ok(()),
    }
}

/// (apiGroup, resource[/subresource], verb, code) of each request of the
/// ServiceAccount in the audit log.
fn audited(cp: &ControlPlane, user: &str) -> Vec<(String, String, String, i64)> {
    let path = cp.audit_log_path().expect("audit log on");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["user"]["username"] == user && e["objectRef"].is_object())
        .map(|e| {
            let r = &e["objectRef"];
            let mut resource = r["resource"].as_str().unwrap_or_default().to_owned();
            if let Some(sub) = r["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            (
                r["apiGroup"].as_str().unwrap_or_default().to_owned(),
                resource,
                e["verb"].as_str().unwrap_or_default().to_owned(),
                e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greeting_operator_runs_with_the_manifest_rbac() {
    let started = Instant::now();
    let cp = ControlPlane::builder()
        .apiserver_arg("--enable-admission-plugins=OwnerReferencesPermissionEnforcement")
        .audit_log(AuditPolicy::Custom(AUDIT_SERVICE_ACCOUNTS.to_owned()))
        .start()
        .await
        .expect("control plane");
    let admin = cp.client().expect("admin client");
    let ns = cp.create_namespace("hello").await.expect("namespace");

    // The CRD, exactly as manifests/crd.yaml has it.
    let crd: CustomResourceDefinition =
        serde_json::from_value(yaml_docs("crd.yaml").remove(0)).expect("CRD");
    cp.install_crds(&[crd]).await.expect("installing the CRD");

    // The operator's identity: the manifest's ServiceAccount and roles.
    apply_rbac(&admin, &ns).await;
    let client = service_account_client(&cp, &admin, &ns).await;
    let user = format!("system:serviceaccount:{ns}:{NAME}");
    // It is not an admin: what the manifest does not grant is refused.
    match Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("the ServiceAccount may list Secrets: {other:?}"),
    }

    // Run it as the Deployment would (watching all namespaces, its Lease in
    // its own namespace).
    let probes = TcpListener::bind("127.0.0.1:0").expect("probe port");
    let port = probes.local_addr().expect("probe addr").port();
    let settings = Settings {
        namespace: None,
        lease_namespace: ns.clone(),
        identity: "hello-operator-0".into(),
        probes,
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(hello_operator::run(client, settings, async {
        let _ = stop_rx.await;
    }));
    eventually_ok(
        "/healthz and /readyz answer 200",
        Duration::from_secs(90),
        || async {
            probe(port, "/healthz").await?;
            probe(port, "/readyz").await
        },
    )
    .await;
    eventually_ok(
        "the replica holds the Lease",
        Duration::from_secs(90),
        || async {
            let lease = Api::<Lease>::namespaced(admin.clone(), &ns)
                .get_opt(NAME)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no Lease")?;
            let holder = lease.spec.and_then(|s| s.holder_identity);
            (holder.as_deref() == Some("hello-operator-0"))
                .then_some(())
                .ok_or(format!("holder {holder:?}"))
        },
    )
    .await;

    // Create: the ConfigMap appears, controlled by the Greeting.
    let greetings: Api<Greeting> = Api::namespaced(admin.clone(), &ns);
    create_synced(&admin, &ns, "hi").await;

    // Update: the ConfigMap follows; and back (the same event again: the
    // recorder folds it into a series with a patch).
    for (word, message) in [("Hi", "Hi, world!"), ("Hello", "Hello, world!")] {
        let patch = serde_json::json!({ "spec": { "greeting": word } });
        greetings
            .patch("hi", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("update Greeting");
        eventually_ok(
            &format!("the ConfigMap says {message}"),
            Duration::from_secs(90),
            || synced(&admin, &ns, "hi", message),
        )
        .await;
    }
    eventually_ok(
        "Synced events, one a series of 2",
        Duration::from_secs(90),
        || has_event(&admin, &ns, "hi", "Synced", 2),
    )
    .await;

    // Delete: the finalizer's cleanup deletes the ConfigMap, then lets the
    // Greeting go.
    delete(&greetings, "hi").await;
    eventually_ok(
        "the Greeting and its ConfigMap are gone",
        Duration::from_secs(90),
        || async {
            let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
            if cms
                .get_opt("hi-greeting")
                .await
                .map_err(|e| e.to_string())?
                .is_some()
            {
                return Err("the ConfigMap is still there".into());
            }
            gone(&greetings, "hi").await
        },
    )
    .await;
    eventually_ok("a Deleted event", Duration::from_secs(90), || {
        has_event(&admin, &ns, "hi", "Deleted", 1)
    })
    .await;

    // Un-managing: the annotation makes the operator remove its finalizer
    // and let go; deleting the Greeting then runs no cleanup.
    create_synced(&admin, &ns, "bye").await;
    let patch = serde_json::json!({ "metadata": { "annotations": { UNMANAGED: "true" } } });
    greetings
        .patch("bye", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate Greeting");
    eventually_ok(
        "the finalizer is removed",
        Duration::from_secs(90),
        || async {
            let g = greetings.get("bye").await.map_err(|e| e.to_string())?;
            if !g.finalizers().is_empty() {
                return Err(format!("finalizers {:?}", g.finalizers()));
            }
            has_event(&admin, &ns, "bye", "Unmanaged", 1).await
        },
    )
    .await;
    delete(&greetings, "bye").await;
    eventually_ok(
        "the unmanaged Greeting is gone",
        Duration::from_secs(90),
        || gone(&greetings, "bye"),
    )
    .await;
    let left = Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .get_opt("bye-greeting")
        .await
        .expect("get ConfigMap");
    assert!(
        left.is_some(),
        "the cleanup ran for an unmanaged Greeting (its ConfigMap was deleted)"
    );

    // Shut down: releases the Lease, stops cleanly.
    let _ = stop_tx.send(());
    operator
        .await
        .expect("operator task")
        .expect("the operator stopped cleanly");

    // Every request of the operator was allowed, and every verb the
    // manifest grants was used.
    let requests: Vec<_> = audited(&cp, &user)
        .into_iter()
        .filter(|(_, resource, _, _)| resource != "secrets") // the check above
        .collect();
    let refused: Vec<_> = requests.iter().filter(|r| r.3 == 403).collect();
    assert!(refused.is_empty(), "refused by RBAC: {refused:?}");
    let used: BTreeSet<(String, String, String)> = requests
        .iter()
        .map(|(g, r, v, _)| (g.clone(), r.clone(), v.clone()))
        .chain(
            NOT_SEEN_AS_REQUESTS
                .iter()
                .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string())),
        )
        .collect();
    let unused: Vec<_> = granted().difference(&used).cloned().collect();
    assert!(
        unused.is_empty(),
        "granted by manifests/rbac.yaml but never used: {unused:?} (used: {used:?})"
    );
    eprintln!(
        "hello-operator: {} requests, all allowed, using {used:?}; whole test {:?}",
        requests.len(),
        started.elapsed()
    );
}

/// The same-type recipe of the guide: a copy follows its source, through
/// the index on the shared ConfigMap informer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_follows_its_source() {
    use hello_operator::recipes::{
        COPY_OF, CopierContext, reconcile_copy, same_type_primary_and_watched,
    };
    use kcache::prelude::SharedInformerFactory;
    use std::collections::BTreeMap;

    let kcache_testing::envtest::TestNamespace { client, ns, .. } =
        kcache_testing::envtest::namespace("copier").await;
    let factory = SharedInformerFactory::builder(client.clone())
        .config(kcache::prelude::InformerConfig {
            watch: kcache::prelude::WatchConfig {
                namespace: Some(ns.clone()),
                ..kcache::prelude::WatchConfig::default()
            },
            ..kcache::prelude::InformerConfig::default()
        })
        .build();
    let controller = same_type_primary_and_watched(&factory).expect("index");
    let handle = controller.handle();
    let ctx = std::sync::Arc::new(CopierContext {
        client: client.clone(),
        config_maps: factory.informer::<ConfigMap>(),
    });
    let task = tokio::spawn(controller.run(reconcile_copy, ctx));

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm = |name: &str, data: &[(&str, &str)], copy_of: Option<&str>| {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.to_owned());
        cm.metadata.annotations =
            copy_of.map(|source| BTreeMap::from([(COPY_OF.to_owned(), source.to_owned())]));
        cm.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        cm
    };
    let pp = PostParams::default();
    cms.create(&pp, &cm("source", &[("a", "1")], None))
        .await
        .expect("source");
    cms.create(&pp, &cm("copy", &[], Some("source")))
        .await
        .expect("copy");
    for value in ["1", "2"] {
        if value == "2" {
            let patch = serde_json::json!({ "data": { "a": "2" } });
            cms.patch("source", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("update source");
        }
        eventually_ok(
            &format!("the copy says a={value}"),
            Duration::from_secs(90),
            || async {
                let copy = cms.get("copy").await.map_err(|e| e.to_string())?;
                let a = copy.data.unwrap_or_default().remove("a");
                (a.as_deref() == Some(value))
                    .then_some(())
                    .ok_or(format!("a = {a:?}"))
            },
        )
        .await;
    }
    handle.stop();
    task.await
        .expect("copier task")
        .expect("the copier stopped cleanly");
    factory.shutdown().await;
}
