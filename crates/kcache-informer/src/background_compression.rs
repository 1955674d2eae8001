//! Background compression of the cache: objects arrive and stay plain while
//! they change, and are LZ4-compressed, off the ingest path, once they have
//! been quiet for a while.
//!
//! Each informer (unless [`BackgroundCompression::off`]) runs a compactor
//! task next to its reflector, for as long as its run lasts. On every tick
//! (a quarter of the quiet time) it moves the indexer's write
//! [epoch](kcache_indexer::Indexer::epoch) on, then walks the cache in
//! bounded scans ([`Indexer::quiet_objects`]) for the plain objects not
//! written for at least the quiet time, builds each one's compressed twin
//! ([`CachedObject::compressed_with`]: same key, metadata and field values,
//! JSON or protobuf bytes compressed against a dictionary learned from the
//! first quiet object of that format) in batches, and swaps the twins in
//! ([`Indexer::swap_if_same`]) only where the cache still holds the very
//! object it compressed: a change that arrived meanwhile always wins. The
//! swap changes no index and notifies no handler. It yields to the runtime
//! after every batch. An object updated again arrives plain from the watch,
//! so the hot set stays plain; the quiet bulk is compressed.
//!
//! Once the objects rounds replaced add up to [`RELEASE_AFTER_FREED`]
//! bytes, the compactor asks the C allocator, on a blocking thread, to give
//! its free pages back to the system (see
//! [`BackgroundCompression::release_freed_memory`]): with glibc's malloc,
//! the pages of the plain objects would otherwise stay resident, and RSS
//! would not follow the heap down.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kcache_core::{CachedObject, CompressionDictionary, Format};

use crate::allocator;
use kcache_indexer::{Indexer, Swap};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// JSON or protobuf shorter than this does not seed a dictionary while a
/// longer object of the same batch can.
const MIN_SAMPLE_LEN: usize = 256;

/// Bytes of plain objects replaced by their twins (since the last release)
/// after which a round ends by handing free memory back to the system: a
/// release walks the allocator's arenas (a few ms for a large heap), so it
/// is not worth it for a handful of objects.
pub const RELEASE_AFTER_FREED: u64 = 1 << 20;

/// Most scans in a round over the store (see [`scan_len`]).
const ROUND_SCANS: usize = 16;

/// Entries one scan of a round looks at, for batches of `batch` objects
/// out of a store of `stored`. A scan resumes by skipping the entries the
/// round already saw (a hash map has no cursor that survives the lock
/// being released), so a round of `s` scans steps over about `s² / 2`
/// scans' worth of entries: scans of at least a sixteenth of the store
/// keep a round near 8 passes over it, where fixed 4,096-entry scans cost
/// `stored² / 8,192` steps (a million objects: 1.2 x 10^8 per round, every
/// tick).
fn scan_len(batch: usize, stored: usize) -> usize {
    batch
        .saturating_mul(16)
        .max(4096)
        .max(stored.div_ceil(ROUND_SCANS))
}

/// How an informer compresses its quiet objects in the background: on by
/// default ([`BackgroundCompression::default`]), [`off`](Self::off) to keep
/// every object as received.
///
/// Set it in
/// [`InformerConfig::background_compression`](crate::InformerConfig::background_compression),
/// for one informer or for all the informers of a factory.
///
/// An object not written for [`quiet_for`](Self::quiet_for) (default
/// 30 s; compressed between 1x and 1.25x that time after its last write)
/// is kept LZ4-compressed against a dictionary shared by the informer's
/// objects: on realistic Pods, about a third of the memory of the plain
/// object (see [the informer guide](https://github.com/kcache/kcache/blob/main/docs/informer.md#background-compression-a-small-cache-by-default)). Keys, metadata, labels, indexes and field
/// paths cost nothing more; each [`decode`](CachedObject::decode) or
/// [`json`](CachedObject::json) of a compressed object first decompresses
/// it (about 1-2 µs for a Pod, next to 25-30 µs of serde decode into a
/// k8s-openapi `Pod`; [`kcache_core::decompressions`] counts them). The
/// ingest path (list, watch, queue, cache, handlers) never compresses.
///
/// ```
/// use std::time::Duration;
/// use kcache_informer::BackgroundCompression;
///
/// let default = BackgroundCompression::default();
/// assert!(default.is_enabled());
/// assert_eq!(default.quiet(), Duration::from_secs(30));
/// let eager = BackgroundCompression::default().quiet_for(Duration::from_secs(5)).batch_size(64);
/// assert_eq!(eager.quiet(), Duration::from_secs(5));
/// assert!(!BackgroundCompression::off().is_enabled());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackgroundCompression {
    enabled: bool,
    quiet: Duration,
    batch: usize,
    release: bool,
}

