//! The slots and the ordered queues: where each item waits (ready,
//! delayed until a later time, or parked while it is processed: client-go's
//! "dirty while processing"), and the counts of parked and processing
//! items. Everything the lock guards but the item table (see
//! [`State`](super::state::State)).

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use foldhash::fast::RandomState;
use tokio::time::Instant;

use super::QueueItem;
use crate::metrics::QueueMetrics;
use crate::ready::ReadyQueue;
use crate::slab::Slab;
use crate::table::SlotIdx;

/// Where an item is waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// Not waiting (being processed, or a free slot).
    Nowhere,
    /// In the ready queue, in the entry numbered `Slot::seq`.
    Ready,
    /// In the timer queue at `(Slot::ready_at, Slot::seq)`.
    Delayed,
    /// Ready, but the item is being processed: it joins the ready queue at
    /// `done` (client-go's "dirty while processing").
    Parked,
}

/// What the queue knows about one item, in a slab indexed by the item
/// table. A slot is in use while the item is waiting, being processed, or
/// both. The slot holds the queue's only copy of the item: the item table
/// and the ready and timer queues hold the slot's index, so an accepted add
/// stores its item once and clones nothing (`get` makes the one clone the
/// queue needs, see [`State::pop_ready`]).
///
/// [`State::pop_ready`]: super::state::State::pop_ready
#[derive(Debug)]
pub(super) struct Slot<T> {
    /// The item; `None` while the slot is free.
    pub(super) key: Option<T>,
    /// Sequence number of the item's ready or timer queue entry; an entry
    /// whose number differs is stale.
    pub(super) seq: u64,
    /// When the item became (or becomes) ready, in nanoseconds since the
    /// queue's epoch. Meaningful while waiting.
    ready_at: u64,
    /// Meaningful while waiting.
    priority: i32,
    /// The item's hash tag (see [`tag_of`]), to find its table entry.
    pub(super) tag: u32,
    pub(super) place: Place,
    pub(super) processing: bool,
}

impl<T> Slot<T> {
    fn free() -> Self {
        Slot {
            key: None,
            seq: 0,
            ready_at: 0,
            priority: 0,
            tag: 0,
            place: Place::Nowhere,
            processing: false,
        }
    }
}

/// The 32-bit tag of `item` under the queue's random seed (see
/// [`ItemTable`]).
///
/// [`ItemTable`]: crate::table::ItemTable
pub(super) fn tag_of<T: Hash>(hasher: &RandomState, item: &T) -> u32 {
    let h = hasher.hash_one(item);
    (h ^ (h >> 32)) as u32
}

/// Whom to wake after a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wake {
    Nobody,
    /// Items became ready: one parked getter (it wakes the next one if
    /// items remain, see [`Waiters`]).
    ///
    /// [`Waiters`]: crate::waiters::Waiters
    One,
    /// The earliest deadline moved earlier: every parked getter must re-arm
    /// its timer.
    All,
}

impl Wake {
    pub(super) fn max(self, other: Wake) -> Wake {
        match (self, other) {
            (Wake::All, _) | (_, Wake::All) => Wake::All,
            (Wake::One, _) | (_, Wake::One) => Wake::One,
            (Wake::Nobody, Wake::Nobody) => Wake::Nobody,
        }
    }
}

/// The ordered queues and the slots (everything but the item table, so
/// that both can be borrowed at once).
pub(super) struct Queues<T> {
    /// Ready items' slots.
    pub(super) ready: ReadyQueue<SlotIdx>,
    /// Slots of items waiting for a later time, by `(ready_at, seq)`.
    pub(super) delayed: BTreeMap<(u64, u64), SlotIdx>,
    pub(super) slots: Slab<Slot<T>>,
    /// Free slots, reused last-freed first (likely still in cache).
    pub(super) free: Vec<SlotIdx>,
    pub(super) seq: u64,
    pub(super) parked: usize,
    pub(super) processing: usize,
    /// Nanoseconds of waiting worth one priority level; `None` is strict
    /// priority.
    pub(super) aging_nanos: Option<i128>,
    pub(super) epoch: Instant,
    pub(super) metrics: Option<QueueMetrics<T>>,
}

impl<T: QueueItem> Queues<T> {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// `t` in nanoseconds since the epoch (times before it count as the
    /// epoch; 2^64 ns is 584 years).
    pub(super) fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    pub(super) fn instant(&self, nanos: u64) -> Instant {
        self.epoch
            .checked_add(Duration::from_nanos(nanos))
            .unwrap_or(self.epoch)
    }

    /// A slot for `item`, not waiting and not processing.
    pub(super) fn alloc_slot(&mut self, item: T, tag: u32) -> SlotIdx {
        let idx = match self.free.pop() {
            Some(idx) => idx,
            None => {
                let idx = SlotIdx::try_from(self.slots.len())
                    .expect("a work queue holds fewer than 2^32 items");
                self.slots.push(Slot::free());
                idx
            }
        };
        let slot = &mut self.slots[idx as usize];
        slot.key = Some(item);
        slot.tag = tag;
        idx
    }

