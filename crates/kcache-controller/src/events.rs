//! An `events.k8s.io/v1` event recorder with series folding (client-go's
//! `tools/events`).
//!
//! The first occurrence of an event creates an Event object. The same event
//! again (same regarding object, type, reason, action, note, related object
//! and reporter) within [`SERIES_WINDOW`] is folded into the first one's
//! `series` (count and last observed time) with a patch, instead of a new
//! object: a controller that repeats a warning every reconcile does not
//! flood the apiserver.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use parking_lot::Mutex;
use tokio::time::Instant;

/// How long after an event a repetition is folded into its series
/// (client-go: 6 minutes).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// How many distinct events the recorder remembers for folding.
pub const SERIES_CACHE_SIZE: usize = 4096;

/// Normal or Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something may need attention.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// Short, machine-readable, CamelCase reason (`ErrResourceExists`).
    pub reason: String,
    /// Human-readable description (at most 1 kB).
    pub note: Option<String>,
    /// What the controller did or failed to do (`Reconciling`).
    pub action: String,
    /// Another object involved, if any.
    pub related: Option<ObjectReference>,
}

impl Event {
    /// A Normal event.
    pub fn normal(reason: impl Into<String>, note: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".to_owned(),
            related: None,
        }
    }
    /// A Warning event.
    pub fn warning(reason: impl Into<String>, note: impl Into<String>) -> Self {
        Self {
            type_: EventType::Warning,
            ..Self::normal(reason, note)
        }
    }
    /// Sets the action.
    pub fn action(mut self, action: impl Into<String>) -> Self {
        self.action = action.into();
        self
    }
    /// Sets the related object.
    pub fn related(mut self, related: ObjectReference) -> Self {
        self.related = Some(related);
        self
    }
}

/// Who reports the events: the controller's name and this replica.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reporter {
    /// `reportingController` (e.g. `samplecontroller.k8s.io/foo-controller`).
    pub controller: String,
    /// `reportingInstance` (e.g. the pod name); defaults to the controller
    /// name plus the host name.
    pub instance: String,
}

impl Reporter {
    /// A reporter whose instance is the host name (or the controller name).
    pub fn new(controller: impl Into<String>) -> Self {
        let controller = controller.into();
        let instance = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .map(|h| format!("{controller}-{h}"))
            .unwrap_or_else(|| controller.clone());
        Self {
            controller,
            instance,
        }
    }
    /// Sets the instance.
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = instance.into();
        self
    }
}

/// What makes two events "the same" for folding: regarding object, type,
/// reason, action, note and related object.
type SeriesKey = Vec<String>;

fn ref_parts(r: Option<&ObjectReference>) -> [String; 5] {
    let Some(r) = r else {
        return Default::default();
    };
    [
        r.uid.clone().unwrap_or_default(),
        r.kind.clone().unwrap_or_default(),
        r.namespace.clone().unwrap_or_default(),
        r.name.clone().unwrap_or_default(),
        r.field_path.clone().unwrap_or_default(),
    ]
}

/// What makes two events the same (one series): the object they are
/// about, their type, reason, action and note, and the related object.
fn series_key(regarding: &ObjectReference, event: &Event) -> SeriesKey {
    let mut key: SeriesKey = ref_parts(Some(regarding)).to_vec();
    key.extend([
        event.type_.as_str().to_owned(),
        event.reason.clone(),
        event.action.clone(),
        event.note.clone().unwrap_or_default(),
    ]);
    key.extend(ref_parts(event.related.as_ref()));
    key
}

struct SeriesEntry {
    namespace: String,
    name: String,
    count: i32,
    last_seen: Instant,
}

/// Publishes events about objects (cheap to clone; clones share the series
/// cache).
///
/// ```no_run
/// # async fn run(client: kube::Client, cm: k8s_openapi::api::core::v1::ConfigMap) -> Result<(), kube::Error> {
/// use kcache_controller::events::{Event, Recorder, Reporter};
/// use kube::Resource;
///
/// let recorder = Recorder::new(client, Reporter::new("example-controller"));
/// recorder.publish(&cm.object_ref(&()), &Event::normal("Synced", "config map synced")).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    series: Arc<Mutex<HashMap<SeriesKey, SeriesEntry>>>,
    timeout: Duration,
}

/// The default deadline of each request that publishes an event.
pub const DEFAULT_EVENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one event request with the recorder's deadline; a request that
/// got no answer in time fails as `kube::Error::Service` with an
/// `io::ErrorKind::TimedOut` source.
async fn bounded<T>(
    timeout: Duration,
    what: &str,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(timeout, request).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what} got no answer within {timeout:?}"),
        )))),
    }
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("reporter", &self.reporter)
            .finish_non_exhaustive()
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

enum Plan {
    Create,
    Fold {
        namespace: String,
        name: String,
        count: i32,
    },
}