impl Default for BackgroundCompression {
    /// On: objects quiet for [`DEFAULT_QUIET`](Self::DEFAULT_QUIET) are
    /// compressed [`DEFAULT_BATCH`](Self::DEFAULT_BATCH) at a time.
    fn default() -> Self {
        BackgroundCompression {
            enabled: true,
            quiet: Self::DEFAULT_QUIET,
            batch: Self::DEFAULT_BATCH,
            release: true,
        }
    }
}

impl BackgroundCompression {
    /// How long an object must go unwritten before it is compressed, by
    /// default.
    pub const DEFAULT_QUIET: Duration = Duration::from_secs(30);
    /// Objects compressed between two yields to the runtime, by default
    /// (about 0.4 ms of work for Pods: the compactor runs on the runtime).
    pub const DEFAULT_BATCH: usize = 64;

    /// Never compress: every object stays as received (what kcache did
    /// before background compression; [`ObjectOptions::compression`](kcache_core::ObjectOptions::compression)
    /// still compresses on the ingest path when asked).
    pub fn off() -> Self {
        BackgroundCompression {
            enabled: false,
            ..Self::default()
        }
    }

    /// Compress objects not written for this long (default 30 s). Each is
    /// compressed within 1.25x this time after its last write (the
    /// compactor ticks every quarter of it). A shorter time saves memory
    /// sooner and decompresses more often in handlers of objects that
    /// change now and then.
    pub fn quiet_for(mut self, quiet: Duration) -> Self {
        self.quiet = quiet;
        self
    }

    /// Objects compressed between two yields to the runtime (default 64;
    /// at least 1).
    pub fn batch_size(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Whether to hand the memory freed by compression back to the system
    /// (default: yes). When rounds have replaced at least
    /// [`RELEASE_AFTER_FREED`] bytes of plain objects, the compactor calls
    /// glibc's `malloc_trim(0)` on a blocking thread: glibc keeps freed
    /// memory in its arenas and returns it only from the top of a heap, so
    /// without the call the process's RSS stays where it was after the
    /// list although the heap shrank to about a third. A no-op with other
    /// allocators (jemalloc, mimalloc, musl: they return free pages
    /// themselves). Turn it off if the application manages its allocator
    /// itself.
    pub fn release_freed_memory(mut self, release: bool) -> Self {
        self.release = release;
        self
    }

    /// Whether freed memory is handed back to the system (see
    /// [`release_freed_memory`](Self::release_freed_memory)).
    pub fn releases_freed_memory(&self) -> bool {
        self.release
    }

    /// Whether quiet objects are compressed.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// The quiet time.
    pub fn quiet(&self) -> Duration {
        self.quiet
    }

    /// Objects compressed per batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The compactor's tick: a quarter of the quiet time, at least 1 ms.
    fn tick(&self) -> Duration {
        (self.quiet / 4).max(Duration::from_millis(1))
    }

    /// Whole ticks in the quiet time (rounded up).
    fn quiet_ticks(&self) -> u32 {
        let tick = self.tick().as_nanos();
        u32::try_from(self.quiet.as_nanos().div_ceil(tick)).unwrap_or(u32::MAX)
    }
}

/// What an informer's background compression has done so far (see
/// [`SharedIndexInformer::background_compression_stats`](crate::SharedIndexInformer::background_compression_stats)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackgroundCompressionStats {
    /// Objects swapped for their compressed twin.
    pub compressed: u64,
    /// Quiet objects left plain: they would not shrink by 1/8.
    pub kept_plain: u64,
    /// Twins thrown away because the object was written (or deleted)
    /// while it was being compressed: the newer object stayed.
    pub stale: u64,
    /// Stored bytes of the compressed objects before compression.
    pub bytes_before: u64,
    /// Stored bytes of the same objects after compression.
    pub bytes_after: u64,
    /// Time spent compressing (a CPU-bound loop: its CPU time).
    pub busy: Duration,
    /// Completed rounds over the cache.
    pub rounds: u64,
    /// Bytes of the dictionaries learned (JSON and protobuf; each once).
    pub dictionary_bytes: u64,
    /// Times the compactor asked the allocator to hand free memory back to
    /// the system (see [`BackgroundCompression::release_freed_memory`]).
    pub memory_releases: u64,
}

