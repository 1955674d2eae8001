//! Integration tests of the local control plane: real etcd + kube-apiserver.

use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kcache_envtest::{ControlPlane, pid_alive};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams, WatchEvent,
    WatchParams,
};
use serde_json::json;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "data": { "k": "v" }
    }))
    .unwrap()
}

#[tokio::test]
async fn creates_and_lists_a_config_map() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("cm").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    api.create(&PostParams::default(), &config_map("one"))
        .await
        .unwrap();
    let list = api.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(names, vec!["one".to_string()]);
    let got = api.get("one").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    // the server is the pinned release
    let version = cp.client().unwrap().apiserver_version().await.unwrap();
    assert_eq!(version.git_version, kcache_envtest::KUBERNETES_VERSION);
}

#[tokio::test]
async fn user_without_rbac_is_forbidden_until_bound() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("rbac").await.unwrap();
    let alice = cp
        .client_for_user("alice", &["kcache-testers"])
        .await
        .unwrap();
    let as_alice: Api<ConfigMap> = Api::namespaced(alice, &ns);
    match as_alice.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }

    let admin = cp.client().unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "cm-reader" },
        "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"] }]
    }))
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "alice-reads-cms" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice" }]
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin, &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // The RBAC authorizer reads roles through an informer: allow it a moment.
    let mut last = None;
    for _ in 0..100 {
        match as_alice.list(&ListParams::default()).await {
            Ok(list) => {
                assert!(list.items.is_empty());
                return;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("alice still cannot list after the RoleBinding: {last:?}");
}

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": { "name": "widgets.envtest.kcache.io" },
        "spec": {
            "group": "envtest.kcache.io",
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList" },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": { "spec": { "type": "object", "properties": { "size": { "type": "integer" } } } }
                } }
            }]
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn installs_a_crd_and_serves_custom_objects() {
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("crd").await.unwrap();
    cp.install_crds(&[widget_crd()]).await.unwrap();
    // installing again is idempotent
    cp.install_crds(&[widget_crd()]).await.unwrap();

    let crd = Api::<CustomResourceDefinition>::all(cp.client().unwrap())
        .get("widgets.envtest.kcache.io")
        .await
        .unwrap();
    let established = crd
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established);

    let gvk = GroupVersionKind::gvk("envtest.kcache.io", "v1", "Widget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let api: Api<DynamicObject> = Api::namespaced_with(cp.client().unwrap(), &ns, &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "envtest.kcache.io/v1",
        "kind": "Widget",
        "metadata": { "name": "w1" },
        "spec": { "size": 3 }
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let got = api.get("w1").await.unwrap();
    assert_eq!(got.data["spec"]["size"], 3);
}

/// For a fault test, a control plane of its own (never the shared one), a
/// namespace `prefix-*` in it and the ConfigMap `name` created there; with
/// the ConfigMap's resourceVersion.
async fn own_plane_with_config_map(
    prefix: &str,
    name: &str,
) -> (ControlPlane, String, Api<ConfigMap>, String) {
    let cp = ControlPlane::start().await.unwrap();
    let ns = cp.create_namespace(prefix).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    let created = api
        .create(&PostParams::default(), &config_map(name))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.unwrap();
    (cp, ns, api, rv)
}