impl Recorder {
    /// A recorder writing with `client` as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            series: Arc::new(Mutex::new(HashMap::new())),
            timeout: DEFAULT_EVENT_REQUEST_TIMEOUT,
        }
    }

    /// The deadline of each request that publishes an event (default
    /// [`DEFAULT_EVENT_REQUEST_TIMEOUT`]); events are best effort, and a
    /// reconcile that publishes one must not hang on a stalled apiserver.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The reporter.
    pub fn reporter(&self) -> &Reporter {
        &self.reporter
    }

    /// Publishes an event about `obj` (any object with metadata).
    pub async fn publish_for<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        event: &Event,
    ) -> Result<(), kube::Error> {
        self.publish(&obj.object_ref(&()), event).await
    }

    /// Publishes an event about the object `regarding`: creates it, or
    /// folds it into the series of the same earlier event.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        event: &Event,
    ) -> Result<(), kube::Error> {
        let key = series_key(regarding, event);
        let now = Instant::now();
        let plan = self.plan(&key, now);
        let namespace = regarding
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        let wall = Timestamp::now();
        if let Plan::Fold {
            namespace: ns,
            name,
            count,
        } = &plan
            && self.fold_into_series(ns, name, *count, wall).await?
        {
            return Ok(());
        }
        let name = self
            .create_event(regarding, event, &namespace, wall)
            .await?;
        self.remember(key, namespace, name, now);
        Ok(())
    }

    /// Whether the event of `key` continues a series seen within
    /// [`SERIES_WINDOW`] (counted at `now`, then folded into it) or
    /// starts a new one.
    fn plan(&self, key: &SeriesKey, now: Instant) -> Plan {
        let mut series = self.series.lock();
        match series.get_mut(key) {
            Some(e) if now.duration_since(e.last_seen) < SERIES_WINDOW => {
                e.count = e.count.saturating_add(1);
                e.last_seen = now;
                Plan::Fold {
                    namespace: e.namespace.clone(),
                    name: e.name.clone(),
                    count: e.count,
                }
            }
            _ => Plan::Create,
        }
    }

    /// Patches the series event `name` in `namespace` to `count`
    /// occurrences, the last at `wall`: `false` when it is gone, and a new
    /// series starts.
    async fn fold_into_series(
        &self,
        namespace: &str,
        name: &str,
        count: i32,
        wall: Timestamp,
    ) -> Result<bool, kube::Error> {
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({
            "series": { "count": count, "lastObservedTime": MicroTime(wall) }
        });
        let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
        let patched = bounded(
            self.timeout,
            "patching an event series",
            api.patch(name, &params, &patch),
        );
        match patched.await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                // Gone (events expire): start a new series.
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Creates a new event about `regarding` in `namespace`, observed at
    /// `wall`; its name.
    async fn create_event(
        &self,
        regarding: &ObjectReference,
        event: &Event,
        namespace: &str,
        wall: Timestamp,
    ) -> Result<String, kube::Error> {
        let api: Api<KubeEvent> = Api::namespaced(self.client.clone(), namespace);
        let regarding_name = regarding.name.clone().unwrap_or_default();
        let name = format!(
            "{}.{:016x}",
            truncate(&regarding_name, 200),
            rand::random::<u64>()
        );
        let ev = KubeEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(wall)),
            action: Some(truncate(&event.action, 128)),
            reason: Some(truncate(&event.reason, 128)),
            note: event.note.as_deref().map(|n| truncate(n, 1024)),
            type_: Some(event.type_.as_str().to_owned()),
            regarding: Some(regarding.clone()),
            related: event.related.clone(),
            reporting_controller: Some(truncate(&self.reporter.controller, 128)),
            reporting_instance: Some(truncate(&self.reporter.instance, 128)),
            ..KubeEvent::default()
        };
        bounded(
            self.timeout,
            "creating an event",
            api.create(&PostParams::default(), &ev),
        )
        .await?;
        Ok(name)
    }

    /// Starts the series of `key` with the event `name` just created,
    /// making room first when the series cache is full.
    fn remember(&self, key: SeriesKey, namespace: String, name: String, now: Instant) {
        let mut series = self.series.lock();
        if series.len() >= SERIES_CACHE_SIZE {
            // Forget finished series first, then the oldest half.
            series.retain(|_, e| now.duration_since(e.last_seen) < SERIES_WINDOW);
            if series.len() >= SERIES_CACHE_SIZE {
                let mut ages: Vec<Instant> = series.values().map(|e| e.last_seen).collect();
                ages.sort_unstable();
                if let Some(cutoff) = ages.get(ages.len() / 2).copied() {
                    series.retain(|_, e| e.last_seen > cutoff);
                }
            }
        }
        series.insert(
            key,
            SeriesEntry {
                namespace,
                name,
                count: 1,
                last_seen: now,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose requests never get an answer.
    fn silent_client() -> Client {
        use kcache_testing::fake::{Fake, Reply};
        Fake::new(|_| Reply::NoHeaders).client
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_post_has_a_deadline() {
        let recorder = Recorder::new(silent_client(), Reporter::new("test"))
            .request_timeout(Duration::from_secs(3));
        let regarding = ObjectReference {
            kind: Some("ConfigMap".into()),
            namespace: Some("ns".into()),
            name: Some("cm".into()),
            ..ObjectReference::default()
        };
        let start = tokio::time::Instant::now();
        let err = tokio::time::timeout(
            Duration::from_secs(3600),
            recorder.publish(&regarding, &Event::normal("Synced", "ok")),
        )
        .await
        .expect("the post gives up by its deadline")
        .expect_err("no answer: the post fails");
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        assert!(err.to_string().contains("no answer within 3s"), "{err}");
    }
}