/// The compactor's counters, shared with the informer's accessor.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    compressed: AtomicU64,
    kept_plain: AtomicU64,
    stale: AtomicU64,
    bytes_before: AtomicU64,
    bytes_after: AtomicU64,
    busy_nanos: AtomicU64,
    rounds: AtomicU64,
    dictionary_bytes: AtomicU64,
    memory_releases: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> BackgroundCompressionStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BackgroundCompressionStats {
            compressed: get(&self.compressed),
            kept_plain: get(&self.kept_plain),
            stale: get(&self.stale),
            bytes_before: get(&self.bytes_before),
            bytes_after: get(&self.bytes_after),
            busy: Duration::from_nanos(get(&self.busy_nanos)),
            rounds: get(&self.rounds),
            dictionary_bytes: get(&self.dictionary_bytes),
            memory_releases: get(&self.memory_releases),
        }
    }

    fn add(a: &AtomicU64, n: u64) {
        a.fetch_add(n, Ordering::Relaxed);
    }
}

/// One informer's compactor: its settings, the indexer it compacts, its
/// dictionaries and counters.
pub(crate) struct Compactor<K> {
    config: BackgroundCompression,
    indexer: Arc<Indexer<K>>,
    counters: Arc<Counters>,
    /// One dictionary per format, learned from the first quiet object.
    json_dict: Option<CompressionDictionary>,
    proto_dict: Option<CompressionDictionary>,
    /// Bytes of plain objects replaced since memory was last released.
    freed_since_release: u64,
}

