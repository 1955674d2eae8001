//! The informer's side of warm restarts: the snapshot loaded (and queued)
//! on start, the periodic writes while running, the final write on
//! shutdown. The informer's loop calls these at its steps; the file format
//! and the files are [`format`](super::format) and [`file`](super::file).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kcache_core::{CachedObject, ErrorChain};
use kcache_deltafifo::Queue;
use kube::Resource;
use tokio::task::JoinHandle;

use super::{Fingerprint, Loaded, SnapshotError, SnapshotOptions, StartKind, WriteStats};
use crate::informer::{InitialQueue, Lifecycle, SharedIndexInformer, Started};
use kcache_core::sync::lock;

/// How long the cluster identity GET may take before a cold start.
const CLUSTER_ID_TIMEOUT: Duration = Duration::from_secs(30);

impl<K: Resource + 'static> SharedIndexInformer<K>
where
    K::DynamicType: Clone + Send + Sync + 'static,
{
    /// After the loop (queue closed, reflector stopped): waits for the
    /// write in flight, then, when snapshots are written on shutdown and
    /// the cache has synced, applies what is still queued and writes the
    /// final snapshot.
    pub(crate) async fn finish_snapshots(
        &self,
        run: &Started<K>,
        writer: Option<&SnapshotWriter>,
        mut write_task: Option<JoinHandle<Result<WriteStats, SnapshotError>>>,
    ) {
        if write_task.is_some() {
            // an older snapshot must not land after the final one
            let r = join_write(&mut write_task).await;
            self.record_write(r);
        }
        if let (Some(w), Some(t)) = (writer, &run.tracker)
            && w.on_shutdown
            && self.has_synced()
        {
            // apply what is still queued, so the cache matches the last RV
            self.drain(&run.queue).await;
            if let Some((rv, items)) = self.capture(&run.queue, t) {
                let r = join_write(&mut Some(w.spawn_write(rv, items))).await;
                self.record_write(r);
            }
        }
    }

    /// The cache and the resourceVersion it reflects, taken while nothing
    /// is queued (every change received has been applied) and no change
    /// can be queued (the tracker's lock).
    pub(crate) fn capture(
        &self,
        queue: &Arc<dyn Queue<K>>,
        tracker: &PushTracker,
    ) -> Option<(String, Vec<CachedObject<K>>)> {
        let rv = lock(&tracker.last_rv);
        if rv.is_empty() || !queue.is_empty() {
            return None;
        }
        Some((rv.clone(), self.inner.indexer.list()))
    }

    pub(crate) fn record_write(&self, r: Result<WriteStats, SnapshotError>) {
        let mut st = lock(&self.inner.snapshot_status);
        match r {
            Ok(stats) => {
                tracing::info!(
                    informer = %self.inner.name,
                    objects = stats.objects,
                    bytes = stats.bytes,
                    took_ms = stats.duration.as_millis() as u64,
                    resource_version = %stats.resource_version,
                    "snapshot written"
                );
                st.writes += 1;
                st.last_write = Some(stats);
            }
            Err(e) => {
                tracing::warn!(informer = %self.inner.name, reason = e.reason(), "writing the snapshot failed: {}", ErrorChain(&e));
                st.write_failures += 1;
            }
        }
        self.inner.snapshot_changed(&st);
    }

    /// Works out the fingerprint and loads a matching snapshot, if
    /// snapshots are configured. Never fails: a snapshot that cannot be
    /// used is reported with one warning and the informer starts cold.
    pub(crate) async fn prepare_snapshot(&self) -> SnapshotPlan<K> {
        let Some(options) = self.inner.snapshot.clone() else {
            return SnapshotPlan::default();
        };
        let has_transform = lock(&self.inner.lifecycle).transform.is_some();
        let fingerprint = match self.fingerprint(&options, has_transform).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(
                    informer = %self.inner.name,
                    reason = e.reason(),
                    "{}; starting cold, and no snapshot is written by this run",
                    ErrorChain(&e)
                );
                lock(&self.inner.snapshot_status).cold_reason = Some(ErrorChain(&e).to_string());
                return SnapshotPlan::default();
            }
        };
        let path = options.path_for(&fingerprint);
        let writer = SnapshotWriter {
            path: path.clone(),
            fingerprint: fingerprint.clone(),
            interval: options.interval,
            on_shutdown: options.write_on_shutdown,
        };
        let object_options = self.inner.watch.object_options.clone();
        let read_path = path.clone();
        let name = self.inner.name.clone();
        let read = tokio::task::spawn_blocking(move || {
            super::file::warn_if_loose_folder(&name, &read_path);
            let removed = super::file::remove_stale_temp_files(&read_path);
            if removed > 0 {
                tracing::info!(informer = %name, removed, "removed the temporary files of interrupted snapshot writes");
            }
            super::file::read_file::<K>(&read_path, &fingerprint, &object_options)
        })
        .await;
        let loaded = match read {
            Ok(Ok(l)) => Some(l),
            Ok(Err(e)) => {
                tracing::warn!(
                    informer = %self.inner.name,
                    path = %path.display(),
                    reason = e.reason(),
                    "snapshot not used, starting cold: {}",
                    ErrorChain(&e)
                );
                lock(&self.inner.snapshot_status).cold_reason = Some(ErrorChain(&e).to_string());
                None
            }
            Err(e) => {
                tracing::warn!(informer = %self.inner.name, error = %e, "snapshot not used, starting cold: the loading task failed");
                lock(&self.inner.snapshot_status).cold_reason = Some(ErrorChain(&e).to_string());
                None
            }
        };
        SnapshotPlan {
            writer: Some(writer),
            loaded,
        }
    }

    async fn fingerprint(
        &self,
        options: &SnapshotOptions,
        has_transform: bool,
    ) -> Result<Fingerprint, SnapshotError> {
        if has_transform && options.transform_id.is_none() {
            return Err(SnapshotError::TransformWithoutId);
        }
        let cluster_uid = match &options.cluster_id {
            Some(id) => id.clone(),
            None => {
                let api: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                    kube::Api::all(self.inner.client.clone());
                let got = tokio::time::timeout(CLUSTER_ID_TIMEOUT, api.get_metadata("kube-system"))
                    .await
                    .map_err(|_| SnapshotError::ClusterIdentity("timed out".to_owned()))?
                    .map_err(|e| SnapshotError::ClusterIdentity(e.to_string()))?;
                got.metadata.uid.ok_or_else(|| {
                    SnapshotError::ClusterIdentity("the namespace has no uid".to_owned())
                })?
            }
        };
        let dt = &self.inner.dyntype;
        let o = &self.inner.watch;
        let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        Ok(Fingerprint {
            cluster_uid,
            server_url: options.server_url.clone(),
            group: K::group(dt).into_owned(),
            version: K::version(dt).into_owned(),
            resource: K::plural(dt).into_owned(),
            metadata_only: K::metadata_api(),
            namespace: nonempty(&o.namespace),
            label_selector: nonempty(&o.label_selector),
            field_selector: nonempty(&o.field_selector),
            shard_selector: o.shard_selector.as_ref().map(ToString::to_string),
            transform_id: if has_transform {
                options.transform_id.clone()
            } else {
                None
            },
            strip_managed_fields: o.object_options.strip_managed_fields,
        })
    }

    /// The run's first queue: holding the loaded snapshot's objects (queued
    /// untransformed) when there is a snapshot and queueing it works, empty
    /// otherwise. Records the start kind (warm or cold, and why cold) in the
    /// snapshot status and logs it.
    pub(crate) fn queue_snapshot(
        &self,
        lc: &Lifecycle<K>,
        bypass: &Arc<AtomicBool>,
        warm: Option<Loaded<K>>,
    ) -> InitialQueue<K> {
        let mut queue = self.new_queue(lc, bypass);
        let mut resume_rv = None;
        let mut status = lock(&self.inner.snapshot_status);
        status.start = StartKind::Cold;
        if let Some(loaded) = warm {
            let count = loaded.objects.len() as u64;
            let age = SystemTime::now()
                .duration_since(loaded.written_at)
                .unwrap_or_default();
            bypass.store(true, Ordering::Relaxed);
            let queued = queue.replace(loaded.objects, loaded.resource_version.clone());
            bypass.store(false, Ordering::Relaxed);
            match queued {
                Ok(()) => {
                    tracing::info!(
                        informer = %self.inner.name,
                        objects = count,
                        age_s = age.as_secs(),
                        resource_version = %loaded.resource_version,
                        "warm start: snapshot loaded; resuming the watch without a list"
                    );
                    status.start = StartKind::Warm;
                    status.objects_loaded = count;
                    status.snapshot_age = Some(age);
                    self.inner.current.store(false, Ordering::Release);
                    resume_rv = Some(loaded.resource_version);
                }
                Err(e) => {
                    tracing::warn!(informer = %self.inner.name, error = %ErrorChain(&e), "snapshot not used, starting cold: queueing its objects failed");
                    status.cold_reason = Some(ErrorChain(&e).to_string());
                    queue = self.new_queue(lc, bypass);
                }
            }
        }
        self.inner.snapshot_changed(&status);
        InitialQueue { queue, resume_rv }
    }
}

