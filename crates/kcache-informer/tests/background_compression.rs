//! Background compression of quiet objects (issue 20): objects are cached
//! plain, and compressed once they have not been written for the quiet
//! time; hot objects stay plain; readers see the same values; handlers see
//! no event; the off switch compresses nothing. Paused clock throughout.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use kcache_core::{Format, Selector};
use kcache_informer::{BackgroundCompression, SharedIndexInformer, SharedInformerFactory};
use kcache_reflector::WatchConfig;
use kcache_testing::eventually;
use kcache_testing::fake::{End, Fake, pb_field, pb_list, pb_watch};
use serde_json::Value;
use support::{ConfigMap, FakeApi, InformerOnFake, Recorder, spawn_run};
use tokio::time::{Instant, sleep_until};

/// A value long and alike enough across objects to compress well.
fn data(i: usize) -> String {
    format!(
        "replicas=3 image=registry.example.com/team/service:1.{i}.0 \
         env=production region=eu-west-1 owner=platform-team tier=backend \
         config=/etc/service/config.yaml log-level=info port=8080 id={i:06}"
    )
}

/// Every cached object, decoded, by key.
fn values(informer: &SharedIndexInformer<ConfigMap>) -> BTreeMap<String, Value> {
    informer
        .lister()
        .list(&Selector::everything())
        .iter()
        .map(|o| (o.key().to_owned(), o.cast::<Value>().decode().unwrap()))
        .collect()
}

fn compressed(informer: &SharedIndexInformer<ConfigMap>) -> Vec<String> {
    let mut keys: Vec<String> = informer
        .indexer()
        .list()
        .iter()
        .filter(|o| o.is_compressed())
        .map(|o| o.key().to_owned())
        .collect();
    keys.sort();
    keys
}