    /// Frees slot `idx`; returns its item.
    pub(super) fn free_slot(&mut self, idx: SlotIdx) -> Option<T> {
        let key = std::mem::replace(&mut self.slots[idx as usize], Slot::free()).key;
        self.free.push(idx);
        key
    }

    /// The slot's rank in the ready queue (see [`ReadyQueue`]): with aging,
    /// the ready time less `priority` agings, saturated to `i64` (2^63 ns
    /// is 292 years: only absurd priorities times agings saturate, and
    /// saturated ranks go by order of adding); strict priority orders
    /// lanes by priority and ranks by ready time.
    fn rank(&self, priority: i32, ready_at: u64) -> i64 {
        let t = i128::from(ready_at);
        let rank = match self.aging_nanos {
            // Aging: each `aging` of waiting is worth one priority level.
            Some(aging) => t - i128::from(priority) * aging,
            // Strict: the lanes order priorities.
            None => t,
        };
        rank.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Queues slot `idx` by its priority and ready time.
    pub(super) fn push_ready(&mut self, idx: SlotIdx) {
        let slot = &self.slots[idx as usize];
        let (priority, ready_at) = (slot.priority, slot.ready_at);
        let rank = self.rank(priority, ready_at);
        let seq = self.next_seq();
        self.ready.push(idx, priority, rank, seq);
        let slot = &mut self.slots[idx as usize];
        slot.seq = seq;
        slot.place = Place::Ready;
    }

    /// Puts slot `idx` in the timer queue; returns its seq and whether it is
    /// now the earliest deadline.
    fn push_delayed(&mut self, idx: SlotIdx, ready_at: u64) -> (u64, bool) {
        let seq = self.next_seq();
        let earliest = self
            .delayed
            .first_key_value()
            .is_none_or(|((first, _), _)| ready_at < *first);
        self.delayed.insert((ready_at, seq), idx);
        (seq, earliest)
    }

    /// The item of slot `idx` (not waiting) became ready at `ready_at`.
    fn make_ready(&mut self, idx: SlotIdx, priority: i32, ready_at: u64) -> Wake {
        if self.metrics.is_some() {
            let at = self.instant(ready_at);
            if let (Some(m), Some(key)) = (&mut self.metrics, &self.slots[idx as usize].key) {
                m.add(key, at);
            }
        }
        let slot = &mut self.slots[idx as usize];
        slot.priority = priority;
        slot.ready_at = ready_at;
        if slot.processing {
            slot.place = Place::Parked;
            self.parked += 1;
            Wake::Nobody
        } else {
            self.push_ready(idx);
            Wake::One
        }
    }

    /// Adds the item of slot `idx` to be ready at `ready_at`.
    pub(super) fn add(&mut self, idx: SlotIdx, priority: i32, ready_at: u64, now: u64) -> Wake {
        let slot = &self.slots[idx as usize];
        if slot.place == Place::Nowhere {
            if ready_at <= now {
                return self.make_ready(idx, priority, ready_at);
            }
            let (seq, earliest) = self.push_delayed(idx, ready_at);
            let slot = &mut self.slots[idx as usize];
            slot.seq = seq;
            slot.ready_at = ready_at;
            slot.priority = priority;
            slot.place = Place::Delayed;
            return if earliest { Wake::All } else { Wake::Nobody };
        }
        // Already waiting: keep the highest priority and the earliest time.
        let (old_priority, old_ready_at, old_seq) = (slot.priority, slot.ready_at, slot.seq);
        let priority = old_priority.max(priority);
        let ready_at = old_ready_at.min(ready_at);
        match slot.place {
            Place::Delayed => {
                if ready_at == old_ready_at {
                    self.slots[idx as usize].priority = priority;
                    return Wake::Nobody;
                }
                self.delayed.remove(&(old_ready_at, old_seq));
                self.slots[idx as usize].place = Place::Nowhere;
                // Re-add as new; it was not counted as added while delayed.
                self.add(idx, priority, ready_at, now)
            }
            Place::Ready => {
                if priority != old_priority || ready_at != old_ready_at {
                    // The old entry stays behind, stale; the item queues
                    // anew in its new priority's lane.
                    self.ready.mark_stale();
                    let slot = &mut self.slots[idx as usize];
                    slot.priority = priority;
                    slot.ready_at = ready_at;
                    self.push_ready(idx);
                }
                Wake::Nobody
            }
            Place::Parked | Place::Nowhere => {
                let slot = &mut self.slots[idx as usize];
                slot.priority = priority;
                slot.ready_at = ready_at;
                Wake::Nobody
            }
        }
    }

    /// Moves every delayed item whose time has come to the ready queue.
    pub(super) fn promote_due(&mut self, now: Instant) -> Wake {
        let now = self.nanos(now);
        let mut wake = Wake::Nobody;
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((ready_at, seq), idx) = entry.remove_entry();
            let slot = &mut self.slots[idx as usize];
            if slot.place != Place::Delayed || slot.seq != seq {
                continue;
            }
            slot.place = Place::Nowhere;
            let priority = slot.priority;
            wake = wake.max(self.make_ready(idx, priority, ready_at));
        }
        wake
    }
}
