//! What the queue's lock guards: the item table over the slots and ordered
//! queues ([`Queues`]), the parked getters, the shutdown flags; adding an
//! item, handing one out and marking it done.

use std::sync::atomic::Ordering;

use foldhash::fast::RandomState;
use tokio::time::Instant;

use super::QueueItem;
use super::hints::Hints;
use super::inbox::{DeferredDone, Inbox};
use super::queues::{Place, Queues, Wake, tag_of};
use crate::table::{ItemTable, Probe, SlotIdx};
use crate::waiters::{Waiters, Wakeups};

/// Room (in items) an idle queue keeps in each of its buffers (see
/// [`State::shrink_idle`]).
const IDLE_KEEP_CAPACITY: usize = 1024;

/// Table lookups warmed together (see [`ItemTable::warm`]): adds of an
/// inbox batch, and entries unlinked by `done`.
pub(super) const GROUP: usize = 16;

/// Everything the queue's lock guards.
pub(super) struct State<T> {
    /// Slot of every item waiting or being processed.
    pub(super) items: ItemTable,
    pub(super) hasher: RandomState,
    pub(super) q: Queues<T>,
    pub(super) waiters: Waiters,
    pub(super) shutting_down: bool,
    pub(super) drain: bool,
    /// The inbox's previous buffers, swapped in for the next batch.
    pub(super) spare: Vec<T>,
    pub(super) spare_dones: Vec<DeferredDone<T>>,
    /// A `done` left the queue drained while it shuts down with drain:
    /// `shut_down_with_drain` is to be woken once the lock is released.
    pub(super) drained_signal: bool,
    /// The tags of an inbox batch (kept for its capacity).
    pub(super) tags: Vec<u32>,
    /// Table entries of freed slots not yet removed: `done` frees a slot it
    /// found through [`HANDED_OUT`] at once, and removes the entries in
    /// groups (see [`ItemTable::warm`]). Until then an entry points at a
    /// free or reused slot; lookups compare the slot's item, so it matches
    /// nothing (or, if the slot was reused by the same item, that item).
    ///
    /// [`HANDED_OUT`]: super::hints
    pub(super) unlinked: Vec<(u32, SlotIdx)>,
    /// How an add of an item the queue holds combines with the held copy
    /// (see [`WorkQueueBuilder::merge`](super::WorkQueueBuilder::merge)):
    /// `None` keeps the held copy, as client-go does.
    pub(super) merge: Option<MergeFn<T>>,
}

/// See [`State::merge`].
pub(super) type MergeFn<T> = Box<dyn Fn(&mut T, T, bool) -> T + Send + Sync>;

impl<T: QueueItem> State<T> {
    /// Adds `item` (to be ready at `ready_at`, nanoseconds since the epoch);
    /// returns whom to wake and the item if an equal one was already there
    /// (to drop once the lock is released).
    pub(super) fn add(
        &mut self,
        item: T,
        priority: i32,
        ready_at: u64,
        now: u64,
    ) -> (Wake, Option<T>) {
        let tag = tag_of(&self.hasher, &item);
        self.add_tagged(item, tag, priority, ready_at, now)
    }

    /// [`add`](Self::add) of an item whose tag is known.
    pub(super) fn add_tagged(
        &mut self,
        item: T,
        tag: u32,
        priority: i32,
        ready_at: u64,
        now: u64,
    ) -> (Wake, Option<T>) {
        let slots = &self.q.slots;
        let probe = self
            .items
            .probe(tag, |i| slots[i as usize].key.as_ref() == Some(&item));
        let (idx, duplicate) = match probe {
            Probe::Found(_, idx) => {
                let slot = &mut self.q.slots[idx as usize];
                // Not waiting: the held copy was handed out by `get`, and
                // this add starts the item's next round.
                let waiting = slot.place != Place::Nowhere;
                let left = match (&self.merge, slot.key.as_mut()) {
                    (Some(merge), Some(held)) => merge(held, item, waiting),
                    _ => item,
                };
                (idx, Some(left))
            }
            Probe::Vacant(pos) => {
                let idx = self.q.alloc_slot(item, tag);
                self.items.insert_at(pos, idx, tag);
                (idx, None)
            }
        };
        (self.q.add(idx, priority, ready_at, now), duplicate)
    }

