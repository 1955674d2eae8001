//! Metrics: client-go's TestMetrics with exact values on a paused clock,
//! retries, unnamed queues, the updater task's lifetime, and the
//! prometheus-client provider.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kcache_workqueue::metrics::{
    CounterMetric, GaugeMetric, HistogramMetric, SettableGaugeMetric, WorkQueueMetricsProvider,
};
use kcache_workqueue::{
    AddOpts, BuildError, ItemExponentialFailureRateLimiter, NoopWorkQueueMetricsProvider,
    PrometheusWorkQueueMetricsProvider, QueueItem, WorkQueue, WorkQueueBuilder,
};
use tokio::task::yield_now;
use tokio::time::advance;

const US: Duration = Duration::from_micros(1);

#[derive(Default, Debug)]
struct Recorded {
    /// Gauge and counter values by metric.
    values: HashMap<&'static str, f64>,
    /// Observations by metric.
    observations: HashMap<&'static str, Vec<f64>>,
    /// Number of `set` calls by metric.
    sets: HashMap<&'static str, usize>,
    /// Metrics created, with the queue name.
    created: Vec<(&'static str, String)>,
}

#[derive(Clone, Default)]
struct TestProvider(Arc<Mutex<Recorded>>);

impl TestProvider {
    fn value(&self, metric: &str) -> f64 {
        self.0
            .lock()
            .unwrap()
            .values
            .get(metric)
            .copied()
            .unwrap_or(0.0)
    }
    fn observations(&self, metric: &str) -> Vec<f64> {
        self.0
            .lock()
            .unwrap()
            .observations
            .get(metric)
            .cloned()
            .unwrap_or_default()
    }
    fn sets(&self, metric: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .sets
            .get(metric)
            .copied()
            .unwrap_or(0)
    }
    fn metric(&self, metric: &'static str, name: &str) -> Box<TestMetric> {
        self.0
            .lock()
            .unwrap()
            .created
            .push((metric, name.to_owned()));
        Box::new(TestMetric {
            rec: Arc::clone(&self.0),
            metric,
        })
    }
}

struct TestMetric {
    rec: Arc<Mutex<Recorded>>,
    metric: &'static str,
}

impl TestMetric {
    fn add(&self, d: f64) {
        *self
            .rec
            .lock()
            .unwrap()
            .values
            .entry(self.metric)
            .or_default() += d;
    }
}

impl GaugeMetric for TestMetric {
    fn inc(&self) {
        self.add(1.0);
    }
    fn dec(&self) {
        self.add(-1.0);
    }
}
impl CounterMetric for TestMetric {
    fn inc_by(&self, n: u64) {
        self.add(n as f64);
    }
}
impl SettableGaugeMetric for TestMetric {
    fn set(&self, value: f64) {
        let mut rec = self.rec.lock().unwrap();
        rec.values.insert(self.metric, value);
        *rec.sets.entry(self.metric).or_default() += 1;
    }
}
impl HistogramMetric for TestMetric {
    fn observe(&self, value: f64) {
        self.rec
            .lock()
            .unwrap()
            .observations
            .entry(self.metric)
            .or_default()
            .push(value);
    }
}

impl WorkQueueMetricsProvider for TestProvider {
    fn new_depth_metric(&self, name: &str) -> Box<dyn GaugeMetric> {
        self.metric("depth", name)
    }
    fn new_adds_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        self.metric("adds", name)
    }
    fn new_latency_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        self.metric("latency", name)
    }
    fn new_work_duration_metric(&self, name: &str) -> Box<dyn HistogramMetric> {
        self.metric("work", name)
    }
    fn new_unfinished_work_seconds_metric(&self, name: &str) -> Box<dyn SettableGaugeMetric> {
        self.metric("unfinished", name)
    }
    fn new_longest_running_processor_seconds_metric(
        &self,
        name: &str,
    ) -> Box<dyn SettableGaugeMetric> {
        self.metric("longest", name)
    }
    fn new_retries_metric(&self, name: &str) -> Box<dyn CounterMetric> {
        self.metric("retries", name)
    }
}

/// Yields until the updater has set the unfinished-work gauge `n` times.
async fn wait_for_sets(mp: &TestProvider, n: usize) {
    for _ in 0..1000 {
        if mp.sets("unfinished") >= n && mp.sets("longest") >= n {
            return;
        }
        yield_now().await;
    }
    panic!("the metrics updater did not run");
}

