//! FIFO concurrency stress: many producer threads, one async consumer.
//! Nothing is lost, per-producer order (RealFifo) and per-key order
//! (DeltaFifo) are kept.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;

use common::{Obj, mk, name_key, val};
use kcache_deltafifo::{DeltaFifo, FifoOptions, Queue, RealFifo};
use serde_json::Value;

const PRODUCERS: usize = 8;
const EVENTS: usize = 2_000;
const KEYS_PER_PRODUCER: usize = 40;

/// Objects named `p{producer}-k{key}` carrying the event sequence number.
fn events(p: usize) -> Vec<Obj> {
    (0..EVENTS)
        .map(|i| mk(&format!("p{p}-k{}", i % KEYS_PER_PRODUCER), i))
        .collect()
}

async fn run(queue: Arc<dyn Queue<Value>>, per_producer_order: bool) {
    let inputs: Vec<Vec<Obj>> = (0..PRODUCERS).map(events).collect();
    let producers: Vec<_> = inputs
        .into_iter()
        .map(|objs| {
            let q = queue.clone();
            thread::spawn(move || {
                for (i, o) in objs.into_iter().enumerate() {
                    if i % 3 == 0 { q.add(o) } else { q.update(o) }.unwrap();
                }
            })
        })
        .collect();

    let mut per_key: HashMap<String, i64> = HashMap::new();
    let mut per_producer: HashMap<String, i64> = HashMap::new();
    let mut total = 0usize;
    while total < PRODUCERS * EVENTS {
        let batch: Vec<(String, i64)> = {
            let (tx, rx) = std::sync::mpsc::channel();
            queue
                .pop(Box::new(move |deltas, _| {
                    for d in deltas {
                        let o = d.object.object();
                        tx.send((o.name().to_owned(), val(o).parse().unwrap()))
                            .unwrap();
                    }
                    Ok(())
                }))
                .await
                .unwrap();
            rx.try_iter().collect()
        };
        for (name, seq) in batch {
            let prev = per_key.insert(name.clone(), seq).unwrap_or(-1);
            assert!(seq > prev, "{name}: seq {seq} after {prev}");
            if per_producer_order {
                let p = name.split('-').next().unwrap().to_owned();
                let prev = per_producer.insert(p.clone(), seq).unwrap_or(-1);
                assert!(seq > prev, "producer {p}: seq {seq} after {prev}");
            }
            total += 1;
        }
    }
    for p in producers {
        p.join().unwrap();
    }
    assert_eq!(
        total,
        PRODUCERS * EVENTS,
        "nothing lost, nothing duplicated"
    );
    assert!(queue.is_empty());
    assert_eq!(per_key.len(), PRODUCERS * KEYS_PER_PRODUCER);
    for (k, last) in per_key {
        let key_index: usize = k.rsplit("-k").next().unwrap().parse().unwrap();
        let expected_last =
            (EVENTS - 1 - key_index) / KEYS_PER_PRODUCER * KEYS_PER_PRODUCER + key_index;
        assert_eq!(last as usize, expected_last, "{k}: last event delivered");
    }
    queue.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_fifo_many_producers_one_consumer() {
    let q = Arc::new(DeltaFifo::new(FifoOptions::new().key_function(name_key())));
    run(q, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_fifo_many_producers_one_consumer() {
    let q = Arc::new(RealFifo::new(FifoOptions::new().key_function(name_key())));
    run(q, true).await;
}