impl<K: 'static> Compactor<K> {
    pub(crate) fn new(
        config: BackgroundCompression,
        indexer: Arc<Indexer<K>>,
        counters: Arc<Counters>,
    ) -> Self {
        Compactor {
            config,
            indexer,
            counters,
            json_dict: None,
            proto_dict: None,
            freed_since_release: 0,
        }
    }

    /// Ticks until `cancel`: each tick moves the epoch on and compresses
    /// the objects quiet since `quiet_ticks` ticks before.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let mut timer = tokio::time::interval(self.config.tick());
        timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let quiet_ticks = self.config.quiet_ticks();
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = timer.tick() => {}
            }
            let epoch = self.indexer.advance_epoch();
            // written in epoch e means written before tick e+1 began: quiet
            // for the `quiet_ticks` whole ticks since then
            let Some(written_by) = epoch.checked_sub(quiet_ticks + 1) else {
                continue;
            };
            if !self.round(written_by, &cancel).await {
                return;
            }
        }
    }

    /// One round over the cache, in bounded scans and batches, yielding
    /// between them; false when cancelled.
    async fn round(&mut self, written_by: u32, cancel: &CancellationToken) -> bool {
        let batch = self.config.batch;
        let scan_len = scan_len(batch, self.indexer.len());
        let mut from = 0;
        loop {
            let scan = self.indexer.quiet_objects(written_by, from, scan_len);
            for chunk in scan.objects.chunks(batch) {
                if cancel.is_cancelled() {
                    return false;
                }
                self.compress_batch(chunk);
                tokio::task::yield_now().await;
            }
            match scan.next {
                Some(next) => from = next,
                None => break,
            }
            tokio::task::yield_now().await;
        }
        if self.config.release && self.freed_since_release >= RELEASE_AFTER_FREED {
            self.freed_since_release = 0;
            // The plain objects the batches replaced are dropped by now
            // (the scans and swaps that held them are gone).
            let _ = tokio::task::spawn_blocking(allocator::release_freed_memory).await;
            Counters::add(&self.counters.memory_releases, 1);
        }
        Counters::add(&self.counters.rounds, 1);
        true
    }

    /// Compresses one batch and swaps the twins in.
    fn compress_batch(&mut self, chunk: &[(Arc<str>, CachedObject<K>)]) {
        let started = std::time::Instant::now();
        let mut swaps = Vec::with_capacity(chunk.len());
        for (key, obj) in chunk {
            let twin = self
                .dictionary_for(obj, chunk)
                .and_then(|dict| obj.compressed_with(dict));
            swaps.push(Swap {
                key: key.clone(),
                expected: obj.clone(),
                twin,
            });
        }
        let sizes: Vec<Option<(u64, u64)>> = swaps
            .iter()
            .map(|s| {
                s.twin
                    .as_ref()
                    .map(|t| (s.expected.bytes().len() as u64, t.bytes().len() as u64))
            })
            .collect();
        let applied = self.indexer.swap_if_same(swaps);
        let c = &self.counters;
        for (done, size) in applied.into_iter().zip(sizes) {
            match (done, size) {
                (false, _) => Counters::add(&c.stale, 1),
                (true, None) => Counters::add(&c.kept_plain, 1),
                (true, Some((before, after))) => {
                    self.freed_since_release += before.saturating_sub(after);
                    Counters::add(&c.compressed, 1);
                    Counters::add(&c.bytes_before, before);
                    Counters::add(&c.bytes_after, after);
                }
            }
        }
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Counters::add(&c.busy_nanos, nanos);
    }

    /// The dictionary for `obj`'s format, learned on first use from the
    /// first object of the batch of that format long enough to be a good
    /// sample (or `obj` itself); `None` if its bytes cannot be read.
    fn dictionary_for(
        &mut self,
        obj: &CachedObject<K>,
        batch: &[(Arc<str>, CachedObject<K>)],
    ) -> Option<&CompressionDictionary> {
        let format = obj.format();
        let slot = match format {
            Format::Json => &mut self.json_dict,
            _ => &mut self.proto_dict,
        };
        if slot.is_none() {
            let sample = batch
                .iter()
                .map(|(_, o)| o)
                .find(|o| o.format() == format && o.json_len() >= MIN_SAMPLE_LEN)
                .unwrap_or(obj);
            let dict = CompressionDictionary::new(sample.encoded().ok()?);
            Counters::add(&self.counters.dictionary_bytes, dict.len() as u64);
            *slot = Some(dict);
        }
        slot.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_takes_at_most_round_scans_scans() {
        for stored in [0, 1, 4096, 100_000, 1_000_000, 10_000_000] {
            for batch in [1, 64, 256] {
                let len = scan_len(batch, stored);
                assert!(len >= 4096 && len >= batch * 16);
                let scans = stored.div_ceil(len);
                assert!(
                    scans <= ROUND_SCANS,
                    "{stored} objects in batches of {batch}: {scans} scans of {len}"
                );
            }
        }
    }
}