/// client-go TestMetrics, with exact values (updates every 1 ms).
#[tokio::test(start_paused = true)]
async fn metrics_exact_values() {
    let (mp, q) = metered_with::<&str>("test", |b| {
        b.unfinished_work_update_period(Duration::from_millis(1))
    });
    {
        let created = &mp.0.lock().unwrap().created;
        assert_eq!(created.len(), 7);
        assert!(created.iter().all(|(_, n)| n == "test"));
    }

    q.add("foo");
    assert_eq!(mp.value("adds"), 1.0);
    assert_eq!(mp.value("depth"), 1.0);

    advance(50 * US).await;
    let i = q.get().await.unwrap();
    assert_eq!(i, "foo");
    assert_eq!(mp.observations("latency"), [5e-05]);
    assert_eq!(mp.value("depth"), 0.0);

    // Added back while processing; five adds of the same item count once.
    for _ in 0..5 {
        q.add(i);
    }
    assert_eq!(mp.value("adds"), 2.0);
    assert_eq!(mp.value("depth"), 1.0);

    advance(25 * US).await;
    q.done(&i);
    assert_eq!(mp.observations("work"), [2.5e-05]);
    assert_eq!(mp.value("depth"), 1.0);

    // Back on the queue; it waited from its re-add (50 us) to now (75 us).
    let i = q.get().await.unwrap();
    assert_eq!(mp.observations("latency"), [5e-05, 2.5e-05]);
    assert_eq!(mp.value("depth"), 0.0);

    // The updater ticks at 1 ms: the item has run for 925 us.
    let sets = mp.sets("unfinished");
    advance(Duration::from_millis(1) - 75 * US).await;
    wait_for_sets(&mp, sets + 1).await;
    assert_eq!(mp.value("unfinished"), 0.000925);
    assert_eq!(mp.value("longest"), 0.000925);

    q.done(&i);
    assert_eq!(mp.observations("work"), [2.5e-05, 0.000925]);
    assert_eq!(mp.value("adds"), 2.0);

    // Nothing processing: both gauges go back to 0.
    let sets = mp.sets("unfinished");
    advance(Duration::from_millis(1)).await;
    wait_for_sets(&mp, sets + 1).await;
    assert_eq!(mp.value("unfinished"), 0.0);
    assert_eq!(mp.value("longest"), 0.0);
    q.shut_down();
}

#[tokio::test(start_paused = true)]
async fn unfinished_work_sums_and_longest_is_oldest() {
    let (mp, q) = metered_with::<u8>("sum", |b| {
        b.unfinished_work_update_period(Duration::from_millis(100))
    });
    q.add(1);
    q.add(2);
    q.get().await.unwrap(); // starts at 0
    advance(Duration::from_millis(30)).await;
    q.get().await.unwrap(); // starts at 30 ms
    let sets = mp.sets("unfinished");
    advance(Duration::from_millis(70)).await;
    wait_for_sets(&mp, sets + 1).await;
    assert_eq!(mp.value("unfinished"), 0.1 + 0.07);
    assert_eq!(mp.value("longest"), 0.1);
    q.shut_down();
}

#[tokio::test(start_paused = true)]
async fn retries_count_every_delaying_add() {
    let (mp, q) = metered_with::<&str>("retries", |b| {
        b.rate_limiter(ItemExponentialFailureRateLimiter::new(US, US))
    });
    q.add("a");
    assert_eq!(mp.value("retries"), 0.0);
    q.add_after("a", Duration::ZERO); // client-go counts a zero AddAfter too
    q.add_after("b", Duration::from_secs(1));
    q.add_rate_limited("c");
    q.add_with_opts(
        "d",
        AddOpts {
            after: Some(US),
            ..AddOpts::default()
        },
    );
    q.add_with_opts(
        "e",
        AddOpts {
            rate_limited: true,
            ..AddOpts::default()
        },
    );
    q.add_with_opts("f", AddOpts::priority(3));
    assert_eq!(mp.value("retries"), 5.0);
    // Only the ready and the two new ones were added so far.
    assert_eq!(mp.value("adds"), 2.0);
    q.shut_down();
    q.add_after("g", Duration::ZERO);
    assert_eq!(mp.value("retries"), 5.0, "nothing counted after shutdown");
}