    /// The queue ran dry (a getter parks): gives back the room a burst of
    /// items took (the item table, the slots, the ready lanes and the inbox
    /// buffers), which is kept while items flow so that a queue refilled
    /// after each batch does not allocate and fault in fresh memory each
    /// time.
    pub(super) fn shrink_idle(&mut self) {
        if !self.unlinked.is_empty() {
            self.items.remove_all(&self.unlinked);
            self.unlinked.clear();
        }
        self.items.shrink();
        let q = &mut self.q;
        if q.slots.len() > IDLE_KEEP_CAPACITY && q.free.len() == q.slots.len() {
            q.slots.clear();
            q.free.clear();
            q.free.shrink_to(IDLE_KEEP_CAPACITY);
        }
        q.ready.shrink_to(IDLE_KEEP_CAPACITY);
        if self.spare.capacity() > IDLE_KEEP_CAPACITY {
            self.spare = Vec::new();
        }
        if self.spare_dones.capacity() > IDLE_KEEP_CAPACITY {
            self.spare_dones = Vec::new();
        }
        if self.tags.capacity() > IDLE_KEEP_CAPACITY {
            self.tags = Vec::new();
        }
    }

    /// Ends a critical section that may have parked, woken or released
    /// getters: tells adders whether they must wake one
    /// ([`Inbox::wake_needed`]). When they must, it then looks at the inbox
    /// once more (after setting the flag, under the inbox lock): an add
    /// that pushed before that look and did not see the flag is applied
    /// here, and a getter woken for it; an add that pushes after it sees
    /// the flag. No add is left in the inbox while getters sleep.
    pub(super) fn publish(&mut self, inbox: &Inbox<T>) -> Wakeups {
        let mut wakeups = Wakeups::None;
        loop {
            let needed = self.waiters.needs_wake();
            if inbox.wake_needed.load(Ordering::Relaxed) != needed {
                inbox.wake_needed.store(needed, Ordering::Relaxed);
            }
            if !needed {
                return wakeups;
            }
            let wake = self.apply_inbox_locked(inbox);
            if !self.q.ready.is_empty() {
                wakeups.merge(self.wakeups(wake.max(Wake::One)));
            } else if wake == Wake::All {
                wakeups.merge(self.wakeups(wake));
            } else {
                return wakeups;
            }
        }
    }

    /// The getters to wake for `wake`.
    pub(super) fn wakeups(&mut self, wake: Wake) -> Wakeups {
        match wake {
            Wake::Nobody => Wakeups::None,
            Wake::One => self.waiters.wake_one(),
            Wake::All => self.waiters.wake_all(),
        }
    }

    pub(super) fn promote_due(&mut self, now: Instant) -> Wake {
        self.q.promote_due(now)
    }

    /// Hands out the first ready item and marks it processing. The queue
    /// keeps a clone of it, to recognise adds and `done` of the item while
    /// it is processed; the clone is made here, on the worker's thread,
    /// which is also the thread that frees it at `done`.
    pub(super) fn pop_ready(&mut self, now: impl Fn() -> Instant) -> Option<(T, SlotIdx)> {
        let Queues { ready, slots, .. } = &mut self.q;
        let idx = ready.pop_front(|idx, key| {
            let slot = &mut slots[*idx as usize];
            if slot.place != Place::Ready || slot.seq != key.seq {
                return false;
            }
            slot.place = Place::Nowhere;
            slot.processing = true;
            true
        })?;
        let slot = &mut self.q.slots[idx as usize];
        let item = slot.key.as_mut().map(|key| {
            let copy = key.clone();
            std::mem::replace(key, copy)
        })?;
        self.q.processing += 1;
        if let Some(m) = &mut self.q.metrics {
            m.get(&item, now());
        }
        Some((item, idx))
    }

