//! The Prometheus registry as a scraper sees it: every layer's families
//! once with well-formed HELP texts, the REST client layer's counts and
//! latencies, the process metrics.

#![cfg(feature = "prometheus")]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kcache_controller::MetricsRegistry;
use kcache_controller::metrics::ControllerMetricsProvider;
use kcache_reflector::ReflectorMetricsProvider;
use kcache_testing::fake::{Fake, Reply};
use kube::Client;

/// `# HELP <name> <text>` lines of a scrape, as (name, text).
fn help_lines(scrape: &str) -> Vec<(String, String)> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .map(|l| {
            let (name, text) = l.split_once(' ').unwrap_or((l, ""));
            (name.to_owned(), text.to_owned())
        })
        .collect()
}

/// The value of the sample `line_prefix` (a name with its labels).
fn sample(scrape: &str, line_prefix: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A metric in every family of every layer (a family with no metric is
/// not written at all).
fn touch_every_family(registry: &MetricsRegistry) {
    use kcache_reflector::ErrorReason;
    use kcache_workqueue::WorkQueueMetricsProvider as _;
    let p: &dyn ControllerMetricsProvider = registry;
    p.new_reconcile_total_metric("c", "success").inc();
    p.new_reconcile_errors_metric("c").inc();
    p.new_reconcile_panics_metric("c").inc();
    p.new_terminal_reconcile_errors_metric("c").inc();
    p.new_reconcile_time_metric("c").observe(0.1);
    p.new_active_workers_metric("c").inc();
    p.new_max_concurrent_reconciles_metric("c").set(2.0);
    p.new_leader_status_metric("c").set(1.0);
    p.new_leader_errors_metric("c").inc();
    p.new_shard_members_metric("c", "g").set(3.0);
    p.new_shard_owned_keys_metric("c", "g").set(3.0);
    p.new_shard_handovers_metric("c", "g", "gained").inc();
    let i = registry.informer_provider();
    i.new_synced_metric("cm").set(1.0);
    i.new_cached_objects_metric("cm").set(3.0);
    i.new_listener_backlog_metric("cm", "cm#1").set(2.0);
    i.new_listener_delivered_metric("cm", "cm#1").inc();
    i.new_handler_panics_metric("cm", "cm#1").inc();
    let s = i.new_snapshot_metrics("cm");
    for g in [
        &s.warm_start,
        &s.age_seconds,
        &s.objects_loaded,
        &s.resume_relisted,
        &s.time_to_synced_seconds,
        &s.last_write_seconds,
        &s.last_write_bytes,
        &s.last_write_objects,
    ] {
        g.set(1.0);
    }
    s.writes.inc();
    s.write_failures.inc();
    let r: Arc<dyn ReflectorMetricsProvider> = registry.reflector_provider();
    r.new_lists_metric("cm").inc();
    r.new_watches_metric("cm").inc();
    r.new_events_metric("cm").inc();
    r.new_relists_metric("cm").inc();
    r.new_errors_metric("cm", ErrorReason::ALL[0]).inc();
    r.new_last_sync_metric("cm").set(1.0);
    let w = registry.workqueue_provider();
    w.new_depth_metric("q").inc();
    w.new_adds_metric("q").inc();
    w.new_latency_metric("q").observe(0.1);
    w.new_work_duration_metric("q").observe(0.1);
    w.new_unfinished_work_seconds_metric("q").set(0.1);
    w.new_longest_running_processor_seconds_metric("q").set(0.1);
    w.new_retries_metric("q").inc();
}

#[tokio::test]
async fn metric_help_texts_end_in_one_period() {
    let registry = MetricsRegistry::new();
    touch_every_family(&registry);
    let client = scripted_apiserver(&registry, "h:443", Duration::ZERO);
    let get = http::Request::get("/api").body(Vec::new()).unwrap();
    client.request_text(get).await.unwrap();
    let scrape = registry.encode();

    let helps = help_lines(&scrape);
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (name, text) in &helps {
        *seen.entry(name.as_str()).or_default() += 1;
        assert!(
            text.ends_with('.') && !text.ends_with(".."),
            "HELP of {name} must end in exactly one period: {text:?}"
        );
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "families defined twice: {twice:?}\n{scrape}"
    );
    // every layer is in the one registry
    for family in [
        "controller_runtime_reconcile",
        "controller_runtime_reconcile_time_seconds",
        "leader_election_master_status",
        "kcache_shard_handovers",
        "kcache_informer_synced",
        "kcache_informer_cached_objects",
        "kcache_informer_listener_backlog",
        "kcache_informer_snapshot_writes",
        "reflector_lists",
        "reflector_last_sync_timestamp_seconds",
        "workqueue_depth",
        "workqueue_adds",
        "rest_client_requests",
        "rest_client_request_duration_seconds",
    ] {
        assert_eq!(seen.get(family), Some(&1), "{family} missing:\n{scrape}");
    }
    // one backlog metric, no float resourceVersion
    assert!(!scrape.contains("handler_backlog"), "{scrape}");
    assert!(!scrape.contains("resource_version"), "{scrape}");
}

/// A client through the registry's rest-client metrics layer (for `host`)
/// to a scripted apiserver: the reply to each path, after `delay`.
fn scripted_apiserver(registry: &MetricsRegistry, host: &str, delay: Duration) -> Client {
    Fake::with_layer(registry.rest_client_layer(host), move |r| {
        let reply = match r.path.as_str() {
            "/api/v1/namespaces/default/configmaps/missing" => Reply::Json(404, "{}".into()),
            "/api/v1/namespaces/default/configmaps/broken" => Reply::Json(500, "{}".into()),
            "/unreachable" => Reply::ConnRefused,
            _ => Reply::Json(200, "{}".into()),
        };
        Reply::Delayed(delay, Box::new(reply))
    })
    .client
}

#[tokio::test(start_paused = true)]
async fn rest_client_metrics_count_requests() {
    let registry = MetricsRegistry::new();
    let client = scripted_apiserver(&registry, "apiserver.test:6443", Duration::from_millis(300));
    let get = |path: &str| {
        http::Request::get(path.to_owned())
            .body(Vec::new())
            .unwrap()
    };
    for _ in 0..2 {
        client
            .request_text(get("/api/v1/namespaces/default/configmaps/a"))
            .await
            .unwrap();
    }
    assert!(
        client
            .request_text(get("/api/v1/namespaces/default/configmaps/missing"))
            .await
            .is_err()
    );
    assert!(
        client
            .request_text(get("/api/v1/namespaces/default/configmaps/broken"))
            .await
            .is_err()
    );
    let put = http::Request::put("/api/v1/namespaces/default/configmaps/a")
        .body(b"{}".to_vec())
        .unwrap();
    client.request_text(put).await.unwrap();
    assert!(client.request_text(get("/unreachable")).await.is_err());
    // a URI with its own authority is labelled with it
    client
        .request_text(get("https://other.test:443/api"))
        .await
        .unwrap();

    let scrape = registry.encode();
    let count = |code: &str, method: &str, host: &str| {
        sample(
            &scrape,
            &format!(
                "rest_client_requests_total{{code=\"{code}\",method=\"{method}\",host=\"{host}\"}}"
            ),
        )
    };
    let h = "apiserver.test:6443";
    assert_eq!(count("200", "GET", h), Some(2.0), "{scrape}");
    assert_eq!(count("404", "GET", h), Some(1.0), "{scrape}");
    assert_eq!(count("500", "GET", h), Some(1.0), "{scrape}");
    assert_eq!(count("200", "PUT", h), Some(1.0), "{scrape}");
    assert_eq!(count("<error>", "GET", h), Some(1.0), "{scrape}");
    assert_eq!(count("200", "GET", "other.test:443"), Some(1.0), "{scrape}");
    // latency: every request observed, each 0.3 s on the paused clock
    let latency = |what: &str, verb: &str| {
        sample(
            &scrape,
            &format!("rest_client_request_duration_seconds_{what}{{verb=\"{verb}\",host=\"{h}\""),
        )
    };
    assert_eq!(latency("count", "GET"), Some(5.0), "{scrape}");
    assert_eq!(latency("count", "PUT"), Some(1.0), "{scrape}");
    let sum = latency("sum", "GET").unwrap();
    assert!((sum - 1.5).abs() < 1e-6, "sum {sum}\n{scrape}");
    // the 0.3 s requests fall in the 0.5 s bucket, not the 0.25 s one
    let bucket = |le: &str| {
        sample(
            &scrape,
            &format!(
                "rest_client_request_duration_seconds_bucket{{le=\"{le}\",verb=\"GET\",host=\"{h}\"}}"
            ),
        )
    };
    assert_eq!(bucket("0.25"), Some(0.0), "{scrape}");
    assert_eq!(bucket("0.5"), Some(5.0), "{scrape}");
}

#[test]
fn process_metrics_are_exported() {
    let registry = MetricsRegistry::new();
    let scrape = registry.encode();
    let value = |name: &str| {
        scrape
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    if !cfg!(target_os = "linux") {
        // no /proc: absent, and the scrape still works
        assert!(
            !scrape.contains("process_resident_memory_bytes"),
            "{scrape}"
        );
        return;
    }
    let rss = value("process_resident_memory_bytes").expect(&scrape);
    assert!(rss > 1_000_000.0 && rss < 100e9, "rss {rss}");
    let cpu = value("process_cpu_seconds_total").expect(&scrape);
    assert!((0.0..1e6).contains(&cpu), "cpu {cpu}");
    let fds = value("process_open_fds").expect(&scrape);
    assert!((3.0..1e6).contains(&fds), "fds {fds}");
    let start = value("process_start_time_seconds").expect(&scrape);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        start <= now + 1.0 && start > now - 86_400.0,
        "start {start}, now {now}"
    );
    for (name, kind) in [
        ("process_resident_memory_bytes", "gauge"),
        ("process_cpu_seconds", "counter"),
        ("process_open_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert!(
            scrape.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} {kind}\n{scrape}"
        );
    }
}