/// A delayed item counts as added (depth +1) when its time comes, and its
/// queue duration is measured from its ready time.
#[tokio::test(start_paused = true)]
async fn delayed_items_count_when_ready() {
    let (mp, q) = metered::<&str>("delayed");
    q.add_after("a", Duration::from_millis(10));
    assert_eq!(mp.value("depth"), 0.0);
    assert_eq!(mp.value("adds"), 0.0);
    advance(Duration::from_millis(15)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(mp.value("depth"), 1.0);
    assert_eq!(mp.value("adds"), 1.0);
    q.get().await.unwrap();
    assert_eq!(mp.observations("latency"), [0.005]);
    q.shut_down();
}

/// The updater also moves due items, so depth is current while every
/// worker is busy and nobody calls the queue.
#[tokio::test(start_paused = true)]
async fn depth_updates_without_callers() {
    let (mp, q) = metered::<&str>("depth");
    q.add_after("a", Duration::from_millis(10));
    let sets = mp.sets("unfinished");
    advance(Duration::from_millis(500)).await;
    wait_for_sets(&mp, sets + 1).await;
    assert_eq!(mp.value("depth"), 1.0);
    q.shut_down();
}

#[tokio::test]
async fn unnamed_queue_has_no_metrics() {
    let mp = TestProvider::default();
    let q: WorkQueue<&str> = WorkQueue::builder().metrics(mp.clone()).build().unwrap();
    q.add("a");
    q.add_after("b", Duration::from_secs(1));
    assert!(mp.0.lock().unwrap().created.is_empty());
    let q: WorkQueue<&str> = WorkQueue::builder()
        .name("")
        .metrics(mp.clone())
        .build()
        .unwrap();
    q.add("a");
    assert!(mp.0.lock().unwrap().created.is_empty());
    assert_eq!(q.name(), None);
}

#[test]
fn metrics_need_a_runtime() {
    let r = WorkQueue::<u8>::builder()
        .name("x")
        .metrics(TestProvider::default())
        .build();
    assert_eq!(r.unwrap_err(), BuildError::NoRuntime);
    // Without metrics, no runtime is needed.
    assert!(WorkQueue::<u8>::builder().name("x").build().is_ok());
    assert!(
        WorkQueue::<u8>::builder()
            .name("x")
            .metrics(NoopWorkQueueMetricsProvider)
            .build()
            .is_ok()
    );
    let r = WorkQueue::<u8>::builder()
        .unfinished_work_update_period(Duration::ZERO)
        .build();
    assert_eq!(r.unwrap_err(), BuildError::ZeroUpdatePeriod);
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// A queue named `name` recording into a fresh [`TestProvider`].
fn metered<T: QueueItem>(name: &str) -> (TestProvider, WorkQueue<T>) {
    metered_with(name, |b| b)
}

/// [`metered`], with more builder settings.
fn metered_with<T: QueueItem>(
    name: &str,
    settings: impl FnOnce(WorkQueueBuilder<T>) -> WorkQueueBuilder<T>,
) -> (TestProvider, WorkQueue<T>) {
    let mp = TestProvider::default();
    let q = settings(WorkQueue::builder().name(name).metrics(mp.clone()))
        .build()
        .unwrap();
    (mp, q)
}

async fn settle() {
    for _ in 0..20 {
        yield_now().await;
    }
}

/// A queue with metrics runs one updater task, which ends after `end`
/// (the queue `end` returns is kept alive until then).
async fn assert_updater_task_ends(end: fn(WorkQueue<u8>) -> Option<WorkQueue<u8>>) {
    let before = alive_tasks();
    let q: WorkQueue<u8> = WorkQueue::builder()
        .name("task")
        .metrics(TestProvider::default())
        .build()
        .unwrap();
    settle().await;
    assert_eq!(alive_tasks(), before + 1);
    let kept = end(q);
    settle().await;
    assert_eq!(alive_tasks(), before);
    drop(kept);
}

#[tokio::test(start_paused = true)]
async fn updater_task_ends_at_shut_down() {
    assert_updater_task_ends(|q| {
        q.shut_down();
        Some(q)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn updater_task_ends_when_queue_dropped() {
    assert_updater_task_ends(|q| {
        drop(q);
        None
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn no_task_without_metrics() {
    let before = alive_tasks();
    let q: WorkQueue<u8> = WorkQueue::builder().name("plain").build().unwrap();
    q.add_after(1, Duration::from_secs(1));
    settle().await;
    assert_eq!(alive_tasks(), before);
}

#[tokio::test(start_paused = true)]
async fn prometheus_provider_exposes_client_go_names() {
    let mut registry = prometheus_client::registry::Registry::default();
    let provider = PrometheusWorkQueueMetricsProvider::new(&mut registry);
    let q: WorkQueue<&str> = WorkQueue::builder()
        .name("pods")
        .metrics(provider.clone())
        .build()
        .unwrap();
    let other: WorkQueue<&str> = WorkQueue::builder()
        .name("nodes")
        .metrics(provider)
        .build()
        .unwrap();
    q.add("a");
    q.add("b");
    q.add("a");
    other.add("n");
    advance(Duration::from_millis(2)).await;
    let a = q.get().await.unwrap();
    advance(Duration::from_millis(3)).await;
    q.done(&a);
    q.add_after("c", Duration::from_secs(1));

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        r#"workqueue_depth{name="pods"} 1"#,
        r#"workqueue_depth{name="nodes"} 1"#,
        r#"workqueue_adds_total{name="pods"} 2"#,
        r#"workqueue_adds_total{name="nodes"} 1"#,
        r#"workqueue_queue_duration_seconds_count{name="pods"} 1"#,
        r#"workqueue_queue_duration_seconds_sum{name="pods"} 0.002"#,
        r#"workqueue_work_duration_seconds_count{name="pods"} 1"#,
        r#"workqueue_work_duration_seconds_sum{name="pods"} 0.003"#,
        r#"workqueue_retries_total{name="pods"} 1"#,
        r#"workqueue_unfinished_work_seconds{name="pods"} 0"#,
        r#"workqueue_longest_running_processor_seconds{name="pods"} 0"#,
        r#"workqueue_queue_duration_seconds_bucket{le="1e-8",name="pods"} 0"#,
        r#"workqueue_queue_duration_seconds_bucket{le="0.01",name="pods"} 1"#,
        "# TYPE workqueue_depth gauge",
        "# TYPE workqueue_adds counter",
        "# TYPE workqueue_queue_duration_seconds histogram",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    q.shut_down();
    other.shut_down();
}