/// Objects become compressed after the quiet time and not before (within
/// 1.25x of it); an object written every tick stays plain; listers and
/// decode give the same values before and after; handlers get no event
/// from the compaction; the stats count the work.
#[tokio::test(start_paused = true)]
async fn quiet_objects_are_compressed_after_the_quiet_time_and_not_before() {
    let api = FakeApi::new();
    for i in 0..20 {
        api.create("ns", &format!("cm-{i:02}"), &data(i));
    }
    let quiet = Duration::from_secs(8);
    let informer = api
        .informer()
        .config(kcache_informer::InformerConfig {
            background_compression: BackgroundCompression::default()
                .quiet_for(quiet)
                .batch_size(7),
            ..support::on_fake()
        })
        .build();
    let rec = Recorder::default();
    informer.add_event_handler(rec.clone()).unwrap();
    let started = Instant::now();
    let (cancel, task) = spawn_run(&informer);
    eventually("synced", Duration::from_secs(5), || informer.has_synced()).await;
    let synced_at = Instant::now();
    let before = values(&informer);
    assert_eq!(before.len(), 20);

    // cm-00 is hot: updated every 2 s (a tick) from now on
    let mut hot_updates = 0;
    let mut next_update = Instant::now();
    let mut step_until = async |until: Instant, hot_updates: &mut usize| {
        while next_update < until {
            sleep_until(next_update).await;
            api.update("ns", "cm-00", &data(100 + *hot_updates));
            *hot_updates += 1;
            next_update += Duration::from_secs(2);
        }
        sleep_until(until).await;
    };
    // no object has been quiet for the quiet time yet: none is compressed
    step_until(
        started + quiet - Duration::from_millis(100),
        &mut hot_updates,
    )
    .await;
    assert_eq!(compressed(&informer), Vec::<String>::new());
    assert_eq!(informer.background_compression_stats().compressed, 0);
    // by 1.25x the quiet time after the last write (plus the work), every
    // quiet object is compressed, the hot one is not
    step_until(
        synced_at + quiet * 5 / 4 + Duration::from_secs(1),
        &mut hot_updates,
    )
    .await;
    let expected: Vec<String> = (1..20).map(|i| format!("ns/cm-{i:02}")).collect();
    assert_eq!(compressed(&informer), expected);
    assert!(
        !informer
            .indexer()
            .get_by_key("ns/cm-00")
            .unwrap()
            .is_compressed()
    );

    let after = values(&informer);
    for (k, v) in &before {
        if k != "ns/cm-00" {
            assert_eq!(after.get(k), Some(v), "{k}");
        }
    }
    // the lister finds them by index as before
    let by_ns = informer
        .lister()
        .namespaced("ns")
        .list(&Selector::everything());
    assert_eq!(by_ns.len(), 20);

    let stats = informer.background_compression_stats();
    println!("{stats:?}");
    assert_eq!(stats.compressed, 19);
    assert!(stats.bytes_after < stats.bytes_before, "{stats:?}");
    assert!(stats.rounds >= 1);
    assert!(stats.dictionary_bytes > 0);
    // 19 small objects free far less than a megabyte: no release yet
    assert_eq!(stats.memory_releases, 0, "{stats:?}");

    // handlers: 20 initial adds and the hot object's updates, nothing else
    // Handlers run on the listeners' own threads, in real time, while the
    // paused clock can run a virtual deadline out at once (a flake under a
    // loaded CI machine): wait with a real-time guard, giving the threads
    // real time between virtual steps (as tests/resync.rs does).
    let guard = std::time::Instant::now() + Duration::from_secs(60);
    while rec.all().len() < 20 + hot_updates {
        assert!(
            std::time::Instant::now() < guard,
            "updates not delivered in a minute: {} of {}",
            rec.all().len(),
            20 + hot_updates
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        std::thread::sleep(Duration::from_millis(1));
    }
    let all = rec.all();
    assert_eq!(all.iter().filter(|s| s.kind == "add").count(), 20);
    let updates: Vec<_> = all.iter().filter(|s| s.kind == "update").collect();
    assert_eq!(updates.len(), hot_updates);
    assert!(updates.iter().all(|s| s.key == "ns/cm-00"), "{updates:?}");

    // an object quiet again is compressed again
    let hot_last = Instant::now();
    sleep_until(hot_last + quiet * 5 / 4 + Duration::from_secs(1)).await;
    assert_eq!(compressed(&informer).len(), 20);
    assert_eq!(rec.all().len(), 20 + hot_updates, "still no event");

    cancel.cancel();
    task.await.unwrap().unwrap();
}

/// `BackgroundCompression::off()` compresses nothing, ever; a factory
/// passes its setting to its informers.
#[tokio::test(start_paused = true)]
async fn off_switch_means_no_object_is_ever_compressed() {
    let api = FakeApi::new();
    for i in 0..10 {
        api.create("ns", &format!("cm-{i}"), &data(i));
    }
    let factory = SharedInformerFactory::builder(api.client.clone())
        .config(kcache_informer::InformerConfig {
            watch: kcache_reflector::WatchConfig {
                use_watch_list: false,
                ..kcache_reflector::WatchConfig::default()
            },
            background_compression: BackgroundCompression::off(),
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let informer = factory.informer::<ConfigMap>();
    assert!(!informer.background_compression().is_enabled());
    factory.start();
    eventually("synced", Duration::from_secs(5), || informer.has_synced()).await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(compressed(&informer), Vec::<String>::new());
    assert_eq!(informer.background_compression_stats(), Default::default());
    assert_eq!(informer.indexer().epoch(), 0, "no compactor ticked");
    factory.shutdown().await;
}

/// Once compression has replaced a megabyte of plain objects, the
/// compactor hands the freed memory back to the system (once per round
/// that crosses the mark, not per object); `release_freed_memory(false)`
/// compresses the same objects and never releases.
#[tokio::test(start_paused = true)]
async fn freed_memory_is_released_after_a_megabyte_is_replaced() {
    for release in [true, false] {
        let api = FakeApi::new();
        // 400 objects of about 5 KiB: about 2 MiB plain
        for i in 0..400 {
            api.create("ns", &format!("cm-{i:03}"), &data(i).repeat(25));
        }
        let quiet = Duration::from_secs(4);
        let informer = api
            .informer()
            .config(kcache_informer::InformerConfig {
                background_compression: BackgroundCompression::default()
                    .quiet_for(quiet)
                    .release_freed_memory(release),
                ..support::on_fake()
            })
            .build();
        assert_eq!(
            informer.background_compression().releases_freed_memory(),
            release
        );
        let (cancel, task) = spawn_run(&informer);
        eventually("synced", Duration::from_secs(5), || informer.has_synced()).await;
        tokio::time::sleep(quiet * 3).await;
        let stats = informer.background_compression_stats();
        assert_eq!(stats.compressed, 400, "{stats:?}");
        let freed = stats.bytes_before - stats.bytes_after;
        assert!(freed >= 1 << 20, "{stats:?}");
        let expected = if release { 1 } else { 0 };
        assert_eq!(
            stats.memory_releases, expected,
            "release={release}: {stats:?}"
        );
        cancel.cancel();
        task.await.unwrap().unwrap();
    }
}

/// A protobuf ConfigMap with a long data value.
fn pb_configmap(i: usize) -> Vec<u8> {
    let mut meta = Vec::new();
    pb_field(&mut meta, 1, format!("cm-{i:02}").as_bytes());
    pb_field(&mut meta, 3, b"ns");
    pb_field(&mut meta, 5, format!("uid-{i}").as_bytes());
    pb_field(&mut meta, 6, b"10");
    let mut entry = Vec::new();
    pb_field(&mut entry, 1, b"config");
    pb_field(&mut entry, 2, data(i).as_bytes());
    let mut cm = Vec::new();
    pb_field(&mut cm, 1, &meta);
    pb_field(&mut cm, 2, &entry);
    cm
}

/// Protobuf objects are compressed too, stay protobuf, and decode to the
/// same values.
#[tokio::test(start_paused = true)]
async fn protobuf_objects_are_compressed_and_decode_the_same() {
    let items: Vec<Vec<u8>> = (0..12).map(pb_configmap).collect();
    let fake = Fake::new(move |r| {
        if r.is_watch() {
            pb_watch(vec![], 0, End::Hang)
        } else {
            pb_list("10", "", &items, 1 << 20)
        }
    });
    let quiet = Duration::from_secs(4);
    let informer = SharedIndexInformer::<ConfigMap>::builder(fake.client.clone())
        .config(kcache_informer::InformerConfig {
            watch: WatchConfig {
                use_watch_list: false,
                ..WatchConfig::default()
            },
            background_compression: BackgroundCompression::default().quiet_for(quiet),
            ..kcache_informer::InformerConfig::default()
        })
        .build();
    let (cancel, task) = spawn_run(&informer);
    eventually("synced", Duration::from_secs(5), || informer.has_synced()).await;
    let before = values(&informer);
    let typed_before: Vec<ConfigMap> = informer
        .indexer()
        .list()
        .iter()
        .map(|o| o.decode().unwrap())
        .collect();
    assert!(
        informer
            .indexer()
            .list()
            .iter()
            .all(|o| o.format() == Format::Protobuf && !o.is_compressed())
    );
    tokio::time::sleep(quiet * 5 / 4 + Duration::from_secs(1)).await;
    let cached = informer.indexer().list();
    assert!(
        cached
            .iter()
            .all(|o| o.format() == Format::Protobuf && o.is_compressed()),
        "{cached:?}"
    );
    assert_eq!(values(&informer), before);
    for cm in &typed_before {
        let key = format!("ns/{}", cm.metadata.name.as_deref().unwrap());
        let now: ConfigMap = informer
            .indexer()
            .get_by_key(&key)
            .unwrap()
            .decode()
            .unwrap();
        assert_eq!(&now, cm);
    }
    let stats = informer.background_compression_stats();
    assert_eq!(stats.compressed, 12);
    cancel.cancel();
    task.await.unwrap().unwrap();
}

/// A snapshot written from compressed objects holds their plain bytes: a
/// warm start from it (compression off) caches the same values. (Real
/// clock: the snapshot's file I/O runs on blocking threads; only a
/// condition is waited for, with no timed assertion.)
#[tokio::test]
async fn snapshots_of_compressed_objects_restore_the_same_values() {
    let api = FakeApi::new();
    for i in 0..15 {
        api.create("ns", &format!("cm-{i:02}"), &data(i));
    }
    let dir = std::env::temp_dir().join(format!(
        "kcache-bgz-snapshot-{}-{}",
        std::process::id(),
        line!()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let snapshots = kcache_informer::SnapshotOptions::file(dir.join("cms.kcsnap"))
        .interval(Duration::ZERO)
        .cluster_id("fake")
        .server_url("http://fake");
    let first = api
        .informer()
        .config(kcache_informer::InformerConfig {
            snapshot: Some(snapshots.clone()),
            background_compression: BackgroundCompression::default()
                .quiet_for(Duration::from_millis(100)),
            ..support::on_fake()
        })
        .build();
    let (cancel, task) = spawn_run(&first);
    eventually("synced", Duration::from_secs(10), || first.has_synced()).await;
    let before = values(&first);
    eventually("all compressed", Duration::from_secs(10), || {
        compressed(&first).len() == 15
    })
    .await;
    assert_eq!(values(&first), before);
    cancel.cancel();
    task.await.unwrap().unwrap();

    let second = api
        .informer()
        .config(kcache_informer::InformerConfig {
            snapshot: Some(snapshots),
            background_compression: BackgroundCompression::off(),
            ..support::on_fake()
        })
        .build();
    let (cancel, task) = spawn_run(&second);
    // a warm start is current once the resumed watch is confirmed: this
    // fake sends no bookmark, a clean end of the watch confirms it
    eventually("synced", Duration::from_secs(10), || {
        api.close_watches();
        second.has_synced()
    })
    .await;
    assert_eq!(
        second.snapshot_status().start,
        kcache_informer::StartKind::Warm
    );
    assert_eq!(values(&second), before);
    assert!(compressed(&second).is_empty());
    cancel.cancel();
    task.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
