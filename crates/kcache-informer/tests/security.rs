//! Security properties of an informer run against the real control plane:
//!
//! - with client-certificate and bearer-token credentials, nothing that
//!   kcache or kube logs (every tracing event and span, at TRACE level) and
//!   no reported error contains key or token bytes;
//! - a Forbidden list (no RBAC) is reported once per backoff step, with
//!   the verb and resource, and never retried in a hot loop.

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kcache_core::CachedObject;
use kcache_envtest::ControlPlane;
use kcache_informer::{ResourceEventHandler, SharedIndexInformer, wait_for_cache_sync};
use kcache_reflector::ErrorReason;
use kcache_testing::builders::config_map;
use kcache_testing::envtest::{TestNamespace, create, namespace};
use kube::api::{Api, PostParams};
use kube::config::AuthInfo;
use kube::{Client, Config};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

// ---- a tracing subscriber that writes everything into a buffer ----

struct Capture {
    buf: Arc<Mutex<String>>,
    next_id: AtomicU64,
}

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut line = format!(
            "span {} {}",
            span.metadata().target(),
            span.metadata().name()
        );
        span.record(&mut Fields(&mut line));
        line.push('\n');
        self.buf.lock().unwrap().push_str(&line);
        Id::from_u64(self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut line = String::from("record");
        values.record(&mut Fields(&mut line));
        line.push('\n');
        self.buf.lock().unwrap().push_str(&line);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let m = event.metadata();
        let mut line = format!("{} {}", m.level(), m.target());
        event.record(&mut Fields(&mut line));
        line.push('\n');
        self.buf.lock().unwrap().push_str(&line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Everything traced by this test binary, on every thread.
fn captured() -> &'static Arc<Mutex<String>> {
    static BUF: OnceLock<Arc<Mutex<String>>> = OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Arc::new(Mutex::new(String::new()));
        let sub = Capture {
            buf: buf.clone(),
            next_id: AtomicU64::new(0),
        };
        tracing::subscriber::set_global_default(sub).expect("no other global subscriber");
        buf
    })
}

// ---- helpers ----

/// Counts notifications, so the run is known to have moved data.
#[derive(Clone, Default)]
struct Count(Arc<AtomicU64>);

impl<K: 'static> ResourceEventHandler<K> for Count {
    fn on_add(&self, _: &CachedObject<K>, _: bool) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn on_update(&self, _: &CachedObject<K>, _: &CachedObject<K>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn on_delete(&self, _: &kcache_core::ObjectOrTombstone<K>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Runs an informer on ConfigMaps in `ns` with `client` until it has synced
/// and seen `expect` notifications (or, when `expect` is 0, for `run_for`).
/// Returns the errors its watch error handler got (as `Display` + `Debug`).
async fn run_informer(
    client: Client,
    ns: &str,
    expect: u64,
    run_for: Duration,
) -> (bool, Vec<(ErrorReason, String)>) {
    let errors: Arc<Mutex<Vec<(ErrorReason, String)>>> = Arc::default();
    let e2 = errors.clone();
    let mut config = kcache_informer::InformerConfig::default();
    config.watch.namespace = Some(ns.to_owned());
    let informer = SharedIndexInformer::<ConfigMap>::builder(client)
        .config(config)
        .watch_error_handler(Arc::new(move |e| {
            e2.lock()
                .unwrap()
                .push((e.reason(), format!("{e} / {e:?}")));
        }))
        .build();
    let count = Count::default();
    informer.add_event_handler(count.clone()).unwrap();
    let cancel = CancellationToken::new();
    let (i, c) = (informer.clone(), cancel.clone());
    let task = tokio::spawn(async move { i.run(c).await });
    if expect > 0 {
        assert!(wait_for_cache_sync(&cancel, &[&informer]).await);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while count.0.load(Ordering::SeqCst) < expect {
            assert!(
                tokio::time::Instant::now() < deadline,
                "informer saw {} of {expect} notifications",
                count.0.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    } else {
        tokio::time::sleep(run_for).await;
    }
    let synced = informer.has_synced();
    cancel.cancel();
    let _ = task.await;
    let errors = errors.lock().unwrap().clone();
    (synced, errors)
}

fn assert_absent(haystack: &str, secrets: &[String]) {
    for s in secrets {
        assert!(
            !haystack.contains(s.as_str()),
            "secret material {s:?} found in:\n{haystack}"
        );
    }
}

/// A ServiceAccount allowed to list and watch ConfigMaps in `ns`, and a
/// token for it.
async fn service_account_token(admin: &Client, ns: &str) -> String {
    let pp = PostParams::default();
    let sa: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "reader" } })).unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    sas.create(&pp, &sa).await.unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "cm-reader" },
        "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"] }]
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&pp, &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "cm-reader" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader" },
        "subjects": [{ "kind": "ServiceAccount", "name": "reader", "namespace": ns }]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&pp, &binding)
        .await
        .unwrap();
    let req: TokenRequest =
        serde_json::from_value(json!({ "spec": { "audiences": [], "expirationSeconds": 3600 } }))
            .unwrap();
    let tr = sas.create_token_request("reader", &pp, &req).await.unwrap();
    let token = tr.status.and_then(|s| s.token).expect("a token");
    assert!(token.len() > 40, "{token}");
    token
}