    /// Marks `item` as processed (`hints`: slots it may be in; `now`: the
    /// time for the metrics); returns whom to wake and the item's copy if
    /// the queue released it (to drop once the lock is released).
    pub(super) fn done(
        &mut self,
        item: &T,
        hints: Hints,
        now: impl FnOnce() -> Instant,
    ) -> (Wake, Option<T>) {
        let hinted = hints.iter().find(|&idx| {
            self.q
                .slots
                .get(idx as usize)
                .is_some_and(|slot| slot.processing && slot.key.as_ref() == Some(item))
        });
        let (idx, pos) = match hinted {
            Some(idx) => (idx, None),
            None => {
                let tag = tag_of(&self.hasher, item);
                let slots = &self.q.slots;
                let Probe::Found(pos, idx) = self
                    .items
                    .probe(tag, |i| slots[i as usize].key.as_ref() == Some(item))
                else {
                    return (Wake::Nobody, None);
                };
                (idx, Some(pos))
            }
        };
        let q = &mut self.q;
        let mut wake = Wake::Nobody;
        let slot = &mut q.slots[idx as usize];
        if slot.processing {
            slot.processing = false;
            let parked = slot.place == Place::Parked;
            q.processing -= 1;
            if let Some(m) = &mut q.metrics {
                m.done(item, now());
            }
            if parked {
                q.parked -= 1;
                q.push_ready(idx);
                wake = Wake::One;
            }
        }
        if self.shutting_down && self.drained() {
            self.drained_signal = true;
        }
        let q = &mut self.q;
        let slot = &q.slots[idx as usize];
        if slot.place == Place::Nowhere && !slot.processing {
            match pos {
                Some(pos) => self.items.remove_at(pos),
                None => {
                    self.unlinked.push((slot.tag, idx));
                    if self.unlinked.len() >= GROUP {
                        self.items.remove_all(&self.unlinked);
                        self.unlinked.clear();
                    }
                }
            }
            (wake, q.free_slot(idx))
        } else {
            (wake, None)
        }
    }

    /// Nothing is waiting to be handed out and nothing is being processed.
    pub(super) fn drained(&self) -> bool {
        self.q.processing == 0 && self.q.ready.is_empty() && self.q.parked == 0
    }
}

impl<T: QueueItem> State<T> {
    /// Applies the adds waiting in `inbox`, in order, as added now. After
    /// shutdown they are dropped (an add that raced with shutdown is
    /// ignored, as if it came after it).
    pub(super) fn apply_inbox(&mut self, inbox: &Inbox<T>) -> Wake {
        if !inbox.pending.load(Ordering::Acquire) {
            return Wake::Nobody;
        }
        self.apply_inbox_locked(inbox)
    }

    /// [`apply_inbox`](Self::apply_inbox) without the look at
    /// [`Inbox::pending`] first: the inbox's lock orders this look after
    /// the caller's earlier writes (see [`publish`](Self::publish)).
    pub(super) fn apply_inbox_locked(&mut self, inbox: &Inbox<T>) -> Wake {
        let Some((mut batch, mut dones)) = inbox.take(&mut self.spare, &mut self.spare_dones)
        else {
            return Wake::Nobody;
        };
        let mut wake = Wake::Nobody;
        if self.shutting_down {
            // Adds that raced with shutdown are ignored; the dones count.
            batch.clear();
        }
        let mut dones_iter = dones.drain(..).peekable();
        if !batch.is_empty() {
            let now = Instant::now();
            // Items whose time came go first: ready queues are FIFO.
            if !self.q.delayed.is_empty() {
                wake = self.q.promote_due(now);
            }
            let now = self.q.nanos(now);
            // With many items waiting the table is larger than the cache:
            // read the table lines of each group of items before adding
            // them, so that their misses overlap.
            let mut tags = std::mem::take(&mut self.tags);
            tags.clear();
            tags.extend(batch.iter().map(|item| tag_of(&self.hasher, item)));
            for (i, item) in batch.drain(..).enumerate() {
                while let Some(done) = dones_iter.next_if(|d| d.after_adds <= i) {
                    wake = wake.max(self.apply_deferred_done(done));
                }
                if i % GROUP == 0 {
                    let group = &tags[i..tags.len().min(i + GROUP)];
                    self.items.warm(group.iter().copied());
                }
                wake = wake.max(self.add_tagged(item, tags[i], 0, now, now).0);
            }
            self.tags = tags;
        }
        for done in dones_iter {
            wake = wake.max(self.apply_deferred_done(done));
        }
        self.spare = batch;
        self.spare_dones = dones;
        wake
    }

    /// Applies a `done` left in the inbox.
    fn apply_deferred_done(&mut self, done: DeferredDone<T>) -> Wake {
        let at = done.at;
        self.done(&done.item, done.hints, || at.unwrap_or_else(Instant::now))
            .0
    }
}