pub(crate) async fn join_write(
    task: &mut Option<JoinHandle<Result<WriteStats, SnapshotError>>>,
) -> Result<WriteStats, SnapshotError> {
    match task.as_mut() {
        Some(t) => match t.await {
            Ok(r) => r,
            Err(e) => Err(SnapshotError::Io {
                path: Default::default(),
                source: std::io::Error::other(e.to_string()),
            }),
        },
        None => std::future::pending().await,
    }
}

/// What `run` loads and writes.
pub(crate) struct SnapshotPlan<K> {
    pub(crate) writer: Option<SnapshotWriter>,
    pub(crate) loaded: Option<Loaded<K>>,
}

impl<K> Default for SnapshotPlan<K> {
    fn default() -> Self {
        SnapshotPlan {
            writer: None,
            loaded: None,
        }
    }
}

/// Where and when this run writes snapshots.
pub(crate) struct SnapshotWriter {
    path: std::path::PathBuf,
    fingerprint: Fingerprint,
    pub(crate) interval: Duration,
    on_shutdown: bool,
}

impl SnapshotWriter {
    pub(crate) fn spawn_write<K: 'static>(
        &self,
        rv: String,
        items: Vec<CachedObject<K>>,
    ) -> JoinHandle<Result<WriteStats, SnapshotError>> {
        let path = self.path.clone();
        let fingerprint = self.fingerprint.clone();
        tokio::task::spawn_blocking(move || {
            super::file::write_file(&path, &fingerprint, &rv, &items)
        })
    }
}

/// The resourceVersion of the last change queued (under its lock, so a
/// snapshot sees the cache and the RV together).
pub(crate) struct PushTracker {
    pub(crate) last_rv: Mutex<String>,
}