#[tokio::test]
async fn apiserver_restart_keeps_data_and_ends_open_watches() {
    let (cp, ns, api, rv) = own_plane_with_config_map("restart", "survivor").await;

    let mut watch = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    cp.restart_apiserver().await.unwrap();

    // The watch opened before the restart must end: an error or end of stream.
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match watch.next().await {
                None => return "end of stream",
                Some(Err(_)) => return "error",
                Some(Ok(WatchEvent::Error(_))) => return "error event",
                Some(Ok(_)) => continue,
            }
        }
    })
    .await
    .expect("the old watch did not end after the apiserver restart");
    assert!(["end of stream", "error", "error event"].contains(&ended));

    // Data survived (etcd kept it) and a new watch works.
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    assert_eq!(
        api.get("survivor")
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap(),
        rv
    );
    // The restarted apiserver's watch cache starts at the current revision,
    // so the pre-restart `rv` may already be 410 Gone (the apiserver writes
    // its own objects while starting): watch from a fresh list's version.
    let listed = api.list(&ListParams::default()).await.unwrap();
    let now_rv = listed
        .metadata
        .resource_version
        .expect("a list carries a resourceVersion");
    let mut watch = api
        .watch(&WatchParams::default(), &now_rv)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &config_map("after"))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(30), watch.try_next())
        .await
        .expect("no event on the new watch")
        .unwrap()
        .expect("new watch ended");
    match event {
        WatchEvent::Added(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("after")),
        other => panic!("expected Added, got {other:?}"),
    }

    // stop/start separately, too
    cp.stop_apiserver().await.unwrap();
    assert!(!cp.apiserver_running());
    assert!(api.get("survivor").await.is_err());
    cp.start_apiserver().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    assert!(api.get("survivor").await.is_ok());
}

#[tokio::test]
async fn etcd_compaction_makes_old_resource_versions_gone() {
    let (cp, ns, api, old_rv) = own_plane_with_config_map("compact", "a").await;
    for i in 0..5 {
        api.create(&PostParams::default(), &config_map(&format!("b{i}")))
            .await
            .unwrap();
    }
    let compacted = cp.compact_etcd().await.unwrap();
    assert!(compacted > old_rv.parse::<i64>().unwrap());
    // A restart empties the watch cache, so the old RV must now be answered 410.
    cp.restart_apiserver().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    let mut gone = false;
    match api.watch(&WatchParams::default(), &old_rv).await {
        Err(kube::Error::Api(s)) => gone = s.code == 410,
        Ok(stream) => {
            let mut stream = stream.boxed();
            if let Ok(Some(Ok(WatchEvent::Error(e)))) =
                tokio::time::timeout(Duration::from_secs(30), stream.next()).await
            {
                gone = e.code == 410;
            }
        }
        Err(_) => {}
    }
    assert!(
        gone,
        "a watch from a compacted resourceVersion must be 410 Gone"
    );
}

#[tokio::test]
async fn dropping_the_handle_stops_both_processes() {
    let cp = ControlPlane::start().await.unwrap();
    let (etcd, api) = cp.pids();
    let (etcd, api) = (etcd.unwrap(), api.unwrap());
    assert!(pid_alive(etcd) && pid_alive(api));
    drop(cp);
    assert!(!pid_alive(etcd), "etcd still running after drop");
    assert!(!pid_alive(api), "kube-apiserver still running after drop");
}

/// Runs in a child process (see below): starts a control plane, prints the
/// PIDs, then aborts without running any destructor.
#[tokio::test]
#[ignore = "helper for processes_exit_when_the_test_process_dies"]
async fn helper_start_then_abort() {
    if std::env::var_os("KCACHE_ENVTEST_HELPER").is_none() {
        return;
    }
    let cp = ControlPlane::start().await.unwrap();
    let (etcd, api) = cp.pids();
    println!("PIDS {} {}", etcd.unwrap(), api.unwrap());
    std::process::abort();
}