// ---- tests ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_runs_log_no_credentials() {
    let buf = captured();
    let cp = ControlPlane::shared().await.unwrap();
    if cp.is_external() {
        return; // needs the local CA to issue a client certificate
    }
    let ns = cp.create_namespace("sec-log").await.unwrap();
    let admin = cp.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    for name in ["a", "b"] {
        create(&cms, &config_map(name).data("k", "v").build()).await;
    }

    // 1. A client certificate (read from files, as a kubeconfig names them).
    let cert = cp
        .issue_client_cert("sec-cert-user", &["system:masters"])
        .unwrap();
    let dir = std::env::temp_dir().join(format!("kcache-sec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (crt_path, key_path) = (dir.join("client.crt"), dir.join("client.key"));
    std::fs::write(&crt_path, &cert.cert_pem).unwrap();
    std::fs::write(&key_path, &cert.key_pem).unwrap();
    let mut cert_config: Config = cp.config();
    cert_config.auth_info = AuthInfo {
        client_certificate: Some(crt_path.display().to_string()),
        client_key: Some(key_path.display().to_string()),
        ..AuthInfo::default()
    };
    let (synced, errors_cert) = run_informer(
        Client::try_from(cert_config).unwrap(),
        &ns,
        2,
        Duration::ZERO,
    )
    .await;
    assert!(synced);
    let _ = std::fs::remove_dir_all(&dir);

    // 2. A bearer token (a ServiceAccount's).
    let token = service_account_token(&admin, &ns).await;
    let mut token_config: Config = cp.config();
    token_config.auth_info = AuthInfo {
        token: Some(token.clone().into()),
        ..AuthInfo::default()
    };
    let (synced, errors_token) = run_informer(
        Client::try_from(token_config.clone()).unwrap(),
        &ns,
        2,
        Duration::ZERO,
    )
    .await;
    assert!(synced);

    // 3. The same token on a namespace it may not read: the error paths log.
    let other = cp.create_namespace("sec-log-denied").await.unwrap();
    let (synced, errors_denied) = run_informer(
        Client::try_from(token_config).unwrap(),
        &other,
        0,
        Duration::from_secs(2),
    )
    .await;
    assert!(!synced);
    assert!(
        errors_denied
            .iter()
            .any(|(r, _)| *r == ErrorReason::Forbidden),
        "{errors_denied:?}"
    );

    let mut secrets: Vec<String> = cert
        .key_pem
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
        .map(str::to_owned)
        .collect();
    assert!(secrets.len() >= 2);
    // The token, and any long enough piece of it (a JWT's signature part).
    secrets.push(token.clone());
    secrets.extend(
        token
            .split('.')
            .filter(|p| p.len() >= 16)
            .map(str::to_owned),
    );

    let logs = buf.lock().unwrap().clone();
    // The capture saw the requests themselves (kube's HTTP spans carry the
    // URL) and the Forbidden report, so the check below is not vacuous.
    assert!(
        logs.contains(&format!("/api/v1/namespaces/{ns}/configmaps")),
        "no request was traced:\n{logs}"
    );
    assert!(logs.contains(&other), "the Forbidden run was not traced");
    assert_absent(&logs, &secrets);
    assert!(!logs.contains("PRIVATE KEY"));
    assert!(
        !logs.contains("Bearer "),
        "an Authorization header was logged"
    );
    for (_, e) in errors_cert
        .iter()
        .chain(&errors_token)
        .chain(&errors_denied)
    {
        assert_absent(e, &secrets);
    }
}

/// client-go reports a Forbidden list through the watch error handler once
/// per attempt and backs off between attempts; the informer must too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_list_is_reported_once_per_backoff_step() {
    let _ = captured();
    let TestNamespace { cp, ns, .. } = namespace("sec-rbac").await;
    let nobody = cp.client_for_user("sec-nobody", &[]).await.unwrap();
    let (synced, errors) = run_informer(nobody, &ns, 0, Duration::from_secs(6)).await;
    assert!(!synced, "a forbidden informer must not report synced");
    // Backoff 0.8 s doubling with jitter: attempts at ~0, ~0.8-1.6,
    // ~2.4-4.8 s (+ maybe one more) in 6 s. A hot loop would give hundreds.
    assert!(
        (2..=4).contains(&errors.len()),
        "{} reports in 6 s: {errors:#?}",
        errors.len()
    );
    for (reason, text) in &errors {
        assert_eq!(*reason, ErrorReason::Forbidden, "{text}");
        assert!(text.contains("403"), "{text}");
        // The verb and the resource are named.
        assert!(text.contains("list"), "no verb in {text}");
        assert!(text.contains("configmaps"), "no resource in {text}");
    }
}