#[test]
fn processes_exit_when_the_test_process_dies() {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "helper_start_then_abort",
            "--ignored",
            "--nocapture",
        ])
        .env("KCACHE_ENVTEST_HELPER", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PIDS "))
        .unwrap_or_else(|| {
            panic!(
                "helper printed no PIDs: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let pids: Vec<u32> = line
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(!out.status.success(), "the helper must have aborted");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| pid_alive(*p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for p in pids {
        assert!(
            !pid_alive(p),
            "process {p} outlived the test process that started it"
        );
    }
}

#[tokio::test]
async fn audit_log_records_writes_in_order() {
    let cp = ControlPlane::builder()
        .audit_log(kcache_envtest::AuditPolicy::Writes)
        .start()
        .await
        .unwrap();
    let log = cp.audit_log_path().expect("audit log on").to_path_buf();
    let ns = cp.create_namespace("audit").await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), &ns);
    api.create(&PostParams::default(), &config_map("one"))
        .await
        .unwrap();
    api.delete("one", &Default::default()).await.unwrap();
    api.list(&ListParams::default()).await.unwrap();
    // blocking mode: the event is written before the answer
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["objectRef"]["namespace"] == ns.as_str())
        .collect();
    let writes: Vec<_> = events
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "configmaps")
        .map(|e| {
            format!(
                "{} {}",
                e["verb"].as_str().unwrap(),
                e["stage"].as_str().unwrap()
            )
        })
        .collect();
    // writes only, in order, each when received and when answered
    assert_eq!(
        writes,
        [
            "create RequestReceived",
            "create ResponseComplete",
            "delete RequestReceived",
            "delete ResponseComplete"
        ]
    );
    let created = events
        .iter()
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "configmaps"
                && e["stage"] == "ResponseComplete"
        })
        .unwrap();
    // with the response: the created object's uid
    assert!(created["responseObject"]["metadata"]["uid"].is_string());
}

/// Issue 15, finding 9: the control plane's private keys, admin kubeconfig
/// and logs are readable by this user only (0600), and the run folder, its
/// data folder and the PKI folder are 0700.
#[cfg(unix)]
#[tokio::test]
async fn keys_and_kubeconfig_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let cp = ControlPlane::shared().await.unwrap();
    if cp.is_external() {
        return; // files of someone else's cluster
    }
    let mode = |p: &std::path::Path| {
        let m = std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode();
        format!("{:o}", m & 0o7777)
    };
    let run = cp.run_dir();
    let pki = run.join("data/pki");
    for d in [run.to_path_buf(), run.join("data"), pki.clone()] {
        assert_eq!(mode(&d), "700", "{}", d.display());
    }
    let mut files = vec![
        cp.kubeconfig_path().to_path_buf(),
        run.join("etcd.log"),
        run.join("kube-apiserver.log"),
    ];
    for f in [
        "ca.crt",
        "apiserver.crt",
        "apiserver.key",
        "sa.key",
        "sa.pub",
    ] {
        files.push(pki.join(f));
    }
    for f in &files {
        assert_eq!(mode(f), "600", "{}", f.display());
    }
    // every file of the PKI folder, including any the apiserver adds
    for e in std::fs::read_dir(&pki).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() && p.extension().is_some_and(|x| x == "key") {
            assert_eq!(mode(&p), "600", "{}", p.display());
        }
    }
}

/// The HTTP-mode proxy's watch delay: a watch event arrives about the
/// delay late, while a write and a list through the same proxy do not wait.
#[tokio::test]
async fn proxy_delays_watch_events_but_not_writes_or_lists() {
    use kcache_envtest::proxy::FaultProxy;
    let cp = ControlPlane::shared().await.unwrap();
    let ns = cp.create_namespace("delay").await.unwrap();
    let proxy = FaultProxy::start_http(cp.config()).await.unwrap();
    let delay = Duration::from_millis(1500);
    assert!(proxy.delay_watch_events(delay));
    let client = proxy.client(cp.config()).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut watch = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let started = std::time::Instant::now();
    let created = api
        .create(&PostParams::default(), &config_map("late"))
        .await
        .unwrap();
    let write_took = started.elapsed();
    assert!(write_took < delay, "the write waited: {write_took:?}");
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "the list sees the write at once");
    let event = tokio::time::timeout(Duration::from_secs(30), watch.try_next())
        .await
        .expect("the event came")
        .unwrap()
        .unwrap();
    let took = started.elapsed();
    match event {
        WatchEvent::Added(cm) => {
            assert_eq!(
                cm.metadata.resource_version,
                created.metadata.resource_version
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(took >= delay, "the event was not delayed: {took:?}");
    assert!(proxy.stats().delayed_watch >= 1, "{:?}", proxy.stats());
}
